"""Constrained decoding through a provider (a rule's `constrained:` section): which body
field takes the constraint `Engine.call_grammar` derives from the offered tools, in which
format, and what `constrained` means for a model with native tools (strict schemas).

Adding a server that takes a grammar or a schema is a rules edit: name the format and
the body path (and, when the server wraps it, the wire value as a JMESPath expression).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._errors import CapabilityError
from .._types import Tool
from ..rules._loader import RuleSet
from ._rules import Expr, Provider, merged_sections

__all__ = ["ConstraintRules", "check_rules", "constraint_for", "constraint_rules"]


@dataclass(frozen=True, slots=True)
class ConstraintRules:
    """One provider's `constrained:` section, compiled (its `extends:` chain merged)."""

    provider: str
    format: str | None
    path: str | None
    value: Expr | None
    native: str | None


def constraint_rules(engine: Any, prov: Provider) -> ConstraintRules | None:
    """The compiled `constrained:` section of `prov` (None: the rule has none)."""
    cache: dict[str, ConstraintRules | None] = engine._cached("provider_constrained", dict)
    if prov.id not in cache:
        sec = prov.data.get("constrained")
        if not isinstance(sec, dict):
            cache[prov.id] = None
        else:
            value = sec.get("value")
            cache[prov.id] = ConstraintRules(
                prov.id, sec.get("format"), sec.get("path"),
                Expr(value, f"provider {prov.id} constrained.value")
                if isinstance(value, str) and value else None,
                sec.get("native"))
    return cache[prov.id]


def constraint_for(engine: Any, prov: Provider, model: str | None, tools: tuple[Tool, ...],
                   choice: tuple[str, str | None] | None, emulated: bool, strict: Any
                   ) -> tuple[Any, tuple[str, Any] | None]:
    """(strict mode to use, (body path, wire value) or None) for a constrained request."""
    rules = constraint_rules(engine, prov)
    if rules is None:
        raise CapabilityError(f"provider {prov.id!r} takes no constraint: its rule has no "
                              "`constrained:` section")
    if not tools or (choice is not None and choice[0] == "none"):
        return strict, None
    if not emulated:
        if rules.native == "strict":
            return (True if strict is None else strict), None
        raise CapabilityError(f"provider {prov.id!r} has no constrained decoding for a model "
                              "with native tools (its rule's `constrained.native` is not set)")
    if rules.format is None or rules.path is None:
        raise CapabilityError(f"provider {prov.id!r} takes no grammar or schema for an "
                              "emulated model (its rule's `constrained:` names no format/path)")
    kind, name = choice or ("auto", None)
    grammar = engine.call_grammar(tools, model, format=rules.format,
                                  tool_choice=name if kind == "named" else kind)
    if grammar is None:  # auto with a JSON schema: nothing says "free text, or a call"
        return strict, None
    view = {"grammar": grammar.grammar, "name": "tool_call"}
    value = rules.value(view) if rules.value is not None else grammar.grammar
    return strict, (rules.path, value)


def check_rules(rs: RuleSet, rep: Any, failed: set[tuple[str, str]]) -> None:
    """A `constrained:` section, once `extends:` is merged, says a path for its format and
    some use (a format or `native`)."""
    for rid, rf, _, sec, where in merged_sections(rs, failed, "constrained"):
        if sec.get("format") and not sec.get("path"):
            rep.error(rf, where, f"provider {rid!r}: `constrained.format` needs "
                      "`constrained.path` (the body field that takes it)", "constrained-path")
        if not sec.get("format") and not sec.get("native"):
            rep.error(rf, where, f"provider {rid!r}: `constrained:` says neither a format nor "
                      "`native: strict`", "constrained-empty")
