"""A misbehaving MCP server for the fault tests (the official SDK's low-level server over
stdio). The first argument picks the behaviour:

    exit         writes an error on stderr and exits 3 before the handshake
    hang-start   never answers (sleeps before reading anything)
    malformed    lists tools whose schemas are broken
    tools        good tools: `ok` (answers "fine"), `crash` (the process exits mid-call),
                 `sleep` (sleeps `seconds`), `big` (answers `size` bytes of text),
                 `write_marker` (writes a file named by `path` into its working directory)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

MODE = sys.argv[1] if len(sys.argv) > 1 else "tools"

if MODE == "exit":
    print("fatal: the configuration file fake.toml is missing", file=sys.stderr, flush=True)
    sys.exit(3)
if MODE == "hang-start":
    time.sleep(3600)

import anyio  # noqa: E402
import mcp.types as types  # noqa: E402
from mcp.server.lowlevel import Server  # noqa: E402
from mcp.server.stdio import stdio_server  # noqa: E402

OBJ = {"type": "object", "properties": {}}

if MODE == "malformed":
    TOOLS = [
        types.Tool(name="fine", description="A good tool.", input_schema=OBJ),
        types.Tool(name="typo", description="A type name that does not exist.",
                   input_schema={"type": "object",
                                 "properties": {"x": {"type": "strin"}}}),
        types.Tool(name="cyclic", description="A $ref to nowhere.",
                   input_schema={"type": "object",
                                 "properties": {"x": {"$ref": "#/$defs/Missing"}}}),
    ]
else:
    TOOLS = [
        types.Tool(name="ok", description="Answers fine.", input_schema=OBJ,
                   annotations=types.ToolAnnotations(read_only_hint=True,
                                                     open_world_hint=False)),
        types.Tool(name="crash", description="Exits in the middle of the call.",
                   input_schema=OBJ,
                   annotations=types.ToolAnnotations(read_only_hint=True,
                                                     open_world_hint=False)),
        types.Tool(name="sleep", description="Sleeps.", input_schema={
            "type": "object", "properties": {"seconds": {"type": "number"}},
            "required": ["seconds"]},
            annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False)),
        types.Tool(name="big", description="Answers with a lot of text.", input_schema={
            "type": "object", "properties": {"size": {"type": "integer"}},
            "required": ["size"]},
            annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False)),
        types.Tool(name="write_marker", description="Writes a marker file.", input_schema={
            "type": "object", "properties": {"path": {"type": "string"}},
            "required": ["path"]},
            annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True,
                                              open_world_hint=False)),
    ]


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def call_tool(ctx, params):
    args = params.arguments or {}
    if params.name == "crash":
        print("crashing on purpose", file=sys.stderr, flush=True)
        os._exit(1)
    if params.name == "sleep":
        await anyio.sleep(float(args.get("seconds", 1)))
        return _text("slept")
    if params.name == "big":
        return _text("x" * int(args.get("size", 10)))
    if params.name == "write_marker":
        Path(str(args["path"])).write_text("written by the fake server\n")
        return _text("written")
    return _text("fine")


async def main() -> None:
    server = Server("fake", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
