"""Engine methods for emulation prompts, call validation and retry feedback, structured
tool errors and the dispatcher envelope; plus the module-level functions with the
RFC-136 names, which use a lazily loaded default engine (or `engine=`).

Everything here interprets rules/emulation.yaml, validation.yaml, errors.yaml,
tool_selection.yaml and the templates; this module only wires them together.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._emulation import EmulationPrompt, EmulationRules, EmulationStyle
from ._tool_errors import ToolError, ToolErrorCode, error_rules
from ._types import Capability, Message, ParsedResponse, Tool, ToolCall, coerce_tools
from ._validation import (
    ToolEnvelope,
    ValidationError,
    ValidationResult,
    as_tool_call,
    coerce_call,
    tool_index,
    validation_rules,
)

__all__ = [
    "CallCheck",
    "EmulationMixin",
    "build_emulation_prompt",
    "default_engine",
    "dispatch_tool_call",
    "format_validation_errors_for_retry",
    "validate_tool_call",
    "validate_tool_calls",
]

_DEFAULT: Any = None


def default_engine() -> Any:
    """The engine the module-level functions use: toolrules.load(), built on first use."""
    global _DEFAULT
    if _DEFAULT is None:
        from ._engine import load

        _DEFAULT = load()
    return _DEFAULT


def _engine(engine: Any) -> Any:
    return engine if engine is not None else default_engine()


@dataclass(frozen=True, slots=True)
class CallCheck:
    """Calls checked before execution, and what to tell the model if a retry is due."""

    calls: tuple[ToolCall, ...]
    """The valid calls (coerced when coercion was asked for)."""
    errors: tuple[ValidationError, ...] = ()
    """Everything wrong with the other calls."""
    feedback: str | None = None
    """The retry message for the model (with a corrected example), when `retry`."""
    retry: bool = False
    """Ask the model again: there are errors, the capability says validate_retry, and
    attempts remain."""
    attempt: int = 1
    coercions: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.errors


class EmulationMixin:
    """render_emulation, validation with retry feedback, tool errors, the dispatcher."""

    # ------------------------------------------------------------ compiled tables

    def _emulation_rules(self) -> EmulationRules:
        return self._cached("rules:emulation",  # type: ignore[attr-defined]
                            lambda: EmulationRules(self.ruleset))  # type: ignore[attr-defined]

    def _capability_for(self, model: Any, capability: Capability | None) -> Capability:
        if capability is not None:
            return capability
        if model is None:
            return Capability()
        return self.capability(model)  # type: ignore[attr-defined]

    # ------------------------------------------------------------ emulation

    def emulation_styles(self) -> tuple[EmulationStyle, ...]:
        """Every emulation template: generic styles, then trained formats."""
        return self._emulation_rules().entries()

    def select_emulation(self, model: Any = None, *, capability: Capability | None = None,
                         style: str | None = None) -> EmulationStyle:
        """The template and answer dialect a model gets (rules/emulation.yaml `selection`),
        or the named `style` (a style name or a dialect with a trained prompt)."""
        rules = self._emulation_rules()
        if style is not None:
            return rules.style(style)
        return rules.select(self._capability_for(model, capability))

    def emulation(self, tools: Any, model: Any = None, task_hint: str | None = None, *,
                  capability: Capability | None = None, style: str | None = None,
                  examples: bool | int | Sequence[Any] | None = None) -> EmulationPrompt:
        """The emulation prompt for `tools` and what it was built from (the dialect that
        reads the answer, the tools shown after the context budget, the examples)."""
        from ._budget import selection_rules

        rules = self._emulation_rules()
        cap = self._capability_for(model, capability)
        entry = rules.style(style) if style is not None else rules.select(cap)
        shown = selection_rules(self).optimize(coerce_tools(tools), cap, task_hint)
        guidance, calls = self._guidance_examples(shown, cap, examples, task_hint)
        compact = rules.is_compact(cap)
        ctx = rules.context(entry, shown, compact, guidance, calls, task_hint, cap.parallel_tools)
        text = rules.render_template(entry.template, ctx).strip()
        return EmulationPrompt(text=text, style=entry, tools=shown, examples=tuple(calls),
                               compact=compact)

    def render_emulation(self, tools: Any, model: Any = None, task_hint: str | None = None, *,
                         capability: Capability | None = None, style: str | None = None,
                         examples: bool | int | Sequence[Any] | None = None) -> str:
        """A tool-calling prompt for a model without native tools (RFC-136 §4).

        The template is picked by capability (emulation_style, dialect, context window,
        parallel support) through rules/emulation.yaml, unless `style` names one. Guidance
        with examples built from the tools' schemas is added when the capability says
        `prompt_guidance` or `examples` asks (True, a count, or the calls to show).
        """
        return self.emulation(tools, model, task_hint, capability=capability, style=style,
                              examples=examples).text

    def _guidance_examples(self, tools: tuple[Tool, ...], cap: Capability, examples: Any,
                           task_hint: str | None) -> tuple[bool, list[ToolCall]]:
        """Whether to show guidance, and its example calls (the most relevant tools', with
        arguments built from their schemas, unless the caller gives the calls)."""
        from ._budget import selection_rules

        if examples is None:
            examples = cap.prompt_guidance
        if examples is False or examples == 0:
            return False, []
        if isinstance(examples, (bool, int)):
            rules = self._emulation_rules()
            count = rules.max_examples if isinstance(examples, bool) else int(examples)
            vrules = validation_rules(self)
            ranked = selection_rules(self).rank(tools, task_hint) if task_hint else tools
            return True, [ToolCall(None, t.name, vrules.example_arguments(t, rules.required_only))
                          for t in ranked[:count]]
        return True, [as_tool_call(c) for c in examples]

    def render_call(self, calls: ToolCall | Mapping[str, Any] | Sequence[Any], tools: Any = None,
                    model: Any = None, *, capability: Capability | None = None,
                    style: str | None = None) -> str:
        """Calls written in the format the model's emulation prompt asks for (the template's
        `call`/`calls` macro): what the model should have answered."""
        entry = self.select_emulation(model, capability=capability, style=style)
        items = [calls] if isinstance(calls, (ToolCall, Mapping)) else list(calls)
        parsed = [as_tool_call(c) for c in items]
        index = tool_index(tools) if tools is not None else {}
        return self._emulation_rules().render_calls(entry, parsed, index)

    def emulate_history(self, messages: Iterable[Any], tools: Any = None, model: Any = None, *,
                        capability: Capability | None = None,
                        style: str | None = None) -> list[Message]:
        """A conversation rewritten for a model without native tools: each assistant turn's
        calls are appended to its text in the format the model's prompt asks for, and tool
        results become text turns (rules/emulation.yaml `history`); consecutive results
        travel together so roles keep alternating."""
        from ._provider_messages import coerce_messages, content_text

        rules = self._emulation_rules()
        out: list[Message] = []
        pending: list[str] = []

        def flush() -> None:
            if pending:
                out.append(Message(role=rules.result_role, content="\n\n".join(pending)))
                pending.clear()

        parsers: list[Any] = []

        def reader() -> Any:  # the dialect that reads this model's calls, built once
            if not parsers:
                dialect = self.select_emulation(model, capability=capability, style=style).dialect
                parsers.append(self.text_parser(dialect=dialect, tools=tools))  # type: ignore[attr-defined]
            return parsers[0]

        names: dict[str, str] = {}  # call id -> tool name, for results that omit the name
        for m in coerce_messages(messages):
            for c in m.tool_calls:
                if c.id:
                    names[c.id] = c.name
            if m.role == "tool":
                output = m.content
                pending.append(rules.render_template(rules.result_template, {
                    "name": m.name or names.get(m.tool_call_id or "", ""),
                    "call_id": m.tool_call_id,
                    "output": output if isinstance(output, str) else json.loads(
                        json.dumps(output, default=str)),
                    "error": content_text(output) if m.is_error else None}))
                continue
            flush()
            if m.role == "assistant" and m.tool_calls:
                try:
                    written = self.render_call(list(m.tool_calls), tools, model,
                                               capability=capability, style=style)
                except ValueError:  # a one-call-per-answer format: one block per call
                    written = "\n\n".join(
                        self.render_call(c, tools, model, capability=capability, style=style)
                        for c in m.tool_calls)
                text = content_text(m.content) or ""
                out.append(Message(role="assistant", reasoning_content=m.reasoning_content,
                                   content=self._turn_text(text, written, m.tool_calls,
                                                           reader)))
                continue
            out.append(m)
        flush()
        return out

    def _turn_text(self, text: str, written: str, calls: Sequence[ToolCall],
                   reader: Callable[[], Any]) -> str:
        """An assistant turn as the model would have written it: its text, then its calls -
        or the calls first where the format only reads calls at the start of an answer.
        The order chosen is the one that reads back as the same calls."""
        if not text:
            return written
        parser = reader()
        want = [(c.name, c.arguments) for c in calls]
        for candidate in (f"{text}\n\n{written}", f"{written}\n\n{text}"):
            got = parser.parse(candidate)
            if [(c.name, c.arguments) for c in got.tool_calls] == want:
                return candidate
        return f"{text}\n\n{written}"

    def render_template(self, name: str, context: Mapping[str, Any]) -> str:
        """Render any template of the rule set (sandboxed, strict) with `context`."""
        return self._emulation_rules().render_template(name, context)

    def optimize_tool_definitions(self, tools: Any, capability: Capability | str | None = None,
                                  task_hint: str | None = None) -> tuple[Tool, ...]:
        """See toolrules.optimize_tool_definitions."""
        from ._budget import optimize_tool_definitions

        return optimize_tool_definitions(tools, capability, task_hint, engine=self)

    # ------------------------------------------------------------ validation

    def check_tool_call(self, call: Any, tools: Any, *, coerce: Any = None) -> ValidationResult:
        """Validate one call: the (coerced) call, its errors, the coercions applied.

        `coerce`: True for every coercion in rules/validation.yaml, or a list of names.
        """
        return validation_rules(self).check(call, tools, coerce)

    def validate_tool_call(self, call: Any, tools: Any, *, coerce: Any = None) -> list[ValidationError]:
        """Structured errors for one call (empty when valid)."""
        return list(self.check_tool_call(call, tools, coerce=coerce).errors)

    def corrected_call(self, call: Any, tools: Any) -> ToolCall | None:
        """The call with its errors fixed (valid values kept, the rest from the schema),
        under the closest tool name when the name is unknown; None if no tool fits."""
        vrules = validation_rules(self)
        index = tool_index(tools)
        result = vrules.check(call, index)
        tool = index.get(result.call.name)
        if tool is None:
            close = vrules.close_names(result.call.name, index)
            if not close:
                return None
            call_id, _name, args = coerce_call(call)
            result = vrules.check(ToolCall(call_id, close[0], args if isinstance(args, dict)
                                           else {}), index)
            tool = index[close[0]]
        args = vrules.corrected_arguments(result, tool)
        return ToolCall(result.call.id, tool.name, args)

    def format_validation_errors_for_retry(self, errors: Iterable[ValidationError],
                                           call: Any = None, tools: Any = None, *,
                                           model: Any = None, capability: Capability | None = None,
                                           style: str | None = None) -> str:
        """The message that asks the model to fix its call (templates/feedback/), with a
        corrected example call when `call` and `tools` are given: written in the model's
        emulation format when the model has no native tools (or `style` is given), else
        as a JSON object."""
        errors = list(errors)
        if not errors:
            return ""
        vrules = validation_rules(self)
        example_text = None
        example_view = None
        if call is not None and tools is not None:
            fixed = self.corrected_call(call, tools)
            if fixed is not None:
                index = tool_index(tools)
                example_view = EmulationRules.call_view(fixed, index.get(fixed.name))
                cap = self._capability_for(model, capability)
                if style is not None or ((model is not None or capability is not None)
                                         and not cap.native_tools):
                    try:
                        example_text = self.render_call(fixed, index, model, capability=cap,
                                                        style=style)
                    except ValueError:
                        example_text = None
        return self.render_template(vrules.feedback_template, {
            "errors": errors, "example": example_text, "example_call": example_view})

    def check_tool_calls(self, calls: Any, tools: Any, model: Any = None, *,
                         capability: Capability | None = None, attempt: int = 1,
                         coerce: Any = None, max_attempts: int | None = None,
                         retry: bool | None = None, style: str | None = None) -> CallCheck:
        """Validate a response's calls before execution (seed 004 approach 3).

        `retry` is due when a call is invalid, attempts remain (`max_attempts`, default
        rules/validation.yaml), and the capability says `validate_retry` (or `retry=True`);
        `feedback` then holds the message for the model, with a corrected example.
        """
        if isinstance(calls, ParsedResponse):
            calls = calls.tool_calls
        vrules = validation_rules(self)
        index = tool_index(tools)
        valid: list[ToolCall] = []
        errors: list[ValidationError] = []
        coercions: list[str] = []
        first_bad: Any = None
        for c in calls or ():
            result = vrules.check(c, index, coerce)
            coercions.extend(result.coercions)
            if result.ok:
                valid.append(result.call)
            else:
                errors.extend(result.errors)
                first_bad = first_bad if first_bad is not None else result.call
        cap = self._capability_for(model, capability)
        wanted = cap.validate_retry if retry is None else retry
        limit = vrules.max_attempts if max_attempts is None else max_attempts
        due = bool(errors) and wanted and attempt < limit
        feedback = self.format_validation_errors_for_retry(
            errors, first_bad, index, model=model, capability=cap, style=style) if due else None
        return CallCheck(calls=tuple(valid), errors=tuple(errors), feedback=feedback, retry=due,
                         attempt=attempt, coercions=tuple(coercions))

    def validate_with_retry(self, generate: Callable[[str | None], Any], tools: Any,
                            model: Any = None, *, capability: Capability | None = None,
                            coerce: Any = None, max_attempts: int | None = None,
                            retry: bool | None = None) -> CallCheck:
        """Ask `generate(feedback)` for calls until they validate or attempts run out.

        `generate` receives None first, then each retry message; it returns a
        ParsedResponse or the calls. Without `validate_retry` (and `retry=None`) there is
        one attempt.
        """
        feedback: str | None = None
        attempt = 1
        while True:
            check = self.check_tool_calls(generate(feedback), tools, model, capability=capability,
                                          attempt=attempt, coerce=coerce,
                                          max_attempts=max_attempts, retry=retry)
            if not check.retry:
                return check
            feedback = check.feedback
            attempt += 1

    # ------------------------------------------------------------ errors and dispatch

    def tool_error(self, exc: BaseException, tool_name: str) -> ToolError:
        """ToolError.from_exception through this engine's rules/errors.yaml."""
        return error_rules(self).from_exception(exc, tool_name)

    def dispatch_tool_call(self, call: Any, tools: Any, execute: Any, *, coerce: Any = None,
                           max_tool_args_bytes: int | None = None,
                           max_tool_output_bytes: int | None = None) -> ToolEnvelope:
        """Validate, execute and wrap one call in the envelope `{ok, data, warnings, errors}`.

        `execute` is a mapping of tool name -> function(**arguments), or a function
        (name, arguments). Arguments over `max_tool_args_bytes` are refused
        (ARGUMENTS_TOO_LARGE); output over `max_tool_output_bytes` is replaced
        (TOOL_OUTPUT_TOO_LARGE); exceptions become ToolErrors (rules/errors.yaml).
        """
        vrules = validation_rules(self)
        call_id, name, args = coerce_call(call)
        index = tool_index(tools)
        if name not in index:
            result = vrules.check(ToolCall(call_id, name, {}), index)
            return ToolEnvelope(ok=False, errors=(self._envelope_error(
                "UNKNOWN_TOOL", {"tool": name},
                {"closest": vrules.close_names(name, index),
                 "errors": [e.to_dict() for e in result.errors]}),))
        limit = vrules.max_tool_args_bytes if max_tool_args_bytes is None else max_tool_args_bytes
        raw = call.get("function", call).get("arguments") if isinstance(call, Mapping) else None
        size = len(raw.encode()) if isinstance(raw, str) else _json_size(args)
        if size > limit:
            return ToolEnvelope(ok=False, errors=(self._envelope_error(
                "ARGUMENTS_TOO_LARGE", {"tool": name, "size": size, "limit": limit},
                {"bytes": size, "limit": limit}),))
        result = vrules.check(ToolCall(call_id, name, args) if isinstance(args, dict)
                              else {"id": call_id, "name": name, "arguments": args}, index, coerce)
        if not result.ok:
            feedback = self.format_validation_errors_for_retry(result.errors, result.call, index)
            return ToolEnvelope(ok=False, errors=(self._envelope_error(
                "INVALID_ARGUMENTS", {"tool": name},
                {"errors": [e.to_dict() for e in result.errors]}, fix=feedback),),
                warnings=result.coercions)
        try:
            if isinstance(execute, Mapping):
                output = execute[name](**result.call.arguments)
            else:
                output = execute(name, result.call.arguments)
        except Exception as exc:
            error = self.tool_error(exc, name)
            return ToolEnvelope(ok=False, errors=(error.to_dict(),), warnings=result.coercions)
        return self.guard_tool_output(output, max_tool_output_bytes=max_tool_output_bytes,
                                      warnings=result.coercions)

    def guard_tool_output(self, output: Any, *, max_tool_output_bytes: int | None = None,
                          warnings: Sequence[str] = ()) -> ToolEnvelope:
        """`{ok: true, data: output}`, or TOOL_OUTPUT_TOO_LARGE when output is too big."""
        vrules = validation_rules(self)
        limit = vrules.max_tool_output_bytes if max_tool_output_bytes is None \
            else max_tool_output_bytes
        size = len(output.encode()) if isinstance(output, str) else _json_size(output)
        if size > limit:
            return ToolEnvelope(ok=False, warnings=tuple(warnings), errors=(self._envelope_error(
                "TOOL_OUTPUT_TOO_LARGE", {"size": size, "limit": limit},
                {"bytes": size, "limit": limit}),))
        return ToolEnvelope(ok=True, data=output, warnings=tuple(warnings))

    def _envelope_error(self, name: str, values: Mapping[str, Any], details: dict[str, Any],
                        fix: str | None = None) -> dict[str, Any]:
        from ._validation import fill

        vrules = validation_rules(self)
        erules = error_rules(self)
        spec = vrules.envelope.get(name, {"message": name, "code": "execution"})
        code = ToolErrorCode(spec["code"])
        code_rule = erules.codes.get(code, {})
        error = ToolError(code=code, message=fill(spec["message"], values) or name,
                          recoverable=bool(code_rule.get("recoverable", True)),
                          retry_strategy=code_rule.get("retry_strategy"),
                          suggested_fix=fix, details=details)
        return {**error.to_dict(), "code": name}


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode())


# ---------------------------------------------------------------- module-level functions

def build_emulation_prompt(tools: Any, capability: Capability | None = None,
                           task_hint: str | None = None, *, engine: Any = None) -> str:
    """RFC-136 name for render_emulation with a capability."""
    return _engine(engine).render_emulation(tools, None, task_hint,
                                            capability=capability or Capability())


def validate_tool_call(call: Any, tools: Any, *, coerce: Any = None,
                       engine: Any = None) -> list[ValidationError]:
    """Structured errors for one call against its tool's schema (empty when valid).

    `tools` may be one tool, a list, or a name -> tool mapping; an unknown name gets the
    closest offered names. `coerce` opts into safe coercions (rules/validation.yaml).
    """
    return _engine(engine).validate_tool_call(call, tools, coerce=coerce)


def validate_tool_calls(tool_calls: Iterable[Any], tools: Any, *, coerce: Any = None,
                        engine: Any = None) -> tuple[list[ToolCall], list[ValidationError]]:
    """(valid calls, all errors) for several calls."""
    eng = _engine(engine)
    valid: list[ToolCall] = []
    errors: list[ValidationError] = []
    index = tool_index(tools)
    for c in tool_calls:
        result = eng.check_tool_call(c, index, coerce=coerce)
        if result.ok:
            valid.append(result.call)
        errors.extend(result.errors)
    return valid, errors


def format_validation_errors_for_retry(errors: Iterable[ValidationError], call: Any = None,
                                       tools: Any = None, *, model: Any = None,
                                       capability: Capability | None = None,
                                       style: str | None = None, engine: Any = None) -> str:
    """The retry message for the model, with a corrected example call when `call` and
    `tools` are given (templates/feedback/validation.j2)."""
    return _engine(engine).format_validation_errors_for_retry(
        errors, call, tools, model=model, capability=capability, style=style)


def dispatch_tool_call(call: Any, tools: Any, execute: Any, *, coerce: Any = None,
                       max_tool_args_bytes: int | None = None,
                       max_tool_output_bytes: int | None = None, engine: Any = None) -> ToolEnvelope:
    """Validate, execute and wrap one call in `{ok, data, warnings, errors}` (seed 003)."""
    return _engine(engine).dispatch_tool_call(call, tools, execute, coerce=coerce,
                                              max_tool_args_bytes=max_tool_args_bytes,
                                              max_tool_output_bytes=max_tool_output_bytes)
