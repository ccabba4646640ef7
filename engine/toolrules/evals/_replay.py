"""Replaying a trace that `toolrules eval` wrote: the run's closing `eval` record names its
scenario and the capability overrides its strategy applied, so the replay can rebuild what
the run had (the engine with those overrides, the scenario's tools with their mock
handlers, a fresh copy of the fixture workspace, the scenario's trust) instead of only the
built-in tools a plain `toolrules run` trace needs."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import ToolrulesError
from ..rules._default import resolve_engine
from ..runtime._replay import ReplayReport
from ..runtime._replay import replay as replay_loop
from ..runtime._trace import Trace, plain
from ._runner import derived_engine
from ._scenarios import Scenario, load_scenarios

__all__ = ["EvalRun", "EvalTraceError", "eval_run", "replay_eval", "replay_setup"]


class EvalTraceError(ToolrulesError):
    """An eval trace whose run cannot be rebuilt (its scenario is not in the rule set)."""


@dataclass(frozen=True)
class EvalRun:
    """What an eval trace says about its run: the scenario, the target and strategy (for
    messages), and the capability overrides the run's engine had for `model` (the eval
    record's `model` when it names one, else the model the loop ran: the trace's start)."""

    scenario: str
    target: str
    strategy: str
    model: str
    overrides: dict[str, Any] = field(default_factory=dict)


def eval_run(trace: Trace) -> EvalRun | None:
    """The eval run a trace records (its last `eval` record), or None for other traces."""
    rec = next((r for r in reversed(trace.records) if r.get("type") == "eval"), None)
    if rec is None or not isinstance(rec.get("scenario"), str):
        return None
    overrides = rec.get("overrides")
    return EvalRun(scenario=rec["scenario"], target=str(rec.get("target") or ""),
                   strategy=str(rec.get("strategy") or ""),
                   model=str(rec.get("model") or trace.records[0].get("model") or ""),
                   overrides=dict(plain(overrides)) if isinstance(overrides, Mapping) else {})


def _scenario(engine: Any, run: EvalRun, where: str) -> Scenario:
    every = load_scenarios(engine)
    for s in every:
        if s.id == run.scenario:
            return s
    raise EvalTraceError(
        f"{where}: an eval run of scenario {run.scenario!r}, which the loaded rules do not "
        f"define (scenarios: {', '.join(s.id for s in every) or '-'}); load the rule "
        "directories the eval ran with (--rules DIR)")


def _run_of(trace: Trace, engine: Any, where: str) -> tuple[EvalRun, Scenario]:
    run = eval_run(trace)
    if run is None:
        raise EvalTraceError(f"{where}: not a trace of `toolrules eval` (no `eval` record)")
    return run, _scenario(engine, run, where)


def replay_setup(trace: Trace, engine: Any, workspace: str | Path, *, trust: str | None = None,
                 where: str = "trace") -> tuple[Any, Any]:
    """(engine, executor) as the eval run had them, the tools working in `workspace`
    (which the caller prepared: `Scenario.make_workspace` for a fresh fixture). The
    executor's policy, allow/deny lists and dry run come from the trace's header; the
    trust is `trust` or the scenario's."""
    from ..runtime import ToolExecutor

    run, scenario = _run_of(trace, engine, where)
    eng = derived_engine(engine, [{"id": run.model, "set": run.overrides}]) \
        if run.overrides and run.model else engine
    ws = Path(workspace)
    info = plain(trace.records[0].get("executor") or {})
    allowed = info.get("allowed")
    executor = ToolExecutor(scenario.registry(eng, ws), workspace=ws,
                            trust=trust or scenario.trust, engine=eng,
                            allowed=list(allowed) if allowed else None,
                            denied=list(info.get("denied") or ()),
                            dry_run=bool(info.get("dry_run")),
                            policy=info.get("policy") or "default")
    return eng, executor


async def replay_eval(trace: Trace | str | Path, engine: Any = None, *,
                      workspace: str | Path | None = None, trust: str | None = None,
                      where: str | None = None) -> ReplayReport:
    """Run an eval trace again: the recorded model turns against the scenario's tools in a
    fresh fixture workspace (removed afterwards), under the run's capability overrides.
    With `workspace`, the tools work in that directory as it is instead. `where` names
    the trace in errors (default: its path); `engine` is the rule set the eval loaded
    (default: the bundled rules)."""
    where = where or ("trace" if isinstance(trace, Trace) else str(trace))
    engine = resolve_engine(engine)
    recorded = trace if isinstance(trace, Trace) else Trace.load(trace)
    _, scenario = _run_of(recorded, engine, where)  # a clear error before any files
    ws = Path(workspace) if workspace is not None else \
        Path(tempfile.mkdtemp(prefix="toolrules-replay-"))
    try:
        if workspace is None:
            scenario.make_workspace(ws)
        eng, executor = replay_setup(recorded, engine, ws, trust=trust, where=where)
        try:
            return await replay_loop(recorded, executor, engine=eng)
        finally:
            executor.registry.close()  # a scenario's MCP servers stop here
    finally:
        if workspace is None:
            shutil.rmtree(ws, ignore_errors=True)
