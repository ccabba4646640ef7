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

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from npm_packages import npm_bin
from wire_server import Reply, Seen, WireServer, json_reply, sse_reply

MODEL = "Qwen/Qwen3-Coder-30B-A3B-Instruct"  # the rules know it: qwen3-coder dialect
CONTENT = "agent-was-here"
FINAL = "All done: proof.txt holds the line the command printed:"
AGENT_TIMEOUT = 180  # seconds for one headless run (a few seconds is typical)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_group(proc: subprocess.Popen[Any]) -> None:
    """End a process started in its own session, and everything it started."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=5)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # children that outlived the leader


# ---------------------------------------------------------------- the scripted model

class ScriptedQwen:
    """Answers chat completions as a Qwen3-Coder behind a server without a tool parser.

    `tool` and `key` name the agent's shell tool and its command parameter. The call is
    written in Qwen3-Coder's XML and, when streamed, cut into small pieces (markers split
    across chunks), as a real server sends it."""

    def __init__(self, tool: str, key: str, command: str):
        self.tool, self.key, self.command = tool, key, command
        self.turns: list[dict[str, Any]] = []

    def __call__(self, seen: Seen) -> Reply:
        if seen.method != "POST" or not seen.path.endswith("/chat/completions"):
            return json_reply({"error": {"message": f"not served here: {seen.path}"}}, 404)
        body = seen.json()
        messages = body.get("messages") or []
        offered = [t["function"]["name"] for t in body.get("tools") or []]
        results = [m for m in messages if m.get("role") == "tool"]
        if results:
            output = results[-1].get("content")
            if isinstance(output, list):
                output = "".join(p.get("text", "") for p in output if isinstance(p, dict))
            # the answer says what the tool printed: it proves the result came back (the
            # agents wrap a command's output in their own lines, e.g. Codex's exit code)
            text = f"{FINAL} {CONTENT if CONTENT in str(output) else 'nothing'}"
            kind = "final"
        elif self.tool in offered:
            text = (f"I'll write the file.\n<tool_call>\n<function={self.tool}>\n"
                    f"<parameter={self.key}>\n{self.command}\n</parameter>\n</function>\n"
                    "</tool_call>")
            kind = "call"
        else:  # a side request (titles, summaries) or a turn without the shell tool
            text = "Proof file task"
            kind = "other"
        self.turns.append({"kind": kind, "stream": bool(body.get("stream")),
                           "model": body.get("model"), "tools": offered,
                           "roles": [m.get("role") for m in messages]})
        return self._reply(text, bool(body.get("stream")))

    @staticmethod
    def _reply(text: str, stream: bool) -> Reply:
        if not stream:
            return json_reply({"id": "chatcmpl-q", "object": "chat.completion", "created": 1,
                               "model": MODEL, "choices": [{
                                   "index": 0, "finish_reason": "stop",
                                   "message": {"role": "assistant", "content": text}}]})

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": "chatcmpl-q", "object": "chat.completion.chunk", "created": 1,
                    "model": MODEL, "choices": [{"index": 0, "delta": delta,
                                                 "finish_reason": finish}]}

        events: list[Any] = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"content": text[i:i + 7]}) for i in range(0, len(text), 7)]
        events += [chunk({}, "stop"), "data: [DONE]"]
        return sse_reply(events)

    def summary(self) -> str:
        return json.dumps(self.turns, indent=1)[-4000:]


# ---------------------------------------------------------------- the proxy, as a user runs it

class Proxy:
    """`toolrules serve --upstream openai-compatible:MODEL --base-url ...` in its own
    process group, on a free port; its log (access lines) in `log`."""

    def __init__(self, base_url: str, workdir: Path):
        self.base_url = base_url
        self.log_path = workdir / "proxy.log"
        self.proc: subprocess.Popen[Any] | None = None
        self.url = ""

    def __enter__(self) -> Proxy:
        for _attempt in range(3):  # a port taken between choosing and binding: try another
            port = free_port()
            self.url = f"http://127.0.0.1:{port}"
            log = self.log_path.open("wb")
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "toolrules", "serve", "--upstream",
                 f"openai-compatible:{MODEL}", "--base-url", self.base_url,
                 "--host", "127.0.0.1", "--port", str(port)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env={**os.environ, "TOOLRULES_SERVE_API_KEY": ""})
            log.close()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.proc.poll() is None:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                        return self
                time.sleep(0.1)
            stop_group(self.proc)
        raise AssertionError(f"toolrules serve did not start:\n{self.log()}")

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None:
            stop_group(self.proc)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-6000:]

    def access(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out


@contextlib.contextmanager
def model_server(script: ScriptedQwen) -> Iterator[WireServer]:
    with WireServer(script) as srv:
        yield srv


def offline_env(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment: the agent's own home, no keys of the machine, and every
    request that does not go to 127.0.0.1 sent to a dead proxy."""
    dead = f"http://127.0.0.1:{free_port()}"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "XDG_CONFIG_HOME": str(home / ".config"), "XDG_CACHE_HOME": str(home / ".cache"),
           "LANG": "C.UTF-8", "TERM": "dumb", "NO_COLOR": "1", "CI": "1",
           "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "ALL_PROXY": dead,
           "http_proxy": dead, "https_proxy": dead, "all_proxy": dead,
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    env.update(extra)
    return env


def run_agent(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str, float]:
    """Run to the end within AGENT_TIMEOUT; the whole process group is killed after."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=AGENT_TIMEOUT)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        out, err = proc.communicate()
        pytest.fail(f"{Path(argv[0]).name} did not finish within {AGENT_TIMEOUT} s\n"
                    f"stdout: {out.decode(errors='replace')[-3000:]}\n"
                    f"stderr: {err.decode(errors='replace')[-3000:]}")
    finally:
        stop_group(proc)
    return (proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"),
            time.monotonic() - t0)


def check_the_round_trip(script: ScriptedQwen, proxy: Proxy, workspace: Path,
                         report: str) -> None:
    proof = workspace / "proof.txt"
    assert proof.is_file(), f"the agent did not run the tool (no proof.txt)\n{report}"
    assert proof.read_text(encoding="utf-8").strip() == CONTENT, report
    kinds = [t["kind"] for t in script.turns]
    assert "call" in kinds and "final" in kinds, report
    assert kinds.index("call") < kinds.index("final"), report
    # the model saw its call and the tool's result (OpenAI-format roles, as sent upstream)
    final_turn = next(t for t in script.turns if t["kind"] == "final")
    assert final_turn["roles"][-2:] == ["assistant", "tool"], report
    assert all(t["model"] == MODEL for t in script.turns), report
    # the proxy read the raw XML as one call, on the turn that offered the tools
    access = [a for a in proxy.access() if a.get("method") == "POST"]
    assert any(a.get("calls") == 1 and a.get("status") == 200 for a in access), report
    assert all(a.get("status") == 200 for a in access), report


def test_the_model_is_one_the_rules_know_as_qwen3_coder(engine):
    cap = engine.capability(MODEL)
    assert cap.dialect == "qwen3-coder" and engine.sends_native_tools(MODEL)


# ---------------------------------------------------------------- Claude Code

def test_claude_code_headless_runs_a_tool_through_the_proxy(tmp_path):
    claude = npm_bin("claude")
    command = f"printf '{CONTENT}\\n' > proof.txt && cat proof.txt"
    script = ScriptedQwen("Bash", "command", command)
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
    script = ScriptedQwen("exec_command", "cmd", command)
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
