"""JSON Schema -> GBNF (llama.cpp's grammar format), for constrained decoding of tool
arguments.

`GbnfBuilder` collects named rules; `schema_rule(schema)` adds the rules that admit exactly
the JSON texts valid under `schema` for the keywords listed in ENFORCED, and returns the
name of the rule. Keywords outside that list are not enforced by the grammar (the texts it
admits are a superset there); validation of the parsed call still checks them.

Choices made for generation rather than for recognition: whitespace is at most one space
(a model that may write any amount of whitespace can write nothing else until max_tokens);
objects with declared properties are closed (no invented keys) and write their keys in
the schema's order; numbers have bounded digit runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._errors import SchemaError

__all__ = ["ENFORCED", "NOT_ENFORCED", "GbnfBuilder", "char_class", "literal", "pointer"]

ENFORCED = ("type", "properties", "required", "additionalProperties", "items", "minItems",
            "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs",
            "definitions", "nullable", "minLength", "maxLength", "minProperties/maxProperties (free-form objects)",
            "minimum (sign, and >= 1 for integers)",
            "exclusiveMinimum (sign)")
NOT_ENFORCED = ("pattern", "format", "minimum/maximum (beyond the sign)", "multipleOf",
                "uniqueItems", "prefixItems", "contains", "not", "if/then/else",
                "patternProperties", "propertyNames", "min/maxProperties (objects with properties)",
                "dependentRequired", "dependentSchemas")

# Repetition bounds above these are written as unbounded: llama.cpp expands {m,n} into
# n nested rules, so a huge bound costs memory for nothing a model would use.
_MAX_REPEAT = 256
_MAX_DEPTH = 64

_NAME_CLEAN = re.compile(r"[^a-z0-9]+")

_PRIMITIVES = {
    "ws": '" "?',
    "json-char": r'[^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "json-string": r'"\"" json-char* "\""',
    "json-int": '"-"? ("0" | [1-9] [0-9]{0,15})',
    "json-uint": '"0" | [1-9] [0-9]{0,15}',
    "json-posint": '[1-9] [0-9]{0,15}',
    "json-frac": '("." [0-9]{1,20})? ([eE] [-+]? [0-9]{1,3})?',
    "json-number": "json-int json-frac",
    "json-unumber": "json-uint json-frac",
    "json-bool": '"true" | "false"',
    "json-null": '"null"',
    "json-value": "json-object | json-array | json-string | json-number | json-bool | json-null",
    "json-object": '"{" ws ( json-string ":" ws json-value ( "," ws json-string ":" ws '
                   'json-value )* )? ws "}"',
    "json-array": '"[" ws ( json-value ( "," ws json-value )* )? ws "]"',
}
_PRIMITIVE_DEPS = {
    "json-string": ("json-char",), "json-number": ("json-int", "json-frac"),
    "json-unumber": ("json-uint", "json-frac"),
    "json-value": ("json-object", "json-array", "json-string", "json-number", "json-bool",
                   "json-null"),
    "json-object": ("ws", "json-string", "json-value"),
    "json-array": ("ws", "json-value"),
}


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(ch: str, special: str) -> str:
    """One character as GBNF writes it inside a literal or a class: `special` characters
    backslashed, line breaks and tabs by name, other control characters as \\xHH."""
    if ch in special:
        return "\\" + ch
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if ord(ch) < 0x20 or ord(ch) == 0x7F:
        return f"\\x{ord(ch):02X}"
    return ch


def literal(text: str) -> str:
    """A GBNF string literal matching exactly `text`."""
    return '"' + "".join(_escaped(ch, '\\"') for ch in text) + '"'


def char_class(chars: Sequence[str] | set[str] | frozenset[str], negate: bool = False) -> str:
    """A GBNF character class of `chars` (or of every other character)."""
    body = "".join(_escaped(ch, "\\]^-[") for ch in sorted(set(chars)))
    return "[" + ("^" if negate else "") + body + "]"


def _repeat(item: str, low: int, high: int | None) -> str:
    """`item` repeated low..high times (high None: unbounded)."""
    if high is not None and high > _MAX_REPEAT:
        high = None
    low = min(low, _MAX_REPEAT)
    if high is None:
        if low == 0:
            return f"({item})*"
        if low == 1:
            return f"({item})+"
        return f"({item}){{{low},}}"
    if low == high:
        return "" if low == 0 else (item if low == 1 else f"({item}){{{low}}}")
    if (low, high) == (0, 1):
        return f"({item})?"
    return f"({item}){{{low},{high}}}"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


class GbnfBuilder:
    """Named GBNF rules, built from JSON schemas and literal pieces."""

    def __init__(self, string_excludes: str = "") -> None:
        """`string_excludes`: characters JSON strings must write as \\u escapes (JSON
        written between a format's tags, whose tags begin with such a character)."""
        self.string_excludes = "".join(sorted(set(string_excludes) - set('"\\')))
        self.rules: dict[str, str] = {}
        self.memo: dict[Any, str] = {}
        """Rules a caller builds once per grammar, by its own key."""
        self._by_body: dict[str, str] = {}
        self._refs: dict[tuple[int, str], str] = {}
        self._roots: list[Any] = []

    # ------------------------------------------------------------ rules

    def name(self, hint: str) -> str:
        """A fresh rule name from `hint` (GBNF names: letters, digits, dashes)."""
        base = _NAME_CLEAN.sub("-", hint.lower()).strip("-") or "r"
        if base[0].isdigit():
            base = "r-" + base
        name, n = base, 1
        while name in self.rules or name in _PRIMITIVES or name == "root":
            n += 1
            name = f"{base}-{n}"
        return name

    def add(self, hint: str, body: str) -> str:
        """A rule for `body` (an existing one when a rule has the same body)."""
        hit = self._by_body.get(body)
        if hit is not None:
            return hit
        name = self.name(hint)
        self.rules[name] = body
        self._by_body[body] = name
        return name

    def define(self, name: str, body: str) -> None:
        self.rules[name] = body

    def prim(self, name: str) -> str:
        """A shared primitive rule (json-string, json-int ...), added once."""
        if name not in self.rules:
            body = _PRIMITIVES[name]
            if name == "json-char" and self.string_excludes:
                body = body.replace("\\x1F]", "\\x1F" + char_class(self.string_excludes)[1:],
                                    1)
            self.rules[name] = body
            for dep in _PRIMITIVE_DEPS.get(name, ()):
                self.prim(dep)
        return name

    def text(self, root: str) -> str:
        """The grammar: `root ::= <root>` first, then every rule."""
        lines = [f"root ::= {root}"]
        lines += [f"{name} ::= {body}" for name, body in self.rules.items()]
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------ schemas

    def schema_rule(self, schema: Any, hint: str, root: Any = None) -> str:
        """The name of a rule admitting the JSON values valid under `schema` (`root`, by
        default `schema` itself - a tool's parameters - is where its `$ref`s point)."""
        self._roots.append(schema if root is None else root)
        try:
            return self.add(hint, self._visit(schema, hint, 0))
        finally:
            self._roots.pop()

    def _visit(self, schema: Any, hint: str, depth: int) -> str:
        if depth > _MAX_DEPTH:
            raise SchemaError(f"schema nesting deeper than {_MAX_DEPTH} at {hint}")
        if schema is True or schema is None or schema == {}:
            return self.prim("json-value")
        if schema is False:
            raise SchemaError(f"{hint}: the schema `false` admits no value")
        if not isinstance(schema, Mapping):
            raise SchemaError(f"{hint}: a schema is an object, not {type(schema).__name__}")
        if "$ref" in schema and isinstance(schema["$ref"], str):
            return self._ref(schema["$ref"], hint)
        if isinstance(schema.get("allOf"), list):
            root = self._roots[-1]
            return self._visit(_merge_all_of(schema, lambda r: pointer(root, r)), hint,
                               depth + 1)
        if "const" in schema:
            return literal(_json(schema["const"]))
        if isinstance(schema.get("enum"), list):
            values = schema["enum"]
            if not values:
                raise SchemaError(f"{hint}: an empty enum admits no value")
            return "(" + " | ".join(literal(_json(v)) for v in values) + ")"
        for key in ("anyOf", "oneOf"):
            alts = schema.get(key)
            if isinstance(alts, list) and alts:
                base = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
                out = []
                for i, alt in enumerate(alts):
                    merged = _merge(base, alt) if isinstance(alt, Mapping) else alt
                    out.append(self.add(f"{hint}-{i}", self._visit(merged, f"{hint}-{i}",
                                                                  depth + 1)))
                return "(" + " | ".join(out) + ")"
        types = schema.get("type")
        if isinstance(types, list):
            alts = [self.add(f"{hint}-{t}", self._visit({**schema, "type": t}, f"{hint}-{t}",
                                                        depth + 1))
                    for t in types if isinstance(t, str)]
            if not alts:
                return self.prim("json-value")
            return "(" + " | ".join(alts) + ")"
        if schema.get("nullable") is True:
            rest = {k: v for k, v in schema.items() if k != "nullable"}
            inner = self.add(hint, self._visit(rest, hint, depth + 1))
            return f"({inner} | {self.prim('json-null')})"
        if types is None:
            if isinstance(schema.get("properties"), Mapping) or "additionalProperties" in schema \
                    or isinstance(schema.get("required"), list):
                types = "object"
            elif "items" in schema or "minItems" in schema or "maxItems" in schema:
                types = "array"
            else:
                return self.prim("json-value")
        if types == "string":
            return self._string(schema)
        if types == "integer":
            if _positive(schema):
                return self.prim("json-posint")
            return self.prim("json-uint" if _non_negative(schema) else "json-int")
        if types == "number":
            return self.prim("json-unumber" if _non_negative(schema) else "json-number")
        if types == "boolean":
            return self.prim("json-bool")
        if types == "null":
            return self.prim("json-null")
        if types == "array":
            return self._array(schema, hint, depth)
        if types == "object":
            return self._object(schema, hint, depth)
        raise SchemaError(f"{hint}: unknown type {types!r}")

    def _ref(self, ref: str, hint: str) -> str:
        root = self._roots[-1]
        key = (id(root), ref)
        hit = self._refs.get(key)
        if hit is not None:
            return hit
        target = pointer(root, ref)
        name = self.name(f"{hint}-ref-{ref.rsplit('/', 1)[-1]}")
        self._refs[key] = name
        self.rules[name] = '""'  # reserved: a recursive reference finds the name
        self.define(name, self._visit(target, name, 1))
        return name

    def _string(self, schema: Mapping[str, Any]) -> str:
        char = self.prim("json-char")
        self.prim("json-string")
        low, high = _int(schema.get("minLength")) or 0, _int(schema.get("maxLength"))
        if low == 0 and high is None:
            return "json-string"
        if high is not None and high < low:
            raise SchemaError(f"maxLength {high} < minLength {low}")
        return f'"\\"" {_repeat(char, low, high) or ""} "\\""'.replace('  ', ' ')

    def _array(self, schema: Mapping[str, Any], hint: str, depth: int) -> str:
        ws = self.prim("ws")
        items = schema.get("items")
        item = self.add(f"{hint}-item", self._visit(items if isinstance(items, (Mapping, bool))
                                                    else True, f"{hint}-item", depth + 1))
        low, high = _int(schema.get("minItems")) or 0, _int(schema.get("maxItems"))
        if high is not None and high < low:
            raise SchemaError(f"{hint}: maxItems {high} < minItems {low}")
        if high == 0:
            return f'"[" {ws} "]"'
        rest = _repeat(f'"," {ws} {item}', max(low - 1, 0), None if high is None else high - 1)
        body = f"{item} {rest}".strip()
        if low == 0:
            body = f"( {body} )?"
        return f'"[" {ws} {body} {ws} "]"'

    def _object(self, schema: Mapping[str, Any], hint: str, depth: int) -> str:
        ws = self.prim("ws")
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        required = [r for r in schema.get("required") or () if isinstance(r, str)]
        extra = schema.get("additionalProperties")
        if not props:
            if extra is False:
                if required:
                    raise SchemaError(f"{hint}: required {required} with no properties allowed")
                return f'"{{" {ws} "}}"'
            value = self.add(f"{hint}-value", self._visit(
                extra if isinstance(extra, Mapping) else True, f"{hint}-value", depth + 1))
            string = self.prim("json-string")
            low = _int(schema.get("minProperties")) or 0
            high = _int(schema.get("maxProperties"))
            if high is not None and high < max(low, len(required)):
                raise SchemaError(f"{hint}: maxProperties {high} is below what is required")
            member = f'{string} ":" {ws} {value}'
            if required:  # required keys of a free-form object come first, in order
                head = f' "," {ws} '.join(f'{literal(_json(k))} ":" {ws} {value}'
                                          for k in required)
                n = len(required)
                tail = _repeat(f'"," {ws} {member}', max(low - n, 0),
                               None if high is None else high - n)
                return f'"{{" {ws} {head} {tail} {ws} "}}"'
            if high == 0:
                return f'"{{" {ws} "}}"'
            rest = _repeat(f'"," {ws} {member}', max(low - 1, 0),
                           None if high is None else high - 1)
            body = f"{member} {rest}".strip()
            return f'"{{" {ws} {body if low else f"( {body} )?"} {ws} "}}"'
        missing = [r for r in required if r not in props]
        if missing and extra is False:
            raise SchemaError(f"{hint}: required {missing} are not among the properties")
        names = list(props)
        names += [r for r in missing]  # a required key the schema does not describe
        kvs = []
        for key in names:
            sub = props.get(key, True)
            value = self.add(f"{hint}-{key}", self._visit(sub, f"{hint}-{key}", depth + 1))
            kvs.append((f'{literal(_json(key))} ":" {ws} {value}', key in required))
        # Keys in declared order; optional ones may be left out. `first(i)`: nothing written
        # yet, start at key i; after a key is written every later one is ", key: value".
        def after(i: int) -> str:
            parts = []
            for kv, req in kvs[i:]:
                parts.append(f'"," {ws} {kv}' if req else f'( "," {ws} {kv} )?')
            return " ".join(parts)

        first_names: dict[int, str] = {}

        def first(i: int) -> str:
            if i >= len(kvs):
                return '""'
            if i in first_names:
                return first_names[i]
            kv, req = kvs[i]
            here = f"{kv} {after(i + 1)}".strip()
            body = here if req else f"{here} | {first(i + 1)}"
            name = first_names[i] = self.add(f"{hint}-from-{i}", body)
            return name

        return f'"{{" {ws} {first(0)} {ws} "}}"'


# ---------------------------------------------------------------- schema helpers

def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _positive(schema: Mapping[str, Any]) -> bool:
    """An integer schema whose minimum excludes 0 (minimum >= 1, exclusiveMinimum >= 0)."""
    low = schema.get("minimum")
    if isinstance(low, (int, float)) and not isinstance(low, bool) and low >= 1:
        return True
    ex = schema.get("exclusiveMinimum")
    return isinstance(ex, (int, float)) and not isinstance(ex, bool) and ex >= 0


def _non_negative(schema: Mapping[str, Any]) -> bool:
    low = schema.get("minimum")
    if isinstance(low, (int, float)) and not isinstance(low, bool) and low >= 0:
        return True
    ex = schema.get("exclusiveMinimum")
    return isinstance(ex, (int, float)) and not isinstance(ex, bool) and ex >= 0


def pointer(root: Any, ref: str) -> Any:
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        raise SchemaError(f"$ref {ref!r}: only references inside the schema (#/...) are "
                          "supported")
    node = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise SchemaError(f"$ref {ref!r} points at nothing")
    return node


def _merge(base: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    """Two schemas that must both hold, for the keywords the grammar enforces."""
    out = dict(base)
    for key, value in other.items():
        if key == "properties" and isinstance(out.get(key), Mapping) and isinstance(value, Mapping):
            merged = dict(out[key])
            for k, v in value.items():
                merged[k] = _merge(merged[k], v) if isinstance(merged.get(k), Mapping) \
                    and isinstance(v, Mapping) else v
            out[key] = merged
        elif key == "required" and isinstance(out.get(key), list) and isinstance(value, list):
            out[key] = list(dict.fromkeys([*out[key], *value]))
        else:
            out[key] = value
    return out


def _merge_all_of(schema: Mapping[str, Any], resolve: Callable[[str], Any]) -> dict[str, Any]:
    out = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema["allOf"]:
        for _ in range(8):  # a reference to a reference ...
            if isinstance(part, Mapping) and isinstance(part.get("$ref"), str):
                part = resolve(part["$ref"])
        if isinstance(part, Mapping):
            if isinstance(part.get("allOf"), list):
                part = _merge_all_of(part, resolve)
            out = _merge(out, part)
    return out
