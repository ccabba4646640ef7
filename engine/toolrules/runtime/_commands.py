"""Running commands for `run_command` and for YAML tools with an argv template.

What is enforced (Linux; other POSIX systems alike unless noted):

- the argv is checked by the policy first (allowlist, metacharacters, path arguments);
- no shell: the argv is executed directly, the program found on the scrubbed PATH;
- the working directory is entered with fchdir() on a descriptor the jail opened;
- the environment is rebuilt: only `commands.env.set` and the `pass` names, never a
  name matching a `deny` pattern (API keys, tokens, secrets);
- setrlimit in the child before exec: CPU seconds, address space, file size, processes
  (RLIMIT_NPROC counts all processes of the user and does not bind root), open files;
- a new session (its own process group); on timeout, and after every run, the whole
  group is killed with SIGKILL, so children the command started are gone too;
- stdout and stderr are read concurrently and each cut at `commands.max_output_bytes`.

Not enforced: network access, reads through paths hidden in option values or computed
by the program itself. For hostile code, run the executor inside a container.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

from ..calls._policy import Policy
from ._context import ToolContext, ToolFailure

__all__ = ["child_environment", "command_template_handler", "run_argv"]

_RLIMITS = {"cpu_seconds": "RLIMIT_CPU", "address_space_bytes": "RLIMIT_AS",
            "file_size_bytes": "RLIMIT_FSIZE", "processes": "RLIMIT_NPROC",
            "open_files": "RLIMIT_NOFILE"}


def child_environment(policy: Policy, workspace: str,
                      source: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment: `set` (with {workspace}) plus the `pass` names present in
    `source` (default os.environ), minus every name a `deny` pattern matches."""
    src = os.environ if source is None else source
    env: dict[str, str] = {}
    for name in policy.env_pass:
        if name in src:
            env[name] = src[name]
    for name, value in policy.env_set.items():
        env[name] = value.replace("{workspace}", workspace)
    return {k: v for k, v in env.items() if not any(p.search(k) for p in policy.env_deny)}


def _limits(policy: Policy) -> list[tuple[int, int]]:
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return []
    out: list[tuple[int, int]] = []
    for key, attr in _RLIMITS.items():
        value = policy.rlimits.get(key)
        rid = getattr(resource, attr, None)
        if value is None or rid is None:
            continue
        _soft, hard = resource.getrlimit(rid)
        # Never ask for more than the hard limit: setrlimit would fail in the child.
        limit = value if hard == resource.RLIM_INFINITY else min(value, hard)
        out.append((rid, limit))
    return out


def _preexec(dir_fd: int, limits: list[tuple[int, int]]) -> Callable[[], None]:
    def setup() -> None:  # runs in the child between fork and exec: keep it minimal
        import resource

        os.fchdir(dir_fd)
        for rid, value in limits:
            resource.setrlimit(rid, (value, value))

    return setup


async def _read_capped(stream: asyncio.StreamReader | None, limit: int) -> tuple[bytes, int]:
    """(the first `limit` bytes, total bytes seen); keeps draining so the child never
    blocks on a full pipe."""
    if stream is None:
        return b"", 0
    kept = bytearray()
    total = 0
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            break
        total += len(chunk)
        if len(kept) < limit:
            kept.extend(chunk[: limit - len(kept)])
    return bytes(kept), total


async def _exited(proc: asyncio.subprocess.Process, seconds: float) -> bool:
    """Whether the process exited within `seconds`. Not `proc.wait()`: asyncio wakes
    waiters only once the pipes are closed too, and a child left in the background keeps
    them open."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    delay = 0.002
    while proc.returncode is None:
        left = deadline - loop.time()
        if left <= 0:
            return False
        await asyncio.sleep(min(delay, left))
        delay = min(delay * 2, 0.05)
    return True


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _text(data: bytes, total: int) -> str:
    text = data.decode("utf-8", "replace")
    if total > len(data):
        text += f"\n[... {total - len(data)} more bytes cut]"
    return text


async def run_argv(argv: Sequence[str], ctx: ToolContext, cwd: str = ".",
                   timeout: float | None = None, *, argument: str = "cwd",
                   output_cap: int | None = None) -> dict[str, Any]:
    """Run `argv` (already accepted by the policy) in the jail directory `cwd`.

    Returns {exit_code, stdout, stderr}; a timeout kills the process group and raises a
    TIMEOUT failure carrying what the command printed so far."""
    jail = ctx.require_jail()
    policy = ctx.policy
    seconds = min(timeout if timeout is not None else ctx.timeout, policy.timeout_max)
    dfd, _canon = jail.open_dir(cwd, argument)
    cap = output_cap if output_cap is not None else policy.max_command_output_bytes
    try:
        env = child_environment(policy, str(jail.root))
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, start_new_session=True, preexec_fn=_preexec(dfd, _limits(policy)))
    finally:
        os.close(dfd)
    readers = asyncio.gather(_read_capped(proc.stdout, cap), _read_capped(proc.stderr, cap))
    try:
        timed_out = not await _exited(proc, seconds)
    finally:
        # The whole group goes, also when the command left children behind (they would
        # keep the pipes open and outlive the call).
        _kill_group(proc.pid)
        if proc.returncode is None:
            await proc.wait()
    try:
        (out, out_total), (err, err_total) = await asyncio.wait_for(readers, 5.0)
    except TimeoutError:
        readers.cancel()
        out, out_total, err, err_total = b"", 0, b"", 0
    stdout, stderr = _text(out, out_total), _text(err, err_total)
    if timed_out:
        raise ToolFailure("TIMEOUT", f"the command was killed after {seconds:g} s",
                          seconds=seconds, stdout=stdout[-2000:], stderr=stderr[-2000:])
    return {"exit_code": proc.returncode, "stdout": stdout, "stderr": stderr}


_REF = re.compile(r"\{(\w+)\}")


def command_template_handler(template: tuple[str, ...]) -> Callable[..., Any]:
    """A handler for a YAML tool with `command: [argv...]`: each `{param}` is replaced by
    the argument's text (no shell, no format-spec evaluation), then the argv goes through
    the policy like a run_command line."""

    async def handler(context: ToolContext, **arguments: Any) -> dict[str, Any]:
        import shlex

        def sub(m: re.Match[str]) -> str:
            value = arguments.get(m.group(1))
            return "" if value is None else str(value)

        argv = [_REF.sub(sub, part) for part in template]
        ws = str(context.workspace) if context.workspace is not None else None
        checked = context.policy.command_argv(shlex.join(argv), ws)
        return await run_argv(list(checked), context)

    return handler
