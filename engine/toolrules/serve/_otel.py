"""OpenTelemetry traces of the proxy (the `otel` extra; off unless asked for).

On when the standard environment asks for it - OTEL_TRACES_EXPORTER (`otlp`, `console`;
`none`: off) or OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT - and
the SDK is installed: the proxy then sets up a tracer provider with those exporters
(OTLP over HTTP, or gRPC when OTEL_EXPORTER_OTLP_PROTOCOL says so and its exporter is
installed; the resource from OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES, service name
`toolrules-serve` by default). A program that set its own tracer provider before the app
was made (opentelemetry-instrument, a test's in-memory exporter) gets the spans there.

One span per request (kind SERVER, `chat MODEL`, parented by the client's `traceparent`)
with a child per call upstream (kind CLIENT; a validation retry's call sits under a
`validation_retry` span), a `parse` child under a call whose raw text was read for calls
(its length: the parsing time, summed over a stream) and a `rewrite` child per change
made to the conversation. The spans are written when the request ends, from the times
the request recorded: nothing is done per streamed chunk. Attributes follow the GenAI
semantic conventions (gen_ai.operation.name, gen_ai.request.model, gen_ai.response.model,
gen_ai.usage.input_tokens, gen_ai.usage.output_tokens, server.address, server.port ...).
Prompts, answers and call arguments are recorded only with
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any
from urllib.parse import urlsplit

__all__ = ["CAPTURE_ENV", "Tracing", "tracing"]

log = logging.getLogger("toolrules.serve")

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_INSTALLED: list[Any] = []  # the provider this process set up (once)


def _configured_elsewhere() -> bool:
    """Did the program set a tracer provider of its own?"""
    if "opentelemetry.trace" not in sys.modules:
        return False
    from opentelemetry import trace

    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def tracing(provider: Any = None) -> Tracing | None:
    """The proxy's tracing, or None when nothing asks for traces (`provider`: a tracer
    provider of the caller's own, used whatever the environment says)."""
    if provider is not None:
        from opentelemetry import trace

        return Tracing(trace, provider)
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or \
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    elsewhere = _configured_elsewhere()
    if exporters == "none" or not (exporters or endpoint or elsewhere):
        return None
    try:
        from opentelemetry import trace
    except ImportError as exc:
        log.warning("OpenTelemetry traces are asked for but not installed (%s): pip install "
                    "'toolrules[otel]'", exc)
        return None
    if not elsewhere and not _INSTALLED:
        provider = _provider(exporters or "otlp")
        if provider is None:
            return None
        trace.set_tracer_provider(provider)
        _INSTALLED.append(provider)
    return Tracing(trace)


def _provider(exporters: str) -> Any:
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError as exc:
        log.warning("OpenTelemetry traces need the SDK (%s): pip install 'toolrules[otel]'",
                    exc)
        return None
    attrs = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "toolrules-serve"}
    provider = TracerProvider(resource=Resource.create(attrs))
    for name in (n.strip() for n in exporters.split(",")):
        exporter: Any = None
        if name == "console":
            exporter = ConsoleSpanExporter()
        elif name == "otlp":
            exporter = _otlp()
        elif name:
            log.warning("OTEL_TRACES_EXPORTER: %r is not an exporter toolrules serve knows "
                        "(otlp, console)", name)
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _otlp() -> Any:
    proto = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
             or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").lower()
    try:
        if proto == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )
    except ImportError as exc:
        log.warning("the OTLP exporter (%s) is not installed (%s): pip install "
                    "'toolrules[otel]'", proto, exc)
        return None
    return OTLPSpanExporter()


def _address(url: str | None) -> dict[str, Any]:
    if not url:
        return {}
    parts = urlsplit(url)
    out: dict[str, Any] = {}
    if parts.hostname:
        out["server.address"] = parts.hostname
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    if port:
        out["server.port"] = port
    return out


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=lambda v: asdict(v)
                      if hasattr(v, "__dataclass_fields__") else str(v))


class Tracing:
    """Writes one request's span tree when it ends."""

    def __init__(self, trace: Any, provider: Any = None):
        self._trace = trace
        self.tracer = (provider or trace.get_tracer_provider()).get_tracer("toolrules.serve")
        self.capture = os.environ.get(CAPTURE_ENV, "").strip().lower() in ("true", "1", "yes")
        from opentelemetry.propagate import extract

        self._extract = extract

    def request(self, info: Mapping[str, Any], ex: Any, started: float, ended: float,
                first_token: float | None, headers: Mapping[str, str] | None,
                route: str) -> None:
        trace = self._trace
        # perf_counter seconds -> Unix nanoseconds
        shift = time.time() - time.perf_counter()

        def ns(t: float) -> int:
            return int((t + shift) * 1e9)

        requested = info.get("model") or ""
        status = int(info.get("status", 0) or 0)
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": str(requested),
            "http.request.method": str(info.get("method") or "POST"),
            "url.path": str(info.get("path") or ""), "http.response.status_code": status,
            "toolrules.front": str(info.get("front") or ""), "toolrules.route": route,
            "toolrules.stream": bool(info.get("stream"))}
        o = ex.outcome if ex is not None else None
        if ex is not None and o is not None:
            attrs["gen_ai.response.model"] = str(ex.client.model or ex.model_id)
            attrs["gen_ai.provider.name"] = str(ex.client.provider)
            attrs["toolrules.mode"] = "native" if ex.native else "emulated"
            attrs.update(_address(o.spans[-1][3] if o.spans else None))
        if o is not None:
            usage = o.usage or {}
            for key, name in (("input_tokens", "gen_ai.usage.input_tokens"),
                              ("output_tokens", "gen_ai.usage.output_tokens"),
                              ("cached_tokens", "toolrules.usage.cached_tokens")):
                if isinstance(usage.get(key), int):
                    attrs[name] = usage[key]
            attrs["toolrules.attempts"] = o.attempts
            attrs["toolrules.tool_calls"] = o.calls
            if o.invalid:
                attrs["toolrules.invalid"] = o.invalid
            if o.final is not None and o.final.finish_reason:
                attrs["gen_ai.response.finish_reasons"] = [o.final.finish_reason]
            if self.capture:
                attrs["gen_ai.input.messages"] = _json(ex.messages)
                if o.final is not None:
                    attrs["gen_ai.output.messages"] = _json(
                        [{"role": "assistant", "content": o.final.content,
                          "tool_calls": list(o.final.tool_calls)}])
        if first_token is not None:
            attrs["toolrules.time_to_first_token"] = first_token - started
        error = info.get("error")
        bad = info.get("stream_error")
        if error:
            attrs["error.type"] = str(error)
        parent = self._extract(headers) if headers is not None else None
        root = self.tracer.start_span(f"chat {requested}".strip(), context=parent,
                                      kind=trace.SpanKind.SERVER, start_time=ns(started),
                                      attributes=attrs)
        if status >= 500 or bad is not None:
            root.set_status(trace.Status(trace.StatusCode.ERROR, str(error or status)))
        ctx = trace.set_span_in_context(root)
        if ex is not None and o is not None:
            at = o.spans[0][0] if o.spans else started
            for r in o.rewrites:
                if not isinstance(r, Mapping):
                    continue
                span = self.tracer.start_span("rewrite", context=ctx, start_time=ns(at),
                                              attributes={"toolrules.rewrite.kind": str(
                                                  r.get("action") or "other"),
                                                  "toolrules.rewrite.why": str(r.get("why")
                                                                               or "")})
                span.end(end_time=ns(at))
            model = str(ex.client.model or ex.model_id)
            for n, (begun, done, parse, url) in enumerate(o.spans, 1):
                where = ctx
                retry = None
                if n > 1:
                    retry = self.tracer.start_span("validation_retry", context=ctx,
                                                   start_time=ns(begun),
                                                   attributes={"toolrules.attempt": n})
                    where = trace.set_span_in_context(retry)
                call = self.tracer.start_span(
                    f"chat {model}", context=where, kind=trace.SpanKind.CLIENT,
                    start_time=ns(begun), attributes={
                        "gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                        "gen_ai.provider.name": str(ex.client.provider),
                        "toolrules.attempt": n, **_address(url)})
                if parse > 0:
                    p = self.tracer.start_span("parse", context=trace.set_span_in_context(call),
                                               start_time=ns(done - parse),
                                               attributes={"toolrules.parse_seconds": parse})
                    p.end(end_time=ns(done))
                call.end(end_time=ns(done))
                if retry is not None:
                    retry.end(end_time=ns(done))
        root.end(end_time=ns(ended))
