"""`toolrules serve` and the top-level fields of a request, over real HTTP on 127.0.0.1 with
the official `openai` and `anthropic` SDKs: every field is accounted for by the front's rule
(`serve.fields`) - read and carried to the upstream, ignored for a stated reason (logged and
traced), or refused with a 400 in the client API's own error shape naming the field and the
fix, before anything goes upstream. A field no rule mentions is refused, never dropped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated")

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import anthropic  # noqa: E402
import openai  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from serve_helpers import (  # noqa: E402
    ProxyServer,
    an,
    anthropic_proxy,
    chat_reply,
    oa,
    refusal,
    route_to,
)
from toolrules import ParsedResponse, UnsupportedContentError  # noqa: E402
from wire_server import json_reply  # noqa: E402

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def to_openai(upstream, traces, engine):
    """The proxy in front of an OpenAI-compatible server, tracing every request."""
    with ProxyServer(upstream="openai-compatible", base_url=upstream.url + "/v1",
                     trace_dir=str(traces), engine=engine) as proxy:
        yield proxy


@pytest.fixture
def to_anthropic(upstream, tmp_path, monkeypatch, engine):
    with anthropic_proxy(upstream, tmp_path, monkeypatch, engine=engine) as proxy:
        yield proxy


@pytest.fixture
def to_responses(upstream, tmp_path, monkeypatch, engine):
    monkeypatch.setenv("TOOLRULES_TEST_UPSTREAM_KEY", "sk-test")
    cfg = route_to("openai-responses", "gpt-5", upstream.url + "/v1")
    with ProxyServer(config=cfg, tmp=tmp_path, engine=engine) as proxy:
        yield proxy


@pytest.fixture(autouse=True)
def fresh(upstream):
    upstream.requests.clear()
    upstream.replies.clear()


def openai_error(e: Any) -> str:
    return str(refusal(e)["message"])


def anthropic_error(e: Any) -> str:
    return str(refusal(e)["message"])


# ---------------------------------------------------------------- chat completions

@pytest.mark.parametrize(("kwargs", "field", "fix"), [
    ({"n": 2}, "n", "Send `n: 1`"),
    ({"logprobs": True}, "logprobs", "log probabilities"),
    ({"logprobs": True, "top_logprobs": 3}, "logprobs", "log probabilities"),
    ({"modalities": ["text", "audio"]}, "modalities", "text only"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio", "text only"),
    ({"web_search_options": {}}, "web_search_options", "provider's side"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format", "with `schema` a JSON Schema object"),
    ({"store": True}, "store", "Send `store: false`"),
    ({"frequency_penalty": 0.5}, "frequency_penalty", "request_overrides"),
    ({"logit_bias": {"50256": -100}}, "logit_bias", "token ids"),
    ({"reasoning_effort": "high"}, "reasoning_effort", "request_overrides"),
    ({"extra_body": {"functions": [{"name": "f", "parameters": {}}]}}, "functions",
     "deprecated form of `tools`"),
], ids=lambda v: v if isinstance(v, str) and " " not in v and "`" not in v else None)
@pytest.mark.parametrize("stream", [False, True])
def test_chat_fields_the_proxy_cannot_carry_are_refused(upstream, to_openai, access, kwargs,
                                                        field, fix, stream):
    with pytest.raises(openai.BadRequestError) as e:
        oa(to_openai).chat.completions.create(model="gpt-4o", messages=HI, stream=stream,
                                              **kwargs)
    msg = openai_error(e)
    assert f"request field `{field}`" in msg and fix in msg
    assert "refuses content it cannot carry" in msg
    assert upstream.requests == []  # nothing went upstream
    assert access()[-1]["status"] == 400


def test_an_unknown_chat_field_is_refused_not_dropped(upstream, to_openai):
    with pytest.raises(openai.BadRequestError) as e:
        oa(to_openai).chat.completions.create(model="gpt-4o", messages=HI,
                                              extra_body={"guided_json": {"type": "object"}})
    msg = openai_error(e)
    assert "request field `guided_json` is not supported" in msg
    assert "no rule of the openai front" in msg and "Leave it out" in msg
    assert upstream.requests == []


def test_chat_hints_are_ignored_with_their_reason_logged_and_traced(upstream, to_openai,
                                                                   access, traces: Path):
    upstream.replies.append(chat_reply("fine"))
    r = oa(to_openai).chat.completions.create(
        model="gpt-4o", messages=HI, metadata={"job": "nightly"}, n=1, store=False,
        service_tier="auto", logprobs=False, prompt_cache_key="k1",
        safety_identifier="u-1", prediction={"type": "content", "content": "fine"},
        response_format={"type": "text"}, frequency_penalty=0, presence_penalty=0,
        extra_body={"null_field_asks_nothing": None})
    assert r.choices[0].message.content == "fine"
    sent = upstream.requests[-1].json()
    for name in ("metadata", "n", "store", "service_tier", "logprobs", "prediction",
                 "prompt_cache_key", "safety_identifier", "frequency_penalty"):
        assert name not in sent
    info = access()[-1]
    assert info["status"] == 200
    ignored = info["ignored"]
    assert set(ignored) == {"metadata", "n", "store", "service_tier", "logprobs",
                            "prompt_cache_key", "safety_identifier", "prediction",
                            "response_format", "frequency_penalty", "presence_penalty"}
    assert "labels for the client's own records" in ignored["metadata"]
    start = json.loads((traces / f"{info['id']}.jsonl").read_text().splitlines()[0])
    assert start["type"] == "start" and start["ignored"] == ignored


def test_chat_fields_that_are_read_reach_the_upstream(upstream, to_openai, access):
    upstream.replies.append(chat_reply("fine"))
    oa(to_openai).chat.completions.create(
        model="gpt-4o", messages=HI, temperature=0.2, top_p=0.9, seed=7, stop=["END"],
        max_completion_tokens=33, user="u-7", parallel_tool_calls=False,
        tools=[{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {}}}}])
    sent = upstream.requests[-1].json()
    assert (sent["temperature"], sent["top_p"], sent["seed"], sent["stop"]) == (
        0.2, 0.9, 7, ["END"])
    assert sent["max_tokens"] == 33 and sent["user"] == "u-7"
    assert sent["parallel_tool_calls"] is False
    assert "ignored" not in access()[-1]


def test_stream_options_are_read_by_the_stream(upstream, to_openai):
    upstream.replies.append(chat_reply("fine"))
    chunks = list(oa(to_openai).chat.completions.create(
        model="gpt-4o", messages=HI, stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].usage is not None and chunks[-1].choices == []


# ---------------------------------------------------------------- Anthropic Messages

@pytest.mark.parametrize(("extra", "field", "fix"), [
    ({"mcp_servers": [{"type": "url", "url": "https://example.com/mcp", "name": "docs"}]},
     "mcp_servers", "MCP connector"),
    ({"container": "container_011"}, "container", "state kept on Anthropic's side"),
    ({"output_format": {"type": "json_schema", "schema": "object"}},
     "output_format", "with `schema` a JSON Schema object"),
    ({"speculative": True}, "speculative", "is not supported"),
], ids=lambda v: v if isinstance(v, str) and " " not in v else None)
def test_anthropic_server_side_fields_are_refused(upstream, to_anthropic, extra, field, fix):
    with pytest.raises(anthropic.BadRequestError) as e:
        an(to_anthropic).messages.create(model="claude-sonnet-4-5", max_tokens=20,
                                         messages=HI, extra_body=extra)
    msg = anthropic_error(e)
    assert f"request field `{field}`" in msg and fix in msg
    assert upstream.requests == []


def test_anthropic_thinking_and_metadata_are_carried(upstream, to_anthropic, access, engine):
    upstream.replies.append(json_reply(engine.build_response(
        ParsedResponse(content="fine", finish_reason="stop"), "anthropic", "up")))
    r = an(to_anthropic).messages.create(
        model="claude-sonnet-4-5", max_tokens=2048, messages=HI,
        thinking={"type": "enabled", "budget_tokens": 1024}, metadata={"user_id": "u-1"},
        service_tier="auto", extra_body={"top_k": 5})
    assert r.content[0].text == "fine"
    sent = upstream.requests[-1].json()
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert sent["metadata"] == {"user_id": "u-1"} and sent["top_k"] == 5
    assert "service_tier" not in sent
    assert set(access()[-1]["ignored"]) == {"service_tier"}


def test_anthropic_options_an_openai_upstream_has_no_field_for_are_logged(upstream,
                                                                          to_openai, access):
    upstream.replies.append(chat_reply("fine"))
    an(to_openai).messages.create(model="gpt-4o", max_tokens=20, messages=HI,
                                  metadata={"user_id": "u-1"}, extra_body={"top_k": 5})
    sent = upstream.requests[-1].json()
    assert "top_k" not in sent and "metadata" not in sent
    ignored = access()[-1]["ignored"]
    assert set(ignored) == {"top_k", "metadata"}
    assert "has no field for `top_k`" in ignored["top_k"]


# ---------------------------------------------------------------- Responses

@pytest.mark.parametrize(("kwargs", "field", "fix"), [
    ({"previous_response_id": "resp_123"}, "previous_response_id",
     "Send the whole conversation in `input`"),
    ({"conversation": "conv_123"}, "conversation", "Send the whole conversation"),
    ({"background": True}, "background", "polled for later"),
    ({"include": ["message.output_text.logprobs"]}, "include", "log probabilities"),
    ({"store": True}, "store", "Send `store: false`"),
    ({"prompt": {"id": "pmpt_1"}}, "prompt", "stored prompt template"),
    ({"truncation": "auto"}, "truncation", "trim `input` yourself"),
    ({"top_logprobs": 2}, "top_logprobs", "log probabilities"),
], ids=lambda v: v if isinstance(v, str) and " " not in v and "`" not in v else None)
def test_responses_state_and_server_features_are_refused(upstream, to_openai, kwargs, field,
                                                         fix):
    with pytest.raises(openai.BadRequestError) as e:
        oa(to_openai).responses.create(model="gpt-4o", input="hi", **kwargs)
    msg = openai_error(e)
    assert f"request field `{field}`" in msg and fix in msg
    assert upstream.requests == []


def test_responses_hints_are_ignored(upstream, to_openai, access):
    upstream.replies.append(chat_reply("fine"))
    r = oa(to_openai).responses.create(
        model="gpt-4o", input="hi", store=False, metadata={"a": "b"}, background=False,
        include=[], max_tool_calls=3, truncation="disabled", text={"format": {"type": "text"}},
        service_tier="auto")
    assert r.output_text == "fine"
    ignored = access()[-1]["ignored"]
    assert {"store", "metadata", "background", "include", "max_tool_calls", "truncation",
            "text", "service_tier"} <= set(ignored)


def test_coding_agent_defaults_go_through_with_their_reasons(upstream, to_openai,
                                                            to_anthropic, access, engine):
    """What coding agents send by default is not refused: Codex's encrypted-reasoning
    include and verbosity, Claude Code's context management."""
    upstream.replies.append(chat_reply("fine"))
    r = oa(to_openai).responses.create(
        model="gpt-4o", input="hi", store=False, include=["reasoning.encrypted_content"],
        text={"verbosity": "low"})
    assert r.output_text == "fine"
    ignored = access()[-1]["ignored"]
    assert "encrypted reasoning" in ignored["include"] and "length hint" in ignored["text"]
    upstream.replies.append(json_reply(engine.build_response(
        ParsedResponse(content="fine", finish_reason="stop"), "anthropic", "up")))
    an(to_anthropic).messages.create(
        model="claude-sonnet-4-5", max_tokens=20, messages=HI,
        extra_body={"context_management": {"edits": [{"type": "clear_thinking_20251015",
                                                       "keep": "all"}]},
                    "output_config": {"effort": "medium"}})
    sent = upstream.requests[-1].json()
    assert "context_management" not in sent and "output_config" not in sent
    ignored = access()[-1]["ignored"]
    assert "nothing cleared" in ignored["context_management"]
    assert "effort level" in ignored["output_config"]
    # an output format other than a JSON schema is refused
    with pytest.raises(anthropic.BadRequestError) as e:
        an(to_anthropic).messages.create(
            model="claude-sonnet-4-5", max_tokens=20, messages=HI,
            extra_body={"output_config": {"format": {"type": "regex", "pattern": "a+"}}})
    msg = anthropic_error(e)
    assert "request field `output_config.format`" in msg and "`{type: json_schema" in msg


def test_responses_reasoning_and_user_are_carried(upstream, to_responses, engine):
    upstream.replies.append(json_reply(engine.build_response(
        ParsedResponse(content="fine", finish_reason="stop"), "openai-responses", "up")))
    r = oa(to_responses).responses.create(model="gpt-5", input="hi", user="u-9",
                                          reasoning={"effort": "low"}, max_output_tokens=64)
    assert r.output_text == "fine"
    sent = upstream.requests[-1].json()
    assert sent["reasoning"] == {"effort": "low"} and sent["user"] == "u-9"
    assert sent["max_output_tokens"] == 64


# ---------------------------------------------------------------- JSON answers

class Rating(BaseModel):
    score: int
    reason: str


RATING_SCHEMA = {"type": "object", "properties": {"score": {"type": "integer"},
                                                  "reason": {"type": "string"}},
                 "required": ["score", "reason"], "additionalProperties": False}


def test_a_chat_json_schema_is_asked_upstream_and_the_sdk_parses_the_answer(upstream,
                                                                           to_openai, access):
    """`chat.completions.parse(response_format=Model)`: the schema goes upstream as the
    upstream's own response format, and the JSON is taken out of the fence around it."""
    upstream.replies.append(chat_reply('Sure:\n```json\n{"score": 7, "reason": "short"}\n```'))
    r = oa(to_openai).chat.completions.parse(model="gpt-4o", messages=HI,
                                            response_format=Rating)
    assert r.choices[0].message.parsed == Rating(score=7, reason="short")
    assert json.loads(r.choices[0].message.content) == {"score": 7, "reason": "short"}
    sent = upstream.requests[-1].json()["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "Rating"
    assert sent["json_schema"]["schema"]["properties"]["score"] == {"title": "Score",
                                                                    "type": "integer"}
    info = access()[-1]
    assert info["status"] == 200 and "response_format" not in info.get("ignored", {})


def test_an_invalid_chat_json_answer_goes_back_once_with_what_is_wrong(upstream, to_openai,
                                                                      access):
    upstream.replies.append(chat_reply('{"score": "high"}'))
    upstream.replies.append(chat_reply('{"score": 3, "reason": "fixed"}'))
    r = oa(to_openai).chat.completions.create(
        model="gpt-4o", messages=HI, response_format={
            "type": "json_schema", "json_schema": {"name": "rating", "schema": RATING_SCHEMA}})
    assert json.loads(r.choices[0].message.content) == {"score": 3, "reason": "fixed"}
    assert len(upstream.requests) == 2
    retry = upstream.requests[1].json()["messages"]
    assert retry[-2] == {"role": "assistant", "content": '{"score": "high"}'}
    assert retry[-1]["role"] == "user" and "'reason' is a required" in retry[-1]["content"]
    assert access()[-1]["invalid"] == 1


@pytest.mark.parametrize("stream", [False, True])
def test_json_mode_answers_one_json_value(upstream, to_openai, stream):
    upstream.replies.append(chat_reply('Here:\n```json\n{"a": [1, 2]}\n```\nDone.'))
    r = oa(to_openai).chat.completions.create(model="gpt-4o", messages=HI, stream=stream,
                                              response_format={"type": "json_object"})
    text = "".join(c.choices[0].delta.content or "" for c in r if c.choices) if stream \
        else r.choices[0].message.content
    assert json.loads(text) == {"a": [1, 2]}
    assert upstream.requests[-1].json()["response_format"] == {"type": "json_object"}


def test_a_responses_json_schema_is_asked_upstream_and_parsed(upstream, to_openai):
    upstream.replies.append(chat_reply('{"score": 9, "reason": "clear"}'))
    r = oa(to_openai).responses.parse(model="gpt-4o", input="Rate it.", text_format=Rating)
    assert r.output_parsed == Rating(score=9, reason="clear")
    sent = upstream.requests[-1].json()["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "Rating"


def test_an_anthropic_json_schema_is_asked_in_the_prompt_and_parsed(upstream, to_anthropic,
                                                                   engine, access):
    """`messages.parse(output_format=Model)` sends `output_config.format`; an Anthropic
    upstream's rule has no JSON answer of its own, so the proxy asks in the prompt and
    checks the answer (the fence around it taken away) before the SDK parses it."""
    upstream.replies.append(json_reply(engine.build_response(ParsedResponse(
        content='```json\n{"score": 5, "reason": "ok"}\n```', finish_reason="stop"),
        "anthropic", "up")))
    r = an(to_anthropic).messages.parse(model="claude-sonnet-4-5", max_tokens=50,
                                        messages=HI, output_format=Rating,
                                        output_config={"effort": "low"})
    assert r.parsed_output == Rating(score=5, reason="ok")
    # the effort beside the format is not carried, and said so
    assert "effort level" in access()[-1]["ignored"]["output_config.effort"]
    sent = upstream.requests[-1].json()
    assert "output_config" not in sent
    assert "JSON" in sent["system"] and '"reason"' in sent["system"]  # the schema, asked


@pytest.mark.parametrize("fmt", [{"type": "json_schema", "name": "x"},
                                 {"type": "json_schema", "name": "x", "schema": "object"},
                                 {"type": "grammar", "grammar": "root ::= x"}])
def test_a_responses_format_the_proxy_cannot_carry_is_refused(upstream, to_openai, fmt):
    with pytest.raises(openai.BadRequestError) as e:
        oa(to_openai).responses.create(model="gpt-4o", input="hi", text={"format": fmt})
    msg = openai_error(e)
    assert "request field `text`" in msg and "with `schema` a JSON Schema object" in msg
    assert upstream.requests == []


# ---------------------------------------------------------------- the rule underneath

def test_lint_reads_paths_of_any_length():
    """JMESPath gives `a.b.c` as one subexpression of three fields: the lint's reads are
    the whole path, so a field read field by field (`output_config.format`) is matched."""
    from toolrules.providers._rules import _field_paths, _parsed

    assert _field_paths(_parsed("a.b.c == 'x' && {s: d.e.f.g}")) == {"a.b.c", "d.e.f.g"}
    assert _field_paths(_parsed("a.b")) == {"a.b"}
    assert _field_paths(_parsed("a.b.c[].d")) == {"a.b.c"}  # up to the projection
    assert _field_paths(_parsed("a[0].b.c")) == {"a"}


def test_every_served_front_accounts_for_its_fields(engine):
    for provider in ("openai", "anthropic", "openai-responses"):
        front = engine.front(provider)
        assert front.fields, provider
        with pytest.raises(UnsupportedContentError) as e:
            front.account({"model": "m", "no_such_field": 1})
        assert e.value.where == "no_such_field" and e.value.part_type == "field"
        assert front.account({"model": "m", "no_such_field": None}) == {}


def test_lint_names_unaccounted_and_unread_fields(tmp_path, engine):
    from click.testing import CliRunner

    from toolrules.cli import main

    prov = tmp_path / "providers"
    prov.mkdir()
    (prov / "front-a.yaml").write_text(
        "extends: openai\n"
        "serve:\n"
        "  options: {top_k: top_k}\n"
        "  fields:\n"
        "    ghost: read\n"
        "    n: {when: 'n ==', ignore: one}\n"
        "    audio: {ignore: a, refuse: b}\n", encoding="utf-8")
    (prov / "front-b.yaml").write_text(
        "extends: openai\nserve: {fields: null}\n", encoding="utf-8")
    res = CliRunner().invoke(main, ["lint", str(tmp_path)])
    out = res.output
    assert res.exit_code == 1
    assert "front-a.yaml:5:5: [error] provider 'front-a': the request field 'ghost' is " \
        "listed as `read`, but no rule reads it" in out
    assert "the request field 'top_k' is read" in out and "(provider-fields)" in out
    assert "front-a.yaml:6:9: [error] field 'n': `when` is not a valid JMESPath" in out
    assert "front-a.yaml:7:5: [error] field 'audio': a case has exactly one of" in out
    assert "provider 'front-b' is served to clients (`serve:`) but has no `serve.fields`" in out
