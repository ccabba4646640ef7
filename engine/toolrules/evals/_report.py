"""Reports of an evaluation: report.json (every group of model x scenario x strategy with
the success metrics by name, every run), summary.md, and a self-contained report.html whose
charts are drawn by plotly (its JavaScript inlined: the page needs no network)."""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._version import __version__
from ._metrics import RunRecord, aggregate

__all__ = ["METRIC_NAMES", "STRATEGY_HEADER", "build_report", "model_matrix", "pct",
           "report_html", "strategy_rows", "summary_markdown", "write_reports"]

METRIC_NAMES = ("overall_success_rate", "tool_selection_accuracy", "parameter_accuracy",
                "first_attempt_success", "avg_retries_per_task", "repairs_applied",
                "avg_tokens_per_task", "latency_p50_ms", "latency_p95_ms")


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _group(runs: Sequence[RunRecord], key: Callable[[RunRecord], tuple[Any, ...]]
           ) -> dict[tuple[Any, ...], list[RunRecord]]:
    out: dict[tuple[Any, ...], list[RunRecord]] = {}
    for r in runs:
        out.setdefault(key(r), []).append(r)
    return out


def _metrics(runs: Sequence[RunRecord]) -> dict[str, Any]:
    m = aggregate(runs)
    out = m.to_dict()
    out["skipped"] = sum(1 for r in runs if r.skipped)
    return out


def build_report(runs: Sequence[RunRecord], config: dict[str, Any]) -> dict[str, Any]:
    """The report as data (what report.json holds)."""
    strategies = list(dict.fromkeys(r.strategy for r in runs))
    groups = []
    for (target, scenario, strategy, profile), rs in _group(
            runs, lambda r: (r.target, r.scenario, r.strategy, r.profile)).items():
        first = rs[0]
        groups.append({"scenario": scenario, "tier": first.tier, "model": first.model,
                       "target": target, "dialect": first.dialect, "strategy": strategy,
                       "profile": profile, **_metrics(rs),
                       "failures": sorted({x for r in rs for x in r.reasons})[:5]})
    by_model = []
    for (target, strategy), rs in _group(runs, lambda r: (r.target, r.strategy)).items():
        by_model.append({"target": target, "model": rs[0].model, "dialect": rs[0].dialect,
                         "strategy": strategy, **_metrics(rs)})
    by_scenario = []
    for (scenario, strategy), rs in _group(runs, lambda r: (r.scenario, r.strategy)).items():
        by_scenario.append({"scenario": scenario, "tier": rs[0].tier, "strategy": strategy,
                            **_metrics(rs)})
    return {
        "toolrules": __version__,
        "config": config,
        "metric_names": list(METRIC_NAMES),
        "summary": _metrics(runs),
        "by_strategy": {s: _metrics([r for r in runs if r.strategy == s]) for s in strategies},
        "by_model": by_model,
        "by_scenario": by_scenario,
        "groups": groups,
        "runs": [r.to_dict() for r in runs],
    }


# ---------------------------------------------------------------- Markdown

def _md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def strategy_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, m in report["by_strategy"].items():
        if m["total_tasks"] == 0:
            rows.append([name, "skipped", "-", "-", "-", "-", "-", "-", "-", "-"])
            continue
        rows.append([name, f"{m['successful_tasks']}/{m['total_tasks']}",
                     pct(m["overall_success_rate"]), pct(m["tool_selection_accuracy"]),
                     pct(m["parameter_accuracy"]), pct(m["first_attempt_success"]),
                     f"{m['avg_retries_per_task']:.2f}", str(m["repairs_applied"]),
                     f"{m['avg_tokens_per_task']:.0f}",
                     f"{m['latency_p50_ms']:.1f} / {m['latency_p95_ms']:.1f}"])
    return rows


STRATEGY_HEADER = ("strategy", "ok", "success", "selection", "params", "first try",
                   "retries", "repairs", "tokens", "p50 / p95 ms")


def model_matrix(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Rows: models (with their dialect); columns: strategies (success rate)."""
    strategies = list(report["by_strategy"])
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    order: list[tuple[str, str | None]] = []
    for g in report["by_model"]:
        cells[(g["target"], g["strategy"])] = g
        if (g["target"], g["dialect"]) not in order:
            order.append((g["target"], g["dialect"]))
    rows = []
    for target, dialect in order:
        row = [target, dialect or "native"]
        for s in strategies:
            g = cells.get((target, s))
            if g is None or g["total_tasks"] == 0:
                row.append("-")
            else:
                row.append(f"{pct(g['overall_success_rate'])} ({g['successful_tasks']}/"
                           f"{g['total_tasks']})")
        rows.append(row)
    return ["model", "dialect", *strategies], rows


def summary_markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    cfg = report["config"]
    header, rows = model_matrix(report)
    scen: dict[str, dict[str, str]] = {}
    for g in report["by_scenario"]:
        scen.setdefault(g["scenario"], {"tier": g["tier"]})[g["strategy"]] = \
            pct(g["overall_success_rate"]) if g["total_tasks"] else "-"
    strategies = list(report["by_strategy"])
    failures: dict[str, int] = {}
    for r in report["runs"]:
        for reason in r["reasons"][:1]:
            key = f"{r['scenario']}: {reason}"
            failures[key] = failures.get(key, 0) + 1
    top = sorted(failures.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    parts = [
        "# toolrules eval",
        "",
        f"{s['successful_tasks']}/{s['total_tasks']} runs succeeded "
        f"({pct(s['overall_success_rate'])}); models: {cfg.get('models') or 'all offline'}, "
        f"scenarios: {cfg.get('scenarios') or 'all'}, trials: {cfg.get('trials')}.",
        "",
        "## By strategy",
        "",
        _md_table(STRATEGY_HEADER, strategy_rows(report)),
        "",
        "## Success by model and strategy",
        "",
        _md_table(header, rows),
        "",
        "## Success by scenario and strategy",
        "",
        _md_table(["scenario", "tier", *strategies],
                  [[k, v["tier"], *[v.get(st, "-") for st in strategies]]
                   for k, v in sorted(scen.items())]),
        "",
        "## Most frequent failures",
        "",
        *([f"- {n} x {k}" for k, n in top] or ["- none"]),
        "",
    ]
    return "\n".join(parts)


# ---------------------------------------------------------------- HTML

def report_html(report: dict[str, Any]) -> str:
    import plotly.graph_objects as go
    import plotly.io as pio

    strategies = list(report["by_strategy"])
    ran = [s for s in strategies if report["by_strategy"][s]["total_tasks"]]
    by = report["by_strategy"]
    success = go.Figure(go.Bar(
        x=ran, y=[round(100 * (by[s]["overall_success_rate"] or 0), 1) for s in ran],
        text=[pct(by[s]["overall_success_rate"]) for s in ran], textposition="auto",
        name="success"))
    success.add_trace(go.Bar(
        x=ran, y=[round(100 * (by[s]["first_attempt_success"] or 0), 1) for s in ran],
        name="first attempt"))
    success.update_layout(title="Success rate by strategy (%)", barmode="group",
                          yaxis={"range": [0, 100]}, height=380)
    latency = go.Figure()
    latency.add_trace(go.Bar(x=ran, y=[by[s]["latency_p50_ms"] for s in ran], name="p50"))
    latency.add_trace(go.Bar(x=ran, y=[by[s]["latency_p95_ms"] for s in ran], name="p95"))
    latency.update_layout(title="Run latency by strategy (ms)", barmode="group", height=380)
    header, rows = model_matrix(report)
    z = []
    for g_row in rows:
        z.append([_cell_value(c) for c in g_row[2:]])
    heat = go.Figure(go.Heatmap(z=z, x=header[2:], y=[f"{r[0]} ({r[1]})" for r in rows],
                                zmin=0, zmax=100, colorscale="RdYlGn",
                                text=[[c for c in r[2:]] for r in rows],
                                texttemplate="%{text}", hoverinfo="text"))
    heat.update_layout(title="Success by model and strategy (%)",
                       height=max(400, 22 * len(rows) + 160), yaxis={"autorange": "reversed"})
    figs = [("success", success), ("latency", latency), ("matrix", heat)]
    divs = []
    for i, (name, fig) in enumerate(figs):
        divs.append(pio.to_html(fig, full_html=False, include_plotlyjs=(i == 0),
                                div_id=f"chart-{name}", config={"displaylogo": False}))
    table = "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in STRATEGY_HEADER) + \
        "</tr>" + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                          for row in strategy_rows(report)) + "</table>"
    s = report["summary"]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>toolrules eval</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}
td:first-child,th:first-child{{text-align:left}}</style></head><body>
<h1>toolrules eval</h1>
<p id="headline">{s['successful_tasks']}/{s['total_tasks']} runs succeeded
({pct(s['overall_success_rate'])}); toolrules {html.escape(report['toolrules'])}.</p>
{table}
{''.join(divs)}
</body></html>
"""


def _cell_value(cell: str) -> float | None:
    if cell.endswith(")") and "%" in cell:
        return float(cell.split("%")[0])
    return None


def write_reports(report: dict[str, Any], directory: str | Path) -> dict[str, Path]:
    """report.json, summary.md and report.html in `directory`."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    out = {"json": d / "report.json", "markdown": d / "summary.md", "html": d / "report.html"}
    out["json"].write_text(json.dumps(report, indent=1, ensure_ascii=False, default=str) + "\n",
                           encoding="utf-8")
    out["markdown"].write_text(summary_markdown(report), encoding="utf-8")
    try:
        out["html"].write_text(report_html(report), encoding="utf-8")
    except ImportError:
        out.pop("html")
    return out
