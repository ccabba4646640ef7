"""The default engine: what module-level functions use when they get no `engine=`.

The modules that need it (validation, errors, tool engineering, budgets ...) sit below the
`Engine` in the import order, so they cannot import `load()`. The package (`toolrules/__init__`,
imported before any of its modules) hands a factory in here that imports `load()` when the
default engine is first needed; they ask for the engine through `default_engine()`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["default_engine", "resolve_engine", "set_default_factory"]

_factory: Callable[[], Any] | None = None
_engine: Any = None


def set_default_factory(factory: Callable[[], Any]) -> None:
    """Install the function that builds the default engine (called by toolrules/__init__)."""
    global _factory, _engine
    _factory, _engine = factory, None


def default_engine() -> Any:
    """`toolrules.load()`, built on first use and kept."""
    global _engine
    if _engine is None:
        if _factory is None:  # pragma: no cover - toolrules/__init__ always installs one
            raise RuntimeError("no default engine: import toolrules first")
        _engine = _factory()
    return _engine


def resolve_engine(engine: Any) -> Any:
    """`engine` itself, or the default engine when it is None."""
    return engine if engine is not None else default_engine()
