"""The HTTP/1.1 protocol `toolrules serve` runs on: uvicorn's httptools protocol, with an
answer's status line and headers sent together with the first bytes of its body.

uvicorn writes the head of an answer as soon as the app starts it, and the body apart: two
writes, two TCP segments and two wake-ups of the client for every answer, though the body
nearly always follows at once (a whole answer in the same step; a stream's first event
soon after). Here the head is held until the next write, or until the end of the event
loop's current pass, whichever comes first - the bytes and their order are unchanged, and
a head is never held longer than the loop takes to come round.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["HeadWithBody", "protocol"]

_HEAD_START = b"HTTP/1."
_HEAD_END = b"\r\n\r\n"


class _HeldHead:
    """The connection's transport, holding a write that is an answer's head (it starts
    with the status line and ends with the blank line) until the next write."""

    __slots__ = ("_due", "_head", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._head: bytes | None = None
        self._due = False

    def write(self, data: bytes) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self._transport.write(head + bytes(data))
        elif data[:7] == _HEAD_START and data[-4:] == _HEAD_END:
            self._head = bytes(data)
            if not self._due:
                self._due = True
                self._loop.call_soon(self._flush)
        else:
            self._transport.write(data)

    def _flush(self) -> None:
        self._due = False
        head = self._head
        if head is not None:
            self._head = None
            if not self._transport.is_closing():
                self._transport.write(head)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing, pause_reading, get_extra_info ...
        return getattr(self._transport, name)


class HeadWithBody(HttpToolsProtocol):
    """uvicorn's httptools protocol, an answer's head sent with its body (see the module)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_HeldHead(transport, self.loop))  # type: ignore[arg-type]


def protocol() -> str:
    """uvicorn's `http` setting for the proxy: this protocol where httptools is installed
    (the serve extra brings it), else uvicorn's h11 one."""
    import importlib.util

    if importlib.util.find_spec("httptools") is None:  # pragma: no cover - serve extra
        return "h11"
    return f"{__name__}:HeadWithBody"
