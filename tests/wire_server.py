"""A scriptable HTTP server on 127.0.0.1 for client tests: real sockets, real HTTP/1.1.

Each request takes the next scripted `Reply` (status, headers, a whole body or chunks
sent with chunked transfer encoding, delays, a connection dropped after some chunks) and
is recorded (method, path, query, headers, body). Helpers frame provider events as the
providers do: server-sent events, NDJSON, AWS event-stream messages.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from toolrules.clients._framing import encode_aws_event


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None          # sent whole, with Content-Length
    chunks: list[bytes] | None = None  # sent with Transfer-Encoding: chunked
    delay: float = 0.0                 # before the status line
    chunk_delay: float = 0.0           # between chunks
    drop_after: int | None = None      # close the socket after this many chunks
    hang_up: bool = False              # close the socket without answering at all


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    at: float

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


def json_reply(data: Any, status: int = 200, headers: dict[str, str] | None = None,
               **kw: Any) -> Reply:
    return Reply(status=status, headers={"Content-Type": "application/json", **(headers or {})},
                 body=json.dumps(data).encode(), **kw)


def sse_reply(events: list[Any], *, named: bool = False, **kw: Any) -> Reply:
    """Server-sent events: dicts as `data: JSON` (with `event: TYPE` when `named`);
    strings as given (`data: [DONE]`, or a preformatted `data: ...` line)."""
    chunks = []
    for ev in events:
        if isinstance(ev, str):
            line = ev if ev.startswith(("data:", "event:", ":")) else f"data: {ev}"
            chunks.append((line + "\n\n").encode())
        else:
            head = f"event: {ev.get('type')}\n" if named and isinstance(ev, dict) and ev.get("type") else ""
            chunks.append(f"{head}data: {json.dumps(ev)}\n\n".encode())
    return Reply(headers={"Content-Type": "text/event-stream"}, chunks=chunks, **kw)


def ndjson_reply(events: list[Any], **kw: Any) -> Reply:
    chunks = [(ev if isinstance(ev, str) else json.dumps(ev)).encode() + b"\n" for ev in events]
    return Reply(headers={"Content-Type": "application/x-ndjson"}, chunks=chunks, **kw)


def aws_event_reply(events: list[dict[str, Any]], **kw: Any) -> Reply:
    """Each `{EVENT_TYPE: payload}` as one binary event-stream message."""
    chunks = []
    for ev in events:
        ((etype, payload),) = ev.items()
        chunks.append(encode_aws_event({":event-type": etype, ":content-type": "application/json",
                                        ":message-type": "event"}, json.dumps(payload).encode()))
    return Reply(headers={"Content-Type": "application/vnd.amazon.eventstream"}, chunks=chunks,
                 **kw)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # concurrent clients (the default backlog of 5 resets some)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (timeouts) is part of the tests


class WireServer:
    """`with WireServer() as srv:` ... `srv.url`, `srv.replies.append(Reply(...))`,
    `srv.requests`."""

    def __init__(self, responder: Any = None) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Seen] = []
        # GET /props (where llama-server says which chat template it renders, asked by the
        # proxy at start) is answered apart: 404 as most servers do, unless a test sets a
        # reply; it is counted here, not in `requests`, and takes no scripted reply.
        self.props: Reply | None = None
        self.props_asked = 0
        # responder(seen) -> Reply: a reply made from the request (when none is scripted)
        self.responder = responder
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                outer._handle(self)

            do_GET = do_POST

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def __enter__(self) -> WireServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        parts = urlsplit(h.path)
        seen = Seen(h.command, parts.path, parse_qs(parts.query),
                    {k.lower(): v for k, v in h.headers.items()}, body, time.monotonic())
        if h.command == "GET" and parts.path == "/props":
            self.props_asked += 1
            reply = self.props or Reply(status=404, body=b'{"error": {"message": "Not Found"}}')
        else:
            self.requests.append(seen)
            reply = self._next(seen)
        self._send(h, reply)

    def _next(self, seen: Seen) -> Reply:
        if self.replies:
            reply = self.replies.popleft()
        elif self.responder is not None:
            reply = self.responder(seen)
        else:
            reply = Reply(status=500, body=b'{"error": {"message": "no reply scripted"}}')
        return reply

    def _send(self, h: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.delay:
            time.sleep(reply.delay)
        if reply.hang_up:
            h.close_connection = True
            with contextlib.suppress(OSError):
                h.connection.shutdown(socket.SHUT_RDWR)
            return
        try:
            h.send_response(reply.status)
            for k, v in reply.headers.items():
                h.send_header(k, v)
            if reply.chunks is None:
                data = reply.body or b""
                h.send_header("Content-Length", str(len(data)))
                h.end_headers()
                h.wfile.write(data)
                h.wfile.flush()
                return
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            h.wfile.flush()
            for i, chunk in enumerate(reply.chunks):
                if reply.drop_after is not None and i >= reply.drop_after:
                    h.wfile.flush()
                    h.connection.shutdown(socket.SHUT_RDWR)
                    h.close_connection = True
                    return
                h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                h.wfile.flush()
                if reply.chunk_delay:
                    time.sleep(reply.chunk_delay)
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except OSError:
            h.close_connection = True
