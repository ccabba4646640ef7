"""Traces keep images and documents: a message's `ContentPart`s are written as part dicts
(marked `content_parts`) and come back as `ContentPart`s when a trace is replayed - the
tool loop's (`runtime.replay`) and the proxy's (`toolrules replay` of a `--trace-dir`
file) - so a replay sends what was sent. A tampered image is a replay of a different
request, and shows as one."""

from __future__ import annotations

import asyncio
import json
import shutil
from typing import Any

import pytest
from click.testing import CliRunner

import toolrules
from toolrules import ContentPart, Message, ScriptedModel, ToolExecutor, ToolLoop, builtin_tools
from toolrules.cli import main
from toolrules.runtime import Trace, replay

ENGINE = toolrules.load()
QWEN = "Qwen/Qwen3-8B"
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
       "RU5ErkJggg==")
OTHER_PNG = PNG.replace("DUlEQVR42mP8", "DUlEQVR42mP9")
IMAGE = ContentPart("image", media_type="image/png", data=PNG)
DOC = ContentPart("document", text="shout it", name="notes.txt")


def hermes(tool: str, /, **args: object) -> str:
    return f'<tool_call>\n{json.dumps({"name": tool, "arguments": args})}\n</tool_call>'


TURNS = [hermes("read_file", path="input.txt"),
         hermes("write_file", path="output.txt", content="HELLO"),
         "Done: output.txt holds HELLO."]
TASK = Message(role="user", content=(ContentPart("text", text="Do what the picture says."),
                                     IMAGE, DOC))


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "input.txt").write_text("hello")
    return ws


def executor_for(ws):
    return ToolExecutor(builtin_tools(ws, engine=ENGINE), workspace=ws, trust="workspace",
                        engine=ENGINE)


def record(tmp_path, workspace) -> Any:
    model = ScriptedModel(TURNS, model=QWEN, engine=ENGINE)
    out = ToolLoop(model, executor_for(workspace), engine=ENGINE).run_sync([TASK])
    assert out.stopped == "done"
    return out.save_trace(tmp_path / "media.jsonl")


def first_request(trace: Trace) -> Message:
    """The opening user message as the (replayed) loop sent it to the model."""
    turn = trace.of_type("turn")[0]
    return next(m for m in turn["request"]["messages"] if m.role == "user")


def written_turns(trace: Trace) -> list[dict[str, Any]]:
    return [r for r in trace.to_dicts() if r["type"] == "turn"]


# ---------------------------------------------------------------- the JSON form

def test_parts_are_written_as_part_dicts_and_read_back():
    from toolrules.runtime._events import message_dict, message_from_dict

    d = message_dict(TASK)
    assert d["content_parts"] is True
    assert d["content"][1] == {"type": "image", "media_type": "image/png", "data": PNG}
    back = message_from_dict(json.loads(json.dumps(d)))
    assert back == TASK and isinstance(back.content[1], ContentPart)
    # coerce_message reads a transcript (ChatSession.save) the same way
    from toolrules.providers._messages import coerce_message

    assert coerce_message(d) == TASK
    # a tool result that is a JSON list stays a JSON list (no marker, no parts)
    plain = message_dict(Message(role="tool", content=[{"type": "image", "data": "x"}],
                                 tool_call_id="c1"))
    assert "content_parts" not in plain
    assert message_from_dict(plain).content == [{"type": "image", "data": "x"}]


def test_a_broken_part_in_a_trace_is_an_error_not_a_guess():
    from toolrules.runtime._events import message_from_dict

    with pytest.raises(toolrules.ParseError, match="part 0"):
        message_from_dict({"role": "user", "content_parts": True,
                           "content": [{"type": "hologram", "data": "x"}]})


# ---------------------------------------------------------------- the tool loop

def test_a_loop_trace_with_media_replays_faithfully(tmp_path, workspace):
    pristine = tmp_path / "pristine"
    shutil.copytree(workspace, pristine)
    path = record(tmp_path, workspace)
    start = json.loads(path.read_text().splitlines()[0])
    assert start["messages"][0]["content_parts"] is True
    assert start["messages"][0]["content"][1]["data"] == PNG
    report = asyncio.run(replay(Trace.load(path), executor_for(pristine), engine=ENGINE))
    assert report.ok, [str(d) for d in report.divergences]
    assert (pristine / "output.txt").read_text() == "HELLO"
    # the model was sent the same image and document again, as parts
    sent = first_request(report.outcome.trace)
    assert sent == TASK
    assert isinstance(sent.content[1], ContentPart) and sent.content[1].data == PNG
    # and the replayed trace writes the same request as the recording
    rec_turn = Trace.load(path).of_type("turn")[0]["request"]
    new_turn = written_turns(report.outcome.trace)[0]["request"]
    assert new_turn["messages"] == rec_turn["messages"]


def test_a_tampered_image_is_replayed_as_a_different_request(tmp_path, workspace):
    path = record(tmp_path, workspace)
    recorded = Trace.load(path)
    records = recorded.to_dicts()
    records[0]["messages"][0]["content"][1]["data"] = OTHER_PNG
    report = asyncio.run(replay(Trace(records), executor_for(workspace), engine=ENGINE))
    sent = first_request(report.outcome.trace)
    assert sent.content[1] == ContentPart("image", media_type="image/png", data=OTHER_PNG)
    assert sent != TASK  # a clear difference from what was recorded
    rec_turn = recorded.of_type("turn")[0]["request"]["messages"]
    new_turn = written_turns(report.outcome.trace)[0]["request"]["messages"]
    assert new_turn != rec_turn
    assert rec_turn[0]["content"][1]["data"] == PNG
    assert new_turn[0]["content"][1]["data"] == OTHER_PNG


def test_cli_replays_a_loop_trace_with_media(tmp_path, workspace):
    path = record(tmp_path, workspace)
    (workspace / "output.txt").unlink()
    res = CliRunner().invoke(main, ["replay", str(path), "--workspace", str(workspace)])
    assert res.exit_code == 0, res.output
    assert "no divergence" in res.output


# ---------------------------------------------------------------- the proxy

@pytest.fixture
def proxy_trace(tmp_path):
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    anthropic = pytest.importorskip("anthropic")
    from serve_helpers import ProxyServer
    from wire_server import WireServer, json_reply

    answer = json_reply({"id": "chatcmpl-up", "object": "chat.completion", "created": 1,
                         "model": "up", "choices": [{"index": 0, "finish_reason": "stop",
                                                     "message": {"role": "assistant",
                                                                 "content": "a red dot"}}]})
    trace_dir = tmp_path / "traces"
    with WireServer() as upstream:
        upstream.replies.append(answer)
        with ProxyServer(upstream="openai-compatible", base_url=upstream.url + "/v1",
                         trace_dir=str(trace_dir)) as proxy:
            client = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0,
                                         timeout=20)
            r = client.messages.create(model="gpt-4o", max_tokens=20, messages=[
                {"role": "user", "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": PNG}}]}])
            assert r.content[0].text == "a red dot"
    (path,) = list(trace_dir.glob("*.jsonl"))
    return path


class _Spy:
    """Keeps the messages the replayed exchange is given."""

    def __init__(self, monkeypatch):
        import toolrules.serve._replay as mod

        self.messages: list[Any] = []
        real = mod.Exchange
        spy = self

        class Exchange(real):
            def __init__(self, *a, **kw):
                spy.messages = list(kw["messages"])
                super().__init__(*a, **kw)

        monkeypatch.setattr(mod, "Exchange", Exchange)


def test_a_serve_trace_with_an_image_replays_faithfully(proxy_trace, monkeypatch):
    from toolrules.serve._replay import replay_serve_trace

    start = json.loads(proxy_trace.read_text().splitlines()[0])
    assert start["messages"][0]["content_parts"] is True
    res = CliRunner().invoke(main, ["replay", str(proxy_trace)])
    assert res.exit_code == 0, res.output
    assert "no divergence" in res.output
    spy = _Spy(monkeypatch)
    result = asyncio.run(replay_serve_trace(Trace.load(proxy_trace), ENGINE))
    assert result.ok, result.divergences
    (msg,) = spy.messages
    assert msg.content == (ContentPart("text", text="What is this?"), IMAGE)


def test_a_tampered_serve_trace_replays_the_tampered_image(proxy_trace, monkeypatch):
    from toolrules.serve._replay import replay_serve_trace

    records = Trace.load(proxy_trace).to_dicts()
    records[0]["messages"][0]["content"][1]["data"] = OTHER_PNG
    spy = _Spy(monkeypatch)
    asyncio.run(replay_serve_trace(Trace(records), ENGINE))
    (msg,) = spy.messages
    assert msg.content[1].data == OTHER_PNG and msg.content[1] != IMAGE
    # a part that is no part any more is refused, not replayed as text
    records[0]["messages"][0]["content"][1] = {"type": "hologram"}
    with pytest.raises(toolrules.ParseError, match="part 1"):
        asyncio.run(replay_serve_trace(Trace(records), ENGINE))
