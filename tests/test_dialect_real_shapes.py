"""Real output shapes as rule options: each is opt-in per dialect or model, and a
strict format stays strict. The golden cases show every shape; these tests pin the
opt-in boundaries and the streaming contract on the splits that matter."""

from __future__ import annotations

import json

import pytest

import toolrules

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "max_days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def engine():
    return toolrules.load(use_env=False)


def calls(result):
    return [(c.name, c.arguments) for c in result.tool_calls]


def streamed(parser, text, size, finish="stop"):
    stream = parser.stream()
    chunks = []
    for i in range(0, len(text), size):
        chunks += stream.feed(text[i:i + size])
    chunks += stream.close(finish)
    content = "".join(c.content for c in chunks if str(c.type) == "text") or None
    found: dict[int, list[str]] = {}
    for c in chunks:
        if str(c.type) == "tool_start":
            found[c.index] = [c.tool_name, ""]
        elif str(c.type) == "tool_args":
            found[c.index][1] += c.args_delta
    return content, [(n, json.loads(a)) for n, a in found.values()]


def test_markdown_escapes_are_opt_in(engine):
    text = '<tool_call>{"name": "get\\_weather", "arguments": {"max\\_days": 2}}</tool_call>'
    strict = engine.text_parser(dialect="hermes", tools=TOOLS).parse(text)
    assert strict.tool_calls == () and strict.content == text
    fixed = engine.text_parser(dialect="hermes", tools=TOOLS, repairs=["markdown-escapes"]).parse(text)
    assert calls(fixed) == [("get_weather", {"max_days": 2})]
    assert fixed.repairs == ("markdown-escapes",)


def test_escaped_backslash_is_not_a_markdown_escape(engine):
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "a\\\\_b"}}</tool_call>'
    r = engine.text_parser(dialect="auto", tools=TOOLS).parse(text)
    assert calls(r) == [("get_weather", {"city": "a\\_b"})] and r.repairs == ()


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_bare_pythonic_calls_stream_like_whole_text(engine, size):
    p = engine.text_parser(dialect="pythonic", tools=TOOLS)
    text = 'get\\_weather(city="Oslo")\nget_time()\n\nBoth (weather and time) requested.'
    whole = p.parse(text)
    assert calls(whole) == [("get_weather", {"city": "Oslo"}), ("get_time", {})]
    assert whole.content == "Both (weather and time) requested."
    assert streamed(p, text, size) == (whole.content, calls(whole))


def test_strict_pythonic_dialects_keep_bare_calls_as_text(engine):
    r = engine.text_parser(dialect="lfm2", tools=TOOLS).parse('get_weather(city="Oslo")')
    assert r.tool_calls == ()


def test_decline_calls_come_from_the_model_rule(engine):
    text = '<function_call> {"name": "no_function", "arguments": {}}'
    p = engine.text_parser("ibm-granite/granite-20b-functioncalling", tools=TOOLS)
    r = p.parse(text)
    assert r.tool_calls == () and r.content is None
    assert "declined-call: no_function" in r.warnings
    assert streamed(p, text, 1) == (None, [])
    # the same output read by the dialect alone is a call (to an unknown tool)
    assert calls(engine.text_parser(dialect="granite-fc", tools=TOOLS).parse(text)) == [
        ("no_function", {})]


def test_an_offered_tool_is_never_declined(engine):
    tools = TOOLS + [{"type": "function", "function": {"name": "no_function"}}]
    r = engine.text_parser("ibm-granite/granite-20b-functioncalling", tools=tools).parse(
        '<function_call> {"name": "no_function", "arguments": {}}')
    assert calls(r) == [("no_function", {})]


def test_single_quote_quirk_widens_the_scan(engine):
    # a "}" and a '"' inside single-quoted strings: only a scan that knows '...' is a
    # string finds the end of the payload
    text = "<tool_call>{'name': 'get_weather', 'arguments': {'city': 'a } \" b'}}</tool_call>"
    r = engine.text_parser("NousResearch/Hermes-2-Pro-Llama-3-8B", tools=TOOLS).parse(text)
    assert calls(r) == [("get_weather", {"city": 'a } " b'})]
    assert "single-quotes" in r.repairs
    assert engine.text_parser("NousResearch/Hermes-3-Llama-3.1-8B", tools=TOOLS).parse(
        text).tool_calls == ()


def test_glm4_first_generation_model_reads_its_format(engine):
    p = engine.text_parser("THUDM/glm-4-9b-chat", tools=TOOLS)
    assert p.dialect.id == "glm4"
    r = p.parse('get_weather\n{"city": "Paris"}<|observation|>')
    assert calls(r) == [("get_weather", {"city": "Paris"})] and r.content is None
    plain = p.parse("Paris is sunny today.<|user|>")
    assert plain.tool_calls == () and plain.content == "Paris is sunny today."


def test_start_shapes_give_way_in_order(engine):
    p = engine.text_parser(dialect="auto", tools=TOOLS)
    for text in ('[get_weather(city="Rome")]', 'get_weather\n{"city": "Rome"}',
                 '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Rome"}}]}'):
        assert calls(p.parse(text)) == [("get_weather", {"city": "Rome"})], text
        assert streamed(p, text, 1) == (None, [("get_weather", {"city": "Rome"})])


def test_cut_off_word_at_the_start_stays_text(engine):
    for dialect in ("pythonic", "glm4", "auto"):
        r = engine.text_parser(dialect=dialect, tools=TOOLS).parse("Hello", finish_reason="length")
        assert r.content == "Hello" and r.tool_calls == (), dialect
