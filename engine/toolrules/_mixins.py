"""The mixins that make up Engine, one per feature (imported lazily where heavy)."""

from __future__ import annotations

from ._models_api import ModelsMixin

MIXINS: tuple[type, ...] = (ModelsMixin,)
