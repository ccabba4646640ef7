"""Constrained decoding derived from the offered tools: the grammar (GBNF) or JSON schema
that admits only a valid call in the format the model's emulation prompt asks for.

Where the format comes from. The prompt template's `call` macro writes a call exactly as
the prompt shows it; rendering it once with a placeholder name and arguments gives the
call's *shape*: literal text (the dialect's markers, fences, key names, the whitespace
the prompt uses) around a name slot and a JSON arguments slot. The shape is checked
against the dialect before use - the placeholder call must read back as exactly that call -
so whatever the grammar admits, the dialect reads as a call. A new trained format (or an
edited template) changes the grammar with no code change.

What `tool_choice` makes of it:
- `required`: one call to any offered tool; a named tool: one call to that tool;
- `auto`: one call, or free text that the dialect keeps as text - text holding none of
  the markers that leave its content region (call, reasoning and section markers, derived
  from the dialect), not beginning with a character a bare call may begin with, and not
  beginning with whitespace;
- `none`: no constraint (None).

The JSON schema form (for servers that take a schema rather than a grammar) admits the
call's JSON object alone; it exists where the dialect reads that object as a call, and
it cannot express "text or a call" (auto gives None). Arguments follow each tool's schema
for the keywords `_schema_gbnf.ENFORCED` lists; validation still checks the rest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import CapabilityError, ParseError, SchemaError, UnknownRuleError
from .._types import Tool, ToolCall, coerce_tools
from ..calls._selection import normalize_choice
from ._schema_gbnf import GbnfBuilder, char_class, literal, pointer

if TYPE_CHECKING:
    from ..dialects._compile import Dialect
    from ._rules import EmulationStyle

__all__ = ["FORMATS", "CallGrammar", "CallShape", "build_call_grammar", "call_shape",
           "normalize_tool_choice", "server_schema", "text_markers"]

FORMATS = ("gbnf", "json_schema")

# Placeholders no template writes on its own: where they land in the rendered call are
# the name and arguments slots.
_NAME = "zqxtoolzqx"
_ARG = "zqxargzqx"
_ARG_VALUE = 7
_ARGS_RX = re.compile(r'\{\s*"' + _ARG + r'"\s*:\s*' + str(_ARG_VALUE) + r"\s*\}")
_PLACEHOLDER_TOOL = Tool(_NAME, "", {"type": "object", "properties": {_ARG: {"type": "integer"}},
                                     "required": [_ARG]})


@dataclass(frozen=True, slots=True)
class CallShape:
    """One emulation style's call, taken apart: literal pieces around the slots."""

    style: str
    dialect: str
    pieces: tuple[tuple[str, str], ...]
    """("text", literal) | ("name", "json") - the name as a JSON string | ("name", "raw")
    | ("arguments", "") - the arguments as a JSON object."""
    object_keys: tuple[str, str] | None
    """(name key, arguments key) when the call is a JSON object holding both."""
    bare_object: bool
    """The dialect reads that JSON object alone (no markers) as the call."""


@dataclass(frozen=True, slots=True)
class CallGrammar:
    """A constraint that admits only valid calls (or, for auto, text) in a model's format."""

    format: str
    """gbnf (a GBNF grammar, as text) or json_schema (a JSON Schema object)."""
    grammar: Any
    """The GBNF text, or the JSON schema (a dict)."""
    tool_choice: str
    """auto, required or named."""
    tools: tuple[str, ...]
    """The tools a call may name."""
    style: str
    """The emulation style whose call format the constraint follows."""
    dialect: str
    """The dialect that reads what the constraint admits."""
    text_allowed: bool
    """Free text may stand instead of a call (tool_choice auto)."""
    trigger: str | None = None
    """The text every admitted call begins with (a lazy grammar's trigger: decode freely
    until it appears, then under the grammar)."""
    markers: tuple[str, ...] = ()
    """With text allowed: the strings the text may not contain (the dialect's markers)."""

    @property
    def text(self) -> str:
        """The grammar as text: GBNF as is, a JSON schema as compact JSON."""
        if isinstance(self.grammar, str):
            return self.grammar
        return json.dumps(self.grammar, ensure_ascii=False, separators=(",", ":"))

    def __str__(self) -> str:
        return self.text


# ---------------------------------------------------------------- tool choice

def normalize_tool_choice(choice: Any) -> tuple[str, str | None]:
    """("auto"|"none"|"required"|"named", name) from the forms callers pass (None: auto)."""
    return normalize_choice(choice) or ("auto", None)


# ---------------------------------------------------------------- the call's shape

def call_shape(part: Any, entry: EmulationStyle) -> CallShape:
    """The call format of emulation style `entry`, from its template, checked against its
    dialect. Raises CapabilityError for formats the constraint cannot follow (arguments
    not written as one JSON object)."""
    rules = part._emulation_rules()
    text = rules.render_calls(entry, [ToolCall(None, _NAME, {_ARG: _ARG_VALUE})],
                              {_NAME: _PLACEHOLDER_TOOL})
    where = f"emulation style {entry.name!r} ({entry.template})"
    args = list(_ARGS_RX.finditer(text))
    if len(args) != 1:
        raise CapabilityError(f"{where} does not write a call's arguments as one JSON object; "
                              "constrained decoding follows JSON-argument formats only (pick "
                              "another style: json, compact, or a JSON trained format)")
    a = args[0]
    spans: list[tuple[int, int, str, str]] = [(a.start(), a.end(), "arguments", "")]
    for m in re.finditer(_NAME, text):
        s, e = m.span()
        if s > 0 and text[s - 1] == '"' and text[e:e + 1] == '"':
            spans.append((s - 1, e + 1, "name", "json"))
        else:
            spans.append((s, e, "name", "raw"))
    if len(spans) == 1:
        raise CapabilityError(f"{where} writes no tool name in a call")
    spans.sort()
    pieces: list[tuple[str, str]] = []
    pos = 0
    for s, e, kind, how in spans:
        if s < pos:
            raise CapabilityError(f"{where}: the name and the arguments of a call overlap")
        if s > pos:
            pieces.append(("text", text[pos:s]))
        pieces.append((kind, how))
        pos = e
    if pos < len(text):
        pieces.append(("text", text[pos:]))
    parser = part.engine.text_parser(dialect=entry.dialect, tools=[_PLACEHOLDER_TOOL],
                                     ids="sequential")
    if not _reads_back(parser, text):
        raise CapabilityError(f"{where}: its call does not read back through dialect "
                              f"{entry.dialect!r}; the template and the dialect disagree")
    keys = _object_keys(text)
    bare = False
    if keys is not None:
        bare = _reads_back(parser, json.dumps({keys[0]: _NAME, keys[1]: {_ARG: _ARG_VALUE}}))
    return CallShape(entry.name, entry.dialect, tuple(pieces), keys, bare)


def _reads_back(parser: Any, text: str) -> bool:
    parsed = parser.parse(text, finish_reason="stop")
    return ([(c.name, c.arguments) for c in parsed.tool_calls] == [(_NAME, {_ARG: _ARG_VALUE})]
            and not (parsed.content or "").strip() and not parsed.reasoning_content)


def _object_keys(text: str) -> tuple[str, str] | None:
    """(name key, arguments key) of the JSON object in `text` that holds the placeholder
    call, if there is one."""
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch != "{":
            continue
        try:
            obj, _end = decoder.raw_decode(text, i)
        except ValueError:
            continue
        if isinstance(obj, dict) and len(obj) == 2:
            name_keys = [k for k, v in obj.items() if v == _NAME]
            arg_keys = [k for k, v in obj.items() if v == {_ARG: _ARG_VALUE}]
            if len(name_keys) == 1 and len(arg_keys) == 1:
                return name_keys[0], arg_keys[0]
    return None


# ---------------------------------------------------------------- building the constraint

def build_call_grammar(part: Any, tools: Any, model: Any = None, *, format: str = "gbnf",
                       tool_choice: Any = "required", capability: Any = None,
                       style: str | None = None) -> CallGrammar | None:
    """See Engine.call_grammar."""
    if format not in FORMATS:
        raise ParseError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
    kind, name = normalize_tool_choice(tool_choice)
    tool_list = coerce_tools(tools)
    if kind == "none" or not tool_list:
        return None
    seen: set[str] = set()
    for t in tool_list:
        if t.name in seen:
            raise SchemaError(f"two tools are named {t.name!r}")
        seen.add(t.name)
    if kind == "named":
        chosen = tuple(t for t in tool_list if t.name == name)
        if not chosen:
            raise UnknownRuleError("tool", name or "", [t.name for t in tool_list])
    else:
        chosen = tool_list
    entry = part.select_emulation(model, capability=capability, style=style)
    shapes: dict[str, CallShape] = part._cached("emulation:call_shapes", dict)
    shape = shapes.get(entry.name)
    if shape is None:
        shape = shapes[entry.name] = call_shape(part, entry)
    names = tuple(t.name for t in chosen)
    if format == "json_schema":
        if kind == "auto":
            return None  # a JSON schema cannot say "free text, or a call"
        return CallGrammar("json_schema", _json_schema(shape, chosen), kind, names, entry.name,
                           entry.dialect, False)
    trigger = shape.pieces[0][1] if shape.pieces[0][0] == "text" else None
    if kind != "auto":
        return CallGrammar("gbnf", _gbnf(shape, chosen, None), kind, names, entry.name,
                           entry.dialect, False, trigger)
    dialect = part.engine.dialect(entry.dialect)
    return CallGrammar("gbnf", _gbnf(shape, chosen, dialect), kind, names, entry.name,
                       entry.dialect, True, trigger, text_markers(dialect))


def text_markers(dialect: Dialect) -> tuple[str, ...]:
    """The markers that end plain text in `dialect` (its content region's exits)."""
    return tuple(sorted({m for m in dialect.content.exits.actions if m}))


def _arguments_schema(tool: Tool) -> Any:
    """A tool's parameters as the schema of its arguments object (a call's arguments are
    always an object, whatever a loose schema says)."""
    params = tool.parameters
    if not isinstance(params, Mapping) or not params:
        return {"type": "object"}
    if "type" not in params and not any(k in params for k in ("anyOf", "oneOf", "allOf",
                                                              "$ref", "enum", "const")):
        return {**params, "type": "object"}
    return params


def _gbnf(shape: CallShape, tools: Sequence[Tool], dialect: Dialect | None) -> str:
    b = GbnfBuilder()
    alternatives = []
    for t in tools:
        args = b.schema_rule(_arguments_schema(t), f"{t.name}-args")
        seq = []
        for kind, how in shape.pieces:
            if kind == "text":
                seq.append(literal(how))
            elif kind == "name":
                seq.append(literal(json.dumps(t.name, ensure_ascii=False) if how == "json"
                                   else t.name))
            else:
                seq.append(args)
        alternatives.append(b.add(f"call-{t.name}", " ".join(seq)))
    call = b.add("call", " | ".join(alternatives))
    if dialect is None:
        return b.text(call)
    return b.text(f"{call} | {_text_rule(b, dialect)}")


def _text_rule(b: GbnfBuilder, dialect: Dialect) -> str:
    """Free text the dialect keeps as text: no marker that leaves the content region
    anywhere, and a first character no bare call begins with (nor whitespace)."""
    if dialect.messages is not None:
        raise CapabilityError(f"dialect {dialect.id!r} reads answers as message sequences; "
                              "tool_choice auto cannot be constrained for it (use required)")
    markers = list(text_markers(dialect))
    excluded = set(" \t\r\n")
    for c in dialect.content.start_calls:
        h = c.header
        if h is not None and not h.optional and h.chars is not None:
            raise CapabilityError(f"dialect {dialect.id!r} reads a call at the start of an "
                                  "answer by a header of many possible characters; tool_choice "
                                  "auto cannot be constrained for it (use required)")
        excluded |= set(c.payload.starts)
    prefixes = {m[:k] for m in markers for k in range(len(m))}
    alive = sorted((p for p in prefixes if not any(x in p for x in markers)),
                   key=lambda p: (len(p), p))
    alive_set = set(alive)
    alphabet = {ch for m in markers for ch in m}

    def step(state: str, ch: str) -> str | None:
        t = state + ch
        if any(t.endswith(m) for m in markers):
            return None
        for k in range(len(t) + 1):
            if t[k:] in alive_set:
                return t[k:]
        return ""  # unreachable: the empty prefix is always alive

    names = {p: b.name(f"text-{i}") for i, p in enumerate(alive)}
    for n in names.values():
        b.define(n, '""')  # reserved before the bodies refer to each other

    def moves(state: str, banned: set[str]) -> list[str]:
        groups: dict[str, set[str]] = {}
        for ch in sorted(alphabet - banned):
            target = step(state, ch)
            if target is not None:
                groups.setdefault(target, set()).add(ch)
        out = [f"{char_class(chars)} {names[target]}" for target, chars in groups.items()]
        out.append(f"{char_class(alphabet | banned, negate=True)} {names['']}")
        return out

    for p in alive:
        b.define(names[p], " | ".join(['""', *moves(p, set())]))
    return b.add("text", " | ".join(moves("", excluded)))


# ---------------------------------------------------------------- JSON schema form

def _json_schema(shape: CallShape, tools: Sequence[Tool]) -> dict[str, Any]:
    if shape.object_keys is None or not shape.bare_object:
        raise CapabilityError(
            f"emulation style {shape.style!r}: dialect {shape.dialect!r} reads calls only "
            "inside markers, which a JSON schema cannot express; use format='gbnf' (or a "
            "style whose dialect reads a bare JSON call, e.g. json)")
    name_key, args_key = shape.object_keys
    alts = [{"type": "object",
             "properties": {name_key: {"type": "string", "enum": [t.name]},
                            args_key: server_schema(_arguments_schema(t))},
             "required": [name_key, args_key], "additionalProperties": False}
            for t in tools]
    return alts[0] if len(alts) == 1 else {"anyOf": alts}


def server_schema(schema: Any) -> Any:
    """A tool schema made self-contained for a server's schema-to-grammar converter:
    `$ref`s inlined (a recursive one admits any value), objects with declared properties
    closed, as the grammar form closes them."""
    return _inline(schema, schema, (), 0)


def _inline(node: Any, root: Any, stack: tuple[str, ...], depth: int) -> Any:
    if depth > 64:
        raise SchemaError("schema nesting deeper than 64")
    if isinstance(node, list):
        return [_inline(v, root, stack, depth + 1) for v in node]
    if not isinstance(node, Mapping):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        if ref in stack:
            return {}
        target = pointer(root, ref)
        rest = {k: v for k, v in node.items() if k != "$ref"}
        inlined = _inline(target, root, (*stack, ref), depth + 1)
        return {**inlined, **_inline(rest, root, stack, depth + 1)} if rest else inlined
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("$defs", "definitions"):
            continue
        if key in ("properties", "patternProperties", "dependentSchemas") \
                and isinstance(value, Mapping):
            out[key] = {k: _inline(v, root, stack, depth + 1) for k, v in value.items()}
        elif key in ("default", "const", "enum", "examples", "required"):
            out[key] = value
        else:
            out[key] = _inline(value, root, stack, depth + 1)
    if isinstance(out.get("properties"), Mapping) and out["properties"]:
        out["additionalProperties"] = False
    return out
