"""Constrained decoding (`Engine.call_grammar`): the grammar admits every valid call in the
model's format and nothing else; the JSON-schema form likewise for the call object; the
turn format of raw-text models (`Engine.chat_prompt`); constraints in request bodies.

GBNF acceptance is decided by llama.cpp's own grammar engine (tests/gbnf_oracle.py; skipped
without llama_cpp). JSON-schema acceptance by jsonschema. Random tool schemas and random
valid arguments come from hypothesis.
"""

from __future__ import annotations

import json
import os
import string
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import toolrules
from gbnf_oracle import oracle_or_skip
from toolrules import CallGrammar, CapabilityError, ParseError, Tool, ToolCall, UnknownRuleError
from toolrules.emulation._grammar import call_shape

EXAMPLES = 400 if os.environ.get("TOOLRULES_SLOW") else 60

READ = Tool("read_file", "Read a file.", {
    "type": "object", "properties": {"path": {"type": "string"},
                                     "max_lines": {"type": "integer", "minimum": 1}},
    "required": ["path"]})
WEATHER = Tool("get_weather", "Weather for a city.", {
    "type": "object", "properties": {"city": {"type": "string"},
                                     "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city"]})
TOOLS = [READ, WEATHER]
GEMMA = "gemma-3-270m"
# one model per JSON-argument call format (the emulation style it is prompted with)
FORMATS = {"json": GEMMA, "hermes": "Qwen/Qwen2.5-7B-Instruct", "llama3-json": "llama3.1:8b",
           "mistral-v3": "mistral-7b-instruct-v0.3", "functionary-v31": "functionary-small-v3.1"}


# ---------------------------------------------------------------- random schemas and values

_KEYS = st.text(string.ascii_letters + "_", min_size=1, max_size=8)
_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


def _schemas(depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    leaves = st.one_of(
        st.just({"type": "string"}),
        st.builds(lambda lo, extra: {"type": "string", "minLength": lo,
                                     "maxLength": lo + extra},
                  st.integers(0, 3), st.integers(0, 5)),
        st.lists(st.text(string.ascii_lowercase, min_size=1, max_size=6), min_size=1,
                 max_size=4, unique=True).map(lambda v: {"type": "string", "enum": v}),
        st.just({"type": "integer"}), st.just({"type": "integer", "minimum": 0}),
        st.just({"type": "number"}), st.just({"type": "boolean"}), st.just({"type": "null"}),
        st.just({"type": ["string", "null"]}),
        st.sampled_from([1, "x", True, None]).map(lambda v: {"const": v}),
    )
    if depth >= 2:
        return leaves
    sub = _schemas(depth + 1)
    return st.one_of(
        leaves,
        st.builds(lambda items, lo, extra: {"type": "array", "items": items, "minItems": lo,
                                            "maxItems": lo + extra},
                  sub, st.integers(0, 2), st.integers(0, 3)),
        _objects(depth + 1),
        st.lists(sub, min_size=2, max_size=3).map(lambda alts: {"anyOf": alts}),
    )


def _objects(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def build(draw: Any) -> dict[str, Any]:
        keys = draw(st.lists(_KEYS, max_size=4, unique=True))
        props = {k: draw(_schemas(depth)) for k in keys}
        required = [k for k in keys if draw(st.booleans())]
        out: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            out["required"] = required
        if not keys and draw(st.booleans()):
            out = {"type": "object", "additionalProperties": {"type": "integer"}}
            if draw(st.booleans()):
                low = draw(st.integers(0, 2))
                out.update(minProperties=low, maxProperties=low + draw(st.integers(0, 2)))
        return out

    return build()


@st.composite
def _tools(draw: Any) -> Tool:
    params = draw(_objects(0))
    if draw(st.booleans()):  # a reference into $defs
        params = {k: v for k, v in params.items() if k not in ("minProperties", "maxProperties")}
        params = {**params, "$defs": {"Thing": draw(_schemas(1))},
                  "properties": {**params.get("properties", {}), "ref": {"$ref": "#/$defs/Thing"}}}
    return Tool("t_" + draw(st.text(string.ascii_lowercase, min_size=1, max_size=6)), "", params)


def _value(draw: Any, schema: Any, root: dict[str, Any]) -> Any:
    """A value valid under `schema`, its object keys in the schema's order."""
    if "$ref" in schema:
        return _value(draw, root["$defs"][schema["$ref"].rsplit("/", 1)[-1]], root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return draw(st.sampled_from(schema["enum"]))
    if "anyOf" in schema:
        return _value(draw, draw(st.sampled_from(schema["anyOf"])), root)
    t = schema.get("type")
    if isinstance(t, list):
        return _value(draw, {**schema, "type": draw(st.sampled_from(t))}, root)
    if t == "string":
        return draw(st.text(st.characters(blacklist_categories=("Cs",)),
                            min_size=schema.get("minLength", 0),
                            max_size=schema.get("maxLength", 12)))
    if t == "integer":
        return draw(st.integers(schema.get("minimum", -10**12), 10**12))
    if t == "number":
        return draw(st.one_of(st.integers(-10**6, 10**6),
                              st.floats(-1e6, 1e6, allow_nan=False).map(lambda f: round(f, 6))))
    if t == "boolean":
        return draw(st.booleans())
    if t == "null":
        return None
    if t == "array":
        n = draw(st.integers(schema.get("minItems", 0), schema.get("maxItems", 3)))
        return [_value(draw, schema["items"], root) for _ in range(n)]
    out: dict[str, Any] = {}
    props = schema.get("properties") or {}
    if not props and isinstance(schema.get("additionalProperties"), dict):
        keys = draw(st.lists(_KEYS, min_size=schema.get("minProperties", 0),
                             max_size=schema.get("maxProperties", 3), unique=True))
        for k in keys:
            out[k] = _value(draw, schema["additionalProperties"], root)
        return out
    for k, sub in props.items():
        if k in (schema.get("required") or ()) or draw(st.booleans()):
            out[k] = _value(draw, sub, root)
    return out


@st.composite
def _tool_and_call(draw: Any) -> tuple[Tool, dict[str, Any]]:
    tool = draw(_tools())
    return tool, _value(draw, tool.parameters, tool.parameters)


def _invalid(tool: Tool, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Arguments the schema rejects: an undeclared key, a required key missing, a wrong
    type for a declared string."""
    props = tool.parameters.get("properties") or {}
    out = []
    if props:
        out.append({**args, "zz_undeclared": 1})
    for k in tool.parameters.get("required") or ():
        out.append({a: v for a, v in args.items() if a != k})
    for k, sub in props.items():
        if sub == {"type": "string"} and k in args:
            out.append({**args, k: 12345})
    return out


# ---------------------------------------------------------------- shapes and choices

def test_shape_follows_the_template_and_reads_back(engine):
    shape = call_shape(engine._emulation, engine.select_emulation(GEMMA))
    assert shape.dialect == "json-fenced"
    assert [k for k, _ in shape.pieces] == ["text", "name", "text", "arguments", "text"]
    assert shape.object_keys == ("tool", "arguments") and shape.bare_object
    hermes = call_shape(engine._emulation, engine.select_emulation(FORMATS["hermes"]))
    assert hermes.pieces[0] == ("text", '<tool_call>\n{"name": ')
    assert not hermes.bare_object  # hermes reads calls only inside its tags


@pytest.mark.parametrize("style", ["xml", "pythonic", "gemma4"])
def test_formats_neither_json_nor_tagged_are_refused_with_the_reason(engine, style):
    with pytest.raises(CapabilityError, match="neither as one JSON object nor as tagged"):
        engine.call_grammar(TOOLS, style=style, tool_choice="required")


def test_tagged_shape_follows_the_template(engine):
    shape = call_shape(engine._emulation, engine.select_emulation(style="qwen3-coder"))
    assert shape.pieces == (("text", "<tool_call>\n<function="), ("name", "raw"),
                            ("parameters", ""))
    ps = shape.params
    assert ps is not None and not ps.typed
    assert (ps.head, ps.sep) == (">\n<parameter=", "\n</parameter>\n<parameter=")
    assert ps.tail == "\n</parameter>\n</function>\n</tool_call>"
    assert ps.empty == ">\n</function>\n</tool_call>" and "</parameter>" in ps.closers
    dsml = call_shape(engine._emulation, engine.select_emulation(style="deepseek-dsml")).params
    assert dsml is not None and dsml.typed  # string="true" / string="false" before the value
    assert dsml.between_for("string") != dsml.between_for("object") \
        == dsml.between_for("number")
    with pytest.raises(CapabilityError, match="tagged parameters"):
        engine.call_grammar(TOOLS, style="qwen3-coder", format="json_schema",
                            tool_choice="required")


def test_tool_choice_decides_the_shape(engine):
    req = engine.call_grammar(TOOLS, GEMMA, tool_choice="required")
    assert isinstance(req, CallGrammar) and not req.text_allowed
    assert req.tools == ("read_file", "get_weather") and req.text.startswith("root ::= call\n")
    auto = engine.call_grammar(TOOLS, GEMMA)
    assert auto.text_allowed and auto.text.startswith("root ::= call | text\n")
    assert "```" in auto.markers and auto.trigger == '```json\n{"tool": '
    named = engine.call_grammar(TOOLS, GEMMA, tool_choice={"type": "function",
                                                           "function": {"name": "get_weather"}})
    assert named.tools == ("get_weather",) and "read_file" not in named.text
    assert engine.call_grammar(TOOLS, GEMMA, tool_choice="none") is None
    assert engine.call_grammar([], GEMMA, tool_choice="required") is None
    assert engine.call_grammar(TOOLS, GEMMA, format="json_schema", tool_choice="auto") is None
    with pytest.raises(UnknownRuleError):
        engine.call_grammar(TOOLS, GEMMA, tool_choice="delete_everything")
    with pytest.raises(ParseError):
        engine.call_grammar(TOOLS, GEMMA, format="regex")
    with pytest.raises(CapabilityError, match="inside markers"):
        engine.call_grammar(TOOLS, FORMATS["hermes"], format="json_schema",
                            tool_choice="required")


def test_the_same_tools_give_the_same_grammar_object(engine):
    a = engine.call_grammar([t.to_openai() for t in TOOLS], GEMMA, tool_choice="required")
    assert engine.call_grammar(TOOLS, GEMMA, tool_choice="required") is a


# ---------------------------------------------------------------- JSON-schema form

@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(_tool_and_call())
def test_json_schema_admits_valid_calls_and_rejects_invalid_ones(engine, tool_call):
    tool, args = tool_call
    cg = engine.call_grammar([tool, READ], GEMMA, format="json_schema", tool_choice="required")
    v = jsonschema.Draft202012Validator(cg.grammar)
    call = {"tool": tool.name, "arguments": args}
    assert v.is_valid(call), (cg.grammar, call)
    # what the schema admits, the dialect reads as that very call
    parsed = engine.text_parser(GEMMA, [tool, READ]).parse(json.dumps(call))
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [(tool.name, args)]
    for bad in _invalid(tool, args):
        assert not v.is_valid({"tool": tool.name, "arguments": bad}), bad
    assert not v.is_valid({"tool": "no_such_tool", "arguments": args})
    assert not v.is_valid({"tool": tool.name, "arguments": args, "extra": 1})


def test_json_schema_inlines_references_and_survives_recursion(engine):
    tree = Tool("tree", "", {"type": "object", "$defs": {"node": {
        "type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
        "properties": {"root": {"$ref": "#/$defs/node"}}, "required": ["root"]})
    schema = engine.call_grammar([tree], GEMMA, format="json_schema", tool_choice="tree").grammar
    assert "$ref" not in json.dumps(schema) and "$defs" not in json.dumps(schema)
    jsonschema.validate({"tool": "tree", "arguments": {"root": {"kids": [{"kids": []}]}}}, schema)


# ---------------------------------------------------------------- GBNF form (llama.cpp's engine)

@pytest.mark.parametrize("style", sorted(FORMATS))
@pytest.mark.parametrize("choice", ["required", "auto", "get_weather"])
def test_every_grammar_compiles_in_llama_cpp(engine, style, choice):
    oracle = oracle_or_skip()
    cg = engine.call_grammar(TOOLS, FORMATS[style], tool_choice=choice)
    assert oracle.compiles(cg.text), cg.text


@pytest.mark.parametrize("style", sorted(FORMATS))
def test_grammar_admits_the_templates_calls_and_nothing_else(engine, style):
    oracle = oracle_or_skip()
    model = FORMATS[style]
    g = engine.call_grammar(TOOLS, model, tool_choice="required").text
    good = [("read_file", {"path": "a.txt"}), ("read_file", {"path": "a \"b\"\n", "max_lines": 3}),
            ("get_weather", {"city": "Zürich", "unit": "f"}), ("get_weather", {"city": ""})]
    for name, args in good:
        text = engine.render_call(ToolCall(None, name, args), TOOLS, model)
        assert oracle.accepts(g, text), text
    bad = [("read_file", {}), ("read_file", {"path": 3}), ("read_file", {"path": "a", "x": 1}),
           ("get_weather", {"city": "Oslo", "unit": "k"}), ("delete", {"path": "a"})]
    for name, args in bad:
        text = engine.render_call(ToolCall(None, name, args), TOOLS, model)
        assert not oracle.accepts(g, text), text
    ok = engine.render_call(ToolCall(None, "read_file", {"path": "a"}), TOOLS, model)
    for broken in (ok[:-1], ok + "!", " " + ok, "Sure. " + ok):
        assert not oracle.accepts(g, broken), broken


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(_tool_and_call(), st.sampled_from(sorted(FORMATS)))
def test_grammar_admits_every_valid_call_of_random_schemas(engine, tool_call, style):
    oracle = oracle_or_skip()
    tool, args = tool_call
    model = FORMATS[style]
    g = engine.call_grammar([tool, READ], model, tool_choice="required").text
    text = engine.render_call(ToolCall(None, tool.name, args), [tool], model)
    assert oracle.accepts(g, text), (text, g)
    compact = text.replace(json.dumps(args, ensure_ascii=False),
                           json.dumps(args, ensure_ascii=False, separators=(",", ":")))
    assert oracle.accepts(g, compact), compact
    for bad in _invalid(tool, args):
        bad_text = engine.render_call(ToolCall(None, tool.name, bad), [tool], model)
        assert not oracle.accepts(g, bad_text), bad_text


@pytest.mark.parametrize("style", sorted(FORMATS))
def test_auto_admits_text_the_dialect_keeps_as_text(engine, style):
    oracle = oracle_or_skip()
    model = FORMATS[style]
    cg = engine.call_grammar(TOOLS, model, tool_choice="auto")
    call = engine.render_call(ToolCall(None, "read_file", {"path": "a"}), TOOLS, model)
    assert oracle.accepts(cg.text, call)
    parser = engine.text_parser(model, TOOLS, dialect=cg.dialect)
    texts = ["Paris is sunny today.", "It's 3 < 4 and `code` is fine.", "Zürich: 5 °C\nok",
             "I can't do that", "a{b}c"]
    for text in texts:
        admitted = oracle.accepts(cg.text, text)
        reads_call = bool(parser.parse(text).tool_calls)
        assert not (admitted and reads_call), text
        if not any(m in text for m in cg.markers):
            assert admitted or text[0] in "{[", text
    for m in cg.markers:  # no marker anywhere in text
        assert not oracle.accepts(cg.text, f"before {m} after"), m
    assert not oracle.accepts(cg.text, "")
    assert not oracle.accepts(cg.text, "  leading space")


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40),
       st.sampled_from(sorted(FORMATS)))
def test_any_text_auto_admits_is_read_as_text(engine, text, style):
    oracle = oracle_or_skip()
    model = FORMATS[style]
    cg = engine.call_grammar(TOOLS, model, tool_choice="auto")
    if oracle.accepts(cg.text, text):
        parsed = engine.text_parser(model, TOOLS, dialect=cg.dialect).parse(text)
        assert not parsed.tool_calls, text


# ---------------------------------------------------------------- requests and turn formats

def test_build_request_puts_the_constraint_where_the_rule_says(engine):
    msgs = [{"role": "user", "content": "read a.txt"}]
    body = engine.build_request("llamacpp", GEMMA, msgs, tools=TOOLS, tool_choice="auto",
                                constrained=True)
    assert body["grammar"] == engine.call_grammar(TOOLS, GEMMA, tool_choice="auto").text
    body = engine.build_request("openai-compatible", GEMMA, msgs, tools=TOOLS,
                                tool_choice="required", constrained=True)
    rf = body["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["name"] == "tool_call"
    assert rf["json_schema"]["schema"] == engine.call_grammar(
        TOOLS, GEMMA, format="json_schema", tool_choice="required").grammar
    assert "response_format" not in engine.build_request(
        "openai-compatible", GEMMA, msgs, tools=TOOLS, tool_choice="auto", constrained=True)
    body = engine.build_request("ollama", "gemma3:1b", msgs, tools=TOOLS,
                                tool_choice="get_weather", constrained=True)
    assert body["format"]["properties"]["tool"]["enum"] == ["get_weather"]
    native = engine.build_request("openai", "gpt-4o", msgs, tools=TOOLS, constrained=True)
    assert all(t["function"]["strict"] for t in native["tools"])
    assert "grammar" not in engine.build_request("llamacpp", GEMMA, msgs, tools=TOOLS)
    with pytest.raises(CapabilityError, match="takes no constraint"):
        engine.build_request("anthropic", "claude-sonnet-4-5", msgs, tools=TOOLS,
                             constrained=True)


def test_a_server_rule_with_a_grammar_field_is_a_rules_edit(tmp_path):
    (tmp_path / "providers").mkdir()
    (tmp_path / "providers" / "my-server.yaml").write_text(
        "extends: openai-compatible\ndescription: a server that takes GBNF in `gbnf`\n"
        "constrained: {format: gbnf, path: extra.gbnf, value: grammar}\n")
    eng = toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    body = eng.build_request("my-server", GEMMA, [{"role": "user", "content": "x"}], tools=TOOLS,
                             tool_choice="required", constrained=True)
    assert body["extra"]["gbnf"].startswith("root ::= call\n")


def test_chat_prompt_is_the_models_turn_format(engine):
    p = engine.chat_prompt([{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "Read notes.txt"}], GEMMA, tools=TOOLS)
    assert p.template == "chat/gemma.j2" and p.dialect == "json-fenced"
    assert "<end_of_turn>" in p.stop
    assert p.text.startswith("<start_of_turn>user\nBe brief.\n\nYou have access to tools.")
    assert p.text.endswith("Read notes.txt<end_of_turn>\n<start_of_turn>model\n")
    assert "system" not in p.text  # Gemma has no system role
    plain = engine.chat_prompt([{"role": "user", "content": "hi"}], GEMMA)
    assert plain.text == "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"
    assert plain.dialect is None
    assert engine.chat_prompt([{"role": "user", "content": "hi"}], GEMMA, tools=TOOLS,
                              tool_choice="none").dialect is None


def test_chat_prompt_writes_earlier_calls_and_results_as_text(engine):
    p = engine.chat_prompt([
        {"role": "user", "content": "Read notes.txt"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "basil"}], GEMMA, tools=TOOLS)
    model_turn = '<start_of_turn>model\n```json\n{"tool": "read_file", "arguments": ' \
                 '{"path": "notes.txt"}}\n```<end_of_turn>'
    assert model_turn in p.text
    assert "basil<end_of_turn>\n<start_of_turn>model\n" in p.text


def test_no_turn_format_is_a_clear_error_and_embedded_templates_are_sandboxed(engine):
    with pytest.raises(CapabilityError, match="chat_template"):
        engine.chat_prompt([{"role": "user", "content": "hi"}], "llama3:8b")
    embedded = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    p = engine.chat_prompt([{"role": "user", "content": "hi"}], "llama3:8b", embedded=embedded)
    assert p.text == "[user] hi\n" and p.template is None
    hostile = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(CapabilityError, match="does not render"):
        engine.chat_prompt([{"role": "user", "content": "hi"}], "llama3:8b", embedded=hostile)


# ---------------------------------------------------------------- tagged-parameter formats

# formats that write one tagged block per argument (strings raw, everything else JSON)
TAGGED = ["anthropic-xml", "deepseek-dsml", "glm", "kimi-k3", "minimax-m2", "qwen3-coder",
          "seed-oss"]


def _render(engine, style, name, args, tools=TOOLS):
    return engine.render_call(ToolCall(None, name, args), tools, style=style)


def _reads(engine, style, tools, text):
    dialect = engine.select_emulation(style=style).dialect
    parsed = engine.text_parser(dialect=dialect, tools=tools).parse(text)
    return [(c.name, c.arguments) for c in parsed.tool_calls]


@pytest.mark.parametrize("style", TAGGED)
@pytest.mark.parametrize("choice", ["required", "auto", "get_weather"])
def test_every_tagged_grammar_compiles_in_llama_cpp(engine, style, choice):
    oracle = oracle_or_skip()
    cg = engine.call_grammar(TOOLS, style=style, tool_choice=choice)
    assert cg.style == style and oracle.compiles(cg.text), cg.text
    assert cg.trigger and cg.trigger.strip()


@pytest.mark.parametrize("style", TAGGED)
def test_tagged_grammar_admits_the_templates_calls_and_nothing_else(engine, style):
    oracle = oracle_or_skip()
    cg = engine.call_grammar(TOOLS, style=style, tool_choice="required")
    g = cg.text
    good = [("read_file", {"path": "a.txt"}), ("read_file", {"path": "notes/a b.md", "max_lines": 3}),
            ("get_weather", {"city": "Zürich", "unit": "f"}), ("get_weather", {"city": "São Paulo"}),
            ("read_file", {"path": 'say "hi" {x} [1]'})]
    for name, args in good:
        text = _render(engine, style, name, args)
        assert oracle.accepts(g, text), text
        assert _reads(engine, style, TOOLS, text) == [(name, args)]
    bad = [("read_file", {}),                                 # a required parameter missing
           ("read_file", {"max_lines": 3}),
           ("read_file", {"path": "a", "max_lines": "many"}),  # not an integer
           ("read_file", {"path": "a", "max_lines": 0}),       # below the minimum's sign
           ("read_file", {"path": "a", "x": 1}),               # undeclared
           ("get_weather", {"city": "Oslo", "unit": "k"}),     # not in the enum
           ("get_weather", {"unit": "c", "city": "Oslo"}),     # not the schema's order
           ("delete", {"path": "a"})]                          # no such tool
    for name, args in bad:
        text = _render(engine, style, name, args, [*TOOLS, Tool("delete", "", {})])
        assert not oracle.accepts(g, text), text
    ok = _render(engine, style, "read_file", {"path": "a"})
    for broken in (ok[:-1], ok + "!", " " + ok, "Sure. " + ok, ok + "\n" + ok):
        assert not oracle.accepts(g, broken), broken
    shape = call_shape(engine._emulation, engine.select_emulation(style=style))
    assert shape.params is not None
    for closer in shape.params.closers:  # a string value cannot end the value early
        text = _render(engine, style, "read_file", {"path": f"a{closer}b"})
        assert not oracle.accepts(g, text), text


@pytest.mark.parametrize("style", TAGGED)
def test_tagged_grammar_for_a_tool_without_required_parameters(engine, style):
    oracle = oracle_or_skip()
    tool = Tool("ping", "", {"type": "object", "properties": {
        "host": {"type": "string"}, "count": {"type": "integer"}, "fast": {"type": "boolean"}}})
    bare = Tool("now", "", {"type": "object", "properties": {}})
    g = engine.call_grammar([tool, bare], style=style, tool_choice="required").text
    for name, args in [("ping", {}), ("ping", {"count": 2}), ("ping", {"host": "h", "fast": True}),
                       ("ping", {"host": "h", "count": -1, "fast": False}), ("now", {})]:
        text = _render(engine, style, name, args, [tool, bare])
        assert oracle.accepts(g, text), text
        assert _reads(engine, style, [tool, bare], text) == [(name, args)]
    for name, args in [("ping", {"fast": "yes"}), ("ping", {"count": 1.5}), ("now", {"x": 1})]:
        text = _render(engine, style, name, args, [tool, bare])
        assert not oracle.accepts(g, text), text


def _tagged_tools() -> st.SearchStrategy[Tool]:
    """Tools whose parameters are one object of named properties (what a tagged format
    writes), each property any of the random schemas."""
    @st.composite
    def build(draw: Any) -> Tool:
        keys = draw(st.lists(_KEYS, max_size=4, unique=True))
        props = {k: draw(_schemas(1)) for k in keys}
        params: dict[str, Any] = {"type": "object", "properties": props}
        required = [k for k in keys if draw(st.booleans())]
        if required:
            params["required"] = required
        return Tool("t_" + draw(st.text(string.ascii_lowercase, min_size=1, max_size=6)), "",
                    params)

    return build()


@st.composite
def _tagged_tool_and_call(draw: Any) -> tuple[Tool, dict[str, Any]]:
    tool = draw(_tagged_tools())
    return tool, _value(draw, tool.parameters, tool.parameters)


def _tagged_invalid(tool: Tool, args: dict[str, Any]) -> list[dict[str, Any]]:
    """An undeclared key, a required key missing, text for a parameter whose schema admits
    no string (a tagged format writes a string as it is)."""
    from toolrules.dialects._values import schema_types

    out = [{**args, "zz_undeclared": 1}]
    for k in tool.parameters.get("required") or ():
        out.append({a: v for a, v in args.items() if a != k})
    for k, sub in tool.parameters["properties"].items():
        types = schema_types(sub)
        if types and "string" not in types and k in args:
            out.append({**args, k: "zz text"})
    return out


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.filter_too_much])
@given(_tagged_tool_and_call(), st.sampled_from(TAGGED))
def test_tagged_grammar_admits_every_valid_call_of_random_schemas(engine, tool_call, style):
    oracle = oracle_or_skip()
    tool, args = tool_call
    cg = engine.call_grammar([tool, READ], style=style, tool_choice="required")
    text = _render(engine, style, tool.name, args, [tool])
    # the calls the template itself writes in this format (not a fallback form), which
    # its dialect reads back
    assume(text.startswith(cg.trigger or ""))
    # llama.cpp's grammar engine takes code point 0 for the end of input: no grammar admits
    # it as raw text (JSON writes it \u0000)
    assume("\x00" not in text)
    assume(_reads(engine, style, [tool], text) == [(tool.name, args)])
    assert oracle.accepts(cg.text, text), (text, cg.text)
    for bad in _tagged_invalid(tool, args):
        bad_text = _render(engine, style, tool.name, bad, [tool])
        assert not oracle.accepts(cg.text, bad_text), bad_text


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=30),
       st.sampled_from(TAGGED))
def test_any_string_value_the_grammar_admits_reads_back_as_a_string(engine, value, style):
    oracle = oracle_or_skip()
    assume("\x00" not in value)  # see above: never admitted raw
    cg = engine.call_grammar(TOOLS, style=style, tool_choice="required")
    shape = call_shape(engine._emulation, engine.select_emulation(style=style))
    assert shape.params is not None
    head = cg.trigger + "read_file" if shape.pieces[1][1] == "raw" \
        else cg.trigger + '"read_file"'
    text = (head + shape.params.head + "path" + shape.params.between_for("string") + value
            + shape.params.tail)
    if oracle.accepts(cg.text, text):
        calls = _reads(engine, style, TOOLS, text)
        assert len(calls) == 1 and calls[0][0] == "read_file", text
        assert list(calls[0][1]) == ["path"] and isinstance(calls[0][1]["path"], str), text
    else:
        assert any(m in value for m in shape.params.closers), value


@pytest.mark.parametrize("style", TAGGED)
def test_tagged_auto_admits_text_the_dialect_keeps_as_text(engine, style):
    oracle = oracle_or_skip()
    cg = engine.call_grammar(TOOLS, style=style, tool_choice="auto")
    assert cg.text_allowed
    call = _render(engine, style, "read_file", {"path": "a"})
    assert oracle.accepts(cg.text, call)
    dialect = engine.select_emulation(style=style).dialect
    parser = engine.text_parser(dialect=dialect, tools=TOOLS)
    for text in ["Paris is sunny today.", "It's 3 < 4 and `code` is fine.", "Zürich: 5 °C\nok",
                 "I can't do that", "a{b}c"]:
        admitted = oracle.accepts(cg.text, text)
        assert not (admitted and parser.parse(text).tool_calls), text
        if not any(m in text for m in cg.markers):
            assert admitted or text[0] in "{[", text
    for m in cg.markers:
        if "\u2581" in m:  # the oracle's (Gemma's) vocabulary reads U+2581 as a space
            continue
        assert not oracle.accepts(cg.text, f"before {m} after"), m
    assert not oracle.accepts(cg.text, "")
    assert not oracle.accepts(cg.text, "Sure. " + call)
