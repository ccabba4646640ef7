"""toolrules as an MCP server (`toolrules mcp serve`): the tools an executor offers, served
to any MCP client over stdio or streamable HTTP (127.0.0.1) with the official SDK's
low-level server.

The tool list is `executor.visible_tools()` (trust level, allow/deny, hidden tools), each
with the annotations rules/mcp.yaml `serve.hints` gives its class and level. Every call
goes through `executor.execute` - validation, the policy, the workspace jail, limits,
timeouts and one audit line - exactly as a model's call would; a refusal comes back as an
error result whose text starts with the envelope code (PERMISSION_DENIED: ...) and whose
structured content is the envelope error.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import sys
from collections.abc import Callable
from typing import Any

from .._types import ToolCall
from ._convert import served_result
from ._rules import mcp_rules

__all__ = ["build_server", "serve_http", "serve_stdio"]


def build_server(executor: Any, *, name: str | None = None) -> Any:
    """An `mcp.server.lowlevel.Server` whose tools are the executor's."""
    from mcp import types
    from mcp.server.lowlevel import Server

    from .._version import __version__
    from ..runtime._executor import envelope_of

    rules = mcp_rules(executor.engine)
    ids = itertools.count(1)

    async def list_tools(ctx: Any, params: Any) -> Any:
        tools = []
        for tool in executor.visible_tools():
            entry = executor.registry.get(tool.name)
            kind = getattr(entry, "kind", "write")
            level = executor.level_of(entry) if entry is not None else ""
            hints = rules.served_hints(kind=kind, level=level, name=tool.name)
            tools.append(types.Tool.model_validate({
                "name": tool.name, "description": tool.description,
                "inputSchema": tool.parameters, "annotations": hints or None}))
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> Any:
        call = ToolCall(f"mcp-{next(ids)}", params.name, dict(params.arguments or {}))
        result = await executor.execute(call)
        return types.CallToolResult.model_validate(served_result(result, envelope_of(result)))

    return Server(name or rules.serve_name, version=__version__,
                  instructions=rules.serve_instructions or None,
                  on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(executor: Any, *, name: str | None = None) -> None:
    """Serve over this process's stdin/stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    server = build_server(executor, name=name)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def bind_loopback(port: int, host: str = "127.0.0.1") -> socket.socket:
    """A listening socket on the loopback address (port 0: a free one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def serve_http(executor: Any, sock: socket.socket, *, name: str | None = None,
                     on_ready: Callable[[str], None] | None = None) -> None:
    """Serve streamable HTTP at http://HOST:PORT/mcp on `sock` until interrupted."""
    import uvicorn

    server = build_server(executor, name=name)
    host, port = sock.getsockname()[:2]
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    userver = uvicorn.Server(config)
    url = f"http://{host}:{port}/mcp"

    async def announce() -> None:
        while not userver.started and not userver.should_exit:
            await asyncio.sleep(0.02)
        if userver.started and on_ready is not None:
            on_ready(url)

    watcher = asyncio.ensure_future(announce())
    try:
        await userver.serve(sockets=[sock])
    finally:
        watcher.cancel()
        print(f"toolrules mcp serve: {url} stopped", file=sys.stderr)
