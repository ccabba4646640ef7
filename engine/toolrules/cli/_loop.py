"""CLI: `toolrules run` (one task through the tool loop, events as they happen) and
`toolrules replay` (a recorded trace run again offline; exit 1 on any divergence)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import click

from ._common import fail, get_engine, guard, jail_options
from ._mcp import add_servers, mcp_options

__all__ = ["COMMANDS", "format_call", "summarize_result"]

_RULES = click.option("--rules", "rule_paths", multiple=True, type=click.Path(exists=True),
                      help="Extra rule directories (overlays).")


def _model_from_spec(spec: str, engine: Any, base_url: str | None) -> Any:
    """The model client for --model SPEC (runtime's resolve_model, as `chat` uses it): a
    malformed SPEC exits 2, a script or provider that cannot be used exits 1."""
    from ..runtime._session import ModelSpecError, resolve_model

    try:
        return resolve_model(spec, engine=engine, base_url=base_url)
    except ModelSpecError as exc:
        if exc.source == "spec":
            fail(str(exc), "for example openai-compatible:qwen3:8b --base-url "
                 "http://127.0.0.1:8080/v1", code=2)
        fail(str(exc))
    raise AssertionError("unreachable")


def _executor(engine: Any, workspace: str | None, trust: str, allowed: tuple[str, ...],
              denied: tuple[str, ...], dry_run: bool, audit_dir: str | None,
              policy: str = "default") -> Any:
    from .._errors import UnknownRuleError
    from ..runtime import ToolExecutor, builtin_tools

    if workspace is not None and not Path(workspace).is_dir():
        fail(f"workspace {workspace!r} is not a directory", "pass --workspace DIR (it must exist)")
    try:
        return ToolExecutor(builtin_tools(workspace, engine=engine), workspace=workspace,
                            trust=trust, allowed=list(allowed) or None, denied=list(denied),
                            audit_dir=audit_dir, engine=engine, dry_run=dry_run, policy=policy)
    except UnknownRuleError as exc:
        fail(str(exc), "list policies with: ls rules/policies (and your overlays)")
    except (ValueError, KeyError) as exc:
        fail(str(exc).strip("'\""), "see the trust levels in rules/policies/default.yaml")
    raise AssertionError("unreachable")


# ---------------------------------------------------------------- printing events

def format_call(call: Any) -> str:
    """``read_file(path="config.yaml")``: a call as one line."""
    parts = []
    for key, value in (call.arguments or {}).items():
        text = json.dumps(value, ensure_ascii=False)
        if len(text) > 60:
            text = text[:57] + "..."
        parts.append(f"{key}={text}")
    return f"{call.name}({', '.join(parts)})"


def summarize_result(result: Any, kind: str | None = None) -> str:
    """A result as one line: ``✓ Read 45 lines``, ``✓ Wrote 5 bytes to a.txt``,
    ``✗ PERMISSION_DENIED: ...``."""
    if not result.ok:
        err = result.tool_error
        code = ((err.details or {}).get("error") if err is not None else None) or "ERROR"
        message = " ".join(str(result.error or "").split())
        return f"✗ {code}: {message[:150]}"
    out = result.output
    if isinstance(out, dict) and out.get("dry_run"):
        return "✓ dry run: would run " + str(out.get("tool")) + (
            f" ({' '.join(out['argv'])})" if out.get("argv") else "")
    text = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False, default=str)
    lines = text.splitlines()
    if kind == "read" and isinstance(out, str):  # text read is data, not a message: count it
        return f"✓ Read {len(lines)} line{'' if len(lines) == 1 else 's'}"
    if isinstance(out, (dict, list)):  # a structured result: its start, on one line
        return "✓ " + (text if len(text) <= 100 else text[:99] + "…")
    if len(lines) == 1 and len(text) <= 100:
        return f"✓ {text.strip()}"
    return f"✓ {len(lines)} lines, {len(text.encode())} bytes"


class _Printer:
    """Events for people: text as it streams, one line per call and result."""

    def __init__(self, executor: Any, show_reasoning: bool):
        self.executor = executor
        self.show_reasoning = show_reasoning
        self.at_line_start = True

    def _line(self, text: str, err: bool = False) -> None:
        if not self.at_line_start:
            click.echo()
            self.at_line_start = True
        click.echo(text, err=err)

    def __call__(self, event: Any) -> None:
        kind = event.type.value
        if kind == "text" and event.content:
            click.echo(event.content, nl=False)
            self.at_line_start = event.content.endswith("\n")
        elif kind == "reasoning" and event.content and self.show_reasoning:
            click.echo(click.style(event.content, dim=True), nl=False)
            self.at_line_start = event.content.endswith("\n")
        elif kind == "tool_call":
            self._line(f"[Tool Call] {format_call(event.call)}")
        elif kind == "tool_result":
            entry = self.executor.registry.get(event.call.name)
            summary = summarize_result(event.result, getattr(entry, "kind", None))
            if event.executed is False:
                summary += " (not run)"
            self._line(f"[Result] {summary}")
        elif kind == "notice":
            self._line(f"[Loop] {event.notice}: {' '.join((event.content or '').split())}",
                       err=True)
        elif kind == "done":
            if not self.at_line_start:
                click.echo()
            o = event.outcome
            click.echo(f"-- {o.stopped}: {o.rounds} model turn(s), {o.tool_calls} tool "
                       f"call(s) run" + (f"; {o.error}" if o.error else ""), err=True)


# ---------------------------------------------------------------- commands

@click.command()
@click.argument("task")
@click.option("--model", "-m", "spec", required=True,
              help="scripted:FILE.yaml, PROVIDER:MODEL or local.")
@click.option("--base-url", help="Server URL for PROVIDER:MODEL (local servers).")
@jail_options
@click.option("--allow", multiple=True, help="Only these tools (repeatable).")
@click.option("--deny", multiple=True, help="Never these tools (repeatable).")
@click.option("--dry-run", is_flag=True, help="Show the calls without running them.")
@click.option("--json", "as_json", is_flag=True, help="Events as JSON lines.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False),
              help="Write the trace (JSON lines) here; replay it with `toolrules replay`.")
@click.option("--max-rounds", type=click.IntRange(min=0), help="Model turns with tools (default "
              "rules/loop.yaml).")
@click.option("--tool-use-mode", type=click.Choice(["relaxed", "enforced", "disabled"]),
              default="relaxed", show_default=True)
@click.option("--system", help="A system prompt.")
@click.option("--audit-dir", type=click.Path(file_okay=False), help="Append audit lines here.")
@click.option("--stream/--no-stream", default=True, show_default=True,
              help="Stream model turns (text as it arrives).")
@click.option("--reasoning", "show_reasoning", is_flag=True, help="Also print reasoning.")
@mcp_options
@_RULES
@guard
def run(task: str, spec: str, base_url: str | None, workspace: str, trust: str,
        policy_id: str, allow: tuple[str, ...], deny: tuple[str, ...], dry_run: bool, as_json: bool,
        trace_path: str | None, max_rounds: int | None, tool_use_mode: str, system: str | None,
        audit_dir: str | None, stream: bool, show_reasoning: bool,
        mcp_names: tuple[str, ...], mcp_commands: tuple[str, ...],
        rule_paths: tuple[str, ...]) -> None:
    """Run TASK through the tool loop: the model's calls run under the policy, results go
    back, until a final answer. Exit 1 when it did not end with an answer. --mcp NAME adds
    the tools of an MCP server (started now, stopped at the end)."""
    from ..runtime._loop import ToolLoop

    engine = get_engine(rule_paths)
    model = _model_from_spec(spec, engine, base_url)
    executor = _executor(engine, workspace, trust, allow, deny, dry_run, audit_dir, policy_id)
    add_servers(executor.registry, mcp_names, mcp_commands, engine)
    try:
        _run_loop(ToolLoop(model, executor, max_rounds, tool_use_mode, system=system,
                           trace_path=trace_path, engine=engine),
                  executor, task, as_json, stream, show_reasoning, trace_path)
    finally:
        executor.registry.close()


def _run_loop(loop: Any, executor: Any, task: str, as_json: bool, stream: bool,
              show_reasoning: bool, trace_path: str | None) -> None:
    printer = None if as_json else _Printer(executor, show_reasoning)

    async def go() -> Any:
        outcome = None
        async for event in loop.events(task, stream=stream):
            if printer is None:
                click.echo(json.dumps(event.to_dict(), ensure_ascii=False, default=str))
            else:
                printer(event)
            if event.outcome is not None:
                outcome = event.outcome
        return outcome

    outcome = asyncio.run(go())
    if trace_path and not as_json:
        click.echo(f"-- trace: {trace_path} (toolrules replay {trace_path})", err=True)
    sys.exit(0 if outcome is not None and outcome.ok else 1)


@click.command()
@click.argument("trace_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--workspace", "-w", type=click.Path(file_okay=False),
              help="Run against this workspace instead of the recorded one.")
@click.option("--trust", help="Trust level instead of the recorded one.")
@click.option("--json", "as_json", is_flag=True, help="The report as JSON.")
@_RULES
@guard
def replay(trace_file: str, workspace: str | None, trust: str | None, as_json: bool,
           rule_paths: tuple[str, ...]) -> None:
    """Run a recorded session again offline: the recorded model turns, a fresh executor with
    the built-in tools. A `toolrules eval` trace gets what its run had: the scenario's tools
    (mocks included), a fresh copy of its workspace fixture, its trust and the strategy's
    capability overrides (an overlay scenario needs the same --rules). Exit 1 when a call,
    a result or the final answer differs."""
    from .._errors import UnknownRuleError
    from ..evals._replay import EvalTraceError, eval_run, replay_eval
    from ..runtime._replay import replay as replay_trace
    from ..runtime._trace import Trace

    engine = get_engine(rule_paths)
    trace = Trace.load(trace_file)
    if workspace is not None and not Path(workspace).is_dir():
        fail(f"workspace {workspace!r} is not a directory", "pass --workspace DIR (it must exist)")
    if trace.records[0].get("source") == "serve":  # a proxy's trace: its exchange again
        from ..serve._replay import replay_serve_trace

        found = asyncio.run(replay_serve_trace(trace, engine))
        if as_json:
            click.echo(json.dumps({"ok": found.ok, "turns": found.turns, "calls": found.calls,
                                   "divergences": list(found.divergences)}, indent=2))
        else:
            for line in found.divergences:
                click.echo(f"divergence: {line}")
            verdict = "no divergence" if found.ok else f"{len(found.divergences)} divergence(s)"
            click.echo(f"{verdict}: {found.turns} recorded upstream turn(s), {found.calls} "
                       "call(s) replayed through the proxy's exchange")
        sys.exit(0 if found.ok else 1)
    run_info = eval_run(trace)
    if run_info is not None:  # an eval run: its scenario's tools, fixture and overrides
        try:
            report = asyncio.run(replay_eval(trace, engine, workspace=workspace, trust=trust,
                                             where=trace_file))
        except EvalTraceError as exc:
            fail(str(exc), f"toolrules replay {trace_file} --rules DIR (the overlay that "
                 "defines the scenario, as given to toolrules eval; repeatable)")
        except UnknownRuleError as exc:
            fail(str(exc), "list policies with: ls rules/policies (and your overlays)")
        except (ValueError, KeyError) as exc:  # e.g. --trust names no level of the policy
            fail(str(exc).strip("'\""))
        what = f"scenario {run_info.scenario}, {run_info.target}/{run_info.strategy}"
    else:
        info = trace.records[0].get("executor") or {}
        executor = _executor(engine, workspace or info.get("workspace"),
                             trust or info.get("trust") or "workspace",
                             tuple(info.get("allowed") or ()), tuple(info.get("denied") or ()),
                             bool(info.get("dry_run")), None, info.get("policy") or "default")
        report = asyncio.run(replay_trace(trace, executor, engine=engine))
        what = ""
    _print_report(report, as_json, what)
    sys.exit(0 if report.ok else 1)


def _print_report(report: Any, as_json: bool, what: str) -> None:
    if as_json:
        click.echo(json.dumps({"ok": report.ok, "turns": report.recorded_turns,
                               "stopped": report.outcome.stopped,
                               "divergences": [
                                   {"where": d.where, "what": d.what, "recorded": d.recorded,
                                    "replayed": d.replayed} for d in report.divergences]},
                              ensure_ascii=False, indent=2, default=str))
        return
    for d in report.divergences:
        click.echo(f"divergence: {d}")
    calls = len(report.outcome.tool_history)
    verdict = "no divergence" if report.ok else f"{len(report.divergences)} divergence(s)"
    click.echo(f"{verdict}: {report.recorded_turns} recorded turn(s), {calls} call(s) "
               f"replayed; stopped: {report.outcome.stopped}" + (f" ({what})" if what else ""))


COMMANDS = [run, replay]
