"""Clients as rules: `toolrules.connect()` over real HTTP on 127.0.0.1.

Test servers (tests/wire_server.py) answer with the golden provider bodies and event
streams, framed the way each provider frames them (SSE, NDJSON, AWS event stream), so
every wire protocol is exercised end to end: non-stream and stream with tool calls, auth
placement, errors with the provider's message, 429 with Retry-After, 500 then success, a
connection dropped mid-stream, a server slower than the read timeout. Keys never show in
reprs, errors or logs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from conftest import REPO
from toolrules import ToolError, ToolErrorCode
from toolrules.clients._connect import connect
from toolrules.clients._errors import ProviderError
from wire_server import (
    Reply,
    WireServer,
    aws_event_reply,
    json_reply,
    ndjson_reply,
    sse_reply,
)

CASES = REPO / "golden" / "providers"
CONV = yaml.safe_load((CASES / "conversation.cases.yaml").read_text())
TOOLS = CONV["tools"]
ASK = [{"role": "user", "content": "Search the docs for rate limits."}]
KEY = "sk-test-7f3a9c1e55d2b8"
LIMIT = 15  # seconds: no test may hang


def cases(provider: str) -> dict[str, Any]:
    return yaml.safe_load((CASES / f"{provider}.cases.yaml").read_text())


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, LIMIT))


async def collect(model: Any, *args: Any, **kw: Any) -> list[Any]:
    return [c async for c in model.stream(*args, **kw)]


def calls(parsed: Any) -> list[tuple[str, Any]]:
    return [(c.name, c.arguments) for c in parsed.tool_calls]


def same(a: Any, b: Any) -> None:
    assert (a.content, a.reasoning_content, calls(a), a.finish_reason) == \
           (b.content, b.reasoning_content, calls(b), b.finish_reason)


# ---------------------------------------------------------------- every wire protocol

# provider -> (base path, request path, stream request path, response case, stream case,
#              how the stream is framed)
PROTOCOLS: dict[str, tuple[str, str, str, str, str, str]] = {
    "openai": ("/v1", "/v1/chat/completions", "/v1/chat/completions", "tool_calls",
               "tool_calls", "sse"),
    "openai-responses": ("/v1", "/v1/responses", "/v1/responses", "function_calls",
                         "function_calls", "sse-named"),
    "anthropic": ("", "/v1/messages", "/v1/messages", "tool_use", "tool_use", "sse-named"),
    "gemini": ("/v1beta", "/v1beta/models/gemini-2.5-flash:generateContent",
               "/v1beta/models/gemini-2.5-flash:streamGenerateContent", "function_calls",
               "function_calls", "sse"),
    "ollama": ("", "/api/chat", "/api/chat", "tool_calls", "tool_calls", "ndjson"),
    "cohere": ("", "/v2/chat", "/v2/chat", "tool_calls", "tool_calls", "sse-named"),
    "mistral": ("/v1", "/v1/chat/completions", "/v1/chat/completions", "tool_calls",
                "tool_calls", "sse"),
    "bedrock": ("", "/model/{m}/converse", "/model/{m}/converse-stream", "tool_use",
                "tool_use", "aws"),
    "llamacpp": ("/v1", "/v1/chat/completions", "/v1/chat/completions", "calls_in_content",
                 "calls_in_content", "sse"),
}


def framed(kind: str, events: list[Any]) -> Reply:
    if kind == "ndjson":
        return ndjson_reply(events)
    if kind == "aws":
        return aws_event_reply(events)
    return sse_reply(events, named=kind == "sse-named")


@pytest.fixture
def aws_env(monkeypatch):
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK",
                 "AWS_ENDPOINT_URL_BEDROCK_RUNTIME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.mark.parametrize("provider", list(PROTOCOLS))
def test_every_protocol_generates_and_streams_tool_calls(engine, provider, aws_env):
    base, path, stream_path, resp_case, stream_case, framing = PROTOCOLS[provider]
    data = cases(provider)
    model = data["model"]
    body = data["responses"][resp_case]
    events = data["streams"][stream_case]["events"]
    want = engine.parse_response(body, provider, tools=TOOLS, model=model)
    want_stream = engine.parse_response(data["responses"][data["streams"][stream_case]["equals"]],
                                        provider, tools=TOOLS, model=model)
    api_key = None if provider == "bedrock" else KEY  # bedrock: signed with SigV4
    with WireServer() as srv:
        srv.replies.extend([json_reply(body), framed(framing, events)])
        m = connect(provider, model, base_url=srv.url + base, api_key=api_key, engine=engine,
                    max_retries=0)
        got = run(m.generate(ASK, tools=TOOLS))
        chunks = run(collect(m, ASK, tools=TOOLS))
        plain, streamed = srv.requests
    same(got, want)
    same(m.last_response, want_stream)
    assert got.tool_calls, "every case answers with tool calls"
    # the stream contract: committed chunks rebuild the result
    starts = [c for c in chunks if c.type.value == "tool_start"]
    assert [c.tool_name for c in starts] == [c.name for c in want_stream.tool_calls]
    text = "".join(c.content or "" for c in chunks if c.type.value == "text") or None
    assert text == want_stream.content
    assert m.last_response.raw, "the events that came over the wire are kept"
    # the requests: where they went, how they asked
    quoted = quote(model, safe="")
    assert plain.method == streamed.method == "POST"
    assert plain.path == path.replace("{m}", quoted)
    assert streamed.path == stream_path.replace("{m}", quoted)
    sent = plain.json()
    assert sent == {k: v for k, v in engine.build_request(provider, model, ASK, tools=TOOLS,
                                                          tool_choice="auto").items()
                    if k != "modelId"}
    stream_sent = streamed.json()
    if provider in ("gemini", "bedrock"):  # asked for by the path (and alt=sse)
        assert stream_sent == sent
    else:
        assert stream_sent.get("stream") is True and plain.json().get("stream") in (None, False)
    if provider == "gemini":
        assert streamed.query == {"alt": ["sse"], "key": [KEY]}
        assert plain.query == {"key": [KEY]}
        assert "authorization" not in plain.headers
    elif provider == "anthropic":
        assert plain.headers["x-api-key"] == KEY
        assert plain.headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in plain.headers
    elif provider == "bedrock":
        auth = plain.headers["authorization"]
        assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
        assert "/eu-west-3/bedrock/aws4_request" in auth
        assert "x-amz-date" in plain.headers
        assert streamed.headers["accept"] == "application/vnd.amazon.eventstream"
    else:
        assert plain.headers["authorization"] == f"Bearer {KEY}"
        assert not plain.query
    assert plain.headers["content-type"] == "application/json"


def test_bedrock_signature_verifies(engine, aws_env, monkeypatch):
    """The SigV4 signature is the one botocore computes for the same request."""
    import datetime

    import botocore.auth
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    data = cases("bedrock")
    with WireServer() as srv:
        srv.replies.append(json_reply(data["responses"]["answer"]))
        m = connect("bedrock", data["model"], base_url=srv.url, engine=engine)
        run(m.generate(ASK))
        seen = srv.requests[0]
    signed = {k: v for k, v in seen.headers.items()
              if k in ("content-type", "x-amz-date", "host", "accept", "user-agent")}
    req = AWSRequest(method="POST", url=srv.url + seen.path, data=seen.body, headers=signed)
    when = datetime.datetime.strptime(seen.headers["x-amz-date"], "%Y%m%dT%H%M%SZ")
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: when)
    creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    SigV4Auth(creds, "bedrock", "eu-west-3").add_auth(req)
    assert req.headers["Authorization"] == seen.headers["authorization"]


def test_bedrock_api_key_is_a_bearer_token(engine, aws_env, monkeypatch):
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", KEY)
    data = cases("bedrock")
    with WireServer() as srv:
        srv.replies.append(json_reply(data["responses"]["answer"]))
        m = connect("bedrock", data["model"], base_url=srv.url, engine=engine)
        run(m.generate(ASK))
    assert srv.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_bedrock_without_botocore_names_the_extra(engine, aws_env, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_botocore(name, *args, **kw):
        if name.startswith("botocore"):
            raise ImportError(name)
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_botocore)
    m = connect("bedrock", "anthropic.claude-3-5-sonnet-20240620-v1:0",
                base_url="http://127.0.0.1:9", engine=engine)
    with pytest.raises(ProviderError) as info:
        run(m.generate(ASK))
    assert info.value.code is ToolErrorCode.AUTH
    assert "toolrules[bedrock]" in str(info.value)


@pytest.mark.parametrize("stream_case", ["calls_in_content_after_reasoning",
                                         "native_and_same_call_in_content",
                                         "cut_off_call_in_content"])
def test_local_server_calls_in_content(engine, stream_case):
    """llama.cpp without a tool parser: the calls come back as text; the client reads
    them in the model's dialect, stream and non-stream alike."""
    data = cases("llamacpp")
    body = data["responses"][stream_case]
    with WireServer() as srv:
        srv.replies.extend([json_reply(body), sse_reply(data["streams"][stream_case]["events"])])
        m = connect("llamacpp", "qwen3:8b", base_url=srv.url + "/v1", engine=engine)
        got = run(m.generate(ASK, tools=TOOLS))
        chunks = run(collect(m, ASK, tools=TOOLS))
    want = engine.parse_response(body, "llamacpp", tools=TOOLS, model="qwen3:8b")
    same(got, want)
    same(m.last_response, want)
    for c in chunks:
        assert "<tool_call>" not in (c.content or "")


def test_served_name_with_capabilities_of_another_id(engine):
    """A local server serves `model.gguf`; `as_model` says which model it is."""
    data = cases("llamacpp")
    with WireServer() as srv:
        srv.replies.append(json_reply(data["responses"]["calls_in_content"]))
        m = connect("llamacpp", "model.gguf", as_model="Qwen/Qwen3-8B",
                    base_url=srv.url + "/v1", engine=engine)
        got = run(m.generate(ASK, tools=TOOLS))
    assert srv.requests[0].json()["model"] == "model.gguf"
    assert [c.name for c in got.tool_calls] == ["search_docs", "get_time"]


def test_a_model_without_native_tools_is_prompted_and_read(engine):
    """An emulated model gets the tools as a prompt and its answer is read in the format
    the prompt asked for - the client adds nothing of its own."""
    model = "gemma3:270m"
    prompt_tools = TOOLS[:1]
    answer = engine.render_call({"name": "get_weather", "arguments": {"city": "Oslo"}},
                                tools=prompt_tools, model=model)
    with WireServer() as srv:
        srv.replies.append(json_reply({"model": model, "message": {"role": "assistant",
                                                                   "content": answer},
                                       "done": True, "done_reason": "stop"}))
        m = connect("ollama", model, base_url=srv.url, engine=engine)
        got = run(m.generate(ASK, tools=prompt_tools))
        sent = srv.requests[0].json()
    assert "tools" not in sent
    assert "get_weather" in sent["messages"][0]["content"]
    assert calls(got) == [("get_weather", {"city": "Oslo"})]


# ---------------------------------------------------------------- failures

def test_provider_message_and_code(engine):
    with WireServer() as srv:
        srv.replies.append(json_reply({"type": "error", "error": {
            "type": "invalid_request_error", "message": "max_tokens: too large"}}, status=400))
        m = connect("anthropic", "claude-sonnet-4-5", base_url=srv.url, api_key=KEY,
                    engine=engine)
        with pytest.raises(ProviderError) as info:
            run(m.generate(ASK))
    err = info.value
    assert err.status == 400 and err.code is ToolErrorCode.VALIDATION
    assert err.message == "max_tokens: too large"
    assert "invalid_request_error" in json.dumps(err.tool_error.details)
    assert ToolError.from_exception(err, "model") is err.tool_error
    assert len(srv.requests) == 1, "a 400 is not retried"


@pytest.mark.parametrize("status,code", [(401, ToolErrorCode.AUTH), (403, ToolErrorCode.AUTH),
                                         (404, ToolErrorCode.NOT_FOUND),
                                         (422, ToolErrorCode.VALIDATION)])
def test_status_codes(engine, status, code):
    with WireServer() as srv:
        srv.replies.append(json_reply({"error": {"message": f"nope {status}"}}, status=status))
        m = connect("openai", "gpt-4o", base_url=srv.url + "/v1", api_key=KEY, engine=engine)
        with pytest.raises(ProviderError) as info:
            run(m.generate(ASK))
    assert info.value.code is code and info.value.message == f"nope {status}"
    assert len(srv.requests) == 1


def test_rate_limit_retry_after_is_honoured(engine):
    with WireServer() as srv:
        srv.replies.extend([
            json_reply({"error": {"message": "Rate limit reached", "type": "requests"}},
                       status=429, headers={"retry-after": "1"}),
            json_reply(cases("openai")["responses"]["answer"])])
        m = connect("openai", "gpt-4o", base_url=srv.url + "/v1", api_key=KEY, engine=engine)
        got = run(m.generate(ASK))
        first, second = srv.requests
    assert got.content.startswith("Rate limits")
    waited = second.at - first.at
    assert 0.95 <= waited < 3.0, waited


def test_retry_after_ms_and_a_delay_in_the_body(engine):
    with WireServer() as srv:
        srv.replies.extend([
            json_reply({"error": {"message": "slow down"}}, status=429,
                       headers={"retry-after-ms": "300", "retry-after": "30"}),
            json_reply(cases("openai")["responses"]["answer"])])
        m = connect("openai", "gpt-4o", base_url=srv.url + "/v1", api_key=KEY, engine=engine)
        run(m.generate(ASK))
        waited = srv.requests[1].at - srv.requests[0].at
    assert 0.28 <= waited < 1.5, waited
    gemini = cases("gemini")
    with WireServer() as srv:
        srv.replies.extend([
            json_reply({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
                                  "message": "Quota exceeded",
                                  "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                               "retryDelay": "0.4s"}]}}, status=429),
            json_reply(gemini["responses"]["answer"])])
        m = connect("gemini", "gemini-2.5-flash", base_url=srv.url + "/v1beta", api_key=KEY,
                    engine=engine)
        run(m.generate(ASK))
        waited = srv.requests[1].at - srv.requests[0].at
    assert 0.38 <= waited < 1.5, waited


def test_a_long_retry_after_is_not_waited_for(engine):
    with WireServer() as srv:
        srv.replies.append(json_reply({"error": {"message": "Rate limit reached"}}, status=429,
                                      headers={"retry-after": "3600"}))
        m = connect("openai", "gpt-4o", base_url=srv.url + "/v1", api_key=KEY, engine=engine)
        started = time.monotonic()
        with pytest.raises(ProviderError) as info:
            run(m.generate(ASK))
    assert time.monotonic() - started < 2
    assert info.value.code is ToolErrorCode.RATE_LIMIT and info.value.retry_after == 3600
    assert info.value.tool_error.recoverable
    assert len(srv.requests) == 1


def test_server_error_then_success(engine):
    with WireServer() as srv:
        srv.replies.extend([json_reply({"error": {"message": "boom"}}, status=500),
                            json_reply({"error": {"message": "overloaded"}}, status=503),
                            json_reply(cases("openai")["responses"]["tool_calls"])])
        m = connect("openai", "gpt-4o", base_url=srv.url + "/v1", api_key=KEY, engine=engine)
        got = run(m.generate(ASK, tools=TOOLS))
        times = [r.at for r in srv.requests]
    assert [c.name for c in got.tool_calls] == ["search_docs", "get_time"]
    assert len(times) == 3
    # exponential backoff with jitter: ~0.5 s, then ~1 s (+-25 %)
    assert 0.3 <= times[1] - times[0] < 2.0
    assert 0.7 <= times[2] - times[1] < 3.0


def test_a_retried_request_is_built_once(engine, monkeypatch):
    """Every attempt sends the body built for the first: the request (and the conversation
    fitted to the model's chat template) is not built again per retry."""
    built: list[str] = []
    real = engine.build_request

    def counted(*args: Any, **kw: Any) -> Any:
        built.append(args[0])
        return real(*args, **kw)

    monkeypatch.setattr(engine, "build_request", counted)
    asked = [{"role": "system", "content": "Be brief."}, *ASK,
             {"role": "system", "content": "Answer in French."}]
    with WireServer() as srv:
        srv.replies.extend([json_reply({"error": {"message": "boom"}}, status=503),
                            json_reply(cases("openai")["responses"]["answer"])])
        m = connect("llamacpp", "gemma-3-270m-it", base_url=srv.url + "/v1", api_key=KEY,
                    engine=engine, max_retries=1)
        got = run(m.generate(asked))
        first, second = srv.requests
    assert got.content.startswith("Rate limits")
    assert built == ["llamacpp"]
    assert first.body == second.body
    sent = json.loads(second.body)["messages"]
    assert [x["role"] for x in sent] == ["system", "user"]  # fitted: one system, first
    assert "Answer in French." in json.dumps(sent)
    # the later system text stays where it arrived: joined to the user turn beside it
    assert [r.action for r in m.last_rewrites] == ["system-to-user-turn"]


def test_retries_are_bounded(engine):
    with WireServer() as srv:
        srv.replies.extend([json_reply({"error": {"message": "boom"}}, status=502)] * 3)
        m = connect("openai", "gpt-4o", base_url=srv.url + "/v1", api_key=KEY, engine=engine,
                    max_retries=1)
        with pytest.raises(ProviderError) as info:
            run(m.generate(ASK))
    assert len(srv.requests) == 2
    assert info.value.code is ToolErrorCode.NETWORK and info.value.attempts == 2
    assert "boom" in str(info.value) and "after 2 attempts" in str(info.value)


def test_connection_refused_is_network(engine):
    with WireServer() as srv:
        url = srv.url
    m = connect("openai", "gpt-4o", base_url=url + "/v1", api_key=KEY, engine=engine,
                max_retries=0)
    with pytest.raises(ProviderError) as info:
        run(m.generate(ASK))
    assert info.value.code is ToolErrorCode.NETWORK
    assert "cannot reach 127.0.0.1" in str(info.value)


def test_slow_server_beyond_the_read_timeout(engine):
    with WireServer() as srv:
        srv.replies.append(Reply(body=b"{}", delay=3.0))
        m = connect("openai", "gpt-4o", base_url=srv.url + "/v1", api_key=KEY, engine=engine,
                    timeout=0.3, max_retries=0)
        started = time.monotonic()
        with pytest.raises(ProviderError) as info:
            run(m.generate(ASK))
        took = time.monotonic() - started
    assert info.value.code is ToolErrorCode.TIMEOUT
    assert took < 2.5, took


def test_timeouts_are_retried(engine):
    with WireServer() as srv:
        srv.replies.extend([Reply(body=b"{}", delay=0.8),
                            json_reply(cases("openai")["responses"]["answer"])])
        m = connect("openai", "gpt-4o", base_url=srv.url + "/v1", api_key=KEY, engine=engine,
                    timeout=0.3, max_retries=1)
        got = run(m.generate(ASK))
    assert got.content.startswith("Rate limits")


def test_connection_dropped_mid_stream(engine):
    """The chunks that arrived are delivered, then a NETWORK error - never a hang."""
    events = cases("openai")["streams"]["answer"]["events"]
    with WireServer() as srv:
        srv.replies.append(sse_reply(events, drop_after=2))
        m = connect("openai", "gpt-4o", base_url=srv.url + "/v1", api_key=KEY, engine=engine)
        got: list[Any] = []

        async def consume() -> None:
            async for chunk in m.stream(ASK):
                got.append(chunk)

        started = time.monotonic()
        with pytest.raises(ProviderError) as info:
            run(consume())
    assert time.monotonic() - started < 5
    assert info.value.code is ToolErrorCode.NETWORK
    assert "in the middle of the stream" in str(info.value)
    assert "".join(c.content or "" for c in got) == "Rate limits are "
    assert len(srv.requests) == 1, "a stream that has started is not retried"


def test_stream_slower_than_the_read_timeout(engine):
    events = cases("openai")["streams"]["answer"]["events"]
    reply = sse_reply(events)
    # the first text arrives at once, the rest only after 2 s: longer than the read timeout
    reply.chunks = [reply.chunks[0] + reply.chunks[1], *reply.chunks[2:]]
    reply.chunk_delay = 2.0
    with WireServer() as srv:
        srv.replies.append(reply)
        m = connect("openai", "gpt-4o", base_url=srv.url + "/v1", api_key=KEY, engine=engine,
                    timeout=0.4, max_retries=0)
        got: list[Any] = []

        async def consume() -> None:
            async for chunk in m.stream(ASK):
                got.append(chunk)

        started = time.monotonic()
        with pytest.raises(ProviderError) as info:
            run(consume())
    assert time.monotonic() - started < 1.5
    assert info.value.code is ToolErrorCode.TIMEOUT
    assert [c.content for c in got] == ["Rate limits are "]


def test_error_event_inside_a_stream(engine):
    data = cases("anthropic")
    events = data["streams"]["tool_use"]["events"][:3] + [
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}]
    with WireServer() as srv:
        srv.replies.append(sse_reply(events, named=True))
        m = connect("anthropic", "claude-sonnet-4-5", base_url=srv.url, api_key=KEY,
                    engine=engine)
        with pytest.raises(ProviderError) as info:
            run(collect(m, ASK, tools=TOOLS))
    assert info.value.message == "Overloaded"
    assert info.value.tool_error.details["provider_error"] == "overloaded_error"


def test_ndjson_error_line(engine):
    with WireServer() as srv:
        srv.replies.append(ndjson_reply([
            {"model": "qwen3:8b", "message": {"role": "assistant", "content": "Hel"}, "done": False},
            {"error": "an error was encountered while running the model"}]))
        m = connect("ollama", "qwen3:8b", base_url=srv.url, engine=engine)
        got: list[Any] = []

        async def consume() -> None:
            async for chunk in m.stream(ASK):
                got.append(chunk)

        with pytest.raises(ProviderError) as info:
            run(consume())
    assert info.value.message == "an error was encountered while running the model"
    assert [c.content for c in got] == ["Hel"]


def test_bedrock_exception_message_in_the_event_stream(engine, aws_env):
    from toolrules.clients._framing import encode_aws_event

    data = cases("bedrock")
    good = aws_event_reply(data["streams"]["tool_use"]["events"][:2])
    good.chunks.append(encode_aws_event(
        {":message-type": "exception", ":exception-type": "throttlingException",
         ":content-type": "application/json"}, b'{"message": "Too many tokens, please wait."}'))
    with WireServer() as srv:
        srv.replies.append(good)
        m = connect("bedrock", data["model"], base_url=srv.url, engine=engine)
        with pytest.raises(ProviderError) as info:
            run(collect(m, ASK))
    assert info.value.message == "Too many tokens, please wait."
    assert info.value.tool_error.details["provider_error"] == "throttlingException"


# ---------------------------------------------------------------- keys

def test_keys_never_show(engine, caplog):
    caplog.set_level(logging.DEBUG)
    with WireServer() as srv:
        srv.replies.extend([
            json_reply({"error": {"code": 400, "message": f"API key not valid: {KEY}",
                                  "status": "INVALID_ARGUMENT"}}, status=400),
            json_reply({"error": {"code": 403, "message": "denied"}}, status=403)])
        m = connect("gemini", "gemini-2.5-flash", base_url=srv.url + "/v1beta", api_key=KEY,
                    engine=engine)
        errors = []
        for _ in range(2):
            try:
                run(m.generate(ASK))
            except ProviderError as exc:
                errors.append(exc)
        assert srv.requests[0].query["key"] == [KEY], "the key did travel"
    import pickle
    import traceback

    texts = [repr(m), str(m), caplog.text]
    for exc in errors:
        texts += [str(exc), repr(exc), repr(exc.tool_error), "".join(
            traceback.format_exception(exc)), repr(pickle.loads(pickle.dumps(exc)).tool_error)]
    assert errors[0].code is ToolErrorCode.VALIDATION and "***" in errors[0].message
    assert errors[1].code is ToolErrorCode.AUTH
    for text in texts:
        assert KEY not in text
    assert "127.0.0.1" in caplog.text, "httpx did log the requests"


def test_missing_key(engine, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ProviderError) as info:
        connect("anthropic", "claude-sonnet-4-5", engine=engine)
    assert info.value.code is ToolErrorCode.AUTH
    assert "ANTHROPIC_API_KEY" in str(info.value)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    m = connect("anthropic", "claude-sonnet-4-5", engine=engine)
    assert m.base_url == "https://api.anthropic.com" and KEY not in repr(m)


def test_local_servers_need_no_key(engine, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with WireServer() as srv:
        srv.replies.append(json_reply(cases("openai")["responses"]["answer"]))
        m = connect("openai-compatible", model="qwen3:8b", base_url=srv.url + "/v1",
                    engine=engine)
        run(m.generate(ASK))
    assert "authorization" not in srv.requests[0].headers
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with WireServer() as srv:
        srv.replies.append(json_reply(cases("openai")["responses"]["answer"]))
        m = connect("openai-compatible", model="qwen3:8b", base_url=srv.url + "/v1",
                    engine=engine)
        run(m.generate(ASK))
    assert srv.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_base_url_from_env_and_no_default(engine, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    from toolrules import CapabilityError

    with pytest.raises(CapabilityError, match="OPENAI_BASE_URL"):
        connect("openai-compatible", "qwen3:8b", engine=engine)
    with WireServer() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url + "/v1")
        srv.replies.append(json_reply(cases("openai")["responses"]["answer"]))
        m = connect("openai-compatible:qwen3:8b", engine=engine)
        assert m.model == "qwen3:8b"
        run(m.generate(ASK))
        assert srv.requests[0].path == "/v1/chat/completions"
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:5")
    assert connect("ollama", "qwen3:8b", engine=engine).base_url == "http://127.0.0.1:5"


# ---------------------------------------------------------------- options

def test_request_overrides_headers_and_options(engine):
    with WireServer() as srv:
        srv.replies.extend([json_reply(cases("openai")["responses"]["answer"])] * 2)
        m = connect("openrouter", "qwen/qwen3-235b-a22b", base_url=srv.url + "/api/v1",
                    api_key=KEY, engine=engine, request_overrides={"route": "fallback"},
                    headers={"X-Title": "toolrules tests"})
        run(m.generate(ASK, max_tokens=64, request_overrides={"temperature": 0.2}))
        m.generate_sync(ASK)
        m.close()
        first, second = srv.requests
    assert first.json()["route"] == "fallback" and first.json()["temperature"] == 0.2
    assert first.json()["max_tokens"] == 64
    assert "temperature" not in second.json() and second.json()["route"] == "fallback"
    assert first.headers["x-title"] == "toolrules tests"


def test_sync_facade(engine):
    data = cases("openai")
    with WireServer() as srv:
        srv.replies.extend([json_reply(data["responses"]["tool_calls"]),
                            sse_reply(data["streams"]["tool_calls"]["events"])])
        with connect("openai", "gpt-4o", base_url=srv.url + "/v1", api_key=KEY,
                     engine=engine) as m:
            got = m.generate_sync(ASK, tools=TOOLS)
            chunks = list(m.stream_sync(ASK, tools=TOOLS))
    assert calls(got) == calls(m.last_response)
    assert [c.tool_name for c in chunks if c.type.value == "tool_end"] == ["search_docs", "get_time"]

    async def inside_a_loop() -> None:
        with pytest.raises(RuntimeError, match="await"):
            m.generate_sync(ASK)

    run(inside_a_loop())


def test_a_new_openai_compatible_server_is_a_rules_edit(tmp_path):
    """Base URL and deltas in one YAML file: no code."""
    import toolrules

    (tmp_path / "providers").mkdir()
    (tmp_path / "providers" / "acme.yaml").write_text(
        "extends: openai-compatible\n"
        "description: ACME inference server.\n"
        "http:\n"
        "  base_url: http://127.0.0.1:1/v2\n"
        "  base_url_env: ACME_BASE_URL\n"
        "  path: /chat\n"
        "  auth: {kind: query, param: token, env: ACME_TOKEN, optional: false}\n")
    eng = toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    with WireServer() as srv:
        srv.replies.append(json_reply(cases("openai")["responses"]["tool_calls"]))
        m = connect("acme", "qwen3:8b", base_url=srv.url + "/v2", api_key=KEY, engine=eng)
        got = run(m.generate(ASK, tools=TOOLS))
    assert srv.requests[0].path == "/v2/chat" and srv.requests[0].query == {"token": [KEY]}
    assert [c.name for c in got.tool_calls] == ["search_docs", "get_time"]
    with pytest.raises(ProviderError, match="ACME_TOKEN"):
        connect("acme", "qwen3:8b", engine=eng)


def test_connect_is_public():
    import toolrules

    assert toolrules.connect is connect
    assert toolrules.ProviderError is ProviderError


def test_the_tool_loop_runs_on_a_served_model(engine, tmp_path):
    """The loop, the built-in tools and a llama.cpp-style server that answers with its
    calls as text: one call read from the content, executed, its result sent back."""
    import toolrules

    (tmp_path / "config.yaml").write_text("port: 8080\n")
    executor = toolrules.ToolExecutor(toolrules.builtin_tools(workspace=tmp_path),
                                      workspace=tmp_path, trust="workspace", engine=engine)
    call = '<tool_call>\n{"name": "read_file", "arguments": {"path": "config.yaml"}}\n</tool_call>'
    with WireServer() as srv:
        srv.replies.extend([
            json_reply({"choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": call}}]}),
            json_reply({"choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": "The server listens on port 8080."}}]})])
        m = connect("llamacpp", "qwen3:8b", base_url=srv.url + "/v1", engine=engine)
        outcome = toolrules.ToolLoop(m, executor, max_rounds=4, engine=engine).run_sync(
            "What port does config.yaml set?")
        second = srv.requests[1].json()
    assert outcome.ok and outcome.content == "The server listens on port 8080."
    ((done_call, result),) = outcome.tool_history
    assert done_call.name == "read_file" and result.ok and "8080" in str(result.output)
    tool_msgs = [msg for msg in second["messages"] if msg["role"] == "tool"]
    assert tool_msgs and "8080" in tool_msgs[0]["content"]
    assert second["messages"][-2]["tool_calls"][0]["id"] == tool_msgs[0]["tool_call_id"]
