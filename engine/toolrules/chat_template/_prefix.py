"""How much of a previous prompt a new one keeps as its prefix - what a server's prompt
cache reuses - and where the two part."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["around", "common_prefix"]


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """The length of the longest common prefix of two strings or token lists."""
    n = min(len(a), len(b))
    if isinstance(a, str) and isinstance(b, str):
        lo, hi = 0, n  # bisect on slices: fast for long prompts that mostly agree
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if a[:mid] == b[:mid]:
                lo = mid
            else:
                hi = mid - 1
        return lo
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def around(text: str, at: int, width: int = 30) -> str:
    """`width` characters each side of position `at`, as a JSON string (escapes shown)."""
    return json.dumps(text[max(0, at - width):at + width], ensure_ascii=False)
