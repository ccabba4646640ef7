"""Engine methods for checking calls before they run: validation with retry feedback,
structured tool errors and the dispatcher envelope; plus the same operations as module-level
functions (`validate_tool_call`, `dispatch_tool_call` ...), which use the default engine
unless given `engine=`.

Everything here interprets rules/validation.yaml and errors.yaml; this module only wires
them together.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._types import Capability, ParsedResponse, ToolCall
from ..rules._default import resolve_engine
from ..rules._part import Part
from ._tool_errors import ToolError, ToolErrorCode, error_rules
from ._validation import (
    ToolEnvelope,
    ValidationError,
    ValidationResult,
    coerce_call,
    tool_index,
    validation_rules,
)

__all__ = [
    "CallCheck",
    "CallsPart",
    "dispatch_tool_call",
    "format_validation_errors_for_retry",
    "validate_tool_call",
    "validate_tool_calls",
]


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


class CallsPart(Part):
    """Validation with retry feedback, tool errors, the dispatcher envelope."""

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

    def check_tool_calls(self, calls: Any, tools: Any, model: Any = None, *,
                         capability: Capability | None = None, attempt: int = 1,
                         coerce: Any = None, max_attempts: int | None = None,
                         retry: bool | None = None, style: str | None = None) -> CallCheck:
        """Validate a response's calls before execution (validate-and-retry).

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
        cap = self.capability_for(model, capability)
        wanted = cap.validate_retry if retry is None else retry
        limit = vrules.max_attempts if max_attempts is None else max_attempts
        due = bool(errors) and wanted and attempt < limit
        feedback = self.engine.format_validation_errors_for_retry(
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
            feedback = self.engine.format_validation_errors_for_retry(result.errors, result.call, index)
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
        from ..calls._validation import fill

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

def validate_tool_call(call: Any, tools: Any, *, coerce: Any = None,
                       engine: Any = None) -> list[ValidationError]:
    """Structured errors for one call against its tool's schema (empty when valid).

    `tools` may be one tool, a list, or a name -> tool mapping; an unknown name gets the
    closest offered names. `coerce` opts into safe coercions (rules/validation.yaml).
    """
    return resolve_engine(engine).validate_tool_call(call, tools, coerce=coerce)


def validate_tool_calls(tool_calls: Iterable[Any], tools: Any, *, coerce: Any = None,
                        engine: Any = None) -> tuple[list[ToolCall], list[ValidationError]]:
    """(valid calls, all errors) for several calls."""
    eng = resolve_engine(engine)
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
    return resolve_engine(engine).format_validation_errors_for_retry(
        errors, call, tools, model=model, capability=capability, style=style)


def dispatch_tool_call(call: Any, tools: Any, execute: Any, *, coerce: Any = None,
                       max_tool_args_bytes: int | None = None,
                       max_tool_output_bytes: int | None = None, engine: Any = None) -> ToolEnvelope:
    """Validate, execute and wrap one call in the dispatcher envelope
    `{ok, data, warnings, errors}`."""
    return resolve_engine(engine).dispatch_tool_call(call, tools, execute, coerce=coerce,
                                              max_tool_args_bytes=max_tool_args_bytes,
                                              max_tool_output_bytes=max_tool_output_bytes)
