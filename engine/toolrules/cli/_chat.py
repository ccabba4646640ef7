"""CLI: `toolrules chat`, an interactive chat with tools on the tool loop: text as it
streams, each tool call and its result as one line, `::` commands.

The session logic is runtime/_session.py; this module only reads lines (prompt_toolkit on
a terminal: history, `::` commands coloured as typed; plain lines otherwise, so a chat can
be piped) and prints (rich). Both come with the `chat` extra and are imported lazily.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ._common import fail, get_engine, guard, jail_options
from ._loop import format_call, summarize_result
from ._mcp import add_servers, mcp_options

__all__ = ["COMMANDS"]

_STYLES = {"command": "bold ansicyan", "unknown": "bold ansired", "args": "ansiyellow",
           "prompt": "bold ansigreen"}
_SPEC_HINT = ("a model is scripted:FILE.yaml, PROVIDER:MODEL (e.g. "
              "openai-compatible:qwen3:8b --base-url http://127.0.0.1:8080/v1) or local")


def _need_chat_extra() -> None:
    try:
        import prompt_toolkit  # noqa: F401
        import rich  # noqa: F401
    except ImportError:
        fail("toolrules chat needs prompt_toolkit and rich",
             "pip install 'toolrules[chat]'")


# ---------------------------------------------------------------- reading lines

class _PlainInput:
    """Lines from a pipe or file: `toolrules chat < script.txt`."""

    def __init__(self, screen: _Screen):
        self.screen = screen

    async def read(self) -> str:
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        self.screen.echo_input(line.rstrip("\n"))
        return line


class _TerminalInput:
    """prompt_toolkit: line editing, history in a file, `::` commands coloured as typed,
    Tab completes command names."""

    def __init__(self, history_path: Path | None):
        from prompt_toolkit import PromptSession
        from prompt_toolkit.completion import WordCompleter
        from prompt_toolkit.history import FileHistory, History, InMemoryHistory
        from prompt_toolkit.lexers import Lexer
        from prompt_toolkit.styles import Style

        from ..runtime._session import COMMANDS as CHAT_COMMANDS
        from ..runtime._session import command_spans

        class CommandLexer(Lexer):
            def lex_document(self, document: Any) -> Callable[[int], Any]:
                lines = document.lines

                def line(n: int) -> list[tuple[str, str]]:
                    if n >= len(lines):
                        return []
                    return [("" if kind == "text" else f"class:{kind}", text)
                            for kind, text in command_spans(lines[n])]
                return line

        history: History = InMemoryHistory()
        if history_path is not None:
            try:
                history_path.parent.mkdir(parents=True, exist_ok=True)
                history_path.touch(exist_ok=True)
                history = FileHistory(str(history_path))
            except OSError:
                pass  # a read-only home: history for this session only
        words = [f"::{c.name}" for c in CHAT_COMMANDS]
        self.session: Any = PromptSession(
            history=history, lexer=CommandLexer(), style=Style.from_dict(_STYLES),
            completer=WordCompleter(words, sentence=True), complete_while_typing=False)

    async def read(self) -> str:
        while True:
            try:
                return str(await self.session.prompt_async([("class:prompt", "you> ")]))
            except KeyboardInterrupt:
                continue  # Ctrl-C at the prompt drops the line, like a shell


# ---------------------------------------------------------------- printing

class _Screen:
    """Everything the chat prints goes through here (rich; plain text when not a tty)."""

    def __init__(self, show_reasoning: bool):
        from rich.console import Console

        self.console = Console(highlight=False, soft_wrap=True, emoji=False, markup=False)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False,
                           markup=False)
        self.show_reasoning = show_reasoning
        self.at_line_start = True
        self.in_reasoning = False

    def _text(self, *parts: tuple[str, str] | str) -> Any:
        from rich.text import Text

        return Text.assemble(*parts)

    def newline(self) -> None:
        if not self.at_line_start:
            self.console.print()
            self.at_line_start = True
        self.in_reasoning = False

    def line(self, *parts: tuple[str, str] | str) -> None:
        self.newline()
        self.console.print(self._text(*parts))

    def error(self, message: str, hint: str | None = None) -> None:
        self.newline()
        self.console.print(self._text(("error: ", "bold red"), message))
        if hint:
            self.console.print(self._text(("hint: ", "yellow"), hint))

    def echo_input(self, line: str) -> None:
        self.console.print(self._text(("you> ", "bold green"), line))

    def stream(self, text: str, style: str = "") -> None:
        self.console.print(self._text((text, style)), end="")
        self.at_line_start = text.endswith("\n")

    # ------------------------------------------------------------ loop events

    def event(self, event: Any, executor: Any) -> None:
        kind = event.type.value
        if kind == "reasoning" and event.content and self.show_reasoning:
            if not self.in_reasoning:
                self.newline()
                self.in_reasoning = True
            self.stream(event.content, "dim italic")
        elif kind == "text" and event.content:
            if self.in_reasoning:
                self.newline()
            text = event.content.lstrip("\n") if self.at_line_start else event.content
            if text:
                self.stream(text)
        elif kind == "tool_call":
            self.line(("[Tool Call] ", "bold magenta"), format_call(event.call))
        elif kind == "tool_result":
            entry = executor.registry.get(event.call.name)
            summary = summarize_result(event.result, getattr(entry, "kind", None))
            if event.executed is False:
                summary += " (not run)"
            self.line(("[Result] ", "bold magenta"),
                      (summary, "green" if event.result.ok else "red"))
        elif kind == "notice":
            text = " ".join((event.content or "").split())
            self.line((f"[Loop] {event.notice}: ", "yellow"), (text[:300], "yellow"))
        elif kind == "done":
            self.newline()
            o = event.outcome
            if not o.ok:
                self.line((f"[Stopped] {o.stopped}", "bold yellow"),
                          (f": {o.error}" if o.error else "", "yellow"))
            elif o.tool_calls:
                self.line((f"({o.rounds} model turns, {o.tool_calls} tool call"
                           f"{'' if o.tool_calls == 1 else 's'})", "dim"))


# ---------------------------------------------------------------- the application

class _Chat:
    def __init__(self, session: Any, screen: _Screen, reader: Any, debug: bool):
        self.session = session
        self.screen = screen
        self.reader = reader
        self.debug = debug
        self.handlers: dict[str, Callable[[str], bool]] = {
            "help": self.cmd_help, "tools": self.cmd_tools, "trust": self.cmd_trust,
            "model": self.cmd_model, "save": self.cmd_save, "history": self.cmd_history,
            "mcp": self.cmd_mcp,
            "clear": self.cmd_clear, "exit": self.cmd_exit}

    # ------------------------------------------------------------ the main loop

    def banner(self) -> None:
        s, info = self.session, self.session.info
        cap = info.capability
        extras = [f"dialect {cap.dialect}" if cap.dialect else "no raw-text dialect"]
        if cap.parallel_tools:
            extras.append("parallel tools")
        self.screen.line(("toolrules chat", "bold"), f" - {info.model_id} ({info.spec}): "
                         f"{info.tool_calling} tools, {', '.join(extras)}")
        ex = s.executor
        offered = len(ex.visible_tools())
        where = str(ex.workspace) if ex.workspace is not None else "(none)"
        self.screen.line((f"workspace {where} · trust {ex.trust} · {offered} tool"
                          f"{'' if offered == 1 else 's'} offered" +
                          (" · dry run: calls are shown, not run" if ex.dry_run else "") +
                          " · ::help for commands, ::exit or Ctrl-D to leave", "dim"))
        for note in info.notes():
            self.screen.line(("note: ", "yellow"), note)

    async def run(self) -> int:
        self.banner()
        while True:
            try:
                line = await self.reader.read()
            except EOFError:
                self.screen.newline()
                return 0
            parsed = _parse(line)
            if parsed.command is not None:
                handler = self.handlers.get(parsed.command)
                if handler is None:
                    self.screen.line(("unknown command ", "red"),
                                     (f"::{parsed.command}" if parsed.command else "::", "bold"))
                    self.cmd_help("")
                    continue
                if handler(parsed.args):  # True: leave
                    return 0
                continue
            if parsed.raw:
                await self.talk(parsed.raw)

    async def talk(self, text: str) -> None:
        """One user turn; Ctrl-C stops it (the conversation stays as before the turn)."""
        task = asyncio.ensure_future(self._turn(text))
        loop = asyncio.get_running_loop()
        installed = False
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGINT, task.cancel)
            installed = True
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            self.screen.newline()
            self.screen.line(("[interrupted] ", "bold yellow"),
                             "this turn is not kept in the conversation")
        finally:
            if installed:
                loop.remove_signal_handler(signal.SIGINT)

    async def _turn(self, text: str) -> None:
        from .._errors import ToolrulesError

        ex = self.session.executor
        try:
            async for event in self.session.turn(text):
                self.screen.event(event, ex)
        except ToolrulesError as exc:
            self.screen.error(_one_line(exc), "the turn is not kept; the conversation "
                              "is as it was before it")
        except (OSError, ValueError, TypeError, RuntimeError) as exc:
            if self.debug:
                import traceback

                traceback.print_exc()
            self.screen.error(f"{type(exc).__name__}: {_one_line(exc)}",
                              None if self.debug else "run with --debug for the traceback")
        self.screen.newline()

    # ------------------------------------------------------------ commands

    def cmd_help(self, args: str) -> bool:
        from ..runtime._session import COMMANDS as CHAT_COMMANDS

        self.screen.line(("commands", "bold"))
        width = max(len(c.usage) for c in CHAT_COMMANDS)
        for c in CHAT_COMMANDS:
            self.screen.line("  ", (c.usage.ljust(width), "bold cyan"), f"  {c.help}")
        self.screen.line(("anything else is a message to the model", "dim"))
        return False

    def cmd_tools(self, args: str) -> bool:
        rows = self.session.tool_rows()
        ex = self.session.executor
        offered = sum(r.offered for r in rows)
        self.screen.line((f"tools ({offered} of {len(rows)} offered at trust {ex.trust}"
                          + (", dry run" if ex.dry_run else "") + ")", "bold"))
        if not rows:
            self.screen.line(("  (none: started with --tools none)", "dim"))
        width = max((len(r.name) for r in rows), default=0)
        for r in rows:
            mark, style = ("✓", "green") if r.offered else ("✗", "red")
            detail = r.description[:70] if r.offered else f"({r.why_not})"
            self.screen.line("  ", (mark, style), " ", (r.name.ljust(width), "bold"),
                             f"  {r.level:<10} {r.kind:<5}  ", (detail, "" if r.offered
                                                                  else "dim"))
        return False

    def cmd_trust(self, args: str) -> bool:
        ex = self.session.executor
        if not args:
            self.screen.line("trust ", (ex.trust, "bold"),
                             f" (levels: {', '.join(ex.policy.levels)})")
            return False
        try:
            change = self.session.set_trust(args.split()[0])
        except ValueError as exc:
            self.screen.error(str(exc))
            return False
        self.screen.line("trust ", (change.old, "bold"), " -> ", (change.new, "bold"),
                         f"; offered now: {', '.join(change.offered) or '(no tools)'}")
        return False

    def cmd_model(self, args: str) -> bool:
        from ..runtime._session import ModelSpecError

        if not args:
            info = self.session.info
            width = max(len(label) for label, _ in info.rows())
            for label, value in info.rows():
                self.screen.line(f"  {label.ljust(width)}  ", (value, "bold"))
            for note in info.notes():
                self.screen.line(("note: ", "yellow"), note)
            return False
        try:
            switch = self.session.switch_model(args)
        except ModelSpecError as exc:
            self.screen.error(_one_line(exc), _SPEC_HINT + "; the session keeps "
                              f"{self.session.info.model_id}")
            return False
        old, new = switch.old, switch.new
        self.screen.line("switched to ", (new.model_id, "bold"), f" ({new.family})",
                         " from ", (old.model_id, "bold"))
        if not switch.changes:
            self.screen.line(("  capabilities unchanged", "dim"))
        width = max((len(c.label) for c in switch.changes), default=0)
        for c in switch.changes:
            self.screen.line(f"  {c.label.ljust(width)}  ", (c.old, "dim"), " -> ",
                             (c.new, "bold"))
        for note in new.notes():
            self.screen.line(("note: ", "yellow"), note)
        n = len(self.session.messages)
        if n:
            self.screen.line((f"the conversation ({n} message{'' if n == 1 else 's'}) "
                              "continues with the new model", "dim"))
        return False

    def cmd_mcp(self, args: str) -> bool:
        from .._errors import McpError, UnknownRuleError

        words = args.split()
        if not words:
            rows = self.session.mcp_rows()
            if not rows:
                self.screen.line(("no MCP servers declared (rules/mcp/NAME.yaml)", "dim"))
            width = max((len(r.name) for r in rows), default=0)
            for r in rows:
                mark, style = ("✓", "green") if r.added else ("·", "dim")
                what = f"{r.state}, {r.tools} tools" if r.added else "not added"
                self.screen.line("  ", (mark, style), " ", (r.name.ljust(width), "bold"),
                                 f"  {what:<22} ", (r.launch[:70], "dim"))
            self.screen.line(("::mcp add NAME starts a server and offers its tools; "
                              "::mcp remove NAME stops it", "dim"))
            return False
        if len(words) != 2 or words[0] not in ("add", "remove"):
            self.screen.error(f"::mcp {args}: not understood", "::mcp, ::mcp add NAME or "
                              "::mcp remove NAME")
            return False
        verb, name = words
        if verb == "add":
            try:
                names = self.session.add_mcp(name)
            except (McpError, UnknownRuleError, ValueError) as exc:
                self.screen.error(_one_line(exc))
                return False
            self.screen.line(("✓ ", "green"), f"MCP server {name}: {len(names)} tools offered "
                             f"from the next turn ({', '.join(names[:8])}"
                             f"{' ...' if len(names) > 8 else ''})")
            return False
        try:
            self.session.remove_mcp(name)
        except KeyError as exc:
            self.screen.error(_one_line(exc))
            return False
        self.screen.line(("✓ ", "green"), f"MCP server {name} stopped; its tools are gone")
        return False

    def cmd_save(self, args: str) -> bool:
        if not args:
            self.screen.error("::save needs a path", "::save chat.json")
            return False
        try:
            path, size = self.session.save(args)
        except OSError as exc:
            self.screen.error(f"cannot write {args!r}: {exc.strerror or exc}")
            return False
        n = len(self.session.messages)
        self.screen.line(("✓ ", "green"), f"saved {n} message{'' if n == 1 else 's'} to "
                         f"{path} ({size:,} bytes)")
        return False

    def cmd_history(self, args: str) -> bool:
        msgs = self.session.messages
        if not msgs:
            self.screen.line(("(no messages yet)", "dim"))
        for i, m in enumerate(msgs, 1):
            who = {"user": "you"}.get(m.role, m.role)
            parts: list[str] = []
            if m.content:
                parts.append(" ".join(str(m.content).split()))
            for c in m.tool_calls:
                parts.append(f"[Tool Call] {format_call(c)}")
            text = " ".join(parts)
            if m.role == "tool":
                text = f"{m.name}: {text}"
            if len(text) > 160:
                text = text[:157] + "..."
            self.screen.line((f"{i:>3} {who:<10}", "bold"), (text, "red" if m.is_error else ""))
        return False

    def cmd_clear(self, args: str) -> bool:
        self.session.clear()
        self.screen.line(("conversation cleared", "dim"))
        return False

    def cmd_exit(self, args: str) -> bool:
        return True


def _parse(line: str) -> Any:
    from ..runtime._session import parse_input

    return parse_input(line)


def _one_line(exc: BaseException) -> str:
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return " ".join(text.split()) or type(exc).__name__


def _history_path(option: str | None) -> Path:
    if option:
        return Path(option).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "toolrules" / "chat_history"


# ---------------------------------------------------------------- the command

@click.command()
@click.option("--model", "-m", "spec", required=True,
              help="scripted:FILE.yaml, PROVIDER:MODEL or local.")
@click.option("--base-url", help="Server URL for PROVIDER:MODEL (local servers).")
@click.option("--tools", "tool_sources", multiple=True, metavar="builtin|none|FILE.py",
              help="The tools: builtin (default), none, or a Python file defining "
                   "`registry = toolrules.ToolRegistry()` with @registry.tool functions "
                   "(repeatable: --tools builtin --tools mine.py).")
@click.option("--no-tools", is_flag=True, help="No tools (the same as --tools none).")
@jail_options
@click.option("--dry-run", is_flag=True, help="Show the calls without running them.")
@click.option("--stream/--no-stream", default=True, show_default=True,
              help="Print text as it arrives, or each model turn whole.")
@click.option("--reasoning/--no-reasoning", "show_reasoning", default=True, show_default=True,
              help="Show the model's reasoning (dimmed).")
@click.option("--system", help="A system prompt.")
@click.option("--max-rounds", type=click.IntRange(min=0),
              help="Model turns with tools per message (default rules/loop.yaml).")
@click.option("--history", "history_file", type=click.Path(dir_okay=False),
              help="Input history file (default ~/.cache/toolrules/chat_history).")
@click.option("--debug", is_flag=True, help="Tracebacks for unexpected errors.")
@mcp_options
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(exists=True),
              help="Extra rule directories (overlays).")
@guard
def chat(spec: str, base_url: str | None, tool_sources: tuple[str, ...], no_tools: bool,
         workspace: str, trust: str, policy_id: str, dry_run: bool, stream: bool,
         show_reasoning: bool, system: str | None, max_rounds: int | None,
         history_file: str | None, debug: bool, mcp_names: tuple[str, ...],
         mcp_commands: tuple[str, ...], rule_paths: tuple[str, ...]) -> None:
    """Chat with a model that may call tools: each message runs the tool loop (calls and
    results shown as they happen), the conversation carries over between messages.
    Commands start with :: (::help). On a pipe, reads one message or command per line."""
    from .._errors import UnknownRuleError
    from ..runtime._executor import ToolExecutor
    from ..runtime._session import (
        ChatSession,
        ModelSpecError,
        ToolsFileError,
        build_registry,
        resolve_model,
    )

    _need_chat_extra()
    engine = get_engine(rule_paths)
    if not Path(workspace).is_dir():
        fail(f"workspace {workspace!r} is not a directory", "pass --workspace DIR (it must exist)")
    sources = ("none",) if no_tools else tool_sources
    try:
        registry = build_registry(sources, workspace, engine=engine)
    except ToolsFileError as exc:
        fail(str(exc), "a tools file: registry = toolrules.ToolRegistry(), then @registry.tool "
             "on each function (see docs/guides/chat.md)")
    except ValueError as exc:
        fail(str(exc))
    try:
        executor = ToolExecutor(registry, workspace=workspace, trust=trust, engine=engine,
                                dry_run=dry_run, policy=policy_id)
    except UnknownRuleError as exc:
        fail(_one_line(exc), "list policies with: ls rules/policies (and your overlays)")
    except (ValueError, KeyError) as exc:
        fail(_one_line(exc), "see the trust levels in rules/policies/default.yaml")
    try:
        model = resolve_model(spec, engine=engine, base_url=base_url)
    except ModelSpecError as exc:
        fail(_one_line(exc), _SPEC_HINT, code=2)
    add_servers(registry, mcp_names, mcp_commands, engine)
    session = ChatSession(model, executor, spec=spec, engine=engine, system=system,
                          stream=stream, base_url=base_url, max_rounds=max_rounds)
    screen = _Screen(show_reasoning)
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    reader: Any = _TerminalInput(_history_path(history_file)) if tty else _PlainInput(screen)
    try:
        code = asyncio.run(_Chat(session, screen, reader, debug).run())
    except KeyboardInterrupt:
        screen.newline()
        code = 130
    finally:
        session.close()
    sys.exit(code)


COMMANDS = [chat]
