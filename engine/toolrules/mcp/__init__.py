"""MCP (the Model Context Protocol) both ways, with the official `mcp` SDK (the `mcp`
extra; imported only where a server is started or served):

- tools of MCP servers become registry tools (`ToolRegistry.add_mcp`, rules/mcp/*.yaml),
  namespaced, normalized and classed by rules/mcp.yaml, every call through the executor;
- the registry's tools are offered to MCP clients (`toolrules mcp serve`), every call
  through the same executor, jail and audit log.
"""

from __future__ import annotations

from ._client import McpServer, close_all, need_sdk
from ._convert import McpTool, mcp_tools, result_output, served_result
from ._rules import (
    Launch,
    McpRules,
    McpServerSpec,
    ToolClass,
    ToolOverride,
    command_spec,
    mcp_rules,
    server_names,
    server_spec,
    url_spec,
)

__all__ = [
    "Launch",
    "McpRules",
    "McpServer",
    "McpServerSpec",
    "McpTool",
    "ToolClass",
    "ToolOverride",
    "close_all",
    "command_spec",
    "mcp_rules",
    "mcp_tools",
    "need_sdk",
    "result_output",
    "served_result",
    "server_names",
    "server_spec",
    "url_spec",
]
