"""A small HTTP/1.1 client on an asyncio protocol and httptools' parser, for plain-http
upstreams on a hot path.

`HttpModel(..., fast=True)` uses it for `http://` base URLs when no proxy variable
applies (a proxy in front of a model server on the same host or network) and httptools
is installed (the serve extra); everything else goes through httpx. It speaks what model
servers answer - Content-Length, chunked and until-close bodies, keep-alive - with a
pool of idle connections per address, a timeout per connect and per wait for data, and
one retry on a fresh connection when a pooled one turns out closed before any byte of
the answer arrived (servers drop idle keep-alive connections). It presents the part of
httpx's interface the client uses and raises httpx's exception types, so `HttpModel`'s
retries and error mapping apply unchanged.

Why: a proxy pays the upstream hop on every request; httpx costs several times the
CPU of the exchange itself, and even asyncio's streams a good part of it: here the bytes
go from the socket to the parser to the caller with no reader in between, and a stream
gives its caller whatever arrived in one piece (see `toolrules bench serve`).
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from .._aio import time_out

__all__ = ["FastClient", "usable"]

_MAX_HEADER = 64 << 10
_MAX_IDLE = 64


def usable(url: str) -> bool:
    """Can the fast client reach `url`: plain http, no proxy variable for its host (and
    httptools installed)."""
    import importlib.util

    if importlib.util.find_spec("httptools") is None:
        return False
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    proxies = urllib.request.getproxies()
    if not proxies.get("http") and not proxies.get("all"):
        return True
    return bool(urllib.request.proxy_bypass(parts.hostname))


def _httpx() -> Any:
    import httpx

    return httpx


class _Headers(dict[str, str]):
    """Response headers, names lower-cased (look-ups by lower-case name)."""

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)


class _Request:
    __slots__ = ("content", "headers", "host", "method", "port", "target", "url")

    def __init__(self, method: str, url: str, content: bytes, headers: Mapping[str, str]):
        where = _WHERE.get(url)
        if where is None:  # a client asks the same few URLs again and again
            parts = urlsplit(url)
            where = (parts.hostname or "127.0.0.1", parts.port or 80,
                     (parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
            if len(_WHERE) >= 256:
                _WHERE.clear()
            _WHERE[url] = where
        self.method = method
        self.url = url
        self.host, self.port, self.target = where
        self.content = content
        self.headers = headers


# host, port and request target by URL
_WHERE: dict[str, tuple[str, int, str]] = {}


class _Conn(asyncio.Protocol):
    """One connection: the transport, httptools' response parser, and the answer being
    read (its head, the body pieces not taken yet, whether it is complete)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        import httptools

        self.loop = loop
        self.transport: Any = None
        self.parser = httptools.HttpResponseParser(self)
        self.parse_error: Any = httptools.HttpParserError
        self.closed = False
        self.reused = False
        self.waiter: asyncio.Future[None] | None = None
        self.error: str | None = None
        self._start(False)

    def _start(self, head_only: bool) -> None:
        """Ready for the next answer (`head_only`: to a HEAD request, no body)."""
        self.head_only = head_only
        self.status = 0
        self.headers = _Headers()
        self.head = False        # the status line and headers were read
        self.complete = False    # the whole answer was read
        self.keep = False
        self.got = 0             # bytes of this answer so far
        self.pieces: list[bytes] = []

    # -------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        try:
            self.parser.feed_data(data)
        except self.parse_error as exc:
            self.error = f"not a valid HTTP answer: {exc}"
        if not self.head and self.got > _MAX_HEADER and self.error is None:
            self.error = "the answer's headers are too large"
        if self.error is not None:
            self.transport.close()
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake()

    # -------------------------------------------------- httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1").strip()
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep = self.parser.should_keep_alive()
        self.head = True
        if self.head_only:  # the parser would wait for the body the headers announce:
            self.keep = False  # this connection is not used again
            self.complete = True
        elif self.status in (204, 304) or 100 <= self.status < 200:
            self.complete = True

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)

    def on_message_complete(self) -> None:
        self.complete = True

    # -------------------------------------------------- waiting

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        """Until more arrives, the connection ends, or `timeout` s pass (TimeoutError)."""
        waiter = self.waiter = self.loop.create_future()
        timer = self.loop.call_later(timeout, time_out, waiter) if timeout else None
        try:
            await waiter
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()

    def usable(self) -> bool:
        return not self.closed and self.error is None and not self.transport.is_closing()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class FastResponse:
    """The answer: status, headers, and the body (read whole, or iterated)."""

    def __init__(self, client: FastClient, conn: _Conn, request: _Request):
        self._client = client
        self._conn: _Conn | None = conn
        self._request = request
        self.status_code = conn.status
        self.headers = conn.headers
        self.content = b""
        # a body that ends when the server closes cannot be followed by another answer
        self._until_close = ("content-length" not in conn.headers and
                             "chunked" not in conn.headers.get("transfer-encoding", "").lower())

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives: whatever arrived together, in one piece."""
        while (piece := await self._next()) is not None:
            yield piece

    async def _next(self) -> bytes | None:
        """The next piece of the body (what arrived together), None at its end."""
        conn = self._conn
        if conn is None:
            return None
        while True:
            if conn.pieces:
                pieces = conn.pieces
                conn.pieces = []
                return pieces[0] if len(pieces) == 1 else b"".join(pieces)
            if conn.complete:
                self._release()
                return None
            if conn.error is not None:
                self._drop()
                raise _httpx().RemoteProtocolError(conn.error)
            if conn.closed:
                if self._until_close:  # the body ends when the server closes
                    self._release()
                    return None
                self._drop()
                raise _httpx().RemoteProtocolError("the server closed the connection in "
                                                   "the middle of the answer")
            try:
                await conn.wait(self._client.read_timeout)
            except TimeoutError:
                self._drop()
                raise _httpx().ReadTimeout("timed out reading the answer") from None
            except asyncio.CancelledError:
                self._drop()
                raise

    async def aread(self) -> bytes:
        # a loop, not `async for`: an async generator costs a registration with the loop
        # and a finalizer per answer
        parts = []
        while (piece := await self._next()) is not None:
            parts.append(piece)
        if parts:
            self.content = parts[0] if len(parts) == 1 else b"".join(parts)
        return self.content

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._client._give_back(self._request, conn,
                                    conn.keep and not self._until_close)

    async def aclose(self) -> None:
        self._drop()  # an answer not read to its end leaves the connection unusable


class FastClient:
    """`build_request` / `send` / `aclose`, like the httpx.AsyncClient calls HttpModel
    makes; one instance per event loop."""

    def __init__(self, timeout: float | None, connect_timeout: float | None):
        self.read_timeout = timeout
        self.connect_timeout = connect_timeout
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._closed = False

    def build_request(self, method: str, url: str, *, content: bytes = b"",
                      headers: Mapping[str, str] | None = None) -> _Request:
        return _Request(method, url, content, headers or {})

    async def _connect(self, request: _Request) -> _Conn:
        httpx = _httpx()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _transport, conn = await loop.create_connection(
                    lambda: _Conn(loop), request.host, request.port)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {request.host}:{request.port} "
                                       "timed out") from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from None
        return conn

    def _take(self, request: _Request) -> _Conn | None:
        pool = self._idle.get((request.host, request.port))
        while pool:
            conn = pool.pop()
            if conn.usable():
                conn.reused = True
                return conn
            conn.close()
        return None

    def _give_back(self, request: _Request, conn: _Conn, keep: bool) -> None:
        if not keep or self._closed or not conn.usable():
            conn.close()
            return
        pool = self._idle.setdefault((request.host, request.port), [])
        if len(pool) < _MAX_IDLE:
            pool.append(conn)
        else:
            conn.close()

    def _head(self, request: _Request) -> bytes:
        lines = [f"{request.method} {request.target} HTTP/1.1",
                 f"host: {request.host}:{request.port}",
                 f"content-length: {len(request.content)}"]
        for k, v in request.headers.items():
            if k.lower() not in ("host", "content-length", "connection"):
                lines.append(f"{k}: {v}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def send(self, request: _Request, *, stream: bool = False) -> FastResponse:
        httpx = _httpx()
        payload = self._head(request) + request.content
        for _attempt in range(2):
            conn = self._take(request) or await self._connect(request)
            conn._start(request.method == "HEAD")
            conn.transport.write(payload)
            try:
                while not conn.head:
                    if conn.error is not None:
                        conn.close()
                        raise httpx.RemoteProtocolError(conn.error)
                    if conn.closed:
                        break
                    await conn.wait(self.read_timeout)
            except TimeoutError:
                conn.close()
                raise httpx.ReadTimeout("timed out waiting for the answer") from None
            except asyncio.CancelledError:  # the caller gave up (its own deadline)
                conn.close()
                raise
            if conn.head:
                break
            conn.close()
            if conn.reused and conn.got == 0:  # a pooled connection the server had closed
                continue
            raise httpx.RemoteProtocolError("the server closed the connection without "
                                            "answering")
        else:  # pragma: no cover - the loop always breaks or raises
            raise httpx.ReadError("no connection")
        response = FastResponse(self, conn, request)
        if not stream:
            await response.aread()
        return response

    async def aclose(self) -> None:
        self._closed = True
        for pool in self._idle.values():
            for conn in pool:
                conn.close()
        self._idle.clear()

