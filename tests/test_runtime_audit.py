"""The audit log: one line per execute (run, failed, refused), sanitized arguments,
daily files, and lines that never interleave across processes."""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import os
from pathlib import Path

import pytest

import toolrules
from runtime_helpers import make_tree
from toolrules import ToolCall, ToolExecutor
from toolrules.runtime import AuditLog, policy_rules, sanitize_arguments


def _lines(audit: Path) -> list[dict]:
    out = []
    for f in sorted(audit.glob("tools-*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines()]
    return out


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return make_tree(tmp_path)[0]


def test_one_line_per_execute_whatever_the_outcome(ws, tmp_path):
    audit = tmp_path / "audit"
    ex = ToolExecutor(toolrules.builtin_tools(ws), workspace=ws, trust="workspace",
                      audit_dir=audit)
    calls = [
        ToolCall("1", "read_file", {"path": "README.md"}),               # ok
        ToolCall("2", "read_file", {"path": "missing.txt"}),             # failed
        ToolCall("3", "read_file", {"path": ".env"}),                    # refused
        ToolCall("4", "run_command", {"command": "ls"}),                 # refused (trust)
        ToolCall("5", "nope", {}),                                       # refused (unknown)
        {"id": "6", "function": {"name": "read_file", "arguments": "{"}},  # refused (JSON)
    ]
    for c in calls:
        ex.execute_sync(c)
    ex.execute_many_sync([ToolCall("7", "list_files", {}), ToolCall("7", "list_files", {})])
    lines = _lines(audit)
    assert len(lines) == 8
    # a duplicate id is refused when the turn is taken in, before the batch runs
    assert [line["outcome"] for line in lines] == ["ok", "failed", "refused", "refused",
                                                   "refused", "refused", "refused", "ok"]
    assert [line["error"] for line in lines] == [None, "NOT_FOUND", "PERMISSION_DENIED",
                                                 "TRUST_TOO_LOW", "UNKNOWN_TOOL",
                                                 "INVALID_ARGUMENTS", "DUPLICATE_CALL_ID", None]
    first = lines[0]
    assert first["tool"] == "read_file" and first["call_id"] == "1"
    assert first["arguments"] == {"path": "README.md"}
    assert first["trust"] == "workspace" and first["origin"] == "model"
    assert isinstance(first["duration_ms"], float)
    assert first["timestamp"].endswith("Z")
    assert lines[2]["rule"] == "paths.blocked: .env"
    assert lines[5]["arguments"]["_unparsed"]["bytes"] == 1
    today = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    assert (audit / f"tools-{today}.jsonl").exists()


def test_dry_runs_are_audited_too(ws, tmp_path):
    audit = tmp_path / "audit"
    ex = ToolExecutor(toolrules.builtin_tools(ws), workspace=ws, audit_dir=audit, dry_run=True)
    ex.execute_sync(ToolCall("1", "write_file", {"path": "a.txt", "content": "x"}))
    assert [line["outcome"] for line in _lines(audit)] == ["dry_run"]


def test_file_contents_never_reach_the_log(ws, tmp_path):
    audit = tmp_path / "audit"
    ex = ToolExecutor(toolrules.builtin_tools(ws), workspace=ws, audit_dir=audit)
    secret_text = "the body of the file, which must not be logged"
    ex.execute_sync(ToolCall("1", "write_file", {"path": "a.txt", "content": secret_text}))
    ex.execute_sync(ToolCall("2", "edit_file", {"path": "a.txt", "old_string": "body",
                                               "new_string": "BODY-NEW"}))
    raw = "".join(f.read_text() for f in audit.glob("*.jsonl"))
    assert "the body of the file" not in raw and "BODY-NEW" not in raw
    lines = _lines(audit)
    assert lines[0]["arguments"]["content"]["bytes"] == len(secret_text)
    assert len(lines[0]["arguments"]["content"]["sha256"]) == 64
    assert lines[0]["bytes_written"] == len(secret_text)
    assert set(lines[1]["arguments"]["old_string"]) == {"bytes", "sha256"}


def test_secrets_are_redacted():
    pol = policy_rules("default")
    out = sanitize_arguments({
        "api_key": "abc", "headers": {"Authorization": "Bearer xyz", "accept": "json"},
        "command": "curl -H 'x: sk-abcdefghijklmnopqrstuv' https://x",
        "note": "token ghp_abcdefghijklmnopqrstuvwxyz here", "n": 3}, pol)
    assert out["api_key"] == "[REDACTED]"
    assert out["headers"] == {"Authorization": "[REDACTED]", "accept": "json"}
    assert "sk-abc" not in out["command"] and "[REDACTED]" in out["command"]
    assert "ghp_" not in out["note"]
    assert out["n"] == 3


def _writer(directory: str, worker: int, count: int) -> None:
    log = AuditLog(directory, policy_rules("default"))
    for i in range(count):
        log.write({"tool": "t", "worker": worker, "i": i, "pad": "x" * (2000 + worker * 7)})


def test_concurrent_processes_never_interleave(tmp_path):
    ctx = multiprocessing.get_context("spawn" if os.name != "posix" else "fork")
    workers = [ctx.Process(target=_writer, args=(str(tmp_path), w, 300)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(60)
        assert p.exitcode == 0
    lines = _lines(tmp_path)
    assert len(lines) == 1200  # every line parses: nothing torn or interleaved
    for w in range(4):
        mine = [line["i"] for line in lines if line["worker"] == w]
        assert mine == list(range(300))
