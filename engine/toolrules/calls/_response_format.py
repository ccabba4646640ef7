"""Tool result size and verbosity (response format control), driven by
rules/response_format.yaml: truncation with hints that steer the agent to cheaper queries,
and concise/detailed list formatting through a template (results/list.j2)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any

from .._errors import UnknownRuleError
from ..rules._default import resolve_engine
from ._validation import fill

__all__ = ["ResponseFormat", "ToolResultConfig", "TruncatedResult", "format_list_result",
           "truncate_result"]


class ResponseFormat(StrEnum):
    """How much a tool result says."""

    CONCISE = "concise"
    """Names and essential data only."""
    DETAILED = "detailed"
    """Ids and metadata too (when later calls need them)."""


@dataclass(frozen=True, slots=True)
class ToolResultConfig:
    """How a tool result is formatted. A field left None takes rules/response_format.yaml
    `defaults` (concise, 10 items, no ids, 25000 tokens, no metadata as bundled)."""

    format: ResponseFormat | None = None
    """Verbosity."""
    max_items: int | None = None
    """Items shown by format_list_result."""
    include_ids: bool | None = None
    """Show ids (detailed format)."""
    truncate_at: int | None = None
    """Token estimate above which truncate_result cuts."""
    include_metadata: bool | None = None
    """Show other fields (detailed format)."""

    def resolved(self, defaults: Mapping[str, Any]) -> ToolResultConfig:
        values = {f.name: defaults.get(f.name) for f in fields(self) if getattr(self, f.name) is None}
        out = replace(self, **values)
        return replace(out, format=ResponseFormat(out.format or ResponseFormat.CONCISE))


@dataclass(frozen=True, slots=True)
class TruncatedResult:
    """A result after the size check, with a hint when it was cut."""

    content: str
    truncated: bool
    total_available: int | None = None
    hint: str | None = None


class ResponseRules:
    """rules/response_format.yaml compiled once per engine."""

    def __init__(self, table: Any):
        if not isinstance(table, dict):
            raise UnknownRuleError("rule table", "response_format", ())
        self.defaults = dict(table["defaults"])
        self.chars_per_token: float = table.get("chars_per_token", 4)
        self.clean_break: float = table.get("clean_break", 0.8)
        self.marker: str = table.get("truncation_marker", "")
        self.list_template: str = table.get("list_template", "results/list.j2")
        self.max_extras: int = table.get("max_extras", 3)
        self.hints = [(re.compile(h["name"]), h["text"]) for h in table.get("hints") or ()]
        self.default_hint: str = table.get("default_hint", "")

    def hint_for(self, tool_name: str | None, total: int | None) -> str:
        text = self.default_hint
        if tool_name:
            for rx, hint in self.hints:
                if rx.search(tool_name):
                    text = hint
                    break
        return fill(text, {"total": total if total is not None else "many"}) or ""

    def truncate(self, result: str, config: ToolResultConfig, total: int | None,
                 tool_name: str | None) -> TruncatedResult:
        tokens = int(config.resolved(self.defaults).truncate_at or 0)
        if len(result) / self.chars_per_token <= tokens:
            return TruncatedResult(content=result, truncated=False, total_available=total)
        limit = int(tokens * self.chars_per_token)
        head = result[:limit]
        newline = head.rfind("\n")
        if newline > limit * self.clean_break:
            head = head[:newline]
        return TruncatedResult(content=head + self.marker, truncated=True, total_available=total,
                               hint=self.hint_for(tool_name, total))


def response_rules(engine: Any = None) -> ResponseRules:
    engine = resolve_engine(engine)
    return engine._cached("rules:response_format",
                          lambda: ResponseRules(engine.ruleset.table("response_format")))


def truncate_result(result: str, config: ToolResultConfig | None = None,
                    total_available: int | None = None, *, tool_name: str | None = None,
                    engine: Any = None) -> TruncatedResult:
    """Cut `result` when its token estimate exceeds `truncate_at`, at a clean line break,
    and say how to ask for less (a hint chosen by `tool_name`)."""
    return response_rules(engine).truncate(result, config or ToolResultConfig(),
                                           total_available, tool_name)


def format_list_result(items: Sequence[Mapping[str, Any]], config: ToolResultConfig | None = None,
                       name_key: str = "name", id_key: str = "id", *, engine: Any = None) -> str:
    """A list result as text: names only (concise) or with ids and fields (detailed)."""
    engine = resolve_engine(engine)
    rules = response_rules(engine)
    cfg = (config or ToolResultConfig()).resolved(rules.defaults)
    detailed = cfg.format is ResponseFormat.DETAILED
    views = []
    for item in list(items)[: int(cfg.max_items or 0)]:
        mapping = item if isinstance(item, Mapping) else {}
        name = mapping.get(name_key, "unknown" if detailed else str(item))
        extras = [f"{k}={v}" for k, v in mapping.items() if k not in (name_key, id_key)]
        views.append({"name": name, "id": mapping.get(id_key, ""),
                      "extras": extras[: rules.max_extras]})
    return engine.render_template(rules.list_template, {
        "items": views, "total": len(items), "detailed": detailed,
        "include_ids": bool(cfg.include_ids), "include_metadata": bool(cfg.include_metadata),
    })
