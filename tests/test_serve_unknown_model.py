"""`toolrules serve` with a model id no family rule knows, behind a server without a tool
parser: the raw call text the model writes comes back to the client as real tool calls
(the provider rule's `response.unknown_dialect`: auto), through all three client APIs,
streamed and not, with the official SDKs over real HTTP. Markers never reach the client."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from serve_helpers import an, oa, openai_compatible_proxy
from test_serve import WEATHER, WEATHER_OPENAI, chat_reply, text_stream

UNKNOWN = "acme-private-13b"
ARGS = {"city": "Paris", "unit": "c"}
SHAPES = {
    "hermes-json": 'Looking.\n<tool_call>\n{"name": "get_weather", "arguments": '
                   '{"city": "Paris", "unit": "c"}}\n</tool_call>',
    "qwen3-coder-xml": "Looking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
                       "Paris\n</parameter>\n<parameter=unit>\nc\n</parameter>\n</function>\n"
                       "</tool_call>",
    "invoke-xml": 'Looking.\n<function_calls><invoke name="get_weather"><parameter name="city">'
                  'Paris</parameter><parameter name="unit">c</parameter></invoke>'
                  "</function_calls>",
}
MARKERS = ("<tool_call", "<function", "<invoke", "<parameter", "</")
RESPONSES_TOOL = {"type": "function", **WEATHER_OPENAI["function"]}
ASK = "weather in Paris?"


@pytest.fixture(scope="module")
def proxy(upstream):
    with openai_compatible_proxy(upstream) as p:
        yield p


def pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def clean(text: str | None) -> str:
    assert not any(m in (text or "") for m in MARKERS), text
    return text or ""


def test_the_rules_know_nothing_of_the_id(engine):
    spec = engine.parse_model_id(UNKNOWN)
    assert spec.known is False
    assert engine.capability(UNKNOWN).dialect is None
    assert engine.sends_native_tools(UNKNOWN)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_chat_completions(upstream, proxy, shape):
    upstream.replies.append(chat_reply(SHAPES[shape]))
    r = oa(proxy).chat.completions.create(model=UNKNOWN, tools=[WEATHER_OPENAI],
                                          messages=[{"role": "user", "content": ASK}])
    msg = r.choices[0].message
    assert clean(msg.content) == "Looking."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls] == \
        [("get_weather", ARGS)]
    assert r.choices[0].finish_reason == "tool_calls"
    # the model name went upstream as the client gave it, with the tools natively
    sent = upstream.requests[-1].json()
    assert sent["model"] == UNKNOWN and sent["tools"][0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("size", [1, 9, 10_000])
def test_chat_completions_streamed(upstream, proxy, shape, size):
    upstream.replies.append(text_stream(pieces(SHAPES[shape], size)))
    chunks = list(oa(proxy).chat.completions.create(
        model=UNKNOWN, tools=[WEATHER_OPENAI], stream=True,
        messages=[{"role": "user", "content": ASK}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert clean(text) == "Looking."
    assert calls[0].function.name == "get_weather"
    assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == ARGS
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_anthropic_messages(upstream, proxy, shape):
    upstream.replies.append(chat_reply(SHAPES[shape]))
    m = an(proxy).messages.create(model=UNKNOWN, max_tokens=64, tools=[WEATHER],
                                  messages=[{"role": "user", "content": ASK}])
    assert [b.type for b in m.content] == ["text", "tool_use"]
    assert clean(m.content[0].text) == "Looking."
    assert (m.content[1].name, m.content[1].input) == ("get_weather", ARGS)
    assert m.stop_reason == "tool_use"


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("size", [1, 9, 10_000])
def test_anthropic_messages_streamed(upstream, proxy, shape, size):
    upstream.replies.append(text_stream(pieces(SHAPES[shape], size)))
    with an(proxy).messages.stream(model=UNKNOWN, max_tokens=64, tools=[WEATHER],
                                   messages=[{"role": "user", "content": ASK}]) as s:
        texts = [ev.text for ev in s if ev.type == "text"]
        final = s.get_final_message()
    assert clean("".join(texts)) == "Looking."
    assert [(b.type, getattr(b, "input", None)) for b in final.content] == [
        ("text", None), ("tool_use", ARGS)]
    assert final.stop_reason == "tool_use"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_responses(upstream, proxy, shape):
    upstream.replies.append(chat_reply(SHAPES[shape]))
    r = oa(proxy).responses.create(model=UNKNOWN, input=ASK, tools=[RESPONSES_TOOL])
    assert [item.type for item in r.output] == ["message", "function_call"]
    assert clean(r.output_text) == "Looking."
    fc = r.output[1]
    assert (fc.name, json.loads(fc.arguments)) == ("get_weather", ARGS)


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("size", [1, 9, 10_000])
def test_responses_streamed(upstream, proxy, shape, size):
    upstream.replies.append(text_stream(pieces(SHAPES[shape], size)))
    with oa(proxy).responses.stream(model=UNKNOWN, input=ASK, tools=[RESPONSES_TOOL]) as s:
        deltas = [ev.delta for ev in s if ev.type == "response.output_text.delta"]
        final = s.get_final_response()
    assert clean("".join(deltas)) == "Looking."
    fc = next(o for o in final.output if o.type == "function_call")
    assert (fc.name, json.loads(fc.arguments)) == ("get_weather", ARGS)


def test_a_plain_answer_stays_text(upstream, proxy):
    """Reading calls out of the text does not invent any: prose stays prose."""
    answer = "Paris is mild today; no tool needed. Try get_weather(city) later."
    upstream.replies.append(chat_reply(answer))
    r = oa(proxy).chat.completions.create(model=UNKNOWN, tools=[WEATHER_OPENAI],
                                          messages=[{"role": "user", "content": ASK}])
    assert r.choices[0].message.content == answer
    assert not r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "stop"


def test_without_tools_the_text_is_not_read(upstream, proxy):
    """No tools offered: whatever the model writes is its answer, markers included."""
    upstream.replies.append(chat_reply(SHAPES["hermes-json"]))
    m: Any = an(proxy).messages.create(model=UNKNOWN, max_tokens=64,
                                       messages=[{"role": "user", "content": ASK}])
    assert [b.type for b in m.content] == ["text"]
    assert m.content[0].text == SHAPES["hermes-json"]


def test_a_route_that_sets_tool_options_still_reads_unknown_ids(upstream, tmp_path):
    """Route options become a capability override for every id of a pass-through route;
    they say how tools are sent, not what format the model writes: still unknown, still
    read by the auto dialect."""
    from serve_helpers import ProxyServer

    cfg = f"""
routes:
  - pattern: '.*'
    upstream: {{provider: openai-compatible, base_url: {upstream.url}/v1}}
    tools: {{mode: native, validation_retries: 1}}
"""
    with ProxyServer(config=cfg, tmp=tmp_path) as p:
        upstream.replies.append(chat_reply(SHAPES["qwen3-coder-xml"]))
        m = an(p).messages.create(model=UNKNOWN, max_tokens=64, tools=[WEATHER],
                                  messages=[{"role": "user", "content": ASK}])
    assert [(b.type, getattr(b, "input", None)) for b in m.content] == [
        ("text", None), ("tool_use", ARGS)]
