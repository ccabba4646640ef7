"""Real coding agents through `toolrules serve`, headless: Claude Code (`claude -p`) and
Codex CLI (`codex exec`), pinned in tests/npm_packages.py, in front of a scripted
OpenAI-compatible model server on 127.0.0.1 that has NO tool parser - like llama.cpp
without --jinja or LM Studio - and answers as Qwen3-Coder does: raw XML call text when
the conversation needs a tool, a final answer once a tool result is in the conversation.

A run passes only when the agent really ran the tool (the file it wrote in its
workspace, with the expected content), the tool's output came back to the model, and
the agent returned the final answer (its JSON output). The agents are kept off the
network: their non-essential traffic is switched off and every other request goes to a
dead proxy. Every subprocess is bounded and its process group killed at the end.
Without npm (and the programs not installed) the tests skip, saying so.
"""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from agent_helpers import (
    CONTENT,
    FINAL,
    MODEL,
    Proxy,
    ScriptedQwen,
    check_the_round_trip,
    model_server,
    offline_env,
    run_agent,
)
from npm_packages import npm_bin


def test_the_model_is_one_the_rules_know_as_qwen3_coder(engine):
    cap = engine.capability(MODEL)
    assert cap.dialect == "qwen3-coder" and engine.sends_native_tools(MODEL)


# ---------------------------------------------------------------- Claude Code

def test_claude_code_headless_runs_a_tool_through_the_proxy(tmp_path):
    claude = npm_bin("claude")
    command = f"printf '{CONTENT}\\n' > proof.txt && cat proof.txt"
    script = ScriptedQwen("Bash", {"command": command})
    workspace, home = tmp_path / "workspace", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    with model_server(script) as up, Proxy(up.url + "/v1", tmp_path) as proxy:
        env = offline_env(home, ANTHROPIC_BASE_URL=proxy.url, ANTHROPIC_API_KEY="unused",
                          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1",
                          DISABLE_AUTOUPDATER="1", DISABLE_ERROR_REPORTING="1",
                          DISABLE_BUG_COMMAND="1")
        code, out, err, seconds = run_agent(
            [str(claude), "-p", "Write the line agent-was-here into proof.txt using Bash.",
             "--allowedTools", "Bash", "--output-format", "json"], workspace, env)
        report = (f"exit {code} after {seconds:.1f} s\nstdout: {out[-3000:]}\n"
                  f"stderr: {err[-3000:]}\nupstream turns: {script.summary()}\n"
                  f"proxy log: {proxy.log()}")
        check_the_round_trip(script, proxy, workspace, report)
    assert code == 0, report
    result = json.loads(out.strip().splitlines()[-1])
    assert result["type"] == "result" and result["is_error"] is False, report
    assert result["result"] == f"{FINAL} {CONTENT}", report
    assert result["num_turns"] >= 2, report
    assert all(t["stream"] for t in script.turns if t["kind"] != "other"), report
    print(f"claude -p: {seconds:.1f} s, {len(script.turns)} upstream turns")


# ---------------------------------------------------------------- Codex CLI

def codex_config(proxy_url: str) -> str:
    """A model provider at the proxy: Codex speaks the Responses API to it (its `chat`
    wire API is refused by Codex itself)."""
    return f"""model = "qwen3-coder"
model_provider = "toolrules"
approval_policy = "never"
check_for_update_on_startup = false

[model_providers.toolrules]
name = "toolrules serve"
base_url = "{proxy_url}/v1"
wire_api = "responses"
env_key = "TOOLRULES_PROXY_KEY"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false
"""


def test_codex_exec_runs_a_tool_through_the_proxy(tmp_path):
    codex = npm_bin("codex")
    command = f"printf '{CONTENT}\\n' > proof.txt && cat proof.txt"
    script = ScriptedQwen("exec_command", {"cmd": command})
    workspace, home, codex_home = tmp_path / "workspace", tmp_path / "home", tmp_path / "codex"
    for d in (workspace, home, codex_home):
        d.mkdir()
    with model_server(script) as up, Proxy(up.url + "/v1", tmp_path) as proxy:
        (codex_home / "config.toml").write_text(codex_config(proxy.url), encoding="utf-8")
        env = offline_env(home, CODEX_HOME=str(codex_home), TOOLRULES_PROXY_KEY="unused")
        code, out, err, seconds = run_agent(
            [str(codex), "exec", "--skip-git-repo-check", "-s", "workspace-write", "--json",
             "Write the line agent-was-here into proof.txt."], workspace, env)
        report = (f"exit {code} after {seconds:.1f} s\nstdout: {out[-3000:]}\n"
                  f"stderr: {err[-3000:]}\nupstream turns: {script.summary()}\n"
                  f"proxy log: {proxy.log()}")
        check_the_round_trip(script, proxy, workspace, report)
        fronts = {a.get("front") for a in proxy.access() if a.get("method") == "POST"}
    assert code == 0, report
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    items = [e["item"] for e in events if e.get("type") == "item.completed"]
    commands = [i for i in items if i.get("type") == "command_execution"]
    assert commands and commands[0]["exit_code"] == 0, report
    assert re.search(r"proof\.txt", commands[0]["command"]), report
    messages = [i["text"] for i in items if i.get("type") == "agent_message"]
    assert messages and messages[-1] == f"{FINAL} {CONTENT}", report
    assert events[-1].get("type") == "turn.completed", report
    assert fronts == {"openai-responses"}, report
    print(f"codex exec: {seconds:.1f} s, {len(script.turns)} upstream turns")
