"""The model client protocol: what the tool loop needs from a model, whatever serves it.

A client turns a conversation as neutral values (Messages, Tools) into one model turn and
reads the answer back as a `ParsedResponse` (or a stream of `StreamChunk`s). The wire side
is the client's: native tool fields for a model that has them, the emulation prompt and the
model's dialect for one that does not (`Engine.build_request`, `Engine.text_parser`). The
loop never sees a wire format.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from .._types import Message, ParsedResponse, StreamChunk, Tool

__all__ = ["ModelClient", "iterate_sync", "sync_loop"]


@runtime_checkable
class ModelClient(Protocol):
    """One model behind any transport (HTTP provider, local model, script).

    `generate` answers one turn. `stream` yields the same turn as typed chunks (the
    streaming contract: concatenated text/reasoning and the committed calls equal what
    `generate` returns); after the last chunk a client may set `last_response` to the
    complete `ParsedResponse` (its `raw` is what came over the wire), which a trace
    records. `tools=None` (or empty) means a turn without tools.
    """

    model: str
    """The model id; `Engine.capability(model)` decides native tools or emulation."""

    async def generate(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None,
                       tool_choice: Any = "auto", **kw: Any) -> ParsedResponse:
        ...

    def stream(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None,
               tool_choice: Any = "auto", **kw: Any) -> AsyncIterator[StreamChunk]:
        ...


def sync_loop(current: asyncio.AbstractEventLoop | None) -> asyncio.AbstractEventLoop:
    """The private event loop of a client's sync facade: `current` while it is open, else a
    new one. Refused inside a running loop, where the async methods are the way."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("generate_sync/stream_sync cannot run inside an event loop; "
                           "use `await model.generate(...)` / `async for ... in "
                           "model.stream(...)` there")
    if current is None or current.is_closed():
        return asyncio.new_event_loop()
    return current


def iterate_sync(loop: asyncio.AbstractEventLoop, agen: Any) -> Iterator[StreamChunk]:
    """Drive an async generator of chunks from code without an event loop (the sync
    facades' `stream_sync`); the generator is closed however iteration ends."""
    try:
        while True:
            try:
                chunk = loop.run_until_complete(agen.__anext__())
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        loop.run_until_complete(agen.aclose())
