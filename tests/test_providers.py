"""Provider wire formats: tool shapes, tool_choice tables, requests, tool
results, responses, named transforms, masking, overrides, capability-aware building."""

from __future__ import annotations

import json
import textwrap

import pytest

import toolrules
from toolrules import (
    CapabilityError,
    InputTooLargeError,
    Message,
    ParsedResponse,
    ParseError,
    SchemaError,
    Tool,
    ToolCall,
    ToolResult,
    UnknownRuleError,
)

WEATHER = Tool("get_weather", "Weather for a city.", {
    "type": "object", "properties": {"city": {"type": "string"},
                                     "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city"]})
TIME = {"type": "function", "function": {"name": "get_time", "description": "UTC time.",
                                         "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, TIME]
CONVO = [
    Message("system", "Be brief."),
    Message("user", "Weather in Paris?"),
    Message("assistant", None, tool_calls=(ToolCall("call_1", "get_weather", {"city": "Paris"}),)),
    Message("tool", '{"temp": 18}', tool_call_id="call_1", name="get_weather"),
]


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")


# ---------------------------------------------------------------- names and lookup

def test_every_issue_provider_exists(engine):
    want = {"openai", "openai-responses", "anthropic", "gemini", "bedrock", "ollama", "mistral",
            "cohere", "together", "groq", "fireworks", "openrouter", "deepseek", "vllm",
            "sglang", "llamacpp", "lmstudio"}
    assert want <= set(engine.providers())


def test_every_provider_has_golden_cases_and_a_golden_file(engine):
    from conftest import REPO

    root = REPO / "golden" / "providers"
    assert (root / "conversation.cases.yaml").exists()
    for rid in engine.providers():
        assert (root / f"{rid}.golden.yaml").exists(), \
            f"run toolrules golden regen --filter 'providers/{rid}*'"
        data = engine.ruleset.get("provider", rid).data or {}
        if not data.get("extends"):  # a wire protocol of its own has its own cases
            assert (root / f"{rid}.cases.yaml").exists(), f"add golden/providers/{rid}.cases.yaml"


def test_unknown_provider_has_a_close_match_hint(engine):
    with pytest.raises(UnknownRuleError, match="did you mean openai"):
        engine.translate_tools(TOOLS, "opnai")


def test_aliases(engine):
    assert engine.provider_rules("llama.cpp").id == "llamacpp"
    assert engine.provider_rules("Google").id == "gemini"


# ---------------------------------------------------------------- tool shapes

def test_tool_shapes(engine):
    oa = engine.translate_tools(TOOLS, "openai")
    assert oa[0]["type"] == "function" and oa[0]["function"]["name"] == "get_weather"
    assert oa[0]["function"]["strict"] is True  # strict when the schema allows (auto)
    an = engine.translate_tools(TOOLS, "anthropic")
    assert an[0] == {"name": "get_weather", "description": "Weather for a city.",
                     "input_schema": WEATHER.parameters}
    ge = engine.translate_tools(TOOLS, "gemini")
    decls = ge[0]["functionDeclarations"]
    assert decls[0]["parameters"]["type"] == "OBJECT" and "parameters" not in decls[1]
    br = engine.translate_tools(TOOLS, "bedrock")
    assert br[0]["toolSpec"]["inputSchema"]["json"] == WEATHER.parameters
    rs = engine.translate_tools(TOOLS, "openai-responses")
    assert rs[0]["name"] == "get_weather" and rs[0]["strict"] is True
    assert engine.translate_tools(TOOLS, "gemini-jsonschema")[0]["functionDeclarations"][0][
        "parametersJsonSchema"] == WEATHER.parameters


def test_strict_on_off_auto(engine):
    free = Tool("f", "free-form", {"type": "object", "properties": {"meta": {"type": "object"}}})
    assert "strict" not in engine.translate_tools([free], "openai")[0]["function"]  # auto: plain
    with pytest.raises(SchemaError, match="free-form"):
        engine.translate_tools([free], "openai", strict=True)
    assert "strict" not in engine.translate_tools([WEATHER], "openai", strict=False)[0]["function"]
    assert "strict" not in engine.translate_tools([WEATHER], "together")[0]["function"]
    with pytest.raises(CapabilityError, match="no strict"):
        engine.translate_tools([WEATHER], "anthropic", strict=True)


def test_invalid_names_are_sanitized_and_mapped_back(engine):
    tool = Tool("facts.propose", "Propose a fact.", {"type": "object", "properties": {"x": {"type": "string"}}})
    wire = engine.translate_tools([tool], "openai")
    assert wire[0]["function"]["name"] == "facts_propose"
    body = {"choices": [{"message": {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "facts_propose", "arguments": '{"x": "y"}'}}]},
        "finish_reason": "tool_calls"}]}
    parsed = engine.parse_response(body, "openai", tools=[tool])
    assert parsed.tool_calls[0].name == "facts.propose"
    assert engine.tool_choice("facts.propose", "openai", [tool]) == \
        {"type": "function", "function": {"name": "facts_propose"}}
    # gemini accepts dots: no rewriting there
    assert engine.translate_tools([tool], "gemini")[0]["functionDeclarations"][0]["name"] == "facts.propose"


def test_too_many_tools_and_long_descriptions(engine):
    many = [Tool(f"t{i}") for i in range(129)]
    with pytest.raises(SchemaError, match="at most 128"):
        engine.translate_tools(many, "openai")
    long = Tool("t", "x" * 2000)
    assert len(engine.translate_tools([long], "openai")[0]["function"]["description"]) <= 1024


def test_duplicate_tool_names_are_refused(engine):
    with pytest.raises(SchemaError, match="two tools"):
        engine.translate_tools([WEATHER, WEATHER], "openai")


def test_gemini_schema_keeps_meaning_in_descriptions(engine):
    tool = Tool("t", "", {"type": "object", "properties": {
        "n": {"type": "integer", "enum": [1, 2], "default": 1},
        "m": {"type": "dict"}, "r": {"$ref": "#/$defs/R"}},
        "$defs": {"R": {"type": "object", "properties": {"a": {"type": ["string", "null"]}},
                        "additionalProperties": False}}})
    p = engine.translate_tools([tool], "gemini")[0]["functionDeclarations"][0]["parameters"]
    assert p["properties"]["n"] == {"type": "STRING", "enum": ["1", "2"], "description": '(default: 1)'}
    assert p["properties"]["m"]["type"] == "STRING"
    assert p["properties"]["r"]["properties"]["a"] == {"type": "STRING", "nullable": True}
    body = {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {
        "name": "t", "args": {"n": "2", "m": '{"k": 1}'}}}]}, "finishReason": "STOP"}]}
    call = engine.parse_response(body, "gemini", tools=[tool]).tool_calls[0]
    assert call.arguments == {"n": 2, "m": {"k": 1}}  # back to the original types


# ---------------------------------------------------------------- tool_choice tables

@pytest.mark.parametrize("provider,choice,want", [
    ("openai", "auto", "auto"), ("openai", "required", "required"),
    ("openai", "get_weather", {"type": "function", "function": {"name": "get_weather"}}),
    ("anthropic", "required", {"type": "any"}), ("anthropic", "none", {"type": "none"}),
    ("anthropic", "get_weather", {"type": "tool", "name": "get_weather"}),
    ("gemini", "required", {"functionCallingConfig": {"mode": "ANY"}}),
    ("gemini", "get_weather", {"functionCallingConfig": {"mode": "ANY",
                                                         "allowedFunctionNames": ["get_weather"]}}),
    ("gemini", "none", {"functionCallingConfig": {"mode": "NONE"}}),
    ("bedrock", "auto", {"auto": {}}), ("bedrock", "required", {"any": {}}),
    ("bedrock", "none", None), ("bedrock", "get_weather", {"tool": {"name": "get_weather"}}),
    ("mistral", "required", "any"), ("cohere", "required", "REQUIRED"), ("cohere", "auto", None),
    ("cohere", "none", "NONE"), ("ollama", "auto", None), ("ollama", "none", None),
    ("openai-responses", "get_weather", {"type": "function", "name": "get_weather"}),
    ("openai", {"type": "function", "function": {"name": "get_weather"}},
     {"type": "function", "function": {"name": "get_weather"}}),
    ("anthropic", WEATHER, {"type": "tool", "name": "get_weather"}),
    ("anthropic", "any", {"type": "any"}),
])
def test_tool_choice_table(engine, provider, choice, want):
    assert engine.tool_choice(choice, provider, TOOLS) == want


def test_tool_choice_errors(engine):
    with pytest.raises(CapabilityError, match="cannot require"):
        engine.tool_choice("required", "ollama")
    with pytest.raises(UnknownRuleError, match="get_wether"):
        engine.tool_choice("get_wether", "openai", TOOLS)
    with pytest.raises(ParseError):
        engine.tool_choice(42, "openai")
    with pytest.raises(CapabilityError, match="does not accept tool_choice 'required'"):
        engine.tool_choice("required", "openai", TOOLS, model="o3-mini")


def test_choice_placement_and_tool_restriction(engine):
    body = engine.build_request("bedrock", "m", [Message("user", "hi")], TOOLS, tool_choice="none")
    assert "toolConfig" not in body
    body = engine.build_request("cohere", "command-a", [Message("user", "hi")], TOOLS,
                                tool_choice="get_time")
    assert [t["function"]["name"] for t in body["tools"]] == ["get_time"]
    assert body["tool_choice"] == "REQUIRED"
    body = engine.build_request("ollama", "qwen3:8b", [Message("user", "hi")], TOOLS,
                                tool_choice="get_time")
    assert [t["function"]["name"] for t in body["tools"]] == ["get_time"]
    body = engine.build_request("gemini", "gemini-2.5-flash", [Message("user", "hi")], TOOLS,
                                tool_choice="required")
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}


# ---------------------------------------------------------------- requests

def test_system_placement(engine):
    assert engine.build_request("anthropic", "claude-sonnet-4-5", CONVO)["system"] == "Be brief."
    assert engine.build_request("gemini", "g", CONVO)["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert engine.build_request("bedrock", "m", CONVO)["system"] == [{"text": "Be brief."}]
    assert engine.build_request("openai-responses", "gpt-4.1", CONVO)["instructions"] == "Be brief."
    assert engine.build_request("openai", "gpt-4o", CONVO)["messages"][0] == \
        {"role": "system", "content": "Be brief."}
    assert "model" not in engine.build_request("gemini", "gemini-2.5-flash", CONVO)
    assert engine.build_request("bedrock", "m-1", CONVO)["modelId"] == "m-1"


def test_messages_accept_dicts_and_objects_alike(engine):
    dicts = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
             {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
             {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": '{"temp": 18}'}]
    for provider in engine.providers():
        assert engine.build_request(provider, "gpt-4o", dicts, TOOLS) == \
            engine.build_request(provider, "gpt-4o", CONVO, TOOLS), provider


def test_parallel_call_control(engine):
    body = engine.build_request("openai", "gpt-4o", CONVO, TOOLS, parallel_tool_calls=False)
    assert body["parallel_tool_calls"] is False
    body = engine.build_request("anthropic", "claude-sonnet-4-5", CONVO, TOOLS, parallel_tool_calls=False)
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    body = engine.build_request("anthropic", "claude-sonnet-4-5", CONVO, TOOLS,
                                tool_choice="required", parallel_tool_calls=False)
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    # capability: Llama 3.3 calls one tool per turn -> the server is told so
    body = engine.build_request("vllm", "meta-llama/Llama-3.3-70B-Instruct", CONVO, TOOLS)
    assert body["parallel_tool_calls"] is False
    assert "parallel_tool_calls" not in engine.build_request("openai", "gpt-4o", CONVO, TOOLS)


def test_options_defaults_and_unknown_options(engine):
    body = engine.build_request("anthropic", "claude-sonnet-4-5", CONVO)
    assert body["max_tokens"] == 4096
    body = engine.build_request("gemini", "g", CONVO, max_tokens=100, temperature=0.1)
    assert body["generationConfig"] == {"maxOutputTokens": 100, "temperature": 0.1}
    body = engine.build_request("ollama", "qwen3:8b", CONVO)
    assert body["stream"] is False
    assert engine.build_request("ollama", "qwen3:8b", CONVO, stream=True)["stream"] is True
    assert engine.build_request("openai", "gpt-4o", CONVO, max_tokens=5)["max_completion_tokens"] == 5
    assert engine.build_request("vllm", "x", CONVO, max_tokens=5)["max_tokens"] == 5
    with pytest.raises(UnknownRuleError, match="request_overrides"):
        engine.build_request("openai", "gpt-4o", CONVO, max_tokenz=5)


def test_request_overrides_protect_reserved_keys(engine):
    with pytest.warns(UserWarning, match="model"):
        body = engine.build_request("openrouter", "x/y", CONVO, TOOLS, request_overrides={
            "model": "evil", "messages": [], "provider": {"order": ["a"]}, "temperature": 0.2})
    assert body["model"] == "x/y" and body["messages"][0]["content"] == "Be brief."
    assert body["provider"] == {"order": ["a"]} and body["temperature"] == 0.2


def test_tool_masking_applies_to_what_is_sent(engine):
    body = engine.build_request("openai", "gpt-4o", CONVO, TOOLS, denied_tools=["get_time"])
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather"]
    body = engine.build_request("openai", "gpt-4o", CONVO, TOOLS, allowed_tools="get_time")
    assert [t["function"]["name"] for t in body["tools"]] == ["get_time"]
    with pytest.raises(UnknownRuleError):
        engine.build_request("openai", "gpt-4o", CONVO, TOOLS, tool_choice="get_time",
                             denied_tools=["get_time"])
    assert engine.translate_tools(TOOLS, "anthropic", denied_tools="get_weather")[0]["name"] == "get_time"


def test_call_ids_follow_provider_rules(engine):
    convo = [Message("user", "hi"),
             Message("assistant", "", tool_calls=(ToolCall("call_abc-123.x", "get_time", {}),
                                                  ToolCall(None, "get_weather", {"city": "P"}))),
             Message("tool", "12:00", tool_call_id="call_abc-123.x"),
             Message("tool", "sunny", name="get_weather")]
    body = engine.build_request("mistral", "mistral-large", convo, TOOLS)
    ids = [c["id"] for c in body["messages"][1]["tool_calls"]]
    assert all(len(i) == 9 and i.isalnum() for i in ids)
    assert [m["tool_call_id"] for m in body["messages"][2:]] == ids  # results still match
    assert [m["name"] for m in body["messages"][2:]] == ["get_time", "get_weather"]
    body = engine.build_request("anthropic", "claude-sonnet-4-5", convo, TOOLS)
    uses = [b["id"] for b in body["messages"][1]["content"]]
    results = [b["tool_use_id"] for b in body["messages"][2]["content"]]
    assert uses == results and all("." not in i for i in uses)


def test_named_message_transforms(engine):
    convo = [Message("user", "q"), Message("assistant", "", tool_calls=(ToolCall("c1", "get_time", {}),))]
    msg = engine.build_request("deepseek", "deepseek-reasoner", convo)["messages"][1]
    assert msg["content"] is None and msg["reasoning_content"] == ""
    msg = engine.build_request("openai", "gpt-4o", convo, transforms=["content_null_if_blank",
                                                                     "arguments_to_object"])["messages"][1]
    assert msg["content"] is None and msg["tool_calls"][0]["function"]["arguments"] == {}
    with pytest.raises(UnknownRuleError, match="message transform"):
        engine.build_request("openai", "gpt-4o", convo, transforms=["nope"])


# ---------------------------------------------------------------- tool results

def test_tool_result_messages(engine):
    ok = ToolResult("call_1", "get_weather", output={"temp": 18})
    err = ToolResult("call_1", "get_weather", error="timeout")
    assert engine.tool_result_message(ok, "openai") == \
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 18}'}
    assert engine.tool_result_message(err, "anthropic") == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "timeout", "is_error": True}]}
    assert engine.tool_result_message(ok, "gemini") == {"role": "user", "parts": [{"functionResponse": {
        "id": "call_1", "name": "get_weather", "response": {"output": {"temp": 18}}}}]}
    assert engine.tool_result_message(err, "gemini")["parts"][0]["functionResponse"]["response"] == \
        {"error": "timeout"}
    assert engine.tool_result_message(ok, "bedrock") == {"role": "user", "content": [{"toolResult": {
        "toolUseId": "call_1", "content": [{"json": {"temp": 18}}], "status": "success"}}]}
    assert engine.tool_result_message(err, "bedrock")["content"][0]["toolResult"]["status"] == "error"
    assert engine.tool_result_message(ok, "ollama") == \
        {"role": "tool", "content": '{"temp": 18}', "tool_name": "get_weather"}
    assert engine.tool_result_message(ok, "openai-responses") == \
        {"type": "function_call_output", "call_id": "call_1", "output": '{"temp": 18}'}
    assert engine.tool_result_message({"role": "tool", "tool_call_id": "x", "content": "r"}, "openai") == \
        {"role": "tool", "tool_call_id": "x", "content": "r"}
    with pytest.raises(ParseError):
        engine.tool_result_message(Message("user", "x"), "openai")


# ---------------------------------------------------------------- responses

def _oa(message, finish="stop"):
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def test_arguments_as_string_or_object(engine):
    for args in ('{"city": "Oslo"}', {"city": "Oslo"}):
        body = _oa({"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": args}}]},
            "tool_calls")
        p = engine.parse_response(body, "openai")
        assert p.tool_calls == (ToolCall("c", "get_weather", {"city": "Oslo"}),)
        assert p.finish_reason == "tool_calls"


def test_response_transforms(engine):
    legacy = _oa({"role": "assistant", "function_call": {"name": "get_time", "arguments": ""}},
                 "function_call")
    p = engine.parse_response(legacy, "openai")
    assert p.tool_calls == (ToolCall(None, "get_time", {}),) and p.finish_reason == "tool_calls"
    as_object = _oa({"role": "assistant", "tool_calls": {"function": {"name": "get_time", "arguments": "{}"}}})
    assert engine.parse_response(as_object, "openai").tool_calls[0].name == "get_time"
    keyed = _oa({"role": "assistant", "tool_calls": {
        "1": {"function": {"name": "b", "arguments": "{}"}}, "0": {"function": {"name": "a", "arguments": "{}"}}}})
    assert [c.name for c in engine.parse_response(keyed, "openai").tool_calls] == ["a", "b"]


def test_finish_reason_mapping(engine):
    assert engine.parse_response({"content": [{"type": "text", "text": "x"}], "stop_reason": "max_tokens"},
                                 "anthropic").finish_reason == "length"
    gem = {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "get_time"}}]},
                           "finishReason": "STOP"}]}
    p = engine.parse_response(gem, "gemini")
    assert p.finish_reason == "tool_calls" and p.tool_calls[0].arguments == {}
    blocked = engine.parse_response({"promptFeedback": {"blockReason": "SAFETY"}}, "gemini")
    assert blocked.finish_reason == "content_filter" and blocked.content is None
    assert engine.parse_response({"output": {"message": {"role": "assistant", "content": [{"text": "x"}]}},
                                  "stopReason": "guardrail_intervened"}, "bedrock").finish_reason == "content_filter"


def test_strict_nulls_are_dropped_for_optional_parameters(engine):
    body = _oa({"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Oslo", "unit": null}'}}]}, "tool_calls")
    assert engine.parse_response(body, "openai", tools=TOOLS).tool_calls[0].arguments == {"city": "Oslo"}
    assert engine.parse_response(body, "openai").tool_calls[0].arguments == {"city": "Oslo", "unit": None}


def test_bad_arguments_and_unknown_tools_are_warnings(engine):
    body = _oa({"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": '}},
        {"id": "b", "type": "function", "function": {"name": "launch", "arguments": "{}"}}]}, "tool_calls")
    p = engine.parse_response(body, "openai", tools=TOOLS)
    assert [c.name for c in p.tool_calls] == ["launch"]
    assert any("get_weather" in w and "JSON" in w for w in p.warnings)
    assert "unknown tool 'launch'" in p.warnings


def test_bodies_may_be_text_or_sdk_like(engine):
    body = _oa({"role": "assistant", "content": "hi"})
    assert engine.parse_response(json.dumps(body), "openai").content == "hi"
    assert engine.parse_response(json.dumps(body).encode(), "openai").content == "hi"

    class Obj:
        def model_dump(self, **kw):
            return body

    assert engine.parse_response(Obj(), "openai").content == "hi"


def test_wrong_bodies_are_parse_errors(engine):
    with pytest.raises(ParseError, match="finds no message"):
        engine.parse_response({"foo": 1}, "openai")
    with pytest.raises(ParseError, match="not JSON"):
        engine.parse_response("{nope", "openai")
    with pytest.raises(ParseError):
        engine.parse_response(42, "openai")
    with pytest.raises(InputTooLargeError):
        engine.parse_response(" " * (17 << 20), "openai")
    with pytest.raises(ParseError, match="no message list"):
        engine.parse_request({"model": "x"}, "openai")


def test_reasoning_extraction(engine):
    p = engine.parse_response(_oa({"role": "assistant", "content": "a", "reasoning_content": "r"}), "deepseek")
    assert (p.content, p.reasoning_content) == ("a", "r")
    p = engine.parse_response({"message": {"role": "assistant", "content": "a", "thinking": "t"},
                               "done": True, "done_reason": "stop"}, "ollama")
    assert p.reasoning_content == "t"


# ---------------------------------------------------------------- the reverse direction

def test_parse_request_anthropic(engine):
    body = {"model": "claude", "system": [{"type": "text", "text": "S"}], "max_tokens": 10,
            "tools": [{"name": "get_time", "input_schema": {"type": "object", "properties": {}}}],
            "tool_choice": {"type": "tool", "name": "get_time"},
            "messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_time", "input": {}}]},
                         {"role": "user", "content": [
                             {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "12:00"}],
                              "is_error": False},
                             {"type": "text", "text": "and?"}]}]}
    msgs, tools, choice = engine.parse_request(body, "anthropic")
    assert [m.role for m in msgs] == ["system", "user", "assistant", "tool", "user"]
    assert msgs[3] == Message("tool", "12:00", tool_call_id="t1")
    assert msgs[4].content == "and?"
    assert tools[0].name == "get_time"
    assert choice == {"type": "function", "function": {"name": "get_time"}}


def test_parse_request_responses_items_merge(engine):
    body = {"model": "m", "instructions": "S", "input": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "checking"},
        {"type": "function_call", "call_id": "c1", "name": "get_time", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"city": "P"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "12:00"}],
        "tool_choice": "required"}
    msgs, _tools, choice = engine.parse_request(body, "openai-responses")
    assert msgs[2] == Message("assistant", "checking", tool_calls=(
        ToolCall("c1", "get_time", {}), ToolCall("c2", "get_weather", {"city": "P"})))
    assert msgs[3] == Message("tool", "12:00", tool_call_id="c1")
    assert choice == "required"


def test_proxy_any_client_to_any_server(engine):
    """An Anthropic client's request, sent to Gemini, and Gemini's answer sent back."""
    body = engine.build_request("anthropic", "claude-sonnet-4-5", CONVO, TOOLS, tool_choice="required")
    msgs, tools, choice = engine.parse_request(body, "anthropic")
    gem = engine.build_request("gemini", "gemini-2.5-flash", msgs, tools, tool_choice=choice)
    assert gem["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    answer = {"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}]}, "finishReason": "STOP"}]}
    parsed = engine.parse_response(answer, "gemini", tools=tools)
    back = engine.build_response(parsed, "anthropic", model="claude-sonnet-4-5")
    assert back["stop_reason"] == "tool_use"
    assert back["content"][0]["type"] == "tool_use" and back["content"][0]["input"] == {"city": "Rome"}
    assert engine.parse_response(back, "anthropic").tool_calls[0].name == "get_weather"


def test_build_response_is_deterministic(engine):
    p = ParsedResponse(content="x", tool_calls=(ToolCall(None, "get_time", {}),), finish_reason="tool_calls")
    a = engine.build_response(p, "openai", created=1)
    assert a == engine.build_response(p, "openai", created=1)
    assert a["choices"][0]["finish_reason"] == "tool_calls"
    assert a["choices"][0]["message"]["tool_calls"][0]["id"].startswith("call_")


# ---------------------------------------------------------------- capabilities and integration points

def test_model_without_native_tools_gets_the_emulation_prompt(engine, monkeypatch):
    seen = {}

    def render(tools, model=None):
        seen["tools"] = [t.name for t in tools]
        return "TOOLS: get_weather, get_time"

    monkeypatch.setattr(engine, "render_emulation", render, raising=False)
    body = engine.build_request("ollama", "llama3:8b", CONVO, TOOLS)
    assert "tools" not in body
    assert body["messages"][0] == {"role": "system", "content": "Be brief.\n\nTOOLS: get_weather, get_time"}
    assert seen["tools"] == ["get_weather", "get_time"]
    body = engine.build_request("anthropic", "claude-2.1", CONVO, TOOLS)  # no native tools
    assert body["system"].endswith("TOOLS: get_weather, get_time") and "tools" not in body


def test_no_emulation_available_is_a_capability_error(engine, monkeypatch):
    monkeypatch.setattr(engine, "render_emulation", None, raising=False)
    with pytest.raises(CapabilityError, match="no native tool calling"):
        engine.build_request("ollama", "llama3:8b", CONVO, TOOLS)
    engine.build_request("ollama", "llama3:8b", CONVO)  # without tools it is fine


def test_text_fallback_uses_the_text_parser(engine, monkeypatch):
    calls = {}

    class FakeParser:
        starts_in_reasoning = False

        def parse(self, text, finish_reason=None):
            calls["text"] = text
            return ParsedResponse(content="before", tool_calls=(ToolCall(None, "get_time", {}),),
                                  finish_reason="tool_calls", repairs=("trailing-commas",))

    def text_parser(model=None, tools=None, **kw):
        calls["model"] = model
        return FakeParser()

    monkeypatch.setattr(engine, "text_parser", text_parser, raising=False)
    body = {"message": {"role": "assistant", "content": 'before <tool_call>{"name": "get_time"}</tool_call>'},
            "done": True, "done_reason": "stop"}
    p = engine.parse_response(body, "ollama", tools=TOOLS, model="llama3:8b")
    assert calls == {"model": "llama3:8b", "text": body["message"]["content"]}
    assert p.tool_calls[0].name == "get_time" and p.repairs == ("trailing-commas",)
    assert p.finish_reason == "tool_calls"
    # a model with native tools: the text is left alone
    calls.clear()
    assert engine.parse_response(body, "ollama", model="qwen3:8b").tool_calls == ()
    assert calls == {}


# ---------------------------------------------------------------- rules-only extension

def test_new_openai_compatible_provider_is_five_lines(tmp_path):
    write(tmp_path / "providers" / "acme.yaml", """\
        extends: openai-compatible
        description: Acme Inference (OpenAI-compatible /v1/chat/completions).
        tool_choice:
          required: "'any'"
        """)
    engine = toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    body = engine.build_request("acme", "acme-7b", CONVO, TOOLS, tool_choice="required")
    assert body["tool_choice"] == "any" and body["tools"][0]["function"]["name"] == "get_weather"
    assert engine.parse_response(_oa({"role": "assistant", "content": "ok"}), "acme").content == "ok"


def test_broken_provider_overlay_is_refused(tmp_path):
    write(tmp_path / "providers" / "bad.yaml", """\
        extends: opnai-compatible
        tools:
          pipeline: [inline_ref]
        """)
    with pytest.raises(toolrules.RuleError) as info:
        toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    text = str(info.value)
    assert "bad.yaml:1:" in text and "did you mean 'openai-compatible'" in text
    assert "bad.yaml:3:" in text and "did you mean 'inline_refs'" in text


def test_model_schema_strategy_flattens_and_restores(tmp_path):
    write(tmp_path / "models" / "tiny.yaml", """\
        family: tiny
        match: ['^tiny']
        defaults: {native_tools: true, schema_strategy: weak}
        """)
    engine = toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    tool = Tool("find", "Find things.", {"type": "object", "required": ["q"], "properties": {
        "q": {"type": "string"}, "range": {"type": "object", "properties": {"start": {"type": "string"}}},
        "mode": {"type": "string", "enum": ["a", "b"]}}})
    wire = engine.translate_tools([tool], "ollama", model="tiny-1b")[0]["function"]["parameters"]
    assert set(wire["properties"]) == {"q", "range.start", "mode"}
    assert "enum" not in wire["properties"]["mode"]
    body = {"message": {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "find", "arguments": {"q": "x", "range.start": "2025"}}}]},
        "done": True, "done_reason": "stop"}
    args = engine.parse_response(body, "ollama", tools=[tool], model="tiny-1b").tool_calls[0].arguments
    assert args == {"q": "x", "range": {"start": "2025"}}
    # untouched for another model
    assert "range" in engine.translate_tools([tool], "ollama", model="qwen3:8b")[0]["function"]["parameters"]["properties"]
