"""MCP servers' tools in toolrules, as users meet them: the pinned npm reference servers
(`@modelcontextprotocol/server-everything`, `server-filesystem`) started over stdio,
declared as rules in an overlay, their tools listed, called through the tool loop with a
scripted model and through the CLI, under the policy - refusals never reach the server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from mcp_helpers import QWEN, hermes, load_engine, mcp_executor, npm_rules, workspace
from toolrules import ScriptedModel, ToolLoop, ToolRegistry
from toolrules.cli import main

pytestmark = pytest.mark.usefixtures("no_orphans")


@pytest.fixture
def rules(tmp_path):
    return npm_rules(tmp_path / "rules")


@pytest.fixture
def engine(rules):
    return load_engine(rules)


@pytest.fixture
def ws(tmp_path):
    return workspace(tmp_path)


def _audit(audit_dir: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(audit_dir.glob("*.jsonl"))
            for line in f.read_text().splitlines()]


# ---------------------------------------------------------------- listing

def test_everything_tools_are_namespaced_classed_and_normalized(engine, ws):
    registry = ToolRegistry(engine=engine, workspace=ws)
    server = registry.add_mcp("everything")
    assert server.state == "stopped"  # declared, not started
    with registry:
        names = registry.names()
        assert server.state == "running"
        assert "everything_echo" in names and "everything_get-sum" in names
        echo = registry.mcp_tool("everything_echo")
        assert (echo.server, echo.remote, echo.tier, echo.kind) == \
            ("everything", "echo", "read_only", "read")
        assert echo.decided_by == "annotations: read-closed"
        assert echo.tool.description.startswith("[everything] ")  # the namespacing rules
        assert "$schema" not in echo.tool.parameters  # normalized: one JSON Schema dialect
        gzip = registry.mcp_tool("everything_gzip-file-as-resource")
        assert (gzip.tier, gzip.kind) == ("full", "write")  # open world, not read-only
        registry.remove("everything_echo")  # one tool dropped: its MCP entry goes with it
        assert "everything_echo" not in registry and registry.mcp_tool("everything_echo") is None
    assert server.state == "closed"


def test_mcp_tools_cli_lists_a_declared_server_as_json(rules, ws):
    r = CliRunner().invoke(main, ["mcp", "tools", "filesystem", "--json", "--rules", str(rules),
                                  "--workspace", str(ws)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["server"] == "filesystem" and data["transport"] == "stdio"
    tools = {t["tool"]: t for t in data["tools"]}
    assert tools["write_file"]["name"] == "filesystem_write_file"
    assert (tools["write_file"]["tier"], tools["write_file"]["kind"]) == ("workspace", "write")
    assert tools["write_file"]["paths"] == ["path"]
    assert tools["read_text_file"]["tier"] == "read_only"
    assert tools["move_file"]["paths"] == ["source", "destination"]
    assert tools["read_text_file"]["parameters"]["type"] == "object"


def test_mcp_tools_cli_with_a_command(ws):
    from npm_packages import npm_bin

    cmd = f"{npm_bin('mcp-server-everything')} stdio"
    r = CliRunner().invoke(main, ["mcp", "tools", "--command", cmd, "--name", "ev"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("ev: 13 tools (stdio: ")
    assert "ev_get-sum" in r.output and "read_only  read   annotations: read-closed" in r.output


# ---------------------------------------------------------------- calls through the loop

def test_the_loop_calls_mcp_tools_with_audit_lines(engine, ws, tmp_path):
    audit = tmp_path / "audit"
    registry, executor = mcp_executor(engine, ws, "everything", trust="read_only",
                                      audit_dir=audit)
    model = ScriptedModel([hermes("everything_get-sum", a=2, b=40),
                           hermes("everything_get-tiny-image"),
                           hermes("everything_get-structured-content", location="Chicago"),
                           "The sum is 42."], model=QWEN, engine=engine)
    with registry:
        out = ToolLoop(model, executor, engine=engine).run_sync("Add 2 and 40.")
    assert out.ok and out.content == "The sum is 42."
    results = [r for _, r in out.tool_history]
    assert results[0].output == "The sum of 2 and 40 is 42."
    parts = results[1].output  # text and an image, both kept
    assert [p.type for p in parts] == ["text", "image", "text"]
    assert parts[1].media_type == "image/png" and len(parts[1].data) > 100
    tool_msgs = [m for m in out.messages if m.role == "tool"]
    assert tool_msgs[1].content == parts  # the image travels to the model as an image
    assert set(results[2].output) == {"temperature", "conditions", "humidity"}
    lines = _audit(audit)
    assert [(x["tool"], x["outcome"], x["level"]) for x in lines] == [
        ("everything_get-sum", "ok", "read_only"),
        ("everything_get-tiny-image", "ok", "read_only"),
        ("everything_get-structured-content", "ok", "read_only")]


def test_an_emulated_model_gets_mcp_tools_in_its_trained_format(engine, ws):
    registry, executor = mcp_executor(engine, ws, "everything", trust="read_only")
    with registry:
        tools = executor.visible_tools()
        prompt = engine.render_emulation(tools, model="mistralai/Mistral-7B-Instruct-v0.3")
        assert "everything_echo" in prompt and "[TOOL_CALLS]" in prompt
        turn = '[TOOL_CALLS] [{"name": "everything_echo", "arguments": {"message": "hi"}}]'
        model = ScriptedModel([turn, "It said hi."],
                              model="mistralai/Mistral-7B-Instruct-v0.3", engine=engine)
        out = ToolLoop(model, executor, engine=engine).run_sync("Echo hi.")
    assert out.ok, out
    assert out.tool_history[0][1].output == "Echo: hi"


def test_policy_refusals_leave_the_filesystem_server_untouched(engine, ws, tmp_path):
    audit = tmp_path / "audit"
    registry, executor = mcp_executor(engine, ws, "filesystem", trust="read_only",
                                      audit_dir=audit)
    outside = tmp_path / "outside.txt"
    model = ScriptedModel([
        hermes("filesystem_write_file", path="new.txt", content="x"),      # trust too low
        hermes("filesystem_read_text_file", path=".env"),                    # blocked file
        hermes("filesystem_read_text_file", path="../outside.txt"),          # jail escape
        hermes("filesystem_read_text_file", path="notes.txt"),               # fine
        "Done."], model=QWEN, engine=engine)
    with registry:
        out = ToolLoop(model, executor, engine=engine).run_sync("Work on the files.")
    codes = [(r.tool_error.details or {}).get("error") if r.tool_error else "ok"
             for _, r in out.tool_history]
    assert codes == ["TRUST_TOO_LOW", "PERMISSION_DENIED", "PERMISSION_DENIED", "ok"]
    assert out.tool_history[3][1].output == {"content": "alpha\nbeta\n"}
    assert not (ws / "new.txt").exists() and not outside.exists()
    outcomes = [(x["tool"], x["outcome"], x["rule"]) for x in _audit(audit)]
    assert outcomes[:3] == [("filesystem_write_file", "refused", "levels: workspace"),
                            ("filesystem_read_text_file", "refused", "paths.blocked: .env"),
                            ("filesystem_read_text_file", "refused", "path.escape")]


def test_a_symlink_out_of_the_workspace_is_refused_before_the_server_sees_it(
        engine, ws, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    (ws / "link.txt").symlink_to(secret)
    registry, executor = mcp_executor(engine, ws, "filesystem", trust="workspace")
    with registry:
        r = executor.execute_sync({"name": "filesystem_write_file",
                                   "arguments": {"path": "link.txt", "content": "pwned"}})
    assert not r.ok and r.tool_error.details["rule"] == "jail.symlink"
    assert secret.read_text() == "outside"


def test_a_write_at_workspace_trust_reaches_the_server(engine, ws):
    registry, executor = mcp_executor(engine, ws, "filesystem", trust="workspace")
    with registry:
        r = executor.execute_sync({"name": "filesystem_write_file",
                                   "arguments": {"path": "new.txt", "content": "made"}})
        assert r.ok, r
        missing = executor.execute_sync({"name": "filesystem_read_text_file",
                                         "arguments": {"path": "nope.txt"}})
    assert (ws / "new.txt").read_text() == "made"
    assert not missing.ok and missing.tool_error.details["error"] == "TOOL_ERROR"
    assert "MCP server 'filesystem', tool 'read_text_file'" in missing.error


# ---------------------------------------------------------------- the CLI

def test_toolrules_run_with_mcp_runs_the_loop_under_the_policy(rules, ws, tmp_path):
    script = tmp_path / "session.yaml"
    script.write_text(yaml.safe_dump({"model": QWEN, "turns": [
        hermes("filesystem_read_text_file", path="notes.txt"),
        hermes("filesystem_write_file", path="copy.txt", content="alpha\nbeta\n"),
        "Copied notes.txt to copy.txt."]}))
    audit = tmp_path / "audit"
    proc = subprocess.run(
        [sys.executable, "-m", "toolrules", "run", "Copy notes.txt to copy.txt", "--model",
         f"scripted:{script}", "--mcp", "filesystem", "--rules", str(rules), "--workspace",
         str(ws), "--trust", "workspace", "--audit-dir", str(audit)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert '[Tool Call] filesystem_read_text_file(path="notes.txt")' in proc.stdout
    assert "[Result] ✓" in proc.stdout and "Copied notes.txt to copy.txt." in proc.stdout
    assert (ws / "copy.txt").read_text() == "alpha\nbeta\n"
    assert [(x["tool"], x["outcome"]) for x in _audit(audit)] == [
        ("filesystem_read_text_file", "ok"), ("filesystem_write_file", "ok")]


def test_toolrules_run_refusal_leaves_the_file_unwritten(rules, ws, tmp_path):
    script = tmp_path / "session.yaml"
    script.write_text(yaml.safe_dump({"model": QWEN, "turns": [
        hermes("filesystem_write_file", path="copy.txt", content="x"), "I could not."]}))
    proc = subprocess.run(
        [sys.executable, "-m", "toolrules", "run", "Write copy.txt", "--model",
         f"scripted:{script}", "--mcp", "filesystem", "--rules", str(rules), "--workspace",
         str(ws), "--trust", "read_only"],
        capture_output=True, text=True, timeout=120)
    assert "✗ TRUST_TOO_LOW: filesystem_write_file needs trust level 'workspace'" in proc.stdout
    assert not (ws / "copy.txt").exists()


def test_exec_calls_one_mcp_tool_by_its_own_or_namespaced_name(rules, ws):
    runner = CliRunner()
    r = runner.invoke(main, ["exec", "--mcp", "everything", "get-sum", '{"a": 1, "b": 2}',
                             "--rules", str(rules)])
    assert r.exit_code == 0, r.output
    assert r.output.strip() == "The sum of 1 and 2 is 3."
    r = runner.invoke(main, ["exec", "--mcp", "filesystem", "filesystem_read_text_file",
                             '{"path": "notes.txt"}', "--rules", str(rules), "--workspace",
                             str(ws), "--trust", "read_only", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["data"] == {"content": "alpha\nbeta\n"}


def test_exec_with_mcp_command_and_the_existing_form(ws):
    from npm_packages import npm_bin

    runner = CliRunner()
    cmd = f"{npm_bin('mcp-server-filesystem')} {ws}"
    r = runner.invoke(main, ["exec", "--mcp-command", cmd, "write_file",
                             '{"path": "x.txt", "content": "1"}', "--workspace", str(ws),
                             "--trust", "read_only"])
    assert r.exit_code == 1
    assert "TRUST_TOO_LOW: mcp-server-filesystem_write_file needs trust level 'workspace'" \
        in r.output
    assert not (ws / "x.txt").exists()
    # the built-in form is unchanged
    r = runner.invoke(main, ["exec", "read_file", '{"path": "notes.txt"}', "--workspace",
                             str(ws), "--trust", "read_only", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["data"].startswith("alpha")


def test_chat_adds_and_removes_a_server_with_the_mcp_command(rules, ws, tmp_path):
    pytest.importorskip("prompt_toolkit")
    script = tmp_path / "session.yaml"
    script.write_text(yaml.safe_dump({"model": QWEN, "turns": [
        hermes("everything_echo", message="hello"), "It echoed hello."]}))
    lines = "::mcp\n::mcp add everything\n::tools\nsay hello\n::mcp remove everything\n" \
            "::mcp add nosuch\n::exit\n"
    r = CliRunner().invoke(main, ["chat", "--model", f"scripted:{script}", "--rules",
                                  str(rules), "--workspace", str(ws), "--tools", "none"],
                           input=lines)
    assert r.exit_code == 0, r.output
    assert "everything  not added" in r.output
    assert "MCP server everything: 13 tools offered from the next turn" in r.output
    assert "everything_echo" in r.output and "It echoed hello." in r.output
    assert "MCP server everything stopped; its tools are gone" in r.output
    assert "unknown MCP server 'nosuch'" in r.output


def test_an_eval_scenario_names_an_mcp_server(rules, tmp_path):
    scen = rules / "scenarios"
    scen.mkdir()
    (scen / "mcp_sum.yaml").write_text(yaml.safe_dump({
        "description": "Add two numbers with the MCP reference server.",
        "tier": "simple", "task": "What is 19 plus 23?",
        "tools": {"mcp": ["everything"]},
        "expect": {"calls": [{"name": "everything_get-sum", "arguments": {"a": 19, "b": 23}}],
                   "answer": {"contains": "42"}},
        "settings": {"trust": "read_only"},
        "script": [{"calls": [{"name": "everything_get-sum", "arguments": {"a": 19, "b": 23}}]},
                   {"answer": "19 plus 23 is 42."}]}))
    report = tmp_path / "report"
    r = CliRunner().invoke(main, ["eval", "--rules", str(rules), "--scenarios", "mcp_sum",
                                  "--models", "hermes", "--report", str(report)])
    assert r.exit_code == 0, r.output
    runs = [run for run in json.loads((report / "report.json").read_text())["runs"]
            if run["stopped"] != "skipped"]  # strategies that need a sampling client
    assert len(runs) >= 3 and all(run["success"] for run in runs), runs
