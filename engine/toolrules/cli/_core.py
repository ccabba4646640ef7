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
@click.argument("model", required=False)
@click.option("--template", "template_file", metavar="FILE",
              help="A model's Jinja chat template (chat_template.jinja, or a "
                   "tokenizer_config.json holding it): what it enforces, drops and writes.")
@click.option("--gguf", "gguf_file", metavar="FILE",
              help="A GGUF weights file: its tokenizer.chat_template and bos/eos tokens.")
@click.option("--server", metavar="URL",
              help="A running model server that says which template it renders "
                   "(llama-server: GET /props), e.g. http://127.0.0.1:8080.")
@click.option("--provider", default="llamacpp", show_default=True,
              help="With --server: the provider rule that says how to ask it.")
@click.option("--bos-token", default=None, help="The BOS token passed to the template "
              "(default: what the GGUF, server or tokenizer_config.json says, else empty).")
@click.option("--eos-token", default=None, help="The EOS token passed to the template.")
@click.option("--write-rule", "write_rule", metavar="DIR",
              help="Also write DIR/models/NAME.yaml: a model-family rule holding what the "
                   "template showed (turn constraints, dialect, reasoning).")
@click.option("--name", help="With --write-rule: the family name (default: from the file "
              "or the served model).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(exists=True),
              help="Extra rule directories (overlays).")
def inspect(model: str | None, template_file: str | None, gguf_file: str | None,
            server: str | None, provider: str, bos_token: str | None, eos_token: str | None,
            write_rule: str | None, name: str | None, as_json: bool,
            rule_paths: tuple[str, ...]) -> None:
    """Show how MODEL is parsed and resolved (spec, capability, dialect, deciding rules), or
    what a chat template enforces, drops and writes.

    \b
    toolrules inspect Qwen/Qwen3-8B
    toolrules inspect --template chat_template.jinja --write-rule my_rules/
    toolrules inspect --gguf model.gguf --json
    toolrules inspect --server http://127.0.0.1:8080

    A template is rendered in a sandbox with probe conversations: what raises (with the
    template's own message) and what it silently drops give the turn constraints
    (capability turn_*); a probe call read back by every dialect names the one it writes.
    """
    sources = [x for x in (model, template_file, gguf_file, server) if x is not None]
    if len(sources) != 1:
        fail("give exactly one of MODEL, --template FILE, --gguf FILE or --server URL",
             "toolrules inspect --help", code=2)
    if model is None:
        from ._inspect import inspect_source, load_source

        engine = get_engine(rule_paths)
        src = load_source(engine, template_file, gguf_file, server, provider, bos_token,
                          eos_token)
        inspect_source(engine, src, as_json, write_rule, name)
        return
    if write_rule is not None:
        fail("--write-rule writes what a chat template shows: use it with --template, --gguf "
             "or --server", code=2)
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
