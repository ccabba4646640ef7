"""Cerberus schemas, one per rule kind (and one per cross-cutting table), gathered from
the schema module of each concern. Keep each kind's section self-contained: the module
that interprets a kind owns its fields."""

from __future__ import annotations

from typing import Any

from . import (
    _schemas_dialects,
    _schemas_evals,
    _schemas_local,
    _schemas_loop,
    _schemas_mcp,
    _schemas_models,
    _schemas_providers,
    _schemas_runtime,
    _schemas_serve,
    _schemas_tables,
)
from ._schemas_models import CAPABILITY_FIELDS

__all__ = ["CAPABILITY_FIELDS", "KIND_SCHEMAS", "TABLE_SCHEMAS", "all_table_schemas", "schema_for"]

_MODULES = (_schemas_models, _schemas_providers, _schemas_dialects, _schemas_tables,
            _schemas_runtime, _schemas_loop, _schemas_evals, _schemas_serve, _schemas_local,
            _schemas_mcp)

KIND_SCHEMAS: dict[str, dict[str, Any]] = {}
TABLE_SCHEMAS: dict[str, dict[str, Any]] = {}
for _mod in _MODULES:
    KIND_SCHEMAS.update(getattr(_mod, "KIND_SCHEMAS", {}))
    TABLE_SCHEMAS.update(getattr(_mod, "TABLE_SCHEMAS", {}))


def all_table_schemas() -> dict[str, dict[str, Any]]:
    return TABLE_SCHEMAS


def schema_for(kind: str, rule_id: str) -> dict[str, Any] | None:
    """The schema a file of this kind and id must satisfy (None: unknown table)."""
    if kind == "table":
        return TABLE_SCHEMAS.get(rule_id)
    return KIND_SCHEMAS.get(kind)
