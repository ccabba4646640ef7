"""Opt-in prose heuristics: "I'll use the search tool" -> a call to an offered tool.

The last resort, after every structured call format: used only when a caller asks for
it (`text_parser(heuristics=True)`), only when no structured call was found, and only
for names of tools that were offered. Patterns are data: rules/heuristics.yaml.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .._types import ToolCall

__all__ = ["heuristic_finder"]


def heuristic_finder(engine: Any, tools: dict[str, Any]) -> Callable[[str], list[ToolCall]]:
    table = engine.ruleset.table("heuristics") or {}
    patterns = [(re.compile(p["pattern"]), p.get("arguments") or {})
                for p in table.get("patterns", []) or []]
    names = {n.lower(): n for n in tools}

    def find(text: str) -> list[ToolCall]:
        out: list[ToolCall] = []
        seen: set[str] = set()
        for rx, arg_groups in patterns:
            for m in rx.finditer(text[:65536]):
                name = names.get((m.groupdict().get("name") or "").lower())
                if name is None or name in seen:
                    continue
                args: dict[str, Any] = {}
                props = (tools.get(name) or {}).get("properties") or {}
                for group, param in arg_groups.items():
                    value = m.groupdict().get(group)
                    if value is not None and (param in props or not props):
                        args[param] = value.strip()
                seen.add(name)
                out.append(ToolCall(id=f"call_inferred_{len(out)}", name=name, arguments=args))
        return out

    return find
