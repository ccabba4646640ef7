"""CLI commands contributed by feature modules (translate, parse, render, bench ...).

Each feature defines its click commands in its own `_cli_<feature>.py` and lists them
here, so `cli.py` stays the core (lint, inspect, golden).
"""

from __future__ import annotations

import click

from ._registry import optional_module

__all__ = ["COMMANDS"]

_MODULES = ("_cli_models", "_cli_dialects", "_cli_providers", "_cli_emulation", "_cli_bench")


def _collect() -> list[click.Command]:
    out: list[click.Command] = []
    for name in _MODULES:
        mod = optional_module(name)
        if mod is None:
            continue
        out.extend(getattr(mod, "COMMANDS", []))
    return out


COMMANDS = _collect()
