"""The OpenAI Agents SDK (openai-agents, in the dev extra) through `toolrules serve`:
its chat-completions and Responses models, `Runner.run` and `Runner.run_streamed`,
against a scripted OpenAI-compatible server that writes its calls as raw Qwen3-Coder
text (tests/agent_helpers.py). The script and the commands are read from
docs/guides/agent-openai-agents-sdk.md and run as a user runs them: `python agent.py
...` in a fresh home and workspace.

Passing means the function tool really ran (proof.txt in the workspace), its output
reached the model, and the script printed the final answer. The negative control points
the script straight at the scripted server: no tool runs.
"""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("agents", reason="the OpenAI Agents SDK (openai-agents) is not installed")

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
    offline_env,
    recipe,
    report_of,
    run_agent,
    with_proxy,
)

PAGE = "guides/agent-openai-agents-sdk.md"
FRONTS = {"chat": "openai", "responses": "openai-responses"}


def _runs() -> list[list[str]]:
    """The page's `python agent.py ...` commands, as argv lists."""
    _env, argvs = commands(recipe(PAGE, "agents-sdk-run"))
    return argvs


def _run(tmp_path, base_url: str, argv: list[str]) -> tuple[int, str, str, float, object]:
    workspace, home = dirs(tmp_path)
    script = with_proxy(recipe(PAGE, "agents-sdk-script"), base_url)
    (workspace / "agent.py").write_text(script, encoding="utf-8")
    assert argv[:2] == ["python", "agent.py"], argv
    code, out, err, seconds = run_agent([sys.executable, *argv[1:]], workspace,
                                        offline_env(home))
    return code, out, err, seconds, workspace


def test_the_page_runs_both_models_streamed_and_not():
    runs = [" ".join(a[2:]) for a in _runs()]
    assert runs == ["chat", "chat --stream", "responses", "responses --stream"]
    assert "set_tracing_disabled(True)" in recipe(PAGE, "agents-sdk-script")


@pytest.mark.parametrize("argv", _runs(), ids=lambda a: "-".join(a[2:]))
def test_the_agents_sdk_runs_a_tool_through_the_proxy(tmp_path, argv):
    script = ScriptedQwen("run_shell_command", {"command": COMMAND})
    with model_server(script) as up, Proxy(up.url + "/v1", tmp_path) as proxy:
        code, out, err, seconds, workspace = _run(tmp_path, proxy.url, argv)
        report = report_of(code, out, err, seconds, script, proxy)
        check_the_round_trip(script, proxy, workspace, report)
        posts = [a for a in proxy.access() if a.get("method") == "POST"]
    assert code == 0, report
    assert out.strip() == f"{FINAL} {CONTENT}", report
    streamed = "--stream" in argv
    assert {a["front"] for a in posts} == {FRONTS[argv[2]]}, report
    assert all(a["stream"] is streamed for a in posts), report
    print(f"agents sdk ({' '.join(argv[2:])}): {seconds:.1f} s")


@pytest.mark.parametrize("argv", _runs()[::2], ids=lambda a: "-".join(a[2:]))
def test_the_agents_sdk_pointed_straight_at_the_model_server_runs_no_tool(tmp_path, argv):
    """The negative control: over chat completions the raw call text is the final
    output; the Responses API is not served by a chat-completions server."""
    script = ScriptedQwen("run_shell_command", {"command": COMMAND})
    with model_server(script) as up:
        code, out, err, seconds, workspace = _run(tmp_path, up.url, argv)
        report = report_of(code, out, err, seconds, script, None)
    check_no_tool_ran(script, workspace, report)
    if argv[2] == "chat":
        assert code == 0 and "<tool_call>" in out, report
    else:
        assert code != 0 and script.other_paths, report
