"""Emulation prompts for models without native tools (adaptive tool emulation), driven by
rules/emulation.yaml and templates/emulation/*.j2, and the sandboxed Jinja environment
every toolrules template renders in.

A prompt template receives `tools` (views with name, description, short, parameters,
required, params), `compact`, `guidance`, `examples` (call views), `task_hint`,
`parallel`, `style` and `dialect`; the rendered prompt is stripped of surrounding
whitespace. It defines a `call(c)` macro that writes one call in
the format it asks for (and may define `calls(cs)` for several): the prompt uses it for
its examples, `render_call` uses it for corrected calls in retry feedback, and the
round-trip tests parse its output through the dialect the table names.

A call view `c` has `name`, `arguments` (a dict) and `params`: one entry per argument
with `name`, `value`, `text` (the raw string, or JSON for other values) and `raw_ok`:
whether `text`, read back as the tool schema types it, is exactly `value` and is safe to
write between tags. `c.raw_ok` holds when every argument is; formats that write values as
text fall back to their JSON form otherwise.

Templates also get the filters `json` (compact JSON, `json(4)` indented), `json_join`
(JSON items joined), `pylit` (a value as a Python literal) and `clip(n)` (cut at a word
boundary), and `call_view(name, arguments)` for placeholder calls in format lines.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import Problem, RuleError, UnknownRuleError
from .._types import Capability, Tool, ToolCall
from ..calls._selection import cut
from ..dialects._values import type_value
from ..rules._loader import Asset, RuleSet

__all__ = ["EmulationPrompt", "EmulationRules", "EmulationStyle", "check_rules",
           "make_environment"]

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_CMP = re.compile(r"^\s*(<=|>=|==|!=|<|>)\s*(-?\d+(?:\.\d+)?)\s*$")
_NUMERIC_FIELDS = ("context_window", "max_output_tokens")
TEMPLATE_DIRS = ("emulation", "feedback", "results", "chat", "turns")


@dataclass(frozen=True, slots=True)
class EmulationStyle:
    """A prompt template and the dialect that parses the answer it asks for."""

    name: str
    """Style name (json, compact ...) or, for a trained format, the dialect id."""
    template: str
    """Template name under templates/."""
    dialect: str
    """Dialect id (rules/dialects/) of the answer format."""
    trained: bool = False
    """The model's own trained format rather than a generic style."""
    description: str = ""


@dataclass(frozen=True, slots=True)
class EmulationPrompt:
    """A rendered emulation prompt and what it was built from."""

    text: str
    """The prompt (goes into the system message)."""
    style: EmulationStyle
    """Which template was used and which dialect reads the answer."""
    tools: tuple[Tool, ...]
    """The tools the prompt shows (after the context budget)."""
    examples: tuple[ToolCall, ...] = ()
    """Guidance examples shown in the prompt."""
    compact: bool = False
    """Tools were listed compactly (small context window)."""

    @property
    def dialect(self) -> str:
        return self.style.dialect


# ---------------------------------------------------------------- filters

def to_json(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def py_literal(value: Any) -> str:
    """A JSON value written as a Python literal (None/True/False, quoted strings)."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else json.dumps(str(value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{py_literal(str(k))}: {py_literal(v)}"
                               for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def clip(text: Any, limit: int, ellipsis: str = "...") -> str:
    text = text if isinstance(text, str) else str(text or "")
    return text if len(text) <= limit else cut(text, int(limit), ellipsis)


# Environments by the template mapping they read (held, so its id stays unique) and the
# ellipsis: engines derived from one rule set (an evaluation builds one per model and
# strategy) share the mapping, so each template is compiled once per process.
_ENVIRONMENTS: dict[tuple[int, str], tuple[Mapping[str, Asset], Any]] = {}


def make_environment(templates: Mapping[str, Asset], ellipsis: str = "...") -> Any:
    """A sandboxed, strict Jinja environment over the rule set's (overlaid) templates,
    shared by every engine over the same template mapping."""
    hit = _ENVIRONMENTS.get((id(templates), ellipsis))
    if hit is not None and hit[0] is templates:
        return hit[1]
    env = _new_environment(templates, ellipsis)
    if len(_ENVIRONMENTS) >= 16:
        _ENVIRONMENTS.clear()
    _ENVIRONMENTS[(id(templates), ellipsis)] = (templates, env)
    return env


def _new_environment(templates: Mapping[str, Asset], ellipsis: str) -> Any:
    from jinja2 import FunctionLoader, StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    def source(name: str) -> tuple[str, str, Any] | None:
        asset = templates.get(name)
        # up to date while the mapping still holds this very asset (the environment is
        # shared, so an edited mapping must not serve a stale compiled template)
        return None if asset is None else (
            asset.text, asset.display, lambda: templates.get(name) is asset)

    class Sandbox(SandboxedEnvironment):
        """The stock sandbox, with a fast path for the engine's own view objects: they
        expose plain data only, so their public attributes need no per-access audit."""

        def getattr(self, obj: Any, attribute: str) -> Any:
            if type(obj) in _VIEWS and not attribute.startswith("_"):
                try:
                    return getattr(obj, attribute)
                except AttributeError:
                    pass
            return super().getattr(obj, attribute)

    env = Sandbox(loader=FunctionLoader(source), undefined=StrictUndefined, autoescape=False,
                  trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False,
                  auto_reload=True)
    env.filters["json"] = to_json
    env.filters["json_join"] = lambda values, sep=", ": sep.join(to_json(v) for v in values)
    env.filters["pylit"] = py_literal
    env.filters["clip"] = lambda text, limit: clip(text, limit, ellipsis)
    env.globals["call_view"] = lambda name, arguments=None: CallView(str(name), arguments or {})
    return env


# ---------------------------------------------------------------- template views

def type_label(schema: Any, depth: int = 0) -> str:
    """A short type name for a parameter schema: string, integer or null, array ..."""
    if not isinstance(schema, Mapping) or depth > 4:
        return "any"
    t = schema.get("type")
    if isinstance(t, str):
        if t == "array" and isinstance(schema.get("items"), Mapping) and schema["items"].get("type"):
            return f"array of {type_label(schema['items'], depth + 1)}"
        return t
    if isinstance(t, list):
        return " or ".join(map(str, t))
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " or ".join(dict.fromkeys(type_label(s, depth + 1) for s in schema[key]))
    if schema.get("enum"):
        from ..calls._validation import json_type

        return json_type(schema["enum"][0])
    if "properties" in schema or "$ref" in schema:
        return "object"
    return "any"


class ParamView:
    """One declared parameter of a tool, for templates."""

    __slots__ = ("_rules", "description", "enum", "format", "name", "required", "schema")

    def __init__(self, name: str, schema: Any, required: bool, rules: EmulationRules):
        self.name = name
        self.schema = schema if isinstance(schema, Mapping) else {}
        self.required = required
        self._rules = rules
        self.description = str(self.schema.get("description") or "")
        enum = self.schema.get("enum")
        self.enum = list(enum) if isinstance(enum, list) else None
        fmt = self.schema.get("format")
        self.format = fmt if isinstance(fmt, str) else None

    @property
    def type(self) -> str:
        return type_label(self.schema)

    @property
    def short(self) -> str:
        return clip(self.description, self._rules.param_chars, self._rules.ellipsis)

    @property
    def has_default(self) -> bool:
        return "default" in self.schema

    @property
    def default(self) -> Any:
        return self.schema.get("default")


class ToolView:
    """A tool for templates: the Tool's fields plus parameter views and a short description."""

    __slots__ = ("_params", "_rules", "description", "name", "tool")

    def __init__(self, tool: Tool, rules: EmulationRules):
        self.tool = tool
        self.name = tool.name
        self.description = tool.description
        self._rules = rules
        self._params: list[ParamView] | None = None

    @property
    def short(self) -> str:
        return clip(self.tool.description, self._rules.compact_chars, self._rules.ellipsis)

    @property
    def parameters(self) -> dict[str, Any]:
        p = self.tool.parameters
        return p if isinstance(p, dict) and p else {"type": "object", "properties": {}}

    @property
    def required(self) -> list[str]:
        p = self.tool.parameters
        return [r for r in (p.get("required") or []) if isinstance(r, str)] \
            if isinstance(p, Mapping) else []

    @property
    def params(self) -> list[ParamView]:
        if self._params is None:
            p = self.tool.parameters if isinstance(self.tool.parameters, Mapping) else {}
            props = p["properties"] if isinstance(p.get("properties"), Mapping) else {}
            required = set(self.required)
            self._params = [ParamView(str(k), v, k in required, self._rules)
                            for k, v in props.items()]
        return self._params


class ArgView:
    """One argument of a call, for call macros."""

    __slots__ = ("name", "raw_ok", "text", "value")

    def __init__(self, name: str, value: Any, schema: Any):
        self.name = name
        self.value = value
        self.text = value if isinstance(value, str) else to_json(value)
        self.raw_ok = _raw_ok(name, value, self.text, schema)


class CallView:
    """A call for call macros: name, arguments, per-argument views."""

    __slots__ = ("arguments", "name", "params", "raw_ok")

    def __init__(self, name: str, arguments: Mapping[str, Any], parameters: Any = None):
        self.name = name
        self.arguments = dict(arguments)
        if parameters is None:  # a placeholder call: type each value by its own JSON type
            from ..calls._validation import json_type

            props: Mapping[str, Any] = {k: {"type": json_type(v)}
                                        for k, v in self.arguments.items()}
        else:
            found = parameters.get("properties") if isinstance(parameters, Mapping) else None
            props = found if isinstance(found, Mapping) else {}
        self.params = [ArgView(str(k), v, props.get(k)) for k, v in self.arguments.items()]
        self.raw_ok = all(p.raw_ok for p in self.params)


_VIEWS = frozenset({ParamView, ToolView, ArgView, CallView})


def _raw_ok(name: str, value: Any, text: str, schema: Any) -> bool:
    """Whether `text` between tags reads back (typed by `schema`) as exactly `value`."""
    if not _KEY.match(name) or not text or "<" in text or text != text.strip():
        return False
    return _same(type_value(text, schema if isinstance(schema, Mapping) else None), value)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


# ---------------------------------------------------------------- the compiled table

class EmulationRules:
    """rules/emulation.yaml plus the template environment, compiled once per engine."""

    def __init__(self, rs: RuleSet):
        table = rs.table("emulation")
        if not isinstance(table, dict):
            raise UnknownRuleError("rule table", "emulation", rs.ids("table"))
        self.styles = {name: EmulationStyle(name, e["template"], e["dialect"], False,
                                            e.get("description", ""))
                       for name, e in table["styles"].items()}
        self.trained = {d: EmulationStyle(d, e["template"], d, True, e.get("description", ""))
                        for d, e in (table.get("trained") or {}).items()}
        for did, rf in rs.files.get("dialect", {}).items():  # a dialect may name its own prompt
            t = rf.data.get("template") if isinstance(rf.data, dict) else None
            if did not in self.trained and isinstance(t, str) and t in rs.templates:
                self.trained[did] = EmulationStyle(did, t, did, True)
        self.selection = [(_compile_when(s.get("when") or {}), s["use"])
                          for s in table["selection"]]
        desc = table.get("descriptions") or {}
        self.compact_below: int = desc.get("compact_below", 8192)
        self.compact_chars: int = desc.get("compact_chars", 80)
        self.param_chars: int = desc.get("param_chars", 60)
        self.ellipsis: str = desc.get("ellipsis", "...")
        history = table.get("history") or {}
        self.result_template: str = history.get("result_template", "emulation/result.j2")
        self.result_role: str = history.get("result_role", "user")
        turns = table.get("turns") or {}
        self.turn_join: str = turns.get("join", "\n\n")
        self.system_block: str = turns.get("system_block", "turns/system_block.j2")
        guidance = table.get("guidance") or {}
        self.max_examples: int = guidance.get("max_examples", 2)
        self.required_only: bool = guidance.get("required_only", True)
        self.env = make_environment(rs.templates, self.ellipsis)
        self.template_names = sorted(rs.templates)
        self._templates: dict[str, Any] = {}
        self._modules: dict[str, Any] = {}

    def entries(self) -> tuple[EmulationStyle, ...]:
        return (*self.styles.values(), *self.trained.values())

    def style(self, name: str) -> EmulationStyle:
        hit = self.styles.get(name) or self.trained.get(name)
        if hit is None:
            raise UnknownRuleError("emulation style", name, [*self.styles, *self.trained])
        return hit

    def select(self, cap: Capability) -> EmulationStyle:
        trained_ok = cap.dialect is not None and cap.dialect in self.trained
        for conds, use in self.selection:
            if all(_holds(cap, key, test, trained_ok) for key, test in conds):
                if use == "trained":
                    if trained_ok:
                        return self.trained[str(cap.dialect)]
                    continue
                return self.styles[use]
        return next(iter(self.styles.values()))

    def is_compact(self, cap: Capability) -> bool:
        return cap.context_window is not None and cap.context_window < self.compact_below

    # ------------------------------------------------------------ rendering

    def template(self, name: str) -> Any:
        t = self._templates.get(name)
        if t is None:
            from jinja2 import TemplateNotFound

            try:
                t = self._templates[name] = self.env.get_template(name)
            except TemplateNotFound as exc:
                if exc.name != name:  # an import inside the template is missing
                    raise template_error(name, None, exc) from exc
                raise UnknownRuleError("template", name, self.template_names) from None
        return t

    def render_template(self, name: str, context: Mapping[str, Any]) -> str:
        template = self.template(name)
        try:
            return template.render(context)
        except Exception as exc:
            raise template_error(name, template, exc) from exc

    def context(self, entry: EmulationStyle, tools: Sequence[Tool], compact: bool,
                guidance: bool, examples: Sequence[ToolCall], task_hint: str | None,
                parallel: bool) -> dict[str, Any]:
        by_name = {t.name: t for t in tools}
        return {
            "tools": [ToolView(t, self) for t in tools],
            "compact": compact,
            "guidance": guidance,
            "examples": [self.call_view(c, by_name.get(c.name)) for c in examples],
            "task_hint": task_hint,
            "parallel": parallel,
            "style": entry.name,
            "dialect": entry.dialect,
        }

    @staticmethod
    def call_view(call: ToolCall, tool: Tool | None) -> CallView:
        params = tool.parameters if tool is not None and isinstance(tool.parameters, Mapping) \
            else {}
        return CallView(call.name, call.arguments if isinstance(call.arguments, Mapping) else {},
                        params)

    def macros(self, entry: EmulationStyle) -> Any:
        """The template's module (its `call` and `calls` macros), built once."""
        mod = self._modules.get(entry.template)
        if mod is None:
            template = self.template(entry.template)
            try:
                mod = template.make_module(self.context(entry, (), False, False, (), None, False))
            except Exception as exc:
                raise template_error(entry.template, template, exc) from exc
            self._modules[entry.template] = mod
        return mod

    def render_calls(self, entry: EmulationStyle, calls: Sequence[ToolCall],
                     tools: Mapping[str, Tool]) -> str:
        mod = self.macros(entry)
        views = [self.call_view(c, tools.get(c.name)) for c in calls]
        try:
            if len(views) == 1:
                text = mod.call(views[0])
            elif hasattr(mod, "calls"):
                text = mod.calls(views)
            else:
                raise ValueError(f"template {entry.template} writes one call per answer "
                                 "(it defines no `calls` macro)")
        except ValueError:
            raise
        except Exception as exc:
            raise template_error(entry.template, self.template(entry.template), exc) from exc
        return str(text).strip("\n")


def template_error(name: str, template: Any, exc: BaseException) -> RuleError:
    """A template that fails at render time is a broken rule: say where."""
    import traceback

    line = 1
    filename = getattr(template, "filename", None) or name
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == filename and frame.lineno:
            line = frame.lineno
    return RuleError([Problem(str(filename), line, 1, "error",
                              f"template {name} failed to render: {type(exc).__name__}: {exc}",
                              "template-render")])


def _compile_when(when: Mapping[str, Any]) -> list[tuple[str, tuple[str, Any]]]:
    out: list[tuple[str, tuple[str, Any]]] = []
    for key, want in when.items():
        m = _CMP.match(want) if isinstance(want, str) else None
        if m and key in _NUMERIC_FIELDS:
            out.append((key, (m.group(1), float(m.group(2)))))
        elif isinstance(want, list):
            out.append((key, ("in", tuple(want))))
        else:
            out.append((key, ("==", want)))
    return out


def _holds(cap: Capability, key: str, test: tuple[str, Any], trained_ok: bool) -> bool:
    have = trained_ok if key == "trained_template" else getattr(cap, key, None)
    op, want = test
    if op == "in":
        return have in want
    if op == "==" and not isinstance(want, float):
        return bool(have == want)
    if not isinstance(have, (int, float)) or isinstance(have, bool):
        return False
    return {"<": have < want, "<=": have <= want, ">": have > want, ">=": have >= want,
            "==": have == want, "!=": have != want}[op]


# ---------------------------------------------------------------- lint

def _problem(asset: Asset, line: int, message: str, check: str) -> Problem:
    return Problem(asset.display, max(int(line or 1), 1), 1, "error", message, check)


def _macros_of(env: Any, asset: Asset, templates: Mapping[str, Asset],
               thorough: bool = True) -> tuple[set[str] | None, Problem | None]:
    """The macro names of a template, or its first problem (syntax, a missing import).
    `thorough` also generates the template's code (what `toolrules lint` does; load()
    parses only - syntax errors are found either way, code generation is slow)."""
    from jinja2 import TemplateSyntaxError, nodes

    try:
        ast = env.parse(asset.text, asset.name, asset.display)
        if thorough:
            env.compile(ast, asset.name, asset.display)
    except TemplateSyntaxError as exc:
        return None, _problem(asset, exc.lineno, f"template syntax: {exc.message}",
                              "template-syntax")
    for node in ast.find_all((nodes.Import, nodes.FromImport, nodes.Include, nodes.Extends)):
        ref = node.template
        if isinstance(ref, nodes.Const) and isinstance(ref.value, str) \
                and ref.value not in templates:
            return None, _problem(asset, node.lineno, f"template {ref.value!r} (imported "
                                  "here) does not exist under templates/", "missing-template")
    return {m.name for m in ast.find_all(nodes.Macro)}, None


def check_rules(rs: RuleSet, rep: Any, failed: set[tuple[str, str]]) -> None:
    """emulation.yaml: templates exist, compile and define `call`; dialects exist;
    selection names styles and ends in a fallback. Every template under emulation/,
    feedback/ and results/ compiles."""
    from difflib import get_close_matches

    env = make_environment(rs.templates)
    macros: dict[str, set[str] | None] = {}
    for name, asset in sorted(rs.templates.items()):
        if name.split("/", 1)[0] in TEMPLATE_DIRS:
            found, problem = _macros_of(env, asset, rs.templates, getattr(rep, 'thorough', True))
            macros[name] = found
            if problem is not None:
                rep.problems.append(problem)
    rf = rs.get("table", "emulation")
    if rf is None or ("table", "emulation") in failed or not isinstance(rf.data, dict):
        return
    dialects = set(rs.ids("dialect"))
    level = "error" if dialects else "warning"  # no dialect files yet: a bootstrap rule set
    data = rf.data

    def check_template(path: tuple[Any, ...], name: Any) -> None:
        if not isinstance(name, str):
            return
        if name not in rs.templates:
            close = get_close_matches(name, list(rs.templates), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            rep.error(rf, path, f"template {name!r} does not exist under templates/{hint}",
                      "missing-template")
            return
        if name not in macros:
            found, problem = _macros_of(env, rs.templates[name], rs.templates,
                                        getattr(rep, 'thorough', True))
            macros[name] = found
            if problem is not None:
                rep.problems.append(problem)
        found = macros[name]
        if found is not None and "call" not in found:
            rep.error(rf, path, f"template {name} defines no `call(c)` macro: every prompt "
                      "template must write an example call in the format it asks for",
                      "template-call-macro")

    styles = data.get("styles") or {}
    for style, entry in styles.items():
        if not isinstance(entry, dict):
            continue
        check_template(("styles", style, "template"), entry.get("template"))
        d = entry.get("dialect")
        if isinstance(d, str) and d not in dialects:
            rep.add(rf, ("styles", style, "dialect"), f"style {style!r} asks for the {d!r} "
                    "format, but no dialect in rules/dialects/ parses it", "emulation-dialect",
                    level)
    for d, entry in (data.get("trained") or {}).items():
        if not isinstance(entry, dict):
            continue
        check_template(("trained", d, "template"), entry.get("template"))
        if d not in dialects:
            rep.add(rf, ("trained", d), f"the trained prompt for {d!r} asks for a format no "
                    "dialect in rules/dialects/ parses", "emulation-dialect", level)
        drf = rs.get("dialect", d)
        own = drf.data.get("template") if drf is not None and isinstance(drf.data, dict) else None
        if isinstance(own, str) and own != entry.get("template"):
            rep.warning(rf, ("trained", d, "template"), f"dialects/{d}.yaml names template "
                        f"{own!r}; this table's {entry.get('template')!r} is used",
                        "emulation-template-mismatch")
    block = (data.get("turns") or {}).get("system_block")
    if isinstance(block, str) and block not in rs.templates:
        close = get_close_matches(block, list(rs.templates), n=1)
        rep.error(rf, ("turns", "system_block"), f"template {block!r} does not exist under "
                  f"templates/" + (f"; did you mean {close[0]}?" if close else ""),
                  "missing-template")
    selection = data.get("selection") or []
    for j, sel in enumerate(selection):
        if not isinstance(sel, dict):
            continue
        use = sel.get("use")
        if isinstance(use, str) and use != "trained" and use not in styles:
            close = get_close_matches(use, [*styles, "trained"], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else \
                f"; styles: {', '.join(sorted(styles))} or trained"
            rep.error(rf, ("selection", j, "use"), f"unknown style {use!r}{hint}",
                      "emulation-style")
        for key, want in (sel.get("when") or {}).items():
            if key in _NUMERIC_FIELDS and not isinstance(want, int) and not (
                    isinstance(want, str) and _CMP.match(want)):
                rep.error(rf, ("selection", j, "when", key), f"cannot read {key} condition "
                          f"{want!r}; write a number or a comparison like '<8192'",
                          "emulation-condition")
    if selection and isinstance(selection[-1], dict) and selection[-1].get("when"):
        rep.error(rf, ("selection", len(selection) - 1), "the last selection entry needs no "
                  "`when`: it is the fallback for capabilities nothing else matches",
                  "emulation-fallback")
