"""Golden suite `policies`: what a policy decides for calls of the built-in tools, from
the text of the call alone (trust levels, path rules, the command allowlist).

Inputs: golden/policies/<policy>.cases.yaml - `cases:` each {tool, args, trust} and
optionally `expect: allowed | refused` (an invariant: regen refuses a file that breaks
it); `workspace:` the directory absolute paths are judged against.
Output: golden/policies/<policy>.golden.yaml, each case with its decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..calls._policy import builtin_tool_defs, policy_rules
from ._core import GoldenFile, read_cases

__all__ = ["golden_files"]


def golden_files(engine: Any, root: Path) -> Iterable[GoldenFile]:
    defs = builtin_tool_defs(engine)
    for cases_path in sorted((root / "policies").glob("*.cases.yaml")):
        name = cases_path.name.removesuffix(".cases.yaml")
        data = read_cases(cases_path) or {}
        policy = policy_rules(data.get("policy", name), engine)
        workspace = data.get("workspace", "/workspace")
        out: list[dict[str, Any]] = []
        problems: list[str] = []
        for i, case in enumerate(data.get("cases") or []):
            args = case.get("args") or {}
            decision = policy.decide(defs.get(case["tool"]), args, case["trust"], workspace)
            out.append({"tool": case["tool"], "args": args, "trust": case["trust"],
                        "decision": decision.to_dict()})
            expect = case.get("expect")
            if expect is not None and (expect == "allowed") != decision.allowed:
                problems.append(f"case {i} ({case['tool']} {args}) at {case['trust']}: expected "
                                f"{expect}, got {decision.to_dict()}")
        yield GoldenFile(path=f"policies/{name}.golden.yaml",
                         content={"policy": policy.id, "workspace": workspace, "cases": out},
                         problems=problems, source=f"golden/policies/{cases_path.name}")
