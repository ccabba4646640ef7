"""Usage with cache hits through `toolrules serve`, over real HTTP on 127.0.0.1: the
upstream's own token counts - cached prompt tokens included - reach the client in its
API's usage fields, streamed and not, through the official `anthropic` and `openai` SDKs
(chat completions and Responses), and the access log has them.

Two upstreams with a prompt cache (tests/cache_server.py): one that reports what an older
llama-server says (`timings`: prompt_n evaluated, cache_n reused), one that reports
OpenAI-style `usage.prompt_tokens_details.cached_tokens` (vLLM, newer llama-servers). A
conversation's second turn extends its first, so the server serves most of it from cache.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated")

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from cache_server import CacheServer  # noqa: E402
from serve_helpers import ProxyServer, an, oa  # noqa: E402

SYSTEM = "You are a terse assistant. Answer in one line. " * 8
FIRST = "What is the capital of France? " * 3
STYLES = {"llama": "llamacpp", "openai": "vllm"}


@pytest.fixture(scope="module")
def servers():
    with CacheServer("L", "llama") as llama, CacheServer("O", "openai") as openai_style:
        yield {"llama": llama, "openai": openai_style}


@pytest.fixture(scope="module")
def proxy(servers, tmp_path_factory, engine):
    routes = "".join(f"""
  - model: {style}-model
    upstream: {{provider: {provider}, model: cached-model, base_url: {servers[style].url}/v1,
                chat_template: rules}}""" for style, provider in STYLES.items())
    routes += f"""
  - model: plain-model
    upstream: {{provider: openai-compatible, model: cached-model,
                base_url: {servers['llama'].url}/v1, chat_template: rules}}"""
    with ProxyServer(config="routes:" + routes, tmp=tmp_path_factory.mktemp("usage"),
                     engine=engine) as p:
        yield p


def turns(reply: str) -> list[dict[str, Any]]:
    """The second turn of a conversation: the first, its answer, a follow-up."""
    return [{"role": "user", "content": FIRST}, {"role": "assistant", "content": reply},
            {"role": "user", "content": "And of Italy?"}]


def reported(srv: CacheServer) -> dict[str, int]:
    counts = srv.reported[-1]
    assert counts["cached"] > 0.8 * counts["prompt"]  # the second turn is mostly cached
    return counts


def _turn1_anthropic(proxy: ProxyServer, model: str) -> str:
    r = an(proxy).messages.create(model=model, max_tokens=50, system=SYSTEM,
                                  messages=[{"role": "user", "content": FIRST}])
    return str(r.content[0].text)


# ---------------------------------------------------------------- Anthropic messages

@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("style", list(STYLES))
def test_anthropic_usage_shows_cache_reads(proxy, servers, access, style, stream):
    model = f"{style}-model"
    first = _turn1_anthropic(proxy, model)
    client = an(proxy)
    kw = {"model": model, "max_tokens": 50, "system": SYSTEM, "messages": turns(first)}
    if stream:
        with client.messages.stream(**kw) as s:
            usage = s.get_final_message().usage
    else:
        usage = client.messages.create(**kw).usage
    counts = reported(servers[style])
    # Anthropic's input_tokens leaves the cache reads out: the prompt is their sum
    assert usage.cache_read_input_tokens == counts["cached"]
    assert usage.input_tokens == counts["prompt"] - counts["cached"]
    assert usage.output_tokens == counts["completion"]
    log = access()[-1]
    assert (log["prompt_tokens"], log["cached_tokens"], log["completion_tokens"]) == \
        (counts["prompt"], counts["cached"], counts["completion"])


# ---------------------------------------------------------------- chat completions

@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("style", list(STYLES))
def test_chat_usage_shows_cached_tokens(proxy, servers, access, style, stream):
    model = f"{style}-model"
    client = oa(proxy)
    msgs = [{"role": "system", "content": SYSTEM}]
    first = client.chat.completions.create(model=model, messages=[*msgs, turns("")[0]])
    msgs += turns(str(first.choices[0].message.content))
    if stream:
        chunks = list(client.chat.completions.create(
            model=model, messages=msgs, stream=True, stream_options={"include_usage": True}))
        usage = chunks[-1].usage
        assert chunks[-1].choices == []
    else:
        usage = client.chat.completions.create(model=model, messages=msgs).usage
    counts = reported(servers[style])
    assert usage.prompt_tokens == counts["prompt"]  # cached ones included, as OpenAI counts
    assert usage.prompt_tokens_details.cached_tokens == counts["cached"]
    assert usage.completion_tokens == counts["completion"]
    assert usage.total_tokens == counts["prompt"] + counts["completion"]
    assert access()[-1]["cached_tokens"] == counts["cached"]


# ---------------------------------------------------------------- Responses

@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("style", list(STYLES))
def test_responses_usage_shows_cached_tokens(proxy, servers, access, style, stream):
    model = f"{style}-model"
    client = oa(proxy)
    first = client.responses.create(model=model, instructions=SYSTEM, input=FIRST)
    kw = {"model": model, "instructions": SYSTEM, "input": turns(first.output_text)}
    if stream:
        done = [ev for ev in client.responses.create(stream=True, **kw)
                if ev.type == "response.completed"]
        usage = done[0].response.usage
    else:
        usage = client.responses.create(**kw).usage
    counts = reported(servers[style])
    assert usage.input_tokens == counts["prompt"]
    assert usage.input_tokens_details.cached_tokens == counts["cached"]
    assert usage.output_tokens == counts["completion"]
    assert access()[-1]["prompt_tokens"] == counts["prompt"]


# ---------------------------------------------------------------- what is asked, what is not said

def test_the_usage_chunk_is_asked_for_where_the_rule_says_the_server_knows_it(proxy, servers):
    srv = servers["openai"]
    list(oa(proxy).chat.completions.create(model="openai-model", stream=True,
                                           messages=[{"role": "user", "content": "hi"}]))
    # the client did not ask; the proxy did, to read the upstream's counts
    assert srv.bodies[-1]["stream_options"] == {"include_usage": True}
    llama = servers["llama"]
    list(oa(proxy).chat.completions.create(model="plain-model", stream=True,
                                           messages=[{"role": "user", "content": "hi"}]))
    assert "stream_options" not in llama.bodies[-1]  # a generic server is not asked
    oa(proxy).chat.completions.create(model="llama-model",
                                      messages=[{"role": "user", "content": "hi"}])
    assert llama.bodies[-1]["cache_prompt"] is True  # the llama-server rule's cache option


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_no_cached_figure_is_made_up_when_the_upstream_reports_none(proxy, servers, access,
                                                                    stream):
    # the generic rule reads `usage` only, which the llama-style server does not send:
    # estimates, and no cache read claimed
    client = an(proxy)
    kw = {"model": "plain-model", "max_tokens": 50, "system": SYSTEM,
          "messages": turns("L: 1")}
    if stream:
        with client.messages.stream(**kw) as s:
            usage = s.get_final_message().usage
    else:
        usage = client.messages.create(**kw).usage
    assert usage.cache_read_input_tokens is None
    assert usage.input_tokens > 0  # the proxy's estimate
    log = access()[-1]
    assert "cached_tokens" not in log and "prompt_tokens" not in log


# ---------------------------------------------------------------- other upstream APIs

ANTHROPIC_USAGE = {"input_tokens": 20, "cache_read_input_tokens": 80,
                   "cache_creation_input_tokens": 0}


def _anthropic_upstream(stream: bool) -> Any:
    from wire_server import json_reply, sse_reply

    if not stream:
        return json_reply({"id": "msg_up", "type": "message", "role": "assistant",
                           "model": "claude", "content": [{"type": "text", "text": "hi"}],
                           "stop_reason": "end_turn", "stop_sequence": None,
                           "usage": {**ANTHROPIC_USAGE, "output_tokens": 3}})
    return sse_reply([
        {"type": "message_start", "message": {
            "id": "msg_up", "type": "message", "role": "assistant", "model": "claude",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {**ANTHROPIC_USAGE, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text",
                                                                      "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta",
                                                              "text": "hi"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn",
                                            "stop_sequence": None},
         "usage": {"output_tokens": 3}},
        {"type": "message_stop"}], named=True)


def _responses_upstream(stream: bool) -> Any:
    from wire_server import json_reply, sse_reply

    body = {"id": "resp_up", "object": "response", "status": "completed", "model": "gpt",
            "output": [{"type": "message", "id": "msg_1", "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": "hi",
                                     "annotations": []}]}],
            "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 80},
                      "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": 103}}
    if not stream:
        return json_reply(body)
    return sse_reply([
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
         "content_index": 0, "delta": "hi", "sequence_number": 0},
        {"type": "response.completed", "response": body, "sequence_number": 1}], named=True)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("provider", "reply"), [("anthropic", _anthropic_upstream),
                                                 ("openai-responses", _responses_upstream)])
def test_cached_tokens_are_read_from_other_upstream_apis(upstream, tmp_path, monkeypatch,
                                                         engine, access, provider, reply,
                                                         stream):
    from serve_helpers import route_to

    monkeypatch.setenv("TOOLRULES_TEST_UPSTREAM_KEY", "sk-test")
    base = upstream.url + ("/v1" if provider == "openai-responses" else "")
    upstream.replies.clear()
    upstream.replies.append(reply(stream))
    with ProxyServer(config=route_to(provider, "up-model", base), tmp=tmp_path,
                     engine=engine) as proxy:
        client = oa(proxy)
        msgs = [{"role": "user", "content": "hi"}]
        if stream:
            usage = list(client.chat.completions.create(
                model="up-model", messages=msgs, stream=True,
                stream_options={"include_usage": True}))[-1].usage
        else:
            usage = client.chat.completions.create(model="up-model", messages=msgs).usage
    # Anthropic's 20 uncached + 80 read from the cache: 100 prompt tokens, 80 cached
    assert (usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens,
            usage.completion_tokens) == (100, 80, 3)
    assert access()[-1]["cached_tokens"] == 80
