"""Lint cross-checks of the evaluation rules: scenarios (rules/scenarios/) and the eval
table (rules/eval.yaml). Names that refer to other rules exist (built-in tools, dialects,
schema strategies, envelope codes, scenarios), regexes compile, matchers are well formed,
tool schemas are JSON Schemas, strategies extend known ones without cycles."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import Any

from ._lint import check_regex
from ._loader import RuleFile, RuleSet
from ._schemas_evals import MATCH_OPS

__all__ = ["check_rules", "is_matcher"]


def is_matcher(value: Any) -> bool:
    """A mapping whose keys are all matcher operators (else: a value to compare)."""
    return isinstance(value, dict) and bool(value) and all(k in MATCH_OPS for k in value)


def _builtin_tools(rs: RuleSet) -> set[str]:
    names: set[str] = set()
    for rf in rs.files.get("toolset", {}).values():
        for t in (rf.data or {}).get("tools") or () if isinstance(rf.data, dict) else ():
            if isinstance(t, dict) and isinstance(t.get("name"), str):
                names.add(t["name"])
    return names


def _envelope_codes(rs: RuleSet) -> set[str] | None:
    table = rs.table("validation")
    env = table.get("envelope") if isinstance(table, dict) else None
    return set(env) if isinstance(env, dict) else None


def _check_matchers(rep: Any, rf: RuleFile, path: tuple[Any, ...], args: Any) -> None:
    if not isinstance(args, dict):
        return
    for key, value in args.items():
        here = (*path, key)
        if isinstance(value, dict) and any(k in MATCH_OPS for k in value) \
                and not is_matcher(value):
            extra = sorted(k for k in value if k not in MATCH_OPS)
            rep.error(rf, here, f"argument {key!r} mixes matcher operators with the keys "
                      f"{extra}; write {{equals: {{...}}}} to compare a mapping",
                      "scenario-matcher")
        elif is_matcher(value):
            check_regex(rep, rf, (*here, "regex"), value.get("regex"))
            if "one_of" in value and not isinstance(value["one_of"], list):
                rep.error(rf, (*here, "one_of"), "one_of takes a list of values",
                          "scenario-matcher")


def _check_texts(rep: Any, rf: RuleFile, path: tuple[Any, ...], checks: Any) -> None:
    if isinstance(checks, dict):
        check_regex(rep, rf, (*path, "regex"), checks.get("regex"))


def _check_scenario(rs: RuleSet, rf: RuleFile, rep: Any, builtins: set[str],
                    codes: set[str] | None, entry_names: set[str]) -> None:
    data = rf.data
    tools = data.get("tools") or {}
    offered: set[str] = set()
    for j, name in enumerate(tools.get("builtin") or ()):
        if builtins and name not in builtins:
            # a warning: a project may overlay a smaller built-in tool set; the engine
            # still loads, and `toolrules eval` reports this scenario's runs as errors
            rep.warning(rf, ("tools", "builtin", j), f"no built-in tool {name!r}; known: "
                        f"{', '.join(sorted(builtins))}; this scenario cannot run with "
                        "this tool set", "scenario-tool")
        offered.add(name)
    for j, tool in enumerate(tools.get("declared") or ()):
        name = tool.get("name")
        if name in offered:
            rep.error(rf, ("tools", "declared", j, "name"), f"tool {name!r} is offered twice",
                      "scenario-tool")
        offered.add(name)
        _check_schema(rep, rf, ("tools", "declared", j, "parameters"), tool.get("parameters"))
        mock = tool.get("mock") or {}
        for where, result in [(("mock",), mock)] + [
                (("mock", "cases", k), c) for k, c in enumerate(mock.get("cases") or ())]:
            base = ("tools", "declared", j, *where)
            ways = [k for k in ("output", "echo", "fail", "delegate") if k in result]
            if len(ways) > 1:
                rep.error(rf, base, f"a mock answers one way; this one has {', '.join(ways)}",
                          "scenario-mock")
            elif not ways and not result.get("cases"):
                rep.error(rf, base, "a mock needs output, echo, fail, delegate or cases",
                          "scenario-mock")
            fail = result.get("fail") or {}
            if codes is not None and fail.get("code") and fail["code"] not in codes:
                rep.error(rf, (*base, "fail", "code"), f"{fail['code']!r} is not an envelope "
                          f"code of rules/validation.yaml; known: {', '.join(sorted(codes))}",
                          "scenario-mock")
            delegate = result.get("delegate") or {}
            if builtins and delegate.get("tool") and delegate["tool"] not in builtins:
                rep.warning(rf, (*base, "delegate", "tool"), f"no built-in tool "
                            f"{delegate['tool']!r}; this scenario cannot run with this "
                            "tool set", "scenario-mock")
            if "when" in result:
                _check_matchers(rep, rf, (*base, "when"), result["when"])
    prefixes: list[str] = []  # MCP tools are known once their server runs: by namespace
    for j, server in enumerate(tools.get("mcp") or ()):
        mrf = rs.get("mcp", server)
        if mrf is None:
            rep.error(rf, ("tools", "mcp", j), f"no MCP server {server!r} is declared "
                      f"(rules/mcp/{server}.yaml); declared: "
                      f"{', '.join(rs.ids('mcp')) or 'none'}", "scenario-tool")
            continue
        namespace = (mrf.data or {}).get("namespace") or server
        sep = ((rs.table("tool_selection") or {}).get("namespaces") or {}).get("separator", "_")
        prefixes.append(f"{namespace}{sep}")
    expect = data.get("expect") or {}
    for j, call in enumerate(expect.get("calls") or ()):
        if call.get("name") not in offered and not str(call.get("name")).startswith(
                tuple(prefixes) or ("\0",)):
            rep.error(rf, ("expect", "calls", j, "name"), f"expected call {call.get('name')!r}"
                      " is not an offered tool", "scenario-expect")
        _check_matchers(rep, rf, ("expect", "calls", j, "arguments"), call.get("arguments"))
    if expect.get("no_calls") and expect.get("calls"):
        rep.error(rf, ("expect", "no_calls"), "no_calls and calls contradict each other",
                  "scenario-expect")
    _check_texts(rep, rf, ("expect", "answer"), expect.get("answer"))
    for path, checks in (expect.get("files") or {}).items():
        _check_texts(rep, rf, ("expect", "files", path), checks)
    for j, step in enumerate(data.get("script") or ()):
        has = [k for k in ("calls", "answer") if k in step]
        if len(has) != 1:
            rep.error(rf, ("script", j), "a script step has either calls or an answer "
                      "(raw/native add hand-written variants of it)", "scenario-script")
        for key in step.get("raw") or {}:
            if entry_names and key not in entry_names:
                rep.error(rf, ("script", j, "raw", key), f"{key!r} is neither an offline "
                          "entry of rules/eval.yaml nor a dialect", "scenario-script")


def _check_schema(rep: Any, rf: RuleFile, path: tuple[Any, ...], schema: Any) -> None:
    if not isinstance(schema, dict):
        return
    import jsonschema

    if schema.get("type", "object") != "object":
        rep.error(rf, path, "tool parameters must be an object schema", "scenario-schema")
        return
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        rep.error(rf, path, f"not a JSON Schema: {exc.message}", "scenario-schema")


def _check_table(rs: RuleSet, rf: RuleFile, rep: Any, scenarios: dict[str, set[str]]) -> None:
    data = rf.data
    dialects = set(rs.ids("dialect"))
    table = rs.table("schema_strategies")
    known_strategies = set((table or {}).get("strategies") or {}) \
        if isinstance(table, dict) else set()
    ids: set[str] = set()
    tags: set[str] = set()
    for j, entry in enumerate(data.get("offline") or ()):
        eid = entry.get("id")
        if eid in ids:
            rep.error(rf, ("offline", j, "id"), f"offline entry {eid!r} is listed twice",
                      "eval-entry")
        ids.add(eid)
        tags.update(entry.get("tags") or ())
        dialect = entry.get("dialect")
        if dialect is not None and dialect not in dialects:
            rep.error(rf, ("offline", j, "dialect"), f"dialect {dialect!r} does not exist "
                      "under rules/dialects/", "eval-entry")
        _check_capability(rep, rf, ("offline", j, "set"), entry.get("set"), dialects,
                          known_strategies)
    for entry in data.get("live") or ():
        tags.update(entry.get("tags") or ())
        ids.add(entry.get("id"))
    strategies = data.get("strategies") or {}
    for name, spec in strategies.items():
        seen = [name]
        parent = spec.get("extends")
        while parent is not None:
            if parent not in strategies:
                rep.error(rf, ("strategies", name, "extends"), f"strategy {parent!r} does not "
                          "exist", "eval-strategy")
                break
            if parent in seen:
                rep.error(rf, ("strategies", name, "extends"), "strategies extend each other "
                          "in a cycle: " + " -> ".join([*seen, parent]), "eval-strategy")
                break
            seen.append(parent)
            parent = strategies[parent].get("extends")
        _check_capability(rep, rf, ("strategies", name, "set"), spec.get("set"), dialects,
                          known_strategies)
    for j, name in enumerate(data.get("default_strategies") or ()):
        if name not in strategies:
            rep.error(rf, ("default_strategies", j), f"strategy {name!r} does not exist",
                      "eval-strategy")
    names = ids | tags | dialects
    for preset, filters in (data.get("presets") or {}).items():
        for j, f in enumerate(filters):
            pat = f.lstrip("!")
            if not any(fnmatch.fnmatchcase(n, pat) for n in names if isinstance(n, str)):
                rep.warning(rf, ("presets", preset, j), f"filter {f!r} matches no entry, tag "
                            "or dialect", "eval-preset")
    scenario_names = set(scenarios) | {t for ts in scenarios.values() for t in ts}
    for preset, listed in (data.get("scenario_presets") or {}).items():
        for j, name in enumerate(listed):
            if scenarios and name not in scenario_names:
                rep.error(rf, ("scenario_presets", preset, j), f"no scenario or tag {name!r} "
                          "under rules/scenarios/", "eval-preset")
    known = scenario_names | set(data.get("scenario_presets") or {}) | {"all"}
    for j, entry in enumerate(data.get("live") or ()):
        own = entry.get("scenarios")
        for k, name in enumerate([own] if isinstance(own, str) else list(own or ())):
            if scenarios and not any(fnmatch.fnmatchcase(n, name) for n in known):
                where = ("live", j, "scenarios") if isinstance(own, str) else \
                    ("live", j, "scenarios", k)
                rep.error(rf, where, f"no scenario, tag or scenario preset {name!r}",
                          "eval-entry")
    check_regex(rep, rf, ("signals", "feedback"), (data.get("signals") or {}).get("feedback"))


def _check_capability(rep: Any, rf: RuleFile, path: tuple[Any, ...], values: Any,
                      dialects: set[str], strategies: set[str]) -> None:
    if not isinstance(values, dict):
        return
    if values.get("dialect") is not None and values["dialect"] not in dialects:
        rep.error(rf, (*path, "dialect"), f"dialect {values['dialect']!r} does not exist",
                  "eval-capability")
    if values.get("schema_strategy") is not None and strategies and \
            values["schema_strategy"] not in strategies:
        rep.error(rf, (*path, "schema_strategy"), f"schema strategy "
                  f"{values['schema_strategy']!r} is not in rules/schema_strategies.yaml",
                  "eval-capability")


def _usable(rs: RuleSet, kind: str, failed: set[tuple[str, str]]) -> Iterable[RuleFile]:
    for rid, rf in sorted(rs.files.get(kind, {}).items()):
        if (kind, rid) not in failed and isinstance(rf.data, dict):
            yield rf


def check_rules(rs: RuleSet, rep: Any, failed: set[tuple[str, str]]) -> None:
    """Scenarios and the eval table refer to things that exist."""
    builtins = _builtin_tools(rs)
    codes = _envelope_codes(rs)
    table = rs.get("table", "eval")
    entries: set[str] = set(rs.ids("dialect"))
    if table is not None and isinstance(table.data, dict):
        entries |= {str(e.get("id")) for e in table.data.get("offline") or ()
                    if isinstance(e, dict)}
    scenarios: dict[str, set[str]] = {}
    for rf in _usable(rs, "scenario", failed):
        scenarios[rf.id] = set(rf.data.get("tags") or ())
        _check_scenario(rs, rf, rep, builtins, codes, entries)
    if table is not None and ("table", "eval") not in failed and isinstance(table.data, dict):
        _check_table(rs, table, rep, scenarios)
