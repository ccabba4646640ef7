"""The chat session without a terminal: `::` parsing and highlighting spans, the conversation
carried across turns, trust changes, model switches with their capability changes, tools
files, transcripts; and `toolrules chat` on a pipe (plain lines in, plain text out)."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import toolrules
from chat_helpers import LLAMA, LLAMA_TURNS, QWEN, QWEN_TURNS, hermes, make_workspace, write_script
from toolrules import ScriptedModel, ToolExecutor
from toolrules.cli import main
from toolrules.providers._messages import coerce_messages
from toolrules.runtime._session import (
    ChatSession,
    ModelSpecError,
    ToolsFileError,
    build_registry,
    capability_changes,
    command_spans,
    load_tools_file,
    model_info,
    parse_input,
    resolve_model,
)

ENGINE = toolrules.load()


@pytest.fixture
def ws(tmp_path):
    return make_workspace(tmp_path)


def session_for(ws, turns=QWEN_TURNS, model=QWEN, **kw):
    executor = ToolExecutor(build_registry(["builtin"], ws, engine=ENGINE), workspace=ws,
                            trust=kw.pop("trust", "workspace"), engine=ENGINE,
                            dry_run=kw.pop("dry_run", False))
    client = ScriptedModel(turns, model=model, engine=ENGINE)
    return ChatSession(client, executor, spec=f"scripted:{model}", engine=ENGINE, **kw)


def talk(session, text):
    async def go():
        return [e async for e in session.turn(text)]
    return asyncio.run(go())


# ---------------------------------------------------------------- `::` input

@pytest.mark.parametrize("text, command, args", [
    ("::help", "help", ""),
    ("  ::save  notes.json ", "save", "notes.json"),
    ("::MODEL scripted:b.yaml", "model", "scripted:b.yaml"),
    ("::quit", "exit", ""),
    ("::", "", ""),
    ("::foo bar", "foo", "bar"),
    ("::save!x", "save!x", ""),
])
def test_commands_are_parsed(text, command, args):
    parsed = parse_input(text)
    assert (parsed.command, parsed.args) == (command, args)


@pytest.mark.parametrize("text", ["hello", "good::bad choice", "a :: b", "see std::vector"])
def test_text_with_double_colons_inside_is_a_message(text):
    parsed = parse_input(text)
    assert parsed.command is None and parsed.raw == text.strip()


def test_command_spans_colour_known_unknown_and_arguments():
    assert command_spans("::trust read_only") == [("command", "::trust"), ("args", " read_only")]
    assert command_spans("::nope x") == [("unknown", "::nope"), ("args", " x")]
    assert command_spans("  ::help") == [("text", "  "), ("command", "::help")]
    assert command_spans("hello ::help") == [("text", "hello ::help")]
    assert command_spans("") == []
    # the spans always cover the whole line, so the prompt shows what was typed
    for line in ["::model  scripted:x.yaml ", "::", ":: x", "::Tools"]:
        assert "".join(t for _, t in command_spans(line)) == line


# ---------------------------------------------------------------- the conversation

def test_the_conversation_carries_over_between_turns(ws):
    session = session_for(ws, system="Be brief.")
    events = talk(session, "Read config.yaml")
    kinds = [e.type.value for e in events]
    assert "tool_call" in kinds and "tool_result" in kinds and kinds[-1] == "done"
    assert events[-1].outcome.content == "The config turns debug on for the api service."
    first = list(session.messages)
    assert [m.role for m in first] == ["system", "user", "assistant", "tool", "assistant"]
    talk(session, "Now write notes.txt")
    # the model saw the whole first exchange, calls and results included
    request = session.model.requests[-1]
    assert list(request.messages[:len(first)]) == first
    assert [m.role for m in session.messages[len(first):]] == \
        ["user", "assistant", "tool", "assistant"]
    assert (ws / "notes.txt").read_text() == "debug is on"


def test_a_failed_turn_leaves_the_conversation_as_it_was(ws):
    session = session_for(ws, turns=["Hello."])
    talk(session, "hi")
    before = list(session.messages)
    with pytest.raises(toolrules.ToolrulesError, match="turn 2"):
        talk(session, "again")
    assert session.messages == before


def test_clear_keeps_only_the_system_prompt(ws):
    session = session_for(ws, turns=["Hello."], system="Be brief.")
    talk(session, "hi")
    session.clear()
    assert [(m.role, m.content) for m in session.messages] == [("system", "Be brief.")]


def test_transcript_saves_as_json_messages_that_read_back(ws, tmp_path):
    session = session_for(ws)
    talk(session, "Read config.yaml")
    path, size = session.save(tmp_path / "chat.json")
    data = json.loads(path.read_text())
    assert size == len(path.read_bytes())
    assert data[1]["tool_calls"][0]["name"] == "read_file"
    assert data[2] == {"role": "tool", "content": "service: api\ndebug: true\nport: 8080\n",
                       "tool_call_id": data[1]["tool_calls"][0]["id"], "name": "read_file"}
    assert coerce_messages(data) == session.messages


# ---------------------------------------------------------------- trust

def test_trust_changes_what_is_offered_and_what_runs(ws):
    session = session_for(ws)
    talk(session, "Read config.yaml")
    change = session.set_trust("read_only")
    assert (change.old, change.new) == ("workspace", "read_only")
    assert "write_file" not in change.offered and "read_file" in change.offered
    events = talk(session, "Write notes.txt")
    result = next(e.result for e in events if e.type.value == "tool_result")
    assert not result.ok and result.tool_error.details["error"] == "TRUST_TOO_LOW"
    assert not (ws / "notes.txt").exists()
    offered = [t.name for t in session.model.requests[-1].tools]
    assert "write_file" not in offered


def test_an_unknown_trust_level_is_refused_and_nothing_changes(ws):
    session = session_for(ws)
    with pytest.raises(ValueError, match=r"unknown trust level 'root'.*read_only"):
        session.set_trust("root")
    assert session.executor.trust == "workspace"


def test_tool_rows_say_why_a_tool_is_not_offered(ws):
    session = session_for(ws, trust="read_only")
    rows = {r.name: r for r in session.tool_rows()}
    assert rows["read_file"].offered and rows["read_file"].kind == "read"
    assert not rows["write_file"].offered and rows["write_file"].why_not == "needs trust workspace"
    assert rows["run_command"].why_not == "needs trust shell"


# ---------------------------------------------------------------- models

def test_switching_models_reports_the_capability_changes(ws, tmp_path):
    session = session_for(ws)
    talk(session, "Read config.yaml")
    other = write_script(tmp_path / "other.yaml", LLAMA, LLAMA_TURNS)
    switch = session.switch_model(f"scripted:{other}")
    changes = {c.field: (c.old, c.new) for c in switch.changes}
    assert changes["native_tools"] == ("native", "emulated (json prompt)")
    assert changes["dialect"] == ("hermes", "llama3-json")
    assert changes["parallel_tools"] == ("yes", "no")
    assert changes["context_window"] == ("128,000 tokens", "8,192 tokens")
    assert changes["family"] == ("qwen 3", "llama 3")
    assert session.info.model_id == LLAMA and session.model.model == LLAMA
    # the next turn goes to the new model with the whole conversation
    events = talk(session, "What is in the workspace?")
    assert events[-1].outcome.content == "The workspace holds config.yaml."
    assert session.model.requests[0].messages[0].content == "Read config.yaml"
    assert session.model.requests[0].prompt  # emulated: the tools went in a prompt


def test_capability_values_print_short():
    from toolrules.runtime._session import _value

    assert _value("context_window", 8192) == "8,192 tokens"
    assert _value("parallel_tools", False) == "no" and _value("dialect", None) == "-"
    assert _value("quirks", ("a", "b")) == "a, b"
    long = _value("chat_template", "x\n" * 100)
    assert len(long) == 60 and long.endswith("...") and "\n" not in long


def test_the_same_capabilities_mean_no_changes():
    a = model_info("a", ScriptedModel([], model=QWEN, engine=ENGINE), ENGINE)
    b = model_info("b", ScriptedModel([], model="Qwen/Qwen3-14B", engine=ENGINE), ENGINE)
    assert capability_changes(a, a) == ()
    assert all(c.field != "native_tools" for c in capability_changes(a, b))


def test_unknown_and_custom_models_are_noted():
    unknown = model_info("x", ScriptedModel([], model="totally-unknown-x", engine=ENGINE), ENGINE)
    assert "unknown model" in unknown.notes()[0] and "json" in unknown.notes()[0]
    custom = model_info("x", ScriptedModel([], model="mycompany/llama3-ft", engine=ENGINE),
                        ENGINE)
    assert "inherits the llama 3 capabilities" in custom.notes()[0]
    assert ("dialect", "llama3-json") in custom.rows()


def test_a_bad_switch_keeps_the_model(ws, tmp_path):
    session = session_for(ws)
    for spec, message in [("nonsense", "not PROVIDER:MODEL"),
                          ("scripted:", "needs a file"),
                          (f"scripted:{tmp_path / 'missing.yaml'}", "cannot read script"),
                          ("no-such-provider:m", "no-such-provider")]:
        with pytest.raises(ModelSpecError, match=message):
            session.switch_model(spec)
        assert session.info.model_id == QWEN


def test_resolve_model_reads_scripts_and_builds_http_clients(tmp_path):
    script = write_script(tmp_path / "s.yaml", QWEN, ["hi"])
    assert resolve_model(f"scripted:{script}", engine=ENGINE).model == QWEN
    client = resolve_model("openai-compatible:qwen3:8b", engine=ENGINE,
                           base_url="http://127.0.0.1:9/v1")
    assert client.model == "qwen3:8b" and client.base_url.startswith("http://127.0.0.1:9")


# ---------------------------------------------------------------- tools files

TOOLS_FILE = '''
from typing import Literal
import toolrules

registry = toolrules.ToolRegistry()


@registry.tool
def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
    """Current weather for a city.

    Args:
        city: City name.
        unit: c or f.
    """
    return f"{city}: 21 {unit}"


@registry.tool(name="read_file", kind="read", tier="read_only")
def my_read(path: str) -> str:
    """Read a file (my own)."""
    return "mine"
'''


def test_a_tools_file_adds_its_tools_beside_the_builtins(tmp_path, ws):
    f = tmp_path / "mytools.py"
    f.write_text(TOOLS_FILE)
    registry = build_registry(["builtin", str(f)], ws, engine=ENGINE)
    assert "get_weather" in registry and "write_file" in registry
    assert registry.get("read_file").handler.__name__ == "my_read"  # the file's wins
    executor = ToolExecutor(registry, workspace=ws, engine=ENGINE)
    session = ChatSession(ScriptedModel([hermes("get_weather", city="Paris"), "Sunny."],
                                        model=QWEN, engine=ENGINE), executor, engine=ENGINE)
    events = talk(session, "weather?")
    result = next(e.result for e in events if e.type.value == "tool_result")
    assert result.ok and result.output == "Paris: 21 c"
    only = build_registry([str(f)], ws, engine=ENGINE)
    assert sorted(only.names()) == ["get_weather", "read_file"]


def test_no_tools(ws):
    assert len(build_registry(["none"], ws, engine=ENGINE)) == 0
    with pytest.raises(ToolsFileError, match="cannot be combined"):
        build_registry(["none", "builtin"], ws, engine=ENGINE)


@pytest.mark.parametrize("body, message", [
    ("x = 1\n", "defines no ToolRegistry named `registry`"),
    ("import toolrules\nregistry = toolrules.ToolRegistry()\n", "holds no tools"),
    ("def broken(:\n", "SyntaxError"),
    ("\n\nraise RuntimeError('boom')\n", r"mytools.py:3: RuntimeError: boom"),
])
def test_bad_tools_files_are_clear_errors(tmp_path, body, message):
    f = tmp_path / "mytools.py"
    f.write_text(body)
    with pytest.raises(ToolsFileError, match=message):
        load_tools_file(f)


def test_a_tools_file_must_exist_and_be_python(tmp_path):
    with pytest.raises(ToolsFileError, match="does not exist"):
        load_tools_file(tmp_path / "nope.py")
    (tmp_path / "tools.yaml").write_text("tools: []")
    with pytest.raises(ToolsFileError, match=r"not a \.py file"):
        load_tools_file(tmp_path / "tools.yaml")


# ---------------------------------------------------------------- on a pipe

def chat(args, lines, ws):
    return CliRunner().invoke(main, ["chat", "--workspace", str(ws), *args],
                              input="".join(line + "\n" for line in lines))


def test_chat_on_a_pipe_runs_turns_and_commands(tmp_path, ws):
    script = write_script(tmp_path / "s.yaml", QWEN, QWEN_TURNS)
    out_file = tmp_path / "t.json"
    r = chat(["--model", f"scripted:{script}"],
             ["Read config.yaml", "::trust read_only", "Write notes.txt", "::history",
              f"::save {out_file}", "::exit", "never read"], ws)
    assert r.exit_code == 0, r.output
    out = r.output
    assert "native tools, dialect hermes" in out
    assert "you> Read config.yaml" in out
    assert "The user wants the config." in out  # reasoning (dimmed on a terminal)
    assert '[Tool Call] read_file(path="config.yaml")' in out
    assert "[Result] ✓ Read 3 lines" in out
    assert "The config turns debug on for the api service." in out
    assert "trust workspace -> read_only" in out
    assert "[Result] ✗ TRUST_TOO_LOW: write_file needs trust level 'workspace'" in out
    assert "  5 you       Write notes.txt" in out
    assert f"saved 8 messages to {out_file}" in out
    assert "never read" not in out
    assert len(json.loads(out_file.read_text())) == 8


def test_no_stream_and_dry_run(tmp_path, ws):
    script = write_script(tmp_path / "s.yaml", QWEN, QWEN_TURNS[2:])
    r = chat(["--model", f"scripted:{script}", "--no-stream", "--dry-run", "--no-reasoning"],
             ["Write notes.txt", "::tools"], ws)
    assert r.exit_code == 0, r.output
    assert "dry run: calls are shown, not run" in r.output
    assert '[Tool Call] write_file(path="notes.txt", content="debug is on")' in r.output
    assert "[Result] ✓ dry run: would run write_file" in r.output
    assert "tools (5 of 6 offered at trust workspace, dry run)" in r.output
    assert not (ws / "notes.txt").exists()


def test_reasoning_can_be_hidden(tmp_path, ws):
    script = write_script(tmp_path / "s.yaml", QWEN, QWEN_TURNS)
    r = chat(["--model", f"scripted:{script}", "--no-reasoning"], ["Read config.yaml"], ws)
    assert r.exit_code == 0 and "The user wants the config." not in r.output
    assert "I'll read the config first." in r.output


def test_turn_errors_are_readable_and_the_session_goes_on(tmp_path, ws):
    script = write_script(tmp_path / "s.yaml", QWEN, ["Hello."])
    r = chat(["--model", f"scripted:{script}"], ["hi", "again", "::history"], ws)
    assert r.exit_code == 0, r.output
    assert "error: ScriptedModel(Qwen/Qwen3-8B) was asked for turn 2" in r.output
    assert "Traceback" not in r.output
    assert "  2 assistant Hello." in r.output and "  3 " not in r.output


def test_no_tools_and_a_tools_file(tmp_path, ws):
    script = write_script(tmp_path / "s.yaml", QWEN, [hermes("get_weather", city="Oslo"),
                                                      "Cold."])
    r = chat(["--model", f"scripted:{script}", "--no-tools"], ["::tools"], ws)
    assert "tools (0 of 0 offered" in r.output and "--tools none" in r.output
    f = tmp_path / "mytools.py"
    f.write_text(TOOLS_FILE)
    r = chat(["--model", f"scripted:{script}", "--tools", str(f)],
             ["::tools", "weather?", "::history"], ws)
    assert r.exit_code == 0, r.output
    assert "✓ get_weather" in r.output and "write_file" not in r.output
    assert '[Tool Call] get_weather(city="Oslo")' in r.output
    assert "tool      get_weather: Oslo: 21 c" in r.output


@pytest.mark.parametrize("args, code, message", [
    (["--model", "nonsense"], 2, "is not PROVIDER:MODEL"),
    (["--model", "scripted:missing.yaml"], 2, "cannot read script"),
    (["--model", "no-such-provider:x"], 2, "no-such-provider"),
    (["--model", "scripted:S", "--trust", "root"], 1, "root"),
    (["--model", "scripted:S", "--policy", "nope"], 1, "nope"),
    (["--model", "scripted:S", "--tools", "missing.py"], 1, "does not exist"),
])
def test_start_errors_are_one_clear_line(tmp_path, ws, args, code, message):
    script = write_script(tmp_path / "s.yaml", QWEN, ["hi"])
    args = [a.replace("scripted:S", f"scripted:{script}") for a in args]
    r = chat(args, [], ws)
    assert r.exit_code == code, r.output
    assert "error:" in r.output and message in r.output and "Traceback" not in r.output


# ---------------------------------------------------------------- the docs' example

def _readme_chat_blocks():
    """The interactive session of docs/guides/chat.md (a terminal session, so the docs
    test skips it and this test replays it), its two scripts and the tools file."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "guides" / "chat.md")
    blocks = re.findall(r"```(\w+)\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    wanted = {"console": "you> ::model", "yaml": "# llama.yaml", "python": "# mytools.py"}
    return {lang: next(body for kind, body in blocks if kind == lang and mark in body)
            for lang, mark in wanted.items()}


def test_the_readme_session_is_what_the_chat_prints(tmp_path, monkeypatch):
    blocks = _readme_chat_blocks()
    first, second = blocks["yaml"].split("# llama.yaml\n")
    (tmp_path / "session.yaml").write_text(first)
    (tmp_path / "llama.yaml").write_text(second)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "config.yaml").write_text("service: api\ndebug: true\nport: 8080\n")
    shown = blocks["console"].splitlines()
    typed = [line[len("you> "):] for line in shown if line.startswith("you> ")]
    monkeypatch.chdir(tmp_path)  # the scripts and ::save paths are relative, as shown
    r = CliRunner().invoke(main, ["chat", "--model", "scripted:session.yaml", "--workspace",
                                  str(proj), "--trust", "workspace"],
                           input="".join(t + "\n" for t in typed))
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "chat.json").read_text())[0]["role"] == "user"
    expected = [re.sub(r"\s+<- .*$", "", line) for line in shown[1:]]
    got = r.output.splitlines()
    assert len(got) == len(expected)
    for want, line in zip(expected, got):
        if want.startswith("workspace "):  # the path differs
            assert line.endswith(want[want.index(" · "):])
        else:
            assert line == want


def test_the_readme_tools_file_loads(tmp_path):
    f = tmp_path / "mytools.py"
    f.write_text(_readme_chat_blocks()["python"])
    registry = load_tools_file(f)
    assert registry.names() == ["get_weather"]
    assert registry.get("get_weather").tool.parameters["properties"]["unit"]["enum"] == ["c", "f"]


# ---------------------------------------------------------------- a served model over HTTP

def _openai_stream(text: str, size: int = 7) -> list[object]:
    """An OpenAI-compatible server streaming `text` as content (a llama.cpp server without
    a tool parser hands a model's <tool_call> text back this way)."""
    events: list[object] = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text[i:i + size]},
                      "finish_reason": None}]} for i in range(0, len(text), size)]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    events.append("[DONE]")
    return events


def test_chat_with_a_served_model_over_http(tmp_path, ws, monkeypatch):
    from wire_server import WireServer, sse_reply

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with WireServer() as srv:
        srv.replies.extend([sse_reply(_openai_stream(QWEN_TURNS[0])),
                            sse_reply(_openai_stream("It sets debug: true."))])
        r = chat(["--model", "openai-compatible:qwen3:8b", "--base-url", srv.url + "/v1"],
                 ["Read config.yaml", "::exit"], ws)
    assert r.exit_code == 0, r.output
    assert "qwen3:8b (openai-compatible:qwen3:8b): native tools, dialect hermes" in r.output
    assert '[Tool Call] read_file(path="config.yaml")' in r.output
    assert "[Result] ✓ Read 3 lines" in r.output and "It sets debug: true." in r.output
    assert "<tool_call>" not in r.output
    second = srv.requests[1].json()
    assert second["stream"] is True
    assert second["messages"][-1]["content"].startswith("service: api")


def test_without_the_chat_extra_the_error_names_it(tmp_path, ws, monkeypatch):
    monkeypatch.setitem(sys.modules, "prompt_toolkit", None)  # import fails
    script = write_script(tmp_path / "s.yaml", QWEN, ["hi"])
    r = chat(["--model", f"scripted:{script}"], ["hi"], ws)
    assert r.exit_code == 1
    assert "toolrules chat needs prompt_toolkit and rich" in r.output
    assert "pip install 'toolrules[chat]'" in r.output
