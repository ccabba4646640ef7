"""`toolrules serve` over real HTTP on 127.0.0.1: the official `openai` and `anthropic`
SDKs as clients, scripted upstreams (tests/wire_server.py) behind the proxy.

Native upstreams (passthrough), upstreams that answer tool calls as raw text (parsed
back into tool calls), emulated upstreams (a coding agent's schemas on a local coder model,
simplified, validated and retried), multi-turn conversations with tool results, both
streamed and not, and the OpenAI Responses API."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import jsonschema
import pytest

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated")

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import anthropic  # noqa: E402
import openai  # noqa: E402

from serve_helpers import ProxyServer  # noqa: E402
from wire_server import Reply, Seen, WireServer, json_reply, sse_reply  # noqa: E402

WEATHER = {"name": "get_weather", "description": "Current weather for a city.",
           "input_schema": {"type": "object", "properties": {
               "city": {"type": "string"},
               "unit": {"type": "string", "enum": ["c", "f"]}},
               "required": ["city"]}}
WEATHER_OPENAI = {"type": "function", "function": {
    "name": WEATHER["name"], "description": WEATHER["description"],
    "parameters": WEATHER["input_schema"]}}


# ---------------------------------------------------------------- upstream replies

def chat_body(content: str | None = None, calls: list[tuple[str, str, dict[str, Any]]] = (),
              finish: str = "stop", usage: dict[str, int] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = [{"id": cid, "type": "function",
                              "function": {"name": name, "arguments": json.dumps(args)}}
                             for cid, name, args in calls]
    body = {"id": "chatcmpl-up", "object": "chat.completion", "created": 1, "model": "up",
            "choices": [{"index": 0, "message": msg, "finish_reason": finish}]}
    if usage:
        body["usage"] = usage
    return body


def chat_reply(*a: Any, **kw: Any) -> Reply:
    return json_reply(chat_body(*a, **kw))


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "up",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def text_stream(pieces: list[str], **kw: Any) -> Reply:
    events: list[Any] = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": p}) for p in pieces]
    events += [chunk({}, "stop"), "data: [DONE]"]
    return sse_reply(events, **kw)


def calls_stream(text: str, calls: list[tuple[str, str, dict[str, Any]]]) -> Reply:
    events: list[Any] = [chunk({"role": "assistant", "content": text})]
    for i, (cid, name, args) in enumerate(calls):
        raw = json.dumps(args)
        events.append(chunk({"tool_calls": [{"index": i, "id": cid, "type": "function",
                                             "function": {"name": name, "arguments": ""}}]}))
        for part in (raw[:5], raw[5:]):
            events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
    events += [chunk({}, "tool_calls"), "data: [DONE]"]
    return sse_reply(events)


@pytest.fixture
def upstream():
    with WireServer() as srv:
        yield srv


@pytest.fixture
def passthrough(upstream):
    """The proxy in front of an OpenAI-compatible server; the client's model name passes
    through, so each model's rules decide."""
    with ProxyServer(upstream="openai-compatible", base_url=upstream.url + "/v1") as proxy:
        yield proxy


def oa(proxy: ProxyServer, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=kw.pop("api_key", "unused"),
                         max_retries=0, **kw)


def an(proxy: ProxyServer, **kw: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key=kw.pop("api_key", "unused"),
                               max_retries=0, **kw)


# ---------------------------------------------------------------- native upstream

def test_openai_client_native_upstream_passthrough(upstream, passthrough):
    upstream.replies.append(chat_reply(None, [("call_1", "get_weather", {"city": "Paris"})],
                                       "tool_calls", usage={"prompt_tokens": 11,
                                                            "completion_tokens": 7}))
    r = oa(passthrough).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "weather in Paris?"}],
        tools=[WEATHER_OPENAI], max_tokens=50, temperature=0.2)
    call = r.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == \
        ("call_1", "get_weather", {"city": "Paris"})
    assert r.choices[0].finish_reason == "tool_calls"
    assert r.model == "gpt-4o"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (11, 7)  # the upstream's
    sent = upstream.requests[-1].json()
    assert sent["model"] == "gpt-4o" and sent["tools"][0]["function"]["name"] == "get_weather"
    assert sent["temperature"] == 0.2 and sent["max_tokens"] == 50
    assert "authorization" not in upstream.requests[-1].headers  # no key to a local server


def test_openai_client_native_stream_and_multi_turn(upstream, passthrough):
    upstream.replies.append(calls_stream("Checking.", [("call_7", "get_weather",
                                                        {"city": "Oslo", "unit": "c"})]))
    client = oa(passthrough)
    stream = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "weather in Oslo?"}],
        tools=[WEATHER_OPENAI], stream=True)
    text, args, ids, finish = "", {}, {}, None
    for ch in stream:
        d = ch.choices[0].delta
        text += d.content or ""
        for tc in d.tool_calls or ():
            if tc.id:
                ids[tc.index] = (tc.id, tc.function.name)
            args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
        finish = ch.choices[0].finish_reason or finish
    assert text == "Checking."
    assert ids == {0: ("call_7", "get_weather")}
    assert json.loads(args[0]) == {"city": "Oslo", "unit": "c"}
    assert finish == "tool_calls"
    # turn 2: the tool result goes upstream as a tool message
    upstream.replies.append(chat_reply("It is 3 degrees."))
    r = client.chat.completions.create(model="gpt-4o", tools=[WEATHER_OPENAI], messages=[
        {"role": "user", "content": "weather in Oslo?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_7", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_7", "content": "3 C, cloudy"}])
    assert r.choices[0].message.content == "It is 3 degrees."
    sent = upstream.requests[-1].json()["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_7", "content": "3 C, cloudy"}
    assert sent[-2]["tool_calls"][0]["id"] == "call_7"


def test_anthropic_client_native_upstream(upstream, passthrough):
    upstream.replies.append(chat_reply("On it.", [("call_ab", "get_weather", {"city": "Rome"})],
                                       "tool_calls"))
    m = an(passthrough).messages.create(
        model="gpt-4o", max_tokens=64, tools=[WEATHER],
        messages=[{"role": "user", "content": "weather in Rome?"}])
    assert [b.type for b in m.content] == ["text", "tool_use"]
    assert m.content[1].name == "get_weather" and m.content[1].input == {"city": "Rome"}
    assert m.stop_reason == "tool_use"
    # turn 2: tool_result blocks become OpenAI tool messages upstream
    upstream.replies.append(chat_reply("Sunny in Rome."))
    m2 = an(passthrough).messages.create(model="gpt-4o", max_tokens=64, tools=[WEATHER], messages=[
        {"role": "user", "content": "weather in Rome?"},
        {"role": "assistant", "content": [{"type": "text", "text": "On it."},
                                          {"type": "tool_use", "id": m.content[1].id,
                                           "name": "get_weather", "input": {"city": "Rome"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": m.content[1].id,
                                      "content": "sunny, 24 C"}]}])
    assert m2.content[0].text == "Sunny in Rome." and m2.stop_reason == "end_turn"
    sent = upstream.requests[-1].json()["messages"]
    assert sent[-1]["role"] == "tool" and sent[-1]["content"] == "sunny, 24 C"
    assert sent[-2]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_anthropic_client_native_stream(upstream, passthrough):
    upstream.replies.append(calls_stream("", [("c1", "get_weather", {"city": "A"}),
                                              ("c2", "get_weather", {"city": "B"})]))
    with an(passthrough).messages.stream(model="gpt-4o", max_tokens=64, tools=[WEATHER],
                                         messages=[{"role": "user", "content": "A and B?"}]) as s:
        kinds = [ev.type for ev in s]
        final = s.get_final_message()
    assert [b.input for b in final.content] == [{"city": "A"}, {"city": "B"}]
    assert final.stop_reason == "tool_use"
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"


# ---------------------------------------------------------------- calls as raw text

RAW = ('I will look it up.\n<tool_call>\n{"name": "get_weather", "arguments": '
       '{"city": "Paris", "unit": "c"}}\n</tool_call>')


def test_raw_text_calls_become_tool_calls(upstream, passthrough):
    """A server without a tool parser hands Qwen's calls back as text: the client gets
    real calls, the markers never reach it."""
    upstream.replies.append(chat_reply(RAW))
    m = an(passthrough).messages.create(model="Qwen/Qwen3-8B", max_tokens=64, tools=[WEATHER],
                                        messages=[{"role": "user", "content": "Paris?"}])
    assert m.content[0].text == "I will look it up."
    assert (m.content[1].name, m.content[1].input) == ("get_weather", {"city": "Paris", "unit": "c"})
    assert m.stop_reason == "tool_use"
    upstream.replies.append(chat_reply(RAW))
    r = oa(passthrough).chat.completions.create(model="Qwen/Qwen3-8B", tools=[WEATHER_OPENAI],
                                                messages=[{"role": "user", "content": "Paris?"}])
    msg = r.choices[0].message
    assert "<tool_call>" not in (msg.content or "")
    assert json.loads(msg.tool_calls[0].function.arguments) == {"city": "Paris", "unit": "c"}


@pytest.mark.parametrize("size", [1, 7, 1000])
def test_raw_text_calls_streamed_in_any_pieces(upstream, passthrough, size):
    upstream.replies.append(text_stream([RAW[i:i + size] for i in range(0, len(RAW), size)]))
    with an(passthrough).messages.stream(model="Qwen/Qwen3-8B", max_tokens=64, tools=[WEATHER],
                                         messages=[{"role": "user", "content": "Paris?"}]) as s:
        texts = [ev.text for ev in s if ev.type == "text"]
        final = s.get_final_message()
    assert "".join(texts) == "I will look it up."
    assert [(b.type, getattr(b, "input", None)) for b in final.content] == [
        ("text", None), ("tool_use", {"city": "Paris", "unit": "c"})]
    upstream.replies.append(text_stream([RAW[i:i + size] for i in range(0, len(RAW), size)]))
    chunks = list(oa(passthrough).chat.completions.create(
        model="Qwen/Qwen3-8B", tools=[WEATHER_OPENAI], stream=True,
        messages=[{"role": "user", "content": "Paris?"}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert text == "I will look it up." and "<tool" not in text
    assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == \
        {"city": "Paris", "unit": "c"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_cut_off_call_is_never_delivered(upstream, passthrough):
    """max_tokens cut the call: the client gets text, never half a call."""
    upstream.replies.append(chat_reply(RAW[:-30], finish="length"))
    m = an(passthrough).messages.create(model="Qwen/Qwen3-8B", max_tokens=64, tools=[WEATHER],
                                        messages=[{"role": "user", "content": "Paris?"}])
    assert [b.type for b in m.content] == ["text"] and m.stop_reason == "max_tokens"


# ---------------------------------------------------------------- OpenAI Responses

def test_responses_api_with_tools(upstream, passthrough):
    client = oa(passthrough)
    upstream.replies.append(chat_reply(RAW))
    r = client.responses.create(model="Qwen/Qwen3-8B", input="weather in Paris?",
                                tools=[{"type": "function", **WEATHER_OPENAI["function"]}])
    kinds = [item.type for item in r.output]
    assert kinds == ["message", "function_call"]
    fc = r.output[1]
    assert fc.name == "get_weather" and json.loads(fc.arguments) == {"city": "Paris", "unit": "c"}
    # turn 2: function_call_output goes upstream as a tool message
    upstream.replies.append(chat_reply("Mild."))
    r2 = client.responses.create(model="Qwen/Qwen3-8B", input=[
        {"role": "user", "content": "weather in Paris?"},
        {"type": "function_call", "call_id": fc.call_id, "name": "get_weather",
         "arguments": fc.arguments},
        {"type": "function_call_output", "call_id": fc.call_id, "output": "14 C"}],
        tools=[{"type": "function", **WEATHER_OPENAI["function"]}])
    assert r2.output_text == "Mild."
    sent = upstream.requests[-1].json()["messages"]
    assert sent[-1]["role"] == "tool" and sent[-1]["content"] == "14 C"


def test_responses_api_stream(upstream, passthrough):
    upstream.replies.append(text_stream([RAW[:20], RAW[20:]]))
    with oa(passthrough).responses.stream(
            model="Qwen/Qwen3-8B", input="weather in Paris?",
            tools=[{"type": "function", **WEATHER_OPENAI["function"]}]) as s:
        events = [ev for ev in s]
        final = s.get_final_response()
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "response.function_call_arguments.done" in types
    assert final.output_text == "I will look it up."
    fc = next(o for o in final.output if o.type == "function_call")
    assert json.loads(fc.arguments) == {"city": "Paris", "unit": "c"}


# ---------------------------------------------------------------- other endpoints

def test_models_count_tokens_and_health(upstream, tmp_path):
    cfg = f"""
routes:
  - model: claude-sonnet-4-5
    upstream: {{provider: openai-compatible, model: qwen3-coder, base_url: {upstream.url}/v1}}
  - model: local-qwen
    upstream: {{provider: openai-compatible, model: qwen3-coder, base_url: {upstream.url}/v1}}
"""
    with ProxyServer(config=cfg, tmp=tmp_path) as proxy:
        assert [m.id for m in oa(proxy).models.list()] == ["claude-sonnet-4-5", "local-qwen"]
        assert [m.id for m in an(proxy).models.list()] == ["claude-sonnet-4-5", "local-qwen"]
        n = an(proxy).messages.count_tokens(model="claude-sonnet-4-5", tools=[WEATHER],
                                            messages=[{"role": "user", "content": "hi " * 100}])
        assert 50 < n.input_tokens < 400
        assert httpx.get(proxy.url + "/health").json()["status"] == "ok"
        # an unknown model: 404 in the client's shape
        with pytest.raises(anthropic.NotFoundError) as e:
            an(proxy).messages.create(model="nope", max_tokens=5,
                                      messages=[{"role": "user", "content": "x"}])
        assert e.value.body["error"]["type"] == "not_found_error"


def test_concurrent_requests_never_mix(tmp_path):
    """Each answer belongs to its own request, under 24 concurrent clients."""
    def echo(seen: Seen) -> Reply:
        last = seen.json()["messages"][-1]["content"]
        return chat_reply(f"echo {last}")

    with WireServer(responder=echo) as up, \
            ProxyServer(upstream="openai-compatible", base_url=up.url + "/v1") as proxy:
        results: dict[int, Any] = {}

        def one(i: int) -> None:
            client = oa(proxy)
            if i % 2:
                r = client.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": f"n{i}"}])
                results[i] = r.choices[0].message.content
            else:
                m = an(proxy).messages.create(model="gpt-4o", max_tokens=5,
                                              messages=[{"role": "user", "content": f"n{i}"}])
                results[i] = m.content[0].text

        threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert results == {i: f"echo n{i}" for i in range(24)}


# ---------------------------------------------------------------- a coding agent, end to end

AGENT_TOOLS: list[dict[str, Any]] = [
    {"name": "Bash", "description": "Executes a bash command in a persistent shell session "
     "with an optional timeout, with proper handling and security measures. " * 3,
     "input_schema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                      "properties": {
                          "command": {"type": "string", "description": "The command to run"},
                          "timeout": {"type": "number", "description": "Timeout in ms (max 600000)"},
                          "description": {"type": "string",
                                          "description": "What the command does, in 5-10 words"},
                          "run_in_background": {"type": "boolean"}},
                      "required": ["command"], "additionalProperties": False}},
    {"name": "Read", "description": "Reads a file from the local filesystem.",
     "input_schema": {"type": "object", "properties": {
         "file_path": {"type": "string", "description": "Absolute path of the file"},
         "offset": {"type": "number"}, "limit": {"type": "number"}},
         "required": ["file_path"], "additionalProperties": False}},
    {"name": "Edit", "description": "Exact string replacement in a file.",
     "input_schema": {"type": "object", "properties": {
         "file_path": {"type": "string"}, "old_string": {"type": "string"},
         "new_string": {"type": "string"},
         "replace_all": {"type": "boolean", "default": False}},
         "required": ["file_path", "old_string", "new_string"], "additionalProperties": False}},
    {"name": "Write", "description": "Writes a file to the local filesystem.",
     "input_schema": {"type": "object", "properties": {
         "file_path": {"type": "string"}, "content": {"type": "string"}},
         "required": ["file_path", "content"], "additionalProperties": False}},
    {"name": "Glob", "description": "Fast file pattern matching.",
     "input_schema": {"type": "object", "properties": {
         "pattern": {"type": "string"}, "path": {"type": "string"}},
         "required": ["pattern"], "additionalProperties": False}},
    {"name": "Grep", "description": "A powerful search tool built on ripgrep.",
     "input_schema": {"type": "object", "properties": {
         "pattern": {"type": "string"}, "path": {"type": "string"}, "glob": {"type": "string"},
         "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
         "-i": {"type": "boolean"}, "-n": {"type": "boolean"}, "-A": {"type": "number"},
         "head_limit": {"type": "number"}, "multiline": {"type": "boolean"}},
         "required": ["pattern"], "additionalProperties": False}},
    {"name": "TodoWrite", "description": "Create and manage a structured task list.",
     "input_schema": {"type": "object", "properties": {
         "todos": {"type": "array", "items": {
             "type": "object", "properties": {
                 "content": {"type": "string", "minLength": 1},
                 "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                 "activeForm": {"type": "string", "minLength": 1}},
             "required": ["content", "status", "activeForm"], "additionalProperties": False}}},
         "required": ["todos"], "additionalProperties": False}},
]
SCHEMAS = {t["name"]: t["input_schema"] for t in AGENT_TOOLS}

AGENT_ROUTE = """
routes:
  - model: claude-sonnet-4-5
    upstream:
      provider: lmstudio
      model: qwen/qwen3-coder-30b
      model_id: Qwen/Qwen3-Coder-30B-A3B-Instruct
      base_url: %s/v1
    tools:
      mode: emulate
      schema_strategy: weak
      prompt_guidance: true
      validation_retries: 2
"""


class FakeQwen:
    """An upstream that answers in whatever format the proxy's prompt asked for: first a
    TodoWrite call missing `activeForm` (invalid), then - given the feedback - valid calls."""

    def __init__(self) -> None:
        self.engine: Any = None
        self.model_id = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
        self.stream = False

    def calls(self, fixed: bool) -> list[dict[str, Any]]:
        todo = {"content": "Find the config loader", "status": "in_progress"}
        if fixed:
            todo["activeForm"] = "Finding the config loader"
        return [{"name": "TodoWrite", "arguments": {"todos": [todo]}},
                {"name": "Grep", "arguments": {"pattern": "def load_config",
                                               "output_mode": "files_with_matches", "-n": True}}]

    def __call__(self, seen: Seen) -> Reply:
        body = seen.json()
        text_in = json.dumps(body["messages"])
        fixed = "activeForm" in text_in and any(
            m["role"] != "system" and "activeForm" in json.dumps(m) for m in body["messages"][1:])
        calls = self.calls(fixed)
        written = self.engine.render_call(calls, [t for t in AGENT_TOOLS], self.model_id)
        answer = "I'll plan this and search.\n\n" + written
        if body.get("stream"):
            return text_stream([answer[i:i + 9] for i in range(0, len(answer), 9)])
        return chat_reply(answer)


@pytest.mark.parametrize("stream", [False, True])
def test_coding_agent_tools_through_an_emulated_upstream(tmp_path, stream):
    fake = FakeQwen()
    with WireServer(responder=fake) as up, \
            ProxyServer(config=AGENT_ROUTE % up.url, tmp=tmp_path) as proxy:
        fake.engine = proxy.config.routes[0].engine
        client = an(proxy)
        kwargs = dict(model="claude-sonnet-4-5", max_tokens=1024, tools=AGENT_TOOLS,
                      system="You are a coding agent.",
                      messages=[{"role": "user", "content": "Where is the config loaded?"}])
        if stream:
            with client.messages.stream(**kwargs) as s:
                for _ in s:
                    pass
                m = s.get_final_message()
        else:
            m = client.messages.create(**kwargs)
        uses = [b for b in m.content if b.type == "tool_use"]
        assert [u.name for u in uses] == ["TodoWrite", "Grep"]
        for u in uses:  # valid against the ORIGINAL schemas, in the original shape
            jsonschema.validate(u.input, SCHEMAS[u.name])
        assert uses[0].input["todos"][0]["activeForm"] == "Finding the config loader"
        assert uses[1].input == {"pattern": "def load_config", "output_mode": "files_with_matches",
                                 "-n": True}
        assert m.stop_reason == "tool_use"
        assert [b.text for b in m.content if b.type == "text"] == ["I'll plan this and search."]
        assert len({u.id for u in uses}) == 2
        # two upstream turns: the invalid call went back with feedback first
        assert len(up.requests) == 2
        first, second = up.requests[0].json(), up.requests[1].json()
        for body in (first, second):
            assert "tools" not in body  # emulated: the tools are in the prompt
            assert body["model"] == "qwen/qwen3-coder-30b"
            assert {msg["role"] for msg in body["messages"]} <= {"system", "user", "assistant"}
        prompt = first["messages"][0]["content"]
        assert prompt.startswith("You are a coding agent.")
        assert all(t["name"] in prompt for t in AGENT_TOOLS)
        assert "additionalProperties" not in prompt  # the weak schema strategy
        feedback = json.dumps(second["messages"][-1])
        assert "activeForm" in feedback


def test_emulated_multi_turn_history_goes_upstream_as_text(tmp_path):
    fake = FakeQwen()
    with WireServer(responder=lambda s: chat_reply("Found it in config.py.")) as up, \
            ProxyServer(config=AGENT_ROUTE % up.url, tmp=tmp_path) as proxy:
        fake.engine = proxy.config.routes[0].engine
        m = an(proxy).messages.create(
            model="claude-sonnet-4-5", max_tokens=256, tools=AGENT_TOOLS, messages=[
                {"role": "user", "content": "Where is the config loaded?"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_01", "name": "Grep",
                     "input": {"pattern": "def load_config"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01",
                     "content": "src/config.py:12:def load_config(path):"}]}])
        assert m.content[0].text == "Found it in config.py." and m.stop_reason == "end_turn"
        sent = up.requests[-1].json()["messages"]
        assert [x["role"] for x in sent] == ["system", "user", "assistant", "user"]
        assert "def load_config" in sent[2]["content"]          # the call, as text
        assert "src/config.py:12" in sent[3]["content"]          # its result, as text


def test_text_fallback_only_when_configured(tmp_path):
    prose = "Let me use the Glob tool to look around."
    cfg = AGENT_ROUTE.replace("validation_retries: 2", "validation_retries: 0") + \
        "      text_fallback: {on}\n"
    for on, want in (("false", []), ("true", ["Glob"])):
        with WireServer(responder=lambda s: chat_reply(prose)) as up, \
                ProxyServer(config=cfg.format(on=on) % up.url, tmp=tmp_path) as proxy:
            m = an(proxy).messages.create(model="claude-sonnet-4-5", max_tokens=64,
                                          tools=AGENT_TOOLS,
                                          messages=[{"role": "user", "content": "list files"}])
            assert [b.name for b in m.content if b.type == "tool_use"] == want


# ---------------------------------------------------------------- configuration

def test_config_errors_are_line_marked(engine, tmp_path):
    from toolrules import RuleError
    from toolrules.serve import load_config

    bad = tmp_path / "proxy.yaml"
    bad.write_text("routes:\n  - model: m\n    upstream: {provider: openai-compatibel}\n"
                   "    tools: {schema_strategy: weakest, mode: sometimes}\n", encoding="utf-8")
    with pytest.raises(RuleError) as e:
        load_config(engine, bad)
    text = str(e.value)
    assert "proxy.yaml:4:" in text and "mode" in text
    bad.write_text("routes:\n  - model: m\n    upstream: {provider: openai-compatibel}\n"
                   "    tools: {schema_strategy: weakest}\n", encoding="utf-8")
    with pytest.raises(RuleError) as e:
        load_config(engine, bad)
    text = str(e.value)
    assert "proxy.yaml:3:" in text and "did you mean 'openai-compatible'" in text
    assert "proxy.yaml:4:" in text and "weakest" in text


def test_route_options_become_the_capability(engine, tmp_path):
    from toolrules.serve import load_config

    path = tmp_path / "p.yaml"
    path.write_text(AGENT_ROUTE % "http://127.0.0.1:9", encoding="utf-8")
    route = load_config(engine, path).routes[0]
    model_id = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
    assert engine.sends_native_tools(model_id)            # the rules say native ...
    assert not route.engine.sends_native_tools(model_id)  # ... the route says emulate
    assert route.engine.capability(model_id).schema_strategy == "weak"
    assert route.engine.capability("some-other-model") == engine.capability("some-other-model")


def test_cli_check_prints_routes(tmp_path):
    from click.testing import CliRunner

    from toolrules.cli import main

    path = tmp_path / "p.yaml"
    path.write_text(AGENT_ROUTE % "http://127.0.0.1:9", encoding="utf-8")
    res = CliRunner().invoke(main, ["serve", "--config", str(path), "--check"])
    assert res.exit_code == 0, res.output
    assert "claude-sonnet-4-5 -> lmstudio:qwen/qwen3-coder-30b" in res.output
    assert "emulated" in res.output
    res = CliRunner().invoke(main, ["serve", "--check"])
    assert res.exit_code == 2 and "no routes" in res.output


def test_trace_is_redacted_and_replays(upstream, tmp_path):
    from click.testing import CliRunner

    from toolrules.cli import main

    trace_dir = tmp_path / "traces"
    upstream.replies.append(chat_reply(RAW))
    with ProxyServer(upstream="openai-compatible", base_url=upstream.url + "/v1",
                     trace_dir=str(trace_dir)) as proxy:
        an(proxy).messages.create(model="Qwen/Qwen3-8B", max_tokens=64, tools=[WEATHER],
                                  messages=[{"role": "user", "content":
                                             "Paris? my key is sk-abcdefghijklmnopqrstuvwx"}])
    (path,) = list(trace_dir.glob("*.jsonl"))
    text = path.read_text()
    assert "sk-abcdefghijklmnopqrstuvwx" not in text
    records = [json.loads(line) for line in text.splitlines()]
    assert [r["type"] for r in records] == ["start", "turn", "done"]
    assert records[0]["source"] == "serve"
    assert records[-1]["calls"][0]["arguments"] == {"city": "Paris", "unit": "c"}
    res = CliRunner().invoke(main, ["replay", str(path)])
    assert res.exit_code == 0, res.output
    assert "no divergence" in res.output


def test_constrained_route_puts_the_call_grammar_in_the_request(tmp_path):
    """`constrained: true`: the upstream's rule says where the grammar goes (llama.cpp's
    `grammar` field, GBNF) - the call the model is held to is the one the prompt asks for."""
    cfg = """
routes:
  - model: local
    upstream: {provider: llamacpp, model: gemma-3-270m, base_url: %s/v1}
    tools: {constrained: true}
"""
    import toolrules

    if not toolrules.load().provider_rules("llamacpp").data.get("constrained"):
        pytest.skip("the llamacpp rule has no `constrained:` section here")
    answer = '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'
    with WireServer(responder=lambda s: chat_reply(answer)) as up, \
            ProxyServer(config=cfg % up.url, tmp=tmp_path) as proxy:
        m = an(proxy).messages.create(model="local", max_tokens=64, tools=[WEATHER],
                                      tool_choice={"type": "any"},
                                      messages=[{"role": "user", "content": "Paris?"}])
        sent = up.requests[-1].json()
    assert "tools" not in sent  # emulated: Gemma 3 has no native tools
    assert "get_weather" in sent["grammar"] and "::=" in sent["grammar"]
    assert [(b.name, b.input) for b in m.content if b.type == "tool_use"] == \
        [("get_weather", {"city": "Paris"})]
