"""CLI: `toolrules bench`."""

from __future__ import annotations

import click

__all__ = ["COMMANDS"]


@click.command()
@click.argument("sections", nargs=-1)
@click.option("--quick", is_flag=True, help="Fewer repetitions.")
@click.option("--only", multiple=True, help="Run only these sections (models, dialects ...).")
def bench(sections: tuple[str, ...], quick: bool, only: tuple[str, ...]) -> None:
    """Measure load time, lookups, parsing, streaming and rendering (figures, not pass/fail).
    SECTIONS (or --only) picks sections: `toolrules bench serve`."""
    from .._engine import load
    from ..bench import SECTIONS

    only = (*only, *sections)

    engine = load(use_env=False)
    for section, run in SECTIONS:
        if only and section not in only:
            continue
        click.echo(f"[{section}]")
        for label, figure in run(engine, quick):
            click.echo(f"  {label:64} {figure}")


COMMANDS = [bench]
