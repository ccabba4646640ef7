"""ToolExecutor: every call goes through the same pipeline, whatever wire format it came in.

    look up -> allow / deny / hidden / trust -> argument size -> validation ->
    policy checks on paths and commands -> confirmation -> rate limits -> run with a
    timeout -> output size -> ToolResult (+ one audit line)

Each failure is a ToolResult whose `tool_error` is a structured ToolError: its category
and recovery hints come from rules/errors.yaml, its message from rules/validation.yaml
`envelope`, and `details` name the envelope code (`error`) and the rule that decided.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import difflib
import inspect
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._types import Tool, ToolCall, ToolResult
from ..calls._engineering import plan_parallel_execution
from ..calls._policy import Policy, PolicyRefusal, policy_rules
from ..calls._tool_errors import ToolError, ToolErrorCode, error_rules
from ..calls._validation import coerce_call, fill, validation_rules
from ..rules._default import resolve_engine
from ._audit import AuditLog, sanitize_arguments
from ._context import ToolContext, ToolFailure
from ._registry import RegisteredTool, ToolRegistry

__all__ = ["RateLimiter", "ToolExecutor", "envelope_of"]

Confirm = Callable[[ToolCall], "bool | Awaitable[bool]"]

# Outcomes in the audit log: refused before running, failed while running, ran.
REFUSED, FAILED, OK, DRY_RUN = "refused", "failed", "ok", "dry_run"


class RateLimiter:
    """Sliding one-minute windows per counter, plus the bytes written this session."""

    def __init__(self, policy: Policy, clock: Callable[[], float] = time.monotonic):
        self.policy = policy
        self.clock = clock
        self.windows: dict[str, deque[float]] = {"calls": deque(), "writes": deque(),
                                                 "shell": deque()}
        self.bytes_written = 0

    def check(self, *, write: bool, shell: bool) -> tuple[str, str] | None:
        """(rule, message) when a limit is reached, else None (and the call is counted)."""
        now = self.clock()
        limits = {"calls": self.policy.calls_per_minute,
                  "writes": self.policy.writes_per_minute if write else None,
                  "shell": self.policy.shell_per_minute if shell else None}
        for name, limit in limits.items():
            window = self.windows[name]
            while window and now - window[0] >= 60.0:
                window.popleft()
            if limit is not None and len(window) >= limit:
                wait = max(0.0, 60.0 - (now - window[0]))
                return (f"rate_limits.{name}_per_minute",
                        f"{limit} {name} per minute; retry in {wait:.0f} s")
        if write and self.policy.bytes_written_per_session is not None and \
                self.bytes_written >= self.policy.bytes_written_per_session:
            return ("rate_limits.bytes_written_per_session",
                    f"this session already wrote {self.bytes_written} bytes (limit "
                    f"{self.policy.bytes_written_per_session})")
        for name, limit in limits.items():
            if name == "calls" or limit is not None:
                self.windows[name].append(now)
        return None


@dataclass
class _Outcome:
    result: ToolResult
    outcome: str
    arguments: Any = None
    level: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def envelope_of(result: ToolResult) -> dict[str, Any]:
    """The dispatcher envelope `{ok, data, warnings, errors}` of a result."""
    if result.ok:
        return {"ok": True, "data": result.output, "warnings": [], "errors": []}
    if result.tool_error is not None:
        err = result.tool_error.to_dict()
        name = (result.tool_error.details or {}).get("error")
        if name:
            err["code"] = name
    else:
        err = {"code": "EXECUTION", "category": "execution", "message": result.error,
               "recoverable": True}
    return {"ok": False, "data": None, "warnings": [], "errors": [err]}


class ToolExecutor:
    """Runs tool calls from a registry under a policy (rules/policies/).

    `trust` is the session's level (discovery, read_only, workspace, shell, full in the
    default policy); `allowed` / `denied` mask tool names (enforced here and in
    `visible_tools()`); `audit_dir` turns on the audit log; `dry_run` reports what would
    run without running it; `confirm(call) -> bool` (or an awaitable) decides tools
    registered with `requires_confirmation` (without it they are refused)."""

    def __init__(self, registry: ToolRegistry, workspace: str | Path | None = None,
                 trust: str = "workspace", allowed: Iterable[str] | None = None,
                 denied: Iterable[str] | None = None,
                 audit_dir: str | Path | None = None, *, policy: str | Policy = "default",
                 engine: Any = None, dry_run: bool = False, confirm: Confirm | None = None):
        from ._jail import Jail

        self.registry = registry
        self.engine = resolve_engine(engine if engine is not None else registry._engine)
        self.policy = policy if isinstance(policy, Policy) else policy_rules(policy, self.engine)
        self.policy.level_index(trust)  # a clear error for an unknown level
        self.trust = trust
        ws = workspace if workspace is not None else registry.workspace
        self.workspace: Path | None = None
        self.jail: Jail | None = None
        if ws is not None:
            root = Path(ws).expanduser()
            if not root.is_dir():
                raise ValueError(f"workspace {str(ws)!r} is not a directory")
            self.workspace = root.resolve()
            self.jail = Jail(self.workspace, self.policy)
        self.allowed = frozenset(allowed) if allowed is not None else None
        self.denied = frozenset(denied or ())
        self.audit = AuditLog(audit_dir, self.policy) if audit_dir is not None else None
        self.dry_run = dry_run
        self.confirm = confirm
        self.rate_limiter = RateLimiter(self.policy)

    # ------------------------------------------------------------ what the model sees

    def level_of(self, entry: RegisteredTool) -> str:
        return self.policy.tool_level(entry.name, entry.tier)

    def _mask(self, entry: RegisteredTool, origin: str) -> tuple[str, str] | None:
        """(rule, message) when the masks or the trust level refuse the tool."""
        if entry.name in self.denied:
            return "denied", "it is denied in this session"
        if origin != "app":
            if entry.hidden:
                return "hidden", "it is not offered to the model"
            if self.allowed is not None and entry.name not in self.allowed:
                return "allowed", "it is not in this session's allowed tools"
        return None

    def visible_tools(self) -> list[Tool]:
        """The tools the model may be offered: not hidden, allowed, not denied, within trust."""
        out = []
        for entry in self.registry:
            if self._mask(entry, "model") is None and \
                    self.policy.within_trust(self.level_of(entry), self.trust):
                out.append(entry.tool)
        return out

    # ------------------------------------------------------------ running calls

    async def execute(self, call: Any, *, origin: str = "model") -> ToolResult:
        """Run one call (a ToolCall or a call dict in any common shape) through the
        pipeline; never raises for a bad call, returns a failed ToolResult instead.
        `origin="app"` marks the application's own calls: they may call hidden tools."""
        start = time.monotonic()
        out = await self._pipeline(call, origin)
        self._audit(out, start, origin)
        return out.result

    def execute_sync(self, call: Any, *, origin: str = "model") -> ToolResult:
        """`execute` for synchronous code (also callable from inside a running loop)."""
        return _run_sync(lambda: self.execute(call, origin=origin))

    async def execute_many(self, calls: Sequence[Any], *, origin: str = "model"
                           ) -> list[ToolResult]:
        """Run several calls of one turn; results in call order, each with its call's id.

        Consecutive read-only calls run in parallel (`plan_parallel_execution` with the
        registry's read/write classes), everything else alone and in order. A call whose
        id repeats an earlier one in the batch is refused (DUPLICATE_CALL_ID)."""
        calls = list(calls)
        results: list[ToolResult | None] = [None] * len(calls)
        keys: list[ToolCall] = []
        position: dict[int, int] = {}
        seen: set[str] = set()
        for i, c in enumerate(calls):
            try:
                call_id, name, _ = coerce_call(c)
            except (TypeError, ValueError):
                call_id, name = None, ""
            if call_id is not None and call_id in seen:
                start = time.monotonic()
                out = self._refuse_out(str(name), call_id, "DUPLICATE_CALL_ID",
                                       f"{call_id!r} is used by an earlier call of this turn; "
                                       "give every call its own id", rule="call_ids")
                self._audit(out, start, origin)
                results[i] = out.result
                continue
            if call_id is not None:
                seen.add(call_id)
            key = ToolCall(call_id, str(name), {})
            position[id(key)] = i
            keys.append(key)
        classes = {e.name: e.kind for e in self.registry}
        plan = plan_parallel_execution(keys, self.registry.tools(include_hidden=True),
                                       engine=self.engine, classes=classes)
        for batch in plan.batches:
            idx = [position[id(k)] for k in batch]
            if len(idx) == 1:
                results[idx[0]] = await self.execute(calls[idx[0]], origin=origin)
            else:
                done = await asyncio.gather(*(self.execute(calls[i], origin=origin)
                                              for i in idx))
                for i, r in zip(idx, done):
                    results[i] = r
        return [r for r in results if r is not None]

    def execute_many_sync(self, calls: Sequence[Any], *, origin: str = "model"
                          ) -> list[ToolResult]:
        return _run_sync(lambda: self.execute_many(calls, origin=origin))

    # ------------------------------------------------------------ the pipeline

    async def _pipeline(self, call: Any, origin: str) -> _Outcome:
        try:
            call_id, name, args = coerce_call(call)
        except (TypeError, ValueError) as exc:
            return self._refuse_out("", None, "INVALID_ARGUMENTS", str(exc), rule="call")
        entry = self.registry.get(name)
        if entry is None:
            return self._unknown(call_id, name, args)
        masked = self._mask(entry, origin)
        if masked is not None:
            return self._refuse_out(name, call_id, "TOOL_NOT_ALLOWED", masked[1],
                                    rule=masked[0], arguments=args,
                                    fix=self._offer_fix())
        level = self.level_of(entry)
        if not self.policy.within_trust(level, self.trust):
            return self._refuse_out(
                name, call_id, "TRUST_TOO_LOW",
                f"{name} needs trust level {level!r}; this session has {self.trust!r}"
                if level in self.policy.levels else
                f"{name} needs trust level {level!r}, which policy {self.policy.id!r} does "
                "not offer",
                rule=f"levels: {level}", arguments=args, level=level,
                fix=f"Do not retry {name}: it needs a higher trust level than this session "
                    f"has. {self._offer_fix()}")
        limit = self.policy.max_args_bytes
        size = _arguments_size(call, args)
        if limit is not None and size > limit:
            return self._refuse_out(name, call_id, "ARGUMENTS_TOO_LARGE", "", rule="arguments.max_bytes",
                                    arguments=args, level=level, size=size, limit=limit)
        checked = self.engine.check_tool_call(
            ToolCall(call_id, name, args) if isinstance(args, dict)
            else {"id": call_id, "name": name, "arguments": args},
            {name: entry.tool}, coerce=True if self.policy.coerce else None)
        if not checked.ok:
            feedback = self.engine.format_validation_errors_for_retry(
                checked.errors, checked.call, {name: entry.tool})
            return self._refuse_out(
                name, call_id, "INVALID_ARGUMENTS", "; ".join(
                    f"{e.parameter}: {e.error}" if e.parameter else e.error
                    for e in checked.errors),
                rule="schema", arguments=args, level=level, fix=feedback,
                errors=[e.to_dict() for e in checked.errors])
        args = dict(checked.call.arguments)
        ws = str(self.workspace) if self.workspace is not None else None
        try:
            for pname in entry.paths:
                if pname in args:
                    value = args[pname]
                    for text in value if isinstance(value, list) else [value]:
                        self.policy.check_path(text, ws, argument=pname)
            argv = None
            if entry.command and entry.command in args:
                cwd = args.get("cwd") if "cwd" in entry.paths else None
                argv = self.policy.command_argv(args[entry.command], ws,
                                                cwd if isinstance(cwd, str) else None)
        except PolicyRefusal as exc:
            return self._refuse_out(name, call_id, exc.error, exc.message, rule=exc.rule,
                                    arguments=args, level=level)
        timeout = self._timeout(entry, args)
        if self.dry_run:
            plan: dict[str, Any] = {"dry_run": True, "tool": name, "arguments": args,
                                    "trust_level": level, "timeout": timeout}
            if argv is not None:
                plan["argv"] = list(argv)
            if entry.requires_confirmation:
                plan["requires_confirmation"] = True
            return _Outcome(ToolResult(call_id, name, output=plan), DRY_RUN, args, level)
        if entry.requires_confirmation and origin != "app":
            refused = await self._confirmed(ToolCall(call_id, name, args))
            if refused is not None:
                return self._refuse_out(name, call_id, "CONFIRMATION_DENIED", refused,
                                        rule="requires_confirmation", arguments=args,
                                        level=level)
        limited = self.rate_limiter.check(write=entry.kind == "write",
                                          shell=self.policy.is_shell(level))
        if limited is not None:
            return self._refuse_out(name, call_id, "RATE_LIMITED", limited[1], rule=limited[0],
                                    arguments=args, level=level)
        ctx = ToolContext(call=ToolCall(call_id, name, args), policy=self.policy,
                          trust=self.trust, workspace=self.workspace, jail=self.jail,
                          timeout=timeout, dry_run=False, engine=self.engine,
                          bytes_budget=self._bytes_budget())
        try:
            output = await self._invoke(entry, args, ctx, timeout)
        except TimeoutError:
            return self._fail_out(name, call_id, "TIMEOUT", f"no result after {timeout:g} s",
                                  rule="timeouts", arguments=args, level=level, seconds=timeout)
        except PolicyRefusal as exc:
            return self._refuse_out(name, call_id, exc.error, exc.message, rule=exc.rule,
                                    arguments=args, level=level, **exc.details)
        except ToolFailure as exc:
            return self._fail_out(name, call_id, exc.error, exc.message, arguments=args,
                                  level=level, **exc.details)
        except Exception as exc:
            if type(exc).__name__ == "ValidationError" and hasattr(exc, "errors"):
                return self._refuse_out(name, call_id, "INVALID_ARGUMENTS", str(exc),
                                        rule="arguments_model", arguments=args, level=level)
            err = self.engine.tool_error(exc, name)
            details = {**(err.details or {}), "error": ToolErrorCode(err.code).name}
            err = ToolError(code=err.code, message=err.message, recoverable=err.recoverable,
                            retry_strategy=err.retry_strategy, suggested_fix=err.suggested_fix,
                            details=details)
            return _Outcome(ToolResult(call_id, name, error=err.message, tool_error=err),
                            FAILED, args, level)
        finally:
            written = ctx.stats.get("bytes_written", 0)
            self.rate_limiter.bytes_written += written
        if self.policy.max_output_bytes is not None:
            env = self.engine.guard_tool_output(output,
                                                max_tool_output_bytes=self.policy.max_output_bytes)
            if not env.ok:
                e = env.errors[0]
                return self._fail_out(name, call_id, "TOOL_OUTPUT_TOO_LARGE", "",
                                      arguments=args, level=level, rule="output.max_bytes",
                                      size=e.get("details", {}).get("bytes"),
                                      limit=self.policy.max_output_bytes)
        return _Outcome(ToolResult(call_id, name, output=output), OK, args, level,
                        {"bytes_written": written} if written else {})

    def _bytes_budget(self) -> int | None:
        limit = self.policy.bytes_written_per_session
        return None if limit is None else max(0, limit - self.rate_limiter.bytes_written)

    def _timeout(self, entry: RegisteredTool, args: Mapping[str, Any]) -> float:
        asked = args.get("timeout") if "timeout" in (entry.tool.parameters.get("properties")
                                                     or {}) else None
        if isinstance(asked, (int, float)) and not isinstance(asked, bool) and asked > 0:
            wanted = float(asked)
        else:
            wanted = entry.timeout or self.policy.timeout_default
        return min(wanted, self.policy.timeout_max)

    async def _invoke(self, entry: RegisteredTool, args: Mapping[str, Any], ctx: ToolContext,
                      timeout: float) -> Any:
        kwargs = entry.bind(args, ctx)
        # Handlers that manage their own deadline (run_command kills its process group)
        # get a little longer before the executor gives up on them.
        grace = 2.0 if entry.context else 0.0
        if entry.is_async:
            return await asyncio.wait_for(entry.handler(**kwargs), timeout + grace)
        # A synchronous handler runs in a worker thread; on timeout the call fails at
        # once, but Python cannot stop the thread: it finishes in the background.
        result = await asyncio.wait_for(asyncio.to_thread(entry.handler, **kwargs),
                                        timeout + grace)
        if inspect.isawaitable(result):
            return await asyncio.wait_for(result, timeout + grace)
        return result

    async def _confirmed(self, call: ToolCall) -> str | None:
        """None when confirmed, else why not."""
        if self.confirm is None:
            return "it requires confirmation and this session has no confirm hook"
        try:
            answer = self.confirm(call)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:
            return f"the confirm hook failed: {type(exc).__name__}: {exc}"
        return None if answer is True else "the confirmation was declined"

    def _offer_fix(self) -> str:
        names = [t.name for t in self.visible_tools()]
        return f"Use one of the available tools: {', '.join(names) or '(none)'}."

    def _unknown(self, call_id: str | None, name: str, args: Any) -> _Outcome:
        visible = [t.name for t in self.visible_tools()]
        close = difflib.get_close_matches(name, visible, n=3, cutoff=0.5)
        hint = f"Did you mean {', '.join(close)}? " if close else ""
        message = f"{hint}Available tools: {', '.join(visible) or '(none)'}"
        return self._refuse_out(name, call_id, "UNKNOWN_TOOL", message, rule="registry",
                                arguments=args, closest=close, available=visible)

    # ------------------------------------------------------------ building failures

    def tool_error(self, error: str, tool: str, message: str, *, rule: str | None = None,
                   fix: str | None = None, **details: Any) -> ToolError:
        """A ToolError for envelope code `error` (rules/validation.yaml `envelope`), with
        its category's recovery defaults from rules/errors.yaml."""
        vrules = validation_rules(self.engine)
        erules = error_rules(self.engine)
        spec = vrules.envelope.get(error, {"message": "{message}", "code": "execution"})
        code = ToolErrorCode(spec["code"])
        code_rule = erules.codes.get(code, {})
        values = {"tool": tool, "message": message, **{k: v for k, v in details.items()
                                                       if isinstance(v, (str, int, float))}}
        text = fill(spec["message"], values) or message or error
        if message and message not in text:
            text = f"{text} {message}"
        info: dict[str, Any] = {"error": error}
        if rule is not None:
            info["rule"] = rule
        info.update({k: v for k, v in details.items() if v is not None})
        return ToolError(code=code, message=text,
                         recoverable=bool(code_rule.get("recoverable", True)),
                         retry_strategy=code_rule.get("retry_strategy"),
                         suggested_fix=fix or fill(code_rule.get("fix"), {"tool": tool}),
                         details=info)

    def _refuse_out(self, name: str, call_id: str | None, error: str, message: str, *,
                    rule: str | None = None, arguments: Any = None, level: str | None = None,
                    fix: str | None = None, **details: Any) -> _Outcome:
        err = self.tool_error(error, name, message, rule=rule, fix=fix, **details)
        return _Outcome(ToolResult(call_id, name, error=err.message, tool_error=err), REFUSED,
                        arguments, level)

    def _fail_out(self, name: str, call_id: str | None, error: str, message: str, *,
                  rule: str | None = None, arguments: Any = None, level: str | None = None,
                  **details: Any) -> _Outcome:
        out = self._refuse_out(name, call_id, error, message, rule=rule, arguments=arguments,
                               level=level, **details)
        out.outcome = FAILED
        return out

    def _audit(self, out: _Outcome, start: float, origin: str) -> None:
        if self.audit is None:
            return
        r = out.result
        err = r.tool_error
        record: dict[str, Any] = {
            "tool": r.name, "call_id": r.call_id, "outcome": out.outcome,
            "error": (err.details or {}).get("error") if err else None,
            "rule": (err.details or {}).get("rule") if err else None,
            "duration_ms": round((time.monotonic() - start) * 1000, 3),
            "trust": self.trust, "level": out.level, "origin": origin,
            "arguments": sanitize_arguments(out.arguments if out.arguments is not None else {},
                                            self.policy),
        }
        record.update(out.extra)
        self.audit.write(record)


def _arguments_size(call: Any, args: Any) -> int:
    if isinstance(call, Mapping):
        fn: Mapping[str, Any] = call["function"] if isinstance(call.get("function"), Mapping) \
            else call
        for key in ("arguments", "input", "parameters", "args"):
            raw = fn.get(key)
            if isinstance(raw, str):
                return len(raw.encode("utf-8", "surrogatepass"))
    if isinstance(args, str):
        return len(args.encode("utf-8", "surrogatepass"))
    return len(json.dumps(args, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


def _run_sync(make: Callable[[], Awaitable[Any]]) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaitable(make))
    # Inside a running event loop (a notebook, a sync callback in async code): run the
    # coroutine on a private loop in a worker thread.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _awaitable(make)).result()


async def _awaitable(make: Callable[[], Awaitable[Any]]) -> Any:
    return await make()
