"""The Engine: a validated rule set plus the compiled interpreters built from it.

Each feature contributes its public methods through a small mixin defined next to its
implementation, so this module stays a table of contents.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ._errors import RuleError
from ._loader import RuleSet, cache_read, cache_write, discover, layers_for
from ._mixins import MIXINS

__all__ = ["Engine", "load"]


class Engine(*MIXINS):  # type: ignore[misc]
    """Everything toolrules knows, compiled from rules/, templates/ and grammars/."""

    def __init__(self, ruleset: RuleSet):
        self.ruleset = ruleset
        self._compiled: dict[str, Any] = {}

    def _cached(self, key: str, build: Any) -> Any:
        value = self._compiled.get(key)
        if value is None:
            value = self._compiled[key] = build()
        return value

    def __repr__(self) -> str:
        counts = ", ".join(f"{len(v)} {k}s" for k, v in sorted(self.ruleset.files.items()))
        return f"<toolrules.Engine {counts}>"


def load(paths: Sequence[str | os.PathLike[str]] | None = None, *, use_env: bool = True,
         cache: bool = True) -> Engine:
    """Load the bundled rules, TOOLRULES_PATH overlays, then `paths`.

    Returns a complete engine or raises one RuleError listing every problem.
    """
    rs = discover(layers_for(paths, use_env=use_env))
    if not (cache and cache_read(rs)):
        from ._lint import lint

        problems = lint(rs, thorough=False)
        if any(p.level == "error" for p in problems):
            raise RuleError(problems)
        if cache:
            cache_write(rs)
    return Engine(rs)
