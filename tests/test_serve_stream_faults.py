"""A failing upstream under a streamed request, through all three client APIs with the
official SDKs: before any byte reached the client it gets the API's error status and body;
after, the API's stream error event and the end of the stream; never a hang. Upstreams
that refuse the connection, hang up without answering, answer 500, close mid-stream, and
stall before or in the middle of the stream (the route's `timeout` ends it)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import anthropic
import openai

from serve_helpers import ProxyServer
from test_serve import chunk
from wire_server import Reply, WireServer, sse_reply

USER = [{"role": "user", "content": "hi"}]
TIMEOUT = 0.6  # the route's upstream timeout (seconds per read)


@dataclass
class Outcome:
    """What a client saw: an HTTP error before the stream, or events and then maybe an
    error inside the stream."""

    status: int = 200
    body: Any = None
    text: str = ""
    error: str | None = None
    error_body: Any = None
    events: list[str] = field(default_factory=list)
    seconds: float = 0.0


def chat(url: str) -> Outcome:
    client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=20)
    out = Outcome()
    try:
        stream = client.chat.completions.create(model="m", messages=USER, stream=True)
        for c in stream:
            out.events.append("chunk")
            out.text += "".join(ch.delta.content or "" for ch in c.choices)
    except openai.APIStatusError as e:
        out.status, out.body = e.status_code, e.body
    except openai.APIError as e:  # an error chunk inside the stream
        out.error, out.error_body = e.message, e.body
    return out


def messages(url: str) -> Outcome:
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=20)
    out = Outcome()
    started = False
    try:
        with client.messages.stream(model="m", max_tokens=5, messages=USER) as s:
            started = True
            for ev in s:
                out.events.append(ev.type)
                if ev.type == "text":
                    out.text += ev.text
    except anthropic.APIStatusError as e:
        if started:  # an `error` event after the stream started
            out.error, out.error_body = e.message, e.body
        else:
            out.status, out.body = e.status_code, e.body
    return out


def responses(url: str) -> Outcome:
    client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=20)
    out = Outcome()
    try:
        for ev in client.responses.create(model="m", input="hi", stream=True):
            out.events.append(ev.type)
            if ev.type == "response.output_text.delta":
                out.text += ev.delta
            elif ev.type == "error":
                out.error, out.error_body = ev.message, ev.model_dump()
    except openai.APIStatusError as e:
        out.status, out.body = e.status_code, e.body
    return out


CLIENTS: dict[str, Callable[[str], Outcome]] = {
    "chat-completions": chat, "anthropic-messages": messages, "responses": responses}


def run(client: str, url: str) -> Outcome:
    t0 = time.monotonic()
    out = CLIENTS[client](url)
    out.seconds = time.monotonic() - t0
    return out


def assert_error_body(client: str, out: Outcome, status: int, words: str) -> None:
    """The API's own error shape (the SDKs hand over the error object for OpenAI's APIs,
    the whole body for Anthropic's)."""
    assert out.status == status, out
    if client == "anthropic-messages":
        assert out.body["type"] == "error"
        assert out.body["error"]["type"] == {502: "api_error", 504: "timeout_error"}[status]
        message = out.body["error"]["message"]
    else:
        assert out.body["type"] == "server_error"
        message = out.body["message"]
    assert words in message, message
    assert not out.events


def config(url: str, keep_alive: float) -> str:
    return f"""
server: {{keep_alive: {keep_alive}}}
routes:
  - model: m
    upstream: {{provider: openai-compatible, model: up, base_url: {url}/v1,
                timeout: {TIMEOUT}, connect_timeout: 2}}
"""


@pytest.fixture
def upstream():
    with WireServer() as srv:
        yield srv


def proxy_for(url: str, tmp_path: Any, keep_alive: float = 10) -> ProxyServer:
    return ProxyServer(config=config(url, keep_alive), tmp=tmp_path)


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connections are refused
    return port


def text_chunks(pieces: list[str]) -> list[Any]:
    """The role comes with the first piece, so each chunk carries text the proxy passes
    on at once."""
    return [chunk({"role": "assistant", "content": pieces[0]}),
            *[chunk({"content": p}) for p in pieces[1:]]]


# ---------------------------------------------------------------- before any byte

@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_refused_connection(client, tmp_path):
    with proxy_for(f"http://127.0.0.1:{closed_port()}", tmp_path) as proxy:
        out = run(client, proxy.url)
    assert_error_body(client, out, 502, "cannot reach 127.0.0.1")
    assert out.seconds < 5


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_upstream_hangs_up_without_answering(client, upstream, tmp_path):
    upstream.replies.append(Reply(hang_up=True))
    with proxy_for(upstream.url, tmp_path) as proxy:
        out = run(client, proxy.url)
    assert_error_body(client, out, 502, "upstream openai-compatible")
    assert out.seconds < 5


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_upstream_500(client, upstream, tmp_path):
    upstream.replies.append(Reply(status=500, headers={"Content-Type": "application/json"},
                                  body=b'{"error": {"message": "CUDA out of memory"}}'))
    with proxy_for(upstream.url, tmp_path) as proxy:
        out = run(client, proxy.url)
    assert_error_body(client, out, 502, "CUDA out of memory")


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_upstream_stalls_before_the_first_byte(client, upstream, tmp_path):
    """No answer within the route's timeout, and the stream has not started (keep-alive
    pings would come later): a gateway timeout."""
    upstream.replies.append(Reply(delay=4, status=200, body=b"{}"))
    with proxy_for(upstream.url, tmp_path) as proxy:
        out = run(client, proxy.url)
    assert_error_body(client, out, 504, "timed out")
    assert out.seconds < 3


# ---------------------------------------------------------------- after the stream started

@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_upstream_closes_mid_stream(client, upstream, tmp_path):
    upstream.replies.append(sse_reply(text_chunks(["Hello ", "there"]) + [chunk({}, "stop"),
                                      "data: [DONE]"], drop_after=3))
    with proxy_for(upstream.url, tmp_path) as proxy:
        out = run(client, proxy.url)
    assert out.status == 200 and out.text == "Hello there"  # what came was delivered
    assert out.error is not None and "connection lost" in out.error, out
    assert out.seconds < 5


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_upstream_stalls_mid_stream(client, upstream, tmp_path):
    """The first text arrived and was passed on; the next never comes in time."""
    upstream.replies.append(sse_reply(text_chunks(["Hello", " world"]) + [chunk({}, "stop"),
                                      "data: [DONE]"], chunk_delay=3))
    with proxy_for(upstream.url, tmp_path) as proxy:
        out = run(client, proxy.url)
    assert out.status == 200 and out.text.startswith("Hello")
    assert out.error is not None and "timed out" in out.error, out
    assert out.seconds < 3


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_stream_kept_alive_while_waiting_then_the_upstream_times_out(client, upstream,
                                                                       tmp_path):
    """The stream started (pings every 0.2 s while the upstream thinks); the upstream's
    timeout then ends it with the API's error event - not a hang, not a silent end."""
    upstream.replies.append(Reply(delay=4, status=200, body=b"{}"))
    with proxy_for(upstream.url, tmp_path, keep_alive=0.2) as proxy:
        out = run(client, proxy.url)
    assert out.status == 200 and out.text == ""
    assert out.error is not None and "timed out" in out.error, out
    assert out.seconds < 3


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"model": "m", "messages": USER, "stream": True}),
    ("/v1/messages", {"model": "m", "max_tokens": 5, "messages": USER, "stream": True}),
    ("/v1/responses", {"model": "m", "input": "hi", "stream": True}),
])
def test_the_error_event_is_last_and_well_formed(path, body, upstream, tmp_path):
    """On the wire: server-sent events, the error last, then the stream ends (chat
    completions: a `data: {"error": ...}` chunk; the others: `event: error`)."""
    upstream.replies.append(sse_reply(text_chunks(["a", "b"]) + [chunk({}, "stop"),
                                      "data: [DONE]"], drop_after=2))
    with proxy_for(upstream.url, tmp_path) as proxy, \
            httpx.stream("POST", proxy.url + path, json=body, timeout=10) as r:
        assert r.status_code == 200
        text = r.read().decode()
    blocks = [b for b in text.split("\n\n") if b.strip()]
    last = blocks[-1]
    data = json.loads(last.split("data: ", 1)[1])
    if path == "/v1/chat/completions":
        assert "event:" not in last and data["error"]["type"] == "server_error"
        assert "connection lost" in data["error"]["message"]
    else:
        assert last.startswith("event: error\n")
        assert data["type"] == "error"
        message = data["error"]["message"] if path == "/v1/messages" else data["message"]
        assert "connection lost" in message
