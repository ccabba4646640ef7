"""Tool engineering: description audit and enhancement (rules/tool_audit.yaml) and
read/write classification for parallel execution planning (rules/tool_classes.yaml)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .._errors import UnknownRuleError
from .._types import Tool, ToolCall, coerce_tool, coerce_tools
from ..rules._default import resolve_engine
from ._selection import name_words
from ._validation import fill

__all__ = [
    "ExecutionPlan",
    "ToolClassification",
    "ToolDescriptionQuality",
    "audit_tool_description",
    "audit_tool_set",
    "classify_tool",
    "enhance_tool_description",
    "plan_parallel_execution",
]


# ---------------------------------------------------------------- description audit

@dataclass(frozen=True, slots=True)
class ToolDescriptionQuality:
    """How LLM-friendly a tool description is; `score` is the share of checks passed."""

    has_example_usage: bool = False
    """The description shows a usage example."""
    has_edge_cases: bool = False
    """It mentions edge cases or warnings."""
    has_input_format: bool = False
    """It states the expected input format."""
    has_clear_boundaries: bool = False
    """It says when not to use the tool."""
    params_unambiguous: bool = False
    """No parameter has a vague name (user_id, not user)."""
    advice: tuple[str, ...] = ()
    """What to add, one line per failed check (from rules/tool_audit.yaml)."""

    @property
    def score(self) -> float:
        checks = (self.has_example_usage, self.has_edge_cases, self.has_input_format,
                  self.has_clear_boundaries, self.params_unambiguous)
        return sum(checks) / len(checks)

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(name for name in ("has_example_usage", "has_edge_cases", "has_input_format",
                                       "has_clear_boundaries", "params_unambiguous")
                     if not getattr(self, name))


class AuditRules:
    """rules/tool_audit.yaml compiled once per engine."""

    def __init__(self, table: Any):
        if not isinstance(table, dict):
            raise UnknownRuleError("rule table", "tool_audit", ())
        self.checks: dict[str, tuple[tuple[str, ...], tuple[re.Pattern[str], ...], str]] = {}
        for name, spec in table["checks"].items():
            self.checks[name] = (tuple(m.lower() for m in spec.get("markers") or ()),
                                 tuple(re.compile(p) for p in spec.get("patterns") or ()),
                                 spec.get("advice", ""))
        self.ambiguous = frozenset(n.lower() for n in table.get("ambiguous_parameter_names") or ())
        self.ambiguous_advice: str = table.get("ambiguous_advice", "")
        enhance = table.get("enhance") or {}
        self.good_score: float = enhance.get("good_score", 0.8)
        self.parameters_line: str = enhance.get("parameters", "")
        self.parameter_item: str = enhance.get("parameter", "{name}: {type}{required}")
        self.required_mark: str = enhance.get("required_mark", "")
        self.boundaries = [(re.compile(b["name"]), b["text"]) for b in enhance.get("boundaries") or ()]

    def audit(self, tool: Tool) -> ToolDescriptionQuality:
        desc = tool.description.lower()
        found: dict[str, bool] = {}
        advice: list[str] = []
        for name, (markers, patterns, tip) in self.checks.items():
            hit = any(m in desc for m in markers) or any(p.search(desc) for p in patterns)
            found[name] = hit
            if not hit and tip:
                advice.append(tip)
        props = tool.parameters.get("properties") if isinstance(tool.parameters, Mapping) else None
        vague = sorted(k for k in (props or {}) if k.lower() in self.ambiguous)
        if vague and self.ambiguous_advice:
            advice.append(fill(self.ambiguous_advice, {"names": ", ".join(vague)}) or "")
        return ToolDescriptionQuality(**found, params_unambiguous=not vague, advice=tuple(advice))

    def enhance(self, tool: Tool) -> Tool:
        quality = self.audit(tool)
        if quality.score >= self.good_score:
            return tool
        additions: list[str] = []
        params = tool.parameters if isinstance(tool.parameters, Mapping) else {}
        props = params.get("properties") or {}
        if not quality.has_input_format and props and self.parameters_line:
            required = set(params.get("required") or ())
            hints = [fill(self.parameter_item, {
                "name": name, "type": _type_name(schema),
                "required": self.required_mark if name in required else ""}) or ""
                for name, schema in props.items()]
            additions.append(fill(self.parameters_line, {"hints": ", ".join(hints)}) or "")
        if not quality.has_clear_boundaries:
            for rx, text in self.boundaries:
                if rx.search(tool.name):
                    additions.append(text)
                    break
        if not additions:
            return tool
        desc = "\n\n".join([tool.description, "\n".join(additions)]) if tool.description \
            else "\n".join(additions)
        return Tool(name=tool.name, description=desc, parameters=tool.parameters)


def _type_name(schema: Any) -> str:
    if not isinstance(schema, Mapping):
        return "any"
    t = schema.get("type")
    if isinstance(t, list):
        return "|".join(map(str, t))
    return str(t) if t else "any"


def audit_rules(engine: Any = None) -> AuditRules:
    engine = resolve_engine(engine)
    return engine._cached("rules:tool_audit", lambda: AuditRules(engine.ruleset.table("tool_audit")))


def audit_tool_description(tool: Any, *, engine: Any = None) -> ToolDescriptionQuality:
    """Score a tool's description against the markers in rules/tool_audit.yaml."""
    return audit_rules(engine).audit(coerce_tool(tool))


def audit_tool_set(tools: Any, *, engine: Any = None) -> dict[str, ToolDescriptionQuality]:
    """tool name -> its audit."""
    rules = audit_rules(engine)
    return {t.name: rules.audit(t) for t in coerce_tools(tools)}


def enhance_tool_description(tool: Any, *, engine: Any = None) -> Tool:
    """The tool with parameter and boundary notes added when its audit score is low."""
    return audit_rules(engine).enhance(coerce_tool(tool))


# ---------------------------------------------------------------- parallel planning

class ToolClassification(StrEnum):
    """Whether a tool may run in parallel with others."""

    READ = "read"
    """Read-only: safe to run in parallel."""
    WRITE = "write"
    """Changes state: runs alone, in order."""
    UNKNOWN = "unknown"
    """Not classified: planned as rules/tool_classes.yaml `unknown_as` says."""


@dataclass(frozen=True, slots=True)
class ExecutionPlan:
    """Batches of calls: calls inside a batch may run in parallel; batches run in order."""

    batches: tuple[tuple[ToolCall, ...], ...]

    @property
    def total_calls(self) -> int:
        return sum(len(b) for b in self.batches)

    @property
    def parallelism_ratio(self) -> float:
        """Share of calls that run in a parallel batch (0.0 all sequential, 1.0 all parallel)."""
        if not self.batches:
            return 0.0
        return sum(len(b) for b in self.batches if len(b) > 1) / self.total_calls


class ClassRules:
    """rules/tool_classes.yaml compiled once per engine."""

    def __init__(self, table: Any):
        if not isinstance(table, dict):
            raise UnknownRuleError("rule table", "tool_classes", ())
        self.tools = {k: ToolClassification(v) for k, v in (table.get("tools") or {}).items()}
        self.write_words = frozenset(w.lower() for w in table.get("write_words") or ())
        self.read_words = frozenset(w.lower() for w in table.get("read_words") or ())
        self.write_phrases = tuple(p.lower() for p in table.get("write_description") or ())
        self.read_phrases = tuple(p.lower() for p in table.get("read_description") or ())
        self.unknown_as = ToolClassification(table.get("unknown_as", "write"))

    def classify(self, tool: Tool) -> ToolClassification:
        if tool.name in self.tools:
            return self.tools[tool.name]
        words = set(name_words(tool.name))
        if words & self.write_words:
            return ToolClassification.WRITE
        if words & self.read_words:
            return ToolClassification.READ
        desc = tool.description.lower()
        if any(p in desc for p in self.write_phrases):
            return ToolClassification.WRITE
        if any(p in desc for p in self.read_phrases):
            return ToolClassification.READ
        return ToolClassification.UNKNOWN

    def parallel_safe(self, tool: Tool | None) -> bool:
        if tool is None:
            return self.unknown_as is ToolClassification.READ
        kind = self.classify(tool)
        if kind is ToolClassification.UNKNOWN:
            kind = self.unknown_as
        return kind is ToolClassification.READ


def class_rules(engine: Any = None) -> ClassRules:
    engine = resolve_engine(engine)
    return engine._cached("rules:tool_classes",
                          lambda: ClassRules(engine.ruleset.table("tool_classes")))


def classify_tool(tool: Any, *, engine: Any = None) -> ToolClassification:
    """READ, WRITE or UNKNOWN by the tool's name words, then its description."""
    return class_rules(engine).classify(coerce_tool(tool))


def plan_parallel_execution(tool_calls: Any, tools: Any, allow_parallel: bool = True, *,
                            engine: Any = None,
                            classes: Mapping[str, str] | None = None) -> ExecutionPlan:
    """Batch consecutive read-only calls; every other call runs alone, in the given order.

    [read_a, read_b, write_c, read_d, read_e] -> [(read_a, read_b), (write_c,), (read_d, read_e)]

    `classes` (tool name -> read | write) beats the rules' classification, for tools whose
    owner declared it (a registry's `kind=`).
    """
    from ._validation import as_tool_call, tool_index

    calls = [as_tool_call(c) for c in tool_calls or ()]
    if not calls:
        return ExecutionPlan(batches=())
    if not allow_parallel:
        return ExecutionPlan(batches=tuple((c,) for c in calls))
    rules = class_rules(engine)
    index = tool_index(tools)
    batches: list[tuple[ToolCall, ...]] = []
    reads: list[ToolCall] = []
    for call in calls:
        declared = (classes or {}).get(call.name)
        if declared is not None:
            safe = ToolClassification(declared) is ToolClassification.READ
        else:
            safe = rules.parallel_safe(index.get(call.name))
        if safe:
            reads.append(call)
            continue
        if reads:
            batches.append(tuple(reads))
            reads = []
        batches.append((call,))
    if reads:
        batches.append(tuple(reads))
    return ExecutionPlan(batches=tuple(batches))

