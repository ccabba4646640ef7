"""Where features plug in: one helper to import a feature module by name, if it exists.

Features register by module name (schemas, mixins, CLI commands, golden suites, bench
sections); a missing module is skipped, an error inside an existing one is raised.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["optional_module"]


def optional_module(name: str) -> ModuleType | None:
    """`toolrules.<name>`, or None when there is no such module."""
    full = f"{__package__}.{name}"
    try:
        return importlib.import_module(full)
    except ModuleNotFoundError as exc:
        if exc.name != full:
            raise
        return None
