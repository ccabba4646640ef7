"""`toolrules serve` when things go wrong: upstream 429 with Retry-After, 500, a connection
reset mid-stream, a slow upstream past its timeout, invalid JSON, an oversized body, a
wrong key. Each gets the documented status and an error in the client API's own shape
(or, once a stream started, the grammar's error event) - and nothing hangs."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import anthropic
import openai

from serve_helpers import ProxyServer
from test_serve import RAW, WEATHER, chat_reply, chunk, text_stream
from wire_server import Reply, WireServer, json_reply, sse_reply

USER = [{"role": "user", "content": "hi"}]


def config(url: str, **upstream: Any) -> str:
    extra = "".join(f", {k}: {v}" for k, v in upstream.items())
    return f"""
server: {{max_body_bytes: 20000, keep_alive: 0.3}}
routes:
  - model: m
    upstream: {{provider: openai-compatible, model: up-model, base_url: {url}/v1{extra}}}
"""


@pytest.fixture
def upstream():
    with WireServer() as srv:
        yield srv


def proxy_for(upstream: WireServer, tmp_path: Any, **kw: Any) -> ProxyServer:
    keys = kw.pop("api_keys", ())
    return ProxyServer(config=config(upstream.url, **kw), tmp=tmp_path, api_keys=keys)


def oa(proxy: ProxyServer, key: str = "k") -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0, timeout=20)


def an(proxy: ProxyServer, key: str = "k") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0, timeout=20)


# ---------------------------------------------------------------- rate limits and 5xx

def test_upstream_429_keeps_status_and_retry_after(upstream, tmp_path):
    err = {"error": {"message": "slow down", "type": "rate_limit"}}
    with proxy_for(upstream, tmp_path) as proxy:
        upstream.replies.append(json_reply(err, 429, {"Retry-After": "7"}))
        with pytest.raises(anthropic.RateLimitError) as e:
            an(proxy).messages.create(model="m", max_tokens=5, messages=USER)
        assert e.value.response.headers["retry-after"] == "7"
        assert e.value.body["error"] == {"type": "rate_limit_error", "message": "slow down"}
        upstream.replies.append(json_reply(err, 429, {"Retry-After": "7"}))
        with pytest.raises(openai.RateLimitError) as e2:
            oa(proxy).chat.completions.create(model="m", messages=USER)
        assert e2.value.response.headers["retry-after"] == "7"
        assert e2.value.body["code"] == "rate_limit_exceeded"
        # a stream asked for: still a real 429 (the upstream refused before any event)
        upstream.replies.append(json_reply(err, 429, {"Retry-After": "7"}))
        with pytest.raises(anthropic.RateLimitError), \
                an(proxy).messages.stream(model="m", max_tokens=5, messages=USER) as s:
            list(s)


def test_route_retries_honour_retry_after(upstream, tmp_path):
    with proxy_for(upstream, tmp_path, max_retries=1) as proxy:
        upstream.replies.append(json_reply({"error": {"message": "wait"}}, 429,
                                           {"Retry-After": "1"}))
        upstream.replies.append(chat_reply("done"))
        t0 = time.monotonic()
        r = oa(proxy).chat.completions.create(model="m", messages=USER)
        assert r.choices[0].message.content == "done"
        assert 0.9 <= time.monotonic() - t0 < 5
        assert len(upstream.requests) == 2


def test_upstream_500_is_a_bad_gateway(upstream, tmp_path):
    with proxy_for(upstream, tmp_path) as proxy:
        upstream.replies.append(json_reply({"error": {"message": "boom"}}, 500))
        with pytest.raises(openai.InternalServerError) as e:
            oa(proxy).chat.completions.create(model="m", messages=USER)
        assert e.value.status_code == 502
        assert e.value.body["type"] == "server_error" and "boom" in e.value.body["message"]
        upstream.replies.append(json_reply({"error": {"message": "boom"}}, 500))
        with pytest.raises(anthropic.InternalServerError) as e2:
            an(proxy).messages.create(model="m", max_tokens=5, messages=USER)
        assert e2.value.status_code == 502 and e2.value.body["error"]["type"] == "api_error"


def test_unreachable_upstream(tmp_path):
    with ProxyServer(config=config("http://127.0.0.1:9"), tmp=tmp_path) as proxy:
        with pytest.raises(anthropic.InternalServerError) as e:
            an(proxy).messages.create(model="m", max_tokens=5, messages=USER)
        assert e.value.status_code == 502 and "cannot reach" in e.value.body["error"]["message"]


# ---------------------------------------------------------------- broken streams

def _dropped() -> Reply:
    pieces = ["Hello ", "there, ", "and then"]
    events: list[Any] = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": p}) for p in pieces]
    return sse_reply(events + [chunk({}, "stop"), "data: [DONE]"], drop_after=3)


def test_connection_reset_mid_stream_ends_with_an_error_event(upstream, tmp_path):
    with proxy_for(upstream, tmp_path) as proxy:
        upstream.replies.append(_dropped())
        seen = []
        with pytest.raises(anthropic.APIStatusError) as e, \
                an(proxy).messages.stream(model="m", max_tokens=5, messages=USER) as s:
            for ev in s:
                seen.append(ev.type)
        assert "text" in seen  # what arrived before the reset was delivered
        assert e.value.body["error"]["type"] == "api_error"
        assert "connection lost" in e.value.body["error"]["message"]
        upstream.replies.append(_dropped())
        with pytest.raises(openai.APIError) as e2:
            list(oa(proxy).chat.completions.create(model="m", messages=USER, stream=True))
        assert "connection lost" in e2.value.message
        # the raw stream: well-formed SSE, the error event last, then the end
        upstream.replies.append(_dropped())
        with httpx.stream("POST", proxy.url + "/v1/messages", timeout=20, json={
                "model": "m", "max_tokens": 5, "stream": True, "messages": USER}) as r:
            text = r.read().decode()
        blocks = [b for b in text.split("\n\n") if b.strip()]
        assert blocks[0].startswith("event: message_start")
        assert blocks[-1].startswith("event: error\ndata: ")
        assert json.loads(blocks[-1].split("data: ", 1)[1])["type"] == "error"


def test_slow_upstream_times_out(upstream, tmp_path):
    with proxy_for(upstream, tmp_path, timeout=0.5) as proxy:
        upstream.replies.append(Reply(delay=3, status=200, body=b"{}"))
        t0 = time.monotonic()
        with pytest.raises(openai.InternalServerError) as e:
            oa(proxy).chat.completions.create(model="m", messages=USER)
        assert e.value.status_code == 504 and "timed out" in e.value.body["message"]
        assert time.monotonic() - t0 < 3
        # a stream that stalls after it started: an error event, not a hang
        upstream.replies.append(sse_reply([chunk({"role": "assistant", "content": "a"}),
                                           chunk({"content": "b"}), chunk({}, "stop")],
                                          chunk_delay=2))
        t0 = time.monotonic()
        with pytest.raises(anthropic.APIStatusError) as e2, \
                an(proxy).messages.stream(model="m", max_tokens=5, messages=USER) as s:
            list(s)
        assert "timed out" in e2.value.body["error"]["message"]
        assert time.monotonic() - t0 < 5


def test_keep_alive_while_the_upstream_thinks(upstream, tmp_path):
    """A slow first token: the stream starts and pings (keep_alive 0.3 s) until it comes."""
    with proxy_for(upstream, tmp_path) as proxy:
        upstream.replies.append(Reply(delay=1.2, **{k: v for k, v in text_stream(
            ["late answer"]).__dict__.items() if k != "delay"}))
        with httpx.stream("POST", proxy.url + "/v1/messages", timeout=20, json={
                "model": "m", "max_tokens": 5, "stream": True, "messages": USER}) as r:
            assert r.status_code == 200
            text = r.read().decode()
        assert text.count("event: ping") >= 2
        assert "late answer" in text and text.rstrip().endswith('{"type":"message_stop"}')


# ---------------------------------------------------------------- bad requests

def test_invalid_json_gets_400_in_each_clients_shape(upstream, tmp_path):
    with proxy_for(upstream, tmp_path) as proxy:
        r = httpx.post(proxy.url + "/v1/messages", content=b'{"model": "m", ', timeout=10,
                       headers={"content-type": "application/json"})
        assert r.status_code == 400
        body = r.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert "not valid JSON" in body["error"]["message"]
        r = httpx.post(proxy.url + "/v1/chat/completions", content=b"[1, 2", timeout=10)
        assert r.status_code == 400
        assert r.json()["error"]["type"] == "invalid_request_error"
        r = httpx.post(proxy.url + "/v1/responses", content=b"[]", timeout=10)
        assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]
        # a JSON body that is not a request of that API
        r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "m"}, timeout=10)
        assert r.status_code == 400 and "cannot read the request" in r.json()["error"]["message"]
        assert not upstream.requests


def test_oversized_body_gets_413(upstream, tmp_path):
    big = "x" * 30000
    with proxy_for(upstream, tmp_path) as proxy:
        with pytest.raises(anthropic.APIStatusError) as e:
            an(proxy).messages.create(model="m", max_tokens=5,
                                      messages=[{"role": "user", "content": big}])
        assert e.value.status_code == 413
        assert e.value.body["error"]["type"] == "request_too_large"

        def chunks():  # no Content-Length: counted as it arrives
            yield b'{"model": "m", "messages": [{"role": "user", "content": "'
            for _ in range(30):
                yield b"y" * 1000
            yield b'"}]}'

        r = httpx.post(proxy.url + "/v1/chat/completions", content=chunks(), timeout=10)
        assert r.status_code == 413 and r.json()["error"]["type"] == "invalid_request_error"
        assert not upstream.requests


def test_wrong_or_missing_key_gets_401(upstream, tmp_path):
    with proxy_for(upstream, tmp_path, api_keys=("secret-1", "secret-2")) as proxy:
        with pytest.raises(anthropic.AuthenticationError) as e:
            an(proxy, key="wrong").messages.create(model="m", max_tokens=5, messages=USER)
        assert e.value.body == {"type": "error", "error": {
            "type": "authentication_error", "message": "invalid or missing API key"}}
        with pytest.raises(openai.AuthenticationError) as e2:
            oa(proxy, key="secret-").chat.completions.create(model="m", messages=USER)
        assert e2.value.body["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            oa(proxy, key="wrong").models.list()
        r = httpx.post(proxy.url + "/v1/messages", json={"model": "m", "messages": USER},
                       timeout=10)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert not upstream.requests
        upstream.replies.append(chat_reply("ok"))
        assert an(proxy, key="secret-2").messages.create(
            model="m", max_tokens=5, messages=USER).content[0].text == "ok"
        upstream.replies.append(chat_reply("ok"))
        assert oa(proxy, key="secret-1").chat.completions.create(
            model="m", messages=USER).choices[0].message.content == "ok"
        # the client's key is never passed upstream
        assert all("secret" not in json.dumps(s.headers) for s in upstream.requests)


# ---------------------------------------------------------------- keys, logs, shutdown

def test_upstream_key_goes_only_upstream(upstream, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("UPSTREAM_TEST_KEY", "sk-upstream-secret-123456")
    with proxy_for(upstream, tmp_path, api_key_env="UPSTREAM_TEST_KEY") as proxy:
        caplog.set_level(logging.INFO, logger="toolrules.serve.access")
        upstream.replies.append(chat_reply(RAW))
        m = an(proxy).messages.create(model="m", max_tokens=5, tools=[WEATHER], messages=USER)
        upstream.replies.append(json_reply({"error": {
            "message": "bad key sk-upstream-secret-123456"}}, 401))
        with pytest.raises(anthropic.APIStatusError) as e:
            an(proxy).messages.create(model="m", max_tokens=5, messages=USER)
    assert upstream.requests[0].headers["authorization"] == "Bearer sk-upstream-secret-123456"
    assert e.value.status_code == 502
    assert "sk-upstream" not in json.dumps(e.value.body)  # scrubbed from the echo
    assert "sk-upstream" not in m.model_dump_json()
    logs = [json.loads(r.getMessage()) for r in caplog.records
            if r.name == "toolrules.serve.access"]
    assert [entry["status"] for entry in logs] == [200, 502]
    for entry in logs:  # structured, without bodies or keys
        assert {"id", "path", "status", "ms", "model", "upstream"} <= set(entry)
        assert "messages" not in entry and "sk-upstream" not in json.dumps(entry)


def test_graceful_shutdown_finishes_streams_in_flight(upstream, tmp_path):
    upstream.replies.append(text_stream(["one ", "two ", "three"], chunk_delay=0.3))
    proxy = proxy_for(upstream, tmp_path)
    got: dict[str, Any] = {}
    with proxy:
        def run() -> None:
            with an(proxy).messages.stream(model="m", max_tokens=5, messages=USER) as s:
                got["text"] = "".join(ev.text for ev in s if ev.type == "text")

        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.4)  # the stream is under way
    t.join(20)
    assert got.get("text") == "one two three"
