"""Golden suite `emulation`: prompts, selection, error mappings, validation feedback and
tool engineering, from hand-written golden/emulation/*.cases.yaml.

    prompts.cases.yaml     every emulation template x representative capabilities
                           -> golden/emulation/prompts/<style>.golden.yaml (text as lines)
    selection.cases.yaml   capabilities -> the style, template and dialect chosen
    errors.cases.yaml      exceptions (built from data) -> ToolError; every mapping of
                           rules/errors.yaml must be hit; the retry ladder of every code
    validation.cases.yaml  calls against tools -> errors, coercions and retry feedback
    engineering.cases.yaml tools -> audit, classification; windows -> the tools kept
    turns.cases.yaml       agent conversations x models -> the conversation fitted to each
                           family's turn constraints, with its rewrites
                           -> golden/emulation/turns/<family>.golden.yaml

Invariants checked before anything is written: prompts show every tool they keep and their
examples are the template's own call format (and parse back through the dialect);
every style and every error mapping is covered; corrected calls validate; a fitted
conversation breaks none of its model's turn constraints and keeps every text.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .._types import Capability, Tool, ToolCall, coerce_tools
from ._core import GoldenFile, read_cases

__all__ = ["golden_files"]


def golden_files(engine: Any, root: Path) -> Iterable[GoldenFile]:
    base = root / "emulation"
    if not base.is_dir():
        return
    builders = {"prompts": _prompts, "selection": _selection, "errors": _errors,
                "validation": _validation, "engineering": _engineering, "turns": _turns}
    for cases_path in sorted(base.glob("*.cases.yaml")):
        name = cases_path.name.removesuffix(".cases.yaml")
        build = builders.get(name)
        source = f"golden/emulation/{cases_path.name}"
        if build is None:
            yield GoldenFile(path=f"emulation/{name}.golden.yaml", content={},
                             problems=[f"no generator for {cases_path.name}; known: "
                                       f"{', '.join(sorted(builders))}"], source=source)
            continue
        for gf in build(engine, read_cases(cases_path) or {}):
            gf.source = source
            yield gf


def _lines(text: str) -> list[str]:
    return text.split("\n")


def _readable(value: Any) -> Any:
    """Multi-line strings as lists of lines (golden diffs stay line by line)."""
    if isinstance(value, str) and "\n" in value:
        return _lines(value)
    if isinstance(value, dict):
        return {k: _readable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_readable(v) for v in value]
    return value


def _parses_back(engine: Any, dialect: str, text: str, calls: list[ToolCall],
                 tools: list[Tool]) -> str | None:
    if not hasattr(engine, "text_parser"):
        return None
    parsed = engine.text_parser(dialect=dialect, tools=tools).parse(text, finish_reason="stop")
    got = [(c.name, c.arguments) for c in parsed.tool_calls]
    want = [(c.name, c.arguments) for c in calls]
    return None if got == want else f"{text!r} parsed as {got}, not {want}"


# ---------------------------------------------------------------- prompts

def _prompts(engine: Any, cases: dict[str, Any]) -> Iterable[GoldenFile]:
    tools = list(coerce_tools(cases.get("tools") or []))
    caps = {name: Capability(**(values or {})) for name, values in
            (cases.get("capabilities") or {}).items()}
    task = cases.get("task_hint")
    for style in engine.emulation_styles():
        problems: list[str] = []
        prompts: dict[str, Any] = {}
        for cap_name, cap in caps.items():
            prompt = engine.emulation(tools, task_hint=task, capability=cap, style=style.name)
            prompts[cap_name] = _lines(prompt.text)
            for t in prompt.tools:
                if t.name not in prompt.text:
                    problems.append(f"{cap_name}: tool {t.name} is not in the prompt")
            for example in prompt.examples:
                text = engine.render_call(example, tools, style=style.name)
                if text not in prompt.text:
                    problems.append(f"{cap_name}: example {example.name} is not written in "
                                    "the template's call format")
                broken = _parses_back(engine, style.dialect, text, [example], tools)
                if broken:
                    problems.append(f"{cap_name}: example does not round-trip: {broken}")
            if "{{" in prompt.text or "{%" in prompt.text:
                problems.append(f"{cap_name}: template syntax left in the prompt")
        yield GoldenFile(path=f"emulation/prompts/{style.name}.golden.yaml",
                         content={"template": style.template, "dialect": style.dialect,
                                  "trained": style.trained, "prompts": prompts},
                         problems=problems)


# ---------------------------------------------------------------- turns

def _turns(engine: Any, cases: dict[str, Any]) -> Iterable[GoldenFile]:
    from ..chat_template._turns import violations
    from ..providers._messages import coerce_messages

    tools = list(coerce_tools(cases.get("tools") or []))
    conversations = {name: coerce_messages(msgs)
                     for name, msgs in (cases.get("conversations") or {}).items()}
    by_family: dict[str, dict[str, Any]] = {}
    problems: dict[str, list[str]] = {}
    for model in cases.get("models") or []:
        family = engine.parse_model_id(model).family or "unknown"
        cap = engine.capability(model)
        turns = _turn_fields(cap)
        entry: dict[str, Any] = {"constraints": turns or "none (the defaults)",
                                 "conversations": {}}
        for name, conv in conversations.items():
            fitted = engine.normalize_turns(conv, model, tools=tools)
            entry["conversations"][name] = {
                "messages": [_turn_view(m) for m in fitted.messages],
                "rewrites": [r.describe() for r in fitted.rewrites]}
            where = f"{model} / {name}"
            for v in violations(fitted.messages, cap):
                problems.setdefault(family, []).append(f"{where}: {v}")
            kept = "\n".join(_turn_texts(fitted.messages))
            for text in _turn_texts(conv):
                if text not in kept:
                    problems.setdefault(family, []).append(f"{where}: {text!r} was lost")
        by_family.setdefault(family, {})[model] = entry
    for family in sorted(by_family):
        yield GoldenFile(path=f"emulation/turns/{family}.golden.yaml",
                         content={"family": family, "models": by_family[family]},
                         problems=problems.get(family, []))
    constrained = sorted(f for f in engine.ruleset.ids("model") if f not in by_family and any(
        _turn_fields(engine.capability(ex)) for ex in _examples(engine, f)))
    if constrained:
        yield GoldenFile(path="emulation/turns/_coverage.golden.yaml", content={},
                         problems=[f"family {f} sets turn constraints; add one of its models "
                                   "to golden/emulation/turns.cases.yaml" for f in constrained])


def _examples(engine: Any, family: str) -> list[str]:
    rf = engine.ruleset.get("model", family)
    data = rf.data if rf is not None and isinstance(rf.data, dict) else {}
    return [str(x) for x in data.get("examples") or ()]


def _turn_fields(cap: Any) -> dict[str, Any]:
    """The turn constraints (capability turn_*) set apart from the defaults."""
    return {k: v for k, v in cap.non_default().items() if k.startswith("turn_")}


def _turn_view(m: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role}
    if m.content is not None:
        out["content"] = _readable(m.content) if isinstance(m.content, str) else str(m.content)
    if m.tool_calls:
        out["calls"] = [f"{c.name} {json.dumps(c.arguments, ensure_ascii=False)}"
                        for c in m.tool_calls]
    if m.tool_call_id:
        out["call_id"] = m.tool_call_id
    return out


def _turn_texts(messages: Any) -> list[str]:
    out = []
    for m in messages:
        if isinstance(m.content, str) and m.content.strip():
            out.append(m.content)
        out.extend(str(v) for c in m.tool_calls for v in c.arguments.values())
    return out


# ---------------------------------------------------------------- selection

def _selection(engine: Any, cases: dict[str, Any]) -> Iterable[GoldenFile]:
    out = []
    chosen: set[str] = set()
    for values in cases.get("capabilities") or []:
        style = engine.select_emulation(capability=Capability(**values))
        chosen.add(style.name)
        out.append({"capability": dict(values), "style": style.name,
                    "template": style.template, "dialect": style.dialect})
    generic = {s.name for s in engine.emulation_styles() if not s.trained}
    problems = [f"no case selects style {name!r}" for name in sorted(generic - chosen)]
    if not any(engine.select_emulation(capability=Capability(**v)).trained
               for v in cases.get("capabilities") or []):
        problems.append("no case selects a trained format")
    yield GoldenFile(path="emulation/selection.golden.yaml", content={"selection": out},
                     problems=problems)


# ---------------------------------------------------------------- errors

def _exception_class(name: str, module: str | None, bases: list[str],
                     made: dict[str, type]) -> type:
    if module is None and name in made:
        return made[name]
    found = getattr(builtins, name, None)
    if module is None and isinstance(found, type) and issubclass(found, BaseException):
        return found
    parents = tuple(_exception_class(b, None, [], made) for b in bases) or (Exception,)
    cls = type(name, parents, {"__module__": module or "golden"})
    made[name] = cls
    return cls


def _exception(spec: dict[str, Any], made: dict[str, type]) -> BaseException:
    cls = _exception_class(spec["exception"], spec.get("module"), spec.get("bases") or [], made)
    exc = cls(*spec.get("args", [spec.get("message", "")] if "message" in spec else []))
    if "status" in spec:
        exc.response = SimpleNamespace(status_code=spec["status"])
    if "cause" in spec:
        exc.__cause__ = _exception(spec["cause"], made)
    return exc


def _errors(engine: Any, cases: dict[str, Any]) -> Iterable[GoldenFile]:
    from ..calls._tool_errors import ToolError, ToolErrorCode, error_rules, get_retry_strategy

    rules = error_rules(engine)
    made: dict[str, type] = {}
    results = []
    hit: set[str] = set()
    for case in cases.get("cases") or []:
        error = ToolError.from_exception(_exception(case, made), case.get("tool", "tool"),
                                         engine=engine)
        hit.add(error.details["rule"] if error.details else "")
        entry = {"case": case, **_readable(error.to_dict())}
        entry["ladder"] = [get_retry_strategy(error, a, engine=engine) for a in (1, 2, 3)]
        results.append(entry)
    ladders = {}
    for code in ToolErrorCode:
        error = ToolError(code=code, message=code.value,
                          recoverable=bool(rules.codes.get(code, {}).get("recoverable", True)))
        ladders[code.value] = {
            "should_retry": [rules.should_retry(error, a, None) for a in (1, 2, 3)],
            "strategy": [rules.next_strategy(error, a) for a in (1, 2, 3, 4)],
        }
    every = {m.id for m in rules.mappings} | {"default"}
    problems = [f"no case hits mapping {m!r} of rules/errors.yaml" for m in sorted(every - hit)]
    yield GoldenFile(path="emulation/errors.golden.yaml",
                     content={"mappings": results, "ladders": ladders}, problems=problems)


# ---------------------------------------------------------------- validation

def _validation(engine: Any, cases: dict[str, Any]) -> Iterable[GoldenFile]:
    from ..calls._validation import tool_index

    tools = list(coerce_tools(cases.get("tools") or []))
    index = tool_index(tools)
    out = []
    problems: list[str] = []
    for case in cases.get("cases") or []:
        result = engine.check_tool_call(case["call"], index, coerce=case.get("coerce"))
        entry: dict[str, Any] = {"name": case["name"], "call": case["call"]}
        if case.get("coerce"):
            entry["coerce"] = case["coerce"]
        entry["errors"] = [e.to_dict() for e in result.errors]
        if result.coercions:
            entry["coercions"] = list(result.coercions)
        if result.errors:
            style = case.get("style")
            feedback = engine.format_validation_errors_for_retry(result.errors, result.call,
                                                                 index, style=style)
            entry["feedback"] = _lines(feedback)
            fixed = engine.corrected_call(result.call, index)
            if fixed is not None and engine.validate_tool_call(fixed, index):
                problems.append(f"{case['name']}: the corrected call is invalid: "
                                f"{fixed.arguments}")
        if bool(result.errors) != bool(case.get("invalid", True)):
            problems.append(f"{case['name']}: expected {'errors' if case.get('invalid', True) else 'no errors'}")
        out.append(entry)
    yield GoldenFile(path="emulation/validation.golden.yaml", content={"cases": out},
                     problems=problems)


# ---------------------------------------------------------------- engineering

def _engineering(engine: Any, cases: dict[str, Any]) -> Iterable[GoldenFile]:
    from ..calls._engineering import audit_tool_set, classify_tool

    tools = list(coerce_tools(cases.get("tools") or []))
    audit = {name: {"score": q.score, "missing": list(q.missing)}
             for name, q in audit_tool_set(tools, engine=engine).items()}
    classes = {t.name: classify_tool(t, engine=engine).value for t in tools}
    budget = []
    for case in cases.get("budget") or []:
        shown = engine.optimize_tool_definitions(tools, Capability(**case.get("capability", {})),
                                                 case.get("task_hint"))
        budget.append({**case, "kept": [
            {"name": t.name, "description_chars": len(t.description),
             "parameters": sorted(t.parameters.get("properties") or {})} for t in shown]})
    yield GoldenFile(path="emulation/engineering.golden.yaml",
                     content={"audit": audit, "classes": classes, "budget": budget})
