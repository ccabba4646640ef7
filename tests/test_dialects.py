"""Behaviour of the dialect engine on the formats' hard cases (beyond the golden files)."""

from __future__ import annotations

import pytest

from toolrules import InputTooLargeError, ParseError, StreamChunkType

WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "code": {"type": "string"},
        "opts": {"type": "object"}, "flag": {"anyOf": [{"type": "boolean"}, {"type": "string"}]},
        "ratio": {"type": ["number", "null"]}}}}}]


def calls(result):
    return [(c.name, c.arguments) for c in result.tool_calls]


def test_text_parser_by_model_picks_the_models_dialect(engine):
    assert engine.text_parser(model="Qwen/Qwen3-8B").dialect.id == "hermes"
    assert engine.text_parser(model="Qwen/Qwen3-8B", dialect="glm").dialect.id == "glm"


def test_text_parser_for_an_id_no_rule_knows_reads_with_auto(engine):
    """An unknown id's output may take any shape: the parser reads it with `auto`, as the
    proxy does (response.unknown_dialect), not with the JSON emulation's dialect."""
    unknown = "acme-labs/never-heard-of-it-7b"
    assert not engine.resolve_model(unknown).spec.known
    p = engine.text_parser(model=unknown, tools=WEATHER)
    assert p.dialect.id == "auto" and engine.dialect_for(unknown) == "auto"
    for text in ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n'
                 '</tool_call>',
                 '```json\n{"tool": "get_weather", "arguments": {"city": "Oslo"}}\n```',
                 '[get_weather(city="Oslo")]',
                 '<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n'
                 '</function>\n</tool_call>'):
        assert calls(p.parse(text)) == [("get_weather", {"city": "Oslo"})], text
    # a family the rules know keeps its own dialect, an emulated one its prompt's
    assert engine.text_parser(model="Qwen/Qwen3-8B").dialect.id == "hermes"
    assert engine.text_parser(model="google/gemma-3-270m-it").dialect.id == \
        engine.select_emulation("google/gemma-3-270m-it").dialect


def test_an_unknown_id_with_an_override_keeps_its_emulation_dialect(engine):
    from toolrules.evals._runner import derived_engine

    unknown = "acme-labs/xml-emulated-7b"
    eng = derived_engine(engine, [{"id": unknown, "set": {"native_tools": False,
                                                          "emulation_style": "xml"}}])
    assert eng.text_parser(model=unknown).dialect.id == "xml-tags"


def test_unknown_dialect_is_a_clear_error(engine):
    from toolrules import UnknownRuleError

    with pytest.raises(UnknownRuleError, match="did you mean"):
        engine.text_parser(dialect="hermez")


def test_schema_typing_of_text_values(engine):
    p = engine.text_parser(dialect="qwen3-coder", tools=WEATHER)
    r = p.parse("<function=get_weather>\n<parameter=city>\n0042\n</parameter>\n"
                "<parameter=days>\n7\n</parameter>\n<parameter=code>\n0042\n</parameter>\n"
                "<parameter=opts>\n{\"a\": [1, true]}\n</parameter>\n<parameter=flag>\nTrue\n"
                "</parameter>\n<parameter=ratio>\nNone\n</parameter>\n</function>")
    assert calls(r) == [("get_weather", {"city": "0042", "days": 7, "code": "0042",
                                         "opts": {"a": [1, True]}, "flag": True, "ratio": None})]


def test_qwen3_coder_value_keeps_inner_whitespace(engine):
    p = engine.text_parser(dialect="qwen3-coder", tools=WEATHER)
    r = p.parse("<function=get_weather>\n<parameter=city>\n\n  two lines\n  \n\n</parameter>\n</function>")
    assert calls(r) == [("get_weather", {"city": "\n  two lines\n  \n"})]


def test_qwen3_coder_call_inside_unclosed_reasoning_counts(engine):
    p = engine.text_parser(dialect="qwen3-coder", tools=WEATHER,
                           generation_prompt="<|im_start|>assistant\n<think>\n")
    r = p.parse("Let me call.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nBern\n"
                "</parameter>\n</function>\n</tool_call>")
    assert r.reasoning_content == "Let me call."
    assert calls(r) == [("get_weather", {"city": "Bern"})]


def test_glm_missing_final_arg_value_close(engine):
    p = engine.text_parser(dialect="glm", tools=WEATHER)
    r = p.parse("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</tool_call>")
    assert calls(r) == [("get_weather", {"city": "Oslo"})]


def test_kimi_k3_close_tag_inside_value_is_text(engine):
    p = engine.text_parser(dialect="kimi-k3", tools=WEATHER)
    text = ('<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" index="0"'
            '<|sep|><|open|>argument key="city" type="string"<|sep|>a<|close|>argument<|sep|>b'
            '<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>')
    assert calls(p.parse(text)) == [("get_weather", {"city": "a<|close|>argument<|sep|>b"})]


def test_truncation_never_yields_half_a_call(engine):
    p = engine.text_parser(dialect="mistral", tools=WEATHER)
    text = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_weather[ARGS]{"city": "Ro'
    r = p.parse(text, finish_reason="length")
    assert calls(r) == [("get_weather", {"city": "Paris"})]
    assert "truncated-call-dropped" in r.warnings
    chunks = []
    st = p.stream()
    for ch in text:
        chunks += st.feed(ch)
    chunks += st.close(finish_reason="length")
    starts = [c for c in chunks if c.type is StreamChunkType.TOOL_START]
    assert len(starts) == 1
    assert any(c.type is StreamChunkType.TOOL_PROGRESS for c in chunks)


def test_committed_calls_only_when_complete(engine):
    p = engine.text_parser(dialect="hermes")
    st = p.stream()
    out = st.feed('<tool_call>{"name": "f", "arguments": {"a": 1}}')
    assert not [c for c in out if c.type is StreamChunkType.TOOL_START]
    out = st.feed("</tool_call>")
    kinds = [c.type for c in out]
    assert kinds == [StreamChunkType.TOOL_START, StreamChunkType.TOOL_ARGS, StreamChunkType.TOOL_END]
    assert out[2].arguments == {"a": 1}


def test_json_emulation_repairs_are_named(engine):
    p = engine.text_parser(dialect="json-fenced")
    r = p.parse("```json\n{'tool': 'f', 'arguments': {path: 'a.py', ok: True,},}\n```")
    assert calls(r) == [("f", {"path": "a.py", "ok": True})]
    assert set(r.repairs) == {"single-quotes", "unquoted-keys", "python-literals", "trailing-commas"}


def test_repairs_not_allowed_are_not_applied(engine):
    # hermes does not allow single quotes: the block stays text, never guessed
    r = engine.text_parser(dialect="hermes").parse("<tool_call>{'name': 'f', 'arguments': {}}</tool_call>")
    assert r.tool_calls == () and "<tool_call>" in r.content


def test_model_quirks_extend_repairs(engine, tmp_path):
    import toolrules

    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "quirky.yaml").write_text(
        "family: quirky\nmatch: ['^quirky']\ndialect: hermes\n"
        "defaults: {native_tools: true, quirks: [single-quotes]}\n")
    e = toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    r = e.text_parser(model="quirky-1").parse("<tool_call>{'name': 'f', 'arguments': {}}</tool_call>")
    assert calls(r) == [("f", {})] and r.repairs == ("single-quotes",)


def test_json_fenced_common_shapes(engine):
    """Standard JSON, Llama trailing commas, Qwen `function` key, plain text."""
    p = engine.text_parser(dialect="json-fenced")
    r = p.parse("\n    Here's what I'll do:\n\n    ```json\n    {\"tool\": \"write_file\", \"arguments\":"
                " {\"path\": \"test.py\", \"content\": \"print('hi')\"}}\n    ```\n    ")
    assert [c.name for c in r.tool_calls] == ["write_file"]
    r = p.parse('\n    {"tool": "read_file", "arguments": {"path": "test.py",}}\n    ')
    assert [c.name for c in r.tool_calls] == ["read_file"] and "trailing-commas" in r.repairs
    r = p.parse('\n    {"function": "list_files", "arguments": {"path": "."}}\n    ')
    assert [c.name for c in r.tool_calls] == ["list_files"] and "function-key" in r.repairs
    r = p.parse("I cannot help with that.")
    assert r.tool_calls == () and r.content == "I cannot help with that."


def test_auto_dedupes_identical_calls(engine):
    r = engine.text_parser(dialect="auto").parse(
        '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>\n'
        '```json\n{"name": "f", "arguments": {"a": 1}}\n```')
    assert calls(r) == [("f", {"a": 1})]


def test_heuristics_are_opt_in(engine):
    text = "I'll use the get_weather tool to find out."
    assert engine.text_parser(dialect="auto", tools=WEATHER).parse(text).tool_calls == ()
    r = engine.text_parser(dialect="auto", tools=WEATHER, heuristics=True).parse(text)
    assert calls(r) == [("get_weather", {})] and "calls-inferred-from-text" in r.warnings
    # names that were not offered are never inferred
    r = engine.text_parser(dialect="auto", tools=WEATHER, heuristics=True).parse(
        "I'll use the delete_everything tool.")
    assert r.tool_calls == ()


def test_bad_input_types_and_size(engine):
    p = engine.text_parser(dialect="hermes", max_chars=10)
    with pytest.raises(ParseError):
        p.parse(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(InputTooLargeError):
        p.parse("x" * 11)
    st = p.stream()
    with pytest.raises(InputTooLargeError):
        st.feed("x" * 11)


def test_generation_prompt_decides_reasoning_state(engine):
    p = engine.text_parser(dialect="deepseek-dsml", generation_prompt="<｜Assistant｜><think>")
    r = p.parse("plan</think>answer")
    assert (r.reasoning_content, r.content) == ("plan", "answer")
    p = engine.text_parser(dialect="deepseek-dsml", generation_prompt="<｜Assistant｜></think>")
    assert p.parse("answer").content == "answer"


def test_harmony_header_state_survives_the_prompt(engine):
    p = engine.text_parser(dialect="harmony")  # default prompt: "<|start|>assistant"
    r = p.parse(' to=functions.f<|channel|>commentary <|constrain|>json<|message|>{"a": 1}<|call|>')
    assert calls(r) == [("f", {"a": 1})]


def test_prompt_may_pre_open_a_call(engine):
    """A forced call prefilled up to its open marker continues in the output."""
    p = engine.text_parser(dialect="hermes", generation_prompt="<|im_start|>assistant\n<tool_call>\n")
    text = '{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    assert calls(p.parse(text)) == [("f", {"a": 1})]
    st = p.stream()
    for ch in text:
        st.feed(ch)
    st.close()
    assert calls(st.result) == [("f", {"a": 1})]


def test_fenced_payload_streams_like_parse(tmp_path):
    """`fence: true` accepts ```json ... ``` around a payload, split anywhere."""
    import toolrules
    from toolrules.golden._dialects import splits, stream_parse, summary

    (tmp_path / "dialects").mkdir()
    (tmp_path / "dialects" / "fenced.yaml").write_text(
        "id: fenced\ncalls:\n  - open: 'Action:'\n    payload:\n      kind: json\n"
        "      fields: {name: [name], arguments: [arguments]}\n      fence: true\n")
    e = toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    p = e.text_parser(dialect="fenced", ids="sequential")
    text = 'Sure. Action: ```json\n[{"name": "f", "arguments": {"a": "```"}}]\n```\nDone.'
    whole = summary(p.parse(text))
    assert whole["calls"] == [("f", {"a": "```"})]
    for seed in range(4):
        assert stream_parse(p, splits(text, seed), "stop") == whole


def test_separated_json_values_and_whitespace_ownership(engine):
    """Llama writes several calls separated by ';'; whitespace after a call without a
    close marker stays text in both modes."""
    from toolrules.golden._dialects import splits, stream_parse, summary

    cases = [("llama3-json", '{"name": "f", "parameters": {"a": 1}} ; {"name": "g", "parameters": {}}  tail'),
             ("llama3-json", '<|python_tag|>{"name": "f", "parameters": {}};{"name": "g", "parameters": {}}'),
             ("mistral", 'x[TOOL_CALLS]f[ARGS]{"a": 1}  y')]
    for dialect, text in cases:
        p = engine.text_parser(dialect=dialect, ids="sequential")
        whole = summary(p.parse(text))
        assert len(whole["calls"]) >= 1, (dialect, text)
        for seed in range(4):
            assert stream_parse(p, splits(text, seed), "stop") == whole, (dialect, text, seed)
    r = engine.text_parser(dialect="llama3-json").parse(cases[0][1])
    assert [c.name for c in r.tool_calls] == ["f", "g"] and r.content == "tail"
