"""Cerberus schemas for the execution rules: policies (rules/policies/*.yaml) and tool
definitions (rules/tools/*.yaml, the built-in tools' names, descriptions and schemas)."""

from __future__ import annotations

from typing import Any

from ._schema_kit import _bool, _doc, _int, _num, _str, _strlist

__all__ = ["KIND_SCHEMAS", "TOOL_KINDS"]

TOOL_KINDS = ("read", "write")
_NAME = r"^[a-z][a-z0-9_]*$"




def _dict(doc: str, example: str | None, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "dict", "schema": schema, "nullable": True, **_doc(doc, example)}


_LEVEL = {"type": "dict", "schema": {
    "name": {**_str("the level's name", "name: read_only", regex=_NAME), "required": True},
    "description": _str("what this level adds"),
    "tools": _strlist("tools this level adds (offered at this level and above)",
                      "tools: [read_file]"),
}}

_COMMAND = {"type": ["string", "dict"], **_doc(
    "a command name or its first words, or a mapping with limits on the arguments",
    "{command: find, deny_args: ['-exec']}"),
    "schema": {
        "command": {**_str("the command name or first words", "command: git status"),
                    "required": True, "empty": False},
        "max_args": _int("at most this many arguments after the command words", "max_args: 0"),
        "deny_args": _strlist("fnmatch patterns of refused arguments", "deny_args: ['-exec']"),
    }}

POLICY_SCHEMA: dict[str, Any] = {
    "description": _str("what this policy is for"),
    "extends": _str("a policy whose fields this one starts from", "extends: default",
                    nullable=True),
    "levels": {"type": "list", "schema": _LEVEL, "minlength": 1, **_doc(
        "trust levels, lowest first; each offers the tools of the levels before it",
        "levels: [{name: discovery, tools: [list_files]}]")},
    "registered_level": _str("level of a tool that names no tier and no level names",
                             "registered_level: workspace", nullable=True),
    "arguments": _dict("argument checks before a tool runs", None, {
        "max_bytes": _int("arguments larger than this are refused (ARGUMENTS_TOO_LARGE)",
                          "max_bytes: 200000", nullable=True),
        "coerce": _bool("apply the safe coercions of rules/validation.yaml"),
    }),
    "output": _dict("tool output checks", None, {
        "max_bytes": _int("larger outputs become TOOL_OUTPUT_TOO_LARGE", "max_bytes: 200000",
                          nullable=True),
    }),
    "paths": _dict("the workspace jail", None, {
        "blocked": _strlist("glob patterns refused for reads and writes and skipped in listings",
                            "blocked: ['.env', '*.pem', 'secrets/']"),
        "refuse_categories": _strlist("Unicode categories refused in paths",
                                      "refuse_categories: [Cc, Cf]"),
        "refuse_compatibility_forms": _bool("refuse paths that NFKC normalisation changes"),
        "max_read_bytes": _int("larger files are not read", "max_read_bytes: 1000000"),
        "max_list_entries": _int("listings stop after this many entries",
                                 "max_list_entries: 1000"),
        "max_depth": _int("recursive listings and searches go at most this deep",
                          "max_depth: 20"),
    }),
    "rate_limits": _dict("per-session limits (0 = no limit)", None, {
        "calls_per_minute": _int("tool calls per minute", "calls_per_minute: 60"),
        "writes_per_minute": _int("calls of write tools per minute", "writes_per_minute: 20"),
        "shell_per_minute": _int("calls of shell-level tools per minute", "shell_per_minute: 10"),
        "bytes_written_per_session": _int("bytes written by file tools per session",
                                          "bytes_written_per_session: 10000000"),
        "shell_level": _str("tools at this level or above count as shell calls",
                            "shell_level: shell"),
    }),
    "timeouts": _dict("how long a tool may run", None, {
        "default_seconds": _num("timeout when the call names none", "default_seconds: 30"),
        "max_seconds": _num("no call may ask for more", "max_seconds: 120"),
    }),
    "commands": _dict("run_command: what may run and how", None, {
        "allowlist": {"type": "list", "schema": _COMMAND,
                      **_doc("accepted commands", "allowlist: [ls, cat]")},
        "allow_shell": _bool("run through /bin/sh -c (metacharacters allowed)"),
        "metacharacters": _str("characters refused outside quotes when there is no shell",
                               "metacharacters: ';&|<>`$'"),
        "check_path_arguments": _bool("arguments that look like paths must stay in the jail"),
        "env": _dict("the child's environment", None, {
            "set": {"type": "dict", "keysrules": {"type": "string"},
                    "valuesrules": {"type": "string"},
                    **_doc("variables set ({workspace} is replaced)", "set: {LANG: C.UTF-8}")},
            "pass": _strlist("variables passed on when present", "pass: [TERM]"),
            "deny": _strlist("regexes: matching names are never passed", "deny: ['(?i)key']"),
        }),
        "rlimits": _dict("resource limits set in the child (POSIX)", None, {
            "cpu_seconds": _int("RLIMIT_CPU", "cpu_seconds: 60"),
            "address_space_bytes": _int("RLIMIT_AS", "address_space_bytes: 2147483648"),
            "file_size_bytes": _int("RLIMIT_FSIZE", "file_size_bytes: 16777216"),
            "processes": _int("RLIMIT_NPROC (per user; root is exempt)", "processes: 512"),
            "open_files": _int("RLIMIT_NOFILE", "open_files: 256"),
        }),
        "max_output_bytes": _int("stdout and stderr are each cut at this size",
                                 "max_output_bytes: 100000"),
    }),
    "search": _dict("search_files limits", None, {
        "max_matches": _int("matches returned at most", "max_matches: 200"),
        "max_line_chars": _int("a matching line is cut at this length", "max_line_chars: 300"),
        "max_file_bytes": _int("larger files are not searched", "max_file_bytes: 1000000"),
    }),
    "audit": _dict("what the audit log keeps of arguments", None, {
        "content_arguments": _strlist("arguments logged as size and sha256 only",
                                      "content_arguments: [content]"),
        "secret_names": _strlist("regexes: arguments with a matching name are redacted",
                                 "secret_names: ['(?i)token']"),
        "secret_values": _strlist("regexes: matching text is redacted",
                                  "secret_values: ['sk-[A-Za-z0-9]{16,}']"),
    }),
}

_TOOL = {"type": "dict", "schema": {
    "name": {**_str("the tool name (provider-safe)", "name: read_file", regex=_NAME),
             "required": True},
    "description": {**_str("what the model is told about the tool"), "required": True,
                    "empty": False},
    "parameters": {"type": "dict", "required": True, **_doc(
        "JSON Schema of the arguments (an object schema)",
        "parameters: {type: object, properties: {path: {type: string}}}")},
    "tier": _str("the trust level the tool needs unless a policy level names it",
                 "tier: read_only"),
    "kind": _str("read (may run in parallel) or write", "kind: read", allowed=list(TOOL_KINDS)),
    "paths": _strlist("arguments that are workspace paths (checked by the jail)",
                      "paths: [path]"),
    "command": _str("the argument holding a command line (checked against the allowlist)",
                    "command: command"),
    "hidden": _bool("never offered to the model"),
    "requires_confirmation": _bool("ask the confirm hook before running"),
}}

TOOLSET_SCHEMA: dict[str, Any] = {
    "description": _str("what these tools are"),
    "tools": {"type": "list", "schema": _TOOL, "required": True, "minlength": 1,
              **_doc("the tool definitions", "tools: [{name: read_file, ...}]")},
}

KIND_SCHEMAS: dict[str, dict[str, Any]] = {
    "policy": POLICY_SCHEMA,
    "toolset": TOOLSET_SCHEMA,
}
