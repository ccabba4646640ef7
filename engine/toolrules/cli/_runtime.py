"""CLI: `toolrules exec` - one tool call through the policy: a built-in tool, or a tool of
an MCP server (`--mcp NAME`, `--mcp-command "CMD ARGS"`)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ._common import echo_json, fail, get_engine, jail_options
from ._mcp import add_servers, mcp_options

__all__ = ["COMMANDS"]


def _arguments(text: str) -> Any:
    """ARGS_JSON: inline JSON, @FILE, or - for stdin."""
    if text == "-":
        text = sys.stdin.read()
    elif text.startswith("@"):
        try:
            with open(text[1:], encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            fail(f"cannot read arguments file {text[1:]!r}: {exc.strerror}")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        # Passed on as text: the executor reports it like a model's broken JSON.
        return text


@click.command("exec")
@click.argument("name")
@click.argument("args_json", default="{}")
@jail_options
@click.option("--audit-dir", type=click.Path(file_okay=False), default=None,
              help="Append an audit line to DIR/tools-YYYY-MM-DD.jsonl.")
@click.option("--dry-run", is_flag=True, help="Check the call and show what would run.")
@click.option("--json", "as_json", is_flag=True, help="Print the result envelope as JSON.")
@click.option("--id", "call_id", default="call_1", show_default=True, help="The call id.")
@click.option("--rules", "paths", multiple=True, type=click.Path(),
              help="Overlay rule directory (repeatable).")
@mcp_options
def exec_command(name: str, args_json: str, workspace: str, trust: str, policy_id: str,
                 audit_dir: str | None, dry_run: bool, as_json: bool, call_id: str,
                 paths: tuple[str, ...], mcp_names: tuple[str, ...],
                 mcp_commands: tuple[str, ...]) -> None:
    """Run one tool call NAME with ARGS_JSON (inline JSON, @FILE or -) through the policy,
    with the built-in tools - or, with --mcp/--mcp-command, with the tools of that MCP
    server (NAME: its namespaced name or its own) - and print its result envelope. Exit
    status 1 when the call is refused or fails.

        toolrules exec read_file '{"path": "README.md"}' --workspace . --trust read_only
        toolrules exec --mcp filesystem read_text_file '{"path": "README.md"}' -w .
    """
    from .._errors import UnknownRuleError
    from ..runtime import ToolExecutor, ToolRegistry, builtin_tools, envelope_of

    engine = get_engine(paths)
    use_mcp = bool(mcp_names or mcp_commands)
    try:
        registry = ToolRegistry(engine=engine, workspace=workspace) if use_mcp else \
            builtin_tools(workspace, engine=engine)
        executor = ToolExecutor(registry, workspace=workspace, trust=trust,
                                audit_dir=audit_dir, policy=policy_id, engine=engine,
                                dry_run=dry_run)
    except UnknownRuleError as exc:
        fail(str(exc), "list policies with: ls rules/policies (and your overlays)")
    except ValueError as exc:
        fail(str(exc))
    if use_mcp:
        add_servers(registry, mcp_names, mcp_commands, engine)
        name = _mcp_tool_name(registry, name)
    args = _arguments(args_json)
    try:
        result = executor.execute_sync({"id": call_id, "name": name, "arguments": args})
    finally:
        registry.close()
    envelope = envelope_of(result)
    if as_json:
        echo_json({"tool": name, "call_id": call_id, **envelope})
    elif result.ok:
        out = result.output
        text = out if isinstance(out, str) else json.dumps(out, indent=2, ensure_ascii=False,
                                                           default=str)
        click.echo(text, nl=not text.endswith("\n"))
    else:
        err = envelope["errors"][0]
        click.echo(f"error: {err['code']}: {err['message']}", err=True)
        rule = (err.get("details") or {}).get("rule")
        if rule:
            click.echo(f"rule: {rule}", err=True)
        if err.get("suggested_fix"):
            click.echo(f"hint: {err['suggested_fix']}", err=True)
    sys.exit(0 if result.ok else 1)


def _mcp_tool_name(registry: Any, tool: str) -> str:
    """A tool of the added MCP servers by its registry name or by the server's own name."""
    if tool in registry:
        return tool
    found = [n for n in registry.names()
             if (info := registry.mcp_tool(n)) is not None and info.remote == tool]
    if len(found) > 1:
        registry.close()
        fail(f"{tool!r} is a tool of several servers: {', '.join(found)}",
             "name it by its namespaced name")
    return found[0] if found else tool


COMMANDS = [exec_command]
