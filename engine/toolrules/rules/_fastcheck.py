"""A fast, conservative reading of the cerberus schemas for documents that are valid.

Validating ~100 rule files with cerberus dominates a cold load. Most files are valid, so
this interprets the common subset of cerberus rules directly and answers:

    True   the document certainly satisfies the schema (cerberus would agree)
    False  it does not; run cerberus for the real error messages
    None   the schema uses a rule this reader does not know; run cerberus

It never says True for a document cerberus would reject (a test checks every bundled
rule file and every lint case against cerberus).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence, Sized
from typing import Any

__all__ = ["quick_valid"]

_KNOWN = frozenset({"type", "schema", "required", "nullable", "allowed", "regex", "min", "max",
                    "minlength", "maxlength", "empty", "keysrules", "valuesrules", "meta"})


class _Unsupported(Exception):
    pass


def _type_ok(value: Any, name: str) -> bool:
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return isinstance(value, int)
    if name in ("float", "number"):
        return isinstance(value, (int, float)) and not (name == "number" and isinstance(value, bool))
    if name == "dict":
        return isinstance(value, Mapping)
    if name == "list":
        return isinstance(value, Sequence) and not isinstance(value, str)
    raise _Unsupported(name)


_REGEX_CACHE: dict[str, re.Pattern[str]] = {}


def _value_ok(value: Any, rules: Mapping[str, Any]) -> bool:
    if not rules.keys() <= _KNOWN:
        raise _Unsupported(str(set(rules) - _KNOWN))
    if value is None:
        return bool(rules.get("nullable", False))
    t = rules.get("type")
    if t is not None:
        names = t if isinstance(t, list) else [t]
        if not any(_type_ok(value, n) for n in names):
            return False
    if "empty" in rules and isinstance(value, Sized) and len(value) == 0:
        if not rules["empty"]:
            return False
        skip_content = True  # cerberus drops allowed/regex/length rules for empty values
    else:
        skip_content = False
    if not skip_content:
        if "allowed" in rules:
            allowed = rules["allowed"]
            items = value if isinstance(value, list) else [value]
            try:
                if any(v not in allowed for v in items):
                    return False
            except TypeError:
                return False
        if "regex" in rules and isinstance(value, str):
            pat = rules["regex"]
            rx = _REGEX_CACHE.get(pat)
            if rx is None:
                rx = _REGEX_CACHE[pat] = re.compile(pat if pat.endswith("$") else pat + "$")
            if not rx.match(value):
                return False
        if "minlength" in rules and isinstance(value, Sized) and len(value) < rules["minlength"]:
            return False
        if "maxlength" in rules and isinstance(value, Sized) and len(value) > rules["maxlength"]:
            return False
    try:
        if "min" in rules and value < rules["min"]:
            return False
        if "max" in rules and value > rules["max"]:
            return False
    except TypeError:
        return False
    sub = rules.get("schema")
    if sub is not None:
        if isinstance(value, Mapping):
            if not _mapping_ok(value, sub):
                return False
        elif isinstance(value, Sequence) and not isinstance(value, str) \
                and not all(_value_ok(v, sub) for v in value):
            return False
    if isinstance(value, Mapping):
        if "keysrules" in rules and not all(_value_ok(k, rules["keysrules"]) for k in value):
            return False
        if "valuesrules" in rules and not all(_value_ok(v, rules["valuesrules"])
                                              for v in value.values()):
            return False
    return True


def _mapping_ok(doc: Mapping[str, Any], schema: Mapping[str, Any]) -> bool:
    for key in doc:
        if key not in schema:
            return False
    for key, rules in schema.items():
        if key not in doc:
            if rules.get("required"):
                return False
            continue
        if not _value_ok(doc[key], rules):
            return False
    return True


def quick_valid(doc: Any, schema: Mapping[str, Any]) -> bool | None:
    """True if `doc` certainly satisfies `schema`; False if not; None if unsure."""
    if not isinstance(doc, Mapping):
        return False
    try:
        return _mapping_ok(doc, schema)
    except _Unsupported:
        return None
