"""Timing helper shared by the bench sections."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

__all__ = ["timeit"]


def timeit(fn: Callable[[], Any], repeat: int = 7, number: int = 1) -> float:
    """Median seconds per call over `repeat` rounds of `number` calls."""
    rounds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        rounds.append((time.perf_counter() - t0) / number)
    return statistics.median(rounds)
