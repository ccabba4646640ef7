"""Cerberus schemas of the MCP rules: servers (rules/mcp/*.yaml, kind "mcp") and the MCP
table (rules/mcp.yaml: annotations -> trust classes, schema normalization, client
defaults, what toolrules' own tools carry when served). Interpreted by toolrules.mcp."""

from __future__ import annotations

from typing import Any

from ._schema_kit import _bool, _doc, _int, _num, _str, _strlist

__all__ = ["HINTS", "KIND_SCHEMAS", "SERVE_WHEN", "TABLE_SCHEMAS"]

# The MCP tool annotation hints (ToolAnnotations), as the protocol spells them.
HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
# What a served tool's `when` may test.
SERVE_WHEN = ("kind", "level", "name")




def _strmap(doc: str, example: str) -> dict[str, Any]:
    return {"type": "dict", "keysrules": {"type": "string"}, "valuesrules": {"type": "string"},
            **_doc(doc, example)}


_HINT_MAP = {"type": "dict", "schema": {h: {"type": "boolean"} for h in HINTS}}

_OVERRIDE = {"type": "dict", "schema": {
    "tier": _str("the trust level the tool needs (beats its annotations)", "tier: workspace"),
    "kind": _str("read (may run in parallel) or write", "kind: read",
                 allowed=["read", "write"]),
    "paths": _strlist("arguments that are workspace paths (a string or a list of strings; "
                      "checked by the policy and the jail before the server sees them)",
                      "paths: [path]"),
    "hidden": _bool("never offered to the model"),
    "requires_confirmation": _bool("ask the confirm hook before running"),
    "timeout": _num("seconds a call may take (capped by the policy)", "timeout: 60"),
    "description": _str("what the model is told instead of the server's description"),
}}

MCP_SCHEMA: dict[str, Any] = {
    "description": {**_str("what the server offers"), "required": True, "empty": False},
    "command": _str("the program to start (stdio transport); found on PATH",
                    "command: npx", empty=False),
    "args": _strlist("its arguments ({workspace} is the session's workspace, ${VAR} a "
                     "variable of our environment)", "args: [-y, '@scope/server', '{workspace}']"),
    "env": _strmap("variables set for the server (values may use ${VAR} and {workspace}); "
                   "it inherits only PATH, HOME, USER, SHELL, TERM, LOGNAME besides",
                   "env: {API_TOKEN: '${MY_TOKEN}'}"),
    "cwd": _str("its working directory ({workspace} allowed)", "cwd: '{workspace}'"),
    "url": _str("a streamable-HTTP endpoint instead of a command",
                "url: http://127.0.0.1:8931/mcp", empty=False),
    "headers": _strmap("HTTP headers for `url` (values may use ${VAR} from the environment)",
                       "headers: {Authorization: 'Bearer ${MCP_TOKEN}'}"),
    "namespace": _str("the prefix of its tool names (default: the file name)",
                      "namespace: fs", regex=r"^[A-Za-z][A-Za-z0-9_-]{0,31}$"),
    "startup_seconds": _num("start + handshake + tool listing must finish in this time",
                            "startup_seconds: 30"),
    "timeout": _num("seconds a call may take unless a tool says otherwise (capped by the "
                    "policy)", "timeout: 60"),
    "restarts": _int("times a server that died is started again per session", "restarts: 1"),
    "include": _strlist("only these tools (the server's names)", "include: [read_file]"),
    "exclude": _strlist("never these tools (the server's names)", "exclude: [move_file]"),
    "tools": {"type": "dict", "keysrules": {"type": "string"}, "valuesrules": _OVERRIDE,
              **_doc("per tool (the server's name): trust level, class, path arguments ...",
                     "tools: {write_file: {paths: [path]}}")},
}

_CLASS = {"type": "dict", "schema": {
    "name": {**_str("what this entry stands for (shown by `toolrules mcp tools`)",
                    "name: read-closed"), "required": True},
    "when": {**_HINT_MAP, "required": True,
             **_doc("hints that must all have these values ({} always holds)",
                    "when: {readOnlyHint: true}")},
    "tier": {**_str("the trust level (a level of the policy)", "tier: read_only"),
             "required": True},
    "kind": {**_str("read or write", "kind: read", allowed=["read", "write"]),
             "required": True},
}}

_SERVE_HINT = {"type": "dict", "schema": {
    "when": {"type": "dict", "required": True, "schema": {
        "kind": {"type": "string", "allowed": ["read", "write"]},
        "level": {"type": "string"},
        "name": {"type": "string"}},
        **_doc("the served tool's kind, trust level or name ({} always holds)",
               "when: {kind: read}")},
    "set": {**_HINT_MAP, "required": True,
            **_doc("the hints it carries", "set: {readOnlyHint: true}")},
}}

MCP_TABLE_SCHEMA: dict[str, Any] = {
    "description": _str("what this table is for"),
    "annotations": {"type": "dict", "required": True, **_doc(
        "MCP tool annotations -> trust level and read/write class"), "schema": {
        "defaults": {**_HINT_MAP, "required": True,
                     **_doc("the value of a hint a server leaves out",
                            "defaults: {readOnlyHint: false}")},
        "classes": {"type": "list", "required": True, "minlength": 1, "schema": _CLASS,
                    **_doc("first entry whose `when` holds decides")},
    }},
    "schema": {"type": "dict", "required": True, **_doc(
        "how MCP input schemas are normalized"), "schema": {
        "pipeline": {"type": "list", "required": True,
                     **_doc("transform ops (as in provider rules)",
                            "pipeline: [{op: inline_refs, on_cycle: object}]")},
    }},
    "client": {"type": "dict", "required": True, **_doc("defaults for every server"),
               "schema": {
                   "startup_seconds": {**_num("start + handshake + listing time limit",
                                              "startup_seconds: 30"), "required": True},
                   "restarts": {**_int("restarts of a dead server per session",
                                       "restarts: 1"), "required": True},
                   "stderr_lines": {**_int("lines of a dead server's stderr quoted",
                                           "stderr_lines: 20"), "required": True},
                   "max_tools": {**_int("a listing with more tools is refused",
                                        "max_tools: 500"), "required": True},
               }},
    "serve": {"type": "dict", "required": True, **_doc("toolrules as an MCP server"), "schema": {
        "name": {**_str("the server name clients see", "name: toolrules"), "required": True},
        "instructions": _str("what clients are told about the server"),
        "hints": {"type": "list", "required": True, "schema": _SERVE_HINT,
                  **_doc("annotations of served tools; first match wins")},
    }},
}

KIND_SCHEMAS: dict[str, dict[str, Any]] = {"mcp": MCP_SCHEMA}
TABLE_SCHEMAS: dict[str, dict[str, Any]] = {"mcp": MCP_TABLE_SCHEMA}
