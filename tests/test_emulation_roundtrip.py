"""Round trip: for every emulation template, calls written in the format the template
asks for (its `call`/`calls` macro) parse back, through the dialect it names, to the same
calls - with nothing left over as text or reasoning, no warning, and the same result when
streamed in any deltas. Schemas and arguments are generated (hypothesis).

Parameter names are identifiers that are not Python keywords (the names every format
can spell: a keyword cannot be a keyword argument in the pythonic format); string
values are any text, including the markers of every dialect (taken from the rule files)
alone, inside text and in pairs. A few formats cannot carry some texts at all; those are
listed per dialect below, each with the format rule that makes it impossible.
"""

from __future__ import annotations

import json
import keyword
import re
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolrules
from toolrules import Capability, StreamChunkType, Tool, ToolCall

ENGINE = toolrules.load(use_env=False, cache=False)
STYLES = ENGINE.emulation_styles()
MULTI = [s for s in STYLES if hasattr(ENGINE._emulation._emulation_rules().macros(s), "calls")]

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

tool_names = st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True)
param_names = st.from_regex(r"[a-z_][a-z0-9_]{0,14}", fullmatch=True).filter(
    lambda s: not keyword.iskeyword(s))
def dialect_markers() -> list[str]:
    """Every literal marker the dialect rules name (opens, closes, separators, drops)."""
    keys = {"open", "close", "until", "key_until", "value_open", "confirm", "drop", "start",
            "header_end", "end", "suffix"}
    found: set[str] = set()

    def walk(node: Any, key: str | None = None) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, list):
            for v in node:
                walk(v, key)
        elif isinstance(node, str) and key in keys and node.strip():
            found.add(node)

    for rid in ENGINE.ruleset.ids("dialect"):
        walk(ENGINE.ruleset.get("dialect", rid).data)
    return sorted(found)


MARKERS = st.sampled_from(dialect_markers() + [
    "[ARGS]", "functools[", "<parameter name=\"x\">", '{"tool": "x"}', "<b>bold</b>",
    "<|\"|>", "to=functions.x", ">>>all\n", "call:x{", "<arg_key>k</arg_key>"])
texts = (st.text(max_size=40)
         | st.sampled_from(["a\nb", " padded ", "", "0042", "true", "null", "3.5", "[1, 2]",
                            "it's \"quoted\" \\ back", "\n", "\nlead", "trail\n"])
         | MARKERS
         | st.builds(lambda a, m, b: a + m + b, st.text(max_size=4), MARKERS, st.text(max_size=4))
         | st.builds(lambda m, ws, n: m + ws + n, MARKERS, st.sampled_from(["", "\n", " "]),
                     MARKERS))

# Formats that write a string argument as raw text between tags cannot carry every text as
# such an argument: these would end the value (or the call) early. Per dialect, with the
# rule of the format that makes it impossible. Only top-level string arguments are raw:
# arrays and objects are written as JSON with "<" as \u003c, so they stay unrestricted.
_WS = "[ \t\r\n]*"  # the whitespace the scanner skips before a confirming tag
RAW_UNWRITABLE: dict[str, re.Pattern[str]] = {
    # GLM: "</tool_call>" ends the value even without "</arg_value>" (the closing tag may
    # be missing before the call's end); "</arg_value>" ends it when the next key or the
    # call's end follows.
    "glm": re.compile(f"</tool_call>|</arg_value>{_WS}<arg_key>"),
    # Qwen3-Coder / Seed-OSS: "</parameter>" is optional, so the next "<parameter=" or the
    # call's "</function>" ends a value; "</parameter>" ends it when a structural tag follows.
    "qwen3-coder": re.compile(f"<parameter=|</function>|</parameter>{_WS}</tool_call>"),
    "seed-oss": re.compile(f"<parameter=|</function>|</parameter>{_WS}</seed:tool_call>"),
    # MiniMax-M2: "</parameter>" always ends a value.
    "minimax-m2": re.compile("</parameter>"),
    # DeepSeek DSML: "</｜DSML｜parameter>" (either spelling) always ends a value.
    "deepseek-dsml": re.compile("</｜DSML｜ ?parameter>"),
    # Kimi-K3: the argument's closing tag ends a value when another structural tag follows.
    "kimi-k3": re.compile(re.escape("<|close|>argument<|sep|>") + _WS + "(?:" + "|".join(
        map(re.escape, ["<|open|>argument", "<|close|>call<|sep|>", "<|close|>tools<|sep|>"]))
        + ")"),
}
# Formats whose strings have a delimiter and no escape for it: no string anywhere (keys
# included) can contain the delimiter. Gemma 4 strings sit between <|"|> tokens.
UNWRITABLE: dict[str, re.Pattern[str]] = {"gemma4": re.compile(re.escape('<|"|>'))}


@cache
def values_for(dialect: str | None = None) -> dict[str, Any]:
    """Argument strategies by JSON type, restricted as the dialect's format requires."""
    strings = texts
    if dialect in UNWRITABLE:
        strings = texts.filter(lambda s, rx=UNWRITABLE[dialect]: not rx.search(s))
    scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**53), max_value=2**53)
               | st.floats(allow_nan=False, allow_infinity=False) | strings)
    json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                               | st.dictionaries(strings, inner, max_size=3), max_leaves=6)
    raw = strings
    if dialect in RAW_UNWRITABLE:
        raw = strings.filter(lambda s, rx=RAW_UNWRITABLE[dialect]: not rx.search(s))
    return {
        "string": raw,
        "integer": st.integers(min_value=-(2**53), max_value=2**53),
        "number": st.floats(allow_nan=False, allow_infinity=False),
        "boolean": st.booleans(),
        "null": st.none(),
        "array": st.lists(json_values, max_size=3),
        "object": st.dictionaries(strings, json_values, max_size=3),
    }


@st.composite
def tool_with_call(draw: Any, dialect: str | None = None,
                   name: str | None = None) -> tuple[Tool, ToolCall]:
    values = values_for(dialect)
    names = draw(st.lists(param_names, max_size=5, unique=True))
    types = {n: draw(st.sampled_from(sorted(values))) for n in names}
    required = [n for n in names if draw(st.booleans())]
    props = {n: {"type": t, "description": f"the {n}"} for n, t in types.items()}
    tool = Tool(name=name or draw(tool_names), description="A generated tool.",
                parameters={"type": "object", "properties": props, "required": required})
    present = [n for n in names if n in required or draw(st.booleans())]
    args = {n: draw(values[types[n]]) for n in present}
    return tool, ToolCall(id=None, name=tool.name, arguments=args)


DELTAS = st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=6)


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values: types must agree (1 is not 1.0 is not True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def parse(style: Any, text: str, tools: list[Tool]) -> Any:
    return ENGINE.text_parser(dialect=style.dialect, tools=tools).parse(text, finish_reason="stop")


def streamed(style: Any, text: str, tools: list[Tool], sizes: list[int]) -> tuple[Any, ...]:
    """What a client assembles from the stream chunks, for deltas of the given sizes (in
    turn): content, reasoning, and (name, arguments) per call."""
    stream = ENGINE.text_parser(dialect=style.dialect, tools=tools).stream()
    chunks, pos, i = [], 0, 0
    while pos < len(text):
        chunks += stream.feed(text[pos:pos + sizes[i % len(sizes)]])
        pos += sizes[i % len(sizes)]
        i += 1
    chunks += stream.close(finish_reason="stop")
    content = "".join(c.content or "" for c in chunks if c.type == StreamChunkType.TEXT)
    reasoning = "".join(c.content or "" for c in chunks if c.type == StreamChunkType.REASONING)
    names = {c.index: c.tool_name for c in chunks if c.type == StreamChunkType.TOOL_START}
    args: dict[int, str] = {}
    for c in chunks:
        if c.type == StreamChunkType.TOOL_ARGS:
            args[c.index] = args.get(c.index, "") + (c.args_delta or "")
    return (content or None, reasoning or None,
            [(names[k], json.loads(args.get(k, "{}"))) for k in sorted(names)])


def assert_round_trip(style: Any, calls: list[ToolCall], tools: list[Tool],
                      sizes: list[int] | None = None) -> None:
    text = ENGINE.render_call(calls, tools, style=style.name)
    parsed = parse(style, text, tools)
    got = [(c.name, c.arguments) for c in parsed.tool_calls]
    want = [(c.name, c.arguments) for c in calls]
    assert len(got) == len(want) and all(g[0] == w[0] and same(g[1], w[1])
                                         for g, w in zip(got, want)), \
        f"{style.name} -> {style.dialect}\n--- rendered:\n{text}\n--- parsed: {got}\n" \
        f"--- content: {parsed.content!r}"
    assert not (parsed.content or "").strip(), f"left as text: {parsed.content!r}\n{text}"
    assert not (parsed.reasoning_content or "").strip(), \
        f"read as reasoning: {parsed.reasoning_content!r}\n{text}"
    assert not parsed.warnings, f"{style.name}: {parsed.warnings}\n{text}"
    whole = (parsed.content, parsed.reasoning_content, got)
    for split in ([1], sizes or []):  # streamed in any deltas: what parse() returns
        if split:
            assert streamed(style, text, tools, split) == whole, \
                f"{style.name}: streaming in deltas of {split} differs\n{text}"


def test_every_template_names_a_dialect_that_exists():
    dialects = set(ENGINE.ruleset.ids("dialect"))
    assert STYLES
    for style in STYLES:
        assert style.dialect in dialects, f"{style.template} asks for {style.dialect!r}"


@pytest.mark.parametrize("style", STYLES, ids=lambda s: s.name)
@SETTINGS
@given(data=st.data())
def test_one_call_round_trips(style: Any, data: Any) -> None:
    tool, call = data.draw(tool_with_call(style.dialect))
    assert_round_trip(style, [call], [tool], data.draw(DELTAS))


@pytest.mark.parametrize("style", MULTI, ids=lambda s: s.name)
@SETTINGS
@given(data=st.data())
def test_several_calls_round_trip(style: Any, data: Any) -> None:
    count = data.draw(st.integers(min_value=2, max_value=3))
    pairs = [data.draw(tool_with_call(style.dialect, name=f"tool_{i}")) for i in range(count)]
    tools = [t for t, _ in pairs]
    calls = [c for _, c in pairs]
    if data.draw(st.booleans()):  # the same tool twice
        calls.append(ToolCall(None, calls[0].name, calls[0].arguments))
    assert_round_trip(style, calls, tools, data.draw(DELTAS))


@pytest.mark.parametrize("style", STYLES, ids=lambda s: s.name)
def test_prompt_examples_are_the_template_call_format(style: Any) -> None:
    """The guidance examples inside a prompt are exactly what `call` writes, so the
    format the prompt shows is the format the round trip checks."""
    tools = [
        Tool("read_file", "Read a file.", {"type": "object", "properties": {
            "path": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["path"]}),
        Tool("set_flags", "Set flags.", {"type": "object", "properties": {
            "flags": {"type": "array", "items": {"type": "string"}},
            "force": {"type": "boolean"}}, "required": ["flags", "force"]}),
    ]
    prompt = ENGINE.emulation(tools, style=style.name, examples=True)
    assert len(prompt.examples) == 2
    for example in prompt.examples:
        text = ENGINE.render_call(example, tools, style=style.name)
        assert text in prompt.text
        assert_round_trip(style, [example], tools)


# Tool schemas as found in the wild: nested objects and arrays, unions, type lists, enums,
# defaults, formats, missing descriptions.
_leaf_types = st.sampled_from(["string", "integer", "number", "boolean", "null"])
_plain = st.none() | st.booleans() | st.integers(-9, 9) | st.text(max_size=6)
schemas = st.recursive(
    st.fixed_dictionaries({"type": _leaf_types}, optional={
        "description": texts, "enum": st.lists(_plain, min_size=1, max_size=3, unique_by=repr),
        "default": _plain, "format": st.sampled_from(["email", "uri", "date-time"])})
    | st.just({}),
    lambda inner: st.fixed_dictionaries({"type": st.just("array")}, optional={
        "items": inner, "description": texts})
    | st.builds(lambda props, req: {"type": "object", "properties": props,
                                    "required": [k for k in props if k in req]},
                st.dictionaries(param_names, inner, max_size=3), st.sets(param_names))
    | st.fixed_dictionaries({"anyOf": st.lists(inner, min_size=1, max_size=3)})
    | st.builds(lambda ts: {"type": ts}, st.lists(_leaf_types, min_size=1, max_size=3,
                                                     unique=True)),
    max_leaves=8)
tool_schemas = st.builds(
    lambda props, req: {"type": "object", "properties": props,
                        "required": [k for k in props if k in req]},
    st.dictionaries(param_names, schemas, max_size=4), st.sets(param_names)) | st.just({})


def typed(call: ToolCall, tools: list[Tool]) -> bool:
    """Whether the schema of every argument names the argument's JSON type."""
    from toolrules.dialects._values import schema_types

    props = next(t for t in tools if t.name == call.name).parameters.get("properties") or {}
    kinds = {bool: "boolean", int: "integer", float: "number", str: "string",
             type(None): "null", list: "array", dict: "object"}
    for key, value in call.arguments.items():
        names = schema_types(props.get(key))
        kind = kinds[type(value)]
        if kind not in names and not (kind == "integer" and "number" in names):
            return False
    return True


@pytest.mark.parametrize("style", STYLES, ids=lambda s: s.name)
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_prompt_renders_for_any_schema(style: Any, data: Any) -> None:
    """Every template declares any tool schema (the prompt renders and names every tool),
    and the examples it shows, built from those schemas, round-trip - when the schema
    types them: formats that write values as text read them by the schema's types, so a
    value the schema rules out, or one of a type it does not name, comes back as text."""
    tools = [Tool(name, data.draw(texts), data.draw(tool_schemas)) for name in
             data.draw(st.lists(tool_names, min_size=1, max_size=3, unique=True))]
    cap = Capability(context_window=data.draw(st.sampled_from([None, 4096])))
    prompt = ENGINE.emulation(tools, capability=cap, style=style.name, examples=True)
    assert prompt.tools and all(t.name in prompt.text for t in prompt.tools)
    for example in prompt.examples:
        assert ENGINE.render_call(example, tools, style=style.name) in prompt.text
        if ENGINE.validate_tool_call(example, tools) or not typed(example, tools):
            continue
        parsed = parse(style, ENGINE.render_call(example, tools, style=style.name), tools)
        assert [(c.name, c.arguments) for c in parsed.tool_calls] == \
            [(example.name, example.arguments)]
