"""One HTTP client for every provider, driven by the provider's rules.

A request is `Engine.build_request` (the wire body; emulation prompts for models
without native tools), sent to the rule's URL with its auth, fixed headers and stream
flags (`http:`); an answer is `Engine.parse_response`, a stream goes through the rule's
framing into `Engine.response_stream` - so the same calls come back whichever provider
serves a model, including calls a server handed back as raw text.

httpx is imported on first use (the `clients` extra); the key is kept out of reprs,
errors and log records.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from .._errors import CapabilityError, ParseTimeoutError, ToolrulesError
from .._jsonutil import dumps_compact, loads
from .._types import Message, ParsedResponse, StreamChunk, Tool
from .._version import __version__
from ..calls._tool_errors import ToolErrorCode
from ..providers._rules import set_path
from ..providers._transport import HttpRules, http_rules
from ..rules._default import resolve_engine
from ._base import iterate_sync, sync_loop
from ._errors import ProviderError
from ._framing import FramingError, StreamFailure, decoder_for
from ._retry import RetryPolicy, parse_retry_after, retry_policy

if TYPE_CHECKING:
    from ._sigv4 import Signer

__all__ = ["HttpModel"]

log = logging.getLogger("toolrules.clients")

_ACCEPT = {"sse": "text/event-stream", "ndjson": "application/x-ndjson",
           "aws-eventstream": "application/vnd.amazon.eventstream"}
_MAX_ERROR_BODY = 64 << 10


# ---------------------------------------------------------------- secrets in logs

_SECRETS: set[str] = set()
_REDACTED_LOGGERS = ("httpx", "httpcore", "httpcore.connection", "httpcore.http11",
                     "httpcore.http2", "httpcore.proxy")


class _Redact(logging.Filter):
    """Keys out of log records (httpx logs request URLs, where a query key travels)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _SECRETS:
            try:
                text = record.getMessage()
            except Exception:  # a broken record is the logging module's business
                return True
            if any(s in text for s in _SECRETS):
                for s in _SECRETS:
                    text = text.replace(s, "***")
                record.msg, record.args = text, None
        return True


_REDACT = _Redact()


def _guard_logs(secret: str) -> None:
    _SECRETS.add(secret)
    for name in _REDACTED_LOGGERS:
        logger = logging.getLogger(name)
        if _REDACT not in logger.filters:
            logger.addFilter(_REDACT)


class _Secret:
    """A key that never prints."""

    __slots__ = ("value",)

    def __init__(self, value: str | None):
        self.value = value

    def __repr__(self) -> str:
        return "***" if self.value else "None"

    __str__ = __repr__

    def scrub(self, text: str) -> str:
        return text.replace(self.value, "***") if self.value and text else text


_HTTPX: list[Any] = []


def _import_httpx() -> Any:
    if _HTTPX:  # imported once: every request asks
        return _HTTPX[0]
    try:
        import httpx
    except ImportError:
        raise ImportError("toolrules.connect needs httpx: pip install 'toolrules[clients]'") \
            from None
    _HTTPX.append(httpx)
    return httpx


# ---------------------------------------------------------------- the client

class HttpModel:
    """A model behind a provider's HTTP API; `toolrules.connect()` builds one.

    `await generate(messages, tools, tool_choice, **options)` -> ParsedResponse;
    `stream(...)` -> async iterator of StreamChunk (then `last_response`);
    `generate_sync` / `stream_sync` for code without an event loop. Options are
    `build_request` options (max_tokens, temperature, strict, request_overrides ...).
    """

    def __init__(self, provider: str, model: str, *, base_url: str | None = None,
                 api_key: str | None = None, timeout: float | None = 120.0,
                 connect_timeout: float | None = 10.0, max_retries: int | None = None,
                 request_overrides: Mapping[str, Any] | None = None,
                 headers: Mapping[str, str] | None = None, as_model: str | None = None,
                 engine: Any = None, env_key: bool = True, fast: bool = False):
        # env_key=False: no key from the rule's env var (a proxy pointed at another host
        # must not hand that host a key meant for the rule's default address).
        # fast=True: plain-http upstreams go through the small asyncio client
        # (_fasthttp.py) instead of httpx - a proxy pays this hop on every request.
        self.engine = resolve_engine(engine)
        prov = self.engine.provider_rules(provider)
        self.provider: str = prov.id
        self._model_path = prov.model_path
        self.model = model
        self.as_model = as_model or model
        self._http: HttpRules = http_rules(self.engine, prov.id)
        self._policy: RetryPolicy = retry_policy(self.engine)
        self.max_retries = self._policy.max_retries if max_retries is None else int(max_retries)
        if self.max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.base_url = self._http.resolve_base(base_url)
        self._fast = False
        if fast:
            from ._fasthttp import usable

            self._fast = usable(self.base_url) and self._http.auth_kind != "aws-sigv4"
        self._key = _Secret(self._http.key(api_key) if env_key or api_key else None)
        if self._key.value:
            _guard_logs(self._key.value)
        elif self._http.needs_key():
            raise ProviderError(self._policy.error(self._http.missing_key_message(),
                                                   code=ToolErrorCode.AUTH),
                                provider=self.provider)
        self._signer: Signer | None = None
        if self._http.auth_kind == "aws-sigv4" and not self._key.value:
            from ._sigv4 import Signer

            self._signer = Signer(self._http.auth_service or "", self._http.region() or "",
                                  self._http.auth_extra, self.provider, self._policy)
        self._overrides = dict(request_overrides or {})
        self._headers = {str(k): str(v) for k, v in (headers or {}).items()}
        self._clients: dict[int, tuple[Any, Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.last_response: ParsedResponse | None = None
        # what the last request changed to fit the model's chat template (TurnRewrite)
        self.last_rewrites: tuple[Any, ...] = ()
        # the body of the last request as built (before the http rule's stream fields)
        self.last_body: dict[str, Any] | None = None

    def __repr__(self) -> str:
        parts = urlsplit(self.base_url)
        where = f"{parts.scheme}://{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "") \
            + parts.path
        return (f"<HttpModel {self.provider}:{self.model} at {where} "
                f"key={'***' if self._key.value else 'none'}>")

    # ------------------------------------------------------------ requests

    def _request(self, messages: Any, tools: Any, tool_choice: Any, stream: bool,
                 options: dict[str, Any]) -> tuple[str, bytes, dict[str, str]]:
        """The URL, body and headers of one turn's request, built once for all its attempts
        (unsigned: `_send` signs each attempt)."""
        opts = dict(options)
        overrides = dict(self._overrides)
        overrides.update(opts.pop("request_overrides", None) or {})
        rewrites: list[Any] = []
        body = self.engine.build_request(self.provider, self.as_model, messages, tools=tools,
                                         tool_choice=tool_choice, rewrites=rewrites,
                                         request_overrides=overrides or None, **opts)
        self.last_rewrites = tuple(rewrites)
        self.last_body = body
        if self.as_model != self.model and self._model_path:
            set_path(body, self._model_path, self.model)
        body = self._http.http_body(body, stream)
        url = self._with_auth_query(self._http.url(self.base_url, self.model, stream=stream))
        accept = _ACCEPT.get(self._http.framing or "", "application/json") if stream \
            else "application/json"
        headers = {"content-type": "application/json", **self._base_headers(accept)}
        return url, dumps_compact(body).encode("utf-8"), headers

    def _with_auth_query(self, url: str) -> str:
        """`url` with the key in its query, where the provider's auth rule puts it there."""
        query = self._http.auth_query(self._key.value)
        return url + ("&" if "?" in url else "?") + urlencode(query) if query else url

    def _base_headers(self, accept: str) -> dict[str, str]:
        """The headers of every request: accept, user agent, the rule's, the caller's, the
        key's (later ones win)."""
        return {"accept": accept, "user-agent": f"toolrules/{__version__}",
                **self._http.headers, **self._headers,
                **self._http.auth_headers(self._key.value)}

    def _json(self, raw: bytes, what: str) -> Any:
        """A reply body as JSON; anything else is an EXECUTION failure naming `what`."""
        try:
            return loads(raw)
        except ValueError:
            snippet = raw[:200].decode("utf-8", errors="replace")
            raise self._fail(f"{what} is not JSON: {snippet!r}",
                             code=ToolErrorCode.EXECUTION) from None

    def __copy__(self) -> HttpModel:
        # copy.copy's shallow copy, without its generic machinery (a proxy's route takes
        # one view of its client per request)
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        return view

    def _client(self) -> Any:
        """One connection pool per event loop (pools cannot cross loops)."""
        loop = asyncio.get_running_loop()
        entry = self._clients.get(id(loop))
        if entry is not None and entry[0]() is loop:
            return entry[1]
        httpx = _import_httpx()
        client: Any
        if self._fast:
            from ._fasthttp import FastClient

            client = FastClient(self.timeout, self.connect_timeout)
        else:
            timeout = httpx.Timeout(self.timeout, connect=self.connect_timeout)
            client = httpx.AsyncClient(timeout=timeout, follow_redirects=False)
        self._clients[id(loop)] = (weakref.ref(loop), client)
        return client

    # ------------------------------------------------------------ failures

    def _fail(self, message: str, *, status: int | None = None,
              code: ToolErrorCode | None = None, kind: str | None = None,
              retry_after: float | None = None, attempts: int = 1,
              unanswered: bool = False) -> ProviderError:
        message = self._key.scrub(message)
        error = self._policy.error(message, status=status, code=code, kind=kind, tool=self.model)
        return ProviderError(error, provider=self.provider, status=status,
                             retry_after=retry_after, attempts=attempts, unanswered=unanswered)

    def _transport_failure(self, exc: Exception, attempt: int, during: str = "") -> ProviderError:
        httpx = _import_httpx()
        name = type(exc).__name__
        detail = str(exc) or name
        # sending the request: no connection, or one the server closed without a reply
        unanswered = not during and isinstance(
            exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError))
        if isinstance(exc, httpx.TimeoutException):
            what = "connecting" if isinstance(exc, httpx.ConnectTimeout) else \
                during or "waiting for the provider"
            return self._fail(f"timed out {what} ({name})", code=ToolErrorCode.TIMEOUT,
                              kind=name, attempts=attempt, unanswered=unanswered)
        if during:
            return self._fail(f"connection lost {during}: {detail}", code=ToolErrorCode.NETWORK,
                              kind=name, attempts=attempt)
        return self._fail(f"cannot reach {self._where()}: {detail}", code=ToolErrorCode.NETWORK,
                          kind=name, attempts=attempt, unanswered=unanswered)

    def _where(self) -> str:
        parts = urlsplit(self.base_url)
        return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)

    def _status_failure(self, status: int, headers: Any, raw: bytes,
                        attempt: int) -> tuple[ProviderError, float | None]:
        text = raw[:_MAX_ERROR_BODY].decode("utf-8", errors="replace")
        try:
            data: Any = json.loads(text) if text.strip() else None
        except ValueError:
            data = None
        message = self._http.error_text(data) or (text.strip()[:500] if text.strip() else
                                                  f"HTTP {status}")
        kind = self._http.error_kind(data)
        asked = None
        for name in self._http.retry_after:
            asked = parse_retry_after(name, headers.get(name))
            if asked is not None:
                break
        if asked is None:
            asked = self._http.delay_in_body(data)
        return self._fail(message, status=status, kind=kind, retry_after=asked,
                          attempts=attempt), asked

    # ------------------------------------------------------------ sending

    async def _send(self, messages: Any, tools: Any, tool_choice: Any, stream: bool,
                    options: dict[str, Any]) -> Any:
        """POST until a 2xx arrives or the failure is final; the response (streamed
        responses still open)."""
        httpx = _import_httpx()
        client = self._client()
        if self._signer is not None:
            await asyncio.to_thread(self._signer.load)
        # the body is built (and the conversation fitted to the model's template) once;
        # each attempt only signs it anew
        url, data, headers = self._request(messages, tools, tool_choice, stream, options)
        attempt = 0
        while True:
            attempt += 1
            failure: ProviderError | None = None
            retryable = False
            asked: float | None = None
            signed = headers if self._signer is None else \
                self._signer.sign("POST", url, data, headers)
            try:
                request = client.build_request("POST", url, content=data, headers=signed)
                response = await client.send(request, stream=stream)
            except httpx.TimeoutException as exc:
                failure = self._transport_failure(exc, attempt)
                retryable = self._policy.retry_timeouts
            except httpx.TransportError as exc:
                failure = self._transport_failure(exc, attempt)
                retryable = self._policy.retry_network
            else:
                if response.is_success:
                    return response
                try:
                    raw = await response.aread()
                except httpx.HTTPError:
                    raw = b""
                finally:
                    await response.aclose()
                failure, asked = self._status_failure(response.status_code, response.headers,
                                                      raw, attempt)
                retryable = self._policy.retries_status(response.status_code)
            if retryable and attempt <= self.max_retries:
                delay = self._policy.wait(attempt, asked)
                if delay is not None:
                    log.info("%s: %s; retry %d/%d in %.2fs", self.provider, failure.message,
                             attempt, self.max_retries, delay)
                    await asyncio.sleep(delay)
                    continue
            raise failure

    # ------------------------------------------------------------ listing models

    async def list_models(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """The provider's models (`http.models` in its rule): [{id, created?, created_at?,
        display_name?}]. One GET, no retries, bounded by `timeout` seconds (default: the
        client's); a failure is a ProviderError, a rule without the section a
        CapabilityError."""
        httpx = _import_httpx()
        url = self._http.models_url(self.base_url)
        if url is None:
            raise CapabilityError(f"provider {self.provider!r} names no models endpoint "
                                  "(`http.models` in its rule)")
        url = self._with_auth_query(url)
        headers = self._base_headers("application/json")
        if self._signer is not None:
            await asyncio.to_thread(self._signer.load)
            headers = self._signer.sign("GET", url, b"", headers)
        client = self._client()
        try:
            async with asyncio.timeout(timeout if timeout is not None else self.timeout):
                response = await client.send(client.build_request("GET", url, headers=headers))
                raw = response.content  # a send that does not stream reads the whole body
        except TimeoutError:
            raise self._fail(f"timed out listing the models at {self._where()}",
                             code=ToolErrorCode.TIMEOUT) from None
        except httpx.TimeoutException as exc:
            raise self._transport_failure(exc, 1, "listing the models") from None
        except httpx.TransportError as exc:
            raise self._transport_failure(exc, 1) from None
        if not response.is_success:
            raise self._status_failure(response.status_code, response.headers, raw, 1)[0]
        return self._http.read_models(self._json(raw, "the model list"))

    async def health(self, timeout: float) -> str | None:
        """Can the server take requests: one GET of its rule's health path (`http.health`,
        else the model list) within `timeout` seconds. None: yes (a 2xx); else why not.
        A rule with neither has nothing to ask: ValueError."""
        httpx = _import_httpx()
        url = self._http.health_url(self.base_url)
        if url is None:
            raise ValueError(f"provider {self.provider!r} names no health check or model "
                             "list (`http.health`, `http.models` in its rule)")
        headers = self._base_headers("application/json")
        if self._signer is not None:
            await asyncio.to_thread(self._signer.load)
            headers = self._signer.sign("GET", url, b"", headers)
        client = self._client()
        try:
            async with asyncio.timeout(timeout):
                response = await client.send(
                    client.build_request("GET", self._with_auth_query(url), headers=headers))
        except TimeoutError:
            return f"no answer within {timeout:g}s"
        except httpx.HTTPError as exc:
            return self._key.scrub(str(exc) or type(exc).__name__)
        if response.is_success:
            return None
        return f"HTTP {response.status_code}"

    # ------------------------------------------------------------ the protocol

    async def generate(self, messages: Sequence[Message | dict[str, Any]],
                       tools: Sequence[Tool | dict[str, Any]] | None = None,
                       tool_choice: Any = "auto", **options: Any) -> ParsedResponse:
        """One model turn: the answer read back through the provider's rules."""
        tools = tools or None
        response = await self._send(messages, tools, tool_choice, False, options)
        return await self._whole(response, tools)

    async def _whole(self, response: Any, tools: Any) -> ParsedResponse:
        """A whole answer (its body read) through the provider's rules."""
        data = self._json(response.content, "the answer")
        try:
            parsed = self.engine.parse_response(data, self.provider, tools=tools,
                                                model=self.as_model)
        except ParseTimeoutError:
            raise  # the caller's deadline, not the upstream's fault
        except ToolrulesError as exc:
            raise self._fail(f"cannot read the answer: {exc}",
                             code=ToolErrorCode.EXECUTION) from None
        self.last_response = parsed
        return parsed

    def stream(self, messages: Sequence[Message | dict[str, Any]],
               tools: Sequence[Tool | dict[str, Any]] | None = None,
               tool_choice: Any = "auto", **options: Any) -> AsyncIterator[StreamChunk]:
        """One model turn as typed chunks; `last_response` holds the whole turn after the
        last chunk. A connection lost midway raises a NETWORK ProviderError after the
        chunks that arrived (a stream is retried only until the provider accepts it)."""
        return self._stream(messages, tools or None, tool_choice, options)

    async def _stream(self, messages: Any, tools: Any, tool_choice: Any,
                      options: dict[str, Any]) -> AsyncGenerator[StreamChunk, None]:
        httpx = _import_httpx()
        response = await self._send(messages, tools, tool_choice, True, options)
        ctype = (response.headers.get("content-type") or "").lower()
        if "json" in ctype and "ndjson" not in ctype and self._http.framing == "sse":
            # a server that ignored the stream flag and answered whole: its answer, as chunks
            from ._scripted import response_chunks

            try:
                await response.aread()
            except httpx.HTTPError as exc:
                raise self._transport_failure(exc, 1, "reading the answer") from None
            finally:
                await response.aclose()
            parsed = await self._whole(response, tools)
            for chunk in response_chunks(parsed):
                yield chunk
            return
        reader = self.engine.response_stream(self.provider, tools=tools, model=self.as_model)
        decoder = decoder_for(self._http.framing)
        events: list[Any] = []
        failure: ProviderError | None = None
        try:
            try:
                async for data in response.aiter_bytes():
                    for event in decoder.feed(data):
                        failure = self._event_failure(event)
                        if failure is not None:
                            break
                        events.append(event)
                        for chunk in reader.feed(event):
                            yield chunk
                    if failure is not None:
                        break
                if failure is None:
                    for event in decoder.close():
                        failure = self._event_failure(event)
                        if failure is not None:
                            break
                        events.append(event)
                        for chunk in reader.feed(event):
                            yield chunk
            except httpx.TimeoutException as exc:
                failure = self._transport_failure(exc, 1, "waiting for the next event")
            except httpx.TransportError as exc:
                failure = self._transport_failure(
                    exc, 1, f"in the middle of the stream (after {len(events)} events)")
            except FramingError as exc:
                failure = self._fail(f"unreadable stream: {exc}", code=ToolErrorCode.EXECUTION)
            except ParseTimeoutError:
                raise  # the caller's deadline, not the upstream's fault
            except ToolrulesError as exc:
                failure = self._fail(f"cannot read the stream: {exc}",
                                     code=ToolErrorCode.EXECUTION)
        finally:
            await response.aclose()
        if failure is not None:
            raise failure
        for chunk in reader.close():
            yield chunk
        self.last_response = reader.result._with_raw(events)

    def _event_failure(self, event: Any) -> ProviderError | None:
        if isinstance(event, StreamFailure):
            return self._fail(event.message, kind=event.kind)
        message = self._http.stream_failure(event)
        if message is None:
            return None
        return self._fail(message, kind=self._http.error_kind(event))

    # ------------------------------------------------------------ sync facade

    def _sync_loop(self) -> asyncio.AbstractEventLoop:
        self._loop = sync_loop(self._loop)
        return self._loop

    def generate_sync(self, messages: Sequence[Message | dict[str, Any]],
                      tools: Sequence[Tool | dict[str, Any]] | None = None,
                      tool_choice: Any = "auto", **options: Any) -> ParsedResponse:
        """`generate` for code without an event loop."""
        loop = self._sync_loop()
        return loop.run_until_complete(self.generate(messages, tools, tool_choice, **options))

    def stream_sync(self, messages: Sequence[Message | dict[str, Any]],
                    tools: Sequence[Tool | dict[str, Any]] | None = None,
                    tool_choice: Any = "auto", **options: Any) -> Iterator[StreamChunk]:
        """`stream` for code without an event loop."""
        loop = self._sync_loop()
        agen = self._stream(messages, tools or None, tool_choice, options)
        yield from iterate_sync(loop, agen)

    # ------------------------------------------------------------ closing

    async def aclose(self) -> None:
        """Close the connection pool of the running loop (others when their loop is gone)."""
        loop = asyncio.get_running_loop()
        for key, (ref, client) in list(self._clients.items()):
            if ref() is loop:
                await client.aclose()
                del self._clients[key]
            elif ref() is None or ref().is_closed():
                del self._clients[key]

    def close(self) -> None:
        """Close the sync facade's loop and its pool."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.run_until_complete(self.aclose())
            self._loop.close()
        self._loop = None

    async def __aenter__(self) -> HttpModel:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __enter__(self) -> HttpModel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


if TYPE_CHECKING:  # the client satisfies the loop's protocol
    from ._base import ModelClient

    _check: type[ModelClient] = HttpModel
