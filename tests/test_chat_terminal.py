"""`toolrules chat` as a person uses it: in a pseudo-terminal (pexpect), typing at the
prompt_toolkit prompt, reading what appears on screen (ANSI stripped), against scripted
models that answer in their real formats (Hermes `<tool_call>` text for Qwen3, Llama 3
JSON for an emulated model). Every wait is bounded; a stuck session is killed."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pexpect
import pytest

from chat_helpers import LLAMA, LLAMA_TURNS, QWEN, QWEN_TURNS, hermes, make_workspace, write_script

TIMEOUT = 30  # seconds per expected line: generous for a loaded 2-core machine
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-B]|"
                  r"\x1b[=>78]")
PROMPT = "you> "


def plain(text: str) -> str:
    return ANSI.sub("", text).replace("\r", "")


class Terminal:
    """One chat in a pty: `type` a line, `wait` for text on screen (ANSI stripped)."""

    def __init__(self, args: list[str], cwd: Path, history: Path):
        env = {**os.environ, "TERM": "xterm-256color", "PROMPT_TOOLKIT_NO_CPR": "1",
               "XDG_CACHE_HOME": str(cwd / "cache"), "COLUMNS": "120", "LINES": "40",
               "TOOLRULES_CACHE": "0"}
        env.pop("NO_COLOR", None)
        self.child = pexpect.spawn(
            sys.executable, ["-c", "from toolrules.cli import main; main()", "chat",
                             "--history", str(history), *args],
            cwd=str(cwd), env=env, dimensions=(40, 120), encoding="utf-8",
            timeout=TIMEOUT)
        self.raw = ""   # everything the terminal received
        self.seen = 0   # how much of the screen text the test has looked at

    def _pump(self) -> None:
        self.raw += self.child.before + (self.child.after if isinstance(self.child.after, str)
                                         else "")

    def wait(self, text: str) -> str:
        """Wait until `text` is on screen after what was already seen; the screen up to it."""
        while True:
            screen = plain(self.raw)
            at = screen.find(text, self.seen)
            if at >= 0:
                start, self.seen = self.seen, at + len(text)
                return screen[start:self.seen]
            try:
                self.child.expect(r".+", timeout=TIMEOUT)
            except pexpect.TIMEOUT:
                raise AssertionError(f"{text!r} did not appear; the screen ends with:\n"
                                     f"{screen[-1500:]}") from None
            except pexpect.EOF:
                raise AssertionError(f"the chat ended before {text!r}; its screen:\n"
                                     f"{screen[-1500:]}") from None
            self._pump()

    def type(self, line: str) -> None:
        self.wait(PROMPT)
        self.child.send(line + "\r")

    def exit_status(self) -> int | None:
        self.child.expect(pexpect.EOF, timeout=TIMEOUT)
        self._pump()
        self.child.close()
        return self.child.exitstatus

    def close(self) -> None:
        if self.child.isalive():
            self.child.close(force=True)


@pytest.fixture
def setup(tmp_path):
    ws = make_workspace(tmp_path)
    write_script(tmp_path / "qwen.yaml", QWEN, QWEN_TURNS)
    write_script(tmp_path / "llama.yaml", LLAMA, LLAMA_TURNS)
    terminals: list[Terminal] = []

    def start(*args: str) -> Terminal:
        term = Terminal(["--workspace", str(ws), *args], tmp_path, tmp_path / "history")
        terminals.append(term)
        return term

    yield start, ws, tmp_path
    for term in terminals:
        term.close()


def test_a_message_shows_the_call_its_result_and_the_answer(setup):
    start, _, _ = setup
    term = start("--model", "scripted:qwen.yaml", "--trust", "workspace")
    term.wait("native tools, dialect hermes")
    term.type("Read config.yaml and tell me what it sets")
    screen = term.wait("The config turns debug on for the api service.")
    lines = [line.strip() for line in screen.splitlines()]
    assert "The user wants the config." in lines                 # reasoning
    assert "I'll read the config first." in lines
    call = lines.index('[Tool Call] read_file(path="config.yaml")')
    assert lines[call + 1] == "[Result] ✓ Read 3 lines"
    # reasoning streams dimmed (SGR 2), the call and result labels are styled
    dimmed = "".join(re.findall(r"\x1b\[2(?:;3)?m([^\x1b]*)", term.raw))
    assert "The user wants the config." in dimmed and "read the config" not in dimmed
    assert re.search(r"\x1b\[[0-9;]+m\[Tool Call\] ", term.raw)
    assert re.search(r"\x1b\[32m✓ Read 3 lines", term.raw)
    term.type("::exit")
    assert term.exit_status() == 0


def test_tools_trust_and_a_refused_write(setup):
    start, ws, _ = setup
    term = start("--model", "scripted:qwen.yaml", "--trust", "workspace")
    term.type("::tools")
    screen = term.wait("run_command")
    for name in ("read_file", "write_file", "edit_file", "list_files", "search_files"):
        assert re.search(rf"✓ {name}\b", screen), screen
    assert "tools (5 of 6 offered at trust workspace)" in screen
    term.wait("(needs trust shell)")
    term.type("Read config.yaml")
    term.wait("The config turns debug on")
    term.type("::trust read_only")
    term.wait("trust workspace -> read_only; offered now: read_file, list_files, search_files")
    term.type("Write what you found to notes.txt")
    screen = term.wait("I could not write notes.txt")
    assert '[Tool Call] write_file(path="notes.txt", content="debug is on")' in screen
    assert "[Result] ✗ TRUST_TOO_LOW: write_file needs trust level 'workspace'; this " \
           "session has 'read_only'" in screen
    assert not (ws / "notes.txt").exists()
    term.type("::trust")
    term.wait("trust read_only (levels: discovery, read_only, workspace, shell, full)")
    term.type("::trust root")
    term.wait("error: unknown trust level 'root'")
    term.type("::exit")
    assert term.exit_status() == 0


def test_switching_models_prints_what_changed(setup):
    start, _, _ = setup
    term = start("--model", "scripted:qwen.yaml")
    term.type("Read config.yaml")
    term.wait("The config turns debug on")
    term.type("::model scripted:llama.yaml")
    screen = term.wait("continues with the new model")
    assert "switched to llama3:8b (llama 3) from Qwen/Qwen3-8B" in screen
    rows = {" ".join(line.split()) for line in screen.splitlines()}
    assert "tool calling native -> emulated (json prompt)" in rows
    assert "dialect hermes -> llama3-json" in rows
    assert "parallel tools yes -> no" in rows
    assert "context window 128,000 tokens -> 8,192 tokens" in rows
    assert "the conversation (4 messages) continues with the new model" in rows
    term.type("What is in the workspace?")
    screen = term.wait("The workspace holds config.yaml.")
    assert '[Tool Call] list_files(path=".")' in screen
    term.type("::model")
    screen = term.wait("tool streaming")
    assert re.search(r"model\s+llama3:8b", screen) and re.search(r"dialect\s+llama3-json", screen)
    term.type("::model nonsense")
    term.wait("error: model spec 'nonsense' is not PROVIDER:MODEL")
    term.wait("the session keeps llama3:8b")
    term.type("::exit")
    assert term.exit_status() == 0


def test_save_history_clear_unknown_commands_and_highlighting(setup):
    start, _, tmp = setup
    term = start("--model", "scripted:qwen.yaml")
    term.type("Read config.yaml")
    term.wait("The config turns debug on")
    term.type("::save chat.json")
    term.wait("saved 4 messages to chat.json")
    saved = json.loads((tmp / "chat.json").read_text())
    assert [m["role"] for m in saved] == ["user", "assistant", "tool", "assistant"]
    assert saved[1]["tool_calls"][0]["arguments"] == {"path": "config.yaml"}
    term.type("::history")
    screen = term.wait("The config turns debug on for the api service.")
    assert "1 you       Read config.yaml" in screen
    assert "tool      read_file: service: api debug: true port: 8080" in screen
    term.type("::foo")
    screen = term.wait("anything else is a message to the model")
    assert "unknown command ::foo" in screen
    assert "::save PATH" in screen and "::model [SPEC]" in screen
    term.type("::clear")
    term.wait("conversation cleared")
    term.type("::history")
    term.wait("(no messages yet)")
    term.type("::exit")
    assert term.exit_status() == 0
    # typed commands were coloured by the prompt: known ones cyan, unknown ones red
    assert re.search(r"\x1b\[[0-9;]*36[0-9;]*m::save", term.raw)
    assert re.search(r"\x1b\[[0-9;]*31[0-9;]*m::foo", term.raw)
    # and the input history went to the history file
    assert "::save chat.json" in (tmp / "history").read_text()


def test_ctrl_d_and_ctrl_c_at_the_prompt(setup):
    start, _, _ = setup
    term = start("--model", "scripted:qwen.yaml")
    term.wait(PROMPT)
    term.child.send("half a line")
    term.child.sendintr()                  # Ctrl-C drops the line, the chat goes on
    term.type("::trust")
    term.wait("trust workspace")
    term.wait(PROMPT)
    term.child.sendeof()                   # Ctrl-D leaves
    assert term.exit_status() == 0
    assert "[Tool Call]" not in plain(term.raw)  # the dropped line never reached the model


SLOW_TOOLS = '''
import asyncio
import toolrules

registry = toolrules.ToolRegistry()


@registry.tool(kind="read")
async def slow_lookup(key: str) -> str:
    """Look a key up (slowly)."""
    await asyncio.sleep(60)
    return key
'''


def test_ctrl_c_interrupts_a_running_turn(setup):
    start, _, tmp = setup
    (tmp / "slow.py").write_text(SLOW_TOOLS)
    write_script(tmp / "slow.yaml", QWEN, [hermes("slow_lookup", key="a"), "never"])
    term = start("--model", "scripted:slow.yaml", "--tools", "slow.py")
    term.type("look up a")
    term.wait('[Tool Call] slow_lookup(key="a")')
    term.child.sendintr()
    term.wait("[interrupted] this turn is not kept in the conversation")
    term.type("::history")
    term.wait("(no messages yet)")
    term.type("::exit")
    assert term.exit_status() == 0


def test_dry_run_and_no_stream_in_a_terminal(setup):
    start, ws, tmp = setup
    write_script(tmp / "write.yaml", QWEN, QWEN_TURNS[2:])
    term = start("--model", "scripted:write.yaml", "--dry-run", "--no-stream")
    term.wait("dry run: calls are shown, not run")
    term.type("Write notes.txt")
    screen = term.wait("I could not write notes.txt")
    assert '[Tool Call] write_file(path="notes.txt", content="debug is on")' in screen
    assert "[Result] ✓ dry run: would run write_file" in screen
    assert not (ws / "notes.txt").exists()
    term.type("::exit")
    assert term.exit_status() == 0
