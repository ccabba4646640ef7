"""Small builders for cerberus schema fields: every field carries `meta.doc` (what it is)
and, where useful, `meta.example` (what to write); lint turns them into hints."""

from __future__ import annotations

from typing import Any

__all__ = ["_bool", "_doc", "_int", "_num", "_str", "_str_or_list", "_strlist"]


def _doc(text: str, example: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"doc": text}
    if example is not None:
        meta["example"] = example
    return {"meta": meta}


def _str(doc: str, example: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"type": "string", **_doc(doc, example), **extra}


def _bool(doc: str) -> dict[str, Any]:
    return {"type": "boolean", **_doc(doc)}


def _strlist(doc: str, example: str | None = None) -> dict[str, Any]:
    return {"type": "list", "schema": {"type": "string"}, **_doc(doc, example)}


def _str_or_list(doc: str, example: str | None = None) -> dict[str, Any]:
    return {"type": ["string", "list"], "schema": {"type": "string"}, **_doc(doc, example)}


def _int(doc: str, example: str, **extra: Any) -> dict[str, Any]:
    """A non-negative integer (`extra` adds or overrides cerberus rules)."""
    return {"type": "integer", "min": 0, **_doc(doc, example), **extra}


def _num(doc: str, example: str, **extra: Any) -> dict[str, Any]:
    """A non-negative number (`extra` adds or overrides cerberus rules)."""
    return {"type": "number", "min": 0, **_doc(doc, example), **extra}
