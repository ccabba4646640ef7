"""Scenarios (rules/scenarios/*.yaml) as values: the tools offered (built-ins, and
declared tools whose handlers are data: canned outputs, echo, failures, delegation to a
built-in), the workspace fixture, the loop settings, and the judge of a finished run."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._types import Tool, ToolCall
from ..calls._validation import fill
from ..rules._eval_rules import is_matcher

__all__ = ["Scenario", "load_scenarios", "match_arguments", "match_value"]

_LOOP_SETTINGS = ("max_rounds", "max_tool_calls", "repeat_limit", "max_nudges",
                  "tool_use_mode", "tool_failure_policy", "max_tool_args_bytes",
                  "max_tool_output_bytes", "fix_empty_final")
_MISSING = object()


def _plain(value: Any) -> Any:
    """Rule data (YAML with line marks) as plain JSON values."""
    return json.loads(json.dumps(value, default=str))


@dataclass(frozen=True)
class Scenario:
    """One evaluation scenario (a rules/scenarios file)."""

    id: str
    data: dict[str, Any] = field(repr=False)
    source_file: str = ""

    @property
    def tier(self) -> str:
        return str(self.data["tier"])

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(self.data.get("tags") or ())

    @property
    def task(self) -> str:
        return str(self.data["task"])

    @property
    def description(self) -> str:
        return str(self.data["description"])

    @property
    def script(self) -> list[dict[str, Any]]:
        return list(self.data["script"])

    @property
    def expect(self) -> dict[str, Any]:
        return dict(self.data.get("expect") or {})

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self.data.get("settings") or {})

    def loop_settings(self) -> dict[str, Any]:
        return {k: v for k, v in self.settings.items() if k in _LOOP_SETTINGS}

    @property
    def trust(self) -> str:
        return str(self.settings.get("trust") or "workspace")

    def expected_calls(self) -> list[dict[str, Any]]:
        return [dict(c) for c in self.expect.get("calls") or ()]

    # ------------------------------------------------------------ the workspace fixture

    def make_workspace(self, root: Path) -> None:
        """Write the fixture files under `root`, with their ages (mtimes) as declared."""
        ws = self.data.get("workspace") or {}
        now = time.time()
        for rel, content in (ws.get("files") or {}).items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(str(content), encoding="utf-8")
        for rel, days in (ws.get("age_days") or {}).items():
            p = root / rel
            if p.exists():
                t = now - int(days) * 86400
                os.utime(p, (t, t))

    def fixture_files(self) -> dict[str, str]:
        return {k: str(v) for k, v in ((self.data.get("workspace") or {}).get("files")
                                       or {}).items()}

    # ------------------------------------------------------------ tools

    def registry(self, engine: Any, workspace: Path) -> Any:
        """A ToolRegistry with the scenario's tools: the named built-ins, the declared
        tools with their data-defined handlers, and the tools of the named MCP servers
        (the caller closes the registry, which stops them)."""
        from ..runtime import ToolExecutor, ToolRegistry, builtin_tools

        builtins = builtin_tools(workspace, engine=engine)
        registry = ToolRegistry(engine=engine, workspace=workspace)
        tools = self.data.get("tools") or {}
        for name in tools.get("builtin") or ():
            entry = builtins.get(name)
            if entry is None:
                raise ValueError(f"scenario {self.id}: no built-in tool {name!r}")
            registry.include(_only(builtins, name, engine, workspace))
        inner: list[Any] = []

        def delegate_executor() -> Any:  # built once, on the first delegated call
            if not inner:
                inner.append(ToolExecutor(builtins, workspace=workspace, trust="shell",
                                          engine=engine))
            return inner[0]

        for d in tools.get("declared") or ():
            tool = Tool(name=d["name"], description=str(d["description"]),
                        parameters=_plain(d["parameters"]))
            registry.add(tool, _mock_handler(_plain(d["mock"]), delegate_executor),
                         kind=d.get("kind") or "write")
        for server in tools.get("mcp") or ():
            registry.add_mcp(server)  # started when the run first needs its tools
        return registry

    # ------------------------------------------------------------ judging a run

    def judge(self, outcome: Any, workspace: Path) -> tuple[bool, list[str]]:
        """Whether the finished run did what the scenario asks, and what it missed."""
        expect = self.expect
        reasons: list[str] = []
        want_stop = expect.get("stopped") or "done"
        if outcome.stopped != want_stop:
            reasons.append(f"stopped {outcome.stopped!r}, expected {want_stop!r}")
        history = list(outcome.tool_history)
        if expect.get("no_calls") and history:
            reasons.append("called " + ", ".join(c.name for c, _ in history) +
                           " where no tool call was expected")
        sequence = (expect.get("order") or "sequence") == "sequence"
        last = -1
        used: set[int] = set()
        for want in self.expected_calls():
            found = None
            for i, (call, result) in enumerate(history):
                if i in used or (sequence and i <= last):
                    continue
                if call.name == want["name"] and result.ok and \
                        match_arguments(want.get("arguments") or {}, call.arguments)[0]:
                    found = i
                    break
            if found is None:
                if not want.get("optional"):
                    reasons.append(f"no successful {want['name']} call matching "
                                   f"{_short(want.get('arguments') or {})}")
                continue
            used.add(found)
            last = found
        reasons.extend(_check_text("answer", outcome.content or "", expect.get("answer") or {}))
        for rel, checks in (expect.get("files") or {}).items():
            p = workspace / rel
            exists = p.is_file()
            if checks.get("absent"):
                if exists:
                    reasons.append(f"{rel} exists but should not")
                continue
            if not exists:
                if checks:
                    reasons.append(f"{rel} does not exist")
                continue
            text = p.read_text(encoding="utf-8", errors="replace")
            reasons.extend(_check_text(rel, text, {k: v for k, v in checks.items()
                                                  if k != "exists"}))
        return not reasons, reasons


def _only(builtins: Any, name: str, engine: Any, workspace: Path) -> Any:
    from ..runtime import ToolRegistry

    one = ToolRegistry(engine=engine, workspace=workspace)
    entry = builtins.get(name)
    one._register(entry)
    return one


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _check_text(what: str, text: str, checks: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    if "equals" in checks and text.strip() != str(checks["equals"]).strip():
        out.append(f"{what} is {_short(text)}, expected {_short(checks['equals'])}")
    low = text.lower()
    for piece in _as_list(checks.get("contains")):
        if piece.lower() not in low:
            out.append(f"{what} does not contain {piece!r}")
    for piece in _as_list(checks.get("not_contains")):
        if piece.lower() in low:
            out.append(f"{what} contains {piece!r}")
    if checks.get("regex") and not re.search(str(checks["regex"]), text):
        out.append(f"{what} does not match /{checks['regex']}/")
    if checks.get("nonempty") and not text.strip():
        out.append(f"{what} is empty")
    return out


# ---------------------------------------------------------------- argument matchers

def match_value(matcher: Any, value: Any) -> bool:
    """One argument against its matcher: a plain value compares equal (JSON-wise); a
    mapping of operators (equals, contains, not_contains, regex, one_of, any, absent)
    checks each. `value` is _MISSING when the argument was not given."""
    if not is_matcher(matcher):
        return value is not _MISSING and _plain(value) == _plain(matcher)
    if matcher.get("absent"):
        return value is _MISSING
    if value is _MISSING:
        return False
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                           sort_keys=True, default=str)
    for op, want in matcher.items():
        if op == "equals" and _plain(value) != _plain(want):
            return False
        if op == "contains" and str(want).lower() not in text.lower():
            return False
        if op == "not_contains" and str(want).lower() in text.lower():
            return False
        if op == "regex" and not re.search(str(want), text):
            return False
        if op == "one_of" and _plain(value) not in [_plain(w) for w in want]:
            return False
    return True


def match_arguments(matchers: Mapping[str, Any], arguments: Mapping[str, Any]
                    ) -> tuple[bool, int, int]:
    """(all matched, how many matched, how many matchers) for a call's arguments."""
    total = len(matchers)
    hits = sum(1 for k, m in matchers.items()
               if match_value(m, arguments.get(k, _MISSING) if isinstance(arguments, Mapping)
                              else _MISSING))
    return hits == total, hits, total


# ---------------------------------------------------------------- mock handlers

def _mock_handler(mock: dict[str, Any], delegate_executor: Any) -> Any:
    from ..runtime import ToolFailure

    async def handler(**arguments: Any) -> Any:
        spec = mock
        for case in mock.get("cases") or ():
            if match_arguments(case.get("when") or {}, arguments)[0]:
                spec = case
                break
        else:
            if mock.get("cases") and not any(k in mock for k in ("output", "echo", "fail",
                                                                  "delegate")):
                raise ToolFailure("INVALID_ARGUMENTS", "no case of this mock matches "
                                  f"the arguments {_short(arguments)}")
        if "fail" in spec:
            fail = spec["fail"]
            raise ToolFailure(str(fail["code"]), fill(str(fail["message"]), arguments) or "")
        if spec.get("echo"):
            return dict(arguments)
        if "delegate" in spec:
            d = spec["delegate"]
            args = {**(d.get("fixed") or {})}
            for target, source in (d.get("arguments") or {}).items():
                if source in arguments:
                    args[target] = arguments[source]
            result = await delegate_executor().execute(
                ToolCall("delegate", str(d["tool"]), args))
            if not result.ok:
                err = result.tool_error
                code = ((err.details or {}).get("error") if err is not None else None)
                raise ToolFailure(str(code or "EXECUTION"), str(result.error or "failed"))
            return result.output
        output = spec.get("output")
        if isinstance(output, str):
            return fill(output, arguments)
        return output

    return handler


def load_scenarios(engine: Any, names: Sequence[str] | None = None) -> list[Scenario]:
    """Every scenario of the rule set (sorted by id), or those `names` select: scenario
    ids, tags, scenario presets of rules/eval.yaml, `all`, `*` wildcards."""
    import fnmatch

    rs = engine.ruleset
    every = [Scenario(rid, _plain(rf.data), rf.display)
             for rid, rf in sorted(rs.files.get("scenario", {}).items())]
    if not names or list(names) == ["all"]:
        return every
    table = rs.table("eval") or {}
    presets = table.get("scenario_presets") or {}
    wanted: list[str] = []

    def expand(name: str, depth: int = 0) -> None:
        if name in presets and depth < 8:
            for n in presets[name]:
                expand(n, depth + 1)
        else:
            wanted.append(name)

    for n in names:
        expand(n.strip())
    out: list[Scenario] = []
    for name in wanted:
        if name == "all":
            hits = every
        else:
            hits = [s for s in every if fnmatch.fnmatchcase(s.id, name) or name in s.tags]
        if not hits:
            known = ", ".join(s.id for s in every)
            raise ValueError(f"no scenario, tag or preset {name!r}; scenarios: {known}; "
                             f"presets: {', '.join(presets) or '-'}")
        for s in hits:
            if s not in out:
                out.append(s)
    return out
