"""CLI: `toolrules mcp serve` (toolrules' tools for any MCP client, over stdio or streamable
HTTP) and `toolrules mcp tools` (an MCP server's tools as toolrules sees them), plus the
`--mcp NAME` / `--mcp-command "CMD"` options that `run`, `chat` and `exec` share."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from ._common import echo_json, fail, get_engine, jail_options

__all__ = ["COMMANDS", "add_servers", "mcp_options"]


def mcp_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--mcp NAME and --mcp-command "CMD ARGS" (both repeatable)."""
    options = [
        click.option("--mcp", "mcp_names", multiple=True, metavar="NAME",
                     help="Also offer the tools of MCP server NAME (rules/mcp/NAME.yaml, "
                          "overlays included; repeatable)."),
        click.option("--mcp-command", "mcp_commands", multiple=True, metavar='"CMD ARGS"',
                     help="Also offer the tools of the MCP server this command starts over "
                          "stdio (repeatable)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _need_sdk() -> None:
    from .._errors import McpError
    from ..mcp import need_sdk

    try:
        need_sdk()
    except McpError as exc:
        fail(str(exc))


def add_servers(registry: Any, names: Sequence[str], commands: Sequence[str],
                engine: Any, *, start: bool = True) -> list[Any]:
    """Add MCP servers to `registry` and (by default) start them now, so that a server
    that cannot start is reported before anything else runs. Exits with a clear message
    (and nothing left running) on an unknown name or a server that fails."""
    from .._errors import McpError, UnknownRuleError

    if not names and not commands:
        return []
    _need_sdk()
    added: list[Any] = []
    try:
        for name in names:
            added.append(registry.add_mcp(name))
        for command in commands:
            added.append(registry.add_mcp(command=command))
        if start:
            registry.start_mcp()
    except UnknownRuleError as exc:
        registry.close()
        from ..mcp import server_names

        known = server_names(engine)
        fail(str(exc), "declare it in rules/mcp/NAME.yaml (an overlay: --rules DIR or "
             f"TOOLRULES_PATH); declared: {', '.join(known) or 'none'}")
    except (McpError, ValueError) as exc:
        registry.close()
        fail(str(exc))
    return added


# ---------------------------------------------------------------- toolrules mcp

@click.group("mcp")
def mcp_group() -> None:
    """MCP both ways: serve toolrules' tools to MCP clients, list MCP servers' tools."""


@mcp_group.command("serve")
@jail_options
@click.option("--http", "http_port", type=click.IntRange(0, 65535), default=None,
              metavar="PORT", help="Serve streamable HTTP on 127.0.0.1:PORT/mcp (0: a free "
              "port, printed on stderr) instead of stdio.")
@click.option("--tools", "tool_sources", multiple=True, metavar="builtin|none|FILE.py",
              help="The tools: builtin (default), none, or a Python file with "
                   "`registry = toolrules.ToolRegistry()` (repeatable).")
@mcp_options
@click.option("--allow", multiple=True, help="Only these tools (repeatable).")
@click.option("--deny", multiple=True, help="Never these tools (repeatable).")
@click.option("--audit-dir", type=click.Path(file_okay=False),
              help="Append an audit line per call to DIR/tools-YYYY-MM-DD.jsonl.")
@click.option("--name", "server_name", help="The server name clients see (default "
              "rules/mcp.yaml serve.name).")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(exists=True),
              help="Extra rule directories (overlays).")
def serve_command(workspace: str, trust: str, policy_id: str, http_port: int | None,
                  tool_sources: tuple[str, ...], mcp_names: tuple[str, ...],
                  mcp_commands: tuple[str, ...], allow: tuple[str, ...], deny: tuple[str, ...],
                  audit_dir: str | None, server_name: str | None,
                  rule_paths: tuple[str, ...]) -> None:
    """Offer toolrules' tools (read_file, write_file, edit_file, list_files, search_files,
    run_command ...) to any MCP client, over stdio (default) or streamable HTTP on
    127.0.0.1. Every call runs through the policy: the workspace jail, the trust level,
    limits, timeouts and the audit log.

        claude mcp add toolrules -- toolrules mcp serve --workspace . --trust workspace
    """
    from .._errors import UnknownRuleError
    from ..runtime._executor import ToolExecutor
    from ..runtime._session import ToolsFileError, build_registry

    _need_sdk()
    engine = get_engine(rule_paths)
    if not Path(workspace).is_dir():
        fail(f"workspace {workspace!r} is not a directory", "pass --workspace DIR (it must exist)")
    try:
        registry = build_registry(tool_sources, workspace, engine=engine)
    except (ToolsFileError, ValueError) as exc:
        fail(str(exc))
    try:
        executor = ToolExecutor(registry, workspace=workspace, trust=trust, engine=engine,
                                policy=policy_id, allowed=list(allow) or None,
                                denied=list(deny), audit_dir=audit_dir)
    except UnknownRuleError as exc:
        fail(str(exc), "list policies with: ls rules/policies (and your overlays)")
    except (ValueError, KeyError) as exc:
        fail(str(exc).strip("'\""), "see the trust levels in rules/policies/default.yaml")
    add_servers(registry, mcp_names, mcp_commands, engine)
    from ..mcp._server import bind_loopback, serve_http, serve_stdio

    offered = len(executor.visible_tools())
    about = (f"{offered} tool{'' if offered == 1 else 's'}, trust {trust}, workspace "
             f"{executor.workspace}")
    try:
        if http_port is None:
            click.echo(f"toolrules mcp serve: stdio ({about})", err=True)
            asyncio.run(serve_stdio(executor, name=server_name))
        else:
            try:
                sock = bind_loopback(http_port)
            except OSError as exc:
                fail(f"cannot listen on 127.0.0.1:{http_port}: {exc.strerror or exc}",
                     "pick another port, or --http 0 for a free one")

            def ready(url: str) -> None:
                click.echo(f"toolrules mcp serve: {url} ({about})", err=True)

            asyncio.run(serve_http(executor, sock, name=server_name, on_ready=ready))
    except KeyboardInterrupt:
        pass
    finally:
        registry.close()


def _show_tools(server: Any, infos: list[Any], as_json: bool) -> None:
    if as_json:
        echo_json({"server": server.name, "transport": server.spec.transport,
                   "launch": server.describe(), "source": server.spec.source,
                   "tools": [i.to_dict() for i in infos]})
        return
    click.echo(f"{server.name}: {len(infos)} tool{'' if len(infos) == 1 else 's'} "
               f"({server.spec.transport}: {server.describe()})")
    width = max((len(i.name) for i in infos), default=0)
    for i in infos:
        flags = [f for f, on in (("hidden", i.hidden), ("confirm", i.requires_confirmation))
                 if on]
        paths = f"  paths: {', '.join(i.paths)}" if i.paths else ""
        click.echo(f"  {i.name.ljust(width)}  {i.tier:<10} {i.kind:<5}  {i.decided_by}"
                   f"{paths}{'  (' + ', '.join(flags) + ')' if flags else ''}")
        first = (i.tool.description or "").strip().split("\n", 1)[0]
        if first:
            click.echo(f"  {' ' * width}  {first[:100]}")
        click.echo(f"  {' ' * width}  {json.dumps(i.tool.parameters, ensure_ascii=False)}")


@mcp_group.command("tools")
@click.argument("name", required=False)
@click.option("--command", "command", metavar='"CMD ARGS"',
              help="The server is started by this command (stdio) instead of a declared NAME.")
@click.option("--url", help="The server is reached at this streamable-HTTP URL.")
@click.option("--header", "headers", multiple=True, metavar='"NAME: VALUE"',
              help="An HTTP header for --url (${VAR} reads the environment; repeatable).")
@click.option("--name", "as_name", help="The server's name (its tools' namespace) for "
              "--command or --url.")
@click.option("--workspace", "-w", type=click.Path(file_okay=False), default=".",
              show_default=True, help="What {workspace} means in the server's rule.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(exists=True),
              help="Extra rule directories (overlays).")
def tools_command(name: str | None, command: str | None, url: str | None,
                  headers: tuple[str, ...], as_name: str | None, workspace: str,
                  as_json: bool, rule_paths: tuple[str, ...]) -> None:
    """List the tools of MCP server NAME (rules/mcp/NAME.yaml), or of the server --command
    starts, as toolrules offers them: namespaced name, trust level and class (and the rule
    that decided), path arguments, normalized schema. The server is stopped afterwards."""
    from .._errors import McpError, UnknownRuleError
    from ..runtime._registry import ToolRegistry

    given = [x for x in (name, command, url) if x]
    if len(given) != 1:
        fail("give exactly one of NAME, --command \"CMD ARGS\" or --url URL",
             "toolrules mcp tools filesystem, or toolrules mcp tools --command "
             "\"npx -y @modelcontextprotocol/server-everything\"", code=2)
    _need_sdk()
    engine = get_engine(rule_paths)
    if not Path(workspace).is_dir():
        fail(f"workspace {workspace!r} is not a directory", "pass --workspace DIR (it must exist)")
    registry = ToolRegistry(engine=engine, workspace=workspace)
    try:
        if name:
            server = registry.add_mcp(name)
        elif command:
            server = registry.add_mcp(command=command, name=as_name)
        else:
            pairs = {}
            for h in headers:
                key, sep, value = h.partition(":")
                if not sep or not key.strip():
                    fail(f"--header {h!r} is not \"NAME: VALUE\"", code=2)
                pairs[key.strip()] = value.strip()
            server = registry.add_mcp(url=url, name=as_name or "remote", headers=pairs)
        infos = server.tools()
    except UnknownRuleError as exc:
        registry.close()
        from ..mcp import server_names

        fail(str(exc), f"declared servers: {', '.join(server_names(engine)) or 'none'}")
    except (McpError, ValueError) as exc:
        registry.close()
        fail(str(exc))
    try:
        _show_tools(server, infos, as_json)
    finally:
        registry.close()


COMMANDS = [mcp_group]
