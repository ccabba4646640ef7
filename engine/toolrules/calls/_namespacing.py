"""Tool namespacing: `github_search` vs `jira_search`, grouping, and keeping
only the namespaces a task needs. Separator, prefix and scores: rules/tool_selection.yaml."""

from __future__ import annotations

from typing import Any

from .._types import Tool, coerce_tools
from ._selection import SelectionRules, selection_rules
from ._validation import fill

__all__ = ["extract_namespace", "filter_tools_by_task_namespaces", "group_tools_by_namespace",
           "namespace_tools"]


def _sep(rules: SelectionRules, separator: str | None) -> str:
    return separator if separator else rules.namespaces.get("separator", "_")


def namespace_tools(tools: Any, namespace: str, separator: str | None = None, *,
                    engine: Any = None) -> tuple[Tool, ...]:
    """Prefix every tool name with `namespace` and mark its description (idempotent)."""
    rules = selection_rules(engine)
    sep = _sep(rules, separator)
    prefix = fill(rules.namespaces.get("description_prefix", ""), {"namespace": namespace}) or ""
    out = []
    for t in coerce_tools(tools):
        name = t.name if t.name.startswith(f"{namespace}{sep}") else f"{namespace}{sep}{t.name}"
        desc = t.description if not prefix or t.description.startswith(prefix) \
            else f"{prefix}{t.description}"
        out.append(Tool(name=name, description=desc, parameters=t.parameters))
    return tuple(out)


def extract_namespace(tool_name: str, separator: str | None = None, *,
                      engine: Any = None) -> str | None:
    """The part before the first separator (`github_search` -> `github`), or None."""
    sep = _sep(selection_rules(engine), separator)
    head, found, tail = tool_name.partition(sep)
    return head if found and head and tail else None


def group_tools_by_namespace(tools: Any, separator: str | None = None, *,
                             engine: Any = None) -> dict[str | None, tuple[Tool, ...]]:
    """namespace (None for plain names) -> its tools, in the given order."""
    sep = _sep(selection_rules(engine), separator)
    groups: dict[str | None, list[Tool]] = {}
    for t in coerce_tools(tools):
        groups.setdefault(extract_namespace(t.name, sep, engine=engine), []).append(t)
    return {k: tuple(v) for k, v in groups.items()}


def filter_tools_by_task_namespaces(tools: Any, task_hint: str, max_namespaces: int | None = None,
                                    separator: str | None = None, *,
                                    engine: Any = None) -> tuple[Tool, ...]:
    """Only the tools of the `max_namespaces` namespaces most relevant to `task_hint`
    (plus every tool without a namespace), in their original order."""
    rules = selection_rules(engine)
    ns_rules = rules.namespaces
    sep = _sep(rules, separator)
    limit = max_namespaces if max_namespaces is not None else ns_rules.get("max_namespaces", 3)
    tools = coerce_tools(tools)
    groups = group_tools_by_namespace(tools, sep, engine=engine)
    task_lower = task_hint.lower()
    task_words = rules.words(task_hint)
    scored: list[tuple[float, int, str]] = []
    for order, (ns, members) in enumerate(groups.items()):
        if ns is None:
            continue
        score = ns_rules.get("namespace_in_task", 10.0) if ns.lower() in task_lower else 0.0
        for t in members:
            base = t.name.split(sep, 1)[-1].lower()
            if base and base in task_lower:
                score += ns_rules.get("tool_name_in_task", 5.0)
            score += ns_rules.get("description_word", 0.5) * len(rules.words(t.description)
                                                                 & task_words)
        scored.append((score, order, ns))
    scored.sort(key=lambda x: (-x[0], x[1]))
    keep: set[str | None] = {ns for _, _, ns in scored[:limit]} | {None}
    return tuple(t for t in tools if extract_namespace(t.name, sep, engine=engine) in keep)
