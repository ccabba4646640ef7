"""Fitting a tool set into a small context window (context overflow), driven by
rules/tool_selection.yaml: relevance ranking against a task hint, description cutting,
optional-parameter removal, a token budget and a tool-count limit."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .._errors import ParseError, UnknownRuleError
from .._types import Capability, Tool, coerce_tools
from ..rules._default import resolve_engine

__all__ = ["SelectionRules", "normalize_choice", "optimize_tool_definitions", "selection_rules"]

_WORD = re.compile(r"[a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def name_words(name: str) -> list[str]:
    """`readFile`, `read_file`, `read-file` -> ['read', 'file']."""
    return _WORD.findall(_CAMEL.sub("_", name).lower())


@dataclass(frozen=True, slots=True)
class SelectionRules:
    """rules/tool_selection.yaml compiled once per engine."""

    budget: dict[str, Any]
    relevance: dict[str, Any]
    namespaces: dict[str, Any]
    stop_words: frozenset[str]

    @classmethod
    def from_table(cls, table: Any) -> SelectionRules:
        if not isinstance(table, dict):
            raise UnknownRuleError("rule table", "tool_selection", ())
        rel = dict(table["relevance"])
        return cls(dict(table["budget"]), rel, dict(table["namespaces"]),
                   frozenset(w.lower() for w in rel.get("stop_words") or ()))

    def words(self, text: str) -> set[str]:
        shortest = self.relevance.get("min_word_chars", 3)
        return {w for w in _WORD.findall(text.lower())
                if len(w) >= shortest and w not in self.stop_words}

    def relevance_score(self, tool: Tool, task_lower: str, task_words: set[str]) -> float:
        r = self.relevance
        score = 0.0
        if tool.name.lower() in task_lower:
            score += r.get("name_in_task", 10.0)
        score += r.get("name_word", 3.0) * len(set(name_words(tool.name)) & task_words)
        score += r.get("description_word", 0.5) * len(self.words(tool.description) & task_words)
        return score

    def rank(self, tools: tuple[Tool, ...], task_hint: str) -> tuple[Tool, ...]:
        """Most relevant first; ties keep their order."""
        task_lower = task_hint.lower()
        task_words = self.words(task_hint)
        scores = [self.relevance_score(t, task_lower, task_words) for t in tools]
        order = sorted(range(len(tools)), key=lambda i: -scores[i])
        return tuple(tools[i] for i in order)

    def tokens(self, tool: Tool) -> int:
        chars = len(tool.name) + len(tool.description) + len(
            json.dumps(tool.parameters, ensure_ascii=False, default=str))
        return int(chars / self.budget.get("chars_per_token", 4)) + 1

    def optimize(self, tools: tuple[Tool, ...], capability: Capability,
                 task_hint: str | None) -> tuple[Tool, ...]:
        b = self.budget
        window = capability.context_window
        if window is None or window >= b.get("no_limit_from", 32000):
            return tools
        budget = int(window * b.get("share", 0.2))
        if task_hint:
            tools = self.rank(tools, task_hint)
        if window < b.get("truncate_below", 8192):
            limit = b.get("description_chars", 200)
            ellipsis = b.get("ellipsis", "...")
            tools = tuple(replace(t, description=cut(t.description, limit, ellipsis))
                          if len(t.description) > limit else t for t in tools)
        costs = [self.tokens(t) for t in tools]
        if sum(costs) > budget and window < b.get("drop_optional_below", 0):
            tools = tuple(drop_optional(t) for t in tools)
            costs = [self.tokens(t) for t in tools]
        selected: list[Tool] = []
        used = 0
        for tool, cost in zip(tools, costs):
            if used + cost > budget or len(selected) >= b.get("max_tools", len(tools)):
                break
            selected.append(tool)
            used += cost
        return tuple(selected)


def cut(text: str, limit: int, ellipsis: str) -> str:
    """`text` cut to at most `limit` characters at a word boundary, plus `ellipsis`."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = head.rfind(" ")
    if space > limit * 0.6:
        head = head[:space]
    return head.rstrip(" ,;:.") + ellipsis


def drop_optional(tool: Tool) -> Tool:
    params = tool.parameters
    if not isinstance(params, dict) or not isinstance(params.get("properties"), dict):
        return tool
    required = [r for r in params.get("required") or [] if isinstance(r, str)]
    props = {k: v for k, v in params["properties"].items() if k in required}
    if len(props) == len(params["properties"]):
        return tool
    return replace(tool, parameters={**params, "properties": props})


def selection_rules(engine: Any = None) -> SelectionRules:
    engine = resolve_engine(engine)
    return engine._cached("rules:tool_selection",
                          lambda: SelectionRules.from_table(engine.ruleset.table("tool_selection")))


def optimize_tool_definitions(tools: Any, capability: Capability | str | None = None,
                              task_hint: str | None = None, *, engine: Any = None) -> tuple[Tool, ...]:
    """The tools a model with this capability should see (the context budget).

    Windows that are unknown or at least `budget.no_limit_from` tokens keep every tool.
    Smaller ones: tools ranked by relevance to `task_hint`, descriptions cut below
    `truncate_below`, optional parameters dropped when still over budget below
    `drop_optional_below`, then the most relevant tools that fit `share` of the window,
    at most `max_tools`. `capability` may be a Capability or a model id.
    """
    engine = resolve_engine(engine)
    cap = capability if isinstance(capability, Capability) else \
        engine.capability(capability) if capability is not None else Capability()
    return selection_rules(engine).optimize(coerce_tools(tools), cap, task_hint)


# ---------------------------------------------------------------- tool choice

def normalize_choice(choice: Any) -> tuple[str, str | None] | None:
    """("auto"|"none"|"required"|"named", name) from the forms users pass."""
    if choice is None:
        return None
    if isinstance(choice, Tool):
        return "named", choice.name
    if isinstance(choice, str):
        key = choice.strip()
        low = key.lower()
        if low in ("auto", "none", "required"):
            return low, None
        if low == "any":
            return "required", None
        if not key:
            raise ParseError("tool_choice is an empty string")
        return "named", key
    if isinstance(choice, Mapping):
        fn = choice["function"] if isinstance(choice.get("function"), Mapping) else choice
        name = fn.get("name")
        if isinstance(name, str) and name:
            return "named", name
        kind = str(choice.get("type") or choice.get("mode") or "").lower()
        if kind in ("auto", "none", "required"):
            return kind, None
        if kind == "any":
            return "required", None
    raise ParseError(f"cannot read tool_choice {choice!r}: use auto, none, required, a tool name "
                     "or {'type': 'function', 'function': {'name': ...}}")
