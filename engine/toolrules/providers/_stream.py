"""Provider streaming: a provider's own stream events -> StreamChunks.

The events are read by the rules' `stream.events` (JMESPath, first matching rule wins):
text and reasoning deltas pass straight through; tool-call fragments are collected per
call (by `key`) and shown as `tool_progress`; a call is *committed* (tool_start,
tool_args, tool_end) only once it is complete - an end event, the next call starting
(`sequential_calls`), a call that arrives whole, or the end of the stream - and only if
its arguments are a complete JSON object. The final `result` equals `parse_response`
of the same answer sent without streaming: both use the same decoding, name and
argument restoring, and finish-reason mapping.

When the rules read the text for calls too (`response.text_fallback`), the text goes
through the model's text parser: its text and reasoning chunks pass straight on, and the
calls it finds are committed at the end, after the native ones and without those
identical to a native call - the order and choice `parse_response` makes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .._errors import InputTooLargeError, ParseError
from .._types import ParsedResponse, StreamChunk, StreamChunkType, ToolCall
from ._messages import WireTools, _join, _listify, coerce_body, decode_call
from ._rules import Provider

__all__ = ["ProviderStream", "finish_call", "merge_calls"]

MAX_EVENT_BYTES = 4 << 20
MAX_CALL_ARGS_BYTES = 16 << 20

T = StreamChunkType


@dataclass(slots=True)
class _Call:
    ordinal: int
    id: str | None = None
    name: str | None = None
    parts: list[str] = field(default_factory=list)
    size: int = 0
    whole: Any = None
    done: bool = False
    signature: str | None = None


class ProviderStream:
    """Feed provider stream events; get typed chunks; read `result` at the end."""

    def __init__(self, prov: Provider, tools: WireTools | None, known: set[str] | None,
                 text_stream: Any = None):
        self._prov = prov
        self._tools = tools
        self._known = known
        self._text_stream = text_stream
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[Any, _Call] = {}
        self._order: list[_Call] = []
        self._committed: list[ToolCall] = []
        self._native = 0
        self._warnings: list[str] = []
        self._finish: Any = None
        self._closed = False
        self._result: ParsedResponse | None = None
        # what the text parser's stream made of the text (text fallback only)
        self._fb_text: list[str] = []
        self._fb_reasoning: list[str] = []
        self._fb_calls: list[ToolCall] = []  # complete, committed at close()

    # ------------------------------------------------------------ input

    @staticmethod
    def _event(event: Any) -> Any:
        """One event as data; a text event may be a server-sent-events line."""
        if isinstance(event, (bytes, bytearray)):
            event = event.decode("utf-8", errors="replace")
        if isinstance(event, str):
            if len(event) > MAX_EVENT_BYTES:
                raise InputTooLargeError(f"stream event is {len(event)} characters; the limit "
                                         f"is {MAX_EVENT_BYTES}")
            text = event.strip()
            if text.startswith("data:"):  # one server-sent-events line
                text = text[5:].strip()
            elif text.startswith(("event:", ":", "id:", "retry:")) or not text:
                return None
            if text == "[DONE]":
                return None
            event = text
        return coerce_body(event, MAX_EVENT_BYTES, "stream event")

    def feed(self, event: Any) -> list[StreamChunk]:
        """Consume one provider event; return the chunks it completes."""
        if self._closed:
            raise ParseError("the stream is closed")
        data = self._event(event)
        if data is None:
            return []
        out: list[StreamChunk] = []
        for rule in self._prov.stream_rules:
            if rule.when is not None and not rule.when(data):
                continue
            if rule.reasoning is not None:
                delta = _join(rule.reasoning(data))
                if delta:
                    self._reasoning.append(delta)
                    out.append(StreamChunk(T.REASONING, content=delta))
            if rule.text is not None:
                delta = _join(rule.text(data))
                if delta:
                    self._on_text(delta, out)
            if rule.calls is not None:
                self._on_calls(data, rule.calls, out)
            if rule.end is not None:
                key = rule.end(data)
                call = self._calls.get(_key(key))
                if call is not None:
                    self._commit(call, out)
            if rule.finish_reason is not None:
                value = rule.finish_reason(data)
                if value is not None:
                    self._finish = value
            break
        return out

    def _on_text(self, delta: str, out: list[StreamChunk]) -> None:
        self._text.append(delta)
        if self._text_stream is not None:
            out.extend(self._from_text_stream(self._text_stream.feed(delta)))
        else:
            out.append(StreamChunk(T.TEXT, content=delta))

    def _on_calls(self, data: Any, spec: dict[str, Any], out: list[StreamChunk]) -> None:
        each = spec.get("each")
        items = _listify(each(data)) if each is not None else [data]
        for item in items:
            if not isinstance(item, dict):
                continue
            key_expr = spec.get("key")
            key = _key(key_expr(item)) if key_expr is not None else None
            call = self._calls.get(key) if key is not None else None
            if call is None:
                if self._prov.sequential_calls:
                    for earlier in self._order:
                        self._commit(earlier, out)
                call = _Call(ordinal=len(self._order))
                self._order.append(call)
                self._calls[key if key is not None else ("#", call.ordinal)] = call
            if call.done:
                continue
            if "id" in spec and call.id is None:
                value = spec["id"](item)
                if isinstance(value, str) and value:
                    call.id = value
            if "signature" in spec and call.signature is None:
                value = spec["signature"](item)
                if isinstance(value, str) and value:
                    call.signature = value
            if "name" in spec and not call.name:
                value = spec["name"](item)
                if isinstance(value, str) and value:
                    call.name = value
            if "args" in spec:
                value = spec["args"](item)
                if isinstance(value, str):
                    if value:
                        call.size += len(value)
                        if call.size > MAX_CALL_ARGS_BYTES:
                            raise InputTooLargeError(f"tool call arguments exceed "
                                                     f"{MAX_CALL_ARGS_BYTES} bytes")
                        call.parts.append(value)
                        out.append(StreamChunk(T.TOOL_PROGRESS, index=call.ordinal,
                                               tool_call_id=call.id, tool_name=self._shown(call),
                                               args_delta=value))
                elif isinstance(value, dict):
                    call.whole = value
                    out.append(StreamChunk(T.TOOL_PROGRESS, index=call.ordinal,
                                           tool_call_id=call.id, tool_name=self._shown(call),
                                           args_delta=json.dumps(value, ensure_ascii=False)))
            if spec.get("complete"):
                self._commit(call, out)

    def _shown(self, call: _Call) -> str | None:
        if call.name and self._tools is not None and call.name in self._tools.by_wire:
            return self._tools.by_wire[call.name][0]
        return call.name

    def _commit(self, call: _Call, out: list[StreamChunk]) -> None:
        if call.done:
            return
        call.done = True
        args: Any = call.whole if call.whole is not None else (
            "".join(call.parts) if call.parts else None)
        tc = decode_call(self._prov, call.id, call.name, args, self._warnings, call.signature)
        if tc is None:
            return
        tc = finish_call(tc, self._tools, self._known, self._warnings)
        self._native += 1
        self._emit(tc, out)

    def _emit(self, tc: ToolCall, out: list[StreamChunk]) -> None:
        index = len(self._committed)
        self._committed.append(tc)
        text = tc.arguments_json()
        out.append(StreamChunk(T.TOOL_START, index=index, tool_call_id=tc.id, tool_name=tc.name))
        out.append(StreamChunk(T.TOOL_ARGS, index=index, tool_call_id=tc.id, tool_name=tc.name,
                               args_delta=text))
        out.append(StreamChunk(T.TOOL_END, index=index, tool_call_id=tc.id, tool_name=tc.name,
                               arguments=tc.arguments))

    # ------------------------------------------------------------ the end

    def close(self) -> list[StreamChunk]:
        """The stream ended: commit complete calls, drop incomplete ones; the rest."""
        if self._closed:
            return []
        out: list[StreamChunk] = []
        for call in self._order:
            self._commit(call, out)
        finish = self._prov.finish(self._finish, bool(self._committed))
        if self._text_stream is not None:
            out.extend(self._from_text_stream(self._text_stream.close(finish_reason=finish)))
            for tc in merge_calls(self._committed, self._fb_calls)[len(self._committed):]:
                self._emit(tc, out)
        self._closed = True
        return out

    def _from_text_stream(self, chunks: list[StreamChunk]) -> list[StreamChunk]:
        """Chunks of the text parser: text and reasoning pass on (and are recorded so
        `result` is what a client rebuilds); its calls wait for close()."""
        out: list[StreamChunk] = []
        for c in chunks:
            if c.type is T.TEXT and c.content:
                self._fb_text.append(c.content)
                out.append(c)
            elif c.type is T.REASONING and c.content:
                self._fb_reasoning.append(c.content)
                out.append(c)
            elif c.type is T.TOOL_END and c.tool_name:
                self._fb_calls.append(ToolCall(id=c.tool_call_id, name=c.tool_name,
                                               arguments=c.arguments or {}))
            elif c.type is T.TOOL_PROGRESS:  # numbered after the calls already known
                out.append(StreamChunk(T.TOOL_PROGRESS,
                                       index=len(self._committed) + len(self._fb_calls),
                                       tool_call_id=c.tool_call_id, tool_name=c.tool_name,
                                       args_delta=c.args_delta))
        return out

    @property
    def result(self) -> ParsedResponse:
        """The whole answer so far (final once `close()` has run)."""
        if self._result is not None:
            return self._result
        calls = list(self._committed)
        text = "".join(self._text) or None
        reasoning = "".join(self._reasoning) or None
        repairs: tuple[str, ...] = ()
        warnings = list(self._warnings)
        finish = self._prov.finish(self._finish, self._native > 0)
        if self._text_stream is not None:
            text = "".join(self._fb_text) or None
            reasoning = "".join([*self._reasoning, *self._fb_reasoning]) or None
            if calls and finish == "stop":
                finish = "tool_calls"
            done = getattr(self._text_stream, "result", None)
            if done is not None:
                repairs = tuple(done.repairs)
                warnings.extend(done.warnings)
        result = ParsedResponse(content=text, reasoning_content=reasoning, tool_calls=tuple(calls),
                                finish_reason=finish, repairs=repairs, raw=None,
                                warnings=tuple(warnings))
        if self._closed:
            self._result = result
        return result


def _key(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return value


def _same(call: ToolCall) -> tuple[str, str]:
    return call.name, json.dumps(call.arguments, sort_keys=True, ensure_ascii=False, default=str)


def merge_calls(native: Any, from_text: Any) -> list[ToolCall]:
    """Native calls, then the calls read from the text that are not identical (same name
    and arguments) to a native one."""
    out = list(native)
    seen = {_same(c) for c in out}
    out.extend(c for c in from_text if _same(c) not in seen)
    return out


def finish_call(call: ToolCall, tools: WireTools | None, known: set[str] | None,
                warnings: list[str]) -> ToolCall:
    """Wire name -> original name, arguments restored; a warning for unknown tools."""
    if tools is not None:
        call = tools.restore(call)
    if known is not None and call.name not in known:
        warnings.append(f"unknown tool {call.name!r}")
    return call
