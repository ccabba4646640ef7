"""CLI: `toolrules bench`."""

from __future__ import annotations

import click

__all__ = ["COMMANDS"]


@click.command()
@click.argument("sections", nargs=-1)
@click.option("--quick", is_flag=True, help="Fewer repetitions.")
@click.option("--only", multiple=True, help="Run only these sections (models, dialects ...).")
@click.option("--check", is_flag=True,
              help="Exit 1 when a figure held to a limit is over it (e.g. `toolrules bench "
                   "hostile --check`: the parser's worst case over hostile input).")
def bench(sections: tuple[str, ...], quick: bool, only: tuple[str, ...], check: bool) -> None:
    """Measure load time, lookups, parsing, streaming and rendering (figures, not pass/fail).
    SECTIONS (or --only) picks sections: `toolrules bench serve`. Figures held to a limit
    say whether they are within it; --check turns one over its limit into exit 1."""
    from .._engine import load
    from ..bench import SECTIONS

    only = (*only, *sections)
    known = [name for name, _ in SECTIONS]
    unknown = [s for s in only if s not in known]
    if unknown:
        raise click.UsageError(f"unknown section(s) {', '.join(unknown)}; known: "
                               f"{', '.join(known)}")
    engine = load(use_env=False)
    over: list[str] = []
    for section, run in SECTIONS:
        if only and section not in only:
            continue
        click.echo(f"[{section}]")
        for label, figure, *limit in run(engine, quick):
            verdict = f"  [{limit[0]}]" if limit else ""
            click.echo(f"  {label:64} {figure}{verdict}")
            if limit and limit[0] != "ok":
                over.append(f"{section}: {label}: {figure}")
    if check and over:
        for line in over:
            click.echo(f"over the limit: {line}", err=True)
        raise SystemExit(1)


COMMANDS = [bench]
