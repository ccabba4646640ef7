"""CLI: `toolrules render`, `toolrules audit`, `toolrules validate-call`."""

from __future__ import annotations

from typing import Any

import click

from ._common import echo_json, fail, get_engine, guard, read_json_arg

__all__ = ["COMMANDS"]

_RULES = click.option("--rules", "rule_paths", multiple=True, type=click.Path(exists=True),
                      help="Extra rule directories (overlays).")


def _tools(value: str) -> Any:
    """Tools from a JSON file: a list of tools, {"tools": [...]}, or one tool."""
    from .._types import coerce_tools

    data = read_json_arg(value, "tools file")
    if isinstance(data, dict) and isinstance(data.get("tools"), list):
        data = data["tools"]
    try:
        return coerce_tools(data)
    except (TypeError, ValueError) as exc:
        fail(f"tools file {value!r}: {exc}",
             'give a JSON list of tools like [{"type": "function", "function": {"name": '
             '"read_file", "parameters": {...}}}] or {"name": ..., "parameters": ...}')
    return ()


@click.command()
@click.option("--model", "-m", help="Model id whose capability picks the prompt.")
@click.option("--tools", "-t", "tools_path", required=True, help="Tools JSON file (or -).")
@click.option("--task", help="Task hint: ranks tools when the context budget applies.")
@click.option("--style", "-s", help="A style (json, compact, parallel, xml, markdown) or a "
              "dialect with a trained prompt, instead of the model's choice.")
@click.option("--examples/--no-examples", default=None,
              help="Force guidance examples on or off (default: the capability decides).")
@click.option("--json", "as_json", is_flag=True, help="Also show style, dialect and tools.")
@_RULES
@guard
def render(model: str | None, tools_path: str, task: str | None, style: str | None,
           examples: bool | None, as_json: bool, rule_paths: tuple[str, ...]) -> None:
    """Render the tool-calling prompt a model without native tools gets."""
    engine = get_engine(rule_paths)
    tools = _tools(tools_path)
    prompt = engine.emulation(tools, model, task, style=style, examples=examples)
    if as_json:
        echo_json({"style": prompt.style.name, "template": prompt.style.template,
                   "dialect": prompt.dialect, "compact": prompt.compact,
                   "tools": [t.name for t in prompt.tools],
                   "dropped": [t.name for t in tools if t.name not in
                               {s.name for s in prompt.tools}],
                   "prompt": prompt.text})
        return
    click.echo(prompt.text)
    click.echo(f"\n-- style {prompt.style.name} ({prompt.style.template}); answers parse with "
               f"dialect {prompt.dialect}; {len(prompt.tools)}/{len(tools)} tools shown", err=True)


@click.command()
@click.argument("tools_path", metavar="TOOLS.json")
@click.option("--enhance", is_flag=True, help="Print the tools with enhanced descriptions "
              "(JSON) instead of the report.")
@click.option("--min-score", type=click.FloatRange(0, 1), default=None,
              help="Exit 1 when a tool scores below this (regression check).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
@_RULES
@guard
def audit(tools_path: str, enhance: bool, min_score: float | None, as_json: bool,
          rule_paths: tuple[str, ...]) -> None:
    """Score tool descriptions (examples, edge cases, input format, boundaries, parameter
    names) against rules/tool_audit.yaml."""
    from ..calls._engineering import audit_tool_set, enhance_tool_description

    engine = get_engine(rule_paths)
    tools = _tools(tools_path)
    if enhance:
        echo_json([enhance_tool_description(t, engine=engine).to_openai() for t in tools])
        return
    report = audit_tool_set(tools, engine=engine)
    if as_json:
        echo_json({name: {"score": q.score, "missing": list(q.missing), "advice": list(q.advice)}
                   for name, q in report.items()})
    else:
        for name, q in report.items():
            click.echo(f"{q.score:4.2f}  {name}")
            for line in q.advice:
                click.echo(f"        - {line}")
        if report:
            mean = sum(q.score for q in report.values()) / len(report)
            click.echo(f"\n{len(report)} tools, mean score {mean:.2f}", err=True)
    low = [n for n, q in report.items() if min_score is not None and q.score < min_score]
    if low:
        fail(f"{len(low)} tool(s) below {min_score}: {', '.join(low)}",
             "add what the advice lists, or run `toolrules audit --enhance`")


@click.command("validate-call")
@click.argument("call_path", metavar="CALL.json")
@click.option("--tools", "-t", "tools_path", required=True, help="Tools JSON file (or -).")
@click.option("--model", "-m", help="Write the corrected call in this model's emulation format.")
@click.option("--style", "-s", help="Write the corrected call in this emulation style.")
@click.option("--coerce", is_flag=True, help="Apply the safe coercions of "
              "rules/validation.yaml (\"3\" -> 3 where the schema says integer).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable errors.")
@_RULES
@guard
def validate_call(call_path: str, tools_path: str, model: str | None, style: str | None,
                  coerce: bool, as_json: bool, rule_paths: tuple[str, ...]) -> None:
    """Validate a call (or a list of calls) against the tools' schemas; print the retry
    feedback a model would get. Exit 1 when a call is invalid."""
    engine = get_engine(rule_paths)
    tools = _tools(tools_path)
    data = read_json_arg(call_path, "call file")
    calls = data if isinstance(data, list) else [data]
    results = []
    for item in calls:
        try:
            results.append(engine.check_tool_call(item, tools, coerce=coerce))
        except (TypeError, ValueError) as exc:
            fail(f"call file {call_path!r}: {exc}",
                 'give {"name": "read_file", "arguments": {...}} or a list of them')
    bad = [r for r in results if not r.ok]
    if as_json:
        echo_json([{"call": {"name": r.call.name, "arguments": r.call.arguments},
                    "ok": r.ok, "coercions": list(r.coercions),
                    "errors": [e.to_dict() for e in r.errors]} for r in results])
    else:
        for r in results:
            for line in r.coercions:
                click.echo(f"coerced {line}")
            if r.ok:
                click.echo(f"ok: {r.call.name}")
            else:
                click.echo(engine.format_validation_errors_for_retry(
                    r.errors, r.call, tools, model=model, style=style))
    if bad:
        raise SystemExit(1)


COMMANDS = [render, audit, validate_call]
