"""The proxy's Prometheus metrics (`GET /metrics`, text format; prometheus_client).

One `Metrics` per app: its own registry, so several apps in one process (tests) do not
collide. With several workers (`toolrules serve --workers N`) the runner points
PROMETHEUS_MULTIPROC_DIR at a fresh directory before the workers start: every worker
writes its figures there and a scrape, whichever worker answers it, adds them up
(`MultiProcessCollector`).

Every label takes values from a bounded set: the configuration's routes and servers,
the fronts, HTTP status codes, error codes, the rules' repair, dialect and rewrite names.
Docs: docs/reference/metrics.md (every metric, what it means, which alert to set).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["MULTIPROC_ENV", "Metrics", "route_label"]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# seconds: a request end to end, an upstream call, the first token
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
            120.0, 300.0, 600.0)
# seconds: what the proxy itself adds, parsing
_SMALL = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
          0.5, 1.0, 2.5)
_SHARE = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)


def route_label(route: Any) -> str:
    """A route's label: its model name, else its pattern, else `#INDEX`."""
    if route is None:
        return ""
    if route.name:
        return str(route.name)
    if route.pattern is not None and route.pattern.pattern not in ("", ".*", "^.*$"):
        return f"/{route.pattern.pattern}/"
    return f"#{route.index}"


class Metrics:
    """The proxy's counters, histograms and gauges, and the scrape's text."""

    def __init__(self, config: Any):
        import prometheus_client as pc

        self._pc = pc
        self.multiprocess = bool(os.environ.get(MULTIPROC_ENV))
        reg = self.registry = pc.CollectorRegistry(auto_describe=True)
        self.routes = {r.index: route_label(r) for r in config.routes}

        def counter(name: str, doc: str, labels: tuple[str, ...]) -> Any:
            return pc.Counter(name, doc, labels, registry=reg)

        def histogram(name: str, doc: str, labels: tuple[str, ...],
                      buckets: tuple[float, ...]) -> Any:
            return pc.Histogram(name, doc, labels, buckets=buckets, registry=reg)

        rfs = ("route", "front", "server")
        self.requests = counter("toolrules_requests", "Requests answered, by HTTP status "
                                "(a stream that started counts as 200).", (*rfs, "status"))
        self.errors = counter("toolrules_request_errors", "Requests that failed: an error "
                              "status, or an error event in a stream that had started "
                              "(status: the code the client was told).",
                              (*rfs, "status", "error"))
        self.duration = histogram("toolrules_request_duration_seconds", "Time from the "
                                  "request's arrival to its answer's last byte.",
                                  ("route", "front", "stream"), _LATENCY)
        self.upstream_duration = histogram("toolrules_upstream_duration_seconds",
                                           "Time of each call upstream (a validation "
                                           "retry is another call), to its last byte.",
                                           ("route", "server"), _LATENCY)
        self.first_token = histogram("toolrules_time_to_first_token_seconds", "Streams: "
                                     "time from the request's arrival to the first text, "
                                     "reasoning or call sent to the client.",
                                     ("route", "front"), _LATENCY)
        self.overhead = histogram("toolrules_proxy_overhead_seconds", "Time the proxy adds: "
                                  "the request's time less its calls upstream.",
                                  ("route", "front", "stream"), _SMALL)
        self.prompt_tokens = counter("toolrules_prompt_tokens", "Prompt tokens the "
                                     "upstream reported.", ("route", "server"))
        self.cached_tokens = counter("toolrules_cached_tokens", "Prompt tokens the upstream "
                                     "reported read from its cache.", ("route", "server"))
        self.completion_tokens = counter("toolrules_completion_tokens", "Completion tokens "
                                         "the upstream reported.", ("route", "server"))
        self.tool_calls = counter("toolrules_tool_calls", "Tool calls returned to clients, "
                                  "by how they were read: native (the upstream's own "
                                  "field), the dialect that read them from raw text, or "
                                  "text_fallback (inferred from prose).", ("route", "read"))
        self.repairs = counter("toolrules_repairs", "Repairs applied to malformed model "
                               "output, by repair.", ("route", "repair"))
        self.retries = counter("toolrules_validation_retries", "Answers sent back upstream "
                               "to be fixed (invalid calls, or JSON that does not "
                               "validate).", ("route",))
        self.invalid = counter("toolrules_invalid_answers", "Invalid calls and JSON "
                               "answers found by validation.", ("route",))
        self.parse_failures = counter("toolrules_parse_failures", "Upstream answers that "
                                      "could not be read (timeout: past "
                                      "server.parse_timeout).", ("route", "reason"))
        self.parse_time = histogram("toolrules_parse_duration_seconds", "Time spent "
                                    "reading raw model text for calls, per request.",
                                    ("route",), _SMALL)
        self.rewrites = counter("toolrules_turn_rewrites", "Changes made to a conversation "
                                "to fit the model's chat template or keep its prompt "
                                "stable, by kind.", ("route", "kind"))
        self.prefix = histogram("toolrules_prompt_prefix_reuse_ratio", "Per turn: the "
                                "share of its conversation's last prompt this prompt "
                                "kept as its prefix (what the server's cache can reuse).",
                                ("route",), _SHARE)
        self.up = pc.Gauge("toolrules_upstream_up", "1 once the server answered (a request "
                           "or a check), 0 when it did not answer or answered 5xx.",
                           ("route", "server"), registry=reg,
                           multiprocess_mode="livemostrecent")
        self.in_flight = pc.Gauge("toolrules_upstream_in_flight", "Requests sent to the "
                                  "server that have not ended.", ("route", "server"),
                                  registry=reg, multiprocess_mode="livesum")
        self._up: dict[tuple[int, str | None], Any] = {}
        self._said: dict[tuple[int, str | None], bool] = {}
        self._flight: dict[tuple[int, str | None], Any] = {}
        self._dialects: dict[tuple[int, str], str] = {}
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def _c(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, kept (a request's figures take no lock to find)."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    # ------------------------------------------------------------ the fleet's observer

    def servers(self, states: Any) -> None:
        """Every server of every route starts unanswered (up 0, nothing in flight)."""
        for s in states:
            self.health(s.route, s.url, False)
            self.flight(s.route, s.url, 0)

    def health(self, route: int, url: str | None, up: bool) -> None:
        key = (route, url)
        # every answer says so: written when it changes (with several workers always: the
        # scrape takes the most recent of theirs)
        if self._said.get(key) is up and not self.multiprocess:
            return
        child = self._up.get(key)
        if child is None:
            child = self._up[key] = self.up.labels(self.routes.get(route, ""), url or "")
        child.set(1 if up else 0)
        self._said[key] = up

    def flight(self, route: int, url: str | None, delta: int) -> None:
        child = self._flight.get((route, url))
        if child is None:
            child = self._flight[(route, url)] = self.in_flight.labels(
                self.routes.get(route, ""), url or "")
        if delta:
            child.inc(delta)

    # ------------------------------------------------------------ one request

    def request(self, info: Mapping[str, Any], ex: Any, started: float, ended: float,
                first_token: float | None) -> None:
        """Count one request that ended (`info`: its access-log record)."""
        index = info.get("route")
        route = self.routes.get(index, "") if index is not None else ""
        front = str(info.get("front") or "")
        stream = "true" if info.get("stream") else "false"
        o = ex.outcome if ex is not None else None
        server = ""
        if o is not None and o.spans:
            server = o.spans[-1][3] or ""
        status = str(info.get("status", 0))
        self._c(self.requests, route, front, server, status).inc()
        error = info.get("error")
        bad = info.get("stream_error")
        if bad is not None or int(status) >= 400:
            self._c(self.errors, route, front, server, str(bad or status),
                               str(error or "rejected")).inc()
            if error in ("ParseTimeoutError", "ParseError"):
                self._c(self.parse_failures, route, "timeout" if error == "ParseTimeoutError"
                                           else "error").inc()
        total = ended - started
        self._c(self.duration, route, front, stream).observe(total)
        if first_token is not None:
            self._c(self.first_token, route, front).observe(first_token - started)
        if o is None:
            return
        upstream = 0.0
        parsing = 0.0
        for begun, done, parse, url in o.spans:
            upstream += done - begun
            parsing += parse
            self._c(self.upstream_duration, route, url or "").observe(done - begun)
        if o.spans:
            self._c(self.overhead, route, front, stream).observe(max(0.0, total - upstream))
            if not ex.native:
                self._c(self.parse_time, route).observe(parsing)
        usage = o.usage
        if usage:
            for key, metric in (("input_tokens", self.prompt_tokens),
                                ("cached_tokens", self.cached_tokens),
                                ("output_tokens", self.completion_tokens)):
                n = usage.get(key)
                if n:
                    self._c(metric, route, server).inc(n)
        if o.calls:
            read = self._read(ex, index)
            texts = min(o.calls, o.text_calls) if read == "native" else 0
            if texts:  # a native upstream's server left them as raw text in its content
                self._c(self.tool_calls, route, str(o.text_dialect or "unknown")).inc(texts)
            if o.calls > texts:
                self._c(self.tool_calls, route, read).inc(o.calls - texts)
        for name in o.repairs:
            self._c(self.repairs, route, name).inc()
        if o.attempts > 1:
            self._c(self.retries, route).inc(o.attempts - 1)
        if o.invalid:
            self._c(self.invalid, route).inc(o.invalid)
        for r in o.rewrites:
            kind = r.get("action") if isinstance(r, Mapping) else None
            self._c(self.rewrites, route, str(kind or "other")).inc()
        share = info.get("prefix_share")
        if share is not None:
            self._c(self.prefix, route).observe(share)

    def _read(self, ex: Any, index: Any) -> str:
        """How the calls of `ex` were read: native, text_fallback, or the dialect."""
        if "calls-inferred-from-text" in ex.outcome.warnings:
            return "text_fallback"
        if ex.native:
            return "native"
        key = (index, ex.model_id)
        name = self._dialects.get(key)
        if name is None:
            name = str(ex.route.engine.capability(ex.model_id).dialect or "unknown")
            self._dialects[key] = name
        return name

    # ------------------------------------------------------------ the scrape

    def render(self) -> tuple[bytes, str]:
        """The text of a scrape and its content type (every worker's figures when
        several share the port)."""
        pc = self._pc
        if self.multiprocess:
            from prometheus_client import multiprocess

            reg = pc.CollectorRegistry()
            multiprocess.MultiProcessCollector(reg)
            return pc.generate_latest(reg), pc.CONTENT_TYPE_LATEST
        return pc.generate_latest(self.registry), pc.CONTENT_TYPE_LATEST

    def close(self) -> None:
        """A worker that stops: its live gauges leave the sums."""
        if self.multiprocess:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(os.getpid())
