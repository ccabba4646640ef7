"""Generated bodies validate against the providers' own published types.

Request bodies are checked with the official SDKs' request types (TypedDicts through
pydantic TypeAdapter, pydantic models, botocore's parameter validator); response bodies
built as SDK model objects parse through `parse_response`, and bodies written by
`build_response` validate as the SDKs' response models. The SDKs are test-only deps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO

CONV = yaml.safe_load((REPO / "golden" / "providers" / "conversation.cases.yaml").read_text())
TOOLS = CONV["tools"]
MESSAGES = CONV["messages"]

OPENAI_CHAT = ["openai", "openai-compatible", "together", "groq", "fireworks", "openrouter",
               "deepseek", "vllm", "sglang", "llamacpp", "lmstudio"]
MODELS = {"anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-flash",
          "gemini-jsonschema": "gemini-2.5-flash", "bedrock": "anthropic.claude-3-5-sonnet-20240620-v1:0",
          "ollama": "qwen3:8b", "mistral": "mistral-large-latest", "cohere": "command-a-03-2025",
          "openai-responses": "gpt-4.1"}


def _cases(provider: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "golden" / "providers" / f"{provider}.cases.yaml").read_text())


def _conforms(value: Any, tp: Any, path: str = "$") -> str | None:
    """Why `value` does not fit type `tp` (a TypedDict tree from an SDK), or None.

    Stricter than pydantic's TypedDict validation, which ignores unknown keys and checks
    Iterable[...] fields lazily: here every key must be declared, every required key
    present, every literal and scalar type right, all the way down.
    """
    import typing

    from typing_extensions import is_typeddict

    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any or tp is object:
        return None
    if origin in (typing.Annotated,) or str(origin) in ("typing.Required", "typing.NotRequired",
                                                        "typing_extensions.Required",
                                                        "typing_extensions.NotRequired"):
        return _conforms(value, args[0], path)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        errors = [_conforms(value, a, path) for a in args]
        return None if any(e is None for e in errors) else min(errors, key=len)  # type: ignore[arg-type]
    if origin is typing.Literal:
        return None if value in args else f"{path}: {value!r} not in {args}"
    if tp is type(None):
        return None if value is None else f"{path}: expected null"
    if is_typeddict(tp):
        if not isinstance(value, dict):
            return f"{path}: expected an object for {tp.__name__}"
        hints = typing.get_type_hints(tp, include_extras=True)
        unknown = set(value) - set(hints)
        if unknown:
            return f"{path}: {tp.__name__} has no field(s) {sorted(unknown)}"
        missing = set(getattr(tp, "__required_keys__", ())) - set(value)
        missing = {k for k in missing if "NotRequired" not in str(hints[k])}
        if missing:
            return f"{path}: {tp.__name__} misses {sorted(missing)}"
        for k, v in value.items():
            err = _conforms(v, hints[k], f"{path}.{k}")
            if err:
                return err
        return None
    if origin in (list, tuple, typing.Iterable, typing.Sequence) or \
            (origin is not None and getattr(origin, "__name__", "") in ("Iterable", "Sequence", "List")):
        if not isinstance(value, list):
            return f"{path}: expected a list"
        for i, v in enumerate(value):
            err = _conforms(v, args[0] if args else Any, f"{path}[{i}]")
            if err:
                return err
        return None
    if origin is dict or getattr(origin, "__name__", "") in ("Dict", "Mapping"):
        return None if isinstance(value, dict) else f"{path}: expected an object"
    if tp is str:
        return None if isinstance(value, str) else f"{path}: expected a string"
    if tp is bool:
        return None if isinstance(value, bool) else f"{path}: expected a boolean"
    if tp is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else f"{path}: expected an integer"
    if tp is float:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else f"{path}: expected a number"
    if isinstance(tp, typing.TypeAliasType if hasattr(typing, "TypeAliasType") else ()):
        return _conforms(value, tp.__value__, path)
    return None  # other SDK types (files, httpx values): not used in these bodies


def _check_typeddict(td: Any, body: dict[str, Any]) -> None:
    from pydantic import TypeAdapter

    TypeAdapter(td).validate_python(body)
    err = _conforms(body, td)
    assert err is None, err


def _requests(engine: Any, provider: str, model: str) -> list[dict[str, Any]]:
    """The conversation under every tool choice, plus a plain chat without tools."""
    out = [engine.build_request(provider, model, MESSAGES, max_tokens=256)]
    for choice in ("auto", "none", "required", "get_weather"):
        try:
            out.append(engine.build_request(provider, model, MESSAGES, tools=TOOLS,
                                            tool_choice=choice, max_tokens=256,
                                            parallel_tool_calls=False))
        except Exception as exc:  # a choice the provider cannot express is a clear error
            from toolrules import CapabilityError

            assert isinstance(exc, CapabilityError), exc
    return out


# ---------------------------------------------------------------- requests

@pytest.mark.parametrize("provider", OPENAI_CHAT)
def test_openai_chat_requests_validate(engine, provider):
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

    for body in _requests(engine, provider, "gpt-4o"):
        if provider == "deepseek":  # DeepSeek's documented extension of assistant turns
            for msg in body["messages"]:
                assert msg.pop("reasoning_content", "") == "" or msg["role"] == "assistant"
        if provider == "llamacpp":  # llama-server's own option: reuse the cached prefix
            assert body.pop("cache_prompt") is True
        _check_typeddict(CompletionCreateParamsNonStreaming, body)


def test_openai_responses_requests_validate(engine):
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

    for body in _requests(engine, "openai-responses", "gpt-4.1"):
        _check_typeddict(ResponseCreateParamsNonStreaming, body)


def test_anthropic_requests_validate(engine):
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

    for body in _requests(engine, "anthropic", "claude-sonnet-4-5"):
        _check_typeddict(MessageCreateParamsNonStreaming, body)


def _genai_check(body: dict[str, Any]) -> None:
    from google.genai import types
    from pydantic import TypeAdapter

    allowed = {"contents", "tools", "toolConfig", "systemInstruction", "generationConfig"}
    assert set(body) <= allowed, set(body) - allowed
    TypeAdapter(list[types.Content]).validate_python(body["contents"])
    for tool in body.get("tools", []):
        types.Tool.model_validate(tool)
    if "toolConfig" in body:
        types.ToolConfig.model_validate(body["toolConfig"])
    if "systemInstruction" in body:
        types.Content.model_validate(body["systemInstruction"])
    if "generationConfig" in body:
        types.GenerationConfig.model_validate(body["generationConfig"])


@pytest.mark.parametrize("provider", ["gemini", "gemini-jsonschema"])
def test_gemini_requests_validate(engine, provider):
    for body in _requests(engine, provider, "gemini-2.5-flash"):
        _genai_check(body)


def test_bedrock_requests_validate(engine):
    import botocore.session
    from botocore.validate import ParamValidator

    shape = botocore.session.get_session().get_service_model("bedrock-runtime") \
        .operation_model("Converse").input_shape
    for body in _requests(engine, "bedrock", "anthropic.claude-3-5-sonnet-20240620-v1:0"):
        report = ParamValidator().validate(body, shape)
        assert not report.has_errors(), report.generate_report()


def test_bedrock_none_choice_omits_tools_unless_history_needs_them(engine):
    body = engine.build_request("bedrock", "anthropic.claude-3-haiku-20240307-v1:0",
                                [{"role": "user", "content": "hi"}], tools=TOOLS, tool_choice="none")
    assert "toolConfig" not in body
    body = engine.build_request("bedrock", "anthropic.claude-3-haiku-20240307-v1:0", MESSAGES,
                                tools=TOOLS, tool_choice="none")
    assert body["toolConfig"]["tools"] and "toolChoice" not in body["toolConfig"]


def test_ollama_requests_validate(engine):
    ChatRequest = pytest.importorskip("ollama._types").ChatRequest

    for body in _requests(engine, "ollama", "qwen3:8b"):
        req = ChatRequest.model_validate(body)
        dumped = json.loads(json.dumps(req.model_dump(mode="json", exclude_none=True)))
        # the client's tool model keeps fewer schema keywords than a tool may carry
        assert [t["function"]["name"] for t in dumped.get("tools", [])] == \
            [t["function"]["name"] for t in body.get("tools", [])]
        dumped.pop("tools", None)
        assert dumped == {k: v for k, v in body.items() if k != "tools"}


def test_mistral_requests_validate(engine):
    ChatCompletionRequest = pytest.importorskip("mistralai.client.models").ChatCompletionRequest

    for body in _requests(engine, "mistral", "mistral-large-latest"):
        req = ChatCompletionRequest.model_validate(body)
        assert req.model == "mistral-large-latest"
        for msg in body["messages"]:
            for call in msg.get("tool_calls", []):
                assert len(call["id"]) == 9 and call["id"].isalnum()
            if msg["role"] == "tool":
                assert len(msg["tool_call_id"]) == 9 and msg["name"]


def test_cohere_requests_validate(engine):
    from pydantic import TypeAdapter

    cohere = pytest.importorskip("cohere")

    for body in _requests(engine, "cohere", "command-a-03-2025"):
        allowed = {"model", "messages", "tools", "tool_choice", "max_tokens", "strict_tools"}
        assert set(body) <= allowed, set(body) - allowed
        TypeAdapter(list[cohere.ChatMessageV2]).validate_python(body["messages"])
        if "tools" in body:
            TypeAdapter(list[cohere.ToolV2]).validate_python(body["tools"])
        if "tool_choice" in body:
            assert body["tool_choice"] in ("REQUIRED", "NONE")


# ---------------------------------------------------------------- responses as SDK objects

def _sdk_bodies(provider: str) -> dict[str, Any]:
    return _cases(provider).get("responses", {})


def test_openai_sdk_objects_parse(engine):
    from openai.types.chat import ChatCompletion

    for name, body in _sdk_bodies("openai").items():
        if name == "legacy_function_call":
            continue  # finish_reason function_call is no longer in the SDK's enum
        obj = ChatCompletion.model_validate(body)
        a = engine.parse_response(obj, "openai", tools=TOOLS)
        b = engine.parse_response(body, "openai", tools=TOOLS)
        assert (a.content, a.tool_calls, a.finish_reason) == (b.content, b.tool_calls, b.finish_reason)


@pytest.mark.parametrize("provider,model_type", [
    ("anthropic", "anthropic.types:Message"),
    ("gemini", "google.genai.types:GenerateContentResponse"),
    ("openai-responses", "openai.types.responses:Response"),
    ("ollama", "ollama._types:ChatResponse"),
    ("mistral", "mistralai.client.models:ChatCompletionResponse"),
    ("cohere", "cohere:V2ChatResponse"),
])
def test_sdk_response_objects_parse(engine, provider, model_type):
    mod_name, cls_name = model_type.split(":")
    cls = getattr(pytest.importorskip(mod_name), cls_name)
    bodies = _sdk_bodies(provider)
    assert bodies
    for name, body in bodies.items():
        if provider == "openai-responses" and "tools" in body:
            body = {**body, "tools": []}
        try:
            obj = cls.model_validate(body)
        except Exception as exc:  # the SDK would not have produced this body
            pytest.fail(f"{provider} case {name} is not a valid {cls_name}: {exc}")
        a = engine.parse_response(obj, provider, tools=TOOLS)
        b = engine.parse_response(body, provider, tools=TOOLS)
        assert (a.content, a.reasoning_content, a.tool_calls, a.finish_reason) == \
            (b.content, b.reasoning_content, b.tool_calls, b.finish_reason), name


def test_bedrock_response_shape_matches_botocore(engine):
    import botocore.session

    shape = botocore.session.get_session().get_service_model("bedrock-runtime") \
        .operation_model("Converse").output_shape
    for _name, body in _sdk_bodies("bedrock").items():
        assert set(body) - {"ResponseMetadata"} <= set(shape.members)
        parsed = engine.parse_response(body, "bedrock", tools=TOOLS)
        assert parsed.finish_reason in ("tool_calls", "stop")


# ---------------------------------------------------------------- build_response bodies

def _parsed_examples(engine: Any) -> list[Any]:
    from toolrules import ParsedResponse, ToolCall

    return [
        ParsedResponse(content="Hello.", finish_reason="stop"),
        ParsedResponse(content="Checking.", tool_calls=(
            ToolCall("call_1", "get_weather", {"city": "Paris"}),
            ToolCall(None, "get_time", {})), finish_reason="tool_calls"),
        ParsedResponse(content="Cut", finish_reason="length"),
    ]


@pytest.mark.parametrize("provider,model_type", [
    ("openai", "openai.types.chat:ChatCompletion"),
    ("anthropic", "anthropic.types:Message"),
    ("gemini", "google.genai.types:GenerateContentResponse"),
    ("openai-responses", "openai.types.responses:Response"),
    ("ollama", "ollama._types:ChatResponse"),
    ("mistral", "mistralai.client.models:ChatCompletionResponse"),
    ("cohere", "cohere:V2ChatResponse"),
])
def test_built_responses_validate_as_sdk_models(engine, provider, model_type):
    mod_name, cls_name = model_type.split(":")
    cls = getattr(pytest.importorskip(mod_name), cls_name)
    for parsed in _parsed_examples(engine):
        body = engine.build_response(parsed, provider, model="m-1", created=1735689600)
        obj = cls.model_validate(body)
        back = engine.parse_response(obj, provider)
        assert back.content == parsed.content
        assert [(c.name, c.arguments) for c in back.tool_calls] == \
            [(c.name, c.arguments) for c in parsed.tool_calls]
        assert back.finish_reason == parsed.finish_reason


def test_built_bedrock_response_validates_against_output_shape(engine):
    import botocore.session
    from botocore.validate import ParamValidator

    shape = botocore.session.get_session().get_service_model("bedrock-runtime") \
        .operation_model("Converse").output_shape
    for parsed in _parsed_examples(engine):
        body = engine.build_response(parsed, "bedrock")
        report = ParamValidator().validate(body, shape)
        assert not report.has_errors(), report.generate_report()


def test_no_sdk_is_imported_by_the_engine():
    import os
    import subprocess
    import sys

    code = ("import sys, toolrules; e = toolrules.load(use_env=False, cache=False); "
            "e.build_request('openai', 'gpt-4o', [{'role': 'user', 'content': 'hi'}]); "
            "print(sorted(m for m in ('openai', 'anthropic', 'google.genai', 'botocore', "
            "'pydantic', 'cohere', 'mistralai', 'ollama') if m in sys.modules))")
    env = {**os.environ, "TOOLRULES_CACHE": "0"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(REPO), env=env)
    assert out.stdout.strip() == "[]", out.stderr
