"""Evaluation (`toolrules eval`): scenarios as rules (rules/scenarios/), offline scripted
models per dialect, live models through connect(), the strategy matrix of rules/eval.yaml,
the success metrics, the reports (JSON, Markdown, HTML with charts), and replaying a run
from its trace (`replay_eval`)."""

from __future__ import annotations

from ._catalog import EvalCatalog, Profile, Strategy, Target, catalog
from ._metrics import (
    RunRecord,
    ToolCallEvent,
    ToolEvaluationMetrics,
    aggregate,
    events_for,
    percentile,
)
from ._replay import EvalRun, EvalTraceError, eval_run, replay_eval, replay_setup
from ._report import (
    METRIC_NAMES,
    build_report,
    model_matrix,
    pct,
    report_html,
    strategy_rows,
    summary_markdown,
    write_reports,
)
from ._runner import EvalPlan, Unit, derived_engine, plan, run_plan, run_unit
from ._scenarios import Scenario, load_scenarios, match_arguments, match_value
from ._scripted import ScriptedPersona, render_step

__all__ = [
    "METRIC_NAMES",
    "EvalCatalog",
    "EvalPlan",
    "EvalRun",
    "EvalTraceError",
    "Profile",
    "RunRecord",
    "Scenario",
    "ScriptedPersona",
    "Strategy",
    "Target",
    "ToolCallEvent",
    "ToolEvaluationMetrics",
    "Unit",
    "aggregate",
    "build_report",
    "catalog",
    "derived_engine",
    "eval_run",
    "events_for",
    "load_scenarios",
    "match_arguments",
    "match_value",
    "model_matrix",
    "pct",
    "percentile",
    "plan",
    "render_step",
    "replay_eval",
    "replay_setup",
    "report_html",
    "run_plan",
    "run_unit",
    "strategy_rows",
    "summary_markdown",
    "write_reports",
]
