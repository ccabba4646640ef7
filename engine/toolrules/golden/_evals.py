"""Golden suite `evals`: the offline evaluation (`toolrules eval` with no filters: every
scenario of rules/scenarios on every offline entry of rules/eval.yaml, under the default
strategies), reduced to the numbers that must not drift: successes per model and
strategy, the success metrics per strategy (latency left out: it is measured, not
deterministic), and every failing run with its first reason.

Invariant: no run raised an error (a scripted model that cannot be read, an entry whose
model no longer resolves to its dialect).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ._core import GoldenFile

__all__ = ["golden_files"]


def offline_summary(runs: list[Any]) -> dict[str, Any]:
    """The deterministic part of an offline evaluation."""
    from ..evals import aggregate

    strategies = list(dict.fromkeys(r.strategy for r in runs))
    by_strategy = {}
    for s in strategies:
        m = aggregate([r for r in runs if r.strategy == s]).to_dict()
        m.pop("latency_p50_ms")
        m.pop("latency_p95_ms")
        by_strategy[s] = m
    models: dict[str, dict[str, str]] = {}
    for r in runs:
        if r.skipped:
            continue
        row = models.setdefault(f"{r.target} ({r.dialect or 'native'})", {})
        ok, n = (int(x) for x in row.get(r.strategy, "0/0").split("/"))
        row[r.strategy] = f"{ok + r.success}/{n + 1}"
    failures = [f"{r.target} / {r.strategy} / {r.scenario}: "
                f"{r.reasons[0] if r.reasons else r.error}"
                for r in runs if not r.success and not r.skipped]
    return {"runs": len(runs), "skipped": sum(1 for r in runs if r.skipped),
            "by_strategy": by_strategy, "by_model": models, "failures": failures}


def golden_files(engine: Any, root: Path) -> Iterable[GoldenFile]:
    from ..evals import plan, run_plan

    if engine.ruleset.table("eval") is None:
        return
    runs = run_plan(plan(engine))
    problems = [f"{r.target} / {r.strategy} / {r.scenario}: {r.error}"
                for r in runs if r.error]
    yield GoldenFile(path="evals/offline.golden.yaml", content=offline_summary(runs),
                     problems=problems, source="rules/scenarios/, rules/eval.yaml")
