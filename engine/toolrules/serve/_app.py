"""The proxy as an ASGI app (Starlette): the client APIs of the configuration's fronts,
`GET /v1/models`, `POST .../count_tokens`, `GET /health` (alive), `GET /ready` (every
route has a server that answers), `GET /metrics` (Prometheus; `server.metrics`).

Per request: the client's key (constant-time compare), the body (size limit, JSON),
`parse_request` in the client's format, the route for the requested model, then an
`Exchange` with the route's upstream. Answers are `build_response` bodies or streams in
the client API's grammar (`Front.writer`); failures are error bodies in the client API's
own shape - and, once a stream has started, the grammar's error event. Nothing is kept
between requests: run as many workers as the machine has cores.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hmac
import logging
import math
import os
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .._aio import time_out
from .._errors import ParseTimeoutError, ToolrulesError, UnsupportedContentError
from .._jsonutil import dumps_compact, loads
from .._types import ParsedResponse
from ..calls._tool_errors import ToolErrorCode
from ..clients._errors import ProviderError
from ..dialects._parser import parse_clock, parse_deadline
from ._config import Route, ServeConfig
from ._conversations import Conversations, prompt_image
from ._exchange import Exchange, estimate_tokens, options_for, safe_error, unwritable_options
from ._fleet import UpstreamState, affinity_key

__all__ = ["PlainLines", "ServeApp", "create_app"]

access_log = logging.getLogger("toolrules.serve.access")
log = logging.getLogger("toolrules.serve")


class PlainLines(logging.StreamHandler):
    """The proxy's own log handler (`toolrules serve`): each message on a line of its
    own. An access line that goes to this handler alone is written without a LogRecord
    (`ServeApp._log`): the same line, at a third of the cost."""

    def __init__(self) -> None:
        super().__init__()
        self._own = logging.Formatter("%(message)s")
        self.setFormatter(self._own)

    def writes_plain(self, level: int) -> bool:
        """True while a record at `level` would be written as its bare message."""
        return self.formatter is self._own and not self.filters and level >= self.level

    def line(self, text: str) -> None:
        """`text` written as an INFO record's message would be."""
        self.acquire()
        try:
            self.stream.write(text + self.terminator)
            self.flush()
        except Exception:  # as emit(): reported on stderr, never raised to the request
            self.handleError(logging.LogRecord(access_log.name, logging.INFO, __file__, 0,
                                               text, None, None, "_log"))
        finally:
            self.release()


# An upstream failure as the client sees it: a proxy answers for its upstream with 502
# (bad gateway) / 504 (gateway timeout), keeps a client's own mistakes (4xx) and the
# upstream's rate limit and overload as they are.
_BY_CODE = {ToolErrorCode.TIMEOUT: 504, ToolErrorCode.NETWORK: 502, ToolErrorCode.AUTH: 502,
            ToolErrorCode.RATE_LIMIT: 429}
_KEPT = {400, 404, 408, 409, 413, 422, 429, 503, 529}
# the upstream's token counts -> access-log keys
_USAGE_LOG = (("input_tokens", "prompt_tokens"), ("cached_tokens", "cached_tokens"),
              ("output_tokens", "completion_tokens"))


class _Reject(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.code = code


def upstream_failure(exc: ProviderError) -> _Reject:
    """A ProviderError as the status, message and headers the client gets."""
    status = exc.status
    if status in _KEPT:
        out = status
    elif exc.code in _BY_CODE:
        out = _BY_CODE[exc.code]
    else:
        out = 502
    headers = {}
    if exc.retry_after is not None and out in (429, 503, 529):
        headers["retry-after"] = str(max(1, math.ceil(exc.retry_after)))
    message = exc.message
    if exc.code is ToolErrorCode.AUTH:
        message = f"the upstream refused the proxy's credentials: {message}"
    elif out in (502, 504):
        message = f"upstream {exc.provider}: {message}"
    return _Reject(out, message, headers)


def _late_reject(exc: ParseTimeoutError) -> _Reject:
    return _Reject(502, f"the upstream's answer could not be read within the proxy's parse "
                        f"deadline (server.parse_timeout): {safe_error(exc)}")


def _record_late(trace: Any, exc: ParseTimeoutError) -> None:
    """The raw text of a reply that took too long to read goes to the trace."""
    if trace is not None:
        trace.add({"type": "error", "error": "parse_timeout", "message": str(exc),
                   "raw": exc.text})


class _Upstreams:
    """The servers of every route (`_fleet.Fleet`: one HTTP client each, its connection
    pool shared by all requests); each request gets its own view (model names, last
    response, the server that answered)."""

    def __init__(self, config: ServeConfig):
        from ._fleet import Fleet

        self._fleets: dict[int, Fleet] = {r.index: Fleet.for_route(r) for r in config.routes}
        # the upstream's model list per route (pass-through routes): (monotonic time, list)
        self._models: dict[int, tuple[float, list[dict[str, Any]]]] = {}
        self._models_lock: dict[int, asyncio.Lock] = {}

    def client(self, route: Route, requested: str) -> Any:
        return self._fleets[route.index].view(route.upstream_model(requested),
                                              route.model_id(requested))

    def provider(self, route: Route) -> Any:
        return self._fleets[route.index].first()

    def states(self) -> list[UpstreamState]:
        """Every server of every route: health and requests in flight in this worker."""
        return [s for fleet in self._fleets.values() for s in fleet.states()]

    def observe(self, observer: Any) -> None:
        """`observer` is told of requests in flight and servers up or down."""
        for fleet in self._fleets.values():
            fleet.observer = observer

    async def probe(self, timeout: float) -> dict[int, list[dict[str, Any]]]:
        """Every server of every route asked its health check once, concurrently:
        route index -> [{url, state: up | down | unchecked, reason}] (unchecked: its
        provider rule names nowhere to ask)."""
        async def one(fleet: Any, server: Any) -> dict[str, Any]:
            try:
                reason = await server.client.health(timeout)
            except ValueError:
                return {"url": server.url, "state": "unchecked"}
            except Exception as exc:  # a check that fails is a server that is down
                reason = f"{type(exc).__name__}: {exc}"
            if fleet.observer is not None:
                fleet.observer.health(fleet.route, server.url, reason is None)
            return {"url": server.url, "state": "up" if reason is None else "down",
                    **({"reason": reason} if reason else {})}

        pairs = [(i, f, s) for i, f in self._fleets.items() for s in f.servers]
        found = await asyncio.gather(*(one(f, s) for _i, f, s in pairs))
        out: dict[int, list[dict[str, Any]]] = {}
        for (i, _f, _s), state in zip(pairs, found, strict=True):
            out.setdefault(i, []).append(state)
        return out

    async def models(self, route: Route, cache: float, timeout: float) -> list[dict[str, Any]]:
        """What the route's upstream lists (`http.models` of its provider rule), asked at
        most every `cache` seconds; a failure raises (ProviderError, CapabilityError)."""
        hit = self._models.get(route.index)
        if hit is not None and time.monotonic() - hit[0] < cache:
            return hit[1]
        lock = self._models_lock.setdefault(route.index, asyncio.Lock())
        async with lock:  # concurrent listings ask the upstream once
            hit = self._models.get(route.index)
            if hit is not None and time.monotonic() - hit[0] < cache:
                return hit[1]
            found = await self.provider(route).list_models(timeout=timeout)
            self._models[route.index] = (time.monotonic(), found)
            return found

    async def aclose(self) -> None:
        for fleet in self._fleets.values():
            await fleet.aclose()


class ServeApp:
    """The state of one worker: engine, configuration, fronts, upstream clients."""

    def __init__(self, engine: Any, config: ServeConfig, *, api_keys: Iterable[str] = (),
                 trace_dir: str | os.PathLike[str] | None = None,
                 tracer_provider: Any = None):
        self.engine = engine
        self.config = config
        self.fronts = [engine.front(p) for p in config.fronts]
        self.api_keys = tuple(k.encode() for k in api_keys if k)
        self.trace_dir = Path(trace_dir) if trace_dir else None
        self.upstreams = _Upstreams(config)
        self.started = time.time()
        self.conversations = Conversations(int(config.server.prefix_memory * (1 << 20)))
        self._templates: dict[int, Any] = {}  # route index -> its compiled chat template
        self.metrics: Any = None
        if config.server.metrics:
            try:
                from ._metrics import Metrics
            except ImportError as exc:  # the serve extra brings prometheus_client
                log.warning("GET /metrics is off: %s (pip install 'toolrules[serve]')", exc)
            else:
                self.metrics = Metrics(config)
                self.upstreams.observe(self.metrics)
                self.metrics.servers(self.upstreams.states())
        from ._otel import tracing

        self.tracing = tracing(tracer_provider)
        # the end of every request is counted (metrics) or traced
        self.observed = self.metrics is not None or self.tracing is not None
        self._ready: tuple[float, dict[int, list[dict[str, Any]]]] | None = None
        self._ready_lock: asyncio.Lock | None = None

    # ------------------------------------------------------------ helpers

    def _authorized(self, front: Any, headers: Mapping[str, str],
                    query: Mapping[str, str] | None = None) -> bool:
        if not self.api_keys:
            return True
        given = (front.client_key(headers, query) or "").encode()
        ok = False
        for key in self.api_keys:  # every key compared: the time says nothing about which
            ok |= hmac.compare_digest(given, key)
        return ok

    async def _body(self, request: Any) -> Any:
        limit = self.config.server.max_body_bytes
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > limit:
            raise _Reject(413, f"request body is {length} bytes; the limit is {limit}")
        parts = []
        size = 0
        receive = request.receive  # read here, not through `request.stream()` (an async
        while True:                # generator: the loop registers and finalizes each one)
            message = await receive()
            kind = message["type"]
            if kind == "http.disconnect":  # as `request.stream()` says it
                from starlette.requests import ClientDisconnect

                raise ClientDisconnect()
            if kind != "http.request":
                continue
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _Reject(413, f"request body is over the limit of {limit} bytes")
            parts.append(chunk)
            if not message.get("more_body", False):
                break
        raw = parts[0] if len(parts) == 1 else b"".join(parts)
        try:
            data = loads(raw)
        except ValueError as exc:
            raise _Reject(400, f"the request body is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise _Reject(400, "the request body must be a JSON object")
        return data

    def _error_response(self, front: Any, rej: _Reject) -> Any:
        from starlette.responses import JSONResponse

        return JSONResponse(front.error(rej.status, rej.message, code=rej.code),
                            status_code=rej.status, headers=rej.headers)

    def _trace(self, rid: str) -> Any:
        if self.trace_dir is None:
            return None
        from ..runtime._trace import Trace, redactor_for

        return Trace(redactor=redactor_for(self.engine), path=self.trace_dir / f"{rid}.jsonl")

    def _log(self, info: dict[str, Any]) -> None:
        if not access_log.isEnabledFor(logging.INFO):
            return
        handlers = access_log.handlers
        if len(handlers) == 1 and not access_log.propagate and not access_log.filters:
            only = handlers[0]
            if type(only) is PlainLines and only.writes_plain(logging.INFO):
                only.line(dumps_compact(info))  # what the record would have written
                return
        # the record made here, not by `info()`: its caller lookup (a stack walk) is a
        # third of a line's cost, and an access line's caller is always this one
        access_log.handle(logging.LogRecord(access_log.name, logging.INFO, __file__, 0,
                                            dumps_compact(info), None, None, "_log"))

    # ------------------------------------------------------------ the API endpoints

    async def handle(self, request: Any, front: Any, streamed: bool = False) -> Any:
        # every reply is read under the parse deadline: a reply that takes too long to
        # read ends its request, and the worker goes on serving the others
        after: list[Callable[[], None]] = []
        with parse_deadline(self.config.server.parse_timeout or None):
            if not self.observed:
                response = await self._handle(request, front, streamed, None, after)
            else:
                with parse_clock() as clock:  # the parse time, for the metrics
                    response = await self._handle(request, front, streamed, clock, after)
        if after:  # logged and counted once the answer went out (or failed to)
            _UNLOGGED[0] += 1
            return _Then(response, after[0])
        return response

    async def _handle(self, request: Any, front: Any, streamed: bool,
                      clock: Any, after: list[Callable[[], None]]) -> Any:
        """The request's answer; what logs and counts it is left in `after` (called once
        the answer went out)."""
        started = time.perf_counter()
        ex: Exchange | None = None
        answered: Exchange | None = None
        rid = _new_id()
        info: dict[str, Any] = {"time": round(time.time(), 3), "id": rid,
                                "method": request.method, "path": request.scope["path"],
                                "front": front.provider}
        stream = False
        try:
            query = request.query_params if request.scope.get("query_string") else _NO_QUERY
            if not self._authorized(front, request.headers, query):
                raise _Reject(401, "invalid or missing API key")
            body = await self._body(request)
            # a stream endpoint (`serve.stream_path`) streams every answer
            stream = streamed or front.wants_stream(body)
            if streamed and (problem := front.stream_query_problem(query)):
                raise _Reject(400, problem)
            info["stream"] = stream
            requested = front.requested_model(body, request.path_params)
            info["model"] = requested if isinstance(requested, str) else None
            route = self.config.route(requested)
            if route is None:
                raise _Reject(404, f"model {requested!r} is not served here (GET /v1/models "
                              "lists the names)")
            info["route"] = route.index
            # every top-level field is read, ignored for a stated reason or refused
            # (UnsupportedContentError: a 400 naming it) before anything goes upstream
            ignored = front.account(body)
            # built-in tools the upstream cannot provide are left out, and said so - or
            # refused, when the route asks for that (`builtin_tools: refuse`)
            omitted: dict[str, str] | None = {} if route.builtin_tools == "omit" else None
            try:
                msgs, tools, choice = self.engine.parse_request(body, front.provider,
                                                                omitted=omitted)
            except UnsupportedContentError:
                raise
            except ToolrulesError as exc:
                raise _Reject(400, f"cannot read the request: {safe_error(exc)}") from None
            client = self.upstreams.client(route, requested)
            info["upstream"] = client.provider
            trace = self._trace(rid)
            upstream_rules = self.engine.provider_rules(client.provider)
            upstream_options = upstream_rules.options
            volatile: list[dict[str, Any]] = []
            if upstream_rules.renders_template:
                # client metadata in the conversation's text (the front's serve.volatile)
                # would change the start of the prompt a server renders: taken out
                msgs, volatile = front.take_volatile(msgs)
            asked = front.read_options(body)
            ignored.update(unwritable_options(asked, upstream_options, client.provider))
            if ignored:
                info["ignored"] = ignored
            if omitted:
                info["omitted"] = omitted
            ex = Exchange(route=route, client=client, messages=msgs, tools=tools, choice=choice,
                          options=options_for(front, upstream_options, body, asked),
                          held_call=self.config.held_call, trace=trace, rewrites=volatile,
                          json_output=front.read_json_output(body),
                          json_texts=self.config.json_output, clock=clock)
            info["mode"] = "native" if ex.native else "emulated"
            if trace is not None:
                cap = route.engine.capability(ex.model_id)
                trace.add({"type": "start", "version": 1, "source": "serve",
                           "front": front.provider, "provider": client.provider,
                           "model": ex.model_id, "upstream_model": client.model,
                           "native_tools": ex.native, "dialect": cap.dialect,
                           "route": {"index": route.index, "tools": asdict(route.tools)},
                           "tools": tools, "tool_choice": choice,
                           "held_call": self.config.held_call, "settings": {"stream": stream},
                           "messages": msgs, "time": time.time(),
                           **({"ignored": ignored} if ignored else {}),
                           **({"omitted": omitted} if omitted else {})})
            if stream:
                return await self._stream(front, ex, body, requested, info, started, trace,
                                          request.headers)
            # the bookkeeping runs as soon as the request went out, while the loop waits
            asyncio.get_running_loop().call_soon(self._early_prefix, info, ex)
            try:
                parsed = await ex.complete()
            except ParseTimeoutError as exc:
                _record_late(trace, exc)
                raise
            finally:
                if trace is not None:
                    trace.close()
            # the upstream's own counts where it reported them, else estimates
            reported = ex.outcome.usage or {}
            usage = reported if "input_tokens" in reported and "output_tokens" in reported \
                else {**self._usage(body, parsed, front), **reported}
            out = self.engine.build_response(parsed, front.provider, model=requested,
                                             usage=usage,
                                             response_id=front.prov.id_prefix + _new_id())
            answered = ex  # its outcome is written with the log line
            info["status"] = 200
            return _Whole(dumps_compact(out).encode("utf-8"))
        except _Reject as rej:
            info["status"] = rej.status
            return self._error_response(front, rej)
        except ProviderError as exc:
            failure = upstream_failure(exc)
            info.update(status=failure.status, error=exc.code.name)
            return self._error_response(front, failure)
        except ParseTimeoutError as exc:
            info.update(status=502, error=type(exc).__name__)
            return self._error_response(front, _late_reject(exc))
        except UnsupportedContentError as exc:
            # content the route cannot carry (a block no rule reads, media the upstream
            # API or model cannot take): the client's request is refused, never trimmed
            info.update(status=400, error=type(exc).__name__)
            return self._error_response(front, _Reject(400, f"{str(exc)[:2000]} "
                                                       "(toolrules serve refuses content it "
                                                       "cannot carry rather than drop it)"))
        except ToolrulesError as exc:
            info.update(status=500, error=type(exc).__name__)
            log.warning("request %s failed: %s", rid, safe_error(exc))
            return self._error_response(front, _Reject(500, f"the proxy could not answer: "
                                                       f"{safe_error(exc)}"))
        except Exception as exc:  # a bug: still an error in the client's own shape
            info.update(status=500, error=type(exc).__name__)
            log.exception("request %s failed", rid)
            return self._error_response(front, _Reject(500, "the proxy failed; see its log"))
        finally:
            if "status" in info:  # a stream that started logs when it ends
                def finish() -> None:
                    if answered is not None:
                        self._outcome(info, answered)
                    ended = time.perf_counter()
                    info["ms"] = round((ended - started) * 1000.0, 3)
                    self._log(info)
                    if self.observed:
                        self._count(info, ex, started, ended, None, request.headers)
                after.append(finish)

    def _count(self, info: dict[str, Any], ex: Exchange | None, started: float, ended: float,
               first_token: float | None, headers: Mapping[str, str] | None) -> None:
        """The request's metrics and trace spans (they never fail a request)."""
        if self.metrics is not None:
            try:
                self.metrics.request(info, ex, started, ended, first_token)
            except Exception:
                log.exception("request %s: the metrics failed", info.get("id"))
        if self.tracing is not None:
            index = info.get("route")
            route = self.config.routes[index] if isinstance(index, int) else None
            try:
                self.tracing.request(info, ex, started, ended, first_token, headers,
                                     _route_name(route) if route is not None else "")
            except Exception:
                log.exception("request %s: the trace failed", info.get("id"))

    def _outcome(self, info: dict[str, Any], ex: Exchange) -> None:
        o = ex.outcome
        info.update(attempts=o.attempts, calls=o.calls)
        if o.invalid:
            info["invalid"] = o.invalid
        if o.rewrites:  # what was moved to fit the model's chat template, and why
            info["rewrites"] = o.rewrites
        server = getattr(ex.client, "server", None)
        if server is not None and len(ex.route.upstream.servers) > 1:
            info["server"] = server  # which of the route's servers answered
        if not ex.prefixed:
            self._prefix(info, ex, ex.outcome.body, ex.outcome.rewrites)
        for key, name in _USAGE_LOG:  # what the upstream reported, not estimates
            if o.usage and key in o.usage:
                info[name] = o.usage[key]

    def _early_prefix(self, info: dict[str, Any], ex: Exchange) -> None:
        """The prompt-prefix bookkeeping while the upstream works on the request: called
        once the request went out (the loop would idle until the answer); when its body is
        not at hand yet, `_outcome` does it after the answer."""
        sent = getattr(ex.client, "sent", None)
        if ex.prefixed or not callable(sent):
            return
        body, rewrites = sent()
        if body is None:
            return
        try:
            self._prefix(info, ex, body, [*ex.pre_rewrites, *(r.as_dict() for r in rewrites)])
        except Exception:  # the bookkeeping never fails a request
            log.exception("request %s: the prompt-prefix bookkeeping failed", info.get("id"))

    def _prefix(self, info: dict[str, Any], ex: Exchange, body: Any,
                rewrites: Sequence[Mapping[str, Any]]) -> None:
        """The share of the conversation's last prompt this one kept (what the server's
        cache reuses), in the access log; a turn that breaks it is logged once. `body`:
        the request sent upstream (its first attempt); `rewrites`: what the proxy changed
        in the conversation to build it."""
        ex.prefixed = True
        if body is None or self.conversations.max_chars <= 0:
            return
        key = affinity_key(ex.messages)
        if key is None:
            return
        rules = self.engine.provider_rules(ex.client.provider)
        tmpl = ex.route.template
        compiled = None
        if rules.renders_template and tmpl is not None and tmpl.source:
            compiled = self._templates.get(ex.route.index)
            if compiled is None:
                from ..chat_template._render import TemplateRaised, compile_chat_template

                try:
                    compiled = compile_chat_template(tmpl.source)
                except TemplateRaised:
                    compiled = False
                self._templates[ex.route.index] = compiled
        image = prompt_image(body, rules.messages_path, rules.tools_path, compiled or None,
                             tmpl.bos_token if tmpl else "", tmpl.eos_token if tmpl else "")
        seen = self.conversations.observe(key, image, ex.messages, rewrites)
        info["conversation"] = seen.conversation
        if seen.share is not None:
            info["prefix_share"] = round(seen.share, 4)

    def _usage(self, body: Mapping[str, Any], parsed: ParsedResponse | None,
               front: Any = None, input_tokens: int | None = None) -> dict[str, int]:
        cpt = self.config.server.chars_per_token
        usage = {"input_tokens": self._input_tokens(body, front) if input_tokens is None
                 else input_tokens}
        if parsed is not None:
            out = estimate_tokens(parsed.content, cpt) + estimate_tokens(
                parsed.reasoning_content, cpt) + sum(
                estimate_tokens(c.arguments, cpt) for c in parsed.tool_calls)
            usage["output_tokens"] = out
        return usage

    def _input_tokens(self, body: Mapping[str, Any], front: Any = None) -> int:
        """An estimate from the body fields that hold the prompt (the front's rule says
        which: messages, system, tools)."""
        cpt = self.config.server.chars_per_token
        keys = front.prompt_fields if front is not None and front.prompt_fields else (
            "system", "instructions", "messages", "input", "tools")
        return sum(estimate_tokens(body.get(k), cpt) for k in keys)

    async def _stream(self, front: Any, ex: Exchange, body: Mapping[str, Any], requested: str,
                      info: dict[str, Any], started: float, trace: Any,
                      headers: Mapping[str, str] | None = None) -> Any:
        events = ex.events()
        # One task pumps the exchange into a queue; the response reads the queue with a
        # timeout, so a waiting stream can ping without a task per event.
        queue = _Channel()

        async def pump() -> None:
            try:
                async for item in events:
                    queue.put_nowait(("item", item))
                queue.put_nowait(("end", None))
            except Exception as exc:
                queue.put_nowait(("error", exc))

        loop = asyncio.get_running_loop()
        producer = loop.create_task(pump())
        # after the pump's first step (which sends the request): the bookkeeping runs
        # while the loop waits for the upstream
        loop.call_soon(self._early_prefix, info, ex)
        # An upstream that fails at once (429, 5xx, refused) gets a real HTTP status;
        # one that is slow gets the stream started, kept alive while it thinks.
        first: tuple[str, Any] | None = None
        with contextlib.suppress(TimeoutError):
            first = await queue.get(self.config.server.keep_alive or None)
        if first is not None and first[0] != "item":
            await self._stop(producer, events, trace)
            if first[0] == "error":
                raise first[1]
            raise ToolrulesError("the upstream ended without an answer")
        rid = front.prov.id_prefix + _new_id()
        input_tokens = self._input_tokens(body, front)
        writer = front.writer(
            lambda parsed, usage: self.engine.build_response(
                parsed, front.provider, model=requested, response_id=rid, usage=usage),
            response_id=rid, model=requested, request=body,
            usage={"input_tokens": input_tokens})
        _UNLOGGED[0] += 1  # until its log line is written, when the stream ends
        return _Streamed(functools.partial(
            self._sse, front, ex, events, producer, queue, first, writer, body, input_tokens,
            info, started, trace, headers))

    async def _stop(self, producer: asyncio.Future[Any], events: AsyncGenerator[Any, None],
                    trace: Any) -> None:
        if not producer.done():
            producer.cancel()
        with contextlib.suppress(BaseException):
            await producer
        with contextlib.suppress(BaseException):
            await events.aclose()
        if trace is not None:
            trace.close()

    async def _sse(self, front: Any, ex: Exchange, events: AsyncGenerator[Any, None],
                   producer: asyncio.Future[Any], queue: _Channel,
                   first: tuple[str, Any] | None, writer: Any, body: Mapping[str, Any],
                   input_tokens: int, info: dict[str, Any], started: float, trace: Any,
                   headers: Mapping[str, str] | None, receive: Any, send: Any) -> None:
        """Write the stream (ASGI `send`): what is ready goes out in one write, the last
        bytes with the end of the body; the client's disconnect (ASGI `receive`) ends it.
        What the request is counted and logged as is done after its last byte went out."""
        keep_alive = self.config.server.keep_alive or None
        info["status"] = 200
        first_byte = None
        first_token: float | None = None
        pending: list[bytes] = []
        ended = False  # the end of the body was sent

        async def watch() -> None:  # the client's disconnect wakes the writer
            while (await receive())["type"] != "http.disconnect":
                pass
            queue.put_nowait(("gone", None))

        async def write(data: bytes, more: bool = True) -> None:
            nonlocal first_byte, ended
            await send({"type": "http.response.body", "body": data, "more_body": more})
            ended = not more
            if first_byte is None:
                first_byte = time.perf_counter()

        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        # the disconnect is watched from the first time the stream waits for the upstream
        # (a stream whose answer is at hand is written to its end without a watcher)
        watcher: asyncio.Future[None] | None = None
        try:
            pending.append(writer.start())
            if first is None:  # a slow upstream: the stream starts now, kept alive
                await write(pending.pop())
            while True:
                if first is not None:
                    entry, first = first, None
                elif pending and (queue.empty() or len(pending) >= 64):
                    await write(b"".join(pending))
                    pending.clear()
                    continue
                elif not queue.empty():
                    entry = queue.get_nowait()
                else:
                    if watcher is None:
                        watcher = asyncio.get_running_loop().create_task(watch())
                    try:
                        entry = await queue.get(keep_alive)
                    except TimeoutError:
                        await write(writer.ping())
                        continue
                what, item = entry
                if what == "end":
                    break
                if what == "gone":  # the client went away: nothing more is written
                    return
                if what == "error":
                    raise item
                kind, value = item
                if first_token is None and kind != "done":
                    first_token = time.perf_counter()
                if kind == "text":
                    pending.append(writer.text(value))
                elif kind == "reasoning":
                    pending.append(writer.reasoning(value))
                elif kind == "call":
                    pending.append(writer.tool_call(value))
                elif kind == "done":
                    usage = {**self._usage(body, value, front, input_tokens),
                             **(ex.outcome.usage or {})}
                    pending.append(writer.finish(value, usage))
            await write(b"".join(pending), more=False)
        except ProviderError as exc:
            failure = upstream_failure(exc)
            info.update(error=exc.code.name, stream_error=failure.status)
            await write(b"".join(pending) + writer.error(failure.status, failure.message,
                                                         front=front), more=False)
        except ParseTimeoutError as exc:
            info.update(error=type(exc).__name__, stream_error=502)
            _record_late(trace, exc)
            late = _late_reject(exc)
            await write(b"".join(pending) + writer.error(late.status, late.message,
                                                         front=front), more=False)
        except ToolrulesError as exc:
            info.update(error=type(exc).__name__, stream_error=500)
            await write(b"".join(pending) + writer.error(
                500, f"the proxy could not answer: {safe_error(exc)}", front=front),
                more=False)
        except Exception as exc:  # a bug: the client still gets a well-formed end
            log.exception("request %s failed", info.get("id"))
            info.update(error=type(exc).__name__, stream_error=500)
            await write(b"".join(pending) + writer.error(500, "the proxy failed; see its log",
                                                         front=front), more=False)
        finally:
            if watcher is not None:
                watcher.cancel()
            await self._stop(producer, events, trace)
            if not ended:  # cancelled, or the client left: the body is ended all the same
                with contextlib.suppress(Exception):
                    await send({"type": "http.response.body", "body": b"",
                                "more_body": False})
            try:
                if not writer.closed:
                    info["disconnected"] = True
                self._outcome(info, ex)
                done = time.perf_counter()
                info["ms"] = round((done - started) * 1000.0, 3)
                if first_byte is not None:
                    info["first_byte_ms"] = round((first_byte - started) * 1000.0, 3)
                self._log(info)
                if self.observed:
                    self._count(info, ex, started, done, first_token, headers)
            finally:
                _UNLOGGED[0] -= 1

    # ------------------------------------------------------------ the other endpoints

    def _front_for(self, headers: Mapping[str, str], path: str) -> Any:
        fronts = [f for f in self.fronts if path in f.served(f.models_path)]
        for f in fronts:
            if f.models_header and f.models_header in headers:
                return f
        plain = [f for f in fronts if not f.models_header]
        return (plain or fronts or self.fronts)[0]

    async def models(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        front = self._front_for(request.headers, request.url.path)
        if not self._authorized(front, request.headers, request.query_params):
            return self._error_response(front, _Reject(401, "invalid or missing API key"))
        return JSONResponse(front.models(await self.model_list()))

    async def model_list(self) -> list[dict[str, Any]]:
        """The names clients may ask for, in route order: each listed route's own name,
        and for a route that passes names through, the models its upstream lists that
        the route would serve (no earlier route claims them). An upstream that cannot
        list its models leaves the configured names; the reason is logged."""
        server = self.config.server
        out: dict[str, dict[str, Any]] = {}
        for route in self.config.routes:
            if route.name is not None and route.listed:
                out.setdefault(route.name, {"id": route.name})
            if not route.passes_names:
                continue
            try:
                found = await self.upstreams.models(route, server.models_cache,
                                                    server.models_timeout)
            except (ProviderError, ToolrulesError) as exc:
                up = route.upstream
                log.warning("GET /v1/models: route %d (%s%s) could not list its upstream's "
                            "models, so only the configured names are listed: %s",
                            route.index, up.provider, f" at {up.base_url}" if up.base_url
                            else "", safe_error(exc))
                continue
            for entry in found:
                if entry["id"] not in out and self.config.route(entry["id"]) is route:
                    out[entry["id"]] = entry
        return [self._model_entry(e) for e in out.values()]

    def _model_entry(self, entry: dict[str, Any]) -> dict[str, Any]:
        """{id, created (Unix seconds), created_at (RFC 3339), display_name}: what the
        upstream said, else the proxy's start time and the id."""
        created = entry.get("created")
        if not isinstance(created, int) or isinstance(created, bool) or created < 0:
            created = int(self.started)
        stamp = entry.get("created_at")
        if not isinstance(stamp, str) or not stamp:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
        name = entry.get("display_name")
        return {"id": entry["id"], "created": created, "created_at": stamp,
                "display_name": name if isinstance(name, str) and name else entry["id"]}

    async def count_tokens(self, request: Any, front: Any) -> Any:
        from starlette.responses import JSONResponse

        try:
            if not self._authorized(front, request.headers, request.query_params):
                raise _Reject(401, "invalid or missing API key")
            body = await self._body(request)
        except _Reject as rej:
            return self._error_response(front, rej)
        return JSONResponse(front.count_tokens(self._input_tokens(front.counted(body),
                                                                  front)))

    async def health(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        return JSONResponse({"status": "ok", "routes": len(self.config.routes),
                             "fronts": [f.path for f in self.fronts]})

    async def ready(self, request: Any) -> Any:
        """200 when every route has a server that answers its health check (or names no
        check to ask), else 503; the body lists each route's servers and their state.
        The servers are asked at most every `server.ready_cache` seconds."""
        from starlette.responses import JSONResponse

        server = self.config.server
        found = self._ready
        if found is None or time.monotonic() - found[0] >= server.ready_cache:
            if self._ready_lock is None:
                self._ready_lock = asyncio.Lock()
            async with self._ready_lock:  # concurrent probes ask the servers once
                found = self._ready
                if found is None or time.monotonic() - found[0] >= server.ready_cache:
                    found = self._ready = (time.monotonic(),
                                           await self.upstreams.probe(server.ready_timeout))
        routes = []
        for route in self.config.routes:
            states = found[1].get(route.index, [])
            ok = any(s["state"] != "down" for s in states)
            routes.append({"route": route.index, "name": _route_name(route), "ready": ok,
                           "servers": states})
        ready = all(r["ready"] for r in routes)
        return JSONResponse({"status": "ready" if ready else "not ready", "routes": routes},
                            status_code=200 if ready else 503)

    async def metrics_text(self, request: Any) -> Any:
        from starlette.responses import Response

        body, ctype = self.metrics.render()
        return Response(body, media_type=ctype.split(";")[0],
                        headers={"content-type": ctype})


def create_app(engine: Any, config: ServeConfig, *, api_keys: Iterable[str] = (),
               trace_dir: str | os.PathLike[str] | None = None,
               tracer_provider: Any = None) -> Any:
    """The ASGI app for `config` (see `load_config`): Starlette's, with the fronts' POST
    paths answered directly (`app.state.serve` is the ServeApp); `tracer_provider`: an
    OpenTelemetry tracer provider the request spans go to (else the OTEL_* environment
    decides, see toolrules.serve._otel)."""
    from starlette.applications import Starlette
    from starlette.routing import Route as HttpRoute

    state = ServeApp(engine, config, api_keys=api_keys, trace_dir=trace_dir,
                     tracer_provider=tracer_provider)
    routes = []
    model_paths: set[str] = set()
    exact: dict[str, Any] = {}  # the POST endpoints at paths without {parameters}
    for front in state.fronts:
        for path in front.served(front.path):
            routes.append(HttpRoute(path, _bind(state.handle, front), methods=["POST"]))
            if "{" not in path:
                exact.setdefault(path, routes[-1].endpoint)
        for path in front.served(front.stream_path):  # every answer here is streamed
            routes.append(HttpRoute(path, _bind(state.handle, front, streamed=True),
                                    methods=["POST"]))
        for path in front.served(front.count_tokens_path):
            routes.append(HttpRoute(path, _bind(state.count_tokens, front), methods=["POST"]))
        for path in front.served(front.models_path):
            if path not in model_paths:
                model_paths.add(path)
                routes.append(HttpRoute(path, state.models, methods=["GET"]))
    routes.append(HttpRoute("/health", state.health, methods=["GET"]))
    routes.append(HttpRoute("/ready", state.ready, methods=["GET"]))
    if state.metrics is not None:
        routes.append(HttpRoute("/metrics", state.metrics_text, methods=["GET"]))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        yield
        await state.upstreams.aclose()
        if state.metrics is not None:
            state.metrics.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.serve = state
    return _Direct(app, exact)


class _Direct:
    """The proxy's ASGI app: a POST to a front's own path (no path parameters) goes
    straight to its endpoint, the rest through the Starlette app's router. The endpoint
    answers every failure itself, so the router's and middlewares' work per request (a
    few percent of a streamed request's CPU) buys nothing there."""

    def __init__(self, app: Any, exact: Mapping[str, Any]):
        from starlette.requests import Request

        self.app = app
        self.state = app.state
        self._exact = dict(exact)
        self._request = Request

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            endpoint = self._exact.get(scope["path"])
            if endpoint is not None:
                response = await endpoint(self._request(scope, receive))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def __getattr__(self, name: str) -> Any:  # the Starlette app's routes, router ...
        return getattr(self.app, name)


_NO_QUERY: Mapping[str, str] = MappingProxyType({})  # a request without a query string
_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


def _new_id() -> str:
    """24 hex digits naming a request or a response (not a secret: no system call)."""
    return f"{random.getrandbits(96):024x}"


# Requests answered whose access-log line is not written yet (it is written once the
# answer went out): `logged()` waits for them.
_UNLOGGED = [0]


def logged(timeout: float = 5.0) -> bool:
    """Wait (up to `timeout` s) until every request this process answered has written its
    access-log line; true when none is left. For tests and tools that read the log right
    after an answer: the line is written just after the answer's last byte."""
    deadline = time.monotonic() + timeout
    while _UNLOGGED[0] > 0:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True


class _Then:
    """An answer, then `fn` (its log line and metrics) once it was sent - or failed to be."""

    __slots__ = ("_fn", "_response")

    def __init__(self, response: Any, fn: Callable[[], None]):
        self._response = response
        self._fn = fn

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self._response(scope, receive, send)
        finally:
            try:
                self._fn()
            finally:
                _UNLOGGED[0] -= 1

    def __getattr__(self, name: str) -> Any:  # status_code, headers, body ...
        return getattr(self._response, name)


class _Channel:
    """What a stream's pump hands its writer, in order: a deque and the one reader's
    waiter (asyncio.Queue's machinery - its loop check, its queues of waiters, a timeout
    context per wait - costs a few percent of a streamed request)."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: collections.deque[tuple[str, Any]] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: tuple[str, Any]) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def empty(self) -> bool:
        return not self._items

    def get_nowait(self) -> tuple[str, Any]:
        return self._items.popleft()

    async def get(self, timeout: float | None) -> tuple[str, Any]:
        """The next item; TimeoutError when none came within `timeout` seconds."""
        while not self._items:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(timeout, time_out, waiter) if timeout else None
            try:
                await waiter
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
        return self._items.popleft()


class _Whole:
    """A whole JSON answer (200) as an ASGI response: the headers Starlette's Response
    would send, without building them anew for each answer."""

    __slots__ = ("body",)
    status_code = 200
    media_type = "application/json"

    def __init__(self, body: bytes):
        self.body = body

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-length", b"%d" % len(self.body)),
            (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": self.body})


class _Streamed:
    """A streamed answer as an ASGI response: `run(receive, send)` writes all of it (one
    task: no response machinery between the exchange's events and the socket)."""

    __slots__ = ("_run",)

    def __init__(self, run: Callable[[Any, Any], Any]):
        self._run = run

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._run(receive, send)


def _route_name(route: Route) -> str:
    from ._metrics import route_label

    return route_label(route)


def _bind(handler: Any, front: Any, **kw: Any) -> Any:
    async def endpoint(request: Any) -> Any:
        return await handler(request, front, **kw)
    return endpoint
