"""Provider streaming: each provider's own events -> StreamChunks under the streaming
contract (docs/concepts/streaming.md); the final result equals parse_response of the body."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO
from toolrules import ParseError, StreamChunkType

T = StreamChunkType
CASES = REPO / "golden" / "providers"
TOOLS = yaml.safe_load((CASES / "conversation.cases.yaml").read_text())["tools"]


def _stream_cases():
    for path in sorted(CASES.glob("*.cases.yaml")):
        provider = path.name.removesuffix(".cases.yaml")
        data = yaml.safe_load(path.read_text()) or {}
        for name, case in (data.get("streams") or {}).items():
            yield pytest.param(provider, data, name, case, id=f"{provider}_{name}")


def run(engine, provider, events, tools=None, model=None):
    # sequential ids: calls read from the text are numbered the same way in both paths
    stream = engine.response_stream(provider, tools=tools, model=model, ids="sequential")
    chunks = []
    for e in events:
        chunks.extend(stream.feed(e))
    chunks.extend(stream.close())
    return chunks, stream.result


def rebuild(chunks):
    """What a client following the contract reconstructs from the chunks."""
    text = "".join(c.content for c in chunks if c.type is T.TEXT) or None
    reasoning = "".join(c.content for c in chunks if c.type is T.REASONING) or None
    calls = {}
    for c in chunks:
        if c.type is T.TOOL_START:
            calls[c.index] = [c.tool_name, ""]
        elif c.type is T.TOOL_ARGS:
            calls[c.index][1] += c.args_delta
    return text, reasoning, [(calls[i][0], json.loads(calls[i][1])) for i in sorted(calls)]


@pytest.mark.parametrize("provider,data,name,case", list(_stream_cases()))
def test_stream_result_equals_parse_response(engine, provider, data, name, case):
    chunks, result = run(engine, provider, case["events"], tools=TOOLS, model=data.get("model"))
    text, reasoning, calls = rebuild(chunks)
    assert (text, reasoning) == (result.content, result.reasoning_content)
    assert calls == [(c.name, c.arguments) for c in result.tool_calls]
    if case.get("equals"):
        body = data["responses"][case["equals"]]
        parsed = engine.parse_response(body, provider, tools=TOOLS, model=data.get("model"),
                                       ids="sequential")
        assert (result.content, result.reasoning_content, result.tool_calls, result.finish_reason,
                result.warnings) == (parsed.content, parsed.reasoning_content, parsed.tool_calls,
                                     parsed.finish_reason, parsed.warnings)


def _openai_events(calls, finish="tool_calls", split=1000):
    events = []
    for i, (cid, name, args) in enumerate(calls):
        events.append({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "id": cid, "type": "function", "function": {"name": name, "arguments": ""}}]}}]})
        for j in range(0, len(args), split):
            events.append({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": i, "function": {"arguments": args[j:j + split]}}]}}]})
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return events


def test_calls_commit_only_when_complete(engine):
    args0 = json.dumps({"query": "a <tool_call> b", "tags": ["x"]})
    events = _openai_events([("c0", "search_docs", args0), ("c1", "get_time", "{}")], split=1)
    stream = engine.response_stream("openai")
    seen = []
    for i, e in enumerate(events):
        for c in stream.feed(e):
            seen.append((i, c))
    seen.extend((len(events), c) for c in stream.close())
    start0 = next(i for i, c in seen if c.type is T.TOOL_START and c.index == 0)
    last_fragment0 = max(i for i, c in seen if c.type is T.TOOL_PROGRESS and c.index == 0)
    assert start0 > last_fragment0  # committed after the last fragment, when call 1 began
    progress = "".join(c.args_delta for _, c in seen if c.type is T.TOOL_PROGRESS and c.index == 0)
    assert progress == args0
    end0 = next(c for _, c in seen if c.type is T.TOOL_END and c.index == 0)
    assert end0.arguments == {"query": "a <tool_call> b", "tags": ["x"]}
    assert stream.result.finish_reason == "tool_calls"


def test_cut_off_call_is_never_committed(engine):
    events = _openai_events([("c0", "search_docs", '{"query": "rate lim')], finish="length", split=3)
    chunks, result = run(engine, "openai", events)
    assert not [c for c in chunks if c.type in (T.TOOL_START, T.TOOL_ARGS, T.TOOL_END)]
    assert [c for c in chunks if c.type is T.TOOL_PROGRESS]
    assert result.tool_calls == () and result.finish_reason == "length"
    assert result.warnings and "search_docs" in result.warnings[0]


def test_anthropic_commits_at_block_stop(engine):
    events = [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "get_time", "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
    ]
    stream = engine.response_stream("anthropic")
    assert all(c.type is T.TOOL_PROGRESS for e in events for c in stream.feed(e))
    chunks = stream.feed({"type": "content_block_stop", "index": 0})
    assert [c.type for c in chunks] == [T.TOOL_START, T.TOOL_ARGS, T.TOOL_END]


def test_event_forms_sse_ndjson_and_done(engine):
    stream = engine.response_stream("openai")
    assert stream.feed("event: ping") == []
    assert stream.feed(": keep-alive") == []
    assert stream.feed('data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}')[0].content == "hi"
    assert stream.feed(b'{"choices": [{"index": 0, "delta": {"content": "!"}}]}')[0].content == "!"
    assert stream.feed("data: [DONE]") == []
    stream.close()
    assert stream.result.content == "hi!"
    with pytest.raises(ParseError, match="closed"):
        stream.feed({"choices": []})
    with pytest.raises(ParseError, match="not JSON"):
        engine.response_stream("openai").feed("data: {oops")


def test_stream_restores_names_and_arguments(engine):
    from toolrules import Tool

    tool = Tool("facts.propose", "", {"type": "object", "properties": {"x": {"type": "string"}}})
    events = _openai_events([("c", "facts_propose", '{"x": null}')])
    chunks, result = run(engine, "openai", events, tools=[tool])
    assert result.tool_calls[0].name == "facts.propose" and result.tool_calls[0].arguments == {}
    assert next(c for c in chunks if c.type is T.TOOL_START).tool_name == "facts.propose"
    assert next(c for c in chunks if c.type is T.TOOL_PROGRESS).tool_name == "facts.propose"


def test_providers_without_stream_rules_say_so(engine):
    for provider in engine.providers():
        engine.response_stream(provider)  # every bundled provider streams


@settings(max_examples=60, deadline=None)
@given(args=st.dictionaries(st.text(min_size=1, max_size=8),
                            st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20)),
                            max_size=5),
       text=st.text(max_size=40), cuts=st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=40))
def test_any_split_gives_the_same_result(engine, args, text, cuts):
    """However the provider splits text and arguments into deltas, the result is the same."""
    payload = json.dumps(args)
    events = []

    def pieces(s):
        i, k = 0, 0
        while i < len(s):
            n = cuts[k % len(cuts)]
            yield s[i:i + n]
            i, k = i + n, k + 1

    for piece in pieces(text):
        events.append({"choices": [{"index": 0, "delta": {"content": piece}}]})
    events.append({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "c", "function": {"name": "f", "arguments": ""}}]}}]})
    for piece in pieces(payload):
        events.append({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": piece}}]}}]})
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    chunks, result = run(engine, "openai", events)
    body = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": text or None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": payload}}]}}]}
    assert result.tool_calls == engine.parse_response(body, "openai").tool_calls
    assert result.content == (text or None)
    assert rebuild(chunks) == (text or None, None, [("f", args)])
