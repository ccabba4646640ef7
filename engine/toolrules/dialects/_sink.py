"""Where the scanner's events go: a `Sink` streams chunks or collects a parse result.

The machine reports text (content or reasoning), calls, progress fragments and
warnings; the sink turns them into StreamChunks (streaming) or the pieces of a
ParsedResponse (parse) - the same events either way, so a stream split any way gives
what parse() gives. It also holds tentative calls (inside reasoning) until they turn
out calls or text, strips the ends of each text channel, drops declined and repeated
calls, and gives calls their ids.
"""

from __future__ import annotations

import itertools
import json
import secrets
from typing import Any

from .._types import StreamChunk, StreamChunkType, ToolCall

__all__ = ["KEY_JSON", "Sink", "next_call_id"]

_WS = " \t\r\n"
# built once: json.dumps with options builds an encoder per call (a call's cost, per call)
KEY_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False).encode
_ARGS_JSON = json.JSONEncoder(ensure_ascii=False).encode
_ID_PREFIX = secrets.token_hex(5)  # unique per process; the counter makes ids unique in it
_ID_COUNTER = itertools.count(1)

_TEXT = StreamChunkType.TEXT
_REASONING = StreamChunkType.REASONING
_PROGRESS = StreamChunkType.TOOL_PROGRESS


def next_call_id(index: int, sequential: bool) -> str:
    """An id for a call the format gave none: call_<index>, or unique in the process."""
    return f"call_{index}" if sequential else f"call_{_ID_PREFIX}{next(_ID_COUNTER):x}"


class _Channel:
    """One text stream of a response (content or reasoning) and its strip state."""

    __slots__ = ("chunk", "parts", "pending", "started")

    def __init__(self, chunk: StreamChunkType):
        self.chunk = chunk
        self.parts: list[str] = []
        self.started = False   # something non-blank was emitted
        self.pending = ""      # trailing whitespace held until more text follows


class Sink:
    """Receives scanner events; streams chunks or collects a parse result."""

    __slots__ = ("calls", "content", "decline", "dedupe", "deferred", "ids", "muted", "out",
                 "reasoning", "repairs", "seen", "streaming", "strip", "tools", "warnings")

    def __init__(self, streaming: bool, strip: bool, tools: dict[str, Any], dedupe: bool,
                 ids: str):
        self.streaming = streaming
        self.strip = strip
        self.tools = tools
        self.dedupe = dedupe
        self.ids = ids
        self.out: list[StreamChunk] = []
        self.content = _Channel(_TEXT)
        self.reasoning = _Channel(_REASONING)
        self.calls: list[ToolCall] = []
        self.repairs: list[str] = []
        self.warnings: list[str] = []
        self.seen: set[str] | None = None
        self.deferred: list[tuple[Any, ...]] | None = None
        self.muted = False
        self.decline: frozenset[str] = frozenset()  # names that mean "no call"

    # ------------------------------------------------------------ text

    def text(self, kind: str, s: str) -> None:
        if self.muted or not s:
            return
        if self.deferred is not None:
            self.deferred.append(("text", kind, s))
            return
        ch = self.content if kind == "content" else self.reasoning
        if ch.started and not ch.pending and s[-1] not in _WS:  # (per delta: the common case)
            ch.parts.append(s)
            if self.streaming:
                self.out.append(StreamChunk(ch.chunk, s))
            return
        self._text(kind, s)

    def _text(self, kind: str, s: str) -> None:
        ch = self.content if kind == "content" else self.reasoning
        if self.strip:
            if not ch.started:
                s = s.lstrip(_WS)
                if not s:
                    return
            core = s.rstrip(_WS)
            if not core:
                ch.pending += s
                return
            tail = s[len(core):]
            s = ch.pending + core
            ch.pending = tail
        ch.started = True
        ch.parts.append(s)
        if self.streaming:
            self.out.append(StreamChunk(ch.chunk, s))

    def has_content(self) -> bool:
        return self.content.started

    # ------------------------------------------------------------ calls

    def call(self, name: str, arguments: dict[str, Any], call_id: str | None, raw: str,
             repairs: list[str]) -> None:
        if self.muted:
            return
        if self.deferred is not None:
            self.deferred.append(("call", name, arguments, call_id, raw, repairs))
            return
        self._call(name, arguments, call_id, repairs)

    def _call(self, name: str, arguments: dict[str, Any], call_id: str | None,
              repairs: list[str]) -> None:
        if name in self.decline and name not in self.tools:
            self.warn(f"declined-call: {name}")
            return
        if self.dedupe:
            key = name + "\0" + KEY_JSON(arguments)
            if self.seen is None:
                self.seen = set()
            if key in self.seen:
                self.warn(f"duplicate-call-dropped: {name}")
                return
            self.seen.add(key)
        for r in repairs:
            if r not in self.repairs:
                self.repairs.append(r)
        if self.tools and name not in self.tools:
            self.warnings.append(f"unknown-tool: {name}")
        index = len(self.calls)
        if call_id is None:
            call_id = next_call_id(index, self.ids == "sequential")
        call = ToolCall(id=call_id, name=name, arguments=arguments)
        self.calls.append(call)
        if self.streaming:
            args_json = _ARGS_JSON(arguments)
            self.out.append(StreamChunk(StreamChunkType.TOOL_START, index=index,
                                        tool_call_id=call_id, tool_name=name))
            self.out.append(StreamChunk(StreamChunkType.TOOL_ARGS, index=index,
                                        tool_call_id=call_id, tool_name=name, args_delta=args_json))
            self.out.append(StreamChunk(StreamChunkType.TOOL_END, index=index,
                                        tool_call_id=call_id, tool_name=name, arguments=arguments))

    def progress(self, name: str | None, fragment: str) -> None:
        if self.streaming and fragment and not self.muted:  # per delta: positional is faster
            self.out.append(StreamChunk(_PROGRESS, None, len(self.calls), None, name, fragment))

    def warn(self, message: str) -> None:
        if not self.muted and message not in self.warnings:
            self.warnings.append(message)

    # ------------------------------------------------------------ deferral

    def defer(self) -> None:
        if self.deferred is None and not self.muted:
            self.deferred = []

    def marker(self, s: str) -> None:
        """A section marker around tentative calls: text again if the calls turn out text."""
        if self.deferred is not None and not self.muted:
            self.deferred.append(("marker", s))

    def resolve(self, calls_are_text: bool) -> None:
        """End a deferral: replay events; calls become reasoning text if `calls_are_text`."""
        events, self.deferred = self.deferred, None
        for ev in events or ():
            if ev[0] == "text":
                self._text(ev[1], ev[2])
            elif ev[0] == "marker":
                if calls_are_text:
                    self._text("reasoning", ev[1])
            elif calls_are_text:
                self._text("reasoning", ev[4])
            else:
                self._call(ev[1], ev[2], ev[3], ev[5])


