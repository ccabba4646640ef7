"""Record agent sessions for `toolrules bench prefix`: every request body Claude Code and
Codex CLI send, in order, as they send them.

    python tests/record_sessions.py                      # both agents, all fixtures
    python tests/record_sessions.py --agent codex --out /tmp/sessions

Each agent runs headless and offline (as in tests/test_agents.py) in front of
`toolrules serve` (a real process on 127.0.0.1), which forwards to a scripted
OpenAI-compatible model server answering as a Qwen3-Coder behind a server without a tool
parser (raw XML call text). The script asks for four tool calls, then answers; the
follow-up prompt (`claude -p --continue`, `codex exec resume --last`) asks for four more.
Between agent and proxy sits a small recording step: it keeps each request (path, the
agent's headers without credentials, the body exactly as the agent sent it) and passes
it on untouched. Two more runs are two NEW conversations of the same agent.

Written to templates/bench/sessions/ (shipped in the wheel: the bench replays them):
`<agent>-session.jsonl.xz` (a prompt and a follow-up in one conversation) and
`<agent>-new.jsonl.xz` (two new conversations). Line 1 is a header (agent, version, the
commands, what was scrubbed); then one line per request: {seq, run, conversation, main,
path, headers, body}. `main` is true when the request offers the agent's shell tool (its
working conversation), false for a side request (titles, summaries).

The workspace and home lie at fixed paths under /tmp (`--root`), so the recorded system
prompts name the same directories on every machine. Scrubbed: nothing in the bodies
(they are replayed as sent); request headers keep only non-credential ones. Pinned
versions: tests/npm_packages.py.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import lzma
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from npm_packages import PINNED, npm_bin
from test_agents import (
    Proxy,
    codex_config,
    offline_env,
    run_agent,
)
from wire_server import Reply, Seen, WireServer, json_reply, sse_reply

MODEL = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
DONE = "Done."
OUT = Path(__file__).resolve().parent.parent / "templates" / "bench" / "sessions"
# headers that carry no credential and say something about the client
KEEP_HEADERS = ("user-agent", "anthropic-version", "anthropic-beta", "x-app", "originator",
                "session_id", "conversation_id", "x-stainless-lang", "x-stainless-package-version",
                "x-stainless-runtime", "x-stainless-runtime-version", "x-claude-code-session-id",
                "openai-beta", "version")

Step = tuple[str, dict[str, str]]


# ---------------------------------------------------------------- the scripted model

class Script:
    """Answers as a Qwen3-Coder without a tool parser would: the next planned call as raw
    XML text, or - when this prompt's calls are done - a final answer. `plans[n]` are the
    calls for the n-th user prompt of a conversation (counted by the final answers the
    conversation already holds)."""

    def __init__(self, shell: str, plans: list[list[Step]]):
        self.shell = shell
        self.plans = plans
        self.log: list[str] = []

    def __call__(self, seen: Seen) -> Reply:
        if seen.method != "POST" or not seen.path.endswith("/chat/completions"):
            return json_reply({"error": {"message": f"not served here: {seen.path}"}}, 404)
        body = seen.json()
        messages = body.get("messages") or []
        offered = {t["function"]["name"] for t in body.get("tools") or []}
        if self.shell not in offered:
            text = "Notes file session"  # a side request: a title, a summary
        else:
            finals = [i for i, m in enumerate(messages) if m.get("role") == "assistant"
                      and str(m.get("content") or "").startswith(DONE)]
            since = finals[-1] + 1 if finals else 0
            done = sum(1 for m in messages[since:] if m.get("role") == "tool")
            plan = self.plans[min(len(finals), len(self.plans) - 1)]
            if done < len(plan):
                name, args = plan[done]
                params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
                text = (f"Step {done + 1}: {name}.\n<tool_call>\n<function={name}>\n{params}"
                        "</function>\n</tool_call>")
            else:
                text = f"{DONE} All {len(plan)} steps ran; the notes file is as asked."
        self.log.append(text.splitlines()[0])
        return _reply(text, bool(body.get("stream")))


def _reply(text: str, stream: bool) -> Reply:
    usage = {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
    if not stream:
        return json_reply({"id": "chatcmpl-rec", "object": "chat.completion", "created": 1,
                           "model": MODEL, "usage": usage, "choices": [{
                               "index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": text}}]})

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-rec", "object": "chat.completion.chunk", "created": 1,
                "model": MODEL, "choices": [{"index": 0, "delta": delta,
                                             "finish_reason": finish}]}

    events: list[Any] = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": text[i:i + 16]}) for i in range(0, len(text), 16)]
    events += [chunk({}, "stop"), {**chunk({}), "choices": [], "usage": usage}, "data: [DONE]"]
    return sse_reply(events)


# ---------------------------------------------------------------- the recording step

class Recorder:
    """An HTTP pass-through on 127.0.0.1 in front of the proxy: keeps each request and
    relays the answer as it arrives (chunked when the proxy streams)."""

    def __init__(self, target: str):
        self.target = target
        self.records: list[dict[str, Any]] = []
        self.run = 0
        self.conversation = ""
        self.shell = ""
        self._lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                outer._forward(self)

            do_GET = do_POST

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _forward(self, h: http.server.BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        if h.command == "POST" and raw:
            body = json.loads(raw)
            tools = body.get("tools") or []
            names = {t.get("name") or (t.get("function") or {}).get("name") for t in tools}
            with self._lock:
                self.records.append({
                    "seq": len(self.records), "run": self.run,
                    "conversation": self.conversation, "main": self.shell in names,
                    "path": h.path.split("?")[0],
                    "headers": {k.lower(): v for k, v in h.headers.items()
                                if k.lower() in KEEP_HEADERS},
                    "body": body})
        headers = {k: v for k, v in h.headers.items()
                   if k.lower() not in ("host", "content-length", "connection",
                                        "accept-encoding")}
        with httpx.Client(timeout=120) as client, client.stream(
                h.command, self.target + h.path, content=raw, headers=headers) as up:
            h.send_response(up.status_code)
            for k, v in up.headers.items():
                if k.lower() not in ("content-length", "transfer-encoding", "connection",
                                     "content-encoding", "date", "server"):
                    h.send_header(k, v)
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            for part in up.iter_raw():
                if part:
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    h.wfile.flush()
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()


@contextlib.contextmanager
def stack(script: Script, root: Path) -> Iterator[tuple[Recorder, Proxy]]:
    with WireServer(script) as up, Proxy(up.url + "/v1", root) as proxy, \
            Recorder(proxy.url) as rec:
        rec.shell = script.shell
        yield rec, proxy


def fresh(root: Path) -> tuple[Path, Path]:
    if root.exists():
        shutil.rmtree(root)
    workspace, home = root / "workspace", root / "home"
    workspace.mkdir(parents=True)
    home.mkdir()
    return workspace, home


def write(path: Path, header: dict[str, Any], records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(header, ensure_ascii=False)]
    lines += [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records]
    path.write_bytes(lzma.compress(("\n".join(lines) + "\n").encode("utf-8"),
                                   preset=9 | lzma.PRESET_EXTREME))
    print(f"wrote {path} ({path.stat().st_size:,} bytes, {len(records)} requests)")


def _check(code: int, out: str, err: str, what: str, script: Script) -> None:
    if code != 0:
        raise SystemExit(f"{what} failed (exit {code})\nstdout: {out[-3000:]}\n"
                         f"stderr: {err[-3000:]}\nupstream: {script.log}")


# ---------------------------------------------------------------- Claude Code

def claude_plans(ws: Path) -> list[list[Step]]:
    notes = str(ws / "notes.txt")
    return [
        [("Bash", {"command": "ls -la"}),
         ("Write", {"file_path": notes, "content": "alpha\nbeta\ngamma\n"}),
         ("Read", {"file_path": notes}),
         ("Bash", {"command": "wc -l notes.txt"})],
        [("Read", {"file_path": notes}),
         ("Edit", {"file_path": notes, "old_string": "beta", "new_string": "delta"}),
         ("Bash", {"command": "cat notes.txt"}),
         ("Bash", {"command": "grep -c a notes.txt"})],
    ]


CLAUDE_PROMPTS = ("Create notes.txt with the lines alpha, beta and gamma, show it, and count "
                  "its lines.",
                  "Now replace beta with delta in notes.txt and show the file again.")
CLAUDE_NEW = ("List the files here.", "Show me the files in this directory, please.")


def claude_env(home: Path, url: str) -> dict[str, str]:
    return offline_env(home, ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="unused",
                       CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1",
                       DISABLE_AUTOUPDATER="1", DISABLE_ERROR_REPORTING="1",
                       DISABLE_BUG_COMMAND="1")


def claude_argv(claude: Path, prompt: str, *more: str) -> list[str]:
    return [str(claude), "-p", prompt, *more, "--allowedTools", "Bash,Write,Read,Edit",
            "--output-format", "json"]


def record_claude(root: Path, out: Path) -> None:
    claude = npm_bin("claude")
    version = PINNED["claude"][0]
    workspace, home = fresh(root / "claude")
    script = Script("Bash", claude_plans(workspace))
    commands = []
    with stack(script, root / "claude") as (rec, _proxy):
        env = claude_env(home, rec.url)
        rec.conversation = "main"
        for run, prompt in enumerate(CLAUDE_PROMPTS):
            rec.run = run
            argv = claude_argv(claude, prompt, *(["--continue"] if run else []))
            commands.append(" ".join(["claude", *argv[1:]]))
            code, o, e, _s = run_agent(argv, workspace, env)
            _check(code, o, e, f"claude run {run}", script)
        session = list(rec.records)
    write(out / "claude-code-session.jsonl.xz",
          _header("claude-code", version, commands, workspace, home), session)
    # two new conversations, each one prompt with one tool call
    workspace, home = fresh(root / "claude")
    (workspace / "notes.txt").write_text("alpha\n", encoding="utf-8")
    script = Script("Bash", [[("Bash", {"command": "ls"})]])
    commands = []
    with stack(script, root / "claude") as (rec, _proxy):
        env = claude_env(home, rec.url)
        for run, prompt in enumerate(CLAUDE_NEW):
            rec.run, rec.conversation = run, f"new-{run + 1}"
            argv = claude_argv(claude, prompt)
            commands.append(" ".join(["claude", *argv[1:]]))
            code, o, e, _s = run_agent(argv, workspace, env)
            _check(code, o, e, f"claude new conversation {run}", script)
        new = list(rec.records)
    write(out / "claude-code-new.jsonl.xz",
          _header("claude-code", version, commands, workspace, home), new)


# ---------------------------------------------------------------- Codex

def codex_plans() -> list[list[Step]]:
    return [
        [("exec_command", {"cmd": "ls -la"}),
         ("exec_command", {"cmd": "printf 'alpha\\nbeta\\ngamma\\n' > notes.txt"}),
         ("exec_command", {"cmd": "cat notes.txt"}),
         ("exec_command", {"cmd": "wc -l notes.txt"})],
        [("exec_command", {"cmd": "sed -i 's/beta/delta/' notes.txt"}),
         ("exec_command", {"cmd": "cat notes.txt"}),
         ("exec_command", {"cmd": "grep -c a notes.txt"}),
         ("exec_command", {"cmd": "ls -la"})],
    ]


def codex_env(root: Path, home: Path, url: str) -> dict[str, str]:
    codex_home = root / "codex-home"
    codex_home.mkdir(exist_ok=True)
    (codex_home / "config.toml").write_text(codex_config(url), encoding="utf-8")
    return offline_env(home, CODEX_HOME=str(codex_home), TOOLRULES_PROXY_KEY="unused")


CODEX_FLAGS = ["--skip-git-repo-check", "-s", "workspace-write", "--json"]


def record_codex(root: Path, out: Path) -> None:
    codex = npm_bin("codex")
    version = PINNED["codex"][0]
    base = root / "codex"
    workspace, home = fresh(base)
    script = Script("exec_command", codex_plans())
    commands = []
    with stack(script, base) as (rec, _proxy):
        env = codex_env(base, home, rec.url)
        rec.conversation = "main"
        for run, prompt in enumerate(CLAUDE_PROMPTS):
            rec.run = run
            argv = ([str(codex), "exec", *CODEX_FLAGS, prompt] if run == 0 else
                    [str(codex), "exec", "resume", "--last", *CODEX_FLAGS, prompt])
            if run:  # `resume` takes no sandbox flag: the session keeps its own
                argv = [a for a in argv if a not in ("-s", "workspace-write")]
            commands.append(" ".join(["codex", *argv[1:]]))
            code, o, e, _s = run_agent(argv, workspace, env)
            _check(code, o, e, f"codex run {run}", script)
        session = list(rec.records)
    write(out / "codex-session.jsonl.xz",
          _header("codex", version, commands, workspace, home), session)
    workspace, home = fresh(base)
    (workspace / "notes.txt").write_text("alpha\n", encoding="utf-8")
    script = Script("exec_command", [[("exec_command", {"cmd": "ls"})]])
    commands = []
    with stack(script, base) as (rec, _proxy):
        env = codex_env(base, home, rec.url)
        for run, prompt in enumerate(CLAUDE_NEW):
            rec.run, rec.conversation = run, f"new-{run + 1}"
            argv = [str(codex), "exec", *CODEX_FLAGS, prompt]
            commands.append(" ".join(["codex", *argv[1:]]))
            code, o, e, _s = run_agent(argv, workspace, env)
            _check(code, o, e, f"codex new conversation {run}", script)
        new = list(rec.records)
    write(out / "codex-new.jsonl.xz", _header("codex", version, commands, workspace, home), new)


def _header(agent: str, version: str, commands: list[str], workspace: Path,
            home: Path) -> dict[str, Any]:
    return {"fixture": "toolrules recorded agent session", "format": 1, "agent": agent,
            "package": version, "recorded": time.strftime("%Y-%m-%d"),
            "upstream": f"toolrules serve --upstream openai-compatible:{MODEL} (scripted "
                        "model: raw Qwen3-Coder XML calls, then a final answer)",
            "workspace": str(workspace), "home": str(home), "commands": commands,
            "scrubbed": "request headers other than " + ", ".join(KEEP_HEADERS) +
                        "; bodies are as the agent sent them"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agent", choices=("claude", "codex", "all"), default="all")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--root", type=Path, default=Path("/tmp/toolrules-sessions"),
                    help="where the agents' workspace and home are made (fixed, so the "
                         "recorded prompts name the same paths everywhere)")
    args = ap.parse_args()
    if args.agent in ("claude", "all"):
        record_claude(args.root, args.out)
    if args.agent in ("codex", "all"):
        record_codex(args.root, args.out)


if __name__ == "__main__":
    main()
