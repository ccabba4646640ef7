"""Policies as rules: the bundled default, overlays (same id replaces, `extends`), lint of
broken policies, the golden decisions, and `toolrules exec`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import toolrules
from runtime_helpers import code, make_tree
from toolrules import ToolCall, ToolExecutor
from toolrules.cli import main
from toolrules.runtime import policy_rules


def test_default_policy_levels_blocked_paths_and_limits():
    pol = policy_rules("default")
    assert pol.levels == ("discovery", "read_only", "workspace", "shell", "full")
    for pattern in (".env", ".env.*", ".git", "node_modules", "__pycache__", "*.pem", "*.key",
                    "secrets/", ".ssh/"):
        assert pattern in pol.blocked
    assert pol.max_read_bytes == 1_000_000
    assert pol.max_args_bytes == 200_000 and pol.max_output_bytes == 200_000
    words = {" ".join(r.words) for r in pol.allowlist}
    assert {"ls", "cat", "grep", "head", "wc", "env", "sleep", "echo"} <= words
    assert pol.calls_per_minute and pol.writes_per_minute and pol.shell_per_minute
    assert pol.bytes_written_per_session
    assert pol.timeout_default <= pol.timeout_max


def _layer(tmp_path: Path, name: str, body: str) -> Path:
    layer = tmp_path / "rules"
    (layer / "policies").mkdir(parents=True, exist_ok=True)
    (layer / "policies" / f"{name}.yaml").write_text(body)
    return layer


def test_a_project_policy_with_the_same_id_replaces_the_default(tmp_path):
    ws = make_tree(tmp_path)[0]
    layer = _layer(tmp_path, "default", "levels: [{name: reader, tools: [read_file]}]\n"
                                        "paths: {blocked: ['*.md']}\n")
    engine = toolrules.load(paths=[layer], use_env=False, cache=False)
    ex = ToolExecutor(toolrules.builtin_tools(ws, engine=engine), workspace=ws, trust="reader",
                      engine=engine)
    assert code(ex.execute_sync(ToolCall("1", "read_file", {"path": "README.md"}))) \
        == "PERMISSION_DENIED"
    assert ex.execute_sync(ToolCall("2", "read_file", {"path": ".env"})).ok  # not blocked here
    assert [t.name for t in ex.visible_tools()] == ["read_file"]


def test_extends_changes_only_some_fields(tmp_path):
    layer = _layer(tmp_path, "strict", "extends: default\n"
                                       "paths: {blocked: ['*.md'], max_read_bytes: 10}\n"
                                       "rate_limits: {calls_per_minute: 3}\n"
                                       "commands: {env: null}\n")
    engine = toolrules.load(paths=[layer], use_env=False, cache=False)
    pol = policy_rules("strict", engine)
    assert pol.blocked == ("*.md",)
    assert pol.max_read_bytes == 10 and pol.calls_per_minute == 3
    assert pol.writes_per_minute == policy_rules("default").writes_per_minute
    assert pol.levels == policy_rules("default").levels
    assert pol.env_set == {}  # null removed the inherited mapping


def test_unknown_policy_is_a_clear_error(tmp_path):
    with pytest.raises(KeyError, match="nope"):
        ToolExecutor(toolrules.ToolRegistry(), policy="nope")


def test_broken_policy_refuses_to_load(tmp_path):
    layer = _layer(tmp_path, "bad", "levels: [{name: a}]\nregistered_level: b\n")
    with pytest.raises(toolrules.RuleError, match="registered_level is 'b'"):
        toolrules.load(paths=[layer], use_env=False, cache=False)


def test_golden_policy_decisions_are_current():
    runner = CliRunner()
    result = runner.invoke(main, ["golden", "check", "--filter", "polic"])
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------- toolrules exec

@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return make_tree(tmp_path)[0]


def test_exec_prints_the_output(ws):
    result = CliRunner().invoke(main, ["exec", "read_file", '{"path": "input.txt"}',
                                       "--workspace", str(ws), "--trust", "read_only"])
    assert result.exit_code == 0
    assert result.output == "hello\n"


def test_exec_json_envelope_and_exit_status(ws, tmp_path):
    audit = tmp_path / "audit"
    result = CliRunner().invoke(main, ["exec", "read_file", '{"path": ".env"}', "--workspace",
                                       str(ws), "--json", "--audit-dir", str(audit)])
    assert result.exit_code == 1
    env = json.loads(result.output)
    assert env["ok"] is False and env["tool"] == "read_file"
    assert env["errors"][0]["code"] == "PERMISSION_DENIED"
    assert env["errors"][0]["details"]["rule"] == "paths.blocked: .env"
    assert len(list(audit.glob("tools-*.jsonl"))) == 1
    ok = CliRunner().invoke(main, ["exec", "run_command", '{"command": "echo hi"}',
                                   "--workspace", str(ws), "--trust", "shell", "--json"])
    assert ok.exit_code == 0
    assert json.loads(ok.output)["data"]["stdout"] == "hi\n"


def test_exec_refusal_text(ws):
    result = CliRunner().invoke(main, ["exec", "run_command", '{"command": "ls"}',
                                       "--workspace", str(ws)])
    assert result.exit_code == 1
    assert "TRUST_TOO_LOW" in result.output and "rule: levels: shell" in result.output


def test_exec_dry_run_and_bad_json(ws):
    result = CliRunner().invoke(main, ["exec", "write_file", '{"path": "n.txt", "content": "x"}',
                                       "--workspace", str(ws), "--dry-run"])
    assert result.exit_code == 0 and '"dry_run": true' in result.output
    assert not (ws / "n.txt").exists()
    result = CliRunner().invoke(main, ["exec", "read_file", '{"path": ', "--workspace", str(ws),
                                       "--json"])
    assert result.exit_code == 1
    assert json.loads(result.output)["errors"][0]["code"] == "INVALID_ARGUMENTS"


def test_exec_unknown_policy_and_workspace(ws, tmp_path):
    result = CliRunner().invoke(main, ["exec", "list_files", "{}", "--workspace", str(ws),
                                       "--policy", "nope"])
    assert result.exit_code == 1 and "nope" in result.output
    result = CliRunner().invoke(main, ["exec", "list_files", "{}", "--workspace",
                                       str(tmp_path / "missing")])
    assert result.exit_code == 1 and "not a directory" in result.output
