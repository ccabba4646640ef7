"""Replaying a recorded tool loop: the model's recorded turns answered again by a
ScriptedModel, the loop run again with the recorded settings against a fresh executor. A
different call, result or final answer is a divergence: a recorded live session becomes
an offline regression test (`toolrules replay TRACE`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._types import Message, ParsedResponse, ToolCall
from ..clients._scripted import ScriptedModel
from ..rules._default import resolve_engine
from ._events import LoopOutcome, TraceLog, message_from_dict
from ._loop import ToolLoop
from ._trace import Trace, plain

__all__ = ["Divergence", "ReplayReport", "replay", "turns_from_trace"]


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where a replay went differently from the recording."""

    where: str
    what: str
    recorded: Any
    replayed: Any

    def __str__(self) -> str:
        def short(v: Any) -> str:
            text = json.dumps(v, ensure_ascii=False, default=str)
            return text if len(text) <= 160 else text[:157] + "..."
        return f"{self.where}: {self.what} differs: recorded {short(self.recorded)}, " \
               f"replayed {short(self.replayed)}"


@dataclass(frozen=True, slots=True)
class ReplayReport:
    divergences: tuple[Divergence, ...]
    outcome: LoopOutcome
    recorded_turns: int

    @property
    def ok(self) -> bool:
        return not self.divergences


def turns_from_trace(trace: Trace) -> list[Any]:
    """The model turns of a trace as ScriptedModel turns: the raw text when the model
    answered in text, else its answer as an assistant message dict."""
    turns: list[Any] = []
    for rec in trace.of_type("turn"):
        resp = plain(rec.get("response") or {})
        raw = resp.get("raw")
        if not (rec.get("request") or {}).get("tools"):
            # a turn without tools: clients differ in whether they read calls out of such
            # text (none are run); the recorded reading is the one that happened
            turns.append(ParsedResponse(
                resp.get("content"), resp.get("reasoning"),
                tuple(ToolCall(c.get("id"), c.get("name", ""), c.get("arguments") or {})
                      for c in resp.get("calls") or ()),
                resp.get("finish_reason"), tuple(resp.get("repairs") or ()), raw))
        elif isinstance(raw, str) or (isinstance(raw, dict) and raw.get("role") == "assistant"):
            turns.append(raw)
        else:  # a provider body or nothing: the parsed answer, ids kept
            msg: dict[str, Any] = {"role": "assistant", "content": resp.get("content")}
            if resp.get("reasoning") is not None:
                msg["reasoning_content"] = resp["reasoning"]
            if resp.get("calls"):
                msg["tool_calls"] = [
                    {"id": c.get("id"), "type": "function",
                     "function": {"name": c.get("name"),
                                  "arguments": json.dumps(c.get("arguments") or {})}}
                    for c in resp["calls"]]
            turns.append(msg)
    return turns


def _compare(recorded: TraceLog, replayed: TraceLog) -> list[Divergence]:
    out: list[Divergence] = []
    # both sides as written (redacted): a secret in the recording reads as the mask
    rec = recorded.to_dicts()
    new = replayed.to_dicts()
    rec_calls = [r for r in rec if r.get("type") == "call"]
    new_calls = [r for r in new if r.get("type") == "call"]
    for i in range(max(len(rec_calls), len(new_calls))):
        a = rec_calls[i] if i < len(rec_calls) else None
        b = new_calls[i] if i < len(new_calls) else None
        if a is None or b is None:
            present = a if a is not None else b
            where = f"round {present.get('round')} call {present.get('index')}" if present else "?"
            out.append(Divergence(where, "call", a and a.get("call"), b and b.get("call")))
            continue
        where = f"round {a.get('round')} call {a.get('index')} ({(a.get('call') or {}).get('name')})"
        if _without_id(a.get("call")) != _without_id(b.get("call")):
            out.append(Divergence(where, "call", a.get("call"), b.get("call")))
            continue
        if a.get("action") != b.get("action"):
            out.append(Divergence(where, "handling", a.get("action"), b.get("action")))
        ra, rb = a.get("result") or {}, b.get("result") or {}
        for key in ("ok", "output", "error"):
            if ra.get(key) != rb.get(key):
                out.append(Divergence(where, f"result {key}", ra.get(key), rb.get(key)))
                break
    done_a: dict[str, Any] = next((r for r in reversed(rec) if r.get("type") == "done"), {})
    done_b: dict[str, Any] = next((r for r in reversed(new) if r.get("type") == "done"), {})
    for key in ("stopped", "content"):
        if done_a.get(key) != done_b.get(key):
            out.append(Divergence("final answer", key, done_a.get(key), done_b.get(key)))
    return out


def _without_id(call: Any) -> Any:
    """A recorded call without its id: ids are the client's numbering (a hash of the
    prompt, a counter, the provider's), not what the model asked for."""
    if isinstance(call, dict):
        return {k: v for k, v in call.items() if k != "id"}
    return call


async def replay(trace: Trace | str | Path, executor: Any, *, engine: Any = None,
                 model: str | None = None) -> ReplayReport:
    """Run the recorded session again: the model's recorded turns (a ScriptedModel),
    the recorded settings and opening messages, against `executor` (a fresh one)."""
    recorded = trace if isinstance(trace, Trace) else Trace.load(trace)
    start = plain(recorded.records[0])
    eng = resolve_engine(engine)
    turns = turns_from_trace(recorded)
    scripted = ScriptedModel(turns, model=model or start.get("model") or "", engine=eng,
                             generation_prompt=start.get("generation_prompt"))
    settings = dict(start.get("settings") or {})
    streamed = bool(settings.pop("stream", False))
    loop = ToolLoop(scripted, executor, engine=eng, **settings)
    messages = [_message(m) for m in start.get("messages") or ()]
    if streamed:
        outcome = None
        async for event in loop.events(messages):
            if event.outcome is not None:
                outcome = event.outcome
        assert outcome is not None
    else:
        outcome = await loop.run(messages)
    return ReplayReport(tuple(_compare(recorded, outcome.trace)), outcome, len(turns))


def _message(d: Mapping[str, Any]) -> Message:
    # images and documents come back as ContentParts: the replay sends what was sent
    return message_from_dict(d)
