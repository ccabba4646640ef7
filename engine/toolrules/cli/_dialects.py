"""CLI: `toolrules parse` (raw model text -> content, reasoning, calls) and `dialects`."""

from __future__ import annotations

import json
from typing import Any

import click

from ._common import echo_json, fail, get_engine, guard, read_json_arg, read_text_arg

__all__ = ["COMMANDS"]


def _result_dict(r: Any) -> dict[str, Any]:
    return {"content": r.content, "reasoning_content": r.reasoning_content,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                           for c in r.tool_calls],
            "finish_reason": r.finish_reason, "repairs": list(r.repairs),
            "warnings": list(r.warnings)}


@click.command()
@click.argument("source", metavar="FILE|-")
@click.option("--model", "-m", help="Model id: picks its dialect and quirks.")
@click.option("--dialect", "-d", help="Dialect id (overrides the model's).")
@click.option("--tools", "tools_path", help="Tools JSON file (OpenAI format) for typing "
              "values and flagging unknown names.")
@click.option("--generation-prompt", "-g", help="What the prompt pre-filled (e.g. '<think>\\n').")
@click.option("--finish-reason", type=click.Choice(["stop", "length"]), default="stop",
              show_default=True, help="length = the output was cut off by max_tokens.")
@click.option("--stream", is_flag=True, help="Feed the text in deltas and show the chunks.")
@click.option("--delta", default=8, show_default=True, help="Characters per delta with --stream.")
@click.option("--heuristics", is_flag=True, help="Also infer calls from prose (guesses).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@guard
def parse(source: str, model: str | None, dialect: str | None, tools_path: str | None,
          generation_prompt: str | None, finish_reason: str, stream: bool, delta: int,
          heuristics: bool, as_json: bool) -> None:
    """Parse raw model output (FILE, or - for stdin) with a model's dialect."""
    if not model and not dialect:
        fail("say which format to read: --model MODEL or --dialect DIALECT",
             "`toolrules dialects` lists the dialects")
    engine = get_engine()
    tools = read_json_arg(tools_path, "tools file") if tools_path else None
    text = read_text_arg(source, "input")
    parser = engine.text_parser(model=model, tools=tools, dialect=dialect,
                                generation_prompt=generation_prompt, heuristics=heuristics)
    if not stream:
        result = parser.parse(text, finish_reason=finish_reason)
        if as_json:
            echo_json(_result_dict(result))
            return
        click.echo(f"dialect    {parser.dialect.id}")
        click.echo(f"reasoning  {result.reasoning_content!r}")
        click.echo(f"content    {result.content!r}")
        for c in result.tool_calls:
            click.echo(f"call       {c.name} {json.dumps(c.arguments, ensure_ascii=False)}"
                       f"  (id {c.id})")
        if result.repairs:
            click.echo(f"repairs    {', '.join(result.repairs)}")
        if result.warnings:
            click.echo(f"warnings   {', '.join(result.warnings)}")
        return
    st = parser.stream()
    chunks: list[Any] = []
    step = max(1, delta)
    for i in range(0, len(text), step):
        chunks.extend(st.feed(text[i:i + step]))
    chunks.extend(st.close(finish_reason=finish_reason))
    if as_json:
        echo_json([{k: v for k, v in {
            "type": str(c.type), "content": c.content, "index": c.index,
            "tool_call_id": c.tool_call_id, "tool_name": c.tool_name,
            "args_delta": c.args_delta, "arguments": c.arguments}.items() if v is not None}
            for c in chunks])
        return
    for c in chunks:
        detail = c.content if c.content is not None else (c.args_delta or "")
        who = f" [{c.index}] {c.tool_name}" if c.tool_name else ""
        click.echo(f"{c.type!s:13}{who} {detail!r}")


@click.command()
@click.option("--json", "as_json", is_flag=True)
def dialects(as_json: bool) -> None:
    """List the raw-text dialects and what they parse."""
    engine = get_engine()
    rows = []
    for name in engine.ruleset.ids("dialect"):
        data = engine.ruleset.get("dialect", name).data or {}
        rows.append({"id": name, "description": " ".join(str(data.get("description", "")).split())})
    if as_json:
        echo_json(rows)
        return
    for r in rows:
        click.echo(f"{r['id']:18} {r['description'][:110]}")


COMMANDS = [parse, dialects]
