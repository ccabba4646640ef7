"""ScriptedModel, the loop with the real built-in tools (the HELLO chain), traces, replay,
and the `toolrules run` / `toolrules replay` commands."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
import yaml
from click.testing import CliRunner

import toolrules
from toolrules import ScriptedModel, ToolExecutor, ToolLoop, builtin_tools
from toolrules.cli import main
from toolrules.clients import ScriptExhaustedError
from toolrules.runtime import Trace, replay

ENGINE = toolrules.load()
QWEN = "Qwen/Qwen3-8B"
LLAMA_EMULATED = "llama3:8b"
MISTRAL_EMULATED = "mistral-7b-instruct-v0.1"    # no native tools: emulated, [TOOL_CALLS] answers


def hermes(tool: str, /, **args: object) -> str:
    return f'<tool_call>\n{json.dumps({"name": tool, "arguments": args})}\n</tool_call>'


def llama(tool: str, /, **args: object) -> str:
    return json.dumps({"name": tool, "parameters": args})


def mistral(tool: str, /, **args: object) -> str:
    return "[TOOL_CALLS] " + json.dumps([{"name": tool, "arguments": args}])


HELLO_TURNS = {
    QWEN: ["I'll read the file first.\n" + hermes("read_file", path="input.txt"),
           hermes("write_file", path="output.txt", content="HELLO"),
           "Done: output.txt holds HELLO."],
    LLAMA_EMULATED: [llama("read_file", path="input.txt"),
                     llama("write_file", path="output.txt", content="HELLO"),
                     "Done: output.txt holds HELLO."],
    MISTRAL_EMULATED: [mistral("read_file", path="input.txt"),
                       mistral("write_file", path="output.txt", content="HELLO"),
                       "Done: output.txt holds HELLO."],
}


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "input.txt").write_text("hello")
    return ws


def executor_for(ws, **kw):
    return ToolExecutor(builtin_tools(ws, engine=ENGINE), workspace=ws, trust="workspace",
                        engine=ENGINE, **kw)


# ---------------------------------------------------------------- ScriptedModel

def test_scripted_model_reads_text_in_the_models_dialect_and_records_requests():
    model = ScriptedModel([hermes("read_file", path="a.txt")], model=QWEN, engine=ENGINE)
    tools = [toolrules.Tool("read_file", "Read.", {"type": "object",
                                                   "properties": {"path": {"type": "string"}}})]
    msgs = [toolrules.Message(role="user", content="read a.txt")]
    parsed = asyncio.run(model.generate(msgs, tools=tools, tool_choice="auto"))
    assert [(c.id, c.name, c.arguments) for c in parsed.tool_calls] == \
        [("call_1_0", "read_file", {"path": "a.txt"})]
    req = model.requests[0]
    assert req.messages == tuple(msgs) and req.tool_choice == "auto"
    assert req.prompt is None  # native tools: no emulation prompt
    assert req.rendered["tools"][0]["function"]["name"] == "read_file"


def test_scripted_model_for_an_emulated_model_records_the_emulation_prompt():
    model = ScriptedModel(["plain answer"], model=LLAMA_EMULATED, engine=ENGINE)
    tools = [toolrules.Tool("read_file", "Read a file.", {"type": "object", "properties": {}})]
    asyncio.run(model.generate([toolrules.Message(role="user", content="hi")], tools=tools))
    req = model.requests[0]
    assert "read_file" in req.prompt
    assert req.rendered["messages"][0]["role"] == "system"
    assert req.prompt in req.rendered["messages"][0]["content"]


def test_scripted_model_callable_turns_and_running_out():
    seen = []

    def turn(messages, tools):
        seen.append((len(messages), [t.name for t in tools]))
        return "answer " + str(len(messages))

    model = ScriptedModel([turn], model=QWEN, engine=ENGINE)
    parsed = asyncio.run(model.generate([toolrules.Message(role="user", content="x")]))
    assert parsed.content == "answer 1" and seen == [(1, [])]
    with pytest.raises(ScriptExhaustedError, match="turn 2, but the script has 1"):
        asyncio.run(model.generate([toolrules.Message(role="user", content="again")]))


def test_scripted_model_streams_in_small_deltas_like_the_parser():
    text = "Let me check.\n" + hermes("read_file", path="a.txt")
    model = ScriptedModel([text, text], model=QWEN, engine=ENGINE, delta_chars=2)

    async def collect():
        return [c async for c in model.stream([toolrules.Message(role="user", content="x")])]
    chunks = asyncio.run(collect())
    whole = asyncio.run(model.generate([toolrules.Message(role="user", content="x")]))
    assert "".join(c.content for c in chunks if c.type == "text") == whole.content
    ends = [c for c in chunks if c.type == "tool_end"]
    assert [(c.tool_call_id, c.arguments) for c in ends] == [("call_1_0", {"path": "a.txt"})]
    assert whole.tool_calls[0].id == "call_2_0"


def test_scripted_model_from_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"model": LLAMA_EMULATED, "turns": ["hi", {"role": "assistant",
                                                                          "content": "x"}]}))
    model = ScriptedModel.from_file(path, engine=ENGINE)
    assert model.model == LLAMA_EMULATED and len(model.turns) == 2
    path.write_text("turns: [1]\nmodel: x\n")
    with pytest.raises(toolrules.ParseError, match="turn 1 is a int"):
        ScriptedModel.from_file(path, engine=ENGINE)


def test_a_model_client_satisfies_the_protocol():
    assert isinstance(ScriptedModel([], model=QWEN, engine=ENGINE), toolrules.ModelClient)


# ---------------------------------------------------------------- the HELLO chain

@pytest.mark.parametrize("model_id", sorted(HELLO_TURNS))
def test_read_modify_write_chain_with_the_builtin_tools(workspace, model_id):
    model = ScriptedModel(HELLO_TURNS[model_id], model=model_id, engine=ENGINE)
    out = ToolLoop(model, executor_for(workspace), engine=ENGINE).run_sync(
        "Read input.txt, uppercase it, save as output.txt")
    assert out.ok, out
    assert (workspace / "output.txt").read_text() == "HELLO"
    assert out.tool_calls == 2
    assert [c.name for c, _ in out.tool_history] == ["read_file", "write_file"]
    assert out.tool_history[0][1].output == "hello"


def test_the_policy_holds_inside_the_loop(workspace):
    (workspace / ".env").write_text("API_KEY=secret")
    turns = [hermes("read_file", path="../outside.txt"), hermes("read_file", path=".env"),
             hermes("run_command", command="ls"), "Could not."]
    out = ToolLoop(ScriptedModel(turns, model=QWEN, engine=ENGINE), executor_for(workspace),
                   engine=ENGINE).run_sync("peek")
    codes = [r.tool_error.details["error"] for _, r in out.tool_history]
    assert codes[0] == "PERMISSION_DENIED" and codes[1] == "PERMISSION_DENIED"
    assert codes[2] in ("UNKNOWN_TOOL", "TRUST_TOO_LOW", "TOOL_NOT_ALLOWED")
    assert "secret" not in json.dumps([m.content for m in out.messages])


def test_dry_run_runs_nothing(workspace):
    model = ScriptedModel(HELLO_TURNS[QWEN], model=QWEN, engine=ENGINE)
    out = ToolLoop(model, executor_for(workspace, dry_run=True), engine=ENGINE).run_sync("x")
    assert not (workspace / "output.txt").exists()
    assert out.tool_history[1][1].output["dry_run"] is True


# ---------------------------------------------------------------- traces and replay

def test_the_trace_records_every_turn_call_and_result(workspace, tmp_path):
    path = tmp_path / "trace.jsonl"
    model = ScriptedModel(HELLO_TURNS[QWEN], model=QWEN, engine=ENGINE)
    out = ToolLoop(model, executor_for(workspace), engine=ENGINE, trace_path=path).run_sync(
        "Uppercase input.txt")
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["type"] for r in lines] == ["start", "turn", "call", "turn", "call", "turn", "done"]
    start = lines[0]
    assert start["model"] == QWEN and start["native_tools"] is True
    assert {t["function"]["name"] for t in start["tools"]} >= {"read_file", "write_file"}
    turn = lines[1]
    assert turn["response"]["raw"] == HELLO_TURNS[QWEN][0]
    assert turn["response"]["calls"][0]["name"] == "read_file"
    assert turn["request"]["messages"][0]["content"] == "Uppercase input.txt"
    assert lines[2]["result"]["output"] == "hello" and lines[2]["action"] == "executed"
    assert lines[-1]["stopped"] == "done"
    # the in-memory trace writes the same records
    saved = out.save_trace(tmp_path / "again.jsonl")
    assert [json.loads(x)["type"] for x in saved.read_text().splitlines()] == \
        [r["type"] for r in lines]


def test_the_trace_never_holds_secrets(tmp_path, workspace):
    key = "sk-proj-" + "A1b2C3d4" * 4
    turns = [hermes("write_file", path="k.txt", content=f"api_key={key}"), "stored"]
    out = ToolLoop(ScriptedModel(turns, model=QWEN, engine=ENGINE), executor_for(workspace),
                   engine=ENGINE, system="Authorization: Bearer " + "x" * 30).run_sync(
        f"Store my key {key}")
    text = "".join(out.trace.lines())
    assert key not in text and "x" * 30 not in text
    assert "[redacted]" in text


@pytest.mark.parametrize("model_id", [QWEN, LLAMA_EMULATED])
def test_trace_replay_round_trip_has_no_divergence(tmp_path, workspace, model_id):
    pristine = tmp_path / "pristine"
    shutil.copytree(workspace, pristine)
    model = ScriptedModel(HELLO_TURNS[model_id], model=model_id, engine=ENGINE)
    out = ToolLoop(model, executor_for(workspace), engine=ENGINE).run_sync("Uppercase input.txt")
    trace_path = out.save_trace(tmp_path / "t.jsonl")
    report = asyncio.run(replay(Trace.load(trace_path), executor_for(pristine), engine=ENGINE))
    assert report.ok, [str(d) for d in report.divergences]
    assert report.outcome.content == out.content
    assert (pristine / "output.txt").read_text() == "HELLO"


def test_replay_of_a_streamed_run(tmp_path, workspace):
    pristine = tmp_path / "pristine"
    shutil.copytree(workspace, pristine)
    loop = ToolLoop(ScriptedModel(HELLO_TURNS[QWEN], model=QWEN, engine=ENGINE),
                    executor_for(workspace), engine=ENGINE, trace_path=tmp_path / "s.jsonl")

    async def consume():
        return [e async for e in loop.events("Uppercase input.txt")]
    asyncio.run(consume())
    report = asyncio.run(replay(tmp_path / "s.jsonl", executor_for(pristine), engine=ENGINE))
    assert report.ok, [str(d) for d in report.divergences]


def test_replay_reports_a_divergence_when_the_workspace_differs(tmp_path, workspace):
    other = tmp_path / "other"
    other.mkdir()
    (other / "input.txt").write_text("goodbye")
    model = ScriptedModel(HELLO_TURNS[QWEN], model=QWEN, engine=ENGINE)
    out = ToolLoop(model, executor_for(workspace), engine=ENGINE).run_sync("Uppercase input.txt")
    report = asyncio.run(replay(out.trace, executor_for(other), engine=ENGINE))
    assert not report.ok
    first = report.divergences[0]
    assert first.what == "result output" and first.recorded == "hello"
    assert first.replayed == "goodbye"
    assert "round 1 call 0 (read_file)" in str(first)


def test_replay_reports_different_calls(tmp_path, workspace):
    model = ScriptedModel(HELLO_TURNS[QWEN], model=QWEN, engine=ENGINE)
    out = ToolLoop(model, executor_for(workspace), engine=ENGINE).run_sync("Uppercase input.txt")
    records = out.trace.to_dicts()
    turn = next(r for r in records if r["type"] == "turn")
    turn["response"]["raw"] = hermes("read_file", path="other.txt")
    report = asyncio.run(replay(Trace(records), executor_for(workspace), engine=ENGINE))
    assert report.divergences[0].what == "call"


class _OwnIds(ScriptedModel):
    """A client with its own call-id scheme (as a local model or a provider has)."""

    async def generate(self, messages, tools=None, tool_choice="auto", **kw):
        parsed = await super().generate(messages, tools, tool_choice, **kw)
        calls = tuple(toolrules.ToolCall(f"own_{len(self.requests)}_{i}", c.name, c.arguments)
                      for i, c in enumerate(parsed.tool_calls))
        return toolrules.ParsedResponse(parsed.content, parsed.reasoning_content, calls,
                                        parsed.finish_reason, parsed.repairs, parsed.raw)


def test_replay_ignores_the_clients_call_ids_but_not_the_calls(tmp_path, workspace):
    pristine = tmp_path / "pristine"
    shutil.copytree(workspace, pristine)
    model = _OwnIds(HELLO_TURNS[QWEN], model=QWEN, engine=ENGINE)
    out = ToolLoop(model, executor_for(workspace), engine=ENGINE).run_sync("Uppercase input.txt")
    assert out.tool_history[0][0].id == "own_1_0"
    report = asyncio.run(replay(out.trace, executor_for(pristine), engine=ENGINE))
    assert report.ok, [str(d) for d in report.divergences]
    # an argument changed is still a divergence
    records = out.trace.to_dicts()
    call = next(r for r in records if r["type"] == "call")
    call["call"]["arguments"]["path"] = "elsewhere.txt"
    report = asyncio.run(replay(Trace(records), executor_for(tmp_path / "pristine"),
                                engine=ENGINE))
    assert [d.what for d in report.divergences][:1] == ["call"]


def test_replay_keeps_the_recorded_reading_of_a_turn_without_tools(tmp_path, workspace):
    """A closing turn (no tools offered) whose text holds a call: some clients leave such
    text as it is, others read the call out; replay keeps what the client did."""
    turns = [hermes("read_file", path="input.txt")] * 3 + ["unused"]
    model = ScriptedModel(turns, model=QWEN, engine=ENGINE)
    out = ToolLoop(model, executor_for(workspace), engine=ENGINE, repeat_limit=2,
                   max_rounds=2).run_sync("Read input.txt")
    records = out.trace.to_dicts()
    closing = [r for r in records if r["type"] == "turn"][-1]
    assert closing["request"]["tools"] == []
    as_text = hermes("read_file", path="input.txt")
    closing["response"].update({"content": as_text, "calls": [], "raw": as_text})
    done = next(r for r in records if r["type"] == "done")
    done["content"] = as_text
    report = asyncio.run(replay(Trace(records), executor_for(workspace), engine=ENGINE))
    assert report.ok, [str(d) for d in report.divergences]
    assert report.outcome.content == as_text


def test_a_scripted_turn_may_be_a_parsed_response():
    ready = toolrules.ParsedResponse("as read", None, (toolrules.ToolCall("x1", "f", {}),))
    model = ScriptedModel([ready], model=QWEN, engine=ENGINE)
    assert asyncio.run(model.generate([toolrules.Message(role="user", content="hi")])) is ready


# ---------------------------------------------------------------- the CLI

def _script(tmp_path, model_id=QWEN):
    path = tmp_path / "session.yaml"
    path.write_text(yaml.safe_dump({"model": model_id, "turns": HELLO_TURNS[model_id]}))
    return path


def test_cli_run_prints_calls_and_result_summaries(tmp_path, workspace):
    result = CliRunner().invoke(main, ["run", "Uppercase input.txt", "--model",
                                       f"scripted:{_script(tmp_path)}", "--workspace",
                                       str(workspace)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "I'll read the file first." in out
    assert '[Tool Call] read_file(path="input.txt")' in out
    assert "[Result] ✓ Read 1 line" in out
    assert '[Tool Call] write_file(path="output.txt", content="HELLO")' in out
    assert "✓ Wrote 5 bytes to output.txt" in out
    assert "Done: output.txt holds HELLO." in out
    assert (workspace / "output.txt").read_text() == "HELLO"


def test_cli_run_json_events_and_dry_run(tmp_path, workspace):
    result = CliRunner().invoke(main, ["run", "Uppercase input.txt", "--model",
                                       f"scripted:{_script(tmp_path, LLAMA_EMULATED)}",
                                       "--workspace", str(workspace), "--json", "--dry-run"])
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.output.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds.count("tool_call") == 2 and kinds.count("tool_result") == 2
    assert kinds[-1] == "done" and events[-1]["outcome"]["stopped"] == "done"
    assert events[kinds.index("tool_result")]["result"]["output"]["dry_run"] is True
    assert not (workspace / "output.txt").exists()


def test_cli_run_trace_then_replay(tmp_path, workspace):
    pristine = tmp_path / "pristine"
    shutil.copytree(workspace, pristine)
    trace = tmp_path / "t.jsonl"
    runner = CliRunner()
    r = runner.invoke(main, ["run", "Uppercase input.txt", "--model",
                             f"scripted:{_script(tmp_path)}", "--workspace", str(workspace),
                             "--trace", str(trace), "--max-rounds", "5"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["replay", str(trace), "--workspace", str(pristine)])
    assert r.exit_code == 0, r.output
    assert "no divergence" in r.output
    (pristine / "input.txt").write_text("changed")
    (pristine / "output.txt").unlink()
    r = runner.invoke(main, ["replay", str(trace), "--workspace", str(pristine), "--json"])
    assert r.exit_code == 1
    report = json.loads(r.output)
    assert report["ok"] is False and report["divergences"][0]["replayed"] == "changed"


def test_cli_run_limits_and_model_spec_errors(tmp_path, workspace):
    runner = CliRunner()
    r = runner.invoke(main, ["run", "x", "--model", f"scripted:{_script(tmp_path)}",
                             "--workspace", str(workspace), "--max-rounds", "1"])
    assert r.exit_code == 1 and "max_rounds" in r.output
    r = runner.invoke(main, ["run", "x", "--model", "nonsense", "--workspace", str(workspace)])
    assert r.exit_code == 2 and "error:" in r.output
    r = runner.invoke(main, ["run", "x", "--model", "scripted:missing.yaml"])
    assert r.exit_code == 1 and "cannot read script" in r.output
    r = runner.invoke(main, ["replay", str(tmp_path / "session.yaml")])
    assert r.exit_code == 1 and "error:" in r.output


@pytest.mark.parametrize(("spec", "run_code", "message"), [
    ("nonsense", 2, "model spec 'nonsense' is not PROVIDER:MODEL"),
    ("no-such-provider:m", 2, "unknown provider 'no-such-provider'"),
    ("scripted:", 1, "scripted: needs a file"),
    ("scripted:missing.yaml", 1, "cannot read script 'missing.yaml'"),
    ("openai:gpt-4o", 1, "no API key"),
])
def test_run_and_chat_resolve_model_specs_alike(tmp_path, workspace, monkeypatch, spec,
                                                run_code, message):
    """One resolver (runtime's resolve_model) for both commands: the same message; `run`
    exits 2 for a malformed spec and 1 when what it names cannot be used, `chat` 2."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    r = runner.invoke(main, ["run", "x", "--model", spec, "--workspace", str(workspace)])
    assert r.exit_code == run_code and message in r.output, r.output
    assert "Traceback" not in r.output
    if run_code == 2:
        assert "hint: for example openai-compatible:" in r.output
    pytest.importorskip("prompt_toolkit")
    r = runner.invoke(main, ["chat", "--model", spec, "--workspace", str(workspace)],
                      input="")
    assert r.exit_code == 2 and message in r.output, r.output


def test_the_emulation_prompt_is_rendered_once_per_tool_set():
    tools = [toolrules.Tool(f"tool_{i}", f"Tool {i}.", {"type": "object", "properties": {
        "x": {"type": "string"}}}) for i in range(5)]
    first = ENGINE.emulation(tools, LLAMA_EMULATED)
    assert ENGINE.emulation(list(tools), LLAMA_EMULATED) is first  # same content: cached
    tools[2].parameters["properties"]["y"] = {"type": "integer"}   # changed in place
    changed = ENGINE.emulation(tools, LLAMA_EMULATED)
    assert changed is not first and '"y"' in changed.text
    assert ENGINE.emulation(tools, LLAMA_EMULATED, task_hint="x") is not changed


def test_the_docs_loop_example_runs():
    from pathlib import Path

    page = Path(__file__).resolve().parent.parent / "docs" / "concepts" / "tool-loop.md"
    text = page.read_text(encoding="utf-8")
    code = text[text.index("```python\n") + 10:]
    code = code[:code.index("```")]
    namespace: dict = {}
    exec(compile(code, str(page), "exec"), namespace)  # our own docs, not input
    assert namespace["outcome"].rounds == 3 and namespace["outcome"].tool_calls == 2


def test_result_summaries_say_what_came_back():
    from toolrules import ToolResult
    from toolrules.cli._loop import summarize_result

    assert summarize_result(ToolResult("c", "read_file", output="a\nb\nc"), "read") == \
        "✓ Read 3 lines"
    weather = ToolResult("c", "get_weather", output={"city": "Paris", "temp_c": 18})
    assert summarize_result(weather, "read") == '✓ {"city": "Paris", "temp_c": 18}'
    big = ToolResult("c", "state_get", output={"draft": "x" * 300})
    line = summarize_result(big, "read")
    assert line.startswith('✓ {"draft": "xxx') and line.endswith("…") and len(line) == 102
    assert summarize_result(ToolResult("c", "w", output="ok"), "write") == "✓ ok"
