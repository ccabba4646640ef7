"""`Part`: one concern of the Engine (models, dialects, providers ...), compiled lazily
from the engine's rule set. Parts reach each other only through the engine's public
methods, so each can be read, tested and replaced on its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._types import Capability

if TYPE_CHECKING:
    from .._engine import Engine
    from ._loader import RuleSet

__all__ = ["Part"]

T = TypeVar("T")


class Part:
    """Base of the engine's parts: the engine, its rule set and its compile cache."""

    __slots__ = ("engine", "ruleset")

    def __init__(self, engine: Engine):
        self.engine = engine
        self.ruleset: RuleSet = engine.ruleset

    def _cached(self, key: str, build: Callable[[], T]) -> T:
        return self.engine._cached(key, build)

    def capability_for(self, model: Any, capability: Capability | None = None) -> Capability:
        """`capability` when given, else the model's (defaults when there is no model)."""
        if capability is not None:
            return capability
        if model is None:
            return Capability()
        return self.engine.capability(model)
