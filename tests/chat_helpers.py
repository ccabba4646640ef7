"""Shared by the chat tests: scripted sessions in real model formats and a workspace."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

QWEN = "Qwen/Qwen3-8B"      # native tools, Hermes <tool_call> text
LLAMA = "llama3:8b"         # no native tools: emulated, Llama 3 JSON answers


def hermes(tool: str, /, **args: object) -> str:
    return f'<tool_call>\n{json.dumps({"name": tool, "arguments": args})}\n</tool_call>'


def llama(tool: str, /, **args: object) -> str:
    return json.dumps({"name": tool, "parameters": args})


QWEN_TURNS = [
    "<think>\nThe user wants the config.\n</think>\nI'll read the config first.\n"
    + hermes("read_file", path="config.yaml"),
    "The config turns debug on for the api service.",
    hermes("write_file", path="notes.txt", content="debug is on"),
    "I could not write notes.txt: the trust level is too low.",
]

LLAMA_TURNS = [
    llama("list_files", path="."),
    "The workspace holds config.yaml.",
]


def write_script(path: Path, model: str, turns: list[object]) -> Path:
    path.write_text(yaml.safe_dump({"model": model, "turns": turns}), encoding="utf-8")
    return path


def make_workspace(tmp: Path) -> Path:
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "config.yaml").write_text("service: api\ndebug: true\nport: 8080\n")
    return ws
