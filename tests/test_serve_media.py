"""`toolrules serve` and content beyond text, over real HTTP on 127.0.0.1 with the official
`anthropic` and `openai` SDKs: images, documents and audio are carried to the upstream in
its own wire shape when its API (and the model, by its rules) can take them; whatever
cannot be carried - server-tool blocks, unknown blocks, media the upstream or the model
cannot take - is refused with a 400 in the client API's own error shape, naming the block,
its message and what to do. Nothing is dropped."""

from __future__ import annotations

import json
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
)
from toolrules import ContentPart, Message, UnsupportedContentError  # noqa: E402
from wire_server import WireServer, json_reply  # noqa: E402

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
       "RU5ErkJggg==")
PDF = "JVBERi0xLjQKJcOkw7zDtsOfCjEgMCBvYmoKPDwvVHlwZSAvQ2F0YWxvZz4+CmVuZG9iago="
WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA="
READ = {"name": "read_file", "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                         "required": ["path"]}}


def messages_reply(text: str = "ok") -> Any:
    return json_reply({"id": "msg_up", "type": "message", "role": "assistant", "model": "up",
                       "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                       "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}})


@pytest.fixture
def upstream():
    with WireServer() as srv:
        yield srv


@pytest.fixture
def to_openai(upstream):
    with openai_compatible_proxy(upstream) as proxy:
        yield proxy


@pytest.fixture
def to_anthropic(upstream, tmp_path, monkeypatch):
    with anthropic_proxy(upstream, tmp_path, monkeypatch) as proxy:
        yield proxy


def sent(upstream: WireServer) -> Any:
    return upstream.requests[-1].json()


# ---------------------------------------------------------------- carried through

def test_anthropic_client_media_reach_an_openai_upstream(upstream, to_openai):
    upstream.replies.append(chat_reply("a red dot"))
    r = an(to_openai).messages.create(model="gpt-4o", max_tokens=20, messages=[
        {"role": "user", "content": [
            {"type": "text", "text": "What are these?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": PNG}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}},
            {"type": "document", "title": "notes", "source": {
                "type": "text", "media_type": "text/plain", "data": "buy milk"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                            "data": PDF}}]}])
    assert r.content[0].text == "a red dot"
    assert sent(upstream)["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "What are these?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
        {"type": "text", "text": "notes:\n\nbuy milk"},
        {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}",
                                  "filename": "document"}}]}]


def test_an_image_in_a_tool_result_follows_the_results_to_an_openai_upstream(upstream,
                                                                            to_openai):
    """OpenAI tool messages carry text only: the result's text stays, its image comes
    right after the results in a user message, both sides saying so."""
    upstream.replies.append(chat_reply("a screenshot"))
    an(to_openai).messages.create(model="gpt-4o", max_tokens=20, tools=[READ], messages=[
        {"role": "user", "content": "show me shot.png"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                           "name": "read_file", "input": {"path": "shot.png"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                {"type": "text", "text": "shot.png (1x1)"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": PNG}}]},
            {"type": "text", "text": "what does it show?"}]}])
    msgs = sent(upstream)["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "user", "user"]
    assert msgs[2]["content"] == ("shot.png (1x1)\n\n"
                                  "[see the next message for the image of this result]")
    assert msgs[3]["content"] == [
        {"type": "text", "text": "[image of the result of call toolu_1:]"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]
    assert msgs[4]["content"] == "what does it show?"


def test_openai_client_media_reach_an_anthropic_upstream(upstream, to_anthropic):
    upstream.replies.append(messages_reply("a dot"))
    r = oa(to_anthropic).chat.completions.create(model="claude-sonnet-4-5", messages=[
        {"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/b.png"}},
            {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}",
                                      "filename": "a.pdf"}}]}])
    assert r.choices[0].message.content == "a dot"
    assert sent(upstream)["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/b.png"}},
        {"type": "document", "title": "a.pdf", "source": {
            "type": "base64", "media_type": "application/pdf", "data": PDF}}]}]


def test_anthropic_to_anthropic_keeps_images_inside_tool_results(upstream, to_anthropic):
    upstream.replies.append(messages_reply())
    an(to_anthropic).messages.create(model="claude-sonnet-4-5", max_tokens=20, tools=[READ],
                                     messages=[
        {"role": "user", "content": "read shot.png"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                           "name": "read_file", "input": {"path": "shot.png"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "image", "source": {
                                          "type": "base64", "media_type": "image/png",
                                          "data": PNG}}]}]}])
    result = sent(upstream)["messages"][2]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1"
    assert result["content"] == [{"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": PNG}}]


def test_responses_client_image_reaches_a_chat_upstream(upstream, to_openai):
    upstream.replies.append(chat_reply("cat"))
    r = oa(to_openai).responses.create(model="gpt-4o", input=[{"role": "user", "content": [
        {"type": "input_text", "text": "what animal?"},
        {"type": "input_image", "image_url": "https://example.com/cat.jpg", "detail": "auto"}]}])
    assert r.output_text == "cat"
    assert sent(upstream)["messages"][0]["content"] == [
        {"type": "text", "text": "what animal?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}]


def test_openai_client_audio_reaches_an_openai_upstream_streamed(upstream, to_openai):
    upstream.replies.append(chat_reply("hello"))
    stream = oa(to_openai).chat.completions.create(model="gpt-4o-audio-preview", stream=True,
                                                   messages=[{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}]}])
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "hello"
    assert sent(upstream)["messages"][0]["content"] == [
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}]


# ---------------------------------------------------------------- refused, never dropped

SERVER_TOOL_HISTORY = [
    {"role": "user", "content": "news about llamas?"},
    {"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
         "input": {"query": "llamas"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        {"type": "text", "text": "Nothing new."}]},
    {"role": "user", "content": "thanks"}]


@pytest.mark.parametrize("stream", [False, True])
def test_server_tool_blocks_are_refused_in_the_anthropic_shape(upstream, to_anthropic, stream):
    with pytest.raises(anthropic.BadRequestError) as e:
        an(to_anthropic).messages.create(model="claude-sonnet-4-5", max_tokens=20,
                                         messages=SERVER_TOOL_HISTORY, stream=stream)
    err = e.value.body["error"]
    assert e.value.status_code == 400 and err["type"] == "invalid_request_error"
    msg = err["message"]
    assert "messages[1], block 0" in msg and "'server_tool_use'" in msg
    assert "Remove the server tool blocks" in msg
    assert upstream.requests == []  # nothing went upstream


def test_an_unknown_block_is_refused_not_dropped(upstream, to_openai):
    with pytest.raises(anthropic.BadRequestError) as e:
        an(to_openai).messages.create(model="gpt-4o", max_tokens=20, messages=[
            {"role": "user", "content": [{"type": "text", "text": "hi"},
                                         {"type": "container_upload", "file_id": "file_1"}]}])
    msg = e.value.body["error"]["message"]
    assert "messages[0], block 1" in msg and "'container_upload'" in msg
    assert upstream.requests == []


def test_audio_to_an_upstream_without_audio_is_refused_in_the_openai_shape(upstream,
                                                                           to_anthropic):
    with pytest.raises(openai.BadRequestError) as e:
        oa(to_anthropic).chat.completions.create(model="claude-sonnet-4-5", messages=[
            {"role": "user", "content": "transcribe this"},
            {"role": "user", "content": [
                {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}]}])
    err = e.value.body.get("error", e.value.body)
    assert e.value.status_code == 400 and err["type"] == "invalid_request_error"
    assert "messages[1], block 0" in err["message"] and "an audio part (base64 audio/wav)" in \
        err["message"] and "'anthropic'" in err["message"]
    assert upstream.requests == []


def test_an_image_to_a_text_only_model_is_refused(upstream, to_openai):
    """gemma-3-270m's rules say it takes text only (capability input_media: [])."""
    with pytest.raises(anthropic.BadRequestError) as e:
        an(to_openai).messages.create(model="google/gemma-3-270m-it", max_tokens=20,
                                      messages=[{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": PNG}}]}], stream=True)
    msg = e.value.body["error"]["message"]
    assert "messages[0], block 1" in msg and "takes text only" in msg and "input_media" in msg
    assert upstream.requests == []
    upstream.replies.append(chat_reply("a dot"))  # a model that reads images gets it
    an(to_openai).messages.create(model="google/gemma-3-27b-it", max_tokens=20, messages=[
        {"role": "user", "content": [{"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": PNG}}]}])
    assert sent(upstream)["messages"][0]["content"][0]["type"] == "image_url"


def test_responses_items_the_proxy_cannot_relay_are_refused(upstream, to_openai):
    with pytest.raises(openai.BadRequestError) as e:
        oa(to_openai).responses.create(model="gpt-4o", input=[
            {"role": "user", "content": "search"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed",
             "action": {"type": "search", "query": "x"}},
            {"role": "user", "content": "and?"}])
    msg = e.value.body["error"]["message"] if "error" in e.value.body else \
        e.value.body["message"]
    assert "input[1]" in msg and "web_search_call" in msg
    assert upstream.requests == []


# ---------------------------------------------------------------- the engine underneath

def test_build_request_refuses_what_the_provider_cannot_write():
    eng = toolrules.load()
    by_url = Message(role="user", content=(ContentPart("text", text="look"),
                                           ContentPart("image", url="https://x/y.png")))
    with pytest.raises(UnsupportedContentError) as e:
        eng.build_request("ollama", "llava", [by_url])
    assert e.value.part_type == "image" and e.value.where == "messages[0], part 1"
    assert "given by URL" in str(e.value) and "'ollama'" in str(e.value)
    inline = Message(role="user", content=(ContentPart("text", text="look"),
                                           ContentPart("image", url=f"data:image/png;base64,{PNG}")))
    body = eng.build_request("ollama", "llava", [inline])
    assert body["messages"] == [{"role": "user", "content": "look", "images": [PNG]}]
    with pytest.raises(UnsupportedContentError):
        eng.build_request("cohere", "command-r", [inline])


def test_an_emulated_model_gets_a_results_image_after_the_text():
    """A model without native tools sees results as text turns: the image travels with
    that turn, not in a JSON dump."""
    eng = toolrules.load()
    history = [Message(role="user", content="read shot.png"),
               Message(role="assistant", tool_calls=(toolrules.ToolCall(
                   "c1", "read_file", {"path": "shot.png"}),)),
               Message(role="tool", tool_call_id="c1", name="read_file", content=(
                   ContentPart("text", text="shot.png"),
                   ContentPart("image", media_type="image/png", data=PNG)))]
    out = eng.emulate_history(history, [READ], "google/gemma-3-27b-it")
    last = out[-1]
    assert isinstance(last.content, tuple) and last.content[0].type == "text"
    assert "shot.png" in (last.content[0].text or "")
    assert last.content[1] == ContentPart("image", media_type="image/png", data=PNG)
    wire = eng.build_request("openai-compatible", "google/gemma-3-27b-it", history,
                             tools=[READ])["messages"]
    assert wire[-1]["content"][-1] == {"type": "image_url", "image_url": {
        "url": f"data:image/png;base64,{PNG}"}}
    assert json.dumps(wire).count(PNG) == 1
