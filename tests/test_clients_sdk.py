"""The test servers speak the real protocols: the official `openai` and `anthropic` SDKs
read the same replies the client tests use (golden provider bodies and event streams),
streamed and not, tool calls included."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import REPO
from wire_server import WireServer, json_reply, sse_reply

CASES = REPO / "golden" / "providers"


def cases(provider: str) -> dict:
    return yaml.safe_load((CASES / f"{provider}.cases.yaml").read_text())


TOOL = {"type": "function", "function": {"name": "search_docs", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}}}}


def test_openai_sdk_reads_chat_completions():
    openai = pytest.importorskip("openai")
    data = cases("openai")
    with WireServer() as srv:
        srv.replies.extend([json_reply(data["responses"]["tool_calls"]),
                            sse_reply(data["streams"]["tool_calls"]["events"])])
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="sk-test", max_retries=0)
        msgs = [{"role": "user", "content": "rate limits?"}]
        done = client.chat.completions.create(model="gpt-4o", messages=msgs, tools=[TOOL])
        calls = done.choices[0].message.tool_calls
        assert [(c.id, c.function.name) for c in calls] == [("call_a1", "search_docs"),
                                                            ("call_a2", "get_time")]
        assert json.loads(calls[0].function.arguments)["query"] == "rate limits"
        args: dict[int, str] = {}
        names: dict[int, str] = {}
        finish = None
        for chunk in client.chat.completions.create(model="gpt-4o", messages=msgs, tools=[TOOL],
                                                    stream=True):
            for tc in chunk.choices[0].delta.tool_calls or []:
                args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
                if tc.function.name:
                    names[tc.index] = tc.function.name
            finish = chunk.choices[0].finish_reason or finish
    assert names == {0: "search_docs", 1: "get_time"} and finish == "tool_calls"
    assert json.loads(args[0])["tags"] == ["api"]
    assert srv.requests[0].path == srv.requests[1].path == "/v1/chat/completions"


def test_openai_sdk_reads_responses_stream():
    openai = pytest.importorskip("openai")
    data = cases("openai-responses")
    with WireServer() as srv:
        srv.replies.extend([json_reply(data["responses"]["function_calls"]),
                            sse_reply(data["streams"]["function_calls"]["events"], named=True)])
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="sk-test", max_retries=0)
        done = client.responses.create(model="gpt-4.1", input="rate limits?")
        assert [o.type for o in done.output if o.type == "function_call"]
        types = [ev.type for ev in client.responses.create(model="gpt-4.1", input="x",
                                                           stream=True)]
    assert "response.function_call_arguments.delta" in types and types[-1] == "response.completed"


def test_anthropic_sdk_reads_messages():
    anthropic = pytest.importorskip("anthropic")
    data = cases("anthropic")
    with WireServer() as srv:
        srv.replies.extend([json_reply(data["responses"]["tool_use"]),
                            sse_reply(data["streams"]["tool_use"]["events"], named=True)])
        client = anthropic.Anthropic(base_url=srv.url, api_key="sk-ant-test", max_retries=0)
        msgs = [{"role": "user", "content": "rate limits?"}]
        done = client.messages.create(model="claude-test", max_tokens=100, messages=msgs)
        uses = [b for b in done.content if b.type == "tool_use"]
        assert uses and uses[0].name == "search_docs" and done.stop_reason == "tool_use"
        with client.messages.stream(model="claude-test", max_tokens=100,
                                    messages=msgs) as stream:
            final = stream.get_final_message()
    streamed = [(b.name, b.input) for b in final.content if b.type == "tool_use"]
    assert streamed == [(u.name, u.input) for u in uses]
    assert srv.requests[0].path == srv.requests[1].path == "/v1/messages"
