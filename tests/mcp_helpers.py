"""Shared pieces of the MCP tests: overlay rule directories that declare servers (the
pinned npm reference servers, the misbehaving fake server) and scripted model turns.
(`no_orphans`, the check that a test leaves no server running, is in conftest.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("mcp", reason="the MCP tests need the `mcp` extra")

import toolrules
from npm_packages import npm_bin
from toolrules import ToolExecutor, ToolRegistry

HERE = Path(__file__).resolve().parent
FAKE = HERE / "mcp_fake_server.py"
QWEN = "Qwen/Qwen3-8B"  # writes hermes-style <tool_call> blocks


def load_engine(rules: Path) -> toolrules.Engine:
    """The bundled rules plus the overlay `rules` (no environment, no cache)."""
    return toolrules.load(paths=[rules], use_env=False, cache=False)


def workspace(tmp_path: Path, *, files: bool = True) -> Path:
    """tmp_path/ws; with `files`, a notes.txt and a .env holding a secret."""
    root = tmp_path / "ws"
    root.mkdir()
    if files:
        (root / "notes.txt").write_text("alpha\nbeta\n")
        (root / ".env").write_text("API_KEY=sk-secret-value-1234567890\n")
    return root


def mcp_executor(engine: Any, ws: Path, server: str, **kw: Any
                 ) -> tuple[ToolRegistry, ToolExecutor]:
    """A registry offering declared MCP server `server`, and an executor over it."""
    registry = ToolRegistry(engine=engine, workspace=ws)
    registry.add_mcp(server)
    return registry, ToolExecutor(registry, workspace=ws, engine=engine, **kw)


def hermes(name: str, **arguments: Any) -> str:
    """A Qwen3 turn that calls one tool."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + \
        "\n</tool_call>"


def write_rule(rules: Path, name: str, **fields: Any) -> Path:
    """rules/mcp/<name>.yaml in an overlay directory."""
    (rules / "mcp").mkdir(parents=True, exist_ok=True)
    path = rules / "mcp" / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"description": f"{name} (test)", **fields}))
    return path


def npm_rules(rules: Path) -> Path:
    """An overlay that replaces the bundled `everything` and `filesystem` rules (npx) by
    the pinned programs installed for the tests (same ids: the overlay wins)."""
    write_rule(rules, "everything", command=str(npm_bin("mcp-server-everything")),
               args=["stdio"])
    bundled = yaml.safe_load((HERE.parent / "rules" / "mcp" / "filesystem.yaml").read_text())
    write_rule(rules, "filesystem", command=str(npm_bin("mcp-server-filesystem")),
               args=["{workspace}"], cwd="{workspace}", tools=bundled["tools"])
    return rules


def fake_rule(rules: Path, name: str, mode: str, **fields: Any) -> Path:
    return write_rule(rules, name, command=sys.executable, args=[str(FAKE), mode], **fields)
