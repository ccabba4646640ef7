"""run_command: trust level, allowlist, no shell, cwd in the jail, scrubbed environment,
resource limits, output caps, and timeouts that leave no process behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import toolrules
from runtime_helpers import code, make_tree, rule
from toolrules import ToolCall, ToolExecutor

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX process control")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return make_tree(tmp_path)[0]


def shell(ws: Path, policy: object = "default", **kw: object) -> ToolExecutor:
    return ToolExecutor(toolrules.builtin_tools(ws), workspace=ws, trust="shell",
                        policy=policy, **kw)  # type: ignore[arg-type]


def cmd(ex: ToolExecutor, command: str, **args: object) -> toolrules.ToolResult:
    return ex.execute_sync(ToolCall("c", "run_command", {"command": command, **args}))


@pytest.fixture
def shell_policy(tmp_path: Path):
    """An overlay policy that allows a shell (to start background children) and `yes`."""
    layer = tmp_path / "rules"
    (layer / "policies").mkdir(parents=True)
    (layer / "policies" / "sh.yaml").write_text(
        "extends: default\n"
        "commands:\n"
        "  allow_shell: true\n"
        "  check_path_arguments: false\n"
        "  allowlist: [sleep, 'yes', head, cat, echo, ls, wc]\n"
        "  rlimits: {file_size_bytes: 100000}\n"
        "  max_output_bytes: 5000\n")
    engine = toolrules.load(paths=[layer], use_env=False, cache=False)
    return engine


def test_allowed_command_runs_in_the_workspace(ws):
    result = cmd(shell(ws), "ls")
    assert result.ok
    assert result.output["exit_code"] == 0
    assert "README.md" in result.output["stdout"].split()
    result = cmd(shell(ws), "ls", cwd="src")
    assert result.output["stdout"].split() == ["main.py"]


def test_exit_codes_are_results_not_errors(ws):
    result = cmd(shell(ws), "ls no-such-file")
    assert result.ok and result.output["exit_code"] != 0
    assert "no-such-file" in result.output["stderr"]


def test_command_below_shell_trust_is_refused(ws):
    ex = ToolExecutor(toolrules.builtin_tools(ws), workspace=ws, trust="workspace")
    assert code(cmd(ex, "ls")) == "TRUST_TOO_LOW"


@pytest.mark.parametrize("command,error", [
    ("rm -rf src", "COMMAND_NOT_ALLOWED"),
    ("python3 -c 'print(1)'", "COMMAND_NOT_ALLOWED"),
    ("/bin/ls", "COMMAND_NOT_ALLOWED"),
    ("ls | wc -l", "COMMAND_NOT_ALLOWED"),
    ("ls; rm x", "COMMAND_NOT_ALLOWED"),
    ("echo $(id)", "COMMAND_NOT_ALLOWED"),
    ("echo `id`", "COMMAND_NOT_ALLOWED"),
    ("echo hi > out.txt", "COMMAND_NOT_ALLOWED"),
    ("env sh -c id", "COMMAND_NOT_ALLOWED"),
    ("find . -exec rm {} ;", "COMMAND_NOT_ALLOWED"),
    ("cat /etc/passwd", "PERMISSION_DENIED"),
    ("cat ../outside/secret.txt", "PERMISSION_DENIED"),
    ("cat .env", "PERMISSION_DENIED"),
    ("'unbalanced", "INVALID_ARGUMENTS"),
])
def test_refused_commands(ws, command, error):
    result = cmd(shell(ws), command)
    assert code(result) == error, result.error
    assert not (ws / "out.txt").exists()


def test_symlinked_arguments_and_cwd_cannot_leave_the_jail(ws):
    ex = shell(ws)
    result = cmd(ex, "cat link_out.txt")
    assert code(result) == "PERMISSION_DENIED" and rule(result) == "jail.symlink"
    result = cmd(ex, "ls", cwd="dir_out")
    assert code(result) == "PERMISSION_DENIED"
    result = cmd(ex, "ls", cwd="../")
    assert code(result) == "PERMISSION_DENIED"
    result = cmd(ex, "cat ../README.md", cwd="src")
    assert result.ok and result.output["stdout"].startswith("# Project")


def test_environment_is_scrubbed(ws, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak-123456789")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_nope")
    monkeypatch.setenv("MY_SECRET", "nope")
    monkeypatch.setenv("TERM", "xterm-test")
    result = cmd(shell(ws), "env")
    assert result.ok
    env = dict(line.split("=", 1) for line in result.output["stdout"].splitlines())
    assert "OPENAI_API_KEY" not in env and "GITHUB_TOKEN" not in env and "MY_SECRET" not in env
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert env["HOME"] == str(ws.resolve())
    assert env["TERM"] == "xterm-test"
    assert "nope" not in result.output["stdout"]


def _alive(marker: str) -> list[int]:
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in argv and state != "Z":
            pids.append(int(pid))
    return pids


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_timeout_kills_the_command(ws):
    t0 = time.monotonic()
    result = cmd(shell(ws), "sleep 30.123", timeout=0.5)
    assert code(result) == "TIMEOUT"
    assert "killed after 0.5 s" in result.error
    assert time.monotonic() - t0 < 5
    time.sleep(0.1)
    assert _alive("30.123") == []


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_timeout_kills_the_whole_process_group(ws, shell_policy):
    ex = shell(ws, engine=shell_policy, policy="sh")
    result = cmd(ex, "sleep 41.777 & sleep 42.777", timeout=0.5)
    assert code(result) == "TIMEOUT"
    time.sleep(0.2)
    assert _alive("41.777") == [] and _alive("42.777") == []


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_children_left_behind_are_killed_after_a_normal_exit(ws, shell_policy):
    ex = shell(ws, engine=shell_policy, policy="sh")
    t0 = time.monotonic()
    result = cmd(ex, "sleep 43.777 & echo started", timeout=10)
    assert result.ok and result.output["stdout"].strip() == "started"
    assert time.monotonic() - t0 < 5  # did not wait for the background sleep
    time.sleep(0.2)
    assert _alive("43.777") == []


def test_timeout_is_capped_by_the_policy(ws):
    ex = shell(ws, dry_run=True)
    result = cmd(ex, "sleep 1", timeout=10_000)
    assert result.output["timeout"] == 120.0
    result = cmd(ex, "sleep 1")
    assert result.output["timeout"] == 30.0


def test_output_is_capped(ws, shell_policy):
    ex = shell(ws, engine=shell_policy, policy="sh")
    result = cmd(ex, "yes | head -c 100000")
    assert result.ok
    out = result.output["stdout"]
    assert out.startswith("y\ny\n")
    assert "[... 95000 more bytes cut]" in out
    assert len(out) < 5100


def test_resource_limits_apply_in_the_child(ws, shell_policy):
    ex = shell(ws, engine=shell_policy, policy="sh")
    result = cmd(ex, "cat /proc/self/limits")
    if not result.ok or "Max file size" not in result.output["stdout"]:
        pytest.skip("no /proc/self/limits")
    limits = {line[:26].strip(): line[26:].split() for line in
              result.output["stdout"].splitlines()[1:]}
    assert limits["Max file size"][0] == "100000"
    assert limits["Max cpu time"][0] == "60"
    assert limits["Max open files"][0] == "256"
    result = cmd(ex, "yes | head -c 2000000 > big.txt")
    assert (ws / "big.txt").stat().st_size <= 100000


def test_command_template_tools_from_yaml(ws, tmp_path):
    spec = tmp_path / "skills.yaml"
    spec.write_text(
        "tools:\n"
        "  - name: count_lines\n"
        "    description: Count the lines of a workspace file.\n"
        "    command: [wc, -l, '{path}']\n"
        "    paths: [path]\n"
        "    kind: read\n"
        "    parameters:\n"
        "      type: object\n"
        "      properties: {path: {type: string}}\n"
        "      required: [path]\n")
    reg = toolrules.builtin_tools(ws)
    reg.load_yaml(spec)
    ex = ToolExecutor(reg, workspace=ws, trust="shell")
    result = ex.execute_sync(ToolCall("1", "count_lines", {"path": "README.md"}))
    assert result.ok and result.output["stdout"].split()[0] == "2"
    result = ex.execute_sync(ToolCall("2", "count_lines", {"path": "../outside/secret.txt"}))
    assert code(result) == "PERMISSION_DENIED"
    result = ex.execute_sync(ToolCall("3", "count_lines", {"path": "README.md; rm -rf /"}))
    assert result.ok and result.output["exit_code"] != 0  # one argument, no shell
    low = ToolExecutor(reg, workspace=ws, trust="workspace")
    assert code(low.execute_sync(ToolCall("4", "count_lines", {"path": "README.md"}))) \
        == "TRUST_TOO_LOW"
