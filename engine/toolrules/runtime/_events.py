"""What a tool loop reports: typed events while it runs, and its outcome at the end."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from .._errors import ParseError
from .._types import ContentPart, Message, ToolCall, ToolResult

__all__ = [
    "STOP_REASONS",
    "LoopEvent",
    "LoopEventType",
    "LoopOutcome",
    "TraceLog",
    "call_dict",
    "message_dict",
    "message_from_dict",
    "result_dict",
]

# Why a loop stopped; only "done" is a success.
STOP_REASONS = (
    "done",               # the model gave its final answer
    "max_rounds",         # the round limit: a closing answer without tools
    "max_tool_calls",     # the tool call limit: a closing answer without tools
    "repeated_call",      # the same call kept repeating: a closing answer without tools
    "tool_failed",        # tool_failure_policy=fatal and a tool failed: no answer
    "tool_use_required",  # tool_use_mode=enforced and the nudges ran out: no answer
    "empty_final",        # the final answer stayed empty after the finalization retry
)


class LoopEventType(StrEnum):
    """Kinds of loop events (`toolrules run --json` prints them as JSON lines)."""

    TEXT = "text"
    """Answer text from the model (a delta when streaming, else the turn's text)."""
    REASONING = "reasoning"
    """Reasoning text from the model."""
    TOOL_CALL = "tool_call"
    """A complete call the model made (`call`), before it runs."""
    TOOL_PROGRESS = "tool_progress"
    """A call still being generated: `name`, the newly arrived `args_delta` (streaming)."""
    TOOL_RESULT = "tool_result"
    """A call's result (`call`, `result`), in call order; `executed` is False when the loop
    answered it without running it (invalid, repeated, over a limit)."""
    NOTICE = "notice"
    """A guardrail acted: `notice` names it (nudge, validation_retry, repeated_call, ...),
    `content` is what the model was told or why."""
    DONE = "done"
    """The end: `outcome` holds the LoopOutcome."""


@dataclass(frozen=True, slots=True)
class LoopEvent:
    """One thing that happened in a tool loop. Only the fields of its `type` are set."""

    type: LoopEventType
    round: int
    """The model turn (1-based) the event belongs to."""
    content: str | None = None
    call: ToolCall | None = None
    result: ToolResult | None = None
    index: int | None = None
    """The call's position in its turn (tool_call, tool_progress, tool_result)."""
    name: str | None = None
    """The tool name (tool_progress, while the call is incomplete)."""
    args_delta: str | None = None
    notice: str | None = None
    executed: bool | None = None
    outcome: LoopOutcome | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the fields of its type)."""
        out: dict[str, Any] = {"type": self.type.value, "round": self.round}
        if self.content is not None:
            out["content"] = self.content
        if self.index is not None:
            out["index"] = self.index
        if self.name is not None:
            out["name"] = self.name
        if self.args_delta is not None:
            out["args_delta"] = self.args_delta
        if self.call is not None:
            out["call"] = call_dict(self.call)
        if self.result is not None:
            out["result"] = result_dict(self.result)
        if self.notice is not None:
            out["notice"] = self.notice
        if self.executed is not None:
            out["executed"] = self.executed
        if self.outcome is not None:
            out["outcome"] = self.outcome.summary()
        return out


class TraceLog(Protocol):
    """The record of a run that a `LoopOutcome` carries (`runtime.Trace`, which writes
    these values as JSON lines, sits above this module and implements it)."""

    records: list[dict[str, Any]]

    def add(self, record: dict[str, Any]) -> None: ...

    def of_type(self, kind: str) -> list[dict[str, Any]]: ...

    def lines(self) -> Iterator[str]: ...

    def to_dicts(self) -> list[dict[str, Any]]: ...

    def save(self, path: str | Path) -> Path: ...


@dataclass(frozen=True, slots=True)
class LoopOutcome:
    """How a tool loop ended.

    `content` is the final answer ("" when there is none); `messages` the whole
    conversation (tool results as `Message(role="tool")`); `tool_history` every call the
    model made with its result, in order (also calls the loop answered without running);
    `rounds` the model turns taken (a closing turn without tools included); `stopped` one
    of STOP_REASONS; `tool_calls` the calls that ran; `error` what went wrong when
    `stopped` is not "done"; `trace` the JSONL-ready record of the run.
    """

    content: str
    messages: tuple[Message, ...]
    tool_history: tuple[tuple[ToolCall, ToolResult], ...]
    rounds: int
    stopped: str
    trace: TraceLog
    tool_calls: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.stopped == "done"

    @property
    def truncated(self) -> bool:
        """A limit ended the loop: max_rounds, max_tool_calls or a repeated call."""
        return self.stopped in ("max_rounds", "max_tool_calls", "repeated_call")

    def save_trace(self, path: str | Path) -> Path:
        """Write the trace as JSON lines (secrets redacted); returns the path."""
        return self.trace.save(path)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"stopped": self.stopped, "content": self.content,
                               "rounds": self.rounds, "tool_calls": self.tool_calls}
        if self.error:
            out["error"] = self.error
        return out

    def __repr__(self) -> str:
        return (f"LoopOutcome(stopped={self.stopped!r}, rounds={self.rounds}, "
                f"tool_calls={self.tool_calls}, content={self.content[:60]!r})")


# ---------------------------------------------------------------- JSON forms

def call_dict(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def result_dict(result: ToolResult) -> dict[str, Any]:
    out: dict[str, Any] = {"call_id": result.call_id, "name": result.name, "ok": result.ok}
    if result.output is not None:
        out["output"] = _jsonable(result.output)
    if result.error is not None:
        out["error"] = result.error
    tool_error = getattr(result, "tool_error", None)
    if tool_error is not None and hasattr(tool_error, "to_dict"):
        out["tool_error"] = tool_error.to_dict()
    return out


def message_dict(m: Message) -> dict[str, Any]:
    """A message as JSON. Content that is a tuple of `ContentPart`s becomes a list of part
    dicts marked `content_parts: true` (a tool result's content may be any JSON list,
    so the shape alone cannot tell): message_from_dict restores the parts."""
    out: dict[str, Any] = {"role": m.role}
    if m.content is not None:
        out["content"] = _jsonable(m.content)
        if isinstance(m.content, (list, tuple)) and any(
                isinstance(p, ContentPart) for p in m.content):
            out["content_parts"] = True
    if m.tool_calls:
        out["tool_calls"] = [call_dict(c) for c in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        out["name"] = m.name
    if m.reasoning_content is not None:
        out["reasoning_content"] = m.reasoning_content
    if m.is_error:
        out["is_error"] = True
    return out


def message_from_dict(d: Mapping[str, Any]) -> Message:
    """The message a `message_dict` (a trace's, a session's) was written from; content
    parts come back as `ContentPart`s, so a replay sends the same images and documents."""
    role = d.get("role")
    if not isinstance(role, str):
        raise ParseError(f"a recorded message has no role: {json.dumps(d, default=str)[:120]}")
    calls = tuple(ToolCall(c.get("id"), c.get("name", ""), c.get("arguments") or {})
                  for c in d.get("tool_calls") or ())
    content = d.get("content")
    if d.get("content_parts") and isinstance(content, list):
        content = tuple(_part(p, f"a recorded {role} message's part {i}")
                        for i, p in enumerate(content))
    return Message(role=role, content=content, tool_calls=calls,
                   tool_call_id=d.get("tool_call_id"), name=d.get("name"),
                   reasoning_content=d.get("reasoning_content"),
                   is_error=bool(d.get("is_error")))


def _part(value: Any, where: str) -> ContentPart:
    try:
        return ContentPart.from_dict(value)
    except ValueError as exc:
        raise ParseError(f"{where}: {exc}: {json.dumps(value, default=str)[:120]}") from None


def _json_default(value: Any) -> Any:
    return value.to_dict() if isinstance(value, ContentPart) else str(value)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    try:
        json.dumps(value, ensure_ascii=False)
        return value
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, ensure_ascii=False, default=_json_default))
