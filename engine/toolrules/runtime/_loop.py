"""ToolLoop: from a task to a final answer, running the model's tool calls in between.

Each round: ask the model (tools offered as the executor shows them), read its calls,
check them against the guardrails, run the rest through the executor (which enforces the
policy again: allow/deny/hidden, trust, paths, limits), feed the results back as
`Message(role="tool")`s in call order, and ask again — until the model answers without
calls or a guardrail ends the run. Native tools or emulation is the model client's
business (the model's capability decides); the loop, its events and its trace are the
same for both.

Guardrails and what they do (texts from rules/loop.yaml):

- `max_rounds` model turns with tools; then one closing turn without tools
  (stopped="max_rounds").
- `max_tool_calls` calls run in all; calls past it are answered "not run", then a
  closing turn (stopped="max_tool_calls").
- Repeated identical calls (same name and arguments): the `repeat_limit`th one is not
  run; the model is told the result will not change. If it repeats a call once more
  after that, the loop stops with a closing turn (stopped="repeated_call").
- Validation retry (capability `validate_retry`, or `validate=True`): calls of offered
  tools are checked before they run; invalid ones are not run and get the feedback
  template (with a corrected example) as their result, while attempts remain.
- Failed tools: the error goes back with the hint for the step of its retry ladder
  (rules/errors.yaml, `get_retry_strategy`); a `same` step on a read-only tool is first
  retried by the loop itself (`auto_retries`).
- Byte caps: arguments over `max_tool_args_bytes` are not run (ARGUMENTS_TOO_LARGE);
  results over `max_tool_output_bytes` are replaced (TOOL_OUTPUT_TOO_LARGE).
- `tool_use_mode`: "relaxed" (tools offered, optional), "enforced" (a tool must succeed
  before an answer is accepted: tool_choice "required" where the client can force a call
  (its `forces_calls`, else native tools with supports_tool_choice_required),
  `max_nudges` nudges, then stopped="tool_use_required"), "disabled" (no tools offered;
  calls the model writes anyway are not run).
- `tool_failure_policy`: "fatal" stops at the first failed tool (stopped="tool_failed");
  "tolerated" feeds failures back. Default: fatal when enforced, else tolerated.
- `fix_empty_final`: an empty final answer gets one finalization turn without tools.
- `parse_timeout`: reading one answer (its raw text parsed for calls) may take this many
  seconds; past it the run stops (stopped="parse_timeout"), the raw text in the trace.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import ParseTimeoutError
from .._types import (
    ContentPart,
    Message,
    ParsedResponse,
    StreamChunkType,
    Tool,
    ToolCall,
    ToolResult,
)
from ..calls._tool_errors import ToolError, ToolErrorCode, error_rules
from ..calls._validation import fill, validation_rules
from ..dialects._parser import parse_deadline
from ..rules._default import resolve_engine
from ._events import LoopEvent, LoopEventType, LoopOutcome
from ._trace import TRACE_VERSION, Trace, redactor_for

__all__ = ["TOOL_USE_MODES", "ToolLoop"]

TOOL_USE_MODES = ("relaxed", "enforced", "disabled")
FAILURE_POLICIES = ("fatal", "tolerated")

_T = LoopEventType


@dataclass(frozen=True, slots=True)
class _Texts:
    """rules/loop.yaml, compiled once per engine."""

    message_provider: str
    defaults: dict[str, int]
    messages: dict[str, str]
    hints: dict[str, str]
    auto_retry_codes: frozenset[str]


def _texts(engine: Any) -> _Texts:
    def build() -> _Texts:
        t = engine.ruleset.table("loop")
        return _Texts(t["message_provider"], dict(t["defaults"]), dict(t["messages"]),
                      dict(t["retry_hints"]), frozenset(t.get("auto_retry_codes") or ()))
    return engine._cached("runtime:loop", build)


@dataclass(slots=True)
class _Run:
    """The state of one run."""

    messages: list[Message]
    offered: tuple[Tool, ...]
    index: dict[str, Tool]
    trace: Trace
    rounds: int = 0
    executed: int = 0
    history: list[tuple[ToolCall, ToolResult]] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)
    repeat_warned: bool = False
    failures: dict[str, int] = field(default_factory=dict)
    attempt: int = 1
    nudges: int = 0
    any_ok: bool = False
    ids: set[str] = field(default_factory=set)
    sent: int = 0               # messages already recorded in a turn's request
    stop: str | None = None     # a guardrail asked to stop after this round
    stop_text: str = ""
    failed: ToolResult | None = None


class ToolLoop:
    """Runs a model and an executor until the task is answered (see the module doc).

    `model` is any ModelClient (`generate`/`stream`, `model` id); `executor` a
    ToolExecutor (`visible_tools()`, `execute_many()`). Limits left as None take
    rules/loop.yaml `defaults`; byte caps rules/validation.yaml's. `system` is put first
    in the conversation; `trace_path` writes the trace as the run goes (JSON lines);
    other keyword arguments go to every `model.generate`/`stream` call.
    """

    def __init__(self, model: Any, executor: Any, max_rounds: int | None = None,
                 tool_use_mode: str = "relaxed", *, max_tool_calls: int | None = None,
                 tool_failure_policy: str | None = None, repeat_limit: int | None = None,
                 max_nudges: int | None = None, auto_retries: int | None = None,
                 fix_empty_final: bool = True, validate: bool | None = None,
                 max_tool_args_bytes: int | None = None,
                 max_tool_output_bytes: int | None = None, tool_choice: Any = "auto",
                 system: str | None = None, trace_path: str | Path | None = None,
                 parse_timeout: float | None = None, engine: Any = None, **options: Any):
        if tool_use_mode not in TOOL_USE_MODES:
            raise ValueError(f"tool_use_mode must be one of {', '.join(TOOL_USE_MODES)}, "
                             f"not {tool_use_mode!r}")
        if tool_failure_policy is not None and tool_failure_policy not in FAILURE_POLICIES:
            raise ValueError(f"tool_failure_policy must be fatal or tolerated, not "
                             f"{tool_failure_policy!r}")
        if not hasattr(model, "generate") or not isinstance(getattr(model, "model", None), str):
            raise TypeError("model must be a model client: a `model` id and async "
                            "`generate(messages, tools, tool_choice)` (toolrules.ModelClient)")
        self.model = model
        self.executor = executor
        self.engine = resolve_engine(engine if engine is not None else
                                     getattr(executor, "engine", None))
        texts = _texts(self.engine)
        d = texts.defaults
        vrules = validation_rules(self.engine)
        self.max_rounds = d["max_rounds"] if max_rounds is None else int(max_rounds)
        self.max_tool_calls = d["max_tool_calls"] if max_tool_calls is None else int(max_tool_calls)
        self.repeat_limit = d["repeat_limit"] if repeat_limit is None else int(repeat_limit)
        self.max_nudges = d["max_nudges"] if max_nudges is None else int(max_nudges)
        self.auto_retries = d["auto_retries"] if auto_retries is None else int(auto_retries)
        self.parse_timeout = float(d.get("parse_timeout", 5) if parse_timeout is None
                                   else parse_timeout)
        self.max_tool_args_bytes = (vrules.max_tool_args_bytes if max_tool_args_bytes is None
                                    else int(max_tool_args_bytes))
        self.max_tool_output_bytes = (vrules.max_tool_output_bytes if max_tool_output_bytes
                                      is None else int(max_tool_output_bytes))
        self.tool_use_mode = tool_use_mode
        self.tool_failure_policy = tool_failure_policy or (
            "fatal" if tool_use_mode == "enforced" else "tolerated")
        self.fix_empty_final = fix_empty_final
        self.tool_choice = tool_choice
        self.system = system
        self.trace_path = trace_path
        self.options = options
        self.capability = self.engine.capability(model.model)
        self.validate = self.capability.validate_retry if validate is None else validate
        # Whether tool_choice "required" makes a turn a call: the client says so
        # (`forces_calls`, e.g. a local model decoding under the call grammar), else the
        # capability (native tools that honour "required").
        forces = getattr(model, "forces_calls", None)
        self.forces_calls: bool = forces if isinstance(forces, bool) else bool(
            self.capability.native_tools and self.capability.supports_tool_choice_required)
        self._texts = texts
        self._errors = error_rules(self.engine)
        self._max_attempts = vrules.max_attempts
        self._settings = {
            "max_rounds": self.max_rounds, "tool_use_mode": tool_use_mode,
            "max_tool_calls": self.max_tool_calls,
            "tool_failure_policy": self.tool_failure_policy, "repeat_limit": self.repeat_limit,
            "max_nudges": self.max_nudges, "auto_retries": self.auto_retries,
            "fix_empty_final": fix_empty_final, "validate": self.validate,
            "max_tool_args_bytes": self.max_tool_args_bytes,
            "max_tool_output_bytes": self.max_tool_output_bytes, "tool_choice": tool_choice,
            **options}

    def __repr__(self) -> str:
        return (f"ToolLoop({self.model.model!r}, max_rounds={self.max_rounds}, "
                f"tool_use_mode={self.tool_use_mode!r})")

    # ------------------------------------------------------------ public entry points

    async def run(self, task: str | Sequence[Any]) -> LoopOutcome:
        """Run to the end; the outcome (content, messages, tool_history, rounds, stopped,
        trace)."""
        outcome: LoopOutcome | None = None
        async for event in self._drive(task, stream=False):
            if event.outcome is not None:
                outcome = event.outcome
        assert outcome is not None
        return outcome

    def run_sync(self, task: str | Sequence[Any]) -> LoopOutcome:
        """`run` for code without an event loop."""
        return asyncio.run(self.run(task))

    async def events(self, task: str | Sequence[Any], *, stream: bool = True
                     ) -> AsyncIterator[LoopEvent]:
        """The run as events: text and reasoning (deltas when `stream`), each call once
        complete, call progress, each result, notices, and `done` with the outcome."""
        async for event in self._drive(task, stream=stream):
            yield event

    # ------------------------------------------------------------ the run

    def _opening(self, task: str | Sequence[Any]) -> list[Message]:
        if isinstance(task, str):
            msgs = [Message(role="user", content=task)]
        else:
            from ..providers._messages import coerce_messages

            msgs = coerce_messages(list(task))
            if not msgs:
                raise ValueError("the task has no messages")
        if self.system and not (msgs and msgs[0].role == "system"):
            msgs.insert(0, Message(role="system", content=self.system))
        return msgs

    async def _drive(self, task: str | Sequence[Any], *, stream: bool
                     ) -> AsyncIterator[LoopEvent]:
        messages = self._opening(task)
        offered: tuple[Tool, ...] = () if self.tool_use_mode == "disabled" else \
            tuple(self.executor.visible_tools())
        trace = Trace(redactor=redactor_for(self.engine), path=self.trace_path)
        run = _Run(messages, offered, {t.name: t for t in offered}, trace)
        for m in messages:
            for c in m.tool_calls:
                if c.id:
                    run.ids.add(c.id)
        cap = self.capability
        trace.add({"type": "start", "version": TRACE_VERSION, "model": self.model.model,
                   "native_tools": cap.native_tools, "dialect": cap.dialect,
                   "generation_prompt": getattr(self.model, "generation_prompt", None),
                   "tools": list(offered), "settings": {**self._settings, "stream": stream},
                   "executor": _executor_info(self.executor),
                   "messages": list(messages), "time": time.time()})
        try:
            async for event in self._rounds(run, stream):
                yield event
        finally:
            trace.close()

    async def _rounds(self, run: _Run, stream: bool) -> AsyncIterator[LoopEvent]:
        texts = self._texts.messages
        content = ""
        stopped = "done"
        error: str | None = None
        while True:
            if run.stop is None and run.rounds >= self.max_rounds:
                run.stop, run.stop_text = "max_rounds", self._say("round_limit", limit=self.max_rounds)
            if run.stop is not None:
                stopped = run.stop
                if stopped == "tool_failed":
                    error = run.failed.error if run.failed is not None else "a tool failed"
                    yield self._notice(run, "tool_failed", error or "")
                    break
                yield self._notice(run, stopped, run.stop_text)
                parsed = None
                async for ev in self._closing(run, run.stop_text, stream):
                    if isinstance(ev, ParsedResponse):
                        parsed = ev
                    else:
                        yield ev
                assert parsed is not None
                content = parsed.content or ""
                if parsed.tool_calls:
                    yield self._notice(run, "calls_ignored", "no tools are offered in a "
                                       "closing turn; its calls were not run")
                self._keep_answer(run, parsed)
                error = f"stopped: {stopped}"
                break
            offer = run.offered
            choice = self.tool_choice
            if (self.tool_use_mode == "enforced" and not run.any_ok and offer
                    and self.forces_calls):
                choice = "required"
            parsed = None
            try:
                async for ev in self._ask(run, offer, stream, choice):
                    if isinstance(ev, ParsedResponse):
                        parsed = ev
                    else:
                        yield ev
            except ParseTimeoutError as exc:
                # the answer could not be read in time: the run ends, the raw text is kept
                run.trace.add({"type": "error", "round": run.rounds, "error": "parse_timeout",
                               "message": str(exc), "raw": exc.text})
                yield self._notice(run, "parse_timeout", str(exc))
                stopped, error = "parse_timeout", str(exc)
                break
            assert parsed is not None
            calls = parsed.tool_calls if offer else ()
            if parsed.tool_calls and not offer:
                yield self._notice(run, "calls_ignored", "no tools are offered; the calls in "
                                   "this answer were not run")
            if calls:
                run.messages.append(Message(role="assistant", content=parsed.content,
                                            tool_calls=calls,
                                            reasoning_content=parsed.reasoning_content))
                async for ev in self._handle(run, calls):
                    yield ev
                continue
            # an answer without calls
            if self.tool_use_mode == "enforced" and not run.any_ok:
                self._keep_answer(run, parsed)
                if run.nudges < self.max_nudges:
                    run.nudges += 1
                    nudge = self._say("nudge", tools=", ".join(run.index))
                    run.messages.append(Message(role="user", content=nudge))
                    yield self._notice(run, "nudge", nudge)
                    continue
                content = parsed.content or ""
                stopped, error = "tool_use_required", \
                    "the model answered without a successful tool call"
                break
            content = parsed.content or ""
            self._keep_answer(run, parsed)
            if not content.strip() and self.fix_empty_final:
                text = texts["finalize"]
                yield self._notice(run, "finalize", text)
                final = None
                async for ev in self._closing(run, text, stream):
                    if isinstance(ev, ParsedResponse):
                        final = ev
                    else:
                        yield ev
                assert final is not None
                self._keep_answer(run, final)
                content = final.content or ""
            if not content.strip():
                stopped, error = "empty_final", "the final answer is empty"
            break
        outcome = LoopOutcome(content=content, messages=tuple(run.messages),
                              tool_history=tuple(run.history), rounds=run.rounds,
                              stopped=stopped, trace=run.trace, tool_calls=run.executed,
                              error=error)
        run.trace.add({"type": "done", "round": run.rounds, "stopped": stopped,
                       "content": content, "rounds": run.rounds, "tool_calls": run.executed,
                       "error": error})
        yield LoopEvent(_T.DONE, run.rounds, content=content, outcome=outcome)

    async def _closing(self, run: _Run, text: str, stream: bool) -> AsyncIterator[Any]:
        """A turn without tools after `text` (a closing or finalization request): its
        events, then its ParsedResponse."""
        run.messages.append(Message(role="user", content=text))
        async for ev in self._ask(run, (), stream):
            yield ev

    def _keep_answer(self, run: _Run, parsed: ParsedResponse) -> None:
        if parsed.content or parsed.reasoning_content:
            run.messages.append(Message(role="assistant", content=parsed.content,
                                        reasoning_content=parsed.reasoning_content))

    def _say(self, key: str, **values: Any) -> str:
        """A message of rules/loop.yaml with its placeholders filled."""
        return fill(self._texts.messages[key], values) or ""

    def _notice(self, run: _Run, kind: str, text: str) -> LoopEvent:
        run.trace.add({"type": "notice", "round": run.rounds, "notice": kind, "content": text})
        return LoopEvent(_T.NOTICE, run.rounds, content=text, notice=kind)

    def _fresh(self, run: _Run, call: ToolCall, i: int) -> ToolCall:
        """The call with an id no earlier call has, so every result matches its call."""
        cid = call.id
        if not cid or cid in run.ids:
            cid = f"call_r{run.rounds}_{i}"
            n = 1
            while cid in run.ids:
                cid, n = f"call_r{run.rounds}_{i}_{n}", n + 1
            call = ToolCall(cid, call.name, call.arguments)
        run.ids.add(cid)
        return call

    # ------------------------------------------------------------ asking the model

    async def _ask(self, run: _Run, tools: tuple[Tool, ...], stream: bool,
                   choice: Any = None) -> AsyncIterator[Any]:
        """One model turn: yields its events, then the ParsedResponse."""
        run.rounds += 1
        rnd = run.rounds
        msgs = run.messages
        tool_arg = tools or None
        choice_arg = (choice if choice is not None else self.tool_choice) if tools else None
        started = time.perf_counter()
        parsed = None
        async for item in self._model_answer(run, msgs, tools, tool_arg, choice_arg, stream):
            if isinstance(item, ParsedResponse):
                parsed = item
            else:
                yield item
        elapsed = (time.perf_counter() - started) * 1000.0
        rewrites = [r.as_dict() for r in getattr(self.model, "last_rewrites", ())]
        run.trace.add({"type": "turn", "round": rnd,
                       "request": {"history": run.sent, "messages": msgs[run.sent:],
                                   "tools": [t.name for t in tools],
                                   "tool_choice": choice_arg,
                                   **({"rewrites": rewrites} if rewrites else {})},
                       "response": parsed, "ms": round(elapsed, 3)})
        run.sent = len(msgs)
        yield parsed

    async def _model_answer(self, run: _Run, msgs: list[Message], tools: tuple[Tool, ...],
                      tool_arg: tuple[Tool, ...] | None, choice_arg: Any,
                      stream: bool) -> AsyncIterator[Any]:
        """The model's answer to one turn: its events, then the ParsedResponse."""
        rnd = run.rounds
        if stream:
            parsed = None
            async for item in self._streamed(run, msgs, tool_arg, choice_arg):
                if isinstance(item, ParsedResponse):
                    parsed = item
                else:
                    yield item
            assert parsed is not None
        else:
            with parse_deadline(self.parse_timeout or None):  # the answer is read under it
                if choice_arg is None:
                    parsed = await self.model.generate(msgs, tool_arg, **self.options)
                else:
                    parsed = await self.model.generate(msgs, tool_arg, choice_arg,
                                                       **self.options)
            if tools and parsed.tool_calls:
                calls = tuple(self._fresh(run, c, i) for i, c in enumerate(parsed.tool_calls))
                if any(a is not b for a, b in zip(calls, parsed.tool_calls, strict=True)):
                    parsed = ParsedResponse(parsed.content, parsed.reasoning_content, calls,
                                            parsed.finish_reason, parsed.repairs, parsed.raw,
                                            parsed.warnings)
            if parsed.reasoning_content:
                yield LoopEvent(_T.REASONING, rnd, content=parsed.reasoning_content)
            if parsed.content:
                yield LoopEvent(_T.TEXT, rnd, content=parsed.content)
            if tools:
                for i, c in enumerate(parsed.tool_calls):
                    yield LoopEvent(_T.TOOL_CALL, rnd, call=c, index=i)
        yield parsed

    async def _streamed(self, run: _Run, msgs: list[Message], tools: tuple[Tool, ...] | None,
                        choice: Any) -> AsyncIterator[Any]:
        """A streamed turn: events as chunks arrive, then the assembled ParsedResponse."""
        rnd = run.rounds
        text: list[str] = []
        reasoning: list[str] = []
        calls: list[ToolCall] = []
        if choice is None:
            chunks = self.model.stream(msgs, tools, **self.options)
        else:
            chunks = self.model.stream(msgs, tools, choice, **self.options)
        async for chunk in _under_deadline(chunks, self.parse_timeout or None):
            kind = chunk.type
            if kind is StreamChunkType.TEXT:
                if chunk.content:
                    text.append(chunk.content)
                    yield LoopEvent(_T.TEXT, rnd, content=chunk.content)
            elif kind is StreamChunkType.REASONING:
                if chunk.content:
                    reasoning.append(chunk.content)
                    yield LoopEvent(_T.REASONING, rnd, content=chunk.content)
            elif kind is StreamChunkType.TOOL_END:
                call = ToolCall(chunk.tool_call_id, chunk.tool_name or "",
                                dict(chunk.arguments or {}))
                if tools:
                    call = self._fresh(run, call, len(calls))
                calls.append(call)
                if tools:
                    yield LoopEvent(_T.TOOL_CALL, rnd, call=call, index=len(calls) - 1)
            elif kind is StreamChunkType.TOOL_PROGRESS and tools:
                yield LoopEvent(_T.TOOL_PROGRESS, rnd, index=chunk.index, name=chunk.tool_name,
                                args_delta=chunk.args_delta)
        last = getattr(self.model, "last_response", None)
        yield ParsedResponse(
            "".join(text) or None, "".join(reasoning) or None, tuple(calls),
            last.finish_reason if last is not None else ("tool_calls" if calls else "stop"),
            last.repairs if last is not None else (), last.raw if last is not None else None,
            last.warnings if last is not None else ())

    # ------------------------------------------------------------ handling calls

    async def _handle(self, run: _Run, calls: tuple[ToolCall, ...]) -> AsyncIterator[LoopEvent]:
        texts = self._texts.messages
        rnd = run.rounds
        answers: list[tuple[ToolResult, str, str] | None] = [None] * len(calls)
        to_run: list[int] = []
        invalid = False
        for i, call in enumerate(calls):
            args_json = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False,
                                   default=str)
            key = call.name + "\0" + args_json
            count = run.seen.get(key, 0) + 1
            run.seen[key] = count
            if run.executed + len(to_run) >= self.max_tool_calls:
                text = self._say("call_not_run", limit=self.max_tool_calls)
                answers[i] = (self._refusal(call, text, "TOOL_CALL_LIMIT"), text, "over_limit")
                if run.stop is None:
                    run.stop, run.stop_text = "max_tool_calls", self._say(
                        "call_limit", limit=self.max_tool_calls)
                continue
            if count >= self.repeat_limit:
                text = self._say("repeated_call", tool=call.name, count=count - 1)
                answers[i] = (self._refusal(call, text, "REPEATED_CALL"), text, "repeated")
                if run.repeat_warned and count > self.repeat_limit and run.stop is None:
                    run.stop, run.stop_text = "repeated_call", texts["repeated_stop"]
                run.repeat_warned = True
                continue
            size = len(args_json) if args_json.isascii() else len(args_json.encode())
            if size > self.max_tool_args_bytes:
                result = self._refusal(call, None, "ARGUMENTS_TOO_LARGE",
                                       {"tool": call.name, "size": size,
                                        "limit": self.max_tool_args_bytes})
                answers[i] = (result, _error_body(result, None), "too_large")
                continue
            if self.validate and call.name in run.index:
                check = self.engine.check_tool_calls(
                    (call,), run.index, self.model.model, capability=self.capability,
                    attempt=run.attempt, retry=True, max_attempts=self._max_attempts)
                if check.retry and check.feedback:
                    answers[i] = (self._refusal(call, check.feedback, "INVALID_ARGUMENTS",
                                                {"tool": call.name}),
                                  check.feedback, "invalid")
                    invalid = True
                    continue
            to_run.append(i)
        run.attempt = run.attempt + 1 if invalid else 1
        if invalid:
            run.trace.add({"type": "notice", "round": rnd, "notice": "validation_retry",
                           "content": "invalid calls sent back with feedback"})
        results: list[ToolResult] = []
        if to_run:
            batch = [calls[i] for i in to_run]
            results = list(await self.executor.execute_many(batch))
            if len(results) != len(batch):
                raise RuntimeError(f"executor returned {len(results)} results for "
                                   f"{len(batch)} calls")
        retried: list[LoopEvent] = []
        for i, result in zip(to_run, results, strict=True):
            call = calls[i]
            run.executed += 1
            if not result.ok:
                result = await self._retry_same(run, call, result, retried)
            answers[i] = self._answer(run, call, result)
        for ev in retried:
            yield ev
        for i, call in enumerate(calls):
            entry = answers[i]
            assert entry is not None
            result, text, action = entry
            executed = action in ("executed", "failed")
            run.history.append((call, result))
            run.messages.append(Message(role="tool", content=_parts_or(result, text),
                                        tool_call_id=call.id, name=call.name,
                                        is_error=not result.ok))
            run.trace.add({"type": "call", "round": rnd, "index": i, "call": call,
                           "action": action, "result": result})
            yield LoopEvent(_T.TOOL_RESULT, rnd, call=call, result=result, index=i,
                            executed=executed, content=text)
            if action == "failed" and self.tool_failure_policy == "fatal" and run.stop is None:
                run.stop, run.failed = "tool_failed", result

    def _refusal(self, call: ToolCall, text: str | None, code: str,
                 values: Mapping[str, Any] | None = None) -> ToolResult:
        """A result for a call the loop answered without running it. `code` is an
        envelope code of rules/validation.yaml, or the loop's own (its message `text`)."""
        spec = validation_rules(self.engine).envelope.get(code)
        category = ToolErrorCode(spec["code"]) if spec else ToolErrorCode.EXECUTION
        rule = self._errors.codes.get(category, {})
        message = text if text is not None else (
            fill(spec["message"], values or {}) if spec else code)
        error = ToolError(code=category, message=message or code,
                          recoverable=bool(rule.get("recoverable", True)),
                          retry_strategy=rule.get("retry_strategy"),
                          details={"error": code})
        return ToolResult(call.id, call.name, None, message, error)

    async def _retry_same(self, run: _Run, call: ToolCall, result: ToolResult,
                          events: list[LoopEvent]) -> ToolResult:
        """The ladder's `same` step on a read-only tool, for an error code that may pass
        (rules/loop.yaml `auto_retry_codes`): the loop tries again itself."""
        tries = 0
        while (not result.ok and tries < self.auto_retries and result.tool_error is not None
               and str(result.tool_error.code) in self._texts.auto_retry_codes
               and self._errors.next_strategy(result.tool_error,
                                              run.failures.get(call.name, 0) + 1) == "same"
               and _read_only(self.executor, call.name)):
            tries += 1
            text = f"{call.name} failed ({result.error}); trying the same call again"
            events.append(self._notice(run, "auto_retry", text))
            result = await self.executor.execute(call)
            run.executed += 1
        return result

    def _answer(self, run: _Run, call: ToolCall, result: ToolResult
                ) -> tuple[ToolResult, str, str]:
        """What the model is told about an executed call."""
        if result.ok:
            run.any_ok = True
            run.failures.pop(call.name, None)
            text = _output_text(result.output)
            size = _output_size(result.output, text)
            if size > self.max_tool_output_bytes:
                result = self._refusal(call, None, "TOOL_OUTPUT_TOO_LARGE", {
                    "tool": call.name, "size": size, "limit": self.max_tool_output_bytes})
                run.failures[call.name] = run.failures.get(call.name, 0) + 1
                return result, _error_body(result, None), "failed"
            return result, text, "executed"
        attempt = run.failures.get(call.name, 0) + 1
        run.failures[call.name] = attempt
        error = result.tool_error
        if error is None:
            error = ToolError(code=ToolErrorCode.EXECUTION, message=result.error or "failed",
                              recoverable=True)
        step = self._errors.next_strategy(error, attempt)
        hint = fill(self._texts.hints.get(step, ""), {
            "tool": call.name, "attempt": attempt, "code": error.code.name
            if isinstance(error.code, ToolErrorCode) else str(error.code)})
        if result.tool_error is None:
            result = ToolResult(result.call_id, result.name, result.output, result.error, error)
        return result, _error_body(result, hint), "failed"


async def _under_deadline(chunks: Any, seconds: float | None) -> AsyncIterator[Any]:
    """A model's stream, each step of it read under the parse deadline (the deadline is
    set around each step, never across a yield)."""
    it = chunks.__aiter__()
    while True:
        with parse_deadline(seconds):
            try:
                chunk = await it.__anext__()
            except StopAsyncIteration:
                return
        yield chunk


def _error_body(result: ToolResult, hint: str | None) -> str:
    """A failed result as the model reads it: the structured error and what to do next."""
    error = result.tool_error
    err: dict[str, Any] = {"message": result.error}
    if error is not None:
        err = error.to_dict()
        name = (error.details or {}).get("error")
        if name:  # the envelope code (PERMISSION_DENIED ...) says more than the category
            err["code"] = name
    body: dict[str, Any] = {"ok": False, "error": err}
    if hint:
        body["next_step"] = hint
    return json.dumps(body, ensure_ascii=False, default=str)


def _media(output: Any) -> bool:
    """An output that is content parts (text with images, audio, documents)."""
    return isinstance(output, tuple) and bool(output) and all(
        isinstance(p, ContentPart) for p in output)


def _output_text(output: Any) -> str:
    """A tool output as the text the model reads (media parts: described, their size
    counted against the output cap by `_output_size`)."""
    if isinstance(output, str):
        return output
    if output is None:
        return ""
    if _media(output):
        return "\n".join(p.text if p.type == "text" and p.text is not None else
                         f"[{p.type}{' ' + p.media_type if p.media_type else ''}"
                         f"{' ' + p.name if p.name else ''}]" for p in output)
    return json.dumps(output, ensure_ascii=False, default=str)


def _output_size(output: Any, text: str) -> int:
    size = len(text) if text.isascii() else len(text.encode())
    if _media(output):
        size += sum(len(p.data or "") + len(p.url or "") for p in output)
    return size


def _parts_or(result: ToolResult, text: str) -> Any:
    """The tool message's content: the parts of a successful media output (images travel
    as images), else the text."""
    return result.output if result.ok and _media(result.output) else text


def _read_only(executor: Any, name: str) -> bool:
    """Whether the executor's registry declares the tool read-only (safe to repeat)."""
    registry = getattr(executor, "registry", None)
    entry = registry.get(name) if registry is not None and hasattr(registry, "get") else None
    return getattr(entry, "kind", None) == "read"


def _executor_info(executor: Any) -> dict[str, Any]:
    """What a replay needs to build a fresh executor like this one (no secrets)."""
    out: dict[str, Any] = {}
    policy_id = getattr(getattr(executor, "policy", None), "id", None)
    if isinstance(policy_id, str):
        out["policy"] = policy_id
    for attr in ("workspace", "trust", "allowed", "denied", "dry_run"):
        value = getattr(executor, attr, None)
        if value is None:
            continue
        if isinstance(value, Path):
            value = str(value)
        elif isinstance(value, (set, frozenset, tuple)):
            value = sorted(value)
        elif not isinstance(value, (str, int, float, bool, list, Mapping)):
            continue
        out[attr] = value
    return out
