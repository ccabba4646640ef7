"""Running real agents headless for tests (tests/test_agents*.py): a scripted model
server on 127.0.0.1 that writes its tool calls as raw Qwen3-Coder text (no tool parser,
like llama.cpp without --jinja or LM Studio), `toolrules serve` in front of it as a user
starts it, a fresh home and workspace per run kept off the network, and the recipes the
docs give for each agent (read from the pages, so the docs cannot drift from what runs).

A run passes only when the agent really ran the tool (the file it wrote in its
workspace), the tool's output came back to the model, and the agent returned the final
answer. Every subprocess is bounded and its process group killed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
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

from wire_server import Reply, Seen, WireServer, json_reply, sse_reply

REPO = Path(__file__).resolve().parent.parent
MODEL = "Qwen/Qwen3-Coder-30B-A3B-Instruct"  # the rules know it: qwen3-coder dialect
CONTENT = "agent-was-here"
FINAL = "All done: proof.txt holds the line the command printed:"
COMMAND = f"printf '{CONTENT}\\n' > proof.txt && cat proof.txt"
TASK = "Write the line agent-was-here into proof.txt."
AGENT_TIMEOUT = 180  # seconds for one headless run (a few seconds is typical)
DOCS_PORT = "8082"   # the proxy's port in the docs' recipes


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

def example_of(schema: Any) -> Any:
    """A small value that validates against a plain JSON Schema (the JSON answers the
    scripted model gives: an agent's routing or classification step)."""
    if not isinstance(schema, dict):
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return example_of(schema[key][0])
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    kind = kind.lower() if isinstance(kind, str) else kind
    if kind == "object" or "properties" in schema:
        return {k: example_of(v) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return []
    if kind == "integer":
        return max(1, int(schema.get("minimum", 1)))
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return False
    return "simple"


class ScriptedQwen:
    """Answers chat completions as a Qwen3-Coder behind a server without a tool parser.

    `tool` and `args` name the agent's tool and the arguments of the call. The call is
    written in Qwen3-Coder's XML and, when streamed, cut into small pieces (markers split
    across chunks), as a real server sends it. A request for a JSON answer (a json_schema
    response format) gets a JSON value of that schema; any other path is a 404, as a
    chat-completions-only server answers it."""

    def __init__(self, tool: str, args: dict[str, str]):
        self.tool, self.args = tool, args
        self.turns: list[dict[str, Any]] = []
        self.other_paths: list[str] = []

    def __call__(self, seen: Seen) -> Reply:
        if seen.method != "POST" or not seen.path.endswith("/chat/completions"):
            self.other_paths.append(f"{seen.method} {seen.path}")
            return json_reply({"error": {"message": f"not served here: {seen.path}"}}, 404)
        body = seen.json()
        messages = body.get("messages") or []
        offered = [t["function"]["name"] for t in body.get("tools") or []]
        results = [m for m in messages if m.get("role") == "tool"]
        fmt = body.get("response_format") or {}
        if fmt.get("type") in ("json_schema", "json_object"):
            text = json.dumps(example_of((fmt.get("json_schema") or {}).get("schema")) or {})
            kind = "json"
        elif results:
            output = results[-1].get("content")
            if isinstance(output, list):
                output = "".join(p.get("text", "") for p in output if isinstance(p, dict))
            # the answer says what the tool printed: it proves the result came back (the
            # agents wrap a command's output in their own lines, e.g. Codex's exit code)
            text = f"{FINAL} {CONTENT if CONTENT in str(output) else 'nothing'}"
            kind = "final"
        elif self.tool in offered:
            params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in self.args.items())
            text = (f"I'll write the file.\n<tool_call>\n<function={self.tool}>\n{params}"
                    "</function>\n</tool_call>")
            kind = "call"
        else:  # a side request (titles, summaries) or a turn without the tool
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

    def kinds(self) -> list[str]:
        return [t["kind"] for t in self.turns]

    def summary(self) -> str:
        return json.dumps({"turns": self.turns, "other_paths": self.other_paths},
                          indent=1)[-4000:]


@contextlib.contextmanager
def model_server(script: ScriptedQwen) -> Iterator[WireServer]:
    with WireServer(script) as srv:
        yield srv


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
        for line in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out


def offline_env(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment: the agent's own home, no keys of the machine, and every
    request that does not go to 127.0.0.1 sent to a dead proxy."""
    dead = f"http://127.0.0.1:{free_port()}"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "XDG_CONFIG_HOME": str(home / ".config"), "XDG_CACHE_HOME": str(home / ".cache"),
           "XDG_DATA_HOME": str(home / ".local" / "share"),
           "XDG_STATE_HOME": str(home / ".local" / "state"),
           "LANG": "C.UTF-8", "TERM": "dumb", "NO_COLOR": "1", "CI": "1",
           "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "ALL_PROXY": dead,
           "http_proxy": dead, "https_proxy": dead, "all_proxy": dead,
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    env.update(extra)
    return env


def run_agent(argv: list[str], cwd: Path, env: dict[str, str],
              timeout: float = AGENT_TIMEOUT) -> tuple[int, str, str, float]:
    """Run to the end within `timeout`; the whole process group is killed after."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        out, err = proc.communicate()
        pytest.fail(f"{Path(argv[0]).name} did not finish within {timeout} s\n"
                    f"stdout: {out.decode(errors='replace')[-3000:]}\n"
                    f"stderr: {err.decode(errors='replace')[-3000:]}")
    finally:
        stop_group(proc)
    return (proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"),
            time.monotonic() - t0)


def dirs(tmp: Path) -> tuple[Path, Path]:
    """A fresh workspace and home."""
    workspace, home = tmp / "workspace", tmp / "home"
    workspace.mkdir()
    home.mkdir()
    return workspace, home


def check_the_round_trip(script: ScriptedQwen, proxy: Proxy, workspace: Path,
                         report: str) -> None:
    proof = workspace / "proof.txt"
    assert proof.is_file(), f"the agent did not run the tool (no proof.txt)\n{report}"
    assert proof.read_text(encoding="utf-8").strip() == CONTENT, report
    kinds = script.kinds()
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


def check_no_tool_ran(script: ScriptedQwen, workspace: Path, report: str) -> None:
    """The negative control: without the proxy the agent did not get the tool run."""
    assert not (workspace / "proof.txt").exists(), report
    assert "final" not in script.kinds(), report


# ---------------------------------------------------------------- recipes from the docs

_MARK = re.compile(r"^<!--\s*recipe:\s*(?P<id>[\w.-]+)\s*-->\s*$")
_FENCE = re.compile(r"^(?P<fence>`{3,})")


def recipe(page: str, rid: str) -> str:
    """The fenced block that follows `<!-- recipe: RID -->` on docs/PAGE (other HTML
    comments, such as docs-test skips, may stand between them)."""
    lines = (REPO / "docs" / page).read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        m = _MARK.match(line.strip())
        if not m or m["id"] != rid:
            continue
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or lines[j].strip().startswith("<!--")):
            j += 1
        f = _FENCE.match(lines[j]) if j < len(lines) else None
        if f is None:
            raise AssertionError(f"docs/{page}: recipe {rid!r} is not followed by a fenced block")
        body = []
        for line2 in lines[j + 1:]:
            if line2.strip().startswith(f["fence"]):
                return "\n".join(body) + "\n"
            body.append(line2)
    raise AssertionError(f"docs/{page} has no recipe {rid!r} (a `<!-- recipe: {rid} -->` "
                         "line before a fenced block)")


def with_proxy(text: str, proxy_url: str) -> str:
    """A recipe's text pointed at this run's proxy (the docs use port 8082)."""
    return text.replace(f"http://127.0.0.1:{DOCS_PORT}", proxy_url)


def commands(text: str) -> tuple[dict[str, str], list[list[str]]]:
    """A console recipe as (the variables its `export` lines set, the other commands as
    argv lists); `$ ` starts a command, a trailing backslash continues it, `cd` and
    `npm install` lines are the reader's own steps and left out."""
    env: dict[str, str] = {}
    argvs: list[list[str]] = []
    pending = ""
    for line in text.splitlines():
        if pending:
            pending += " " + line.strip()
        elif line.startswith("$ "):
            pending = line[2:].strip()
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        argv, pending = shlex.split(pending), ""
        if argv[0] == "export":
            for item in argv[1:]:
                key, _, value = item.partition("=")
                env[key] = value
        elif argv[0] == "cd" or argv[:2] == ["npm", "install"] or argv[:2] == ["pip", "install"]:
            continue
        else:
            argvs.append(argv)
    return env, argvs


def npx_argv(argv: list[str], program: str, path: Path) -> list[str]:
    """A recipe's `npx PROGRAM ...` (or `PROGRAM ...`) run with the pinned program."""
    if argv[:2] == ["npx", program]:
        return [str(path), *argv[2:]]
    assert argv[0] == program, f"the recipe runs {argv[0]!r}, not {program!r}"
    return [str(path), *argv[1:]]


def report_of(code: int, out: str, err: str, seconds: float, script: ScriptedQwen,
              proxy: Proxy | None) -> str:
    return (f"exit {code} after {seconds:.1f} s\nstdout: {out[-3000:]}\n"
            f"stderr: {err[-3000:]}\nupstream: {script.summary()}\n"
            + (f"proxy log: {proxy.log()}" if proxy is not None else ""))
