"""Constrained decoding derived from the offered tools: the grammar (GBNF) or JSON schema
that admits only a valid call in the format the model's emulation prompt asks for.

Where the format comes from. The prompt template's `call` macro writes a call exactly as
the prompt shows it; rendering it once with a placeholder name and arguments gives the
call's *shape*: literal text (the dialect's markers, fences, key names, the whitespace
the prompt uses) around a name slot and a JSON arguments slot. The shape is checked
against the dialect before use - the placeholder call must read back as exactly that call -
so whatever the grammar admits, the dialect reads as a call. A new trained format (or an
edited template) changes the grammar with no code change.

Formats that write one tagged block per argument (a key, then the value: a string as it
is, anything else as JSON) are taken apart the same way: a probe call with one parameter
of each JSON type, a string first and last, gives the text after the name, the text
between key and value for each type (a format may declare the type there), the separator
between parameters, the tail, and the text of a call without arguments. A call written
from those pieces with a string full of quotes, brackets and a newline must read back
too. The grammar then writes each tool's declared parameters in the schema's order,
required ones present and optional ones free to be left out; a string value is any text
without a marker that ends a value (the dialect's parameter close markers), other values
JSON under the parameter's schema, with the tags' first character written as a \\u escape.

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
from ..dialects._values import schema_types
from ._schema_gbnf import GbnfBuilder, char_class, literal, pointer

if TYPE_CHECKING:
    from ..dialects._compile import Dialect
    from ._rules import EmulationStyle

__all__ = ["FORMATS", "CallGrammar", "CallShape", "ParamShape", "build_call_grammar", "call_shape",
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
    params: ParamShape | None = None
    """Tagged parameters (the ("parameters", "") slot): how each argument is written."""


@dataclass(frozen=True, slots=True)
class ParamShape:
    """A call whose arguments are written one tagged block per parameter: after the name
    come `head`, then per parameter its key, the text `between` key and value (it may
    declare the value's type), the value - a string as it is, anything else as JSON - and
    `sep` before the next key or `tail` after the last; `empty` follows the name of a call
    without arguments."""

    head: str
    sep: str
    tail: str
    empty: str
    between: tuple[tuple[str, str], ...]
    """(JSON type, text between key and value) for string integer boolean null array
    object."""
    closers: tuple[str, ...]
    """Markers that end a value: a string value cannot contain them."""

    def between_for(self, kind: str) -> str:
        return dict(self.between)["integer" if kind == "number" else kind]

    @property
    def typed(self) -> bool:
        """The text between key and value says how to read the value (string or JSON)."""
        return len({b for _k, b in self.between}) > 1


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
        try:
            return _tagged_shape(part, entry)
        except _NoShape as exc:
            raise CapabilityError(
                f"{where} writes a call's arguments neither as one JSON object nor as "
                f"tagged parameters the grammar can follow ({exc}); pick another style: "
                "json, compact, or a JSON or tagged-parameter trained format") from None
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


# ---------------------------------------------------------------- tagged parameters

class _NoShape(Exception):
    """Why a call is not written as tagged parameters the grammar can follow."""


# The probe call: one parameter of each JSON type, a string first and last - the text after
# the first value up to the next key is the separator, after the last value the tail; each
# value in between is found by what precedes the next key.
_PROBE: tuple[tuple[str, str, Any], ...] = (
    ("zqxpazqx", "string", "zqxvazqx"), ("zqxpbzqx", "integer", 73519),
    ("zqxpczqx", "boolean", True), ("zqxpdzqx", "null", None),
    ("zqxpezqx", "array", [73519]), ("zqxpfzqx", "object", {"zqxk": 73519}),
    ("zqxpgzqx", "string", "zqxvgzqx"))
_PROBE_TOOL = Tool(_NAME, "", {"type": "object",
                               "properties": {k: {"type": t} for k, t, _v in _PROBE}})
# A string value with what a naive format would have to escape: it must read back as is.
_TRICKY = "say \"hi\", it's {x} <b> [1]\nnext line"
_KEY_OK = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _name_span(text: str) -> tuple[int, int, str]:
    hits = [m.start() for m in re.finditer(_NAME, text)]
    if len(hits) != 1:
        raise _NoShape("the tool name is written " + ("more than once" if hits else "nowhere"))
    s, e = hits[0], hits[0] + len(_NAME)
    if s > 0 and text[s - 1] == '"' and text[e:e + 1] == '"':
        return s - 1, e + 1, "json"
    return s, e, "raw"


def _tagged_shape(part: Any, entry: EmulationStyle) -> CallShape:
    rules = part._emulation_rules()
    tools = {_NAME: _PROBE_TOOL}
    args = {k: v for k, _t, v in _PROBE}
    full = rules.render_calls(entry, [ToolCall(None, _NAME, args)], tools)
    empty = rules.render_calls(entry, [ToolCall(None, _NAME, {})], tools)
    s0, e0, how0 = _name_span(empty)
    s1, e1, how1 = _name_span(full)
    if empty[:s0] != full[:s1] or how0 != how1:
        raise _NoShape("a call with arguments begins unlike one without")
    keys: list[tuple[int, int]] = []
    for k, _t, _v in _PROBE:
        hits = [m.start() for m in re.finditer(k, full)]
        if len(hits) != 1:
            raise _NoShape("a parameter's key is written " + ("more than once" if hits
                                                               else "nowhere"))
        if keys and hits[0] < keys[-1][1]:
            raise _NoShape("parameters are not written in the call's order")
        keys.append((hits[0], hits[0] + len(k)))
    first, last = _value_text(_PROBE[0][2]), _value_text(_PROBE[-1][2])
    v_first = full.find(first, keys[0][1], keys[1][0])
    v_last = full.find(last, keys[-1][1])
    if v_first < 0 or v_last < 0:
        raise _NoShape("string values are not written as they are")
    sep = full[v_first + len(first):keys[1][0]]
    between = {"string": full[keys[0][1]:v_first]}
    quotes = [sep[:k] for k in range(1, len(sep) + 1)
              if between["string"].endswith(sep[:k]) and sep[:k].strip()]
    if quotes:
        raise _NoShape(f"string values are quoted ({quotes[-1]}), not written as they are")
    if full[keys[-1][1]:v_last] != between["string"]:
        raise _NoShape("two string parameters are written differently")
    for i in range(1, len(_PROBE) - 1):
        _k, kind, value = _PROBE[i]
        vt = _value_text(value)
        end = keys[i + 1][0] - len(sep)
        if full[end:keys[i + 1][0]] != sep or full[end - len(vt):end] != vt \
                or end - len(vt) < keys[i][1]:
            raise _NoShape(f"the {kind} value is not written as JSON between tags")
        between[kind] = full[keys[i][1]:end - len(vt)]
    tail = full[v_last + len(last):]
    common = ""
    for a, b in zip(sep, tail):
        if a != b:
            break
        common += a
    closers = {common.strip()} if common.strip() else set()
    dialect = part.engine.dialect(entry.dialect)
    for c in dialect.calls:
        param = c.payload.param
        if param is not None:
            closers |= {m for m in param.close if m and "{key}" not in m}
    closers = {m for m in closers if not any(o != m and o in m for o in closers)}
    if not closers:
        raise _NoShape("nothing ends a value")
    ps = ParamShape(full[e1:keys[0][0]], sep, tail, empty[e0:],
                    tuple((k, between[k]) for k in ("string", "integer", "boolean", "null",
                                                     "array", "object")),
                    tuple(sorted(closers)))
    parser = part.engine.text_parser(dialect=entry.dialect, tools=[_PROBE_TOOL],
                                     ids="sequential")
    a, b_ = _PROBE[0][0], _PROBE[1][0]
    tricky = (full[:s1] + _tagged_text(ps, how1, {a: _TRICKY, b_: 73519}))
    checks = [(full, args), (empty, {}), (tricky, {a: _TRICKY, b_: 73519})]
    for text, expect in checks:
        parsed = parser.parse(text, finish_reason="stop")
        if [(c.name, c.arguments) for c in parsed.tool_calls] != [(_NAME, expect)] \
                or (parsed.content or "").strip() or parsed.reasoning_content:
            raise _NoShape(f"a call written so does not read back through dialect "
                           f"{entry.dialect!r}")
    pieces = (("text", full[:s1]), ("name", how1), ("parameters", ""))
    return CallShape(entry.name, entry.dialect, pieces, None, False, ps)


def _tagged_text(ps: ParamShape, how: str, args: Mapping[str, Any]) -> str:
    """A call (from its name on) written in the shape: the check that raw strings, the
    types and the pieces read back as the call."""
    name = json.dumps(_NAME) if how == "json" else _NAME
    if not args:
        return name + ps.empty
    blocks = [k + ps.between_for("string" if isinstance(v, str) else _json_kind(v))
              + _value_text(v) for k, v in args.items()]
    return name + ps.head + ps.sep.join(blocks) + ps.tail


def _json_kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "integer"
    return "array" if isinstance(v, list) else "object"


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
    """The markers that end plain text in `dialect` (its content region's exits). A lenient
    call shape's open marker (`{` or `[` after prose, read only as calls of offered tools)
    is ordinary text."""
    return tuple(sorted({m for m, action in dialect.content.exits.actions.items()
                         if m and not (action[0] == "call" and action[1].offered)}))


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
    ps = shape.params
    # JSON between tags writes the tags' first characters as \u escapes (as the templates
    # do), so no JSON value can end the value early
    b = GbnfBuilder("".join({m[0] for m in ps.closers}) if ps is not None else "")
    alternatives = []
    for t in tools:
        if ps is not None:
            args = _tagged_rule(b, ps, t)
        else:
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


def _tagged_rule(b: GbnfBuilder, ps: ParamShape, tool: Tool) -> str:
    """A tool's arguments as tagged parameters, from after the name to the call's end:
    the declared parameters in the schema's order, required ones present, optional ones
    free to be left out."""
    schema = _arguments_schema(tool)
    where = f"tool {tool.name!r}"
    if not isinstance(schema, Mapping) or schema.get("type") != "object" \
            or any(k in schema for k in ("anyOf", "oneOf", "allOf", "$ref")):
        raise CapabilityError(f"{where}: its parameters are not one object of named "
                              "properties, which a tagged-parameter format cannot write")
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = [r for r in schema.get("required") or () if isinstance(r, str)]
    missing = [r for r in required if r not in props]
    low = schema.get("minProperties")
    if missing or (not props and isinstance(low, int) and low > 0):
        raise CapabilityError(f"{where}: required parameters without a declared schema "
                              f"({missing or 'minProperties'}) cannot be written as tags")
    blocks = []
    for key, sub in props.items():
        if not _KEY_OK.match(str(key)):
            raise CapabilityError(f"{where}: parameter {key!r} cannot be written as a tag "
                                  "key (letters, digits, _ . - only)")
        value = _tagged_value(b, ps, sub, schema, f"{tool.name}-{key}")
        blocks.append((b.add(f"{tool.name}-{key}-param", f"{literal(str(key))} {value}"),
                       key in required))
    sep = literal(ps.sep)
    n = len(blocks)

    def after(i: int) -> str:
        return " ".join(f"{sep} {blk}" if req else f"( {sep} {blk} )?"
                        for blk, req in blocks[i:])

    def nonempty(i: int) -> str:
        """At least one parameter, the first of them at index >= i."""
        blk, req = blocks[i]
        body = f"{blk} {after(i + 1)}".strip()
        if not req and i + 1 < n:
            body = f"{body} | {nonempty(i + 1)}"
        return b.add(f"{tool.name}-params-from-{i}", body)

    if not blocks:
        return literal(ps.empty)
    some = f"{literal(ps.head)} {nonempty(0)} {literal(ps.tail)}"
    if required:
        return b.add(f"{tool.name}-params", some)
    return b.add(f"{tool.name}-params", f"{literal(ps.empty)} | {some}")


def _tagged_value(b: GbnfBuilder, ps: ParamShape, sub: Any, root: Any, hint: str) -> str:
    """One parameter's value with the text before it, as the dialect reads it: a schema
    of strings only (or of any type, which the dialect keeps as text) takes raw text; other
    types take JSON; a union of both takes either. With a typed format the text before the
    value says which reading applies, so it goes with it."""
    types = schema_types(sub)
    if not types and not ps.typed and isinstance(sub, Mapping) \
            and isinstance(sub.get("$ref"), str):
        target = schema_types(pointer(root, sub["$ref"]))
        if target and "string" not in target:
            raise CapabilityError(f"{hint}: the dialect reads a $ref parameter as text, and "
                                  f"this one's schema takes {', '.join(sorted(target))}")
    other = types - {"string"}
    raw_ok = not types or "string" in types
    alts: list[tuple[str, str]] = []  # (text before the value, value rule)
    if raw_ok:
        alts.append((literal(ps.between_for("string")), _raw_rule(b, ps, sub if not other
                                                                   else {}, hint)))
    if other or (not types and ps.typed):
        kinds = sorted(other) if other else ["integer", "boolean", "null", "array", "object"]
        befores = sorted({ps.between_for(k) for k in kinds if k != "string"})
        json_value = b.schema_rule(sub, f"{hint}-json", root)
        if not ps.typed and alts:
            # the same text before either reading: the dialect prefers JSON where it fits
            return f"{alts[0][0]} ( {alts[0][1]} | {json_value} )"
        lead = literal(befores[0]) if len(befores) == 1 \
            else "( " + " | ".join(literal(x) for x in befores) + " )"
        alts.append((lead, json_value))
    if not alts:
        raise CapabilityError(f"{hint}: no value can be written")
    return " | ".join(f"{before} {value}" for before, value in alts) if len(alts) == 1 \
        else "( " + " | ".join(f"{before} {value}" for before, value in alts) + " )"


def _raw_rule(b: GbnfBuilder, ps: ParamShape, sub: Any, hint: str) -> str:
    """A string written as it is: an enum's or const's strings, else any text holding no
    marker that ends a value."""
    if isinstance(sub, Mapping):
        if isinstance(sub.get("const"), str):
            return literal(sub["const"])
        enum = sub.get("enum")
        if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
            ok = [v for v in enum if not any(m in v for m in ps.closers)]
            if ok:
                return "(" + " | ".join(literal(v) for v in ok) + ")"
    return _avoiding(b, ps.closers, "raw")


def _text_rule(b: GbnfBuilder, dialect: Dialect) -> str:
    """Free text the dialect keeps as text: no marker that leaves the content region
    anywhere, and a first character no bare call begins with (nor whitespace)."""
    if dialect.messages is not None:
        raise CapabilityError(f"dialect {dialect.id!r} reads answers as message sequences; "
                              "tool_choice auto cannot be constrained for it (use required)")
    excluded = set(" \t\r\n")
    for c in dialect.content.start_calls:
        h = c.header
        if h is not None and not h.optional and h.chars is not None:
            raise CapabilityError(f"dialect {dialect.id!r} reads a call at the start of an "
                                  "answer by a header of many possible characters; tool_choice "
                                  "auto cannot be constrained for it (use required)")
        excluded |= set(c.payload.starts)
    return _avoiding(b, text_markers(dialect), "text", excluded)


def _avoiding(b: GbnfBuilder, markers: Sequence[str], hint: str,
              first_excluded: set[str] | None = None) -> str:
    """Text holding none of `markers`: any such text (empty included) or, given
    `first_excluded`, text of at least one character not beginning with one of those.
    An automaton over the markers' prefixes: each state is the longest marker prefix the
    text ends with."""
    key = ("avoiding", tuple(markers), hint,
           None if first_excluded is None else frozenset(first_excluded))
    if key in b.memo:
        return b.memo[key]
    markers = list(markers)
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

    names = {p: b.name(f"{hint}-{i}") for i, p in enumerate(alive)}
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
    if first_excluded is None:
        b.memo[key] = names[""]
    else:
        b.memo[key] = b.add(hint, " | ".join(moves("", first_excluded)))
    return b.memo[key]


# ---------------------------------------------------------------- JSON schema form

def _json_schema(shape: CallShape, tools: Sequence[Tool]) -> dict[str, Any]:
    if shape.params is not None:
        raise CapabilityError(
            f"emulation style {shape.style!r} writes a call's arguments as tagged parameters, "
            "not as a JSON object, which a JSON schema cannot express; use format='gbnf'")
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
