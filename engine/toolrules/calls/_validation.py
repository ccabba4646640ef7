"""Validating tool calls against their JSON Schema, driven by rules/validation.yaml.

Structured, actionable errors for validate-and-retry loops, retry feedback that carries a
corrected example call, the dispatcher's size guards and its `{ok, data, warnings, errors}`
envelope. Schemas are checked with jsonschema's draft 2020-12 validator ($ref, anyOf,
formats; formats jsonschema cannot check alone come from the table as regexes).
Coercions ("3" -> 3) happen only when the caller opts in, and only where the schema
asks for the target type.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any

from .._errors import SchemaError, UnknownRuleError
from .._jsonutil import json_type as _json_type
from .._jsonutil import resolve_pointer
from .._types import Tool, ToolCall, coerce_tool, coerce_tools
from ..rules._default import resolve_engine

__all__ = [
    "ToolEnvelope",
    "ValidationError",
    "ValidationResult",
    "ValidationRules",
    "as_tool_call",
    "coerce_call",
    "json_type",
    "tool_index",
    "validation_rules",
]

_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_MAX_VALIDATORS = 256
# Schemas that passed the draft 2020-12 meta-schema check, by their canonical JSON text:
# checking is the costly part of building a validator, and the same tool schema arrives
# as a new object in every request (and in every engine of an evaluation).
_CHECKED_SCHEMAS: OrderedDict[str, None] = OrderedDict()
_MAX_CHECKED = 4096


def fill(template: str | None, values: Mapping[str, Any]) -> str | None:
    """Replace {name} placeholders from `values` (plain names only; unknown ones stay)."""
    if template is None:
        return None
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values
                            else m.group(0), template)


def json_type(value: Any) -> str:
    """The JSON type name of a Python value (a non-JSON value: its Python type name)."""
    return _json_type(value) or type(value).__name__


def path_text(path: Iterable[Any]) -> str:
    """('items', 0, 'name') -> 'items[0].name'."""
    out = ""
    for step in path:
        if isinstance(step, int):
            out += f"[{step}]"
        else:
            out += f".{step}" if out else str(step)
    return out


@dataclass(frozen=True, slots=True)
class ValidationError:
    """One thing wrong with a call, phrased so the model can fix it."""

    tool_name: str
    """The tool the call names."""
    parameter: str | None
    """The parameter path (`items[0].name`), or None for the call as a whole."""
    error: str
    """What is wrong."""
    suggestion: str | None = None
    """How to fix it."""
    expected: str | None = None
    """What was expected."""
    received: str | None = None
    """What was received (JSON, cut to a readable length)."""
    code: str = "invalid"
    """The check that failed: a jsonschema keyword, unknown_tool, arguments_not_object ..."""
    path: tuple[str | int, ...] = ()
    """The parameter path as keys and indexes."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tool": self.tool_name, "parameter": self.parameter,
                               "code": self.code, "error": self.error}
        for key in ("expected", "received", "suggestion"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True, slots=True)
class ValidationResult:
    """A checked call: the call (coerced when asked), its errors, the coercions applied."""

    call: ToolCall
    errors: tuple[ValidationError, ...] = ()
    coercions: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass(frozen=True, slots=True)
class ToolEnvelope:
    """The dispatcher's normalized result, the envelope `{ok, data, warnings, errors}`."""

    ok: bool
    data: Any = None
    warnings: tuple[str, ...] = ()
    errors: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "data": self.data, "warnings": list(self.warnings),
                "errors": [dict(e) for e in self.errors]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, default=str)


# ---------------------------------------------------------------- inputs

def tool_index(tools: Any) -> dict[str, Tool]:
    """name -> Tool from a Tool, a tool dict, a list of them, or a name -> tool mapping."""
    if isinstance(tools, Mapping) and not any(k in tools for k in ("name", "function", "type")):
        return {name: coerce_tool(t) for name, t in tools.items()}
    return {t.name: t for t in coerce_tools(tools)}


def coerce_call(call: Any) -> tuple[str | None, str, Any]:
    """(id, name, arguments) from a ToolCall or a call dict in any common shape.

    Arguments given as JSON text are decoded; text that is not JSON is returned as is
    (validation then reports it).
    """
    if isinstance(call, ToolCall):
        return call.id, call.name, call.arguments
    if not isinstance(call, Mapping):
        raise TypeError(f"a tool call must be a ToolCall or a dict, not {type(call).__name__}")
    fn: Mapping[str, Any] = call["function"] if isinstance(call.get("function"), Mapping) else call
    name = fn.get("name")
    if not isinstance(name, str):
        raise ValueError(f"tool call has no name: {dict(call)!r:.200}")
    args: Any = None
    for key in ("arguments", "input", "parameters", "args"):
        if key in fn:
            args = fn[key]
            break
    if args is None:
        args = {}
    if isinstance(args, str):
        text = args.strip()
        with contextlib.suppress(ValueError):
            args = json.loads(text) if text else {}
    return call.get("id"), name, args


def as_tool_call(call: Any) -> ToolCall:
    """A ToolCall from any call shape (arguments that are not an object become {})."""
    if isinstance(call, ToolCall):
        return call
    call_id, name, args = coerce_call(call)
    return ToolCall(call_id, name, args if isinstance(args, dict) else {})


# ---------------------------------------------------------------- compiled rules

@dataclass(frozen=True, slots=True)
class _Coercion:
    name: str
    source: str
    target: str
    pattern: re.Pattern[str] | None
    values: dict[str, Any] | None
    parse_json: bool

    def convert(self, value: Any) -> tuple[bool, Any]:
        if json_type(value) != self.source:
            return False, None
        if self.values is not None:
            if isinstance(value, str) and value.strip() in self.values:
                return True, self.values[value.strip()]
            return False, None
        if self.parse_json:
            try:
                out = json.loads(value)
            except (TypeError, ValueError):
                return False, None
            return json_type(out) == self.target, out
        if self.pattern is not None and not self.pattern.fullmatch(str(value).strip()):
            return False, None
        text = str(value).strip()
        try:
            if self.target == "integer":
                return True, int(text)
            if self.target == "number":
                number = float(text)
                return math.isfinite(number), number
        except ValueError:
            return False, None
        if self.target == "string":
            return True, text
        return False, None


def _check_schema_once(schema: Mapping[str, Any], validator_class: Any) -> None:
    """Check `schema` against the meta-schema unless the same schema (by content) passed
    before; raises jsonschema's SchemaError like `check_schema`."""
    try:
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):  # not JSON text (a Python-only value): check each time
        validator_class.check_schema(schema)
        return
    if key in _CHECKED_SCHEMAS:
        _CHECKED_SCHEMAS.move_to_end(key)
        return
    validator_class.check_schema(schema)
    _CHECKED_SCHEMAS[key] = None
    if len(_CHECKED_SCHEMAS) > _MAX_CHECKED:
        _CHECKED_SCHEMAS.popitem(last=False)


class ValidationRules:
    """rules/validation.yaml compiled once per engine, plus a cache of validators."""

    def __init__(self, table: Any):
        if not isinstance(table, dict):
            raise UnknownRuleError("rule table", "validation", ())
        self.messages: dict[str, dict[str, str]] = {k: dict(v) for k, v in
                                                     table["messages"].items()}
        self.type_names: dict[str, str] = dict(table.get("type_names") or {})
        self.received_chars: int = table.get("received_chars", 80)
        self.closest_names: int = table.get("closest_names", 3)
        self.did_you_mean: str = table.get("did_you_mean", "")
        self.coercions = [_Coercion(c["name"], c["from"], c["to"],
                                    re.compile(c["pattern"]) if c.get("pattern") else None,
                                    dict(c["values"]) if c.get("values") is not None else None,
                                    bool(c.get("json"))) for c in table.get("coercions") or []]
        self.formats = {k: re.compile(v) for k, v in (table.get("formats") or {}).items()}
        ex = table.get("examples") or {}
        self.by_name = [(re.compile(e["pattern"]), e["value"]) for e in ex.get("by_name") or []]
        self.by_format: dict[str, Any] = dict(ex.get("by_format") or {})
        self.by_type: dict[str, Any] = dict(ex.get("by_type") or {})
        limits = table.get("limits") or {}
        self.max_tool_args_bytes: int = limits.get("max_tool_args_bytes", 200_000)
        self.max_tool_output_bytes: int = limits.get("max_tool_output_bytes", 200_000)
        self.envelope: dict[str, dict[str, str]] = {k: dict(v) for k, v in
                                                     (table.get("envelope") or {}).items()}
        self.max_attempts: int = (table.get("retry") or {}).get("max_attempts", 3)
        self.feedback_template: str = table.get("feedback_template", "feedback/validation.j2")
        self._validators: OrderedDict[int, tuple[Any, Any]] = OrderedDict()
        self._checker: Any = None

    # ------------------------------------------------------------ jsonschema

    def _format_checker(self) -> Any:
        if self._checker is None:
            from jsonschema import Draft202012Validator, FormatChecker

            checker = FormatChecker()
            checker.checkers.update(Draft202012Validator.FORMAT_CHECKER.checkers)
            for name, rx in self.formats.items():
                if name not in checker.checkers:
                    checker.checks(name)(lambda value, rx=rx: not isinstance(value, str)
                                         or rx.fullmatch(value) is not None)
            self._checker = checker
        return self._checker

    def validator(self, schema: Any, cache: bool = True) -> Any:
        """A draft 2020-12 validator for `schema`, checked and cached while the schema object
        lives; `cache=False` is for parts of a schema already checked (neither again)."""
        hit = self._validators.get(id(schema)) if cache else None
        if hit is not None and hit[0] is schema:
            self._validators.move_to_end(id(schema))
            return hit[1]
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError as JsonSchemaError

        if not isinstance(schema, Mapping):
            raise SchemaError(f"a tool's parameters must be a JSON Schema object, not "
                              f"{json_type(schema)}")
        try:
            if cache:
                _check_schema_once(schema, Draft202012Validator)
        except JsonSchemaError as exc:
            where = path_text(exc.absolute_path) or "(root)"
            raise SchemaError(f"invalid tool schema at {where}: {exc.message}") from None
        v = Draft202012Validator(schema, format_checker=self._format_checker())
        if cache:
            self._validators[id(schema)] = (schema, v)  # holding `schema` keeps its id unique
            if len(self._validators) > _MAX_VALIDATORS:
                self._validators.popitem(last=False)
        return v

    def _raw_errors(self, validator: Any, instance: Any) -> list[Any] | str:
        """jsonschema errors, or the unresolvable reference as text."""
        from referencing.exceptions import Unresolvable

        try:
            return list(validator.iter_errors(instance))
        except Unresolvable as exc:
            return str(getattr(exc, "ref", exc))

    # ------------------------------------------------------------ checking

    def check(self, call: Any, tools: Any, coerce: Any = None) -> ValidationResult:
        call_id, name, args = coerce_call(call)
        index = tools if isinstance(tools, dict) and all(
            isinstance(t, Tool) for t in tools.values()) else tool_index(tools)
        tool = index.get(name)
        if tool is None:
            err = self._error("unknown_tool", name, (), closest=self.closest(name, index))
            return ValidationResult(ToolCall(call_id, name, args if isinstance(args, dict)
                                             else {}), (err,))
        if not isinstance(args, dict):
            err = self._error("arguments_not_object", name, (), instance=args,
                              received_type=json_type(args))
            return ValidationResult(ToolCall(call_id, name, {}), (err,))
        schema = tool.parameters if tool.parameters is not None else {}
        validator = self.validator(schema)
        applied: list[str] = []
        enabled = self.enabled_coercions(coerce)
        if enabled:
            args = copy.deepcopy(args)
            for _ in range(8):
                raw = self._raw_errors(validator, args)
                if isinstance(raw, str) or not self._coerce_round(raw, args, enabled, applied):
                    break
        raw = self._raw_errors(validator, args)
        if isinstance(raw, str):
            errors = [self._error("unresolvable_ref", name, (), pattern=raw)]
        else:
            errors = self.convert(raw, name, schema)
        return ValidationResult(ToolCall(call_id, name, args), tuple(errors), tuple(applied))

    def close_names(self, name: str, index: Mapping[str, Any]) -> list[str]:
        """Offered names close to `name`: other case, namespaced, or similar spelling."""
        names = list(index)
        out = [n for n in names if n.lower() == name.lower() and n != name]
        out += [n for n in names if n not in out and (n.endswith(f"_{name}") or
                                                      name.endswith(f"_{n}"))]
        out += [n for n in get_close_matches(name, names, n=self.closest_names, cutoff=0.5)
                if n not in out]
        return out[: self.closest_names]

    def closest(self, name: str, index: Mapping[str, Any]) -> list[str]:
        """close_names, or (when nothing is close) the offered names."""
        return self.close_names(name, index) or sorted(index)[:10]

    def enabled_coercions(self, coerce: Any) -> list[_Coercion]:
        if not coerce:
            return []
        if coerce is True:
            return list(self.coercions)
        wanted = [coerce] if isinstance(coerce, str) else list(coerce)
        known = {c.name: c for c in self.coercions}
        missing = [w for w in wanted if w not in known]
        if missing:
            raise UnknownRuleError("coercion", missing[0], list(known))
        return [known[w] for w in wanted]

    def _coerce_round(self, raw: list[Any], args: dict[str, Any],
                      enabled: list[_Coercion], applied: list[str]) -> bool:
        done: set[tuple[Any, ...]] = set()
        for err in _leaves(raw):
            if err.validator != "type":
                continue
            path = tuple(err.absolute_path)
            if not path or path in done:
                continue
            wanted = err.validator_value if isinstance(err.validator_value, list) \
                else [err.validator_value]
            for c in enabled:
                if c.target not in wanted:
                    continue
                ok, value = c.convert(err.instance)
                if ok and _set_path(args, path, value):
                    done.add(path)
                    applied.append(f"{path_text(path)}: {_short(err.instance, 40)} -> "
                                   f"{_short(value, 40)} ({c.name})")
                    break
        return bool(done)

    # ------------------------------------------------------------ messages

    def _error(self, code: str, tool: str, path: tuple[Any, ...], *,
               instance: Any = None, expected: str | None = None, **values: Any) -> ValidationError:
        msg = self.messages.get(code) or self.messages.get("default") or {"error": code}
        param = path_text(path) or None
        leaf = path[-1] if path and isinstance(path[-1], str) else (param or "the arguments")
        vals: dict[str, Any] = {"tool": tool, "param": param or "the arguments", "name": leaf,
                                "received": _short(instance, self.received_chars),
                                "received_type": self.type_names.get(json_type(instance),
                                                                     json_type(instance))}
        if isinstance(values.get("closest"), list):
            values["closest"] = ", ".join(values["closest"])
        vals.update({k: v for k, v in values.items() if v is not None})
        if expected is not None:
            vals["expected"] = expected
        exp = fill(msg.get("expected"), vals) if msg.get("expected") else expected
        if exp is not None:
            vals["expected"] = exp
        received = None if code in ("required", "required_misspelled", "unknown_tool") \
            else vals["received"]
        return ValidationError(tool_name=tool, parameter=param, error=fill(msg["error"], vals) or "",
                               suggestion=fill(msg.get("suggestion"), vals), expected=exp,
                               received=received, code=code, path=path)

    def types_text(self, types: Any) -> str:
        items = types if isinstance(types, list) else [types]
        return " or ".join(str(self.type_names.get(t, t)) for t in items)

    def convert(self, raw: list[Any], tool: str, schema: Mapping[str, Any]) -> list[ValidationError]:
        out: list[ValidationError] = []
        seen_required: set[tuple[Any, ...]] = set()
        for err in sorted(raw, key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path)))):
            out.extend(self._convert_one(err, tool, schema, seen_required))
        # a misspelled required key is reported once (as "rename"), not also as unknown
        renamed = {item[1] for item in seen_required if item[0] == "renamed"}
        unique: dict[tuple[Any, ...], ValidationError] = {}
        for e in out:
            if e.code in ("additionalProperties", "unevaluatedProperties") and e.path in renamed:
                continue
            unique.setdefault((e.path, e.code, e.error), e)
        return sorted(unique.values(), key=lambda e: tuple(
            (0, f"{p:012d}") if isinstance(p, int) else (1, str(p)) for p in e.path))

    def _convert_one(self, err: Any, tool: str, schema: Mapping[str, Any],
                     seen_required: set[tuple[Any, ...]]) -> list[ValidationError]:
        kw = err.validator
        path = tuple(err.absolute_path)
        inst = err.instance
        if kw == "type" and not path:
            return [self._error("arguments_not_object", tool, (), instance=inst,
                                received_type=json_type(inst))]
        if kw == "required":
            out = []
            props = err.schema.get("properties") or {} if isinstance(err.schema, Mapping) else {}
            extras = [k for k in inst if k not in props] if isinstance(inst, Mapping) else []
            for prop in err.validator_value:
                if not isinstance(inst, Mapping) or prop in inst or (path, prop) in seen_required:
                    continue
                seen_required.add((path, prop))
                expected = self._expected_of(props.get(prop))
                close = get_close_matches(prop, extras, n=1, cutoff=0.6)
                if close:
                    seen_required.add(("renamed", (*path, close[0])))
                    out.append(self._error("required_misspelled", tool, (*path, prop),
                                           expected=expected, extra=close[0]))
                else:
                    out.append(self._error("required", tool, (*path, prop), expected=expected))
            return out
        if kw in ("additionalProperties", "unevaluatedProperties"):
            props = err.schema.get("properties") or {} if isinstance(err.schema, Mapping) else {}
            patterns = (err.schema.get("patternProperties") or {}) \
                if isinstance(err.schema, Mapping) else {}
            extras = [k for k in inst if k not in props
                      and not any(re.search(p, k) for p in patterns)] \
                if isinstance(inst, Mapping) else []
            out = []
            for key in extras:
                close = get_close_matches(key, list(props), n=self.closest_names, cutoff=0.6)
                hint = fill(self.did_you_mean, {"closest": ", ".join(close)}) if close else ""
                out.append(self._error(kw, tool, (*path, key), instance=inst[key],
                                       closest=hint))
            return out
        if kw in ("anyOf", "oneOf") and err.context:
            branch = _best_branch(err)
            if branch is not None:
                nested: list[ValidationError] = []
                for sub in branch:
                    nested.extend(self._convert_one(sub, tool, schema, seen_required))
                return nested
            labels = [self._expected_of(s) for s in err.validator_value]
            return [self._error(kw, tool, path, instance=inst,
                                expected=" or ".join(dict.fromkeys(str(x) for x in labels)))]
        if kw == "type":
            return [self._error("type", tool, path, instance=inst,
                                expected=self.types_text(err.validator_value))]
        if kw in ("enum", "const"):
            allowed = err.validator_value if kw == "enum" else [err.validator_value]
            return [self._error(kw, tool, path, instance=inst,
                                allowed=", ".join(json.dumps(v, ensure_ascii=False)
                                                  for v in allowed))]
        if kw == "format":
            example = self.by_format.get(err.validator_value)
            return [self._error(kw, tool, path, instance=inst, format=err.validator_value,
                                example=json.dumps(example) if example is not None else "")]
        if kw == "pattern":
            return [self._error(kw, tool, path, instance=inst, pattern=err.validator_value)]
        if kw == "dependentRequired":
            missing = []
            for prop, deps in (err.validator_value or {}).items():
                if isinstance(inst, Mapping) and prop in inst:
                    missing += [d for d in deps if d not in inst]
            return [self._error(kw, tool, path, instance=inst, extra=", ".join(missing))]
        if kw in self.messages:
            return [self._error(kw, tool, path, instance=inst, limit=err.validator_value)]
        return [self._error("default", tool, path, instance=inst, limit=err.validator_value,
                            expected=err.message)]

    def _expected_of(self, schema: Any) -> str | None:
        if not isinstance(schema, Mapping):
            return None
        if "enum" in schema:
            return "one of " + ", ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
        if "const" in schema:
            return json.dumps(schema["const"], ensure_ascii=False)
        if "type" in schema:
            text = self.types_text(schema["type"])
            return f"{text} ({schema['format']})" if schema.get("format") else text
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                labels = [self._expected_of(s) or "any value" for s in schema[key]]
                return " or ".join(dict.fromkeys(labels))
        if "$ref" in schema:
            return self.type_names.get("object", "object")
        return None

    # ------------------------------------------------------------ examples

    def example_value(self, schema: Any, root: Any, name: str = "value", depth: int = 0) -> Any:
        """A value that satisfies `schema` (best effort), for corrected calls and guidance."""
        if not isinstance(schema, Mapping) or depth > 8:
            return fill(self.by_type.get("string", "example"), {"param": name})
        if isinstance(schema.get("$ref"), str):
            target = _resolve_local(root, schema["$ref"])
            if target is not None:
                merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
                return self.example_value(merged, root, name, depth + 1)
        for key in ("default", "const"):
            if key in schema:
                return copy.deepcopy(schema[key])
        if isinstance(schema.get("examples"), list) and schema["examples"]:
            return copy.deepcopy(schema["examples"][0])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return copy.deepcopy(schema["enum"][0])
        for key in ("anyOf", "oneOf"):
            branches = [b for b in schema.get(key) or [] if isinstance(b, Mapping)]
            if branches:
                pick = next((b for b in branches if b.get("type") != "null"), branches[0])
                return self.example_value(pick, root, name, depth + 1)
        if isinstance(schema.get("allOf"), list):
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                if isinstance(part, Mapping):
                    merged = _merge_schemas(merged, part)
            return self.example_value(merged, root, name, depth + 1)
        kind = _first_type(schema)
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema \
                else "string"
        for rx, value in self.by_name:
            if rx.search(name) and (json_type(value) == kind or
                                    (kind == "number" and json_type(value) == "integer")):
                return copy.deepcopy(value)
        if kind == "object":
            props = schema.get("properties") or {}
            keys = list(schema.get("required") or [])
            return {k: self.example_value(props.get(k, {}), root, k, depth + 1) for k in keys
                    if isinstance(k, str)}
        if kind == "array":
            if isinstance(schema.get("prefixItems"), list):
                return [self.example_value(s, root, name, depth + 1) for s in schema["prefixItems"]]
            count = max(int(schema.get("minItems") or 1), 1)
            item = self.example_value(schema.get("items", {}), root, name, depth + 1)
            return [copy.deepcopy(item) for _ in range(count)]
        if kind == "string":
            fmt = schema.get("format")
            text = self.by_format[fmt] if fmt in self.by_format else \
                fill(str(self.by_type.get("string", "example")), {"param": name}) or ""
            text = str(text)
            low, high = schema.get("minLength"), schema.get("maxLength")
            if isinstance(low, int) and len(text) < low:
                text = text + "x" * (low - len(text))
            if isinstance(high, int) and len(text) > high:
                text = text[:high]
            return text
        if kind in ("integer", "number"):
            return _number_example(schema, self.by_type.get(kind, 1), kind == "integer")
        if kind == "boolean":
            return self.by_type.get("boolean", True)
        if kind == "null":
            return None
        return fill(str(self.by_type.get("string", "example")), {"param": name})

    def example_arguments(self, tool: Tool, required_only: bool = True) -> dict[str, Any]:
        schema = tool.parameters if isinstance(tool.parameters, Mapping) else {}
        props = schema.get("properties") or {}
        keys = list(schema.get("required") or []) if required_only else list(props)
        return {k: self.example_value(props.get(k, {}), schema, k) for k in keys
                if isinstance(k, str)}

    def corrected_arguments(self, result: ValidationResult, tool: Tool) -> dict[str, Any]:
        """The call's arguments with every error fixed where it is, keeping what was valid:
        misspelled keys renamed, unknown keys dropped, bad values coerced when a coercion
        makes them valid, else replaced by an example value; missing keys added."""
        schema = tool.parameters if isinstance(tool.parameters, Mapping) else {}
        v = self.validator(schema)
        args = copy.deepcopy(result.call.arguments) if isinstance(result.call.arguments, dict) \
            else {}
        for _ in range(8):
            raw = self._raw_errors(v, args)
            if not raw:
                return args
            if isinstance(raw, str):
                break
            deepest_first = sorted(raw, key=lambda e: -len(e.absolute_path))
            if not any([self._fix(args, err, schema) for err in deepest_first]):
                break
        fallback = self.example_arguments(tool, required_only=True)
        for k, value in args.items():  # keep every valid part of the call that still fits
            if k not in fallback and not self._raw_errors(v, {**fallback, k: value}):
                fallback[k] = value
        return fallback

    def _fix(self, args: dict[str, Any], err: Any, root: Mapping[str, Any]) -> bool:
        path = tuple(err.absolute_path)
        node = _get_path(args, path)
        sub = err.schema if isinstance(err.schema, Mapping) else {}
        if err.validator in ("required", "dependentRequired") and isinstance(node, dict):
            props = sub.get("properties") or {}
            if err.validator == "required":
                missing = [p for p in err.validator_value if p not in node]
            else:
                missing = [d for k, deps in (err.validator_value or {}).items() if k in node
                           for d in deps if d not in node]
            for prop in missing:
                extras = [k for k in node if k not in props]
                close = get_close_matches(prop, extras, n=1, cutoff=0.6)
                node[prop] = node.pop(close[0]) if close else \
                    self.example_value(props.get(prop, {}), root, prop)
            return bool(missing)
        if err.validator in ("additionalProperties", "unevaluatedProperties") and \
                isinstance(node, dict):
            props = sub.get("properties") or {}
            extras = [k for k in node if k not in props and
                      not any(re.search(p, k) for p in sub.get("patternProperties") or {})]
            for key in extras:
                del node[key]
            return bool(extras)
        if not path:
            return False
        name = next((str(p) for p in reversed(path) if isinstance(p, str)), "value")
        return _set_path(args, path, self._fixed_value(node, sub, root, name))

    def _fixed_value(self, value: Any, schema: Any, root: Any, name: str) -> Any:
        """A coerced `value` when some coercion makes it valid, else an example value."""
        if value is not None and isinstance(schema, Mapping):
            combined = dict(schema)
            if isinstance(root, Mapping):  # keep the root's local $refs resolvable
                for key in ("$defs", "definitions"):
                    if key in root and key not in combined:
                        combined[key] = root[key]
            sub = self.validator(combined, cache=False)
            for c in self.coercions:
                ok, new = c.convert(value)
                if ok and not self._raw_errors(sub, new):
                    return new
        return self.example_value(schema, root, name)


# ---------------------------------------------------------------- helpers

def _leaves(errors: Iterable[Any]) -> Iterable[Any]:
    for e in errors:
        yield e
        if e.context:
            yield from _leaves(e.context)


def _best_branch(err: Any) -> list[Any] | None:
    """The anyOf/oneOf branch closest to matching, or None if the value fits no branch's type."""
    branches: dict[int, list[Any]] = {}
    for sub in err.context:
        idx = sub.relative_schema_path[0] if sub.relative_schema_path else 0
        branches.setdefault(idx, []).append(sub)
    depth = len(err.absolute_path)
    candidates = [b for b in branches.values()
                  if not all(s.validator == "type" and len(s.absolute_path) == depth for s in b)]
    if not candidates:
        return None
    return min(candidates, key=lambda b: (len(b), -max(len(s.absolute_path) for s in b)))


def _get_path(root: Any, path: tuple[Any, ...]) -> Any:
    node = root
    for step in path:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def _set_path(root: Any, path: tuple[Any, ...], value: Any) -> bool:
    node = root
    for step in path[:-1]:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return False
    try:
        node[path[-1]] = value
    except (KeyError, IndexError, TypeError):
        return False
    return True


def _short(value: Any, limit: int) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: max(limit - 3, 1)] + "..."


def _resolve_local(root: Any, ref: str) -> Mapping[str, Any] | None:
    node = resolve_pointer(root, ref)
    return node if isinstance(node, Mapping) else None


def _merge_schemas(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        if k == "properties" and isinstance(out.get(k), Mapping) and isinstance(v, Mapping):
            out[k] = {**out[k], **v}
        elif k == "required" and isinstance(out.get(k), list) and isinstance(v, list):
            out[k] = list(dict.fromkeys([*out[k], *v]))
        else:
            out.setdefault(k, v)
    return out


def _first_type(schema: Mapping[str, Any]) -> str | None:
    t = schema.get("type")
    if isinstance(t, str):
        return t
    if isinstance(t, list):
        non_null = [x for x in t if x != "null"]
        return non_null[0] if non_null else (t[0] if t else None)
    return None


def _number_example(schema: Mapping[str, Any], base: Any, integer: bool) -> Any:
    value = base if isinstance(base, (int, float)) and not isinstance(base, bool) else 1
    low, high = schema.get("minimum"), schema.get("maximum")
    xlow, xhigh = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if isinstance(low, (int, float)) and value < low:
        value = low
    if isinstance(xlow, (int, float)) and value <= xlow:
        value = xlow + 1
    if isinstance(high, (int, float)) and value > high:
        value = high
    if isinstance(xhigh, (int, float)) and value >= xhigh:
        value = xhigh - 1
    step = schema.get("multipleOf")
    if isinstance(step, (int, float)) and step > 0:
        value = math.ceil(value / step) * step
    if integer:
        return math.ceil(value) if not float(value).is_integer() else int(value)
    return float(value)


def validation_rules(engine: Any = None) -> ValidationRules:
    engine = resolve_engine(engine)
    return engine._cached("rules:validation",
                          lambda: ValidationRules(engine.ruleset.table("validation")))
