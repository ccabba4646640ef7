"""The `toolrules` command group and its core commands: lint, inspect, golden.

User mistakes (a missing file, a broken rule set, an unknown name) print one clear
message with a hint on stderr and exit 1 or 2; tracebacks are for bugs only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .._version import __version__
from ._common import echo_json, fail, get_engine

__all__ = ["main"]


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
    from .._engine import lint_rules as run_lint
    from ..rules._loader import discover, layers_for

    for p in paths:
        if not Path(p).exists():
            fail(f"no such file or directory: {p}")
    rs = discover(layers_for(paths, use_env=not no_bundled, include_bundled=not no_bundled))
    problems = run_lint(rs)
    errors = sum(p.level == "error" for p in problems)
    if fmt == "json":
        echo_json([p.as_dict() for p in problems])
    elif fmt == "github":
        for prob in problems:
            click.echo(f"::{prob.level} file={prob.path},line={prob.line},col={prob.col},"
                       f"title={prob.check}::{prob.message}")
    else:
        for prob in problems:
            click.echo(prob.format())
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
    from ..models._rules import spec_dict

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
    from ..golden import check

    sys.exit(check(pattern, echo=click.echo))


@golden.command("regen")
@click.option("--filter", "pattern", default="*", show_default=True,
              help="Glob over golden file paths (e.g. 'dialects/hermes*').")
def golden_regen(pattern: str) -> None:
    """Rewrite golden files (refuses output that fails its invariants)."""
    from ..golden import regen

    sys.exit(regen(pattern, echo=click.echo))
