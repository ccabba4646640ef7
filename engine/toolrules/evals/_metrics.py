"""Evaluation metrics (the success metrics for tool calling): per-call records
(`ToolCallEvent`), per-run records (`RunRecord`) and the aggregate
(`ToolEvaluationMetrics`), computed from runs.

How a run's calls become events: each call is lined up with the expected call it tries
to make (the first expected call not yet done with the same name, else the next one not
yet done: a wrong selection); `attempt` counts the tries at that expected call. An
expected call never tried is a missed event (no tool name). Definitions:

- overall_success_rate   successful runs / runs
- tool_selection_accuracy  events whose tool is the expected one / events (None: no events)
- parameter_accuracy     argument matchers satisfied / matchers, over events with the
                         right tool (None: no matcher was checked)
- first_attempt_success  runs that succeeded with every call right at its first attempt
                         and no failed call / runs
- avg_retries_per_task   attempts past the first, per run
- repairs_applied        JSON/format repairs the parsers made, summed
- avg_tokens_per_task    estimated tokens (request + response) per run
- latency_p50_ms / latency_p95_ms  wall time of a run (nearest-rank percentiles)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ._scenarios import match_arguments

__all__ = ["RunRecord", "ToolCallEvent", "ToolEvaluationMetrics", "aggregate", "events_for",
           "percentile"]


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """Single tool call event for evaluation logging."""

    task_id: str
    tool_name: str
    expected_tool: str | None
    parameters: dict[str, Any]
    expected_parameters: dict[str, Any] | None
    success: bool
    error: str | None
    attempt: int
    tokens_used: int
    repairs: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["repairs"] = list(self.repairs)
        return out


@dataclass(frozen=True)
class RunRecord:
    """One run of one scenario by one model under one strategy and profile."""

    scenario: str
    tier: str
    model: str
    target: str
    dialect: str | None
    strategy: str
    profile: str
    trial: int
    success: bool
    reasons: tuple[str, ...]
    stopped: str
    rounds: int
    events: tuple[ToolCallEvent, ...]
    tokens: int
    repairs: int
    latency_ms: float
    skipped: str | None = None
    error: str | None = None
    trace: str | None = None
    param_hits: int = 0
    param_total: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def retries(self) -> int:
        return sum(max(0, e.attempt - 1) for e in self.events)

    @property
    def first_attempt(self) -> bool:
        return self.success and all(e.attempt == 1 and e.success for e in self.events)

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "tier": self.tier, "model": self.model,
                "target": self.target, "dialect": self.dialect, "strategy": self.strategy,
                "profile": self.profile, "trial": self.trial, "success": self.success,
                "reasons": list(self.reasons), "stopped": self.stopped, "rounds": self.rounds,
                "tool_calls": len([e for e in self.events if e.tool_name]),
                "retries": self.retries, "first_attempt": self.first_attempt,
                "tokens": self.tokens, "repairs": self.repairs,
                "latency_ms": round(self.latency_ms, 3), "skipped": self.skipped,
                "error": self.error, "trace": self.trace,
                "events": [e.to_dict() for e in self.events]}


@dataclass(frozen=True, slots=True)
class ToolEvaluationMetrics:
    """Metrics for evaluating tool calling effectiveness: success rate, tool selection and
    parameter accuracy, first-attempt success, retries, repairs, latency, tokens."""

    total_tasks: int
    successful_tasks: int
    tool_selection_accuracy: float | None
    parameter_accuracy: float | None
    first_attempt_success: float
    avg_tokens_per_task: float
    avg_retries_per_task: float
    repairs_applied: int
    latency_p50_ms: float
    latency_p95_ms: float

    @property
    def overall_success_rate(self) -> float:
        return self.successful_tasks / self.total_tasks if self.total_tasks else 0.0

    def to_dict(self) -> dict[str, Any]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 4)
        return {"total_tasks": self.total_tasks, "successful_tasks": self.successful_tasks,
                "overall_success_rate": r(self.overall_success_rate),
                "tool_selection_accuracy": r(self.tool_selection_accuracy),
                "parameter_accuracy": r(self.parameter_accuracy),
                "first_attempt_success": r(self.first_attempt_success),
                "avg_retries_per_task": r(self.avg_retries_per_task),
                "repairs_applied": self.repairs_applied,
                "avg_tokens_per_task": r(self.avg_tokens_per_task),
                "latency_p50_ms": r(self.latency_p50_ms),
                "latency_p95_ms": r(self.latency_p95_ms)}


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def events_for(task_id: str, expected: Sequence[dict[str, Any]],
               calls: Iterable[tuple[Any, Any, int, tuple[str, ...]]]
               ) -> tuple[list[ToolCallEvent], int, int]:
    """Events for a run's calls, each (ToolCall, ToolResult, tokens of its turn, repairs of
    its turn), lined up with the expected calls; plus (matchers hit, matchers checked)."""
    done = [False] * len(expected)
    attempts = [0] * len(expected)
    events: list[ToolCallEvent] = []
    hits = total = 0
    for call, result, tokens, repairs in calls:
        j = next((k for k, e in enumerate(expected) if not done[k] and e["name"] == call.name),
                 None)
        right_tool = j is not None
        if j is None:
            j = next((k for k, d in enumerate(done) if not d), None)
        want = expected[j] if j is not None else None
        attempt = 1
        if j is not None:
            attempts[j] += 1
            attempt = attempts[j]
        matchers = dict((want or {}).get("arguments") or {})
        ok_args = True
        if right_tool and matchers:
            ok_args, h, t = match_arguments(matchers, call.arguments)
            hits += h
            total += t
        success = bool(right_tool and result.ok and ok_args)
        if success and j is not None:
            done[j] = True
        events.append(ToolCallEvent(
            task_id, call.name, want["name"] if want else None, dict(call.arguments),
            matchers if want else None, success,
            None if result.ok else (result.error or "failed"), attempt, tokens, repairs))
    for k, e in enumerate(expected):
        if not attempts[k] and not e.get("optional"):
            events.append(ToolCallEvent(task_id, "", e["name"], {},
                                        dict(e.get("arguments") or {}), False,
                                        "not called", 1, 0, ()))
    return events, hits, total


def aggregate(runs: Sequence[RunRecord]) -> ToolEvaluationMetrics:
    """The metrics of a set of runs (skipped runs left out)."""
    runs = [r for r in runs if r.skipped is None]
    n = len(runs)
    events = [e for r in runs for e in r.events]
    selected = [e for e in events if e.expected_tool is not None or e.tool_name]
    right = [e for e in selected if e.tool_name and e.tool_name == e.expected_tool]
    hits = sum(r.param_hits for r in runs)
    total = sum(r.param_total for r in runs)
    latencies = [r.latency_ms for r in runs]
    return ToolEvaluationMetrics(
        total_tasks=n,
        successful_tasks=sum(r.success for r in runs),
        tool_selection_accuracy=len(right) / len(selected) if selected else None,
        parameter_accuracy=hits / total if total else None,
        first_attempt_success=sum(r.first_attempt for r in runs) / n if n else 0.0,
        avg_tokens_per_task=sum(r.tokens for r in runs) / n if n else 0.0,
        avg_retries_per_task=sum(r.retries for r in runs) / n if n else 0.0,
        repairs_applied=sum(r.repairs for r in runs),
        latency_p50_ms=percentile(latencies, 50),
        latency_p95_ms=percentile(latencies, 95))
