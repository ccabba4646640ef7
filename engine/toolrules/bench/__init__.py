"""`toolrules bench`: performance figures, reported as measured side by side in one run.

Benchmarks are not pass/fail tests. Each concern contributes a section: a function
`bench(engine, quick) -> list[tuple[str, str]]` (label, figure), listed in `SECTIONS`
(a section that takes options - `prefix`: templates, sessions, local - has them as
keyword arguments; `SECTION_OPTIONS` names them for the CLI). A
figure held to a limit carries a third element, "ok" or why not: `toolrules bench
--check` exits 1 when one is not ok (CI checks the `hostile` section so).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import (
    _dialects,
    _emulation,
    _eval,
    _limits,
    _local,
    _models,
    _prefix,
    _providers,
    _runtime,
    _serve,
    _startup,
)

__all__ = ["SECTIONS", "SECTION_OPTIONS"]

Section = Callable[[Any, bool], Sequence[tuple[str, ...]]]

SECTIONS: tuple[tuple[str, Section], ...] = (
    ("import", _startup.bench),
    ("models", _models.bench),
    ("dialects", _dialects.bench),
    ("hostile", _limits.bench),
    ("providers", _providers.bench),
    ("emulation", _emulation.bench),
    ("runtime", _runtime.bench),
    ("serve", _serve.bench),
    ("local", _local.bench),
    ("prefix", _prefix.bench),
    ("eval", _eval.bench),
)

# section -> the keyword options its function takes (`toolrules bench prefix --template F`)
SECTION_OPTIONS: dict[str, tuple[str, ...]] = {
    "prefix": ("templates", "sessions", "local", "unfitted")}
