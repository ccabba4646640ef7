"""Golden suite `constrained`: constrained decoding and raw-text prompts, from hand-written
golden/constrained/*.cases.yaml.

    grammars.cases.yaml   every emulation style (generic and trained) -> the shape of its
                          call (literal pieces, name and arguments slots; for tagged
                          formats the per-parameter pieces), the trigger and
                          text markers, whether a JSON schema can stand for it - or why no
                          constraint follows it; full GBNF and JSON schema for the styles
                          the cases name
    chat.cases.yaml       conversations x models -> the prompt a raw-text model completes
                          (turn format from the model rules), its stop strings and dialect
    providers.cases.yaml  every provider with a `constrained:` rule -> where
                          build_request(..., constrained=True) puts the constraint

Invariants checked before anything is written: every style is listed; for the styles a
JSON schema can follow, the schema accepts each tool's example call object and rejects
one with an undeclared argument; the full grammars list every offered tool; chat prompts
hold every user text and end with the model's turn opened.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._errors import ToolrulesError
from .._types import Tool, coerce_tools
from ._core import GoldenFile, read_cases

__all__ = ["golden_files"]


def golden_files(engine: Any, root: Path) -> Iterable[GoldenFile]:
    base = root / "constrained"
    if not base.is_dir():
        return
    builders = {"grammars": _grammars, "chat": _chat, "providers": _providers}
    for cases_path in sorted(base.glob("*.cases.yaml")):
        name = cases_path.name.removesuffix(".cases.yaml")
        source = f"golden/constrained/{cases_path.name}"
        build = builders.get(name)
        if build is None:
            yield GoldenFile(path=f"constrained/{name}.golden.yaml", content={},
                             problems=[f"no generator for {cases_path.name}; known: "
                                       f"{', '.join(sorted(builders))}"], source=source)
            continue
        content, problems = build(engine, read_cases(cases_path) or {})
        yield GoldenFile(path=f"constrained/{name}.golden.yaml", content=content,
                         problems=problems, source=source)


def _lines(text: str) -> list[str]:
    return text.rstrip("\n").split("\n")


# ---------------------------------------------------------------- grammars

def _grammars(engine: Any, cases: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    from jsonschema import Draft202012Validator

    from ..calls._validation import validation_rules
    from ..emulation._grammar import call_shape

    tools = list(coerce_tools(cases.get("tools") or []))
    problems: list[str] = []
    styles: dict[str, Any] = {}
    vrules = validation_rules(engine._emulation)
    examples = {t.name: vrules.example_arguments(t, False) for t in tools}
    for entry in engine.emulation_styles():
        try:
            shape = call_shape(engine._emulation, entry)
        except ToolrulesError as exc:
            styles[entry.name] = {"dialect": entry.dialect, "unsupported": str(exc)}
            continue
        row: dict[str, Any] = {
            "dialect": entry.dialect,
            "pieces": [[k, v] for k, v in shape.pieces],
        }
        ps = shape.params
        if ps is not None:
            row["parameters"] = {"head": ps.head, "between": dict(ps.between), "sep": ps.sep,
                                 "tail": ps.tail, "empty": ps.empty,
                                 "closers": list(ps.closers)}
        row["trigger"] = engine.call_grammar(tools, style=entry.name,
                                             tool_choice="required").trigger
        try:
            g = engine.call_grammar(tools, style=entry.name, tool_choice="auto")
        except ToolrulesError as exc:
            row["auto"] = str(exc)
        else:
            row["text_markers"] = list(g.markers)
        try:
            schema = engine.call_grammar(tools, style=entry.name, tool_choice="required",
                                         format="json_schema").grammar
        except ToolrulesError as exc:
            row["json_schema"] = str(exc)
        else:
            row["json_schema"] = f"the call object {{{shape.object_keys[0]}, " \
                f"{shape.object_keys[1]}}}" if shape.object_keys else "?"
            validator = Draft202012Validator(schema)
            name_key, args_key = shape.object_keys or ("name", "arguments")
            for t in tools:
                good = {name_key: t.name, args_key: examples[t.name]}
                bad = {name_key: t.name, args_key: {**examples[t.name], "zz_undeclared": 1}}
                if not validator.is_valid(good):
                    problems.append(f"{entry.name}: the JSON schema rejects {good}")
                if validator.is_valid(bad):
                    problems.append(f"{entry.name}: the JSON schema accepts {bad}")
        styles[entry.name] = row
    full: dict[str, Any] = {}
    for style in cases.get("full") or []:
        out: dict[str, Any] = {}
        for choice in cases.get("choices") or ["required"]:
            g = engine.call_grammar(tools, style=style, tool_choice=choice)
            text = g.text if g is not None else ""
            for t in tools if choice in ("required", "auto") else []:
                if json.dumps(t.name) not in text and t.name not in text:
                    problems.append(f"{style}/{choice}: the grammar names no {t.name}")
            out[f"gbnf {choice}"] = _lines(text) if g is not None else None
            try:
                js = engine.call_grammar(tools, style=style, tool_choice=choice,
                                         format="json_schema")
            except ToolrulesError as exc:
                out[f"json_schema {choice}"] = str(exc)
            else:
                out[f"json_schema {choice}"] = js.grammar if js is not None else None
        full[style] = out
    listed = {e.name for e in engine.emulation_styles()}
    if set(styles) != listed:
        problems.append(f"styles missing: {sorted(listed - set(styles))}")
    return {"styles": styles, "full": full}, problems


# ---------------------------------------------------------------- chat prompts

def _chat(engine: Any, cases: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    tools = list(coerce_tools(cases.get("tools") or []))
    problems: list[str] = []
    out: dict[str, Any] = {}
    for model in cases.get("models") or []:
        rows: dict[str, Any] = {}
        for name, conv in (cases.get("conversations") or {}).items():
            offered = tools if conv.get("tools") else None
            try:
                p = engine.chat_prompt(conv["messages"], model, tools=offered)
            except ToolrulesError as exc:
                rows[name] = {"error": str(exc)}
                continue
            rows[name] = {"template": p.template, "stop": list(p.stop), "dialect": p.dialect,
                          "prompt": _lines(p.text)}
            for m in conv["messages"]:
                if m.get("role") == "user" and m.get("content") not in p.text:
                    problems.append(f"{model}/{name}: the user text {m['content']!r} is missing")
        out[model] = rows
    return out, problems


# ---------------------------------------------------------------- providers

def _summary(value: Any) -> Any:
    """The wire value with the constraint itself summarized (it is the grammars file's)."""
    if isinstance(value, str) and "::=" in value:
        return f"<GBNF, {len(value.splitlines())} rules: {value.splitlines()[0]}>"
    if isinstance(value, dict):
        if "anyOf" in value or ("properties" in value and "type" in value):
            n = len(value.get("anyOf") or [value])
            return f"<JSON schema of the call object, {n} tool(s)>"
        return {k: _summary(v) for k, v in value.items()}
    return value


def _providers(engine: Any, cases: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    from ..providers._constrained import constraint_rules

    tools: list[Tool] = list(coerce_tools(cases.get("tools") or []))
    messages = cases.get("messages") or [{"role": "user", "content": "hi"}]
    problems: list[str] = []
    out: dict[str, Any] = {}
    for pid in engine.providers():
        prov = engine.provider_rules(pid)
        if constraint_rules(engine, prov) is None:
            continue
        row: dict[str, Any] = {}
        for label, model in (cases.get("models") or {}).items():
            for choice in cases.get("choices") or ["required"]:
                key = f"{label} {choice}"
                try:
                    plain = engine.build_request(pid, model, messages, tools=tools,
                                                 tool_choice=choice)
                    body = engine.build_request(pid, model, messages, tools=tools,
                                                tool_choice=choice, constrained=True)
                except ToolrulesError as exc:
                    row[key] = {"error": str(exc)}
                    continue
                added = {k: _summary(v) for k, v in body.items() if plain.get(k) != v
                         and k != "tools"}
                if body.get("tools") != plain.get("tools"):
                    added["tools"] = "strict schemas" if "strict" in json.dumps(
                        body.get("tools")) else "changed"
                row[key] = added or "no constraint"
        out[pid] = row
    return out, problems
