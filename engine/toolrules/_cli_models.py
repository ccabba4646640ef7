"""CLI: `toolrules matrix` - every bundled model family's resolved capabilities."""

from __future__ import annotations

from typing import Any

import click

from .cli import echo_json, get_engine

__all__ = ["COMMANDS"]

_COLUMNS = (("native", "native_tools"), ("par", "parallel_tools"), ("strm", "tool_streaming"),
            ("json", "json_mode"), ("think", "reasoning"), ("strict", "needs_tool_schema_strict"),
            ("req", "supports_tool_choice_required"))


def _yn(value: bool) -> str:
    return "yes" if value else "-"


def _rows(engine: Any) -> list[dict[str, Any]]:
    rows = []
    for rid in engine.ruleset.ids("model"):
        data = engine.ruleset.get("model", rid).data or {}
        for model_id in data.get("examples", []) or []:
            res = engine.resolve_model(model_id)
            cap, spec = res.capability, res.spec
            rows.append({
                "model": model_id, "family": spec.family,
                "version": ".".join(map(str, spec.version)) or "-",
                "size": f"{spec.size / 1e9:g}B" if spec.size else "-",
                **{short: getattr(cap, name) for short, name in _COLUMNS},
                "ctx": cap.context_window, "emulation": cap.emulation_style,
                "dialect": cap.dialect or "-",
            })
    return rows


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(exists=True),
              help="Extra rule directories (overlays).")
def matrix(as_json: bool, rule_paths: tuple[str, ...]) -> None:
    """Every bundled family's example models: capabilities, context, emulation and dialect.

    This is the quickest end-to-end exercise of the rules: every example id is parsed,
    resolved through its family's clauses, and shown with the dialect its raw text uses.
    """
    engine = get_engine(rule_paths)
    rows = _rows(engine)
    if as_json:
        echo_json(rows)
        return
    heads = ["model", "family", "version", "size", *(s for s, _ in _COLUMNS), "ctx", "emulation",
             "dialect"]
    table = [[str(r["model"]), r["family"], r["version"], r["size"],
              *(_yn(r[s]) for s, _ in _COLUMNS),
              f"{r['ctx'] // 1000}k" if r["ctx"] else "-", r["emulation"], r["dialect"]]
             for r in rows]
    widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h)
              for i, h in enumerate(heads)]
    click.echo("  ".join(h.ljust(w) for h, w in zip(heads, widths)))
    click.echo("  ".join("-" * w for w in widths))
    for row in table:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    families = len({r["family"] for r in rows})
    click.echo(f"\n{len(rows)} example models, {families} families "
               f"({len(engine.ruleset.ids('model'))} model rule files, "
               f"{len(engine.ruleset.ids('dialect'))} dialects, "
               f"{len(engine.ruleset.ids('provider'))} providers).")


COMMANDS = [matrix]
