"""The schema transform vocabulary: named ops over a tool's JSON Schema, implemented once.

Provider rules (rules/providers/*.yaml) and schema strategies
(rules/schema_strategies.yaml) compose these ops in YAML:

    pipeline:
      - type_aliases
      - {op: inline_refs, on_cycle: error}
      - {op: truncate_descriptions, max: 1024}

An op receives a `Work` (the tool's name, description and a private copy of its
schema) and rewrites it in place. Ops that change what the model sends back (strict
mode turns optional into nullable, flattening renames keys, string enums stand for
numbers ...) also record a *restore step*, so the arguments a model returns are put
back into the shape of the original schema (`TransformedTool.restore`).

Every op documents itself (`OPS[name].doc`) and validates its parameters with a
cerberus schema (`OPS[name].params`); `toolrules lint` checks both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .._errors import SchemaError
from .._jsonutil import decode_object, json_type, resolve_pointer

__all__ = ["OPS", "OpSpec", "Pipeline", "TransformedTool", "Work", "compile_pipeline"]

# Keywords whose value is a map of name -> schema, one schema, or a list of schemas.
_MAP_KEYS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_ONE_KEYS = ("items", "additionalProperties", "not", "if", "then", "else", "contains",
             "propertyNames", "additionalItems", "unevaluatedProperties", "unevaluatedItems")
_LIST_KEYS = ("anyOf", "oneOf", "allOf", "prefixItems")
# Steps of an arguments path: a property name, every array item, every map value.
ITEMS = "[]"
VALUES = "*"

ArgsPath = tuple[str, ...] | None
Visitor = Callable[[dict[str, Any], str, ArgsPath], Any]


# ---------------------------------------------------------------- the working state

@dataclass(slots=True)
class Work:
    """One tool on its way through a pipeline (mutable; ops rewrite it in place)."""

    name: str
    description: str
    schema: dict[str, Any] | None
    restore_steps: list[tuple[ArgsPath, Callable[[Any], Any]]] = field(default_factory=list)
    original: dict[str, Any] | None = None

    def fail(self, path: str, message: str) -> SchemaError:
        return SchemaError(f"tool {self.name!r}: {path}: {message}")

    def restore_at(self, path: ArgsPath, action: Callable[[Any], Any]) -> None:
        """Record: when arguments come back, apply `action` to the value(s) at `path`."""
        if path is not None:
            self.restore_steps.append((path, action))


@dataclass(frozen=True, slots=True)
class TransformedTool:
    """A tool after a pipeline: what goes on the wire, and how to read arguments back."""

    name: str
    description: str
    parameters: dict[str, Any] | None
    steps: tuple[tuple[tuple[str, ...], Callable[[Any], Any]], ...] = ()

    def restore(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Arguments as the model sent them -> arguments in the original schema's shape."""
        if not self.steps:
            return arguments
        out: Any = arguments
        for path, action in reversed(self.steps):
            out = _apply_at(out, path, action)
        return out if isinstance(out, dict) else arguments


def _apply_at(value: Any, path: tuple[str, ...], action: Callable[[Any], Any]) -> Any:
    if not path:
        return action(value)
    head, rest = path[0], path[1:]
    if head == ITEMS:
        if isinstance(value, list):
            return [_apply_at(v, rest, action) for v in value]
        return value
    if head == VALUES:
        if isinstance(value, dict):
            return {k: _apply_at(v, rest, action) for k, v in value.items()}
        return value
    if isinstance(value, dict) and head in value:
        new = dict(value)
        new[head] = _apply_at(value[head], rest, action)
        return new
    return value


# ---------------------------------------------------------------- walking schemas

_ITEM_KEYS = frozenset(("items", "additionalItems", "unevaluatedItems", "contains"))
_VALUE_KEYS = frozenset(("additionalProperties", "unevaluatedProperties"))
_CHILD_KIND = {**{k: "map" for k in _MAP_KEYS}, **{k: "one" for k in _ONE_KEYS},
               **{k: "list" for k in _LIST_KEYS}}


def rewrite(node: Any, visit: Visitor, path: str = "$", args: ArgsPath = ()) -> Any:
    """Pre-order rewrite of every subschema: `visit(node, path, args_path)` returns the node
    to keep (the same dict mutated, or a replacement); the kept node's children follow.

    `args_path` is where values for this subschema sit in the returned arguments (None
    inside $defs and other places arguments cannot be located).
    """
    if not isinstance(node, dict):
        return node
    node = visit(node, path, args)
    if not isinstance(node, dict):
        return node
    for key, sub in list(node.items()):
        kind = _CHILD_KIND.get(key)
        if kind is None:
            continue
        if kind == "map":
            if not isinstance(sub, dict):
                continue
            for name in list(sub):
                if args is None or key not in ("properties", "patternProperties"):
                    child: ArgsPath = None
                else:
                    child = (*args, name) if key == "properties" else (*args, VALUES)
                sub[name] = rewrite(sub[name], visit, f"{path}.{key}.{name}", child)
        elif kind == "one":
            if isinstance(sub, dict):
                if args is None:
                    child = None
                elif key in _ITEM_KEYS:
                    child = (*args, ITEMS)
                elif key in _VALUE_KEYS:
                    child = (*args, VALUES)
                else:
                    child = None
                node[key] = rewrite(sub, visit, f"{path}.{key}", child)
            elif key == "items" and isinstance(sub, list):
                node[key] = [rewrite(s, visit, f"{path}.items[{i}]", None) for i, s in enumerate(sub)]
        elif isinstance(sub, list):
            child = args if key != "prefixItems" else None
            node[key] = [rewrite(s, visit, f"{path}.{key}[{i}]", child) for i, s in enumerate(sub)]
    return node


def _types(node: dict[str, Any]) -> list[str]:
    t = node.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    return []


def _is_object(node: dict[str, Any]) -> bool:
    types = _types(node)
    return "object" in types or (not types and "properties" in node)


def _allows_null(node: dict[str, Any]) -> bool:
    if "null" in _types(node) or node.get("nullable") is True:
        return True
    if isinstance(node.get("enum"), list) and None in node["enum"]:
        return True
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list) and any(
                isinstance(s, dict) and _allows_null(s) for s in node[key]):
            return True
    return False


def _append_description(node: dict[str, Any], text: str) -> None:
    desc = node.get("description")
    node["description"] = f"{desc} {text}" if isinstance(desc, str) and desc else text


def _title_as_description(node: dict[str, Any], title: Any) -> None:
    """A title says what a description would; it is kept only where there is none."""
    if isinstance(title, str) and title and not node.get("description"):
        node["description"] = title


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 200 else text[:197] + "..."


# ---------------------------------------------------------------- the ops

@dataclass(frozen=True, slots=True)
class OpSpec:
    """A named op: what it does, its parameters (cerberus), and the implementation."""

    name: str
    doc: str
    params: dict[str, Any]
    run: Callable[[Work, dict[str, Any]], None]
    example: str = ""


OPS: dict[str, OpSpec] = {}


def _op(name: str, doc: str, params: dict[str, Any] | None = None,
        example: str = "") -> Callable[[Callable[[Work, dict[str, Any]], None]],
                                       Callable[[Work, dict[str, Any]], None]]:
    def register(fn: Callable[[Work, dict[str, Any]], None]) -> Callable[[Work, dict[str, Any]], None]:
        OPS[name] = OpSpec(name, doc, params or {}, fn, example)
        return fn
    return register


def _p(kind: str | list[str], doc: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "meta": {"doc": doc}, **extra}


_STR_LIST = {"type": "list", "schema": {"type": "string"}}

# Type names seen in real tool catalogs (Python, TypeScript, Java) -> JSON Schema.
_TYPE_ALIASES = {
    "string": "string", "str": "string", "text": "string", "char": "string", "date": "string",
    "datetime": "string", "uuid": "string", "path": "string", "url": "string",
    "integer": "integer", "int": "integer", "long": "integer", "short": "integer",
    "int32": "integer", "int64": "integer", "uint": "integer",
    "number": "number", "float": "number", "double": "number", "decimal": "number",
    "numeric": "number", "real": "number",
    "boolean": "boolean", "bool": "boolean",
    "object": "object", "dict": "object", "map": "object", "hash": "object", "record": "object",
    "mapping": "object", "json": "object",
    "array": "array", "list": "array", "tuple": "array", "set": "array", "sequence": "array",
    "null": "null", "none": "null", "nonetype": "null", "nil": "null",
    "any": "", "unknown": "", "mixed": "",
}
_GENERIC = re.compile(r"^\s*(list|array|tuple|set|sequence)\s*\[\s*([A-Za-z]+)\s*\]\s*$", re.I)


@_op("type_aliases",
     "Normalize non-standard type names (dict, float, tuple, any, String, int, bool, list, "
     "List[str] ...) to JSON Schema types; `any` removes the type. Unknown names are an error.",
     {"aliases": {"type": "dict", "keysrules": {"type": "string"},
                  "valuesrules": {"type": "string"},
                  "meta": {"doc": "extra lowercase name -> JSON Schema type ('' = any)"}}},
     "{op: type_aliases, aliases: {money: number}}")
def _type_aliases(work: Work, p: dict[str, Any]) -> None:
    table = {**_TYPE_ALIASES, **{k.lower(): v for k, v in (p.get("aliases") or {}).items()}}

    def one(name: Any, path: str, node: dict[str, Any]) -> str | None:
        if not isinstance(name, str):
            raise work.fail(path, f"type must be a string, not {_short(name)}")
        m = _GENERIC.match(name)
        if m:
            inner = table.get(m.group(2).lower())
            if inner:
                node.setdefault("items", {"type": inner})
            return "array"
        key = name.strip().lower()
        if key not in table:
            raise work.fail(path, f"unknown type {name!r}; add it to the type_aliases op "
                            "(aliases: {name: json-schema-type})")
        return table[key] or None

    def visit(node: dict[str, Any], path: str, _args: ArgsPath) -> dict[str, Any]:
        if "type" not in node:
            return node
        t = node["type"]
        if isinstance(t, list):
            mapped = [one(x, path, node) for x in t]
            if any(m is None for m in mapped):
                del node["type"]
            else:
                uniq = list(dict.fromkeys(m for m in mapped if m))
                node["type"] = uniq[0] if len(uniq) == 1 else uniq
        else:
            m = one(t, path, node)
            if m is None:
                del node["type"]
            else:
                node["type"] = m
        return node

    work.schema = rewrite(work.schema, visit)


@_op("ensure_object_root",
     "Make the root an object schema: add `type: object` (and `properties: {}`); a root "
     "that is not an object (a string, an anyOf ...) becomes the single required property "
     "`wrap_key` (arguments are always an object, so they stay wrapped).",
     {"wrap_key": _p("string", "property name used to wrap a non-object root"),
      "properties": _p("boolean", "add an empty `properties` map when missing (default true)")},
     "{op: ensure_object_root, wrap_key: value}")
def _ensure_object_root(work: Work, p: dict[str, Any]) -> None:
    root = work.schema if work.schema is not None else {}
    if not isinstance(root, dict):
        raise work.fail("$", "parameters must be a JSON Schema object")
    types = _types(root)
    if types == ["object"] or (not types and not any(k in root for k in ("anyOf", "oneOf", "enum", "const", "items", "$ref"))):
        root["type"] = "object"
        if p.get("properties", True):
            root.setdefault("properties", {})
        work.schema = root
        return
    key = p.get("wrap_key", "value")
    defs: dict[str, Any] = {k: root.pop(k) for k in ("$defs", "definitions") if k in root}
    work.schema = {"type": "object", "properties": {key: root}, "required": [key], **defs}




@_op("inline_refs",
     "Replace every local `$ref` with a copy of its target and drop `$defs`/`definitions`. "
     "A recursive reference cannot be inlined: `on_cycle: error` (default) raises "
     "SchemaError, `on_cycle: object` puts a free-form object there.",
     {"on_cycle": _p("string", "error or object", allowed=["error", "object"]),
      "max_nodes": _p("integer", "limit on the inlined schema's size (default 20000)", min=1)},
     "{op: inline_refs, on_cycle: error}")
def _inline_refs(work: Work, p: dict[str, Any]) -> None:
    root = work.schema
    if not isinstance(root, dict):
        return
    if "$ref" not in json.dumps(root):  # nothing to inline: unused definitions just go
        for key in ("$defs", "definitions"):
            root.pop(key, None)
        return
    limit = p.get("max_nodes", 20000)
    on_cycle = p.get("on_cycle", "error")
    count = 0

    def expand(node: Any, path: str, stack: tuple[str, ...]) -> Any:
        nonlocal count
        count += 1
        if count > limit:
            raise work.fail(path, f"inlining $refs makes the schema larger than {limit} nodes")
        if isinstance(node, list):
            return [expand(v, f"{path}[{i}]", stack) for i, v in enumerate(node)]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            if ref in stack:
                if on_cycle == "object":
                    return {"type": "object", "description": f"(recursive: {ref.rsplit('/', 1)[-1]})"}
                raise work.fail(path, f"recursive $ref {ref!r} cannot be inlined (this provider "
                                "needs self-contained schemas); flatten the recursion or use a "
                                "free-form object")
            target = resolve_pointer(root, ref)
            if not isinstance(target, dict):
                raise work.fail(path, f"$ref {ref!r} does not resolve to a local schema")
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            merged = {**json.loads(json.dumps(target)), **siblings}
            return expand(merged, path, (*stack, ref))
        out = {}
        for k, v in node.items():
            if k in ("$defs", "definitions") and path == "$":
                continue
            if k in ("properties", "patternProperties", "dependentSchemas") and isinstance(v, dict):
                out[k] = {n: expand(s, f"{path}.{k}.{n}", stack) for n, s in v.items()}
            elif k in _ONE_KEYS or k in _LIST_KEYS or k == "items":
                out[k] = expand(v, f"{path}.{k}", stack)
            else:
                out[k] = v
        return out

    work.schema = expand(root, "$", ())


def _walk_drop(work: Work, drop: Callable[[str], bool], describe: Iterable[str] = ()) -> None:
    describe = set(describe)

    def visit(node: dict[str, Any], _path: str, _args: ArgsPath) -> dict[str, Any]:
        notes = []
        for key in [k for k in node if drop(k)]:
            value = node.pop(key)
            if key == "title" and key in describe:
                _title_as_description(node, value)
            elif key in describe:
                notes.append(f"{key}: {_short(value)}")
        if notes:
            _append_description(node, f"({'; '.join(notes)})")
        return node

    work.schema = rewrite(work.schema, visit)


@_op("drop_keywords",
     "Remove these keywords wherever they appear in a schema position (property *names* "
     "are never touched); `describe` lists keywords whose value is kept in the description.",
     {"keywords": {**_STR_LIST, "required": True, "meta": {"doc": "keywords to remove"}},
      "describe": {**_STR_LIST, "meta": {"doc": "keywords moved into the description"}}},
     "{op: drop_keywords, keywords: [title, examples]}")
def _drop_keywords(work: Work, p: dict[str, Any]) -> None:
    names = set(p["keywords"])
    _walk_drop(work, names.__contains__, p.get("describe", ()))


@_op("keep_keywords",
     "Keep only these keywords in every schema; everything else is removed (`describe` "
     "keeps the value of informative ones in the description).",
     {"keywords": {**_STR_LIST, "required": True, "meta": {"doc": "keywords to keep"}},
      "describe": {**_STR_LIST, "meta": {"doc": "dropped keywords moved into the description"}}},
     "{op: keep_keywords, keywords: [type, description, properties, required, items, enum]}")
def _keep_keywords(work: Work, p: dict[str, Any]) -> None:
    keep = set(p["keywords"])
    _walk_drop(work, lambda k: k not in keep, p.get("describe", ()))


@_op("rename_keywords",
     "Rename keywords wherever they appear in a schema position, before anything else "
     "reads them (property *names* are never touched): another spelling of the same "
     "keyword, e.g. the proto field names an API also accepts (`any_of` for `anyOf`).",
     {"keywords": {"type": "dict", "required": True, "keysrules": {"type": "string"},
                   "valuesrules": {"type": "string"},
                   "meta": {"doc": "keyword as written -> keyword as read"}}},
     "{op: rename_keywords, keywords: {any_of: anyOf, max_items: maxItems}}")
def _rename_keywords(work: Work, p: dict[str, Any]) -> None:
    table = p["keywords"]

    def visit(node: dict[str, Any], _path: str, _args: ArgsPath) -> dict[str, Any]:
        if any(k in table for k in node):
            node = {table.get(k, k) if table.get(k, k) not in node else k: v
                    for k, v in node.items()}
        return node

    work.schema = rewrite(work.schema, visit)


@_op("drop_additional_properties",
     "Remove `additionalProperties` everywhere (weak models and some providers trip "
     "over it).")
def _drop_additional_properties(work: Work, _p_: dict[str, Any]) -> None:
    _walk_drop(work, "additionalProperties".__eq__)


@_op("oneof_to_anyof", "Rename `oneOf` to `anyOf` (providers that only know anyOf).")
def _oneof_to_anyof(work: Work, _p_: dict[str, Any]) -> None:
    def visit(node: dict[str, Any], _path: str, _args: ArgsPath) -> dict[str, Any]:
        if "oneOf" in node:
            branches = node.pop("oneOf")
            node["anyOf"] = [*node.get("anyOf", []), *branches] if isinstance(branches, list) else branches
        return node

    work.schema = rewrite(work.schema, visit)


@_op("merge_allof",
     "Merge `allOf` branches into their parent (properties and required are united, other "
     "keywords: the parent's value wins). Generators emit allOf around a single $ref.")
def _merge_allof(work: Work, _p_: dict[str, Any]) -> None:
    def visit(node: dict[str, Any], path: str, _args: ArgsPath) -> dict[str, Any]:
        branches = node.get("allOf")
        if not isinstance(branches, list):
            return node
        if not all(isinstance(b, dict) for b in branches):
            raise work.fail(path, "allOf must hold schemas")
        del node["allOf"]
        for b in branches:
            for k, v in b.items():
                if k == "properties" and isinstance(v, dict):
                    node.setdefault("properties", {}).update({n: s for n, s in v.items()
                                                              if n not in node["properties"]})
                elif k == "required" and isinstance(v, list):
                    node["required"] = list(dict.fromkeys([*node.get("required", []), *v]))
                else:
                    node.setdefault(k, v)
        return visit(node, path, _args) if "allOf" in node else node

    work.schema = rewrite(work.schema, visit)


@_op("type_arrays_to_anyof",
     "`type: [string, integer]` becomes `anyOf: [{type: string}, {type: integer}]` "
     "(a one-item array becomes a plain type).")
def _type_arrays_to_anyof(work: Work, _p_: dict[str, Any]) -> None:
    def visit(node: dict[str, Any], _path: str, _args: ArgsPath) -> dict[str, Any]:
        t = node.get("type")
        if isinstance(t, list):
            if len(t) == 1:
                node["type"] = t[0]
            elif t:
                del node["type"]
                node["anyOf"] = [{"type": x} for x in t] + list(node.get("anyOf", []))
        return node

    work.schema = rewrite(work.schema, visit)


@_op("nullable",
     "Rewrite nullability to one style: `openapi` (`nullable: true`, no null type), `anyof` "
     "(`anyOf: [X, {type: null}]`) or `type_array` (`type: [X, 'null']`).",
     {"style": {**_p("string", "openapi, anyof or type_array"), "required": True,
                "allowed": ["openapi", "anyof", "type_array"]}},
     "{op: nullable, style: openapi}")
def _nullable(work: Work, p: dict[str, Any]) -> None:
    style = p["style"]

    def to_openapi(node: dict[str, Any]) -> dict[str, Any]:
        types = node.get("type")
        if isinstance(types, list) and "null" in types:
            rest = [t for t in types if t != "null"]
            if len(rest) == 1:
                node["type"] = rest[0]
            elif rest:
                del node["type"]
                node["anyOf"] = [{"type": t} for t in rest]
            else:
                del node["type"]
            node["nullable"] = True
        for key in ("anyOf", "oneOf"):
            branches = node.get(key)
            if isinstance(branches, list) and any(isinstance(b, dict) and _types(b) == ["null"]
                                                  for b in branches):
                rest = [b for b in branches if not (isinstance(b, dict) and _types(b) == ["null"])]
                del node[key]
                if len(rest) == 1 and isinstance(rest[0], dict):
                    for k, v in rest[0].items():
                        if k == "description" and "description" in node:
                            continue
                        node.setdefault(k, v)
                elif rest:
                    node[key] = rest
                node["nullable"] = True
        if isinstance(node.get("enum"), list) and None in node["enum"]:
            node["enum"] = [v for v in node["enum"] if v is not None]
            node["nullable"] = True
        return node

    def from_openapi(node: dict[str, Any]) -> dict[str, Any]:
        if node.pop("nullable", None) is not True:
            return node
        t = node.get("type")
        if style == "type_array" and isinstance(t, str):
            node["type"] = [t, "null"]
        elif style == "type_array" and isinstance(t, list):
            node["type"] = [*t, "null"] if "null" not in t else t
        elif not _allows_null(node):
            keep: dict[str, Any] = {k: node.pop(k) for k in ("description", "title", "default")
                                    if k in node}
            inner = dict(node)
            node.clear()
            node.update(keep)
            node["anyOf"] = [inner, {"type": "null"}] if inner else [{"type": "null"}]
        if isinstance(node.get("enum"), list) and None not in node["enum"]:
            node["enum"].append(None)
        return node

    def visit(node: dict[str, Any], _path: str, _args: ArgsPath) -> dict[str, Any]:
        return to_openapi(node) if style == "openapi" else from_openapi(node)

    work.schema = rewrite(work.schema, visit)


@_op("const_to_enum", "`const: v` becomes `enum: [v]` (with the type of v when none is given).")
def _const_to_enum(work: Work, _p_: dict[str, Any]) -> None:
    def visit(node: dict[str, Any], _path: str, _args: ArgsPath) -> dict[str, Any]:
        if "const" in node:
            value = node.pop("const")
            node["enum"] = [value]
            if "type" not in node and json_type(value):
                node["type"] = json_type(value)
        return node

    work.schema = rewrite(work.schema, visit)


@_op("enum_to_strings",
     "Enums with non-string values become string enums of `type: string` (1 -> '1', "
     "true -> 'true'); the string a model returns is turned back into the original value.")
def _enum_to_strings(work: Work, _p_: dict[str, Any]) -> None:
    def visit(node: dict[str, Any], _path: str, args: ArgsPath) -> dict[str, Any]:
        values = node.get("enum")
        if not isinstance(values, list) or all(isinstance(v, str) for v in values):
            return node
        table: dict[str, Any] = {}
        strings = []
        for v in values:
            if v is None:
                node["nullable"] = True
                continue
            s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
            table[s] = v
            strings.append(s)
        node["enum"] = strings
        node["type"] = "string"
        work.restore_at(args, lambda value: table.get(value, value) if isinstance(value, str) else value)
        return node

    work.schema = rewrite(work.schema, visit)


@_op("fill_missing",
     "Give arrays without `items` the `items` schema given here, and schemas without a type "
     "the type their keywords imply (properties -> object, items -> array, enum values ...); "
     "with `type`, a schema that still has none gets that type.",
     {"items": _p("dict", "schema for arrays without items (default {type: string})"),
      "type": _p("string", "type for schemas that imply none (default: leave untyped)")},
     "{op: fill_missing, items: {type: string}, type: string}")
def _fill_missing(work: Work, p: dict[str, Any]) -> None:
    items = p.get("items", {"type": "string"})
    fallback = p.get("type")

    def visit(node: dict[str, Any], _path: str, _args: ArgsPath) -> dict[str, Any]:
        if "type" not in node and not any(k in node for k in ("anyOf", "oneOf", "allOf", "$ref")):
            if "properties" in node or "additionalProperties" in node:
                node["type"] = "object"
            elif "items" in node or "prefixItems" in node:
                node["type"] = "array"
            elif isinstance(node.get("enum"), list) and node["enum"]:
                kinds = {json_type(v) for v in node["enum"] if v is not None}
                if len(kinds) == 1:
                    node["type"] = kinds.pop()
                elif fallback:
                    node["type"] = fallback
            elif "const" in node and json_type(node["const"]):
                node["type"] = json_type(node["const"])
            elif fallback:
                node["type"] = fallback
        if "array" in _types(node) and "items" not in node:
            node["items"] = json.loads(json.dumps(items))
        return node

    work.schema = rewrite(work.schema, visit)


@_op("truncate_descriptions",
     "Cut descriptions longer than `max` characters (property descriptions, and the tool "
     "description unless `tool: false`), ending them with `suffix`.",
     {"max": {**_p("integer", "maximum length in characters", min=1), "required": True},
      "tool": _p("boolean", "also the tool description (default true)"),
      "tool_max": _p("integer", "separate limit for the tool description", min=1),
      "suffix": _p("string", "appended to a cut description (default '...')")},
     "{op: truncate_descriptions, max: 100}")
def _truncate_descriptions(work: Work, p: dict[str, Any]) -> None:
    limit = p["max"]
    suffix = p.get("suffix", "...")

    def cut(text: str, n: int) -> str:
        if len(text) <= n:
            return text
        keep = max(0, n - len(suffix))
        head = text[:keep]
        space = head.rfind(" ")
        if space > keep * 0.6:  # end on a word when that loses little
            head = head[:space]
        return head.rstrip() + suffix

    if p.get("tool", True):
        work.description = cut(work.description, p.get("tool_max", limit))

    def visit(node: dict[str, Any], _path: str, _args: ArgsPath) -> dict[str, Any]:
        if isinstance(node.get("description"), str):
            node["description"] = cut(node["description"], limit)
        return node

    work.schema = rewrite(work.schema, visit)


@_op("remove_optional",
     "Drop properties that are not required (fewer choices for weak models); "
     "`recursive: false` only at the root.",
     {"recursive": _p("boolean", "also inside nested objects (default true)")})
def _remove_optional(work: Work, p: dict[str, Any]) -> None:
    recursive = p.get("recursive", True)

    def visit(node: dict[str, Any], path: str, _args: ArgsPath) -> dict[str, Any]:
        if (path == "$" or recursive) and isinstance(node.get("properties"), dict):
            required = set(node.get("required") or [])
            node["properties"] = {k: v for k, v in node["properties"].items() if k in required}
        return node

    work.schema = rewrite(work.schema, visit)


@_op("flatten_nested",
     "Flatten nested objects under the root into dot paths (`{a: {b: x}}` -> `{'a.b': x}`), "
     "up to `max_depth` levels; returned arguments are unflattened again. Objects that are "
     "free-form, nullable or unions stay whole.",
     {"separator": _p("string", "path separator (default '.')", minlength=1),
      "max_depth": _p("integer", "levels to flatten (default 3)", min=1)},
     "{op: flatten_nested, separator: '.'}")
def _flatten_nested(work: Work, p: dict[str, Any]) -> None:
    sep = p.get("separator", ".")
    max_depth = p.get("max_depth", 3)
    root = work.schema
    if not isinstance(root, dict) or not isinstance(root.get("properties"), dict):
        return
    flat_keys: set[str] = set()

    def flattenable(s: Any) -> bool:
        return (isinstance(s, dict) and _types(s) == ["object"] and isinstance(s.get("properties"), dict)
                and s["properties"] and not s.get("additionalProperties")
                and not any(k in s for k in ("anyOf", "oneOf", "allOf", "nullable", "$ref")))

    def flatten(props: dict[str, Any], required: set[str], prefix: str, depth: int,
                out: dict[str, Any], out_required: list[str], parent_required: bool) -> None:
        for name, sub in props.items():
            key = f"{prefix}{name}"
            is_req = parent_required and name in required
            if depth < max_depth and flattenable(sub):
                flatten(sub["properties"], set(sub.get("required") or []), f"{key}{sep}", depth + 1,
                        out, out_required, is_req)
                continue
            if prefix:
                flat_keys.add(key)
            out[key] = sub
            if is_req:
                out_required.append(key)

    out: dict[str, Any] = {}
    out_required: list[str] = []
    flatten(root["properties"], set(root.get("required") or []), "", 0, out, out_required, True)
    if not flat_keys:
        return
    root["properties"] = out
    if out_required or "required" in root:
        root["required"] = out_required

    def unflatten(args: Any) -> Any:
        if not isinstance(args, dict):
            return args
        result: dict[str, Any] = {}
        for k, v in args.items():
            if k not in flat_keys:
                result[k] = v
                continue
            parts = k.split(sep)
            node = result
            for part in parts[:-1]:
                nxt = node.get(part)
                if not isinstance(nxt, dict):
                    nxt = node[part] = {}
                node = nxt
            node[parts[-1]] = v
        return result

    work.restore_at((), unflatten)


@_op("enum_to_description",
     "Remove `enum` constraints and list the allowed values in the description instead "
     "(weak models trip over enums).")
def _enum_to_description(work: Work, _p_: dict[str, Any]) -> None:
    def visit(node: dict[str, Any], _path: str, _args: ArgsPath) -> dict[str, Any]:
        values = node.pop("enum", None)
        if isinstance(values, list):
            shown = ", ".join(v if isinstance(v, str) else json.dumps(v) for v in values)
            _append_description(node, f"(one of: {shown})")
        return node

    work.schema = rewrite(work.schema, visit)


@_op("type_case",
     "Write type names in upper case (OpenAPI-style enums such as STRING, OBJECT) or lower case.",
     {"case": {**_p("string", "upper or lower"), "required": True, "allowed": ["upper", "lower"]}},
     "{op: type_case, case: upper}")
def _type_case(work: Work, p: dict[str, Any]) -> None:
    conv = str.upper if p["case"] == "upper" else str.lower

    def visit(node: dict[str, Any], _path: str, _args: ArgsPath) -> dict[str, Any]:
        t = node.get("type")
        if isinstance(t, str):
            node["type"] = conv(t)
        elif isinstance(t, list):
            node["type"] = [conv(x) if isinstance(x, str) else x for x in t]
        return node

    work.schema = rewrite(work.schema, visit)


@_op("free_form_objects",
     "A nested object without declared properties (a free-form dict) becomes a string "
     "holding JSON, for providers that reject open objects; the string is decoded again "
     "when arguments come back.")
def _free_form_objects(work: Work, _p_: dict[str, Any]) -> None:
    def visit(node: dict[str, Any], path: str, args: ArgsPath) -> dict[str, Any]:
        if path == "$" or _types(node) != ["object"] or node.get("properties"):
            return node
        desc = node.get("description")
        out: dict[str, Any] = {"type": "string"}
        out["description"] = (f"{desc} " if desc else "") + "(a JSON object, written as a string)"
        if node.get("nullable"):
            out["nullable"] = True
        work.restore_at(args, _decode_json_object)
        return out

    work.schema = rewrite(work.schema, visit)


def _decode_json_object(value: Any) -> Any:
    """A free-form object sent as JSON text comes back as the object (else unchanged)."""
    decoded = decode_object(value) if isinstance(value, str) else None
    return value if decoded is None else decoded


@_op("omit_empty_parameters",
     "A tool whose root object has no properties is sent without parameters at all (for "
     "providers that reject an empty object schema).")
def _omit_empty_parameters(work: Work, _p_: dict[str, Any]) -> None:
    if isinstance(work.schema, dict) and not work.schema.get("properties"):
        work.schema = None


@_op("keep_formats",
     "Keep `format` only when it is one of `formats`; other formats move into the description.",
     {"formats": {**_STR_LIST, "required": True, "meta": {"doc": "formats the provider accepts"}}},
     "{op: keep_formats, formats: [enum, date-time]}")
def _keep_formats(work: Work, p: dict[str, Any]) -> None:
    allowed = set(p["formats"])

    def visit(node: dict[str, Any], _path: str, _args: ArgsPath) -> dict[str, Any]:
        fmt = node.get("format")
        if fmt is not None and fmt not in allowed:
            del node["format"]
            _append_description(node, f"(format: {fmt})")
        return node

    work.schema = rewrite(work.schema, visit)


@_op("fix_required",
     "Make every `required` list name only declared properties, once each (providers reject "
     "required names that are not properties).")
def _fix_required(work: Work, _p_: dict[str, Any]) -> None:
    def visit(node: dict[str, Any], _path: str, _args: ArgsPath) -> dict[str, Any]:
        req = node.get("required")
        if isinstance(req, list):
            props: dict[str, Any] = node["properties"] if isinstance(node.get("properties"), dict) else {}
            kept = [r for r in dict.fromkeys(req) if isinstance(r, str) and r in props]
            if kept:
                node["required"] = kept
            else:
                del node["required"]
        return node

    work.schema = rewrite(work.schema, visit)


@_op("strategy",
     "Placeholder: the model's schema simplification strategy (capability `schema_strategy`, "
     "rules/schema_strategies.yaml) runs here. Without a model strategy it does nothing.")
def _strategy(_work: Work, _p_: dict[str, Any]) -> None:
    return None


# ---------------------------------------------------------------- strict mode

_STRICT_KEEP = ("type", "description", "properties", "required", "additionalProperties",
                "items", "anyOf", "enum", "const", "$ref", "$defs", "definitions", "pattern",
                "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                "multipleOf", "minItems", "maxItems")
_STRICT_FORMATS = ("date-time", "time", "date", "duration", "email", "hostname", "ipv4",
                   "ipv6", "uuid")
_SILENT = ("title", "$schema", "$id", "$comment")


@_op("strict",
     "Strict structured-output rules: every object gets `additionalProperties: false` and "
     "lists every property as required; optional properties become nullable (and a null "
     "the model sends for them is dropped again when arguments come back); keywords "
     "outside `keep` move into the description; free-form objects, untyped schemas and "
     "the size limits raise SchemaError.",
     {"keep": {**_STR_LIST, "meta": {"doc": "keywords strict mode accepts"}},
      "formats": {**_STR_LIST, "meta": {"doc": "string formats strict mode accepts"}},
      "max_depth": _p("integer", "object nesting levels (default 10)", min=1),
      "max_properties": _p("integer", "object properties in total (default 5000)", min=1),
      "max_enum_values": _p("integer", "enum values in total (default 1000)", min=1),
      "max_enum_chars": _p("integer", "characters of one string enum with more than 250 "
                           "values (default 15000)", min=1),
      "max_total_chars": _p("integer", "characters of all property names, enum and const "
                            "values (default 120000)", min=1)},
     "{op: strict, max_depth: 10, max_properties: 5000, max_enum_values: 1000}")
def _strict(work: Work, p: dict[str, Any]) -> None:
    keep = set(p.get("keep", _STRICT_KEEP))
    formats = set(p.get("formats", _STRICT_FORMATS))
    max_depth = p.get("max_depth", 10)
    max_props = p.get("max_properties", 5000)
    max_enum = p.get("max_enum_values", 1000)
    max_enum_chars = p.get("max_enum_chars", 15000)
    max_total = p.get("max_total_chars", 120000)
    root = work.schema
    if not isinstance(root, dict) or _types(root) != ["object"]:
        raise work.fail("$", "strict mode needs an object root (run ensure_object_root first)")
    counts = {"props": 0, "enum": 0, "chars": 0}

    def check_type(node: dict[str, Any], path: str) -> None:
        if not (_types(node) or any(k in node for k in ("anyOf", "enum", "const", "$ref"))):
            raise work.fail(path, "a schema without a type (any value) cannot be strict")

    def visit(node: dict[str, Any], path: str, args: ArgsPath) -> dict[str, Any]:
        notes = []
        for key in list(node):
            if key in _SILENT:
                value = node.pop(key)
                if key == "title":
                    _title_as_description(node, value)
            elif key not in keep:
                notes.append(f"{key}: {_short(node.pop(key))}")
        if "format" in node and node["format"] not in formats:
            notes.append(f"format: {_short(node.pop('format'))}")
        if notes:
            _append_description(node, f"({'; '.join(notes)})")
        if path != "$":
            check_type(node, path)
        if isinstance(node.get("enum"), list):
            values = node["enum"]
            counts["enum"] += len(values)
            chars = sum(len(v) for v in values if isinstance(v, str))
            counts["chars"] += chars
            if len(values) > 250 and chars > max_enum_chars:
                raise work.fail(path, f"enum of {len(values)} values has {chars} characters; "
                                f"strict mode allows {max_enum_chars} when there are more than 250")
        if "const" in node and isinstance(node["const"], str):
            counts["chars"] += len(node["const"])
        if path.count(".properties.") + 1 > max_depth and _is_object(node):
            raise work.fail(path, f"objects nest deeper than {max_depth} levels; strict mode "
                            f"allows {max_depth}")
        if not _is_object(node):
            return node
        props = node.get("properties")
        extra = node.get("additionalProperties")
        if extra not in (None, False) or (path != "$" and not props and "$ref" not in node):
            raise work.fail(path, "a free-form object (no declared properties, or "
                            "additionalProperties) cannot be strict")
        props = props if isinstance(props, dict) else {}
        node["properties"] = props
        node["additionalProperties"] = False
        required = set(node.get("required") or [])
        counts["props"] += len(props)
        counts["chars"] += sum(len(k) for k in props)
        optional = []
        for name, sub in props.items():
            if not isinstance(sub, dict):
                raise work.fail(f"{path}.properties.{name}", "a property schema must be an object")
            if name not in required:
                if not _allows_null(sub):
                    optional.append(name)
                props[name] = _make_nullable(sub)
        node["required"] = list(props)
        if optional:
            drop = frozenset(optional)
            work.restore_at(args, lambda obj: {k: v for k, v in obj.items()
                                               if not (k in drop and v is None)}
                            if isinstance(obj, dict) else obj)
        return node

    work.schema = rewrite(root, visit)
    if counts["props"] > max_props:
        raise work.fail("$", f"{counts['props']} properties; strict mode allows {max_props}")
    if counts["enum"] > max_enum:
        raise work.fail("$", f"{counts['enum']} enum values; strict mode allows {max_enum}")
    if counts["chars"] > max_total:
        raise work.fail("$", f"{counts['chars']} characters of names and enum values; strict "
                        f"mode allows {max_total}")


def _make_nullable(node: dict[str, Any]) -> dict[str, Any]:
    if _allows_null(node):
        return node
    t = node.get("type")
    if isinstance(t, str) and "const" not in node:
        node = {**node, "type": [t, "null"]}
        if isinstance(node.get("enum"), list):
            node["enum"] = [*node["enum"], None]
        return node
    if isinstance(t, list):
        return {**node, "type": [*t, "null"]}
    if isinstance(node.get("anyOf"), list):
        return {**node, "anyOf": [*node["anyOf"], {"type": "null"}]}
    desc = node.get("description")
    inner = {k: v for k, v in node.items() if k != "description"}
    out: dict[str, Any] = {"anyOf": [inner, {"type": "null"}]}
    if desc:
        out["description"] = desc
    return out


# ---------------------------------------------------------------- pipelines

@dataclass(frozen=True, slots=True)
class Pipeline:
    """A compiled list of (op, params)."""

    steps: tuple[tuple[str, dict[str, Any]], ...]

    def run(self, name: str, description: str, parameters: Any) -> TransformedTool:
        try:
            schema = json.loads(json.dumps(parameters)) if parameters is not None else None
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"tool {name!r}: parameters are not JSON: {exc}") from None
        if schema is not None and not isinstance(schema, dict):
            raise SchemaError(f"tool {name!r}: parameters must be a JSON Schema object, "
                              f"not {type(schema).__name__}")
        work = Work(name=name, description=description or "", schema=schema, original=parameters)
        for op, params in self.steps:
            OPS[op].run(work, params)
        steps = tuple((path, action) for path, action in work.restore_steps if path is not None)
        return TransformedTool(work.name, work.description, work.schema, steps)

    def __add__(self, other: Pipeline) -> Pipeline:
        return Pipeline(self.steps + other.steps)

    def with_strategy(self, strategy: Pipeline | None) -> Pipeline:
        """The model strategy's ops at the `strategy` slot (or first, without a slot)."""
        if strategy is None or not strategy.steps:
            return self
        names = [op for op, _ in self.steps]
        at = names.index("strategy") if "strategy" in names else 0
        return Pipeline(self.steps[:at] + strategy.steps + self.steps[at:])


def op_entry(entry: Any) -> tuple[str, dict[str, Any]]:
    """`name` or `{op: name, ...params}` -> (name, params)."""
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, dict) and isinstance(entry.get("op"), str):
        return entry["op"], {k: v for k, v in entry.items() if k != "op"}
    raise ValueError(f"a pipeline step is an op name or {{op: name, ...}}, not {entry!r}")


def compile_pipeline(entries: Iterable[Any] | None) -> Pipeline:
    """Compile YAML pipeline entries (already validated by lint)."""
    return Pipeline(tuple(op_entry(e) for e in entries or ()))


def validate_step(entry: Any) -> list[tuple[tuple[Any, ...], str]]:
    """Problems with one pipeline entry: (path inside the entry, message)."""
    from cerberus import Validator

    try:
        name, params = op_entry(entry)
    except ValueError as exc:
        return [((), str(exc))]
    spec = OPS.get(name)
    if spec is None:
        from difflib import get_close_matches

        close = get_close_matches(name, list(OPS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known ops: {', '.join(sorted(OPS))}"
        return [(("op",) if isinstance(entry, dict) else (), f"unknown transform op {name!r}{hint}")]
    v = Validator(spec.params, allow_unknown=False)
    if v.validate(params):
        return []
    out = []
    for key, errs in sorted(v.errors.items()):
        field_schema = spec.params.get(key)
        if field_schema is None:
            hint = f"; {name} takes: {', '.join(sorted(spec.params)) or 'no parameters'}"
        elif field_schema.get("allowed"):
            hint = f"; allowed: {', '.join(field_schema['allowed'])}"
        else:
            hint = f" ({field_schema['meta']['doc']})" if field_schema.get("meta") else ""
        out.append(((key,), f"op {name!r} parameter {key!r}: {errs[0] if errs else 'invalid'}{hint}"))
    return out
