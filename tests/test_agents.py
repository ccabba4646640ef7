"""Real coding agents through `toolrules serve`, headless: Claude Code (`claude -p`) and
Codex CLI (`codex exec`), pinned in tests/npm_packages.py, in front of a scripted
OpenAI-compatible model server on 127.0.0.1 that has NO tool parser - like llama.cpp
without --jinja or LM Studio - and answers as Qwen3-Coder does: raw XML call text when
the conversation needs a tool, a final answer once a tool result is in the conversation
(tests/agent_helpers.py). The commands and Codex's configuration are read from
docs/guides/agents-headless.md, so the page is what runs.

A run passes only when the agent really ran the tool (the file it wrote in its
workspace, with the expected content), the tool's output came back to the model, and
the agent returned the final answer (its JSON output). The agents are kept off the
network: their non-essential traffic is switched off and every other request goes to a
dead proxy. Every subprocess is bounded and its process group killed at the end. The
negative controls point each agent straight at the scripted server: no tool runs.
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
    check_no_tool_ran,
    check_the_round_trip,
    commands,
    dirs,
    model_server,
    npx_argv,
    offline_env,
    recipe,
    report_of,
    run_agent,
    with_proxy,
)
from npm_packages import npm_bin

PAGE = "guides/agents-headless.md"
COMMAND = f"printf '{CONTENT}\\n' > proof.txt && cat proof.txt"


def test_the_model_is_one_the_rules_know_as_qwen3_coder(engine):
    cap = engine.capability(MODEL)
    assert cap.dialect == "qwen3-coder" and engine.sends_native_tools(MODEL)


# ---------------------------------------------------------------- Claude Code

def _claude(tmp_path, base_url: str) -> tuple[int, str, str, float, object]:
    claude = npm_bin("claude")
    workspace, home = dirs(tmp_path)
    env_vars, argvs = commands(with_proxy(recipe(PAGE, "claude-run"), base_url))
    assert env_vars["ANTHROPIC_BASE_URL"] == base_url, env_vars
    code, out, err, seconds = run_agent(npx_argv(argvs[0], "claude", claude), workspace,
                                        offline_env(home, **env_vars))
    return code, out, err, seconds, workspace


def test_claude_code_headless_runs_a_tool_through_the_proxy(tmp_path):
    script = ScriptedQwen("Bash", {"command": COMMAND})
    with model_server(script) as up, Proxy(up.url + "/v1", tmp_path) as proxy:
        code, out, err, seconds, workspace = _claude(tmp_path, proxy.url)
        report = report_of(code, out, err, seconds, script, proxy)
        check_the_round_trip(script, proxy, workspace, report)
    assert code == 0, report
    result = json.loads(out.strip().splitlines()[-1])
    assert result["type"] == "result" and result["is_error"] is False, report
    assert result["result"] == f"{FINAL} {CONTENT}", report
    assert result["num_turns"] >= 2, report
    assert all(t["stream"] for t in script.turns if t["kind"] != "other"), report
    print(f"claude -p: {seconds:.1f} s, {len(script.turns)} upstream turns")


def test_claude_code_pointed_straight_at_the_model_server_runs_no_tool(tmp_path):
    """The negative control: the scripted server does not speak Anthropic messages."""
    script = ScriptedQwen("Bash", {"command": COMMAND})
    with model_server(script) as up:
        code, out, err, seconds, workspace = _claude(tmp_path, up.url)
        report = report_of(code, out, err, seconds, script, None)
    check_no_tool_ran(script, workspace, report)
    assert any("/v1/messages" in p for p in script.other_paths), report


# ---------------------------------------------------------------- Codex CLI

def _codex(tmp_path, base_url: str) -> tuple[int, str, str, float, object]:
    """Codex takes a model provider at the proxy from the page's config.toml: it speaks
    the Responses API to it (its `chat` wire API is refused by Codex itself)."""
    codex = npm_bin("codex")
    workspace, home = dirs(tmp_path)
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(with_proxy(recipe(PAGE, "codex-config"), base_url),
                                            encoding="utf-8")
    env_vars, argvs = commands(recipe(PAGE, "codex-run"))
    env_vars["CODEX_HOME"] = str(codex_home)  # the page's is under $HOME
    code, out, err, seconds = run_agent(npx_argv(argvs[0], "codex", codex), workspace,
                                        offline_env(home, **env_vars))
    return code, out, err, seconds, workspace


def test_codex_exec_runs_a_tool_through_the_proxy(tmp_path):
    script = ScriptedQwen("exec_command", {"cmd": COMMAND})
    with model_server(script) as up, Proxy(up.url + "/v1", tmp_path) as proxy:
        code, out, err, seconds, workspace = _codex(tmp_path, proxy.url)
        report = report_of(code, out, err, seconds, script, proxy)
        check_the_round_trip(script, proxy, workspace, report)
        fronts = {a.get("front") for a in proxy.access() if a.get("method") == "POST"}
    assert code == 0, report
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    items = [e["item"] for e in events if e.get("type") == "item.completed"]
    commands_run = [i for i in items if i.get("type") == "command_execution"]
    assert commands_run and commands_run[0]["exit_code"] == 0, report
    assert re.search(r"proof\.txt", commands_run[0]["command"]), report
    messages = [i["text"] for i in items if i.get("type") == "agent_message"]
    assert messages and messages[-1] == f"{FINAL} {CONTENT}", report
    assert events[-1].get("type") == "turn.completed", report
    assert fronts == {"openai-responses"}, report
    print(f"codex exec: {seconds:.1f} s, {len(script.turns)} upstream turns")


def test_codex_pointed_straight_at_the_model_server_runs_no_tool(tmp_path):
    """The negative control: the scripted server does not speak the Responses API."""
    script = ScriptedQwen("exec_command", {"cmd": COMMAND})
    with model_server(script) as up:
        code, out, err, seconds, workspace = _codex(tmp_path, up.url)
        report = report_of(code, out, err, seconds, script, None)
    check_no_tool_ran(script, workspace, report)
    assert any("/v1/responses" in p for p in script.other_paths), report
