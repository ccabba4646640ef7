"""Shared fixtures for the runtime tests: a workspace with files, an outside directory
with a secret, executors over the built-in tools."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import toolrules
from toolrules import ToolCall

OUTSIDE_SECRET = "OUTSIDE-SECRET-7f3a"


def make_tree(tmp: Path) -> tuple[Path, Path]:
    """(workspace, outside): a small project plus a directory beside it that no tool may
    reach, holding a secret file, and symlinks from the workspace pointing out."""
    ws = tmp / "ws"
    outside = tmp / "outside"
    (ws / "src").mkdir(parents=True)
    (ws / "docs").mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(OUTSIDE_SECRET)
    (ws / "README.md").write_text("# Project\nTODO: write docs\n")
    (ws / "input.txt").write_text("hello")
    (ws / "src" / "main.py").write_text("def main():\n    return 1  # TODO\n")
    (ws / ".env").write_text("API_KEY=sk-very-secret-value-123456\n")
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / "server.pem").write_text("-----BEGIN KEY-----\n")
    (ws / "secrets").mkdir()
    (ws / "secrets" / "db.txt").write_text("password\n")
    os.symlink(outside / "secret.txt", ws / "link_out.txt")
    os.symlink(outside, ws / "dir_out")
    os.symlink("src/main.py", ws / "link_in.py")
    os.symlink(".env", ws / "link_env")
    return ws, outside


def executor(ws: Path, trust: str = "workspace", **kw: Any) -> toolrules.ToolExecutor:
    return toolrules.ToolExecutor(toolrules.builtin_tools(ws), workspace=ws, trust=trust, **kw)


def run(ex: toolrules.ToolExecutor, name: str, call_id: str = "c1", **args: Any
        ) -> toolrules.ToolResult:
    return ex.execute_sync(ToolCall(call_id, name, args))


def code(result: toolrules.ToolResult) -> str | None:
    if result.tool_error is None:
        return None
    return (result.tool_error.details or {}).get("error")


def rule(result: toolrules.ToolResult) -> str | None:
    if result.tool_error is None:
        return None
    return (result.tool_error.details or {}).get("rule")


def arun(coro: Any) -> Any:
    return asyncio.run(coro)
