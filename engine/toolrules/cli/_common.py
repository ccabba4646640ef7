"""What every command shares: clear errors instead of tracebacks, reading inputs, the engine.

User mistakes (a missing file, a broken rule set, an unknown name) print one clear
message with a hint on stderr and exit 1 or 2; tracebacks are for bugs only.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

__all__ = ["echo_json", "fail", "get_engine", "guard", "read_json_arg", "read_text_arg"]


def fail(message: str, hint: str | None = None, code: int = 1) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    sys.exit(code)


def get_engine(paths: tuple[str, ...] = ()) -> Any:
    from .._engine import load
    from .._errors import RuleError

    try:
        return load(paths=list(paths))
    except RuleError as exc:
        click.echo(str(exc), err=True)
        click.echo("hint: run `toolrules lint` and fix the files it names", err=True)
        sys.exit(1)


def read_json_arg(value: str, what: str) -> Any:
    """JSON from a file path or '-' (stdin), with a clear error."""
    try:
        text = sys.stdin.read() if value == "-" else Path(value).read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"cannot read {what} {value!r}: {exc.strerror}", "pass a JSON file path or - for stdin")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{what} {value!r} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")


def read_text_arg(value: str, what: str) -> str:
    try:
        return sys.stdin.read() if value == "-" else Path(value).read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"cannot read {what} {value!r}: {exc.strerror}", "pass a file path or - for stdin")
    return ""


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def jail_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--workspace/-w, --trust and --policy: where the tools may act and under which
    policy (`run`, `chat`, `exec`)."""
    options = [
        click.option("--workspace", "-w", default=".", show_default=True,
                     type=click.Path(file_okay=False),
                     help="The directory the tools may touch (the jail)."),
        click.option("--trust", default="workspace", show_default=True,
                     help="Trust level: discovery, read_only, workspace, shell or full (the "
                          "policy's levels)."),
        click.option("--policy", "policy_id", default="default", show_default=True,
                     help="Policy id (rules/policies/<id>.yaml, overlays included)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn toolrules' own errors into a message instead of a traceback."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from .._errors import ToolrulesError

        try:
            return fn(*args, **kwargs)
        except ToolrulesError as exc:
            fail(str(exc))

    return wrapper
