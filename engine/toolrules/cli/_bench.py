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
@click.option("--template", "templates", multiple=True, type=click.Path(exists=True,
              dir_okay=False), help="prefix: a chat template (Jinja, as a server renders it) "
              "to replay the sessions into, instead of the bundled bench templates "
              "(repeatable).")
@click.option("--session", "sessions", multiple=True, type=click.Path(exists=True,
              dir_okay=False), help="prefix: a recorded session (JSON lines, .xz/.gz) "
              "instead of the bundled ones (repeatable).")
@click.option("--local", is_flag=True,
              help="prefix: also serve a recorded session from the embedded model (a "
                   "llama-server stand-in around llama-cpp-python) and count the prompt "
                   "tokens it evaluates, beside the cached tokens the client is told.")
@click.option("--unfitted", is_flag=True,
              help="prefix: the route keeps the rules' configuration instead of the one the "
                   "template's inspection gives (what the template does to prompts the "
                   "proxy has not fitted to it).")
def bench(sections: tuple[str, ...], quick: bool, only: tuple[str, ...], check: bool,
          templates: tuple[str, ...], sessions: tuple[str, ...], local: bool,
          unfitted: bool) -> None:
    """Measure load time, lookups, parsing, streaming and rendering (figures, not pass/fail).
    SECTIONS (or --only) picks sections: `toolrules bench serve`. Figures held to a limit
    say whether they are within it; --check turns one over its limit into exit 1.
    `toolrules bench prefix [--template FILE] [--session FILE] [--local] [--unfitted]`:
    how much of each turn's prompt an agent session keeps from the last (a server's
    cache reuse)."""
    from .._engine import load
    from ..bench import SECTION_OPTIONS, SECTIONS

    only = (*only, *sections)
    known = [name for name, _ in SECTIONS]
    unknown = [s for s in only if s not in known]
    if unknown:
        raise click.UsageError(f"unknown section(s) {', '.join(unknown)}; known: "
                               f"{', '.join(known)}")
    given = {"templates": templates, "sessions": sessions, "local": local,
             "unfitted": unfitted}
    asked = [name for name, value in given.items() if value]
    takers = [s for s, opts in SECTION_OPTIONS.items() if set(asked) <= set(opts)]
    if asked and not any(s in only for s in takers):
        raise click.UsageError(f"--{asked[0].rstrip('s')} applies to the "
                               f"{' / '.join(takers) or 'no'} section: name it "
                               f"(`toolrules bench {takers[0] if takers else ''} ...`)")
    engine = load(use_env=False)
    over: list[str] = []
    for section, run in SECTIONS:
        if only and section not in only:
            continue
        click.echo(f"[{section}]")
        options = {k: v for k, v in given.items() if k in SECTION_OPTIONS.get(section, ())}
        for label, figure, *limit in run(engine, quick, **options):
            verdict = f"  [{limit[0]}]" if limit else ""
            click.echo(f"  {label:64} {figure}{verdict}")
            if limit and limit[0] != "ok":
                over.append(f"{section}: {label}: {figure}")
    if check and over:
        for line in over:
            click.echo(f"over the limit: {line}", err=True)
        raise SystemExit(1)


COMMANDS = [bench]
