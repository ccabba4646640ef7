"""CLI: `toolrules matrix` - every bundled model family's resolved capabilities."""

from __future__ import annotations

from typing import Any

import click

from ._common import echo_json, get_engine

__all__ = ["COMMANDS"]

_COLUMNS = (("native", "native_tools"), ("par", "parallel_tools"), ("strm", "tool_streaming"),
            ("json", "json_mode"), ("think", "reasoning"), ("strict", "needs_tool_schema_strict"),
            ("req", "supports_tool_choice_required"))


def _yn(value: bool) -> str:
    return "yes" if value else "-"


_SAMPLE_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"}},
        "required": ["city"]}}}]
_SAMPLE_CALL = {"name": "get_weather", "arguments": {"city": "Zürich", "days": 3, "metric": True}}


def _round_trip(engine: Any, model_id: str) -> str:
    """Write a sample call the way this model is asked to (its trained format, or its
    emulation prompt's) and read it back with the parser chosen for the model."""
    render = getattr(engine, "render_call", None)
    if render is None:
        return "-"
    cap = engine.capability(model_id)
    style = None
    if cap.native_tools and cap.dialect:
        trained = {s.name for s in engine.emulation_styles() if s.trained}
        if cap.dialect not in trained:
            return "parse"  # a format we read but never prompt for
        style = cap.dialect
    try:
        text = render(_SAMPLE_CALL, _SAMPLE_TOOLS, model_id, style=style)
        parsed = engine.text_parser(model=model_id, tools=_SAMPLE_TOOLS).parse(text)
    except Exception as exc:  # the matrix reports, it does not stop
        return f"FAIL ({type(exc).__name__})"
    got = [(c.name, c.arguments) for c in parsed.tool_calls]
    return "ok" if got == [(_SAMPLE_CALL["name"], _SAMPLE_CALL["arguments"])] else "FAIL"


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
                "dialect": cap.dialect or "-", "reads": engine.dialect_for(model_id),
                "roundtrip": _round_trip(engine, model_id),
            })
    return rows


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(exists=True),
              help="Extra rule directories (overlays).")
def matrix(as_json: bool, rule_paths: tuple[str, ...]) -> None:
    """Every bundled family's example models: capabilities, context, emulation and dialect.

    This is the quickest end-to-end exercise of the rules: every example id is parsed,
    resolved through its family's clauses, shown with the dialect its raw text uses, and a
    sample call is written the way the model is prompted and parsed back. Exit status 1
    when a round trip fails.
    """
    engine = get_engine(rule_paths)
    rows = _rows(engine)
    if as_json:
        echo_json(rows)
        return
    heads = ["model", "family", "version", "size", *(s for s, _ in _COLUMNS), "ctx", "emulation",
             "dialect", "reads", "roundtrip"]
    table = [[str(r["model"]), r["family"], r["version"], r["size"],
              *(_yn(r[s]) for s, _ in _COLUMNS),
              f"{r['ctx'] // 1000}k" if r["ctx"] else "-", r["emulation"], r["dialect"],
              r["reads"], r["roundtrip"]]
             for r in rows]
    widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h)
              for i, h in enumerate(heads)]
    click.echo("  ".join(h.ljust(w) for h, w in zip(heads, widths)))
    click.echo("  ".join("-" * w for w in widths))
    for row in table:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    families = len({r["family"] for r in rows})
    ok = sum(r["roundtrip"] == "ok" for r in rows)
    failed = [r["model"] for r in rows if str(r["roundtrip"]).startswith("FAIL")]
    click.echo("\nreads = the dialect that parses the model's raw text; roundtrip = a sample "
               "call written the way the model is prompted, parsed back with that dialect "
               "(parse = a trained format we read but never prompt for).")
    click.echo(f"{ok} round trips ok, {len(failed)} failed{': ' + ', '.join(failed) if failed else ''}")
    click.echo(f"\n{len(rows)} example models, {families} families "
               f"({len(engine.ruleset.ids('model'))} model rule files, "
               f"{len(engine.ruleset.ids('dialect'))} dialects, "
               f"{len(engine.ruleset.ids('provider'))} providers).")
    if failed:
        raise SystemExit(1)


COMMANDS = [matrix]
