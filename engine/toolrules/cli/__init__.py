"""The `toolrules` command line: the core group (lint, inspect, golden) plus the commands
of each concern, one module each."""

from __future__ import annotations

from . import (
    _bench,
    _chat,
    _dialects,
    _emulation,
    _eval,
    _loop,
    _mcp,
    _models,
    _providers,
    _runtime,
    _serve,
)
from ._core import main

__all__ = ["main"]

for _module in (_models, _dialects, _providers, _emulation, _runtime, _loop, _chat, _eval,
                _serve, _bench, _mcp):
    for _command in _module.COMMANDS:
        main.add_command(_command)
