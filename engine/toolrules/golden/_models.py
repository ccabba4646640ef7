"""Golden suite `models`: a resolution matrix per family.

Inputs: golden/models/<family>.cases.yaml (`ids:` a list of real model ids).
Output: golden/models/<family>.golden.yaml, each id -> parsed spec and the capability
fields that differ from the defaults (so a silent flip shows up as a diff).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..models._rules import spec_dict
from ._core import GoldenFile, read_cases

__all__ = ["golden_files"]


def golden_files(engine: Any, root: Path) -> Iterable[GoldenFile]:
    dialects = set(engine.ruleset.ids("dialect"))
    for cases_path in sorted((root / "models").glob("*.cases.yaml")):
        name = cases_path.name.removesuffix(".cases.yaml")
        cases = read_cases(cases_path) or {}
        matrix: dict[str, Any] = {}
        problems: list[str] = []
        rule = engine.ruleset.get("model", name)
        examples = list((rule.data or {}).get("examples", []) if rule else [])
        ids = examples + [i for i in cases.get("ids", []) if i not in examples]
        for model_id in ids:
            res = engine.resolve_model(model_id)
            cap = res.capability
            matrix[model_id] = {"spec": spec_dict(res.spec), "capability": cap.non_default()}
            if cases.get("family", name) != res.spec.family:
                problems.append(f"{model_id!r} resolved to family {res.spec.family!r}, "
                                f"not {cases.get('family', name)!r}")
            if cap.dialect and dialects and cap.dialect not in dialects:
                problems.append(f"{model_id!r} names missing dialect {cap.dialect!r}")
        yield GoldenFile(path=f"models/{name}.golden.yaml", content=matrix, problems=problems,
                         source=f"golden/models/{cases_path.name}")
