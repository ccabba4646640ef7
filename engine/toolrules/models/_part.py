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

    def _model_rules(self) -> ModelRules:
        return self._cached("models", lambda: ModelRules(self.ruleset))

    def resolve_model(self, model_id: str) -> Resolution:
        """Spec, capability and the rule lines that decided them."""
        cache: dict[str, Resolution] = self._cached("model_cache", dict)
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
        return self.resolve_model(model_id).capability
