"""OpenCode headless (`opencode run`) through `toolrules serve` with each of the AI SDK
provider packages it bundles - chat completions, the Responses API, Anthropic messages,
the Gemini API - against a scripted OpenAI-compatible server that writes its calls as
raw Qwen3-Coder text (tests/agent_helpers.py). The configuration and the command are
read from docs/guides/agent-opencode.md, so the page is what runs.

Passing means the `bash` tool really ran (proof.txt in the workspace), its output
reached the model, and OpenCode's JSON events hold the final answer. The negative
control points the same configuration straight at the scripted server: no tool runs.
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

PAGE = "guides/agent-opencode.md"
# provider in the page's configuration -> the proxy's front it reaches
PROVIDERS = {"toolrules": "openai", "toolrules-responses": "openai-responses",
             "toolrules-anthropic": "anthropic", "toolrules-gemini": "gemini"}


def _run(tmp_path, base_url: str, provider: str) -> tuple[int, str, str, float, object]:
    opencode = npm_bin("opencode")
    workspace, home = dirs(tmp_path)
    config = json.loads(with_proxy(recipe(PAGE, "opencode-config"), base_url))
    (home / ".config" / "opencode").mkdir(parents=True)
    (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps(config),
                                                                  encoding="utf-8")
    env_vars, argvs = commands(recipe(PAGE, "opencode-run"))
    argv = npx_argv(argvs[0], "opencode", opencode)
    argv[argv.index("-m") + 1] = f"{provider}/qwen3-coder"
    code, out, err, seconds = run_agent(argv, workspace, offline_env(home, **env_vars))
    return code, out, err, seconds, workspace


def test_the_recipe_declares_each_package_and_keeps_opencode_offline():
    config = json.loads(recipe(PAGE, "opencode-config"))
    packages = {name: p["npm"] for name, p in config["provider"].items()}
    assert packages == {"toolrules": "@ai-sdk/openai-compatible",
                        "toolrules-responses": "@ai-sdk/openai",
                        "toolrules-anthropic": "@ai-sdk/anthropic",
                        "toolrules-gemini": "@ai-sdk/google"}
    assert config["autoupdate"] is False and config["share"] == "disabled"
    env_vars, argvs = commands(recipe(PAGE, "opencode-run"))
    assert {"OPENCODE_DISABLE_AUTOUPDATE", "OPENCODE_DISABLE_MODELS_FETCH"} <= set(env_vars)
    assert argvs[0][:3] == ["npx", "opencode", "run"] and "-m" in argvs[0]


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_opencode_runs_a_tool_through_the_proxy(tmp_path, provider):
    script = ScriptedQwen("bash", {"command": COMMAND})
    with model_server(script) as up, Proxy(up.url + "/v1", tmp_path) as proxy:
        code, out, err, seconds, workspace = _run(tmp_path, proxy.url, provider)
        report = report_of(code, out, err, seconds, script, proxy)
        check_the_round_trip(script, proxy, workspace, report)
        posts = [a for a in proxy.access() if a.get("method") == "POST"]
    assert code == 0, report
    # the task's turns (the ones offering tools) went through the package's API
    tool_turns = [a for a in posts if a.get("calls") == 1]
    assert tool_turns and {a["front"] for a in tool_turns} == {PROVIDERS[provider]}, report
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    tools = [e["part"] for e in events if e.get("type") == "tool_use"]
    assert tools and tools[0]["tool"] == "bash", report
    assert tools[0]["state"]["status"] == "completed", report
    assert tools[0]["state"]["output"].strip() == CONTENT, report
    texts = [e["part"]["text"] for e in events if e.get("type") == "text"]
    assert texts and texts[-1] == f"{FINAL} {CONTENT}", report
    print(f"opencode run ({provider}): {seconds:.1f} s, {len(script.turns)} upstream turns")


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_opencode_pointed_straight_at_the_model_server_runs_no_tool(tmp_path, provider):
    """The negative control: over chat completions OpenCode gets the raw call text as
    its answer; the other APIs are not served by a chat-completions server."""
    script = ScriptedQwen("bash", {"command": COMMAND})
    with model_server(script) as up:
        code, out, err, seconds, workspace = _run(tmp_path, up.url, provider)
        report = report_of(code, out, err, seconds, script, None)
    check_no_tool_ran(script, workspace, report)
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert not [e for e in events if e.get("type") == "tool_use"], report
    if provider == "toolrules":
        texts = "".join(e["part"]["text"] for e in events if e.get("type") == "text")
        assert "<tool_call>" in texts, report
    else:
        assert script.other_paths, report
