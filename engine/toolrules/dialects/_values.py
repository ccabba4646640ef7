"""Typing values that a format writes as text (XML parameters), in one shared place.

A value's type comes from an explicit type attribute when the format has one
(`string="true"`, `type="number"`), otherwise from the tool's JSON schema for that
parameter. Strings stay the raw text (even `0042` or JSON-looking text); other types
are read as JSON, with Python literals (True/False/None) accepted, and an array or object
written backslash-escaped (`[{\\"a\\": 1}]`, as GLM does) read once unescaped, and a number written
as a JSON string (`"5"`) read as the number a numeric type asks for. Common
non-standard type names in schemas (`int`, `float`, `double`, `bool`, `dict`, `list`)
mean their JSON types. When a union allows
a string and something else, the non-string reading is preferred if it fits. Text that
cannot be read as its declared type is kept as the raw string (validation reports it).
"""

from __future__ import annotations

import json
from typing import Any

from .._jsonutil import json_type
from ._jsonscan import MAX_DEPTH, NestingTooDeep, RepairFailed, repair_json, too_deep

__all__ = ["read_value", "schema_types", "type_value"]

_PY = {"True": True, "False": False, "None": None}
_JSON_TYPES = ("string", "integer", "number", "boolean", "null", "array", "object")
# Type names that tool schemas written for Python (BFCL-style `dict`, `float`) or other
# languages use instead of JSON Schema's: each reads as the JSON type it means.
_TYPE_ALIASES = {"int": "integer", "float": "number", "double": "number", "bool": "boolean",
                 "dict": "object", "list": "array", "str": "string", "tuple": "array"}


def schema_types(schema: Any, depth: int = 0) -> set[str]:
    """The JSON types a schema admits (empty set: unknown / anything)."""
    if not isinstance(schema, dict) or depth > 8:
        return set()
    out: set[str] = set()
    t = schema.get("type")
    if isinstance(t, str):
        out.add(_TYPE_ALIASES.get(t, t))
    elif isinstance(t, list):
        out.update(_TYPE_ALIASES.get(x, x) for x in t if isinstance(x, str))
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or ():
            out |= schema_types(sub, depth + 1)
    if not out and "enum" in schema:
        for v in schema["enum"] or ():
            out.add(_type_of(v))
    if not out and "const" in schema:
        out.add(_type_of(schema["const"]))
    if not out and "properties" in schema:
        out.add("object")
    if not out and "items" in schema:
        out.add("array")
    return out


def _type_of(v: Any) -> str:
    return json_type(v) or "string"


_PY_REPAIRS = frozenset({"single-quotes", "python-literals", "trailing-commas"})
_NUMERIC = frozenset({"integer", "number"})
# control characters (a raw line break) allowed inside strings
_LENIENT = json.JSONDecoder(strict=False)


def _read(raw: str) -> tuple[bool, Any]:
    """(True, value) when `raw` reads as JSON or a Python literal; NestingTooDeep when it
    nests past MAX_DEPTH (checked before any decoder runs)."""
    text = raw.strip()
    if text in _PY:
        return True, _PY[text]
    if too_deep(text):
        raise NestingTooDeep(f"nested deeper than {MAX_DEPTH} brackets")
    try:
        return True, json.loads(text)
    except RecursionError:  # only when the caller's own stack is nearly exhausted
        raise NestingTooDeep("nested too deep for the stack") from None
    except ValueError:
        pass
    if text[:1] in "[{":  # a Python literal list/dict: ['a', True] reads as ["a", true]
        try:
            return True, repair_json(text, _PY_REPAIRS)[0]
        except NestingTooDeep:
            raise
        except RepairFailed:
            pass
        if '\\"' in text:  # JSON written backslash-escaped, as inside a string: {\"a\": 1}
            # (a \n escaped only once is a raw line break inside a string once unescaped:
            # read as the line break it means)
            try:
                inner = _LENIENT.decode('"' + text + '"')
            except ValueError:
                return False, None
            if too_deep(inner):
                raise NestingTooDeep(f"nested deeper than {MAX_DEPTH} brackets")
            try:
                return True, _LENIENT.decode(inner)
            except (ValueError, RecursionError):
                pass
    return False, None


def _fits(value: Any, types: set[str]) -> bool:
    kind = _type_of(value)
    if kind in types:
        return True
    return kind == "integer" and "number" in types


def type_value(raw: str, schema: Any = None, declared: str | None = None) -> Any:
    """The typed value of `raw` given a declared type ('string'/'json'/JSON type) or schema.
    Text nested past MAX_DEPTH cannot be read: it stays the raw string."""
    try:
        return read_value(raw, schema, declared)
    except NestingTooDeep:
        return raw


def read_value(raw: str, schema: Any = None, declared: str | None = None) -> Any:
    """type_value, but NestingTooDeep when the text would be decoded and nests past
    MAX_DEPTH (the scanner then keeps the whole call as text)."""
    if declared is not None:
        if declared == "string":
            return raw
        ok, value = _read(raw)
        return value if ok else raw
    types = schema_types(schema)
    if not types:
        return raw
    non_string = types - {"string"}
    if not non_string:
        return raw
    ok, value = _read(raw)
    if ok and type(value) is str and non_string & _NUMERIC:
        # a number written as a JSON string ("5" for an integer): read by its type
        ok, value = _read(value)
        if ok and type(value) is str:
            ok = False
    return value if ok and _fits(value, non_string) else raw
