"""The `toolrules` command line.

User mistakes (a missing file, a broken rule set, an unknown name) print one clear
message with a hint on stderr and exit 1 or 2; tracebacks are for bugs only.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ._version import __version__

__all__ = ["main"]


def fail(message: str, hint: str | None = None, code: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    sys.exit(code)


def get_engine(paths: tuple[str, ...] = ()) -> Any:
    from ._engine import load
    from ._errors import RuleError

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
    return None


def read_text_arg(value: str, what: str) -> str:
    try:
        return sys.stdin.read() if value == "-" else Path(value).read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"cannot read {what} {value!r}: {exc.strerror}", "pass a file path or - for stdin")
    return ""


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn toolrules' own errors into a message instead of a traceback."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ._errors import ToolrulesError

        try:
            return fn(*args, **kwargs)
        except ToolrulesError as exc:
            fail(str(exc))

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="toolrules")
def main() -> None:
    """Tool calling for every model and provider, driven by rules/ (YAML, Jinja, Lark)."""


@main.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json", "github"]), default="text",
              show_default=True, help="Output format of the diagnostics.")
@click.option("--no-bundled", is_flag=True, help="Lint only PATHS, without the bundled rules.")
def lint(paths: tuple[str, ...], fmt: str, no_bundled: bool) -> None:
    """Validate rule files (bundled rules plus overlay PATHS): schemas and cross-references.

    Exit status 1 when there is an error. PATHS are overlay directories laid out like
    rules/ (models/, providers/, dialects/, *.yaml, templates/, grammars/).
    """
    from ._lint import lint as run_lint
    from ._loader import discover, layers_for

    for p in paths:
        if not Path(p).exists():
            fail(f"no such file or directory: {p}")
    rs = discover(layers_for(paths, use_env=not no_bundled, include_bundled=not no_bundled))
    problems = run_lint(rs)
    errors = sum(p.level == "error" for p in problems)
    if fmt == "json":
        echo_json([p.as_dict() for p in problems])
    elif fmt == "github":
        for p in problems:
            click.echo(f"::{p.level} file={p.path},line={p.line},col={p.col},"
                       f"title={p.check}::{p.message}")
    else:
        for p in problems:
            click.echo(p.format())
        n = sum(len(v) for v in rs.files.values())
        warnings = len(problems) - errors
        click.echo(f"{n} rule files, {len(rs.templates)} templates, {len(rs.grammars)} grammars: "
                   f"{errors} error(s), {warnings} warning(s)", err=True)
    sys.exit(1 if errors else 0)


@main.command()
@click.argument("model")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(exists=True),
              help="Extra rule directories (overlays).")
def inspect(model: str, as_json: bool, rule_paths: tuple[str, ...]) -> None:
    """Show how MODEL is parsed and resolved: spec, capability, dialect, deciding rules."""
    from ._models import spec_dict

    engine = get_engine(rule_paths)
    res = engine.resolve_model(model)
    cap = res.capability
    out = {"model": model, "spec": spec_dict(res.spec), "capability": cap.non_default(),
           "dialect": cap.dialect, "decided_by": list(res.trace)}
    if as_json:
        echo_json(out)
        return
    click.echo(f"model      {model}")
    click.echo("spec       " + ", ".join(f"{k}={v}" for k, v in out["spec"].items()))
    if not res.spec.known:
        click.echo("           (unknown family: conservative defaults, JSON emulation)")
    click.echo(f"dialect    {cap.dialect or '-'}")
    click.echo("capability")
    from dataclasses import fields

    for f in fields(cap):
        value = getattr(cap, f.name)
        mark = "*" if f.name in out["capability"] else " "
        click.echo(f"  {mark} {f.name:30} {value}")
    click.echo("decided by")
    for line in res.trace:
        click.echo(f"    {line}")


@main.group()
def golden() -> None:
    """Golden fixtures in golden/: check them or regenerate them."""


@golden.command("check")
@click.option("--filter", "pattern", default="*", show_default=True,
              help="Glob over golden file paths (e.g. 'models/llama*').")
def golden_check(pattern: str) -> None:
    """Regenerate every golden file in memory and fail on any difference."""
    from ._golden import check

    sys.exit(check(pattern, echo=click.echo))


@golden.command("regen")
@click.option("--filter", "pattern", default="*", show_default=True,
              help="Glob over golden file paths (e.g. 'dialects/hermes*').")
def golden_regen(pattern: str) -> None:
    """Rewrite golden files (refuses output that fails its invariants)."""
    from ._golden import regen

    sys.exit(regen(pattern, echo=click.echo))


def _register_extra_commands() -> None:
    """Feature modules add their commands here (kept out of the way of import time)."""
    from . import _cli_extra

    for cmd in _cli_extra.COMMANDS:
        main.add_command(cmd)


_register_extra_commands()


if __name__ == "__main__":  # pragma: no cover
    main()
