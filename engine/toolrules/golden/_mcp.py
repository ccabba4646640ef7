"""Golden suite `mcp`: what toolrules makes of an MCP server's tools, from its rule
(rules/mcp/<server>.yaml) and the MCP table (rules/mcp.yaml), without running it.

Inputs: golden/mcp/<name>.cases.yaml - `server:` a server rule id (null: none, then
`namespace:` names the tools' namespace), `workspace:` what {workspace} means, `listing:`
a `tools/list` answer (captured from the real server for the bundled rules), optional
`expect:` {tool: {tier, kind}} invariants.
Output: golden/mcp/<name>.golden.yaml - the server's launch ({workspace} filled in,
environment variables and header values shown as <VAR>), then every tool as the registry
gets it: namespaced name, trust level, class, the rule that decided, path arguments,
normalized schema; and, for the table, the annotations each built-in tool carries when
`toolrules mcp serve` offers it.

Invariants (regen refuses to write a file that breaks them): every name is accepted by
every provider, every schema is a valid JSON Schema (draft 2020-12) with an object root
and no $ref left, every tier is a level of the default policy, `expect` holds, and every
bundled server has a cases file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ._core import GoldenFile, read_cases

__all__ = ["golden_files"]


class _Placeholders(Mapping[str, str]):
    """An environment where every variable is set to `<NAME>`."""

    def __getitem__(self, key: str) -> str:
        return f"<{key}>"

    def get(self, key: str, default: Any = None) -> Any:
        return f"<{key}>"

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0


def _launch(spec: Any, workspace: str) -> dict[str, Any]:
    launch = spec.launch(workspace, environ=_Placeholders())
    if launch.url is not None:
        return {"transport": "http", "url": launch.url, "headers": dict(launch.headers)}
    out: dict[str, Any] = {"transport": "stdio", "command": launch.command,
                           "args": list(launch.args)}
    if launch.env:
        out["env"] = dict(launch.env)
    if launch.cwd:
        out["cwd"] = launch.cwd
    return out


def _invariants(tools: list[Any], engine: Any, levels: set[str],
                expect: Mapping[str, Any]) -> list[str]:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    from ..calls._policy import provider_name_patterns

    problems = []
    patterns = provider_name_patterns(engine)
    for t in tools:
        for pid, pat in patterns:
            if not pat.fullmatch(t.name):
                problems.append(f"{t.name}: not accepted by provider {pid}")
        try:
            Draft202012Validator.check_schema(t.tool.parameters)
        except SchemaError as exc:
            problems.append(f"{t.name}: schema invalid: {exc.message}")
        if t.tool.parameters.get("type") != "object":
            problems.append(f"{t.name}: schema root is not an object")
        if "$ref" in json.dumps(t.tool.parameters):
            problems.append(f"{t.name}: a $ref is left in the normalized schema")
        if t.tier not in levels:
            problems.append(f"{t.name}: tier {t.tier!r} is not a level of the default policy")
    by_remote = {t.remote: t for t in tools}
    for remote, want in expect.items():
        got = by_remote.get(remote)
        if got is None:
            problems.append(f"expect names {remote!r}, which is not offered")
            continue
        for key, value in want.items():
            if getattr(got, key) != value:
                problems.append(f"{remote}: expected {key} {value!r}, got {getattr(got, key)!r}")
    return problems


def _served(engine: Any) -> list[dict[str, Any]]:
    from ..calls._policy import builtin_tool_defs, policy_rules
    from ..mcp._rules import mcp_rules

    rules = mcp_rules(engine)
    policy = policy_rules("default", engine)
    out = []
    for name, d in builtin_tool_defs(engine).items():
        level = policy.tool_level(name, d.tier)
        out.append({"tool": name, "level": level, "kind": d.kind,
                    "annotations": rules.served_hints(kind=d.kind, level=level, name=name)})
    return out


def golden_files(engine: Any, root: Path) -> Iterable[GoldenFile]:
    from ..calls._policy import policy_rules
    from ..mcp._convert import mcp_tools
    from ..mcp._rules import McpServerSpec, mcp_rules, server_names, server_spec

    rules = mcp_rules(engine)
    levels = set(policy_rules("default", engine).levels)
    seen: set[str] = set()
    for cases_path in sorted((root / "mcp").glob("*.cases.yaml")):
        name = cases_path.name.removesuffix(".cases.yaml")
        data = read_cases(cases_path) or {}
        server = data.get("server", name)
        workspace = str(data.get("workspace") or "/workspace")
        problems: list[str] = []
        content: dict[str, Any] = {}
        try:
            if server is None:
                spec = McpServerSpec(name=str(data.get("namespace") or name), command="server",
                                     source=f"golden/mcp/{cases_path.name}")
            else:
                spec = server_spec(str(server), engine)
                seen.add(str(server))
                content["server"] = server
                content["launch"] = _launch(spec, workspace)
            tools = mcp_tools(spec, data.get("listing") or [], rules, engine=engine)
        except Exception as exc:  # a broken case is a reviewable problem, not a crash
            yield GoldenFile(path=f"mcp/{name}.golden.yaml", content={},
                             problems=[f"{type(exc).__name__}: {exc}"],
                             source=f"golden/mcp/{cases_path.name}")
            continue
        problems.extend(_invariants(tools, engine, levels, data.get("expect") or {}))
        content["tools"] = [t.to_dict() for t in tools]
        if server is None:
            content["served"] = _served(engine)
        yield GoldenFile(path=f"mcp/{name}.golden.yaml", content=content, problems=problems,
                         source=f"golden/mcp/{cases_path.name}")
    missing = sorted(set(server_names(engine)) - seen)
    if missing:
        yield GoldenFile(path="mcp/_coverage.golden.yaml", content={"missing": missing},
                         problems=[f"add golden/mcp/{m}.cases.yaml (a tools/list answer of "
                                   f"the server) for rules/mcp/{m}.yaml" for m in missing])
