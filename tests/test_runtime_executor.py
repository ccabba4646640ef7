"""The executor pipeline (ToolExecutor: the dispatcher and its guardrails):
trust levels, masks, hidden tools, unknown tools, validation, size caps, duplicate ids,
rate limits, confirmation, dry-run, timeouts, parallel batches."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path

import pytest

import toolrules
from runtime_helpers import code, executor, make_tree, rule, run
from toolrules import ToolCall, ToolExecutor, ToolRegistry, ToolResult
from toolrules.runtime import RateLimiter, envelope_of, policy_rules

BUILTINS = ["read_file", "write_file", "edit_file", "list_files", "search_files", "run_command"]
LEVEL_TOOLS = {
    "discovery": {"list_files", "search_files"},
    "read_only": {"list_files", "search_files", "read_file"},
    "workspace": {"list_files", "search_files", "read_file", "write_file", "edit_file"},
    "shell": set(BUILTINS),
    "full": set(BUILTINS),
}
SAMPLE_ARGS = {"read_file": {"path": "README.md"}, "write_file": {"path": "o.txt", "content": "x"},
               "edit_file": {"path": "input.txt", "old_string": "hello", "new_string": "hi"},
               "list_files": {}, "search_files": {"pattern": "TODO"},
               "run_command": {"command": "echo hi"}}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return make_tree(tmp_path)[0]


@pytest.mark.parametrize("trust", list(LEVEL_TOOLS))
def test_trust_levels_offer_and_refuse(ws, trust):
    ex = executor(ws, trust)
    assert {t.name for t in ex.visible_tools()} == LEVEL_TOOLS[trust]
    for name in BUILTINS:
        result = run(ex, name, **SAMPLE_ARGS[name])
        if name in LEVEL_TOOLS[trust]:
            assert result.ok, (name, result.error)
        else:
            assert code(result) == "TRUST_TOO_LOW", name
            assert result.tool_error.code == toolrules.ToolErrorCode.PERMISSION
            assert "trust level" in result.error


def test_unknown_trust_level_is_a_clear_error(ws):
    with pytest.raises(ValueError, match="unknown trust level 'root'"):
        executor(ws, "root")


def test_denied_and_not_allowed_tools_are_refused_and_not_offered(ws):
    ex = executor(ws, "shell", denied=["run_command"], allowed=["read_file", "run_command",
                                                                "write_file"])
    assert {t.name for t in ex.visible_tools()} == {"read_file", "write_file"}
    result = run(ex, "run_command", command="echo hi")
    assert code(result) == "TOOL_NOT_ALLOWED" and rule(result) == "denied"
    result = run(ex, "list_files")
    assert code(result) == "TOOL_NOT_ALLOWED" and rule(result) == "allowed"
    assert "read_file" in result.tool_error.suggested_fix
    assert run(ex, "read_file", path="README.md").ok


def _registry_with_hidden(ws: Path) -> ToolRegistry:
    reg = toolrules.builtin_tools(ws)
    committed: list[dict] = []

    @reg.tool(hidden=True, kind="write")
    def facts_commit(fact: str) -> str:
        """Commit a confirmed fact (the application calls this, never the model)."""
        committed.append({"fact": fact})
        return "committed"

    reg.committed = committed  # type: ignore[attr-defined]
    return reg


def test_hidden_tools_are_never_offered_and_refused_for_the_model(ws):
    reg = _registry_with_hidden(ws)
    ex = ToolExecutor(reg, workspace=ws, trust="full")
    assert "facts_commit" not in [t.name for t in ex.visible_tools()]
    assert "facts_commit" not in [t.name for t in reg.tools()]
    assert "facts_commit" in [t.name for t in reg.tools(include_hidden=True)]
    result = run(ex, "facts_commit", fact="x")
    assert code(result) == "TOOL_NOT_ALLOWED" and rule(result) == "hidden"
    assert reg.committed == []  # type: ignore[attr-defined]
    # the application itself may call it
    result = ex.execute_sync(ToolCall("a", "facts_commit", {"fact": "x"}), origin="app")
    assert result.ok and reg.committed == [{"fact": "x"}]  # type: ignore[attr-defined]


@pytest.mark.parametrize("dialect,text", [
    ("hermes", '<tool_call>{"name": "facts_commit", "arguments": {"fact": "x"}}</tool_call>'),
    ("hermes", '<tool_call>{"name": "run_command", "arguments": {"command": "echo hi"}}'
               '</tool_call>'),
])
def test_calls_written_in_a_dialect_are_judged_after_parsing(ws, engine, dialect, text):
    """Security decisions are made on the internal ToolCall, whatever format it came in."""
    reg = _registry_with_hidden(ws)
    ex = ToolExecutor(reg, workspace=ws, trust="workspace", engine=engine)
    parsed = engine.text_parser(dialect=dialect, tools=reg.tools(include_hidden=True)).parse(text)
    assert len(parsed.tool_calls) == 1
    result = ex.execute_sync(parsed.tool_calls[0])
    assert not result.ok
    assert code(result) in ("TOOL_NOT_ALLOWED", "TRUST_TOO_LOW")
    assert reg.committed == []  # type: ignore[attr-defined]


def test_unknown_tool_lists_available_tools_and_close_matches(ws):
    result = run(executor(ws, "read_only"), "read_fiel", path="x")
    assert code(result) == "UNKNOWN_TOOL"
    assert "Did you mean read_file" in result.error
    assert "Available tools: read_file, list_files, search_files" in result.error
    assert "write_file" not in result.error  # not offered at this level
    assert result.tool_error.details["closest"][0] == "read_file"


def test_missing_required_parameter(ws):
    result = run(executor(ws), "write_file", path="x.txt")
    assert code(result) == "INVALID_ARGUMENTS"
    assert "Missing required parameter: content" in result.error
    assert "Try this instead" in result.tool_error.suggested_fix
    assert not (ws / "x.txt").exists()


def test_invalid_json_arguments(ws):
    ex = executor(ws)
    call = {"id": "c9", "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "README.md",'}}
    result = ex.execute_sync(call)
    assert result.call_id == "c9"
    assert code(result) == "INVALID_ARGUMENTS"
    assert result.tool_error.details["errors"][0]["code"] == "arguments_not_object"


def test_wrong_types(ws):
    result = run(executor(ws), "list_files", path=["src"], recursive="maybe")
    assert code(result) == "INVALID_ARGUMENTS"
    params = {e["parameter"] for e in result.tool_error.details["errors"]}
    assert params == {"path", "recursive"}


def test_safe_coercions_follow_the_policy(ws):
    result = run(executor(ws), "list_files", path="src", recursive="true")
    assert result.ok and "src/main.py" in result.output


def test_unknown_parameter_is_refused(ws):
    result = run(executor(ws), "read_file", path="README.md", mode="rb")
    assert code(result) == "INVALID_ARGUMENTS"


def test_oversized_arguments_are_refused_before_anything_runs(ws):
    big = "x" * 200_001
    result = run(executor(ws), "write_file", path="big.txt", content=big)
    assert code(result) == "ARGUMENTS_TOO_LARGE"
    assert result.tool_error.details["size"] > 200_000
    assert result.tool_error.recoverable
    assert not (ws / "big.txt").exists()
    raw = {"id": "r", "function": {"name": "write_file",
                                   "arguments": json.dumps({"path": "b.txt", "content": big})}}
    assert code(executor(ws).execute_sync(raw)) == "ARGUMENTS_TOO_LARGE"


def test_oversized_output_is_replaced(ws):
    reg = ToolRegistry()

    @reg.tool(kind="read")
    def dump(n: int) -> str:
        """Return n bytes."""
        return "y" * n

    ex = ToolExecutor(reg, trust="workspace")
    assert ex.execute_sync(ToolCall("1", "dump", {"n": 10})).output == "y" * 10
    result = ex.execute_sync(ToolCall("2", "dump", {"n": 200_001}))
    assert code(result) == "TOOL_OUTPUT_TOO_LARGE"
    assert result.output is None
    env = envelope_of(result)
    assert env["ok"] is False and env["errors"][0]["code"] == "TOOL_OUTPUT_TOO_LARGE"


def test_duplicate_call_ids_in_one_turn(ws):
    ex = executor(ws)
    calls = [ToolCall("same", "write_file", {"path": "a.txt", "content": "1"}),
             ToolCall("same", "write_file", {"path": "b.txt", "content": "2"}),
             ToolCall("other", "read_file", {"path": "a.txt"})]
    results = ex.execute_many_sync(calls)
    assert [r.call_id for r in results] == ["same", "same", "other"]
    assert results[0].ok
    assert code(results[1]) == "DUPLICATE_CALL_ID"
    assert not (ws / "b.txt").exists()
    assert results[2].output == "1"


def test_execute_many_keeps_call_order_and_runs_reads_in_parallel():
    reg = ToolRegistry()
    log: list[tuple[str, str]] = []

    @reg.tool(kind="read")
    async def fetch_item(item_id: str) -> str:
        """Fetch an item."""
        log.append(("start", item_id))
        await asyncio.sleep(0.2)
        log.append(("end", item_id))
        return item_id

    @reg.tool(kind="write")
    async def save_item(item_id: str) -> str:
        """Save an item."""
        log.append(("start", item_id))
        await asyncio.sleep(0.05)
        log.append(("end", item_id))
        return item_id

    ex = ToolExecutor(reg)
    calls = [ToolCall("1", "fetch_item", {"item_id": "a"}),
             ToolCall("2", "fetch_item", {"item_id": "b"}),
             ToolCall("3", "save_item", {"item_id": "c"}),
             ToolCall("4", "fetch_item", {"item_id": "d"})]
    t0 = time.monotonic()
    results = ex.execute_many_sync(calls)
    elapsed = time.monotonic() - t0
    assert [r.call_id for r in results] == ["1", "2", "3", "4"]
    assert [r.output for r in results] == ["a", "b", "c", "d"]
    # a and b overlap; c runs alone after both; d after c
    assert log[:2] == [("start", "a"), ("start", "b")]
    assert log.index(("start", "c")) > log.index(("end", "b"))
    assert log.index(("start", "d")) > log.index(("end", "c"))
    assert elapsed < 0.2 * 3 + 0.05  # not fully sequential


def test_rate_limits_calls_writes_and_bytes(ws):
    now = [0.0]
    pol = dataclasses.replace(policy_rules("default"), calls_per_minute=5, writes_per_minute=2,
                              bytes_written_per_session=10)
    ex = executor(ws, policy=pol)
    ex.rate_limiter = RateLimiter(pol, clock=lambda: now[0])
    assert run(ex, "write_file", path="a.txt", content="12345").ok
    assert run(ex, "write_file", path="b.txt", content="1").ok
    result = run(ex, "write_file", path="c.txt", content="1")
    assert code(result) == "RATE_LIMITED" and rule(result) == "rate_limits.writes_per_minute"
    assert result.tool_error.code == toolrules.ToolErrorCode.RATE_LIMIT
    assert result.tool_error.recoverable
    # refused calls do not count: 2 writes + 3 reads reach the 5 calls per minute
    for _ in range(3):
        assert run(ex, "read_file", path="a.txt").ok
    result = run(ex, "read_file", path="a.txt")
    assert rule(result) == "rate_limits.calls_per_minute"
    now[0] += 61
    result = run(ex, "write_file", path="d.txt", content="123456789")
    assert code(result) == "RATE_LIMITED"
    assert rule(result) == "rate_limits.bytes_written_per_session"
    assert not (ws / "d.txt").exists()
    assert run(ex, "write_file", path="d.txt", content="1234").ok
    assert code(run(ex, "write_file", path="e.txt", content="1")) == "RATE_LIMITED"


def test_shell_rate_limit(ws):
    pol = dataclasses.replace(policy_rules("default"), shell_per_minute=1)
    ex = executor(ws, "shell", policy=pol)
    assert run(ex, "run_command", command="echo 1").ok
    assert rule(run(ex, "run_command", command="echo 2")) == "rate_limits.shell_per_minute"
    assert run(ex, "read_file", path="README.md").ok


def _confirm_registry() -> tuple[ToolRegistry, list[str]]:
    reg = ToolRegistry()
    done: list[str] = []

    @reg.tool(requires_confirmation=True)
    def delete_record(record_id: str) -> str:
        """Delete a record."""
        done.append(record_id)
        return "deleted"

    return reg, done


def test_confirmation_hook():
    reg, done = _confirm_registry()
    call = ToolCall("1", "delete_record", {"record_id": "r1"})
    result = ToolExecutor(reg).execute_sync(call)
    assert code(result) == "CONFIRMATION_DENIED" and "no confirm hook" in result.error
    result = ToolExecutor(reg, confirm=lambda c: False).execute_sync(call)
    assert code(result) == "CONFIRMATION_DENIED" and done == []
    seen: list[ToolCall] = []

    def yes(c: ToolCall) -> bool:
        seen.append(c)
        return True

    assert ToolExecutor(reg, confirm=yes).execute_sync(call).ok
    assert seen[0].arguments == {"record_id": "r1"} and done == ["r1"]

    async def async_yes(c: ToolCall) -> bool:
        return True

    assert ToolExecutor(reg, confirm=async_yes).execute_sync(call).ok

    def broken(c: ToolCall) -> bool:
        raise RuntimeError("ui gone")

    result = ToolExecutor(reg, confirm=broken).execute_sync(call)
    assert code(result) == "CONFIRMATION_DENIED" and "ui gone" in result.error
    assert done == ["r1", "r1"]


def test_dry_run_runs_nothing(ws):
    ex = executor(ws, "shell", dry_run=True)
    result = run(ex, "write_file", path="new.txt", content="x")
    assert result.ok and result.output["dry_run"] is True
    assert result.output["tool"] == "write_file"
    assert not (ws / "new.txt").exists()
    result = run(ex, "run_command", command="echo hi > x")
    assert code(result) == "COMMAND_NOT_ALLOWED"  # refusals still show in a dry run
    result = run(ex, "run_command", command="ls -la src")
    assert result.output["argv"] == ["ls", "-la", "src"]
    reg, done = _confirm_registry()
    result = ToolExecutor(reg, dry_run=True).execute_sync(
        ToolCall("1", "delete_record", {"record_id": "r"}))
    assert result.output["requires_confirmation"] is True and done == []


def test_python_handler_timeout():
    reg = ToolRegistry()

    @reg.tool(timeout=0.2)
    async def slow_tool() -> str:
        """Sleep."""
        await asyncio.sleep(5)
        return "late"

    @reg.tool(timeout=0.2)
    def slow_sync() -> str:
        """Sleep in a thread."""
        time.sleep(0.6)
        return "late"

    ex = ToolExecutor(reg)
    t0 = time.monotonic()
    result = ex.execute_sync(ToolCall("1", "slow_tool", {}))
    assert code(result) == "TIMEOUT" and result.tool_error.code == toolrules.ToolErrorCode.TIMEOUT
    assert "timed out" in result.error
    assert time.monotonic() - t0 < 2
    assert code(ex.execute_sync(ToolCall("2", "slow_sync", {}))) == "TIMEOUT"


def test_handler_exceptions_become_tool_errors_from_the_rules():
    reg = ToolRegistry()

    @reg.tool
    def lookup(key: str) -> str:
        """Look up a key."""
        raise FileNotFoundError(f"no such file: {key}")

    result = ToolExecutor(reg).execute_sync(ToolCall("1", "lookup", {"key": "k"}))
    assert result.tool_error.code == toolrules.ToolErrorCode.NOT_FOUND
    assert result.tool_error.details["rule"] == "file-not-found"
    assert result.tool_error.details["error"] == "NOT_FOUND"
    assert result.error == "no such file: k"


def test_read_modify_write_chain(ws):
    """The read-modify-write loop, one call at a time: read input.txt ("hello"),
    upper-case it, write output.txt ("HELLO")."""
    ex = executor(ws)
    first = run(ex, "read_file", "c1", path="input.txt")
    assert first.ok and first.output == "hello"
    second = run(ex, "write_file", "c2", path="output.txt", content=first.output.upper())
    assert second.ok
    assert (ws / "output.txt").read_text() == "HELLO"


def test_tool_result_stays_backwards_compatible():
    r = ToolResult("id", "t", "out")
    assert r.ok and r.tool_error is None and r.error is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.output = "x"  # type: ignore[misc]
    bad = ToolResult("id", "t", error="boom")
    assert not bad.ok and envelope_of(bad)["errors"][0]["message"] == "boom"


def test_execute_sync_inside_a_running_loop(ws):
    ex = executor(ws)

    async def main() -> ToolResult:
        return ex.execute_sync(ToolCall("1", "read_file", {"path": "input.txt"}))

    assert asyncio.run(main()).output == "hello"


def test_workspace_must_exist(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        ToolExecutor(toolrules.builtin_tools(tmp_path / "missing"))


def test_file_tools_need_a_workspace():
    reg = toolrules.builtin_tools()
    result = ToolExecutor(reg).execute_sync(ToolCall("1", "read_file", {"path": "x"}))
    assert code(result) == "PERMISSION_DENIED" and rule(result) == "workspace"
