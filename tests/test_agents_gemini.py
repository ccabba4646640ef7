"""Gemini CLI headless (`gemini -p ... --yolo`) through `toolrules serve`'s Gemini API
front, against a scripted OpenAI-compatible server that writes its calls as raw
Qwen3-Coder text (tests/agent_helpers.py). The settings and the command are read from
docs/guides/agent-gemini-cli.md, so the page is what runs.

Passing means: the CLI's routing step (a non-streamed generateContent asking for JSON)
was answered on the first attempt, the shell tool really ran (proof.txt in the
workspace), its output reached the model, and the CLI printed the final answer. The
negative control points the CLI straight at the scripted server: no tool runs.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from agent_helpers import (
    COMMAND,
    CONTENT,
    FINAL,
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

PAGE = "guides/agent-gemini-cli.md"


def _run(tmp_path, base_url: str) -> tuple[int, str, str, float, object]:
    """The page's recipe with the CLI pointed at `base_url`."""
    gemini = npm_bin("gemini")
    workspace, home = dirs(tmp_path)
    (home / ".gemini").mkdir()
    settings = json.loads(recipe(PAGE, "gemini-settings"))
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    env_vars, argvs = commands(with_proxy(recipe(PAGE, "gemini-run"), base_url))
    assert env_vars["GOOGLE_GEMINI_BASE_URL"] == base_url and len(argvs) == 1
    env = offline_env(home, **env_vars)
    code, out, err, seconds = run_agent(npx_argv(argvs[0], "gemini", gemini), workspace, env)
    return code, out, err, seconds, workspace


def test_the_recipe_selects_api_key_auth_and_keeps_the_cli_offline():
    settings = json.loads(recipe(PAGE, "gemini-settings"))
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    assert settings["telemetry"]["enabled"] is False
    assert settings["general"]["enableAutoUpdate"] is False
    env_vars, argvs = commands(recipe(PAGE, "gemini-run"))
    assert {"GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY"} <= set(env_vars)
    assert "--yolo" in argvs[0] and "-p" in argvs[0]


def test_gemini_cli_runs_a_shell_tool_through_the_proxy(tmp_path):
    script = ScriptedQwen("run_shell_command", {"command": COMMAND})
    with model_server(script) as up, Proxy(up.url + "/v1", tmp_path) as proxy:
        code, out, err, seconds, workspace = _run(tmp_path, proxy.url)
        report = report_of(code, out, err, seconds, script, proxy)
        check_the_round_trip(script, proxy, workspace, report)
        posts = [a for a in proxy.access() if a.get("method") == "POST"]
    assert code == 0, report
    # the routing step: one non-streamed generateContent asking for JSON, answered at once
    routing = [a for a in posts if a["path"].endswith(":generateContent")]
    assert len(routing) == 1 and routing[0]["status"] == 200, report
    assert script.kinds()[0] == "json", report
    turns = [a for a in posts if a["path"].endswith(":streamGenerateContent")]
    assert turns and all(a["stream"] for a in turns), report
    assert {a["front"] for a in posts} == {"gemini"}, report
    result = json.loads(out[out.index("{"):])
    assert result["response"].strip() == f"{FINAL} {CONTENT}", report
    assert result["stats"]["tools"]["totalSuccess"] >= 1, report
    print(f"gemini -p: {seconds:.1f} s, {len(script.turns)} upstream turns")


def test_gemini_cli_pointed_straight_at_the_model_server_runs_no_tool(tmp_path):
    """The negative control: the scripted server speaks chat completions only."""
    script = ScriptedQwen("run_shell_command", {"command": COMMAND})
    with model_server(script) as up:
        code, out, err, seconds, workspace = _run(tmp_path, up.url)
        report = report_of(code, out, err, seconds, script, None)
    check_no_tool_ran(script, workspace, report)
    assert code != 0, report
    assert any(":streamGenerateContent" in p or ":generateContent" in p
               for p in script.other_paths), report
