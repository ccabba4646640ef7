"""Real programs from npm for the tests: coding agents, MCP servers, the MCP Inspector.

Each package is pinned here, installed once into one prefix and reused:
`$TOOLRULES_NPM_DIR` (`.ci/run` sets it and installs everything up front), else
`~/.cache/toolrules/npm`. A test asks `npm_bin("codex")` for a program's path; without
npm on the machine it is skipped with that reason, and a failed install fails the test
(it names the package and npm's message) instead of skipping silently.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["PINNED", "npm_bin", "npm_dir"]

# program -> (package@version, the bin name inside node_modules/.bin)
PINNED: dict[str, tuple[str, str]] = {
    "claude": ("@anthropic-ai/claude-code@2.1.332", "claude"),
    "codex": ("@openai/codex@0.169.0", "codex"),
    "opencode": ("opencode-ai@1.18.33", "opencode"),
    "qwen": ("@qwen-code/qwen-code@0.24.4", "qwen"),
    "gemini": ("@google/gemini-cli@0.61.0", "gemini"),
    "mcp-server-everything": ("@modelcontextprotocol/server-everything@2026.8.31",
                              "mcp-server-everything"),
    "mcp-server-filesystem": ("@modelcontextprotocol/server-filesystem@2026.8.31",
                              "mcp-server-filesystem"),
    "mcp-inspector": ("@modelcontextprotocol/inspector@2.12.0", "mcp-inspector"),
    # `toolrules bench serve` compares the proxy with it (found in this prefix)
    "ccr": ("@musistudio/claude-code-router@2.0.0", "ccr"),
}


def npm_dir() -> Path:
    env = os.environ.get("TOOLRULES_NPM_DIR")
    return Path(env) if env else Path.home() / ".cache" / "toolrules" / "npm"


def npm_bin(program: str) -> Path:
    """The path of a pinned npm program, installing its package on first use."""
    spec, bin_name = PINNED[program]
    prefix = npm_dir()
    path = prefix / "node_modules" / ".bin" / bin_name
    if path.exists() and _installed_version(prefix, spec):
        return path
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm is not on this machine: {spec} cannot be installed")
    prefix.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                           "--loglevel=error", spec], capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0 or not path.exists():
        pytest.fail(f"npm install {spec} failed (exit {proc.returncode}): "
                    f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return path


def _installed_version(prefix: Path, spec: str) -> bool:
    """The installed package is the pinned version."""
    name, _, version = spec.rpartition("@")
    manifest = prefix / "node_modules" / name / "package.json"
    try:
        return json.loads(manifest.read_text(encoding="utf-8")).get("version") == version
    except (OSError, ValueError):
        return False
