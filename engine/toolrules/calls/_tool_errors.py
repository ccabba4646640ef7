"""Structured tool errors, driven by rules/errors.yaml.

`ToolError.from_exception` walks the exception and its cause chain through the table's
ordered mappings (exception class names, HTTP status, message regex); codes give the
defaults (recoverable, retry strategy, suggested fix); `ladders` turn a retry strategy
and an attempt number into what to do next (same -> rephrase -> interference -> vortex).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .._errors import UnknownRuleError
from .._types import ToolErrorInfo
from ..rules._default import resolve_engine
from ._validation import fill

__all__ = ["ErrorRules", "ToolError", "ToolErrorCode", "get_retry_strategy", "should_retry"]


class ToolErrorCode(StrEnum):
    """Categories of tool failure; each has its defaults in rules/errors.yaml `codes`."""

    VALIDATION = "validation"
    """Bad arguments (missing, wrong type, invalid format)."""
    PERMISSION = "permission"
    """Path security, trust level, credentials."""
    NOT_FOUND = "not_found"
    """File, resource or tool not found."""
    TIMEOUT = "timeout"
    """The operation timed out."""
    RATE_LIMIT = "rate_limit"
    """A rate limit was hit."""
    MODEL_REFUSAL = "model_refusal"
    """The model refused to call a tool or gave no usable call."""
    EXECUTION = "execution"
    """A runtime error inside the tool."""
    NETWORK = "network"
    """A network failure."""
    AUTH = "auth"
    """Credentials missing or refused (a model provider's 401/403)."""


@dataclass(frozen=True, slots=True)
class _Mapping:
    id: str
    names: frozenset[str]
    statuses: frozenset[int]
    classes: frozenset[int]          # 4 for '4xx'
    pattern: re.Pattern[str] | None
    code: ToolErrorCode
    recoverable: bool | None
    retry_strategy: str | None
    fix: str | None
    text: str | None                 # the ToolError message ({tool} {error} ...)

    def matches(self, names: set[str], status: int | None, text: str) -> bool:
        if self.names and not (self.names & names):
            return False
        if (self.statuses or self.classes) and (
                status is None or not (status in self.statuses or status // 100 in self.classes)):
            return False
        return self.pattern is None or self.pattern.search(text) is not None


class ErrorRules:
    """rules/errors.yaml compiled once per engine."""

    def __init__(self, table: Any):
        if not isinstance(table, dict):
            raise UnknownRuleError("rule table", "errors", ())
        self.codes: dict[ToolErrorCode, dict[str, Any]] = {
            ToolErrorCode(k): dict(v) for k, v in table["codes"].items()}
        self.ladders: dict[str, tuple[str, ...]] = {
            k: tuple(v) for k, v in table["ladders"].items()}
        self.unrecoverable: str = table.get("unrecoverable", "abort")
        self.max_attempts: int = table.get("max_attempts", 3)
        self.status_paths = [p.split(".") for p in table.get("status_attributes", [])]
        self.mappings = [_compile_mapping(m) for m in table.get("mappings", [])]
        self.default = _compile_mapping({"id": "default", **table["default"]})

    # ------------------------------------------------------------ lookup

    def status_of(self, exc: BaseException) -> int | None:
        for path in self.status_paths:
            value: Any = exc
            try:
                for attr in path:
                    value = getattr(value, attr, None)
                    if value is None:
                        break
            except Exception:  # properties that raise (unset request/response)
                continue
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
                return value
        return None

    def classify(self, exc: BaseException) -> tuple[_Mapping, BaseException, int | None]:
        """The mapping that decides, the exception in the chain it matched, its status."""
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            names = _class_names(current)
            status = self.status_of(current)
            text = str(current)
            for m in self.mappings:
                if m.matches(names, status, text):
                    return m, current, status
            current = current.__cause__ or current.__context__
        return self.default, exc, self.status_of(exc)

    def from_exception(self, exc: BaseException, tool_name: str) -> ToolError:
        carried = getattr(exc, "tool_error", None)
        if isinstance(carried, ToolError):  # an error that already knows what it means
            return carried
        mapping, matched, status = self.classify(exc)
        code_rule = self.codes.get(mapping.code, {})
        error_text: str = str(matched) or type(matched).__name__
        values = {"tool": tool_name, "error": error_text, "exception": type(matched).__name__,
                  "status": status if status is not None else ""}
        message = (fill(mapping.text, values) if mapping.text else None) or error_text
        recoverable = mapping.recoverable
        if recoverable is None:
            recoverable = bool(code_rule.get("recoverable", True))
        strategy = mapping.retry_strategy or code_rule.get("retry_strategy")
        details: dict[str, Any] = {"exception_type": type(exc).__name__, "rule": mapping.id}
        if matched is not exc:
            details["cause_type"] = type(matched).__name__
        if status is not None:
            details["status"] = status
        return ToolError(code=mapping.code, message=message, recoverable=recoverable,
                         retry_strategy=strategy,
                         suggested_fix=fill(mapping.fix or code_rule.get("fix"), values),
                         details=details)

    # ------------------------------------------------------------ retry ladder

    def strategy_of(self, error: ToolErrorInfo) -> str:
        code_rule = self.codes.get(ToolErrorCode(error.code), {})
        return error.retry_strategy or code_rule.get("retry_strategy") or "same"

    def ladder_of(self, error: ToolErrorInfo) -> tuple[str, ...]:
        code_rule = self.codes.get(ToolErrorCode(error.code), {})
        if error.retry_strategy is None and code_rule.get("ladder"):
            return tuple(code_rule["ladder"])
        strategy = self.strategy_of(error)
        return self.ladders.get(strategy, (strategy,))

    def next_strategy(self, error: ToolErrorInfo, attempt: int) -> str:
        if not error.recoverable:
            return self.unrecoverable
        ladder = self.ladder_of(error)
        return ladder[min(max(attempt, 1), len(ladder)) - 1]

    def should_retry(self, error: ToolErrorInfo, attempt: int, max_attempts: int | None) -> bool:
        limit = self.max_attempts if max_attempts is None else max_attempts
        if not error.recoverable or attempt >= limit:
            return False
        return self.strategy_of(error) != "abort"


def _compile_mapping(m: dict[str, Any]) -> _Mapping:
    names = m.get("exception") or []
    status = m.get("status") or []
    return _Mapping(
        id=m["id"], names=frozenset([names] if isinstance(names, str) else names),
        statuses=frozenset(s for s in status if isinstance(s, int)),
        classes=frozenset(int(s[0]) for s in status if isinstance(s, str)),
        pattern=re.compile(m["pattern"]) if m.get("pattern") else None,
        code=ToolErrorCode(m["code"]), recoverable=m.get("recoverable"),
        retry_strategy=m.get("retry_strategy"), fix=m.get("fix"), text=m.get("message"))


def _class_names(exc: BaseException) -> set[str]:
    out: set[str] = set()
    for cls in type(exc).__mro__:
        out.add(cls.__name__)
        out.add(f"{cls.__module__}.{cls.__qualname__}")
    return out


@dataclass(frozen=True, slots=True)
class ToolError:
    """A structured tool failure with recovery hints (a value, not an exception).

    `retry_strategy` is what the error itself suggests (same, rephrase, escalate, abort);
    None means "the default for its code" from rules/errors.yaml.
    """

    code: ToolErrorCode
    """Categorized error code."""
    message: str
    """Human-readable error message."""
    recoverable: bool
    """Whether a retry might succeed."""
    retry_strategy: str | None = None
    """same | rephrase | escalate | abort, or None for the code's default."""
    suggested_fix: str | None = None
    """What to do about it, for the model and for a human."""
    details: dict[str, Any] | None = None
    """More context (exception type, matched rule, HTTP status ...)."""

    @classmethod
    def from_exception(cls, e: BaseException, tool_name: str, *, engine: Any = None) -> ToolError:
        """Map an exception raised by a tool through rules/errors.yaml."""
        return error_rules(engine).from_exception(e, tool_name)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the `errors` item of a dispatcher envelope): `code` is the
        upper-case code name, `category` its value."""
        code = ToolErrorCode(self.code)
        out: dict[str, Any] = {"code": code.name, "category": code.value,
                               "message": self.message, "recoverable": self.recoverable}
        if self.retry_strategy is not None:
            out["retry_strategy"] = self.retry_strategy
        if self.suggested_fix:
            out["suggested_fix"] = self.suggested_fix
        if self.details:
            out["details"] = dict(self.details)
        return out


def error_rules(engine: Any = None) -> ErrorRules:
    engine = resolve_engine(engine)
    return engine._cached("rules:errors", lambda: ErrorRules(engine.ruleset.table("errors")))


def should_retry(error: ToolError, attempt: int, max_attempts: int | None = None, *,
                 engine: Any = None) -> bool:
    """Whether to try again after `attempt` (1-based) failed with `error`.

    No for unrecoverable errors, an `abort` strategy, or once `attempt` reaches
    `max_attempts` (default: rules/errors.yaml `max_attempts`).
    """
    return error_rules(engine).should_retry(error, attempt, max_attempts)


def get_retry_strategy(error: ToolError, attempt: int, *, engine: Any = None) -> str:
    """What to do for `attempt` (1-based): a step of the error's ladder in rules/errors.yaml
    (same, rephrase, interference, vortex, escalate or abort)."""
    return error_rules(engine).next_strategy(error, attempt)
