"""Golden suite `lint`: the linter's own messages, reviewed as diffs.

Inputs: tests/lint_cases/<case>/ - an overlay directory of deliberately broken rule
files (linted on their own, without the bundled rules). Output:
golden/lint/<case>.golden.yaml with every diagnostic, paths relative to the case.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._engine import lint_rules as lint
from ..rules._loader import bundled_layer, discover, layers_for
from ._core import GoldenFile

__all__ = ["golden_files"]


def golden_files(engine: Any, root: Path) -> Iterable[GoldenFile]:
    cases_dir = bundled_layer().rules.parent / "tests" / "lint_cases"
    if not cases_dir.is_dir():
        return
    for case in sorted(p for p in cases_dir.iterdir() if p.is_dir()):
        bundled = (case / "WITH_BUNDLED").exists()
        rs = discover(layers_for([case], use_env=False, include_bundled=bundled))
        problems = lint(rs)
        prefix = str(case.resolve())
        lines = []
        for p in problems:
            path = str(Path(p.path).resolve())
            if not path.startswith(prefix):
                continue  # only the case's own files
            rel = Path(path).relative_to(prefix).as_posix()
            lines.append(f"{rel}:{p.line}:{p.col}: [{p.level}] {p.message} ({p.check})")
        invariant = [] if lines else [f"case {case.name} produced no diagnostics at all"]
        yield GoldenFile(path=f"lint/{case.name}.golden.yaml",
                         content={"case": case.name, "diagnostics": lines}, problems=invariant,
                         source=f"tests/lint_cases/{case.name}/")
