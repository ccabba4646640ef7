"""Retries and failure codes for model calls, from rules/errors.yaml (`clients:`).

A failed call is tried again when it is transient (a status in `retry_statuses`, a
connection failure, a timeout) and nothing of the answer has been delivered yet. The
wait is the provider's own (Retry-After, or a delay in the error body) when it asks for
one no longer than `retry_after_max`, else exponential backoff with jitter. What a
failure means (its ToolError) comes from `clients.statuses`, then the table's mappings.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from ..calls._tool_errors import ErrorRules, ToolError, ToolErrorCode, error_rules
from ..calls._validation import fill
from ..providers._transport import parse_seconds

__all__ = ["RetryPolicy", "retry_policy"]


@dataclass(frozen=True)
class _StatusRule:
    statuses: frozenset[int]
    classes: frozenset[int]
    code: ToolErrorCode
    recoverable: bool | None
    retry_strategy: str | None
    fix: str | None

    def matches(self, status: int) -> bool:
        return status in self.statuses or status // 100 in self.classes


def _status_sets(values: Any) -> tuple[frozenset[int], frozenset[int]]:
    values = values or []
    return (frozenset(v for v in values if isinstance(v, int)),
            frozenset(int(v[0]) for v in values if isinstance(v, str) and v[:1].isdigit()))


class _Failure(Exception):
    """Carries an HTTP status through the error table's mappings."""

    def __init__(self, message: str, status: int | None):
        super().__init__(message)
        self.status_code = status


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int
    initial: float
    factor: float
    max_wait: float
    jitter: float
    retry_after_max: float
    statuses: frozenset[int]
    classes: frozenset[int]
    retry_network: bool
    retry_timeouts: bool
    status_rules: tuple[_StatusRule, ...]
    errors: ErrorRules

    # ------------------------------------------------------------ when

    def retries_status(self, status: int) -> bool:
        return status in self.statuses or status // 100 in self.classes

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """The wait before retry number `attempt` (1-based), jittered."""
        base = min(self.max_wait, self.initial * self.factor ** max(attempt - 1, 0))
        if self.jitter:
            r = (rng or random).uniform(-self.jitter, self.jitter)
            base = max(0.0, base * (1 + r))
        return base

    def wait(self, attempt: int, asked: float | None) -> float | None:
        """Seconds to wait before retry `attempt`; None when the provider asks for a wait
        longer than `retry_after_max` (the call is not retried)."""
        if asked is not None:
            if asked > self.retry_after_max:
                return None
            return max(asked, 0.0)
        return self.backoff(attempt)

    # ------------------------------------------------------------ what

    def error(self, message: str, *, status: int | None = None, code: ToolErrorCode | None = None,
              kind: str | None = None, tool: str = "model") -> ToolError:
        """The ToolError of a failed model call."""
        values = {"tool": tool, "error": message, "exception": kind or "",
                  "status": status if status is not None else ""}
        rule = next((r for r in self.status_rules if status is not None and r.matches(status)),
                    None)
        if code is None and rule is None:
            probe = f"{kind}: {message}" if kind else message
            mapped = self.errors.from_exception(_Failure(probe, status), tool)
            code = ToolErrorCode(mapped.code)
            details = dict(mapped.details or {})
            details.pop("exception_type", None)
            return ToolError(code=code, message=message, recoverable=mapped.recoverable,
                             retry_strategy=mapped.retry_strategy,
                             suggested_fix=mapped.suggested_fix,
                             details=_details(details, status, kind))
        code = code if code is not None else rule.code if rule is not None else ToolErrorCode.EXECUTION
        defaults = self.errors.codes.get(code, {})
        recoverable = rule.recoverable if rule is not None and rule.recoverable is not None \
            else bool(defaults.get("recoverable", True))
        strategy = (rule.retry_strategy if rule is not None else None) or defaults.get("retry_strategy")
        fix = (rule.fix if rule is not None else None) or defaults.get("fix")
        return ToolError(code=code, message=message, recoverable=recoverable,
                         retry_strategy=strategy, suggested_fix=fill(fix, values) if fix else None,
                         details=_details({"rule": "clients"}, status, kind))


def _details(base: dict[str, Any], status: int | None, kind: str | None) -> dict[str, Any]:
    out = dict(base)
    if status is not None:
        out["status"] = status
    if kind:
        out["provider_error"] = kind
    return out


def parse_retry_after(name: str, value: str | None) -> float | None:
    """Seconds from a Retry-After header (seconds or an HTTP date) or a *-ms header."""
    if not value:
        return None
    if name.endswith("-ms"):
        ms = parse_seconds(value.strip())
        return ms / 1000.0 if ms is not None else None
    secs = parse_seconds(value.strip())
    if secs is not None:
        return secs
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def retry_policy(engine: Any) -> RetryPolicy:
    """rules/errors.yaml `clients:`, compiled once per engine."""

    def build() -> RetryPolicy:
        table = engine.ruleset.table("errors") or {}
        data = table.get("clients") or {}
        backoff = data.get("backoff") or {}
        statuses, classes = _status_sets(data.get("retry_statuses", [408, 429, "5xx"]))
        rules = []
        for entry in data.get("statuses") or []:
            s, c = _status_sets(entry.get("status"))
            rules.append(_StatusRule(s, c, ToolErrorCode(entry["code"]), entry.get("recoverable"),
                                     entry.get("retry_strategy"), entry.get("fix")))
        return RetryPolicy(
            max_retries=int(data.get("max_retries", 2)),
            initial=float(backoff.get("initial", 0.5)),
            factor=float(backoff.get("factor", 2.0)),
            max_wait=float(backoff.get("max", 8.0)),
            jitter=float(backoff.get("jitter", 0.25)),
            retry_after_max=float(data.get("retry_after_max", 60.0)),
            statuses=statuses, classes=classes,
            retry_network=bool(data.get("retry_network", True)),
            retry_timeouts=bool(data.get("retry_timeouts", True)),
            status_rules=tuple(rules),
            errors=error_rules(engine),
        )

    policy: RetryPolicy = engine._cached("clients:retry", build)
    return policy
