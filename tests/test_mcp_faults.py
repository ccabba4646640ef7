"""Bad input and misbehaving MCP servers: every failure is a clear error naming the server
(and the tool), nothing is left half-started, no wait is unbounded. The servers are
tests/mcp_fake_server.py (the official SDK's low-level server, told how to misbehave) and,
for the unit checks, plain values."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
from click.testing import CliRunner

import toolrules
from mcp_helpers import QWEN, fake_rule, hermes, load_engine, mcp_executor, workspace
from toolrules import McpError, ScriptedModel, ToolLoop, ToolRegistry
from toolrules.cli import main
from toolrules.mcp import command_spec, result_output, served_result
from toolrules.runtime import ToolFailure

pytestmark = pytest.mark.usefixtures("no_orphans")


@pytest.fixture
def rules(tmp_path):
    root = tmp_path / "rules"
    fake_rule(root, "broken", "exit")
    fake_rule(root, "stuck", "hang-start", startup_seconds=3)
    fake_rule(root, "malformed", "malformed")
    fake_rule(root, "fake", "tools", restarts=1, tools={"write_marker": {"paths": ["path"]}})
    return root


@pytest.fixture
def engine(rules):
    return load_engine(rules)


@pytest.fixture
def ws(tmp_path):
    return workspace(tmp_path, files=False)


def test_an_unknown_server_is_named_with_the_declared_ones(engine, ws):
    with pytest.raises(toolrules.UnknownRuleError, match="unknown MCP server 'nosuch'"):
        ToolRegistry(engine=engine, workspace=ws).add_mcp("nosuch")
    r = CliRunner().invoke(main, ["run", "hi", "--model", "scripted:x.yaml", "--mcp", "nosuch"])
    assert r.exit_code != 0


def test_cli_unknown_server(rules, tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text(json.dumps({"model": QWEN, "turns": ["hi"]}))
    r = CliRunner().invoke(main, ["run", "hi", "--model", f"scripted:{script}", "--mcp",
                                  "nosuch", "--rules", str(rules)])
    assert r.exit_code == 1
    assert "unknown MCP server 'nosuch'" in r.output
    assert "declared: broken, everything, fake, filesystem, malformed, stuck" in r.output


def test_a_server_that_exits_at_start_is_named_with_its_stderr(engine, ws):
    registry, _ = mcp_executor(engine, ws, "broken")
    started = time.monotonic()
    with pytest.raises(McpError) as err:
        registry.names()
    text = str(err.value)
    assert "MCP server 'broken'" in text and "exited before it answered the handshake" in text
    assert "fatal: the configuration file fake.toml is missing" in text
    assert err.value.server == "broken"
    assert time.monotonic() - started < 20
    assert registry.mcp_servers() == {}  # nothing half-started


def test_a_missing_program_is_named(ws):
    registry = ToolRegistry(workspace=ws)
    registry.add_mcp(command="/nonexistent/mcp-server --flag", name="ghost")
    with pytest.raises(McpError, match=r"MCP server 'ghost' .* no program "
                                       r"'/nonexistent/mcp-server'"):
        registry.start_mcp()


def test_a_server_that_never_answers_gives_up_after_startup_seconds(engine, ws):
    registry, _ = mcp_executor(engine, ws, "stuck")
    started = time.monotonic()
    with pytest.raises(McpError, match=r"MCP server 'stuck' .* did not finish starting .* "
                                       r"within 3 s"):
        registry.names()
    assert time.monotonic() - started < 20


def test_malformed_tool_schemas_are_refused_naming_server_and_tools(engine, ws):
    registry, _ = mcp_executor(engine, ws, "malformed")
    with pytest.raises(McpError) as err:
        registry.names()
    text = str(err.value)
    assert "MCP server 'malformed'" in text
    assert "tool 'typo': inputSchema is not a valid JSON Schema" in text
    assert "tool 'cyclic': " in text and "does not resolve" in text
    assert "'fine'" not in text  # the good tool is not blamed
    r = CliRunner().invoke(main, ["mcp", "tools", "malformed", "--rules",
                                  str(engine.ruleset.layers[-1].rules)])
    assert r.exit_code == 1 and "tool 'typo'" in r.output


def test_exec_with_a_server_that_exits(rules, ws):
    r = CliRunner().invoke(main, ["exec", "--mcp", "broken", "anything", "{}", "--rules",
                                  str(rules), "--workspace", str(ws)])
    assert r.exit_code == 1
    assert "error: MCP server 'broken'" in r.output and "fake.toml is missing" in r.output


# ---------------------------------------------------------------- calling

def test_a_server_that_dies_mid_call_gives_a_tool_error_then_restarts(engine, ws):
    registry, executor = mcp_executor(engine, ws, "fake", trust="read_only")
    with registry:
        first = executor.execute_sync({"name": "fake_ok", "arguments": {}})
        assert first.ok and first.output == "fine"
        crashed = executor.execute_sync({"name": "fake_crash", "arguments": {}})
        assert not crashed.ok
        assert crashed.tool_error.details["error"] == "SERVER_UNAVAILABLE"
        assert "MCP server 'fake'" in crashed.error and "'crash'" in crashed.error
        assert "crashing on purpose" in crashed.error  # its stderr, quoted
        again = executor.execute_sync({"name": "fake_ok", "arguments": {}})
        assert again.ok  # started again (restarts: 1)
        executor.execute_sync({"name": "fake_crash", "arguments": {}})
        gone = executor.execute_sync({"name": "fake_ok", "arguments": {}})
        assert not gone.ok and "already restarted 1 time" in gone.error


def test_a_hanging_call_times_out_and_the_loop_goes_on(engine, ws, tmp_path):
    registry, executor = mcp_executor(engine, ws, "fake", trust="read_only",
                                   audit_dir=tmp_path / "audit")
    model = ScriptedModel([hermes("fake_sleep", seconds=600), "Gave up waiting."],
                          model=QWEN, engine=engine)
    started = time.monotonic()
    with registry:
        # the executor's timeout: the policy's default unless a tool says otherwise
        executor.policy = dataclasses.replace(executor.policy, timeout_default=1.5)
        out = ToolLoop(model, executor, engine=engine).run_sync("Sleep.")
    assert time.monotonic() - started < 30
    result = out.tool_history[0][1]
    assert result.tool_error.details["error"] == "TIMEOUT"
    assert "MCP server 'fake' did not answer 'sleep'" in result.error
    assert out.ok and out.content == "Gave up waiting."


def test_a_result_over_the_byte_cap_is_refused(engine, ws):
    registry, executor = mcp_executor(engine, ws, "fake", trust="read_only")
    with registry:
        small = executor.execute_sync({"name": "fake_big", "arguments": {"size": 1000}})
        big = executor.execute_sync({"name": "fake_big", "arguments": {"size": 300_000}})
    assert small.ok and len(small.output) == 1000
    assert not big.ok and big.tool_error.details["error"] == "TOOL_OUTPUT_TOO_LARGE"
    assert big.name == "fake_big" and "300000 bytes" in big.error
    assert "(MCP server 'fake', tool 'big')" in big.error


def test_a_tool_the_policy_hides_is_refused_and_never_reaches_the_server(engine, ws):
    registry, executor = mcp_executor(engine, ws, "fake", trust="read_only",
                                   denied=["fake_ok"])
    with registry:
        offered = [t.name for t in executor.visible_tools()]
        denied = executor.execute_sync({"name": "fake_ok", "arguments": {}})
        low = executor.execute_sync({"name": "fake_write_marker",
                                     "arguments": {"path": "marker.txt"}})
    assert "fake_ok" not in offered and "fake_write_marker" not in offered
    assert denied.tool_error.details["error"] == "TOOL_NOT_ALLOWED"
    assert "fake_ok" in denied.error
    assert low.tool_error.details["error"] == "TRUST_TOO_LOW"
    assert not (ws / "marker.txt").exists()


def test_path_arguments_of_an_mcp_tool_go_through_the_jail(engine, ws, tmp_path):
    registry, executor = mcp_executor(engine, ws, "fake", trust="workspace")
    with registry:
        out = executor.execute_sync({"name": "fake_write_marker",
                                     "arguments": {"path": "../escaped.txt"}})
        env = executor.execute_sync({"name": "fake_write_marker",
                                     "arguments": {"path": ".env"}})
    assert out.tool_error.details["rule"] == "path.escape"
    assert env.tool_error.details["rule"] == "paths.blocked: .env"
    assert not (tmp_path / "escaped.txt").exists() and not (ws / ".env").exists()


def test_close_stops_the_server_and_later_calls_fail_clearly(engine, ws):
    registry, executor = mcp_executor(engine, ws, "fake", trust="read_only")
    assert executor.execute_sync({"name": "fake_ok", "arguments": {}}).ok
    registry.close()
    after = executor.execute_sync({"name": "fake_ok", "arguments": {}})
    assert not after.ok and after.tool_error.details["error"] == "SERVER_UNAVAILABLE"
    assert "it was closed" in after.error


# ---------------------------------------------------------------- values, no server

def test_a_missing_environment_variable_is_named():
    spec = command_spec(["server"], name="svc", env={"TOKEN": "${SURELY_NOT_SET_42}"})
    with pytest.raises(McpError, match="MCP server 'svc': env TOKEN needs the environment "
                                       "variable SURELY_NOT_SET_42, which is not set"):
        spec.launch(None, environ={})
    with pytest.raises(McpError, match=r"uses \{workspace\} and this session has no workspace"):
        command_spec(["server", "{workspace}"], name="svc").launch(None)
    launch = command_spec(["server", "--root", "{workspace}"], name="svc",
                          env={"TOKEN": "${T}"}).launch("/tmp", environ={"T": "v"})
    assert launch.args == ("--root", "/tmp") and launch.env == {"TOKEN": "v"}


def test_a_listing_with_non_object_arguments_is_refused(engine):
    from toolrules.mcp import mcp_rules, mcp_tools

    spec = command_spec(["server"], name="odd")
    listing = [{"name": "listy", "inputSchema": {"type": "array"}},
               {"name": "fine", "inputSchema": {"type": "object"}},
               {"name": "a" * 80, "inputSchema": {"type": "object"}}]
    with pytest.raises(McpError) as err:
        mcp_tools(spec, listing, mcp_rules(engine), engine=engine)
    assert "MCP server 'odd'" in str(err.value)
    assert "tool 'listy': inputSchema has type 'array'" in str(err.value)
    tools = mcp_tools(spec, listing[1:], mcp_rules(engine), engine=engine)
    assert len(tools[1].name) <= 64 and tools[1].remote == "a" * 80  # shortened, still mapped


def test_results_map_onto_tool_results_without_loss():
    assert result_output("s", "t", {"content": [{"type": "text", "text": "a"},
                                                {"type": "text", "text": "b"}]}) == "a\nb"
    structured = {"content": [{"type": "text", "text": '{"x": 1}'}], "structuredContent": {"x": 1}}
    assert result_output("s", "t", structured) == {"x": 1}
    parts = result_output("s", "t", {"content": [
        {"type": "text", "text": "see"}, {"type": "image", "data": "aGk=", "mimeType": "image/png"},
        {"type": "audio", "data": "aGk=", "mimeType": "audio/wav"},
        {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "A", "mimeType": "text/plain"}},
        {"type": "resource_link", "uri": "demo://r/1", "name": "R1"}],
        "structuredContent": {"n": 2}})
    assert [p.type for p in parts] == ["text", "image", "audio", "document", "text", "text"]
    assert parts[3].text == "A" and parts[3].name == "file:///a.txt"
    assert "demo://r/1" in parts[4].text and parts[5].text == '{"n": 2}'
    with pytest.raises(ToolFailure) as err:
        result_output("srv", "tl", {"content": [{"type": "text", "text": "boom"}], "isError": True})
    assert err.value.error == "TOOL_ERROR" and err.value.message == "MCP server 'srv', tool 'tl': boom"


def test_served_results_carry_the_envelope():
    ok = served_result(toolrules.ToolResult("1", "t", output={"a": 1}))
    assert ok["structuredContent"] == {"a": 1} and not ok["isError"]
    parts = (toolrules.ContentPart("text", text="x"),
             toolrules.ContentPart("image", data="aGk=", media_type="image/png"))
    media = served_result(toolrules.ToolResult("1", "t", output=parts))
    assert media["content"][1] == {"type": "image", "data": "aGk=", "mimeType": "image/png"}


def test_the_core_import_stays_light():
    import subprocess
    import sys

    code = ("import sys, toolrules; toolrules.load(); "
            "from toolrules.mcp import mcp_rules; mcp_rules(); "
            "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_mcp_tools_needs_exactly_one_server():
    r = CliRunner().invoke(main, ["mcp", "tools"])
    assert r.exit_code == 2 and "give exactly one of NAME" in r.output
