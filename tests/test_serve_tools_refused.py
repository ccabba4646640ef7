"""`toolrules serve` and tools it cannot carry, over real HTTP on 127.0.0.1 with the official
`anthropic` and `openai` SDKs: a request's `tools` entry that is not a plain function (or
custom) tool and that the client would expect calls to - an Anthropic-defined client tool
such as bash or the text editor, an MCP toolset, an OpenAI built-in tool the client runs
(computer use, local shell), a `custom` free-form tool - is refused with a 400 in the
client API's own error shape naming the entry (index and type) and what to do, before
anything goes upstream. The tools the provider's servers run (web search, code execution
...) are omitted instead: left out of the tools the model is offered and reported with
their reason (test_serve_tools_omitted.py). Nothing is dropped unseen."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated")

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import anthropic  # noqa: E402
import openai  # noqa: E402

import toolrules  # noqa: E402
from serve_helpers import (  # noqa: E402
    an,
    anthropic_proxy,
    chat_reply,
    oa,
    openai_compatible_proxy,
    refusal,
)
from toolrules import UnsupportedContentError  # noqa: E402

READ = {"name": "read_file", "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                         "required": ["path"]}}
FN = {"type": "function", "function": {
    "name": "read_file", "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}
RESP_FN = {"type": "function", "name": "read_file", "description": "Read a file.",
           "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}

# Anthropic tool types that the proxy cannot carry: server tools, and client tools whose
# schema and behaviour Anthropic defines (the model is trained on them, the request does
# not describe them).
ANTHROPIC_SERVER = [
    {"type": "mcp_toolset", "mcp_server_name": "docs"},
]
ANTHROPIC_DEFINED = [
    {"type": "bash_20250124", "name": "bash"},
    {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
    {"type": "computer_20250124", "name": "computer", "display_width_px": 1024,
     "display_height_px": 768},
    {"type": "memory_20250818", "name": "memory"},
]
RESPONSES_BUILTIN = [
    {"type": "computer_use_preview", "display_width": 1024, "display_height": 768,
     "environment": "browser"},
    {"type": "local_shell"},
    {"type": "shell"},
    {"type": "apply_patch"},
]


@pytest.fixture(scope="module")
def to_openai(upstream):
    with openai_compatible_proxy(upstream) as proxy:
        yield proxy


@pytest.fixture
def to_anthropic(upstream, tmp_path, monkeypatch):
    with anthropic_proxy(upstream, tmp_path, monkeypatch) as proxy:
        yield proxy


@pytest.fixture(autouse=True)
def fresh(upstream):
    upstream.requests.clear()
    upstream.replies.clear()


def openai_error(e: Any) -> dict[str, Any]:
    return refusal(e)


# ---------------------------------------------------------------- Anthropic clients

@pytest.mark.parametrize("tool", ANTHROPIC_SERVER, ids=lambda t: t["type"])
def test_anthropic_server_tools_are_refused(upstream, to_openai, tool):
    with pytest.raises(anthropic.BadRequestError) as e:
        an(to_openai).messages.create(model="gpt-4o", max_tokens=20, tools=[READ, tool],
                                      messages=[{"role": "user", "content": "look it up"}])
    err = e.value.body["error"]
    assert e.value.status_code == 400 and err["type"] == "invalid_request_error"
    msg = err["message"]
    assert f"tools[1] (type {tool['type']!r}" in msg
    assert "MCP toolset" in msg and "Declare what you need as a custom tool" in msg
    assert "call the Anthropic API directly" in msg
    assert upstream.requests == []  # nothing went upstream


@pytest.mark.parametrize("tool", ANTHROPIC_DEFINED, ids=lambda t: t["type"])
@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_defined_client_tools_are_refused_even_to_anthropic(upstream, to_anthropic,
                                                                      tool, stream):
    """bash, text editor, computer and memory run on the client, but their schema is
    Anthropic's: the proxy rewrites every tool as a custom one, so even an Anthropic
    upstream would get a different tool. Refused, with the way out."""
    with pytest.raises(anthropic.BadRequestError) as e:
        an(to_anthropic).messages.create(model="claude-sonnet-4-5", max_tokens=20,
                                         tools=[tool], stream=stream,
                                         messages=[{"role": "user", "content": "ls"}])
    msg = e.value.body["error"]["message"]
    assert f"tools[0] (type {tool['type']!r}, name {tool['name']!r})" in msg
    assert "Anthropic-defined tool" in msg and "custom tool" in msg
    assert "refuses content it cannot carry" in msg
    assert upstream.requests == []


def test_an_unknown_anthropic_tool_type_is_refused(upstream, to_openai):
    with pytest.raises(anthropic.BadRequestError) as e:
        an(to_openai).messages.create(model="gpt-4o", max_tokens=20, messages=[
            {"role": "user", "content": "hi"}], tools=[
            {"type": "hologram_20990101", "name": "hologram"}])
    msg = e.value.body["error"]["message"]
    assert "tools[0] (type 'hologram_20990101'" in msg and "no rule for this tool type" in msg
    assert upstream.requests == []


def test_anthropic_custom_tools_still_go_through(upstream, to_openai):
    upstream.replies.append(chat_reply("fine"))
    r = an(to_openai).messages.create(model="gpt-4o", max_tokens=20, messages=[
        {"role": "user", "content": "hi"}], tools=[READ, {**READ, "name": "write_file",
                                                          "type": "custom"}])
    assert r.content[0].text == "fine"
    sent = upstream.requests[-1].json()
    assert [t["function"]["name"] for t in sent["tools"]] == ["read_file", "write_file"]


# ---------------------------------------------------------------- OpenAI clients

@pytest.mark.parametrize("tool", RESPONSES_BUILTIN, ids=lambda t: t["type"])
def test_responses_built_in_tools_the_client_runs_are_refused(upstream, to_openai, tool):
    with pytest.raises(openai.BadRequestError) as e:
        oa(to_openai).responses.create(model="gpt-4o", input="look it up",
                                       tools=[RESP_FN, tool])
    msg = openai_error(e)["message"]
    assert f"tools[1] (type {tool['type']!r})" in msg and "built-in tool the client runs" in msg
    assert "Declare what you need as a function tool" in msg and "call OpenAI directly" in msg
    assert upstream.requests == []


def test_responses_built_in_tools_the_client_runs_are_refused_streamed(upstream, to_openai):
    with pytest.raises(openai.BadRequestError) as e:
        oa(to_openai).responses.create(model="gpt-4o", input="look it up", stream=True,
                                       tools=[{"type": "local_shell"}])
    assert "tools[0] (type 'local_shell')" in openai_error(e)["message"]
    assert upstream.requests == []


def test_an_unknown_responses_tool_type_is_refused(upstream, to_openai):
    with pytest.raises(openai.BadRequestError) as e:
        oa(to_openai).responses.create(model="gpt-4o", input="x",
                                       tools=[{"type": "hologram"}])
    msg = openai_error(e)["message"]
    assert "tools[0] (type 'hologram')" in msg and "no rule for this tool type" in msg
    assert upstream.requests == []


def test_responses_custom_tools_are_refused(upstream, to_openai):
    with pytest.raises(openai.BadRequestError) as e:
        oa(to_openai).responses.create(model="gpt-4o", input="patch it", tools=[
            {"type": "custom", "name": "apply_patch", "description": "Apply a diff."}])
    msg = openai_error(e)["message"]
    assert "tools[0] (type 'custom', name 'apply_patch')" in msg and "free-form text" in msg
    assert upstream.requests == []


@pytest.mark.parametrize("tool", [
    {"type": "custom", "custom": {"name": "apply_patch", "description": "Apply a diff."}},
    {"type": "hologram"},
], ids=lambda t: t["type"])
def test_chat_tools_that_are_not_functions_are_refused(upstream, to_anthropic, tool):
    with pytest.raises(openai.BadRequestError) as e:
        oa(to_anthropic).chat.completions.create(model="claude-sonnet-4-5", tools=[FN, tool],
                                                 messages=[{"role": "user", "content": "x"}])
    msg = openai_error(e)["message"]
    assert f"tools[1] (type {tool['type']!r})" in msg and "function tool" in msg
    assert "call the provider directly" in msg
    assert upstream.requests == []


# ---------------------------------------------------------------- the engine underneath

def test_parse_request_names_the_entry_and_keeps_function_tools():
    eng = toolrules.load()
    body = {"model": "m", "input": "hi", "tools": [RESP_FN]}
    _m, tools, _c = eng.parse_request(body, "openai-responses")
    assert [t.name for t in tools] == ["read_file"]
    with pytest.raises(UnsupportedContentError) as e:
        eng.parse_request({**body, "tools": [RESP_FN, RESP_FN, {"type": "file_search"}]},
                          "openai-responses")
    assert e.value.where == "tools[2]" and e.value.part_type == "file_search"
    # an entry that is not a tool at all is refused too, never skipped
    with pytest.raises(UnsupportedContentError) as e:
        eng.parse_request({"model": "m", "messages": [], "tools": [FN, {}]}, "openai")
    assert e.value.where == "tools[1]" and "needs a `function` object" in str(e.value)
    with pytest.raises(UnsupportedContentError) as e:
        eng.parse_request({"model": "m", "max_tokens": 5, "messages": [],
                           "tools": [{"name": "x", "input_schema": "none"}]}, "anthropic")
    assert "needs an input_schema" in str(e.value)


def test_gemini_built_in_tools_are_refused_by_their_fields():
    eng = toolrules.load()
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "tools": [{"functionDeclarations": [{"name": "f"}]}, {"googleSearch": {}}]}
    with pytest.raises(UnsupportedContentError) as e:
        eng.parse_request(body, "gemini")
    assert "tools[1] (no type, fields 'googleSearch')" in str(e.value)
    _m, tools, _c = eng.parse_request({**body, "tools": body["tools"][:1]}, "gemini")
    assert [t.name for t in tools] == ["f"]
