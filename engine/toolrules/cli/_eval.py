"""CLI: `toolrules eval` - tool-calling success per model, dialect and strategy (offline
scripted models by default, live models when a filter names them), with a live progress
display, a summary table, and report.json / summary.md / report.html."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from ._common import fail, get_engine, guard

__all__ = ["COMMANDS"]


def _split(values: tuple[str, ...]) -> list[str] | None:
    out = [v.strip() for item in values for v in item.split(",") if v.strip()]
    return out or None


@click.command("eval")
@click.option("--models", "-m", default=None,
              help="Model filter: comma-separated entry ids, model ids, providers, dialects or "
                   "tags, `*` wildcards, `!` exclusions, presets (stable, all), or connect() "
                   "specs (local, openai-compatible:MODEL, anthropic:MODEL). Default: every "
                   "offline entry (one per dialect).")
@click.option("--scenarios", "-s", multiple=True,
              help="Scenario ids, tags or presets (comma-separated), or all. Default: all.")
@click.option("--trials", "-n", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Runs per scenario.")
@click.option("--jobs", "-j", type=click.IntRange(0, 64), default=0,
              help="Worker processes (units of model x strategy run in parallel). Default "
                   "(0): one per CPU, at most 4, for an offline plan of 20 units or more; "
                   "else 1.")
@click.option("--profiles", multiple=True, help="Sampling profiles (rules/eval.yaml), or all.")
@click.option("--strategies", multiple=True,
              help="Strategies of the matrix (rules/eval.yaml), or all. Default: the table's "
                   "default_strategies.")
@click.option("--report", "report_dir", type=click.Path(file_okay=False),
              help="Write report.json, summary.md, report.html and traces/ here.")
@click.option("--base-url", help="Server address for live models.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress display.")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(exists=True),
              help="Extra rule directories (overlays: scenarios, dialects, ...).")
@guard
def eval_command(models: str | None, scenarios: tuple[str, ...], trials: int, jobs: int,
                 profiles: tuple[str, ...], strategies: tuple[str, ...],
                 report_dir: str | None, base_url: str | None, as_json: bool, quiet: bool,
                 rule_paths: tuple[str, ...]) -> None:
    """Measure tool calling: every scenario (rules/scenarios) through the full tool loop, per
    model and strategy, with the success metrics (success rate, tool selection, parameter
    accuracy, first-try success, retries, latency). Exit 1 when a run errors."""
    from ..evals import build_report, plan, write_reports
    from ..evals._runner import preflight

    engine = get_engine(rule_paths)
    trace_dir = None
    if report_dir:
        from pathlib import Path

        trace_dir = str(Path(report_dir) / "traces")
    try:
        p = plan(engine, models, _split(scenarios), _split(strategies), _split(profiles),
                 trials, base_url, rule_paths, trace_dir)
    except ValueError as exc:
        fail(str(exc), "see rules/eval.yaml (models, presets, strategies, profiles) and "
             "rules/scenarios/", code=2)
    problems = preflight(engine, p)
    if problems:
        fail("a live model cannot run:\n  " + "\n  ".join(problems),
             "fix it (install, weights, the provider's key variable) or leave the model out "
             "of --models", code=2)
    if jobs == 0:
        from ..evals._runner import auto_jobs

        jobs = auto_jobs(p)
    started = time.perf_counter()
    runs = _run_with_progress(p, jobs, quiet or as_json)
    wall = time.perf_counter() - started
    config = {"models": models, "scenarios": _split(scenarios),
              "strategies": list(dict.fromkeys(u.strategy.name for u in p.units)),
              "profiles": sorted({u.profile.name for u in p.units}), "trials": trials,
              "jobs": jobs, "runs": len(runs)}
    report = build_report(runs, config)
    if report_dir:
        written = write_reports(report, report_dir)
    if as_json:
        import json

        click.echo(json.dumps(report, indent=1, ensure_ascii=False, default=str))
    else:
        _print_summary(report, wall)
        if report_dir:
            click.echo("reports: " + ", ".join(str(v) for v in written.values()) +
                       f" (traces in {trace_dir}; toolrules replay TRACE)")
    sys.exit(1 if any(r.error for r in runs) else 0)


def _run_with_progress(p: Any, jobs: int, quiet: bool) -> list[Any]:
    from ..evals import run_plan

    if quiet or not sys.stderr.isatty():
        return run_plan(p, jobs)
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(stderr=True)
    ok = [0, 0]
    with Progress(TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[ok]}"), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("", total=p.runs, ok="")

        def on_run(r: Any) -> None:
            ok[0] += bool(r.success)
            ok[1] += r.skipped is None
            mark = "ok" if r.success else ("skip" if r.skipped else "FAIL")
            progress.update(task, advance=1, ok=f"{ok[0]}/{ok[1]} ok",
                            description=f"{r.target} {r.strategy} {r.scenario}: {mark}")
        return run_plan(p, jobs, on_run)


def _print_summary(report: dict[str, Any], wall: float) -> None:
    from rich.console import Console
    from rich.table import Table

    from ..evals import model_matrix, pct, strategy_rows
    from ..evals._report import STRATEGY_HEADER

    console = Console(width=160)
    header, rows = model_matrix(report)
    t = Table(title="Success by model and strategy", title_justify="left")
    for i, h in enumerate(header):
        t.add_column(h, justify="left" if i < 2 else "right")
    for row in rows:
        t.add_row(*row)
    console.print(t)
    t2 = Table(title="Metrics by strategy", title_justify="left")
    for i, h in enumerate(STRATEGY_HEADER):
        t2.add_column(h, justify="left" if i == 0 else "right")
    for row in strategy_rows(report):
        t2.add_row(*row)
    console.print(t2)
    s = report["summary"]
    console.print(f"{s['successful_tasks']}/{s['total_tasks']} runs succeeded "
                  f"({pct(s['overall_success_rate'])}), {s['skipped']} skipped, "
                  f"in {wall:.1f} s")


COMMANDS = [eval_command]
