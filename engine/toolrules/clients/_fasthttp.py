"""A small HTTP/1.1 client on asyncio streams, for plain-http upstreams on a hot path.

`HttpModel(..., fast=True)` uses it for `http://` base URLs when no proxy variable
applies (a proxy in front of a model server on the same host or network); everything
else goes through httpx. It speaks what model servers answer - Content-Length and
chunked bodies, keep-alive - with a pool of idle connections per address, a timeout
per connect and per read, and one retry on a fresh connection when a pooled one turns
out closed before any byte of the answer arrived (servers drop idle keep-alive
connections). It presents the part of httpx's interface the client uses and raises
httpx's exception types, so `HttpModel`'s retries and error mapping apply unchanged.

Why: a proxy pays the upstream hop on every request; httpx costs several times the
CPU of the exchange itself (see `toolrules bench serve`).
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["FastClient", "usable"]

_MAX_HEADER = 64 << 10
_MAX_IDLE = 64
_READ = 64 << 10


def usable(url: str) -> bool:
    """Can the fast client reach `url`: plain http, no proxy variable for its host."""
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


class _Conn:
    __slots__ = ("reader", "reused", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.reused = False

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class FastResponse:
    """The answer: status, headers, and the body (read whole, or iterated)."""

    def __init__(self, client: FastClient, conn: _Conn, request: _Request, status: int,
                 headers: _Headers, keep: bool):
        self._client = client
        self._conn: _Conn | None = conn
        self._request = request
        self.status_code = status
        self.headers = headers
        self._keep = keep
        self.content = b""
        te = headers.get("transfer-encoding", "")
        self._chunked = "chunked" in te.lower()
        length = headers.get("content-length")
        self._length = int(length) if length and length.strip().isdigit() else None
        if request.method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            self._length, self._chunked = 0, False
        if not self._chunked and self._length is None:
            self._keep = False  # the body ends when the server closes

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    async def _read(self, coro: Any) -> Any:
        httpx = _httpx()
        try:
            async with asyncio.timeout(self._client.read_timeout):
                return await coro
        except TimeoutError:
            self._drop()
            raise httpx.ReadTimeout("timed out reading the answer") from None
        except asyncio.IncompleteReadError:
            self._drop()
            raise httpx.RemoteProtocolError("the server closed the connection in the middle "
                                            "of the answer") from None
        except (ConnectionError, OSError) as exc:
            self._drop()
            raise httpx.ReadError(str(exc) or type(exc).__name__) from None

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            return
        reader = conn.reader
        if self._chunked:
            async for data in self._chunks(reader):
                yield data
        elif self._length is not None:
            left = self._length
            while left > 0:
                data = await self._read(reader.read(min(left, _READ)))
                if not data:
                    self._drop()
                    raise _httpx().RemoteProtocolError("the server closed the connection "
                                                       "before the whole body arrived")
                left -= len(data)
                yield data
        else:
            while True:
                data = await self._read(reader.read(_READ))
                if not data:
                    break
                yield data
        self._release()

    async def _chunks(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        """A chunked body's data: every chunk that arrived in one read is decoded from the
        buffer and given as one piece (one await per read, not per chunk line)."""
        buf = bytearray()
        pos = 0
        trailers = False  # the last chunk was read: trailer lines up to an empty one
        while True:
            parts: list[bytes] = []
            while True:
                nl = buf.find(b"\r\n", pos)
                if nl < 0:
                    if len(buf) - pos > _MAX_HEADER:
                        self._drop()
                        raise _httpx().RemoteProtocolError("a chunk-size or trailer line "
                                                           "is too long")
                    break
                if trailers:
                    empty = nl == pos
                    pos = nl + 2
                    if empty:
                        if parts:
                            yield b"".join(parts)
                        if pos < len(buf):  # bytes after the answer: not reusable
                            self._keep = False
                        return
                    continue
                try:
                    size = int(buf[pos:nl].split(b";", 1)[0].strip() or b"0", 16)
                except ValueError:
                    self._drop()
                    raise _httpx().RemoteProtocolError(
                        f"a bad chunk-size line: {buf[pos:nl][:40]!r}") from None
                if size == 0:
                    trailers, pos = True, nl + 2
                    continue
                end = nl + 2 + size
                if len(buf) < end + 2:
                    break
                parts.append(bytes(buf[nl + 2:end]))
                pos = end + 2
            if parts:
                yield parts[0] if len(parts) == 1 else b"".join(parts)
            data = await self._read(reader.read(_READ))
            if not data:
                self._drop()
                raise _httpx().RemoteProtocolError("the server closed the connection in the "
                                                   "middle of the answer")
            if pos:
                del buf[:pos]  # what was decoded (the rest waits for its end)
                pos = 0
            buf += data

    async def aread(self) -> bytes:
        if self._conn is None:
            return self.content
        if self._length is not None and not self._chunked:
            self.content = await self._read(self._conn.reader.readexactly(self._length)) \
                if self._length else b""
            self._release()
            return self.content
        self.content = b"".join([part async for part in self.aiter_bytes()])
        return self.content

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._client._give_back(self._request, conn, self._keep)

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
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(request.host, request.port,
                                                               limit=_MAX_HEADER)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {request.host}:{request.port} "
                                       "timed out") from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from None
        return _Conn(reader, writer)

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
            try:
                conn.writer.write(payload)
                async with asyncio.timeout(self.read_timeout):
                    head = await conn.reader.readuntil(b"\r\n\r\n")
            except TimeoutError:
                conn.close()
                raise httpx.ReadTimeout("timed out waiting for the answer") from None
            except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
                conn.close()
                if conn.reused:  # a pooled connection the server had closed: once more
                    continue
                if isinstance(exc, asyncio.IncompleteReadError):
                    raise httpx.RemoteProtocolError("the server closed the connection "
                                                    "without answering") from None
                raise httpx.ReadError(str(exc) or type(exc).__name__) from None
            except asyncio.LimitOverrunError:
                conn.close()
                raise httpx.RemoteProtocolError("the answer's headers are too large") from None
            except asyncio.CancelledError:  # the caller gave up (its own deadline)
                conn.close()
                raise
            break
        else:  # pragma: no cover - the loop always breaks or raises
            raise httpx.ReadError("no connection")
        status_line, _, head = head.partition(b"\r\n")
        try:
            version, status_text = status_line.decode("latin-1").split(" ", 1)
            status = int(status_text.split(" ", 1)[0])
        except ValueError:
            conn.close()
            raise httpx.RemoteProtocolError(f"not an HTTP answer: {status_line[:80]!r}") \
                from None
        headers = _Headers()
        for line in head.decode("latin-1").split("\r\n"):
            if ":" in line:
                name, _, value = line.partition(":")
                key = name.strip().lower()
                value = value.strip()
                headers[key] = f"{headers[key]}, {value}" if key in headers else value
        connection = headers.get("connection", "").lower()
        keep = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
        response = FastResponse(self, conn, request, status, headers, keep)
        if not stream:
            await response.aread()
        return response

    async def aclose(self) -> None:
        self._closed = True
        for pool in self._idle.values():
            for conn in pool:
                conn.close()
        self._idle.clear()

