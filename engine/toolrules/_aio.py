"""Small asyncio helpers shared by the HTTP client and the proxy."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["time_out"]


def time_out(waiter: asyncio.Future[Any]) -> None:
    """Fail `waiter` with TimeoutError unless it is already done (a `call_later` target)."""
    if not waiter.done():
        waiter.set_exception(TimeoutError())
