"""The five formats the conformance corpus holds back, from their written specification.

Qwen3-Coder XML, GLM-4.5/4.7, Kimi-K2, Kimi-K3 (XTML) and Gemma 4 have no shared fixtures;
each row below is one sentence of their description in the dialect issue turned into an
exact expectation (content, reasoning, calls). Every row is also streamed (one character
per delta and random groupings) and must give exactly what parse() gives.
"""

from __future__ import annotations

import pytest

from toolrules.golden._dialects import splits, stream_parse, summary


def _fn(name, **props):
    return {"type": "function", "function": {"name": name, "description": name, "parameters": {
        "type": "object", "properties": props}}}


S, INT, N, B = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
TOOLS = [
    _fn("get_weather", city=S, days=INT, unit={"type": "string", "enum": ["c", "f"]}),
    _fn("search", query=S, code=S, limit=INT, threshold=N, exact=B,
        tags={"type": "array", "items": S}, filters={"type": "object"},
        page={"anyOf": [INT, S]}, cursor={"type": ["string", "null"]}, level={"enum": [1, 2, 3]}),
    _fn("get_time"),
    _fn("maps.route-planner", origin=S, dest=S),
]

QWEN35 = "<|im_start|>assistant\n<think>\n"
GLM47 = "<|assistant|><think>"
GEMMA_THINKING = "<|turn>model\n"
Q = '<|"|>'  # Gemma 4 string delimiter


def k3_call(name, index, *args):
    body = "".join(f'<|open|>argument key="{k}" type="{t}"<|sep|>{v}<|close|>argument<|sep|>'
                   for k, t, v in args)
    return f'<|open|>call tool="{name}" index="{index}"<|sep|>{body}<|close|>call<|sep|>'


def k3_tools(*calls):
    return "<|open|>tools<|sep|>" + "".join(calls) + "<|close|>tools<|sep|>"


def kimi_section(*calls):
    body = "".join(f"<|tool_call_begin|>{h}<|tool_call_argument_begin|>{a}<|tool_call_end|>"
                   for h, a in calls)
    return f"<|tool_calls_section_begin|>{body}<|tool_calls_section_end|>"


# (id, dialect, text, generation_prompt or None for the dialect's default, finish_reason,
#  expected content, expected reasoning, expected [(name, arguments)])
CASES = [
    # ---------------------------------------------------------------- Qwen3-Coder XML
    ("qwen3-coder/template-form", "qwen3-coder",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
     "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>", None, "stop",
     None, None, [("get_weather", {"city": "Paris", "days": 3})]),
    ("qwen3-coder/one-newline-trimmed-each-side", "qwen3-coder",
     "<tool_call>\n<function=search>\n<parameter=query>\n\n  two  \n\n</parameter>\n"
     "</function>\n</tool_call>", None, "stop",
     None, None, [("search", {"query": "\n  two  \n"})]),
    ("qwen3-coder/other-whitespace-significant", "qwen3-coder",
     "<function=search>\n<parameter=query>\n  x\t\n</parameter>\n</function>", None, "stop",
     None, None, [("search", {"query": "  x\t"})]),
    ("qwen3-coder/newlines-omitted", "qwen3-coder",
     "<tool_call><function=search><parameter=query>q</parameter><parameter=limit>5</parameter>"
     "</function></tool_call>", None, "stop",
     None, None, [("search", {"query": "q", "limit": 5})]),
    ("qwen3-coder/parameter-close-omitted-next-parameter", "qwen3-coder",
     "<tool_call>\n<function=search>\n<parameter=query>\nq\n<parameter=limit>\n5\n"
     "</parameter>\n</function>\n</tool_call>", None, "stop",
     None, None, [("search", {"query": "q", "limit": 5})]),
    ("qwen3-coder/parameter-close-omitted-function-end", "qwen3-coder",
     "<tool_call>\n<function=search>\n<parameter=query>\nq\n</function>\n</tool_call>", None,
     "stop", None, None, [("search", {"query": "q"})]),
    ("qwen3-coder/bare-function", "qwen3-coder",
     "<function=get_time>\n</function>", None, "stop", None, None, [("get_time", {})]),
    ("qwen3-coder/bare-function-after-text", "qwen3-coder",
     "Let me check.\n<function=get_time>\n</function>", None, "stop",
     "Let me check.", None, [("get_time", {})]),
    ("qwen3-coder/call-in-never-closed-reasoning", "qwen3-coder",
     "I need the time.\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>", QWEN35,
     "stop", None, "I need the time.", [("get_time", {})]),
    ("qwen3-coder/qwen35-pre-opened-reasoning", "qwen3-coder",
     "Plan.\n</think>\n\nAnswer.", QWEN35, "stop", "Answer.", "Plan.", []),
    ("qwen3-coder/call-text-in-closed-reasoning-is-reasoning", "qwen3-coder",
     "Maybe <function=get_time></function>? No.\n</think>\n\nNo call.", QWEN35, "stop",
     "No call.", "Maybe <function=get_time></function>? No.", []),
    ("qwen3-coder/string-keeps-0042", "qwen3-coder",
     "<function=search>\n<parameter=query>\n0042\n</parameter>\n<parameter=code>\n{\"a\": 1}\n"
     "</parameter>\n</function>", None, "stop",
     None, None, [("search", {"query": "0042", "code": '{"a": 1}'})]),
    ("qwen3-coder/typed-from-schema", "qwen3-coder",
     "<function=search>\n<parameter=limit>\n10\n</parameter>\n<parameter=threshold>\n0.5\n"
     "</parameter>\n<parameter=exact>\nfalse\n</parameter>\n<parameter=tags>\n[\"a\", \"b\"]\n"
     "</parameter>\n<parameter=filters>\n{\"x\": {\"y\": [1, null]}}\n</parameter>\n"
     "<parameter=level>\n2\n</parameter>\n</function>", None, "stop",
     None, None, [("search", {"limit": 10, "threshold": 0.5, "exact": False, "tags": ["a", "b"],
                              "filters": {"x": {"y": [1, None]}}, "level": 2})]),
    ("qwen3-coder/python-literals", "qwen3-coder",
     "<function=search>\n<parameter=exact>\nTrue\n</parameter>\n<parameter=cursor>\nNone\n"
     "</parameter>\n</function>", None, "stop",
     None, None, [("search", {"exact": True, "cursor": None})]),
    ("qwen3-coder/anyof-prefers-non-string", "qwen3-coder",
     "<function=search>\n<parameter=page>\n2\n</parameter>\n</function>", None, "stop",
     None, None, [("search", {"page": 2})]),
    ("qwen3-coder/anyof-string-when-not-json", "qwen3-coder",
     "<function=search>\n<parameter=page>\nnext\n</parameter>\n<parameter=cursor>\nabc\n"
     "</parameter>\n</function>", None, "stop",
     None, None, [("search", {"page": "next", "cursor": "abc"})]),
    ("qwen3-coder/close-tag-followed-by-text-is-data", "qwen3-coder",
     "<function=search>\n<parameter=query>\na</parameter> b\n</parameter>\n</function>", None,
     "stop", None, None, [("search", {"query": "a</parameter> b"})]),
    ("qwen3-coder/parallel-with-text", "qwen3-coder",
     "First.\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>\nThen.\n<tool_call>\n"
     "<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>",
     None, "stop", "First.\n\n\n\nThen.", None,
     [("get_time", {}), ("get_weather", {"city": "Rome"})]),
    ("qwen3-coder/truncated-call-dropped", "qwen3-coder",
     "Writing.\n<tool_call>\n<function=search>\n<parameter=query>\nhal", None, "length",
     "Writing.", None, []),
    ("qwen3-coder/truncated-keeps-earlier-call", "qwen3-coder",
     "<tool_call>\n<function=get_time>\n</function>\n</tool_call>\n<tool_call>\n"
     "<function=search>\n<parameter=query>\nx\n</parameter>\n", None, "length",
     None, None, [("get_time", {})]),
    ("qwen3-coder/unknown-tool-values-stay-text", "qwen3-coder",
     "<function=launch>\n<parameter=count>\n3\n</parameter>\n</function>", None, "stop",
     None, None, [("launch", {"count": "3"})]),

    # ---------------------------------------------------------------- GLM-4.5 / 4.7
    ("glm/45-newlines", "glm",
     "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n"
     "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>", None, "stop",
     None, None, [("get_weather", {"city": "Beijing", "days": 2})]),
    ("glm/47-no-newlines", "glm",
     "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Beijing</arg_value>"
     "<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>", None, "stop",
     None, None, [("get_weather", {"city": "Beijing", "days": 2})]),
    ("glm/47-zero-args", "glm", "<tool_call>get_time</tool_call>", None, "stop",
     None, None, [("get_time", {})]),
    ("glm/45-zero-args", "glm", "<tool_call>get_time\n</tool_call>", None, "stop",
     None, None, [("get_time", {})]),
    ("glm/strings-stay-strings", "glm",
     "<tool_call>search<arg_key>query</arg_key><arg_value>123_456</arg_value>"
     "<arg_key>code</arg_key><arg_value>0042</arg_value><arg_key>cursor</arg_key>"
     "<arg_value>{\"a\": [1]}</arg_value></tool_call>", None, "stop",
     None, None, [("search", {"query": "123_456", "code": "0042", "cursor": '{"a": [1]}'})]),
    ("glm/non-strings-parsed-as-json", "glm",
     "<tool_call>search<arg_key>limit</arg_key><arg_value>7</arg_value><arg_key>tags</arg_key>"
     "<arg_value>[\"x\"]</arg_value><arg_key>filters</arg_key><arg_value>{\"k\": true}"
     "</arg_value><arg_key>exact</arg_key><arg_value>true</arg_value></tool_call>", None, "stop",
     None, None, [("search", {"limit": 7, "tags": ["x"], "filters": {"k": True},
                              "exact": True})]),
    ("glm/value-text-kept-raw", "glm",
     "<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>\n a b \n</arg_value>\n"
     "</tool_call>", None, "stop", None, None, [("search", {"query": "\n a b \n"})]),
    ("glm/missing-final-arg-value-close", "glm",
     "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</tool_call>", None, "stop",
     None, None, [("get_weather", {"city": "Oslo"})]),
    ("glm/missing-final-arg-value-close-45", "glm",
     "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n"
     "<arg_key>days</arg_key>\n<arg_value>4</tool_call>", None, "stop",
     None, None, [("get_weather", {"city": "Oslo", "days": 4})]),
    ("glm/arg-value-close-followed-by-text-is-data", "glm",
     "<tool_call>search<arg_key>query</arg_key><arg_value>a </arg_value> b</arg_value>"
     "</tool_call>", None, "stop", None, None, [("search", {"query": "a </arg_value> b"})]),
    ("glm/45-think-block", "glm",
     "<think>Weather in Paris.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
     "<arg_value>Paris</arg_value>\n</tool_call>", None, "stop",
     None, "Weather in Paris.", [("get_weather", {"city": "Paris"})]),
    ("glm/47-pre-opened-think", "glm",
     "Weather in Paris.</think>Checking.<tool_call>get_weather<arg_key>city</arg_key>"
     "<arg_value>Paris</arg_value></tool_call>", GLM47, "stop",
     "Checking.", "Weather in Paris.", [("get_weather", {"city": "Paris"})]),
    ("glm/47-pre-opened-think-answer", "glm", "Easy.</think>Four.", GLM47, "stop",
     "Four.", "Easy.", []),
    ("glm/parallel-text-around", "glm",
     "A<tool_call>get_time</tool_call>B<tool_call>get_weather<arg_key>city</arg_key>"
     "<arg_value>Rome</arg_value></tool_call>C", None, "stop",
     "ABC", None, [("get_time", {}), ("get_weather", {"city": "Rome"})]),
    ("glm/truncated", "glm",
     "<tool_call>get_time</tool_call><tool_call>get_weather<arg_key>city</arg_key>"
     "<arg_value>Ro", None, "length", None, None, [("get_time", {})]),

    # ---------------------------------------------------------------- Kimi-K2
    ("kimi-k2/single", "kimi-k2",
     kimi_section(("functions.get_weather:0", '{"city": "Beijing"}')), None, "stop",
     None, None, [("get_weather", {"city": "Beijing"})]),
    ("kimi-k2/functions-prefix-missing", "kimi-k2",
     kimi_section(("get_weather:0", '{"city": "Lima"}')), None, "stop",
     None, None, [("get_weather", {"city": "Lima"})]),
    ("kimi-k2/dotted-name", "kimi-k2",
     kimi_section(("functions.maps.route-planner:0", '{"origin": "A"}')), None, "stop",
     None, None, [("maps.route-planner", {"origin": "A"})]),
    ("kimi-k2/whitespace-before-argument-begin", "kimi-k2",
     kimi_section(("functions.get_time:0 ", "{}"), ("functions.get_weather:1\n", ' {"city": "X"} ')),
     None, "stop", None, None, [("get_time", {}), ("get_weather", {"city": "X"})]),
    ("kimi-k2/text-before-and-after-section", "kimi-k2",
     "Checking." + kimi_section(("functions.get_time:0", "{}")) + "Done.", None, "stop",
     "Checking.Done.", None, [("get_time", {})]),
    ("kimi-k2/end-marker-in-json-string-is-data", "kimi-k2",
     kimi_section(("functions.search:0",
                   '{"query": "a <|tool_call_end|> b <|tool_calls_section_end|> c"}')),
     None, "stop", None, None,
     [("search", {"query": "a <|tool_call_end|> b <|tool_calls_section_end|> c"})]),
    ("kimi-k2/thinking-starts-inside-reasoning", "kimi-k2",
     "The user wants the time.</think>Sure." + kimi_section(("functions.get_time:0", "{}")),
     None, "stop", "Sure.", "The user wants the time.", [("get_time", {})]),
    ("kimi-k2/no-thinking-plain-text", "kimi-k2", "Hello there.", None, "stop",
     "Hello there.", None, []),
    ("kimi-k2/truncated", "kimi-k2",
     "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0"
     "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_call_begin|>functions.get_weather:1"
     "<|tool_call_argument_begin|>{\"city\": \"Ro", None, "length", None, None,
     [("get_time", {})]),

    # ---------------------------------------------------------------- Kimi-K3 (XTML)
    ("kimi-k3/think-response-tools", "kimi-k3",
     "Plan.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>"
     + k3_tools(k3_call("get_weather", 0, ("city", "string", "Oslo"), ("days", "number", "2"))),
     None, "stop", "Checking.", "Plan.", [("get_weather", {"city": "Oslo", "days": 2})]),
    ("kimi-k3/response-only", "kimi-k3",
     "Easy.<|close|>think<|sep|><|open|>response<|sep|>Four.<|close|>response<|sep|>", None,
     "stop", "Four.", "Easy.", []),
    ("kimi-k3/type-attributes", "kimi-k3",
     "<|close|>think<|sep|>" + k3_tools(k3_call(
         "search", 0, ("query", "string", "0042"), ("threshold", "number", "1.5"),
         ("exact", "boolean", "false"), ("cursor", "null", "null"),
         ("tags", "array", '["a", 1]'), ("filters", "object", '{"k": {"v": [true]}}'))),
     None, "stop", None, None,
     [("search", {"query": "0042", "threshold": 1.5, "exact": False, "cursor": None,
                  "tags": ["a", 1], "filters": {"k": {"v": [True]}}})]),
    ("kimi-k3/string-type-raw-text", "kimi-k3",
     "<|close|>think<|sep|>" + k3_tools(k3_call("search", 0, ("query", "string", '{"a": 1}'),
                                               ("code", "string", "\n true \n"))),
     None, "stop", None, None, [("search", {"query": '{"a": 1}', "code": "\n true \n"})]),
    ("kimi-k3/xml-escaped-attributes", "kimi-k3",
     '<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="a&amp;b" index="0"<|sep|>'
     '<|open|>argument key="say &quot;hi&quot; &lt;x&gt;" type="string"<|sep|>v'
     "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>", None, "stop",
     None, None, [("a&b", {'say "hi" <x>': "v"})]),
    ("kimi-k3/closing-tag-not-followed-by-structure-is-text", "kimi-k3",
     "<|close|>think<|sep|>" + k3_tools(k3_call(
         "search", 0, ("query", "string", "x<|close|>argument<|sep|>y<|close|>call<|sep|>z"))),
     None, "stop", None, None,
     [("search", {"query": "x<|close|>argument<|sep|>y<|close|>call<|sep|>z"})]),
    ("kimi-k3/parallel", "kimi-k3",
     "<|close|>think<|sep|>" + k3_tools(k3_call("get_time", 0),
                                       k3_call("get_weather", 1, ("city", "string", "Rome"))),
     None, "stop", None, None, [("get_time", {}), ("get_weather", {"city": "Rome"})]),
    ("kimi-k3/never-closed-think-is-reasoning", "kimi-k3", "Still thinking", None, "length",
     None, "Still thinking", []),
    ("kimi-k3/truncated", "kimi-k3",
     "<|close|>think<|sep|><|open|>tools<|sep|>" + k3_call("get_time", 0)
     + '<|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" '
       'type="string"<|sep|>Ro', None, "length", None, None, [("get_time", {})]),

    # ---------------------------------------------------------------- Gemma 4
    ("gemma4/single", "gemma4",
     f"<|tool_call>call:get_weather{{city:{Q}London{Q}}}<tool_call|>", None, "stop",
     None, None, [("get_weather", {"city": "London"})]),
    ("gemma4/call-prefix-missing", "gemma4",
     f"<|tool_call>get_weather{{city:{Q}London{Q},days:2}}<tool_call|>", None, "stop",
     None, None, [("get_weather", {"city": "London", "days": 2})]),
    ("gemma4/keys-with-spaces-and-hyphens", "gemma4",
     "<|tool_call>call:search{filters:{max tokens:5,top-p:0.5}}<tool_call|>", None, "stop",
     None, None, [("search", {"filters": {"max tokens": 5, "top-p": 0.5}})]),
    ("gemma4/strings-with-quotes-commas-braces", "gemma4",
     f"<|tool_call>call:search{{query:{Q}say \"hi\", {{x}}: [y]{Q}}}<tool_call|>", None, "stop",
     None, None, [("search", {"query": 'say "hi", {x}: [y]'})]),
    ("gemma4/numbers-with-exponents", "gemma4",
     "<|tool_call>call:search{threshold:1e-05,filters:{big:1e+21,neg:-3}}<tool_call|>",
     None, "stop", None, None,
     [("search", {"threshold": 1e-05, "filters": {"big": 1e21, "neg": -3}})]),
    ("gemma4/literals-nested-objects-arrays", "gemma4",
     f"<|tool_call>call:search{{exact:true,cursor:null,tags:[{Q}a{Q},{Q}b{Q}],"
     f"filters:{{on:false,list:[1,{{deep:[null]}}]}}}}<tool_call|>", None, "stop",
     None, None, [("search", {"exact": True, "cursor": None, "tags": ["a", "b"],
                              "filters": {"on": False, "list": [1, {"deep": [None]}]}})]),
    ("gemma4/hyphen-and-dot-names", "gemma4",
     f"<|tool_call>call:maps.route-planner{{origin:{Q}A{Q},dest:{Q}B{Q}}}<tool_call|>", None,
     "stop", None, None, [("maps.route-planner", {"origin": "A", "dest": "B"})]),
    ("gemma4/one-block-per-call-with-text", "gemma4",
     f"Looking.\n<|tool_call>call:get_time{{}}<tool_call|>\n<|tool_call>call:get_weather"
     f"{{city:{Q}Rome{Q}}}<tool_call|>\nDone.", None, "stop",
     "Looking.\n\n\nDone.", None, [("get_time", {}), ("get_weather", {"city": "Rome"})]),
    ("gemma4/reasoning-channel", "gemma4",
     f"<|channel>thought\nNeed weather.<channel|><|tool_call>call:get_weather{{city:{Q}Oslo{Q}}}"
     "<tool_call|>", GEMMA_THINKING, "stop",
     None, "Need weather.", [("get_weather", {"city": "Oslo"})]),
    ("gemma4/default-prompt-pre-closes-reasoning", "gemma4", "Just text.", None, "stop",
     "Just text.", None, []),
    ("gemma4/marker-text-in-string", "gemma4",
     f"<|tool_call>call:search{{query:{Q}<tool_call|> and <|tool_call>{Q}}}<tool_call|>", None,
     "stop", None, None, [("search", {"query": "<tool_call|> and <|tool_call>"})]),
    ("gemma4/truncated", "gemma4",
     f"<|tool_call>call:get_time{{}}<tool_call|><|tool_call>call:get_weather{{city:{Q}Ro",
     None, "length", None, None, [("get_time", {})]),
    ("gemma4/json-quotes-are-not-gemma-strings", "gemma4",
     '<|tool_call>call:search{"query": "x"}<tool_call|>', None, "stop",
     '<|tool_call>call:search{"query": "x"}<tool_call|>', None, []),
]


@pytest.mark.parametrize("dialect,text,prompt,finish,content,reasoning,expected",
                         [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_format_spec(engine, dialect, text, prompt, finish, content, reasoning, expected):
    parser = engine.text_parser(dialect=dialect, tools=TOOLS, generation_prompt=prompt,
                                ids="sequential")
    result = parser.parse(text, finish_reason=finish)
    assert (result.content, result.reasoning_content) == (content, reasoning)
    assert [(c.name, c.arguments) for c in result.tool_calls] == expected
    whole = summary(result)
    for seed in range(4):
        assert stream_parse(parser, splits(text, seed), finish) == whole, f"split seed {seed}"


def test_truncated_calls_are_flagged(engine):
    for c in CASES:
        if c[4] != "length" or c[0].endswith("never-closed-think-is-reasoning"):
            continue
        parser = engine.text_parser(dialect=c[1], tools=TOOLS, generation_prompt=c[3])
        assert "truncated-call-dropped" in parser.parse(c[2], finish_reason="length").warnings, c[0]


def test_kimi_k2_header_is_the_call_id(engine):
    parser = engine.text_parser(dialect="kimi-k2", tools=TOOLS)
    result = parser.parse(kimi_section(("functions.get_time:3", "{}"),
                                       ("get_weather:4", '{"city": "Oslo"}')))
    assert [c.id for c in result.tool_calls] == ["functions.get_time:3", "get_weather:4"]
    chunks = []
    stream = parser.stream()
    for ch in kimi_section(("functions.get_time:3", "{}")):
        chunks += stream.feed(ch)
    chunks += stream.close()
    assert [c.tool_call_id for c in chunks if str(c.type) == "tool_start"] == ["functions.get_time:3"]


def test_unknown_tools_are_returned_but_flagged(engine):
    parser = engine.text_parser(dialect="gemma4", tools=TOOLS)
    result = parser.parse("<|tool_call>call:launch{n:1}<tool_call|>")
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("launch", {"n": 1})]
    assert "unknown-tool: launch" in result.warnings


@pytest.mark.parametrize("dialect,text", [
    ("qwen3-coder", "<tool_call>\n<function=search>\n<parameter=query>\nnever closed"),
    ("glm", "<tool_call>search<arg_key>query</arg_key><arg_value>never closed"),
    ("kimi-k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0"
                "<|tool_call_argument_begin|>{\"query\": \"never"),
    ("kimi-k3", '<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="search" index="0"'
                '<|sep|><|open|>argument key="query" type="string"<|sep|>never'),
    ("gemma4", f"<|tool_call>call:search{{query:{Q}never"),
])
def test_unfinished_call_at_stop_is_never_a_call(engine, dialect, text):
    parser = engine.text_parser(dialect=dialect, tools=TOOLS)
    result = parser.parse(text, finish_reason="stop")
    assert result.tool_calls == ()
    assert "never" in (result.content or "")
    assert stream_parse(parser, splits(text, 0), "stop") == summary(result)
