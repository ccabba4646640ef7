"""Golden fixtures: `check` regenerates every golden file in memory and diffs it against
the file on disk; `regen` writes them, refusing output that breaks its invariants. Each
suite module exposes `golden_files(engine, root) -> Iterable[GoldenFile]`."""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from . import (
    _constrained,
    _dialects,
    _emulation,
    _evals,
    _lint,
    _loop,
    _mcp,
    _models,
    _policies,
    _providers,
    _serve,
)
from ._core import GoldenFile, dump, golden_root, regen_command

__all__ = ["check", "regen"]

SUITES = (_models, _lint, _dialects, _providers, _emulation, _policies, _loop, _evals, _serve,
          _constrained, _mcp)


def _generate(pattern: str) -> list[GoldenFile]:
    from .._engine import load

    engine = load(use_env=False, cache=False)
    root = golden_root()
    out: list[GoldenFile] = []
    for suite in SUITES:
        for gf in suite.golden_files(engine, root):
            if fnmatch.fnmatch(gf.path, pattern) or fnmatch.fnmatch(gf.path, f"*{pattern}*"):
                out.append(gf)
    return out


def _stale(root: Path, generated: Iterable[GoldenFile], pattern: str) -> list[Path]:
    """Golden files on disk that no generator produces any more."""
    made = {gf.path for gf in generated}
    out = []
    for p in sorted(root.rglob("*.golden.yaml")):
        rel = p.relative_to(root).as_posix()
        if rel not in made and (fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(rel, f"*{pattern}*")):
            out.append(p)
    return out


def check(pattern: str = "*", echo: Callable[[str], Any] = print) -> int:
    root = golden_root()
    files = _generate(pattern)
    bad = 0
    for gf in files:
        target = root / gf.path
        want = dump(gf)
        have = target.read_text(encoding="utf-8") if target.exists() else ""
        if gf.problems:
            bad += 1
            echo(f"BROKEN {gf.path}:")
            for p in gf.problems:
                echo(f"  {p}")
        if have != want:
            bad += 1
            diff = difflib.unified_diff(have.splitlines(), want.splitlines(),
                                        f"golden/{gf.path} (on disk)",
                                        f"golden/{gf.path} (generated)", lineterm="", n=2)
            lines = list(diff)
            echo("\n".join(lines[:200]))
            if len(lines) > 200:
                echo(f"... {len(lines) - 200} more diff lines")
            echo(f"DIFF {gf.path}: review the change, then run: {regen_command(gf.path)}")
    for stale in _stale(root, files, pattern):
        bad += 1
        echo(f"STALE {stale.relative_to(root).as_posix()}: no rule generates it; delete it or "
             "restore its inputs")
    echo(f"golden: {len(files)} file(s) checked, {bad} problem(s)")
    return 1 if bad else 0


def regen(pattern: str = "*", echo: Callable[[str], Any] = print) -> int:
    root = golden_root()
    refused = 0
    written = 0
    for gf in _generate(pattern):
        if gf.problems:
            refused += 1
            echo(f"REFUSED {gf.path}: the output breaks its invariants:")
            for p in gf.problems:
                echo(f"  {p}")
            continue
        target = root / gf.path
        text = dump(gf)
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            written += 1
            echo(f"wrote golden/{gf.path}")
    echo(f"golden: {written} file(s) written, {refused} refused")
    return 1 if refused else 0
