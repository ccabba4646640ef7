"""Provider wire formats: one generic interpreter for rules/providers/*.yaml.

A provider rule is data - JMESPath expressions that *build* wire objects from views of
the UTP values (tools, messages, a parsed response) and *read* UTP values out of wire
objects (request bodies, response bodies, stream events), plus tables (tool_choice,
finish reasons, option paths) and a schema transform pipeline (`_transforms`). Files
reuse each other with `extends:` (deep merge; null removes an inherited field).

Nothing here knows a provider: if a provider needs something this module cannot
express, the rule language grows a feature (a field in `_schemas_providers`) and the
provider says it in YAML.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from .._errors import CapabilityError, ParseError, UnknownRuleError
from ..rules._loader import RuleSet, merge
from ._transforms import Pipeline, compile_pipeline, validate_step

__all__ = ["CHOICE_KINDS", "MESSAGE_TRANSFORMS", "Provider", "check_rules", "compile_provider",
           "merged_rule"]

MAX_BODY_BYTES = 16 << 20
CHOICE_KINDS = ("auto", "none", "required", "named")
MEDIA_KINDS = ("image", "audio", "document")


# ---------------------------------------------------------------- expressions

# Closures by expression text: they are pure functions of it, and every engine over a rule
# set (an evaluation builds one per model and strategy) compiles the same expressions.
_COMPILED: dict[str, Callable[[Any], Any]] = {}


class Expr:
    """A compiled JMESPath expression that knows where it came from (for errors).

    The parsed expression is turned into Python closures once (`_closure`): the nodes
    the rules use most - fields, indexes, sub-expressions, multi-selects, literals,
    ||, &&, !, == and !=, projections, filters, flattening, function arguments - evaluate
    directly with JMESPath's own semantics (the functions themselves are JMESPath's);
    every other node (comparisons by order, slices, `&expr` arguments ...) is handed to
    JMESPath's interpreter. A
    proxy evaluates dozens of these per request: this keeps that a few microseconds."""

    __slots__ = ("_fn", "src", "where")

    def __init__(self, src: str, where: str):
        global _JMESPATH_ERROR
        import jmespath

        if not _JMESPATH_ERROR:
            _JMESPATH_ERROR = jmespath.exceptions.JMESPathError
        self.src = src
        self.where = where
        fn = _COMPILED.get(src)
        if fn is None:
            fn = _closure(cast(dict[str, Any], jmespath.compile(src).parsed))
            if len(_COMPILED) >= 8192:
                _COMPILED.clear()
            _COMPILED[src] = fn
        self._fn = fn

    def __call__(self, data: Any) -> Any:
        try:
            return self._fn(data)
        except _JMESPATH_ERROR as exc:
            raise ParseError(f"{self.where}: expression {self.src!r} failed: {exc}") from None

    def __repr__(self) -> str:
        return f"Expr({self.src!r})"


_INTERPRETER: Any = None


def _type_error(*args: Any) -> Exception:
    from jmespath.exceptions import JMESPathTypeError

    return JMESPathTypeError(*args)


# what a failed expression raises: set by the first Expr (jmespath is imported when the
# first expression is compiled, not per call - an expression runs many times a request)
_JMESPATH_ERROR: Any = ()


def _is_false(value: Any) -> bool:
    # JMESPath falsiness, not Python's: 0 is true, '' [] {} null false are false
    kind = type(value)
    if kind is str or kind is list or kind is dict:
        return not value
    if value is None or value is False:
        return True
    if kind is int or kind is float or kind is bool:
        return False
    return value == "" or value == [] or value == {}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _equals(x: Any, y: Any) -> bool:
    # 0/1 never equal false/true in JMESPath
    if type(x) is str or type(y) is str:  # the common case: a field against a name
        return bool(x == y)
    if (_is_number(x) and x in (0, 1) and isinstance(y, bool)) or \
            (_is_number(y) and y in (0, 1) and isinstance(x, bool)):
        return False
    return bool(x == y)


def _closure(node: dict[str, Any]) -> Callable[[Any], Any]:
    """One parsed JMESPath node as a function of the current value (see Expr)."""
    kind = node["type"]
    children = node.get("children") or []
    if kind == "field":
        name = node["value"]

        def field(value: Any) -> Any:
            if type(value) is dict:
                return value.get(name)
            return _get(value, name)
        return field
    if kind in ("subexpression", "index_expression"):
        walk = _steps(node)
        if walk is not None:
            return _path(walk)
    if kind in ("subexpression", "index_expression", "pipe"):
        steps = [_closure(c) for c in children]
        if len(steps) == 2:
            first, second = steps
            return lambda value: second(first(value))

        def chain(value: Any) -> Any:
            for step in steps:
                value = step(value)
            return value
        return chain
    if kind == "index":
        at = node["value"]

        def index(value: Any) -> Any:
            if not isinstance(value, list):
                return None
            try:
                return value[at]
            except IndexError:
                return None
        return index
    if kind == "literal":
        constant = node["value"]
        return lambda value: constant
    if kind in ("current", "identity"):
        return lambda value: value
    if kind == "multi_select_dict":
        pairs = [(c["value"], _closure(c["children"][0])) for c in children]

        def select_dict(value: Any) -> Any:
            if value is None:
                return None
            return {key: fn(value) for key, fn in pairs}
        return select_dict
    if kind == "multi_select_list":
        items = [_closure(c) for c in children]

        def select_list(value: Any) -> Any:
            if value is None:
                return None
            return [fn(value) for fn in items]
        return select_list
    if kind == "or_expression":
        left, right = (_closure(c) for c in children)

        def either(value: Any) -> Any:
            found = left(value)
            return right(value) if _is_false(found) else found
        return either
    if kind == "and_expression":
        left, right = (_closure(c) for c in children)

        def both(value: Any) -> Any:
            found = left(value)
            return found if _is_false(found) else right(value)
        return both
    if kind == "not_expression":
        (inner,) = (_closure(c) for c in children)

        def negate(value: Any) -> Any:
            found = inner(value)
            if _is_number(found) and found == 0:
                return False
            return not found
        return negate
    if kind == "comparator" and node["value"] in ("eq", "ne"):
        left, right = (_closure(c) for c in children)
        if node["value"] == "eq":
            return lambda value: _equals(left(value), right(value))
        return lambda value: not _equals(left(value), right(value))
    if kind in ("projection", "filter_projection", "flatten"):
        base = _closure(children[0])
        if kind == "flatten":
            def flatten(value: Any) -> Any:
                found = base(value)
                if not isinstance(found, list):
                    return None
                out: list[Any] = []
                for item in found:
                    if isinstance(item, list):
                        out.extend(item)
                    else:
                        out.append(item)
                return out
            return flatten
        each = _closure(children[1])
        keep = _closure(children[2]) if kind == "filter_projection" else None

        def project(value: Any) -> Any:
            found = base(value)
            if not isinstance(found, list):
                return None
            out = []
            for item in found:
                if keep is not None and _is_false(keep(item)):
                    continue
                got = each(item)
                if got is not None:
                    out.append(got)
            return out
        return project
    interpreter = _interpreter()
    if kind == "function_expression" and all(c.get("type") != "expref" for c in children):
        # the arguments as closures; the function itself is JMESPath's (its type checks),
        # but for the two that take any value (no check to make): type, not_null
        name = node["value"]
        args = [_closure(c) for c in children]
        if name == "type" and len(args) == 1:
            (arg,) = args
            return lambda value: _type_name(arg(value))
        if name == "not_null" and args:
            def not_null(value: Any) -> Any:
                for found in [fn(value) for fn in args]:  # each evaluated, as JMESPath does
                    if found is not None:
                        return found
                return None
            return not_null
        call = interpreter._functions.call_function
        if name == "merge" and args:
            def merge(value: Any) -> Any:
                found = [fn(value) for fn in args]
                if all(type(item) is dict for item in found):
                    out: dict[str, Any] = {}
                    for item in found:
                        out.update(item)
                    return out
                try:
                    return call(name, found)
                except (TypeError, ValueError):  # JMESPath checks only its first argument
                    wrong = next(item for item in found if not isinstance(item, dict))
                    raise _type_error("merge", wrong, _type_name(wrong), ["object"]) from None
            return merge
        return lambda value: call(name, [arg(value) for arg in args])
    return lambda value: interpreter.visit(node, value)


def _steps(node: dict[str, Any]) -> list[tuple[bool, Any]] | None:
    """A chain of plain fields and indexes (`a.b[0].c`) as (is a field, name or index)
    steps, or None when the chain holds anything else."""
    kind = node["type"]
    if kind == "field":
        return [(True, node["value"])]
    if kind == "index":
        return [(False, node["value"])]
    if kind in ("subexpression", "index_expression"):
        out: list[tuple[bool, Any]] = []
        for child in node.get("children") or []:
            part = _steps(child)
            if part is None:
                return None
            out.extend(part)
        return out
    return None


def _get(value: Any, name: str) -> Any:
    # a field of anything but a dict (the callers test for dict first): null unless it
    # is a mapping - an exception is slow, and null is the common case
    if value is None or type(value) in _NO_FIELDS:
        return None
    try:
        return value.get(name)
    except AttributeError:
        return None


_NO_FIELDS = frozenset({str, list, int, float, bool})


def _path(walk: list[tuple[bool, Any]]) -> Callable[[Any], Any]:
    """`a.b[0].c` in one function: a field of a non-object, an index of a non-array or
    past its end is null, as JMESPath has it."""
    if all(is_field for is_field, _ in walk):
        names = [name for _, name in walk]
        if len(names) == 2:
            first, second = names

            def two(value: Any) -> Any:
                value = value.get(first) if type(value) is dict else _get(value, first)
                return value.get(second) if type(value) is dict else _get(value, second)
            return two

        def fields(value: Any) -> Any:
            for name in names:
                value = value.get(name) if type(value) is dict else _get(value, name)
            return value
        return fields

    def path(value: Any) -> Any:
        for is_field, key in walk:
            if is_field:
                value = value.get(key) if type(value) is dict else _get(value, key)
            elif isinstance(value, list):
                try:
                    value = value[key]
                except IndexError:
                    return None
            else:
                return None
        return value
    return path


def _type_name(value: Any) -> str | None:
    # JMESPath's type(): what its own function answers, for every value
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, (float, int)):
        return "number"
    return "null" if value is None else None


def _interpreter() -> Any:
    global _INTERPRETER
    if _INTERPRETER is None:
        from jmespath.visitor import TreeInterpreter

        _INTERPRETER = TreeInterpreter()
    return _INTERPRETER


def _expr(value: Any, where: str) -> Expr | None:
    return Expr(value, where) if isinstance(value, str) else None


def get_path(body: Any, path: str) -> Any:
    node = body
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def set_path(body: dict[str, Any], path: str, value: Any, where: str = "") -> None:
    parts = path.split(".")
    node = body
    for part in parts[:-1]:
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        if not isinstance(nxt, dict):
            raise CapabilityError(f"{where}cannot set {path!r}: {part!r} is not an object here")
        node = nxt
    node[parts[-1]] = value


def prune(value: Any, opaque: set[int]) -> Any:
    """Drop nulls from containers an expression built: a field that is null is not sent.

    Values passed through from the caller (schemas, arguments, outputs) are `opaque`:
    kept exactly as they are, since a null inside them is data. Views give empty call
    lists as null, so `tool_calls[].{...}` disappears instead of sending [].
    """
    kind = type(value)
    if kind is str or value is None or id(value) in opaque:
        return value
    if isinstance(value, dict):
        return {k: v if type(v) is str else prune(v, opaque)
                for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [v if type(v) is str else prune(v, opaque) for v in value if v is not None]
    return value




def merged_sections(rs: RuleSet, failed: set[tuple[str, str]], key: str
                    ) -> Iterator[tuple[str, Any, dict[str, Any], dict[str, Any], tuple[str, ...]]]:
    """For lint: every provider rule that passed its schema and has a `key` section once
    `extends:` is merged, as (id, file, merged rule, the section, where to report it: the
    file's own section, else the file). Rules that do not merge are reported by the
    provider checks."""
    for rid, rf in sorted(rs.files.get("provider", {}).items()):
        if ("provider", rid) in failed or not isinstance(rf.data, dict):
            continue
        try:
            merged = merged_rule(rs, rid)
        except (ParseError, UnknownRuleError):
            continue
        sec = merged.get(key)
        if isinstance(sec, dict):
            yield rid, rf, merged, sec, ((key,) if isinstance(rf.data.get(key), dict) else ())


def merged_rule(rs: RuleSet, rule_id: str, _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A provider's data with its `extends:` chain applied (plain dicts)."""
    from ..rules._yaml import plain

    rf = rs.get("provider", rule_id)
    if rf is None:
        raise UnknownRuleError("provider", rule_id, rs.ids("provider"))
    data = plain(rf.data) if isinstance(rf.data, dict) else {}
    parent = data.get("extends")
    if isinstance(parent, str):
        if parent in _seen or parent == rule_id:
            raise ParseError(f"provider {rule_id!r}: extends cycle through {parent!r}")
        data = merge(merged_rule(rs, parent, (*_seen, rule_id)), data)
    data.pop("extends", None)
    data["id"] = rule_id
    return data


# ---------------------------------------------------------------- named message transforms

@dataclass(frozen=True, slots=True)
class NamedTransform:
    name: str
    where: str  # "messages" (outbound wire messages), "response" (inbound), "call"
    doc: str
    run: Callable[[Any], Any]


def _is_call_message(msg: Any) -> bool:
    return isinstance(msg, dict) and msg.get("role") == "assistant" and bool(msg.get("tool_calls"))


def _content_null_if_blank(msg: Any) -> Any:
    if _is_call_message(msg):
        content = msg.get("content")
        if content is None or (isinstance(content, str) and not content.strip()):
            msg["content"] = None
    return msg


def _reasoning_content_if_missing(msg: Any) -> Any:
    if _is_call_message(msg) and msg.get("reasoning_content") is None:
        msg["reasoning_content"] = ""
    return msg


def _map_call_arguments(msg: Any, fn: Callable[[Any], Any]) -> Any:
    calls = msg.get("tool_calls") if isinstance(msg, dict) else None
    if isinstance(calls, list):
        for call in calls:
            fn_part = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn_part, dict) and "arguments" in fn_part:
                fn_part["arguments"] = fn(fn_part["arguments"])
    return msg


def _args_to_string(value: Any) -> Any:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else value


def _args_to_object(value: Any) -> Any:
    if isinstance(value, str):
        try:
            decoded = json.loads(value) if value.strip() else {}
        except ValueError:
            return value
        return decoded if isinstance(decoded, dict) else value
    return value


def _function_call_to_tool_calls(msg: Any) -> Any:
    if isinstance(msg, dict) and isinstance(msg.get("function_call"), dict) and not msg.get("tool_calls"):
        fc = msg.pop("function_call")
        msg["tool_calls"] = [{"id": fc.get("id"), "type": "function",
                              "function": {"name": fc.get("name"), "arguments": fc.get("arguments")}}]
    return msg


def _tool_calls_object_to_array(msg: Any) -> Any:
    calls = msg.get("tool_calls") if isinstance(msg, dict) else None
    if isinstance(calls, dict):
        if "function" in calls or "name" in calls:
            msg["tool_calls"] = [calls]
        else:  # keyed by position: {"0": {...}, "1": {...}}
            keys = sorted(calls, key=lambda k: (not str(k).isdigit(), int(k) if str(k).isdigit() else 0, str(k)))
            msg["tool_calls"] = [calls[k] for k in keys]
    return msg


def _blank_arguments(args: Any) -> Any:
    if args is None or (isinstance(args, str) and not args.strip()):
        return {}
    return args


MESSAGE_TRANSFORMS: dict[str, NamedTransform] = {t.name: t for t in (
    NamedTransform("content_null_if_blank", "messages",
                   "assistant turns with tool calls send content null instead of blank text",
                   _content_null_if_blank),
    NamedTransform("reasoning_content_if_missing", "messages",
                   "assistant turns with tool calls carry reasoning_content (\"\" when there "
                   "was none): reasoner routes reject tool-call turns without it",
                   _reasoning_content_if_missing),
    NamedTransform("arguments_to_string", "messages",
                   "tool call arguments written as JSON text", lambda m: _map_call_arguments(m, _args_to_string)),
    NamedTransform("arguments_to_object", "messages",
                   "tool call arguments written as a JSON object", lambda m: _map_call_arguments(m, _args_to_object)),
    NamedTransform("function_call_to_tool_calls", "response",
                   "a legacy single function_call becomes a one-item tool_calls list",
                   _function_call_to_tool_calls),
    NamedTransform("tool_calls_object_to_array", "response",
                   "tool_calls sent as an object (one call, or keyed by index) becomes a list",
                   _tool_calls_object_to_array),
    NamedTransform("arguments_object_to_string", "response",
                   "arguments sent as an object are read as JSON text",
                   lambda m: _map_call_arguments(m, _args_to_string)),
    NamedTransform("blank_arguments_to_empty_object", "call",
                   "blank or missing arguments mean {}", _blank_arguments),
)}


# ---------------------------------------------------------------- compiled rules

@dataclass(frozen=True, slots=True)
class ChoiceEntry:
    send: Expr | None
    tools: str = "all"
    unsupported: str | None = None


@dataclass(frozen=True, slots=True)
class Reader:
    role: Expr | None
    roles: dict[str, str]
    text: Expr | None
    reasoning: Expr | None
    calls: Expr | None
    call: dict[str, Expr]
    results: Expr | None
    result: dict[str, Expr]
    refuse: Expr | None = None
    blocks: Expr | None = None
    parts: tuple[PartRule, ...] = ()


@dataclass(frozen=True, slots=True)
class PartRule:
    """How one kind of content block is read: as a UTP part, skipped (read elsewhere, or
    a declared loss) or refused."""

    when: Expr
    part: Expr | None
    skip: str | None
    refuse: str | None


@dataclass(frozen=True, slots=True)
class ToolRefusal:
    """An entry of a request's tool list that cannot be carried (`tools.read.refuse`): a
    server tool, a built-in tool, a tool type whose schema the provider defines. `omit`:
    the entry may be left out of the tools offered (reported with `reason`) instead of
    refusing the request - an optional capability the upstream cannot provide."""

    when: Expr
    reason: str
    omit: bool = False


@dataclass(frozen=True, slots=True)
class MediaWriter:
    """How content parts are written (`messages.media`): per part type, and for which roles."""

    roles: frozenset[str]
    kinds: dict[str, Expr]
    move_results: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class StreamRule:
    when: Expr | None
    text: Expr | None
    reasoning: Expr | None
    calls: dict[str, Any] | None
    end: Expr | None
    finish_reason: Expr | None


@dataclass(frozen=True)
class Provider:
    """One provider's rules, compiled (expressions, pipelines, tables)."""

    id: str
    data: dict[str, Any]
    model_path: str | None
    defaults: dict[str, Any]
    options: dict[str, str]
    reserved: frozenset[str]
    system_placement: str
    system_path: str | None
    system_shape: Expr | None
    system_read: Expr | None
    tools_path: str
    pipeline: Pipeline
    strict_default: str
    strict_pipeline: Pipeline | None
    tool_shape: Expr
    tool_wrap: Expr | None
    name_pattern: re.Pattern[str] | None
    sanitize_names: bool
    description_max: int | None
    max_tools: int | None
    keep_for_history: bool
    tools_read: dict[str, Expr]
    tools_read_pipeline: Pipeline
    choice_path: str | None
    choices: dict[str, ChoiceEntry]
    parallel_path: str | None
    parallel_enabled: Expr | None
    parallel_disabled: Expr | None
    parallel_needs_choice: str | None
    messages_path: str
    writers: dict[str, Expr]
    merge_field: str | None
    text_block: Expr | None
    message_transforms: tuple[str, ...]
    call_ids: dict[str, Any]
    reader: Reader
    response_messages: Expr | None
    finish_reason: Expr | None
    finish_map: dict[str, str]
    stop_with_calls: bool
    response_transforms: tuple[str, ...]
    call_transforms: tuple[str, ...]
    text_fallback: str
    unknown_dialect: str | None
    response_build: Expr | None
    response_message: Expr | None
    id_prefix: str
    max_bytes: int
    stream_rules: tuple[StreamRule, ...]
    sequential_calls: bool
    lossy: frozenset[str]
    _id_pattern: re.Pattern[str] | None = field(default=None)
    media: MediaWriter = field(default_factory=lambda: MediaWriter(frozenset(), {}))
    tools_refuse: tuple[ToolRefusal, ...] = ()
    renders_template: bool = False
    template_kwargs_path: str | None = None
    """Body path of the server's chat-template variables (`request.template_kwargs`)."""

    # ------------------------------------------------------------ finish reasons

    def finish(self, wire: Any, has_calls: bool) -> str | None:
        if wire is None:
            return "tool_calls" if has_calls else None
        value = self.finish_map.get(str(wire), str(wire).lower())
        if has_calls and value == "stop" and self.stop_with_calls:
            return "tool_calls"
        return value

    def wire_finish(self, utp: str | None) -> str | None:
        if utp is None:
            return None
        for wire, value in self.finish_map.items():
            if value == utp:
                return wire
        if utp == "tool_calls" and self.stop_with_calls:
            return self.wire_finish("stop")
        return utp


def _reader(data: dict[str, Any], where: str) -> Reader:
    return Reader(
        role=_expr(data.get("role"), f"{where}.role"),
        roles=dict(data.get("roles") or {}),
        text=_expr(data.get("text"), f"{where}.text"),
        reasoning=_expr(data.get("reasoning"), f"{where}.reasoning"),
        calls=_expr(data.get("calls"), f"{where}.calls"),
        call={k: Expr(v, f"{where}.call.{k}") for k, v in (data.get("call") or {}).items() if v},
        results=_expr(data.get("results"), f"{where}.results"),
        result={k: Expr(v, f"{where}.result.{k}") for k, v in (data.get("result") or {}).items() if v},
        refuse=_expr(data.get("refuse"), f"{where}.refuse"),
        blocks=_expr(data.get("blocks"), f"{where}.blocks"),
        parts=tuple(PartRule(when=Expr(r["when"], f"{where}.parts[{i}].when"),
                             part=_expr(r.get("part"), f"{where}.parts[{i}].part"),
                             skip=r.get("skip"), refuse=r.get("refuse"))
                    for i, r in enumerate(data.get("parts") or ()) if isinstance(r, dict)),
    )


def _media(data: dict[str, Any], where: str) -> MediaWriter:
    return MediaWriter(roles=frozenset(data.get("roles") or ()),
                       kinds={k: Expr(v, f"{where}.{k}") for k in ("text", *MEDIA_KINDS)
                              if isinstance(v := data.get(k), str) and v},
                       move_results=dict(data["move_results"])
                       if isinstance(data.get("move_results"), dict) else None)


def _choice(value: Any, where: str) -> ChoiceEntry:
    if isinstance(value, str):
        return ChoiceEntry(Expr(value, where))
    if isinstance(value, dict):
        return ChoiceEntry(_expr(value.get("send"), f"{where}.send"), value.get("tools", "all"),
                           value.get("unsupported"))
    return ChoiceEntry(None)


def compile_provider(rs: RuleSet, rule_id: str) -> Provider:
    """Compile one provider (its extends chain merged). Lint has validated the files."""
    d = merged_rule(rs, rule_id)
    w = f"provider {rule_id}"
    req = d.get("request") or {}
    system = d.get("system") or {}
    tools = d.get("tools") or {}
    strict = tools.get("strict") or None
    names = tools.get("names") or {}
    tc = d.get("tool_choice") or {}
    par = d.get("parallel_calls") or {}
    msgs = d.get("messages") or {}
    resp = d.get("response") or {}
    stream = d.get("stream") or {}
    if not tools.get("shape"):
        raise ParseError(f"{w}: tools.shape is missing (run `toolrules lint`)")
    stream_rules = []
    for i, ev in enumerate(stream.get("events") or []):
        calls = ev.get("calls")
        ccomp = None
        if isinstance(calls, dict):
            ccomp = {k: (Expr(v, f"{w} stream.events[{i}].calls.{k}") if isinstance(v, str) else v)
                     for k, v in calls.items()}
        stream_rules.append(StreamRule(
            when=_expr(ev.get("when"), f"{w} stream.events[{i}].when"),
            text=_expr(ev.get("text"), f"{w} stream.events[{i}].text"),
            reasoning=_expr(ev.get("reasoning"), f"{w} stream.events[{i}].reasoning"),
            calls=ccomp, end=_expr(ev.get("end"), f"{w} stream.events[{i}].end"),
            finish_reason=_expr(ev.get("finish_reason"), f"{w} stream.events[{i}].finish_reason")))
    call_ids = dict(msgs.get("call_ids") or {})
    return Provider(
        id=rule_id, data=d,
        model_path=req.get("model"),
        defaults=dict(req.get("defaults") or {}),
        options={k: v for k, v in (req.get("options") or {}).items() if v},
        reserved=frozenset(req.get("reserved") or ()),
        system_placement=system.get("placement", "message"),
        system_path=system.get("path"),
        system_shape=_expr(system.get("shape"), f"{w} system.shape"),
        system_read=_expr(system.get("read"), f"{w} system.read"),
        tools_path=tools.get("path", "tools"),
        pipeline=compile_pipeline(tools.get("pipeline")),
        strict_default=(strict or {}).get("default", "off") if strict else "off",
        strict_pipeline=compile_pipeline(strict.get("pipeline")) if strict else None,
        tool_shape=Expr(tools["shape"], f"{w} tools.shape"),
        tool_wrap=_expr(tools.get("wrap"), f"{w} tools.wrap"),
        name_pattern=re.compile(names["pattern"]) if names.get("pattern") else None,
        sanitize_names=bool(names.get("sanitize")),
        description_max=tools.get("description_max"),
        max_tools=tools.get("max_tools"),
        keep_for_history=bool(tools.get("keep_for_history")),
        tools_read={k: Expr(v, f"{w} tools.read.{k}") for k, v in (tools.get("read") or {}).items()
                    if isinstance(v, str)},
        tools_read_pipeline=compile_pipeline((tools.get("read") or {}).get("pipeline")),
        choice_path=tc.get("path"),
        choices={k: _choice(tc.get(k), f"{w} tool_choice.{k}") for k in CHOICE_KINDS if k in tc},
        parallel_path=par.get("path"),
        parallel_enabled=_expr(par.get("enabled"), f"{w} parallel_calls.enabled"),
        parallel_disabled=_expr(par.get("disabled"), f"{w} parallel_calls.disabled"),
        parallel_needs_choice=par.get("needs_choice"),
        messages_path=msgs.get("path", "messages"),
        writers={k: Expr(msgs[k], f"{w} messages.{k}")
                 for k in ("system", "user", "assistant", "tool") if isinstance(msgs.get(k), str)},
        merge_field=msgs.get("merge"),
        text_block=_expr(msgs.get("text_block"), f"{w} messages.text_block"),
        message_transforms=tuple(msgs.get("transforms") or ()),
        call_ids=call_ids,
        reader=_reader(msgs.get("read") or {}, f"{w} messages.read"),
        response_messages=_expr(resp.get("messages"), f"{w} response.messages"),
        finish_reason=_expr(resp.get("finish_reason"), f"{w} response.finish_reason"),
        finish_map={str(k): v for k, v in (resp.get("finish_map") or {}).items()},
        stop_with_calls=bool(resp.get("stop_with_calls")),
        response_transforms=tuple(resp.get("transforms") or ()),
        call_transforms=tuple(resp.get("call_transforms") or ()),
        text_fallback=resp.get("text_fallback", "capability"),
        unknown_dialect=resp.get("unknown_dialect"),
        response_build=_expr(resp.get("build"), f"{w} response.build"),
        response_message=_expr(resp.get("message"), f"{w} response.message"),
        id_prefix=resp.get("id_prefix", ""),
        max_bytes=resp.get("max_bytes", MAX_BODY_BYTES),
        stream_rules=tuple(stream_rules),
        sequential_calls=bool(stream.get("sequential_calls")),
        lossy=frozenset(d.get("lossy") or ()),
        renders_template=bool(d.get("renders_template")),
        template_kwargs_path=req.get("template_kwargs"),
        _id_pattern=re.compile(call_ids["pattern"]) if call_ids.get("pattern") else None,
        media=_media(msgs.get("media") or {}, f"{w} messages.media"),
        tools_refuse=tuple(
            ToolRefusal(Expr(r["when"], f"{w} tools.read.refuse[{i}].when"),
                        " ".join(str(r.get("refuse") or r.get("omit")).split()),
                        omit="refuse" not in r)
            for i, r in enumerate((tools.get("read") or {}).get("refuse") or ())
            if isinstance(r, dict)),
    )


# ---------------------------------------------------------------- lint

_REQUIRED = (("tools", "shape"), ("messages", "user"), ("messages", "assistant"),
             ("messages", "tool"), ("messages", "read"), ("response", "messages"))


def _walk_exprs(schema: dict[str, Any], data: Any, path: tuple[Any, ...]
                ) -> Iterable[tuple[tuple[Any, ...], str]]:
    """(path, expression) for every field the schema marks as JMESPath."""
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        fs = schema.get(key)
        if not isinstance(fs, dict):
            continue
        meta = fs.get("meta", {})
        here = (*path, key)
        if meta.get("expr") and isinstance(value, str):
            yield here, value
        elif meta.get("exprs") and isinstance(value, dict):
            for k, v in value.items():
                if isinstance(v, str):
                    yield (*here, k), v
        elif meta.get("exprs") and isinstance(value, list):
            for i, v in enumerate(value):
                if isinstance(v, str):
                    yield (*here, i), v
        elif isinstance(value, dict) and isinstance(fs.get("schema"), dict):
            yield from _walk_exprs(fs["schema"], value, here)
        elif isinstance(value, list) and isinstance(fs.get("schema"), dict) and \
                isinstance(fs["schema"].get("schema"), dict):
            for i, item in enumerate(value):
                yield from _walk_exprs(fs["schema"]["schema"], item, (*here, i))


def _check_pipeline(rep: Any, rf: Any, path: tuple[Any, ...], entries: Any) -> None:
    if not isinstance(entries, list):
        return
    for i, entry in enumerate(entries):
        for sub, message in validate_step(entry):
            rep.error(rf, (*path, i, *sub), message, "transform-op")


def check_rules(rs: RuleSet, rep: Any, failed: set[tuple[str, str]]) -> None:
    """Cross-checks: extends targets and cycles, expressions, ops, regexes, transforms,
    the sections every merged provider needs, and strategy references."""
    import jmespath
    from jmespath.exceptions import JMESPathError

    from ..rules._lint import check_regex
    from ..rules._schemas_providers import PROVIDER_SCHEMA

    providers = rs.files.get("provider", {})
    for rid, rf in sorted(providers.items()):
        if ("provider", rid) in failed or not isinstance(rf.data, dict):
            continue
        data = rf.data
        if "id" in data and data["id"] != rid:
            rep.error(rf, ("id",), f"id {data['id']!r} must equal the file stem {rid!r}", "rule-id")
        parent = data.get("extends")
        chain = [rid]
        broken = False
        while isinstance(parent, str):
            if parent not in providers:
                rep.error(rf, ("extends",) if len(chain) == 1 else (),
                          f"extends {parent!r}, which is not a provider"
                          + _hint(parent, list(providers)), "provider-extends")
                broken = True
                break
            if parent in chain:
                rep.error(rf, ("extends",), f"extends cycle: {' -> '.join([*chain, parent])}",
                          "provider-extends")
                broken = True
                break
            chain.append(parent)
            if ("provider", parent) in failed:
                broken = True  # the parent's own problems are reported on the parent
                break
            pdata = providers[parent].data
            parent = pdata.get("extends") if isinstance(pdata, dict) else None
        for path, src in _walk_exprs(PROVIDER_SCHEMA, data, ()):
            try:
                jmespath.compile(src)
            except JMESPathError as exc:
                msg = str(exc).splitlines()[0]
                rep.error(rf, path, f"JMESPath does not compile: {msg} in {src!r}", "jmespath")
        tools = data["tools"] if isinstance(data.get("tools"), dict) else {}
        _check_pipeline(rep, rf, ("tools", "pipeline"), tools.get("pipeline"))
        if isinstance(tools.get("strict"), dict):
            _check_pipeline(rep, rf, ("tools", "strict", "pipeline"), tools["strict"].get("pipeline"))
        if isinstance(tools.get("read"), dict):
            _check_pipeline(rep, rf, ("tools", "read", "pipeline"), tools["read"].get("pipeline"))
        if isinstance(tools.get("names"), dict):
            check_regex(rep, rf, ("tools", "names", "pattern"), tools["names"].get("pattern"))
        msgs = data["messages"] if isinstance(data.get("messages"), dict) else {}
        if isinstance(msgs.get("call_ids"), dict):
            check_regex(rep, rf, ("messages", "call_ids", "pattern"), msgs["call_ids"].get("pattern"))
        for section, key, where in (("messages", "transforms", "messages"),
                                    ("response", "transforms", "response"),
                                    ("response", "call_transforms", "call")):
            block = data[section] if isinstance(data.get(section), dict) else {}
            for i, name in enumerate(block.get(key) or []):
                t = MESSAGE_TRANSFORMS.get(name)
                if t is not None and t.where != where:
                    rep.error(rf, (section, key, i), f"{name!r} is a {t.where} transform, not a "
                              f"{where} transform", "provider-transform")
                elif t is None:
                    known = [k for k, v in MESSAGE_TRANSFORMS.items() if v.where == where]
                    rep.error(rf, (section, key, i), f"unknown {where} transform {name!r}"
                              + _hint(str(name), known), "provider-transform")
        if broken:
            continue
        try:
            merged = merged_rule(rs, rid)
        except (ParseError, UnknownRuleError):
            continue
        for section, key in _REQUIRED:
            if not (merged.get(section) or {}).get(key):
                rep.error(rf, (), f"provider {rid!r} has no `{section}.{key}` (and inherits none)",
                          "provider-incomplete")
        system = merged.get("system") or {}
        if system.get("placement") == "field" and not system.get("path"):
            rep.error(rf, ("system",), "system placement `field` needs `path`", "provider-incomplete")
        if system.get("placement", "message") == "message" and not (merged.get("messages") or {}).get("system"):
            rep.error(rf, ("system",), "system placement `message` needs `messages.system`",
                      "provider-incomplete")
        _check_media(rep, rf, rid, merged)
        _check_fields(rep, rf, rid, data, merged)
        _check_volatile(rep, rf, data)
        unknown = (merged.get("response") or {}).get("unknown_dialect")
        dialects = rs.files.get("dialect", {})
        if isinstance(unknown, str) and unknown not in dialects:
            own = isinstance(data.get("response"), dict) and "unknown_dialect" in data["response"]
            rep.error(rf, ("response", "unknown_dialect") if own else (),
                      f"response.unknown_dialect {unknown!r} is not a dialect"
                      + _hint(unknown, sorted(dialects)), "missing-dialect")
    strategies = rs.get("table", "schema_strategies")
    names: set[str] = set()
    if strategies is not None and ("table", "schema_strategies") not in failed \
            and isinstance(strategies.data, dict):
        for name, strat in (strategies.data.get("strategies") or {}).items():
            names.add(name)
            if isinstance(strat, dict):
                _check_pipeline(rep, strategies, ("strategies", name, "pipeline"), strat.get("pipeline"))
    fixes: set[str] = set()
    if strategies is not None and ("table", "schema_strategies") not in failed \
            and isinstance(strategies.data, dict):
        for name, fix in (strategies.data.get("template_fixes") or {}).items():
            fixes.add(name)
            if isinstance(fix, dict):
                _check_pipeline(rep, strategies, ("template_fixes", name, "pipeline"),
                                fix.get("pipeline"))
    for _rid, rf in sorted(rs.files.get("model", {}).items()):
        if not isinstance(rf.data, dict):
            continue
        for path, value in _strategy_refs(rf.data):
            if isinstance(value, str) and value not in names:
                rep.error(rf, path, f"schema strategy {value!r} is not defined in "
                          "rules/schema_strategies.yaml" + _hint(value, sorted(names)),
                          "missing-strategy")
        for path, value in _capability_refs(rf.data, "turn_tool_schema"):
            for i, fix_name in enumerate(value if isinstance(value, list) else ()):
                if isinstance(fix_name, str) and fix_name not in fixes:
                    rep.error(rf, (*path, i), f"template fix {fix_name!r} is not defined in "
                              "rules/schema_strategies.yaml (template_fixes)"
                              + _hint(fix_name, sorted(fixes)), "missing-template-fix")


def _check_media(rep: Any, rf: Any, rid: str, merged: dict[str, Any]) -> None:
    """Content parts are never dropped unseen: a role that takes media has a writer that
    uses them, and an API served to clients reads every content block it is sent."""
    msgs = merged.get("messages") or {}
    media = msgs.get("media") or {}
    roles = media.get("roles") or []
    moved = media.get("move_results") or {}
    if moved and moved.get("to") not in roles:
        rep.error(rf, ("messages", "media", "move_results"), f"provider {rid!r}: "
                  "`move_results.to` must be one of `media.roles`", "provider-media")
    if roles and not media.get("text"):
        rep.error(rf, ("messages", "media"), f"provider {rid!r}: `messages.media` has roles "
                  "but no `text` entry (how a text part is written among media)",
                  "provider-media")
    for role in roles:
        writer = msgs.get(role)
        if isinstance(writer, str) and not re.search(r"\b(parts|media)\b", writer):
            rep.error(rf, ("messages", "media", "roles"), f"provider {rid!r}: role {role!r} "
                      "takes media, but `messages." + role + "` uses neither `parts` nor "
                      "`media`: they would be lost", "provider-media")
    if merged.get("serve") and not ((msgs.get("read") or {}).get("blocks")
                                    and (msgs.get("read") or {}).get("parts")):
        rep.error(rf, ("messages", "read"), f"provider {rid!r} is served to clients "
                  "(`serve:`) but `messages.read` has no `blocks` and `parts`: content "
                  "blocks other than text would be dropped unseen", "provider-media")
    read = (merged.get("tools") or {}).get("read") or {}
    if merged.get("serve") and read.get("each") and not read.get("refuse"):
        rep.error(rf, ("tools", "read"), f"provider {rid!r} is served to clients (`serve:`) "
                  "but `tools.read` has no `refuse` rules: tool entries `each` does not read "
                  "(server or built-in tools) would be dropped unseen", "provider-tools")


def _root_fields(node: Any) -> set[str]:
    """The top-level body fields a JMESPath expression (parsed) reads."""
    return {p.split(".")[0] for p in _field_paths(node)}


def _field_paths(node: Any) -> set[str]:
    """The body paths a JMESPath expression (parsed) reads from its root, as far as they
    are plain fields (`generationConfig.topK`; `tools[0].x` reads `tools`)."""
    if not isinstance(node, dict):
        return set()
    kind = node.get("type")
    kids = node.get("children") or []
    if kind == "field":
        return {str(node.get("value"))}
    if kind == "subexpression" and kids:
        # JMESPath gives `a.b.c` as one subexpression of three fields
        heads = _field_paths(kids[0])
        if kids[0].get("type") not in ("field", "subexpression"):
            return heads
        for tail in kids[1:]:
            if tail.get("type") != "field":
                break
            heads = {f"{h}.{tail.get('value')}" for h in heads}
        return heads
    if kind in ("subexpression", "index_expression", "projection", "filter_projection",
                "value_projection", "flatten", "pipe"):
        return _field_paths(kids[0]) if kids else set()
    out: set[str] = set()
    for kid in kids:
        out |= _field_paths(kid)
    return out


def _request_fields(node: Any) -> set[str]:
    """Fields a stream event expression reads from the client's body (`request.X`)."""
    if not isinstance(node, dict):
        return set()
    kids = node.get("children") or []
    out: set[str] = set()
    if (node.get("type") == "subexpression" and len(kids) >= 2
            and kids[0].get("type") == "field" and kids[0].get("value") == "request"
            and kids[1].get("type") == "field"):
        out.add(str(kids[1].get("value")))
    for kid in kids:
        out |= _request_fields(kid)
    return out


def _parsed(src: Any) -> Any:
    import jmespath
    from jmespath.exceptions import JMESPathError

    if not isinstance(src, str) or not src:
        return None
    try:
        return jmespath.compile(src).parsed
    except JMESPathError:
        return None  # the schema check reports a broken expression


def _front_reads(merged: dict[str, Any]) -> set[str] | None:
    """Every field of a client's request that the rule's readers take in, as body paths
    (`messages`, `generationConfig.topK`): model, messages, system, tools, tool choice,
    parallel calls, stream, options, a JSON answer and what the stream grammar reads from
    the request. None when a reader does not compile (reported on its own; what it reads
    is unknown)."""
    reads: set[str] = set()
    broken = False
    for section, key in (("request", "model"), ("messages", "path"), ("tools", "path"),
                         ("tool_choice", "path"), ("parallel_calls", "path")):
        path = (merged.get(section) or {}).get(key)
        if isinstance(path, str) and path:
            reads.add(path.split(".")[0])
    system = merged.get("system") or {}
    serve = merged.get("serve") or {}
    exprs = [serve.get("stream"), serve.get("parallel"), serve.get("json_output"),
             *(serve.get("options") or {}).values()]
    if system.get("placement") == "field":
        exprs.append(system.get("read") or system.get("path"))
    for src in exprs:
        tree = _parsed(src)
        broken |= tree is None and isinstance(src, str) and bool(src)
        reads |= _field_paths(tree)

    def events(value: Any) -> Iterable[Any]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, list):
            for v in value:
                yield from events(v)
        elif isinstance(value, dict):
            for v in value.values():
                yield from events(v)

    for src in events(serve.get("events")):
        tree = _parsed(src)
        broken |= tree is None
        reads |= _request_fields(tree)
    return None if broken else reads


def _field_cases(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _check_volatile(rep: Any, rf: Any, data: dict[str, Any]) -> None:
    """`serve.volatile` patterns compile, cannot backtrack exponentially, cannot match an
    empty text (a rule that takes nothing out is a mistake), and ids are unique."""
    from ..rules._lint import check_regex

    serve = data.get("serve")
    entries = serve.get("volatile") if isinstance(serve, dict) else None
    seen: set[str] = set()
    for i, entry in enumerate(entries if isinstance(entries, list) else ()):
        if not isinstance(entry, dict):
            continue
        where = ("serve", "volatile", i)
        pattern = entry.get("match")
        if check_regex(rep, rf, (*where, "match"), pattern) and isinstance(pattern, str) \
                and re.compile(pattern, re.M).fullmatch(""):
            rep.error(rf, (*where, "match"), "a volatile pattern must not match an empty "
                      "text", "volatile-empty")
        ident = entry.get("id")
        if isinstance(ident, str):
            if ident in seen:
                rep.error(rf, (*where, "id"), f"volatile id {ident!r} is used twice",
                          "volatile-id")
            seen.add(ident)


_CASE_KEYS = {"when", "ignore", "refuse", "read", "fields"}


def _case_reads(case: Any) -> bool:
    return case == "read" or (isinstance(case, dict) and (
        case.get("read") is True or isinstance(case.get("fields"), dict)))


def _check_cases(rep: Any, rf: Any, table: Any, where: tuple[Any, ...], prefix: str) -> None:
    """Each case of a `serve.fields` table (and of the tables nested in it) reads, ignores
    with a reason or refuses with one, optionally `when` an expression holds."""
    for name, value in (table.items() if isinstance(table, dict) else ()):
        label = prefix + str(name)
        for i, case in enumerate(_field_cases(value)):
            here = (*where, name, i) if isinstance(value, list) else (*where, name)
            if case == "read":
                continue
            if not isinstance(case, dict):
                rep.error(rf, here, f"field {label!r}: a case is `read` or a mapping "
                          "{when?, ignore | refuse | read: true | fields}", "provider-fields")
                continue
            actions = [k for k in ("ignore", "refuse") if isinstance(case.get(k), str)
                       and case[k].strip()]
            actions += ["read"] if case.get("read") is True else []
            actions += ["fields"] if isinstance(case.get("fields"), dict) else []
            extra = sorted(set(case) - _CASE_KEYS)
            if len(actions) != 1 or extra:
                rep.error(rf, here, f"field {label!r}: a case has exactly one of `ignore` or "
                          "`refuse` (a reason), `read: true` or `fields` (its own fields "
                          "accounted for), and optionally `when`"
                          + (f"; unknown keys {extra}" if extra else ""), "provider-fields")
            when = case.get("when")
            if when is not None and _parsed(when) is None:
                rep.error(rf, (*here, "when"), f"field {label!r}: `when` is not a valid "
                          f"JMESPath expression: {when!r}", "provider-fields")
            if isinstance(case.get("fields"), dict):
                _check_cases(rep, rf, case["fields"], (*here, "fields"), label + ".")


def _read_paths(table: dict[str, Any], prefix: str = "") -> tuple[set[str], set[str]]:
    """(fields listed as read, objects read field by field) of a `serve.fields` table, as
    body paths."""
    marked: set[str] = set()
    nested: set[str] = set()
    for name, value in table.items():
        path = prefix + str(name)
        for case in _field_cases(value):
            if _case_reads(case):
                marked.add(path)
            if isinstance(case, dict) and isinstance(case.get("fields"), dict):
                nested.add(path)
                sub_marked, sub_nested = _read_paths(case["fields"], path + ".")
                marked |= sub_marked
                nested |= sub_nested
    return marked, nested


def _check_fields(rep: Any, rf: Any, rid: str, data: dict[str, Any],
                  merged: dict[str, Any]) -> None:
    """A served API accounts for every field of a request (`serve.fields`): each case
    reads, ignores with a reason or refuses with one; every field the rule's readers take
    in is `read`, and nothing is listed as `read` that no reader takes."""
    own = (data.get("serve") or {}).get("fields") if isinstance(data.get("serve"), dict) else None
    _check_cases(rep, rf, own, ("serve", "fields"), "")
    serve = merged.get("serve") or {}
    if not serve.get("path"):
        return
    fields = serve.get("fields")
    if not isinstance(fields, dict):
        rep.error(rf, ("serve",), f"provider {rid!r} is served to clients (`serve:`) but has "
                  "no `serve.fields`: top-level request fields no rule reads would be "
                  "dropped unseen", "provider-fields")
        return
    marked, nested = _read_paths(fields)
    paths = _front_reads(merged)
    if paths is None:
        return
    # a read path counts for the field the table accounts for: the longest listed prefix
    # of an object read field by field, else the top-level field
    reads: set[str] = set()
    for path in paths:
        parts = path.split(".")
        name = parts[0]
        for i in range(1, len(parts)):
            if ".".join(parts[:i]) in nested:
                name = ".".join(parts[:i + 1])
        reads.add(name)
    for name in sorted(reads - marked):
        rep.error(rf, ("serve", "fields"), f"provider {rid!r}: the request field {name!r} is "
                  "read (model, messages, system, tools, serve.options ...) but "
                  "`serve.fields` does not list it as `read`", "provider-fields")
    for name in sorted(marked - reads - nested):
        rep.error(rf, ("serve", "fields", name.split(".")[0]), f"provider {rid!r}: the request "
                  f"field {name!r} is listed as `read`, but no rule reads it (add it to "
                  "`serve.options`, or ignore or refuse it with a reason): it would be "
                  "dropped unseen", "provider-fields")


def _strategy_refs(data: dict[str, Any]) -> Iterable[tuple[tuple[Any, ...], Any]]:
    if data.get("schema") is not None:
        yield ("schema",), data["schema"]
    defaults = data.get("defaults")
    if isinstance(defaults, dict) and defaults.get("schema_strategy") is not None:
        yield ("defaults", "schema_strategy"), defaults["schema_strategy"]
    for key in ("capabilities", "overrides"):
        items = data.get(key)
        if isinstance(items, list):
            for i, item in enumerate(items):
                s = item.get("set") if isinstance(item, dict) else None
                if isinstance(s, dict) and s.get("schema_strategy") is not None:
                    yield (key, i, "set", "schema_strategy"), s["schema_strategy"]


def _capability_refs(data: dict[str, Any], field: str
                     ) -> Iterable[tuple[tuple[Any, ...], Any]]:
    """Where a model rule sets capability `field`: (path, value) in defaults, capabilities
    and overrides."""
    defaults = data.get("defaults")
    if isinstance(defaults, dict) and field in defaults:
        yield ("defaults", field), defaults[field]
    for key in ("capabilities", "overrides"):
        items = data.get(key)
        if isinstance(items, list):
            for i, item in enumerate(items):
                s = item.get("set") if isinstance(item, dict) else None
                if isinstance(s, dict) and field in s:
                    yield (key, i, "set", field), s[field]


def _hint(name: str, known: list[str]) -> str:
    from difflib import get_close_matches

    close = get_close_matches(name, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
