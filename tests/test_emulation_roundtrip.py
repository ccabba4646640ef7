"""Round trip: for every emulation template, calls written in the format the template
asks for (its `call`/`calls` macro) parse back, through the dialect it names, to the same
calls. Schemas and arguments are generated (hypothesis).

Parameter names are identifiers that are not Python keywords (the names every format
can spell: a keyword cannot be a keyword argument in the pythonic format); string
values are any text, including the formats' own markers.
"""

from __future__ import annotations

import keyword
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolrules
from toolrules import Tool, ToolCall

ENGINE = toolrules.load(use_env=False, cache=False)
STYLES = ENGINE.emulation_styles()
MULTI = [s for s in STYLES if hasattr(ENGINE._emulation_rules().macros(s), "calls")]

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

tool_names = st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True)
param_names = st.from_regex(r"[a-z_][a-z0-9_]{0,14}", fullmatch=True).filter(
    lambda s: not keyword.iskeyword(s))
texts = st.text(max_size=40) | st.sampled_from([
    "</tool_call>", "<tool_call>", "[TOOL_CALLS]", "[ARGS]", "```", "```json", "functools[",
    "</parameter>", "<parameter name=\"x\">", "</arguments>", '{"tool": "x"}', "a\nb", " padded ",
    "", "0042", "true", "null", "3.5", "[1, 2]", "<b>bold</b>", "it's \"quoted\" \\ back"])
scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**53), max_value=2**53)
           | st.floats(allow_nan=False, allow_infinity=False) | texts)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(texts, inner, max_size=3), max_leaves=6)

VALUES: dict[str, Any] = {
    "string": texts,
    "integer": st.integers(min_value=-(2**53), max_value=2**53),
    "number": st.floats(allow_nan=False, allow_infinity=False),
    "boolean": st.booleans(),
    "null": st.none(),
    "array": st.lists(json_values, max_size=3),
    "object": st.dictionaries(texts, json_values, max_size=3),
}


@st.composite
def tool_with_call(draw: Any, name: str | None = None) -> tuple[Tool, ToolCall]:
    names = draw(st.lists(param_names, max_size=5, unique=True))
    types = {n: draw(st.sampled_from(sorted(VALUES))) for n in names}
    required = [n for n in names if draw(st.booleans())]
    props = {n: {"type": t, "description": f"the {n}"} for n, t in types.items()}
    tool = Tool(name=name or draw(tool_names), description="A generated tool.",
                parameters={"type": "object", "properties": props, "required": required})
    present = [n for n in names if n in required or draw(st.booleans())]
    args = {n: draw(VALUES[types[n]]) for n in present}
    return tool, ToolCall(id=None, name=tool.name, arguments=args)


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


def assert_round_trip(style: Any, calls: list[ToolCall], tools: list[Tool]) -> None:
    text = ENGINE.render_call(calls, tools, style=style.name)
    parsed = parse(style, text, tools)
    got = [(c.name, c.arguments) for c in parsed.tool_calls]
    want = [(c.name, c.arguments) for c in calls]
    assert len(got) == len(want) and all(g[0] == w[0] and same(g[1], w[1])
                                         for g, w in zip(got, want)), \
        f"{style.name} -> {style.dialect}\n--- rendered:\n{text}\n--- parsed: {got}\n" \
        f"--- content: {parsed.content!r}"
    assert not (parsed.content or "").strip(), f"left as text: {parsed.content!r}\n{text}"


def test_every_template_names_a_dialect_that_exists():
    dialects = set(ENGINE.ruleset.ids("dialect"))
    assert STYLES
    for style in STYLES:
        assert style.dialect in dialects, f"{style.template} asks for {style.dialect!r}"


@pytest.mark.parametrize("style", STYLES, ids=lambda s: s.name)
@SETTINGS
@given(data=st.data())
def test_one_call_round_trips(style: Any, data: Any) -> None:
    tool, call = data.draw(tool_with_call())
    assert_round_trip(style, [call], [tool])


@pytest.mark.parametrize("style", MULTI, ids=lambda s: s.name)
@SETTINGS
@given(data=st.data())
def test_several_calls_round_trip(style: Any, data: Any) -> None:
    count = data.draw(st.integers(min_value=2, max_value=3))
    pairs = [data.draw(tool_with_call(name=f"tool_{i}")) for i in range(count)]
    tools = [t for t, _ in pairs]
    calls = [c for _, c in pairs]
    if data.draw(st.booleans()):  # the same tool twice
        calls.append(ToolCall(None, calls[0].name, calls[0].arguments))
    assert_round_trip(style, calls, tools)


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
