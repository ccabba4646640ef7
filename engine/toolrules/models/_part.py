"""Engine methods for model ids and capabilities."""

from __future__ import annotations

from typing import Any

from .._types import Capability, ModelSpec
from ..rules._part import Part
from ._rules import ModelRules, Resolution

__all__ = ["ModelsPart"]

_CACHE_LIMIT = 4096


class ModelsPart(Part):
    """parse_model_id / capability / resolve_model, cached per id."""

    __slots__ = ("_resolutions",)

    def __init__(self, engine: Any):
        super().__init__(engine)
        # capability() is the hottest lookup: hold the per-id cache directly
        self._resolutions: dict[str, Resolution] = {}

    def _model_rules(self) -> ModelRules:
        return self._cached("models", lambda: ModelRules(self.ruleset))

    def resolve_model(self, model_id: str) -> Resolution:
        """Spec, capability and the rule lines that decided them."""
        cache = self._resolutions
        key = model_id if isinstance(model_id, str) else str(model_id)
        hit = cache.get(key)
        if hit is None:
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            hit = cache[key] = self._model_rules().resolve(key)
        return hit

    def parse_model_id(self, model_id: str) -> ModelSpec:
        """Take a model id apart: family, version, variant, size, provider, org ..."""
        return self.resolve_model(model_id).spec

    def capability(self, model_id: str | Any) -> Capability:
        """What the model can do with tools (family rules, then overrides)."""
        if isinstance(model_id, Capability):
            return model_id
        hit = self._resolutions.get(model_id)
        return (hit if hit is not None else self.resolve_model(model_id)).capability
