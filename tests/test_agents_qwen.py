"""Qwen Code headless (`qwen --auth-type TYPE ... --yolo`) through `toolrules serve` with
each of its API protocols - openai (chat completions), openai-responses, anthropic,
gemini - against a scripted OpenAI-compatible server that writes its calls as raw
Qwen3-Coder text (tests/agent_helpers.py). The settings and the command are read from
docs/guides/agent-qwen-code.md, so the page is what runs.

Passing means the shell tool really ran (proof.txt in the workspace), its output reached
the model, and the `result` event holds the final answer. The negative control points
the same settings straight at the scripted server: no tool runs.
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

PAGE = "guides/agent-qwen-code.md"
# authentication type -> the proxy's front it reaches
AUTH_TYPES = {"openai": "openai", "openai-responses": "openai-responses",
              "anthropic": "anthropic", "gemini": "gemini"}


def _run(tmp_path, base_url: str, auth_type: str) -> tuple[int, str, str, float, object]:
    qwen = npm_bin("qwen")
    workspace, home = dirs(tmp_path)
    (home / ".qwen").mkdir()
    settings = json.loads(with_proxy(recipe(PAGE, "qwen-settings"), base_url))
    (home / ".qwen" / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    env_vars, argvs = commands(recipe(PAGE, "qwen-run"))
    argv = npx_argv(argvs[0], "qwen", qwen)
    argv[argv.index("--auth-type") + 1] = auth_type
    code, out, err, seconds = run_agent(argv, workspace, offline_env(home, **env_vars))
    return code, out, err, seconds, workspace


def _events(out: str) -> list[dict]:
    start = out.find("[")
    return json.loads(out[start:]) if start >= 0 else []


def test_the_recipe_lists_the_proxy_for_each_api_and_keeps_qwen_code_offline():
    settings = json.loads(recipe(PAGE, "qwen-settings"))
    assert set(settings["modelProviders"]) == set(AUTH_TYPES)
    for models in settings["modelProviders"].values():
        assert models[0]["id"] == "qwen3-coder" and models[0]["envKey"] == "TOOLRULES_PROXY_KEY"
    assert settings["general"]["enableAutoUpdate"] is False
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    assert settings["telemetry"]["enabled"] is False
    env_vars, argvs = commands(recipe(PAGE, "qwen-run"))
    assert "TOOLRULES_PROXY_KEY" in env_vars and "--yolo" in argvs[0]


@pytest.mark.parametrize("auth_type", list(AUTH_TYPES))
def test_qwen_code_runs_a_shell_tool_through_the_proxy(tmp_path, auth_type):
    script = ScriptedQwen("run_shell_command", {"command": COMMAND})
    with model_server(script) as up, Proxy(up.url + "/v1", tmp_path) as proxy:
        code, out, err, seconds, workspace = _run(tmp_path, proxy.url, auth_type)
        report = report_of(code, out, err, seconds, script, proxy)
        check_the_round_trip(script, proxy, workspace, report)
        posts = [a for a in proxy.access() if a.get("method") == "POST"]
    assert code == 0, report
    assert {a["front"] for a in posts} == {AUTH_TYPES[auth_type]}, report
    events = _events(out)
    result = events[-1]
    assert result["type"] == "result" and result["is_error"] is False, report
    assert result["result"] == f"{FINAL} {CONTENT}", report
    assert result["num_turns"] >= 2, report
    print(f"qwen ({auth_type}): {seconds:.1f} s, {len(script.turns)} upstream turns")


@pytest.mark.parametrize("auth_type", list(AUTH_TYPES))
def test_qwen_code_pointed_straight_at_the_model_server_runs_no_tool(tmp_path, auth_type):
    """The negative control: over chat completions the raw call text is the answer; the
    other APIs are not served by a chat-completions server."""
    script = ScriptedQwen("run_shell_command", {"command": COMMAND})
    with model_server(script) as up:
        code, out, err, seconds, workspace = _run(tmp_path, up.url, auth_type)
        report = report_of(code, out, err, seconds, script, None)
    check_no_tool_ran(script, workspace, report)
    if auth_type == "openai":
        assert "<tool_call>" in _events(out)[-1]["result"], report
    else:
        assert script.other_paths and code != 0, report
