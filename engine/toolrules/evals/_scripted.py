"""Offline models: a scenario's script written in an offline entry's output format.

Each step of the script becomes what that model would write: calls rendered in the
entry's dialect through the trained format's `call` macro (`Engine.render_call`), or an
entry's `call_format`, or an OpenAI-format assistant message for models without a
raw-text format; hand-written `raw` variants (per entry id or dialect) replace the
rendering, and entry quirks (a prefix, an end-of-turn suffix, how an answer is written)
wrap it. The turns then go through the real parser of the model's dialect in
ScriptedModel, so the full loop runs with no network.

The simulated model follows its script turn by turn, with two behaviours the eval needs:
a step that `needs: [feedback]` is written only when the model was shown the validation
feedback (a corrected example call, rules/eval.yaml `signals.feedback`); otherwise it
writes its previous turn again (the same mistake). A turn asked for without tools (a
closing or finalization turn) gets the next answer of the script.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from .._types import Message, Tool, ToolCall
from ._catalog import Target
from ._scenarios import Scenario

__all__ = ["ScriptedPersona", "render_step"]

MAX_TURNS = 64


def _calls(step: dict[str, Any]) -> list[ToolCall]:
    return [ToolCall(None, str(c["name"]), dict(c.get("arguments") or {}))
            for c in step.get("calls") or ()]


def _text_calls(engine: Any, target: Target, calls: list[ToolCall],
                tools: Sequence[Tool]) -> str:
    entry = target.entry
    fmt = entry.get("call_format")
    if fmt:
        return "\n".join(str(fmt).replace("{name}", c.name).replace(
            "{arguments}", json.dumps(c.arguments, ensure_ascii=False)) for c in calls)
    style = entry.get("write") or target.dialect
    tool_list = list(tools) or None
    try:
        return str(engine.render_call(calls, tool_list, target.model, style=style))
    except ValueError:  # a one-call-per-answer format: one block per call
        return "\n".join(str(engine.render_call(c, tool_list, target.model, style=style))
                         for c in calls)


def render_step(engine: Any, target: Target, step: dict[str, Any],
                tools: Sequence[Tool]) -> Any:
    """One script step as `target` writes it: raw text, or an assistant message dict for
    a model without a raw-text format."""
    entry = target.entry
    raw = step.get("raw") or {}
    for key in (target.id, target.dialect):
        if key and key in raw:
            return str(raw[key])
    if _native_messages(engine, target):
        if "answer" in step:
            return {"role": "assistant", "content": str(step["answer"])}
        msg: dict[str, Any] = {"role": "assistant", "content": step.get("say")}
        msg["tool_calls"] = [{"type": "function", "function": {
            "name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
            for c in _calls(step)]
        msg.update(step.get("native") or {})
        if step.get("native") and "tool_calls" not in step["native"]:
            msg.pop("tool_calls", None)
        return msg
    suffix = str(entry.get("suffix") or "")
    prefix = str(entry.get("prefix") or "")
    if "answer" in step:
        text = str(step["answer"])
        if not text:
            return ""
        answer = str(entry.get("answer") or "{text}").replace("{text}", text)
        return answer + suffix
    body = _text_calls(engine, target, _calls(step), tools)
    say = step.get("say")
    said = str(entry.get("say", "{text}\n")).replace("{text}", str(say)) if say else ""
    return prefix + said + body + suffix


def _native_messages(engine: Any, target: Target) -> bool:
    """Models with native tools and no raw-text format answer with message dicts."""
    cap = engine.capability(target.model)
    return bool(cap.native_tools and cap.dialect is None)


def _split(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Steps with several calls as one step per call (formats with one call per turn)."""
    out: list[dict[str, Any]] = []
    for step in steps:
        calls = step.get("calls") or ()
        if len(calls) <= 1:
            out.append(step)
            continue
        for i, c in enumerate(calls):
            part = {k: v for k, v in step.items() if k not in ("calls", "say", "raw", "native")}
            if i == 0 and step.get("say"):
                part["say"] = step["say"]
            part["calls"] = [c]
            out.append(part)
    return out


class ScriptedPersona:
    """The simulated model behind a ScriptedModel: decides each turn from the script and
    from what it was shown."""

    def __init__(self, engine: Any, target: Target, scenario: Scenario, feedback_signal: str):
        self.engine = engine
        self.target = target
        self.steps = _split(scenario.script) if target.entry.get("one_call_per_turn") \
            else scenario.script
        self.feedback = re.compile(feedback_signal) if feedback_signal else None
        self.pos = 0
        self.last: Any = None
        self.cache: dict[int, Any] = {}

    def turns(self) -> list[Any]:
        """ScriptedModel turns: the same callable for every turn."""
        return [self] * MAX_TURNS

    def _render(self, index: int, tools: Sequence[Tool]) -> Any:
        if index not in self.cache:
            self.cache[index] = render_step(self.engine, self.target, self.steps[index], tools)
        return self.cache[index]

    def _shown_feedback(self, messages: Sequence[Message]) -> bool:
        if self.feedback is None:
            return False
        for m in reversed(messages):
            if m.role == "assistant":
                break
            if m.role == "tool" and isinstance(m.content, str) and self.feedback.search(m.content):
                return True
        return False

    def _next_answer(self) -> int | None:
        for i in range(self.pos, len(self.steps)):
            if "answer" in self.steps[i]:
                return i
        answers = [i for i, s in enumerate(self.steps) if "answer" in s]
        return answers[-1] if answers else None

    def __call__(self, messages: list[Message], tools: tuple[Tool, ...]) -> Any:
        if not tools:  # a closing or finalization turn: the next answer
            i = self._next_answer()
            if i is None:
                return ""
            self.pos = max(self.pos, i + 1)
            out = self._render(i, tools)
            if out == "" and self.pos < len(self.steps):
                return self(messages, tools)
            return out
        if self.pos >= len(self.steps):
            i = self._next_answer()
            return self._render(i, tools) if i is not None else ""
        step = self.steps[self.pos]
        needs = step.get("needs") or ()
        if "feedback" in needs and self.last is not None and \
                not self._shown_feedback(messages):
            return self.last  # the same mistake again
        out = self._render(self.pos, tools)
        self.pos += 1
        self.last = out
        return out
