"""Building calls from what a call read: (name, arguments, id, repairs) per call.

A call's values (JSON objects, arrays, grammar tuples) or its tagged parameters become
calls here: the dialect's field mapping picks the name, arguments and id; parameter
values are typed from the tool's schema; and the key and wrapping repairs the dialect
allows (`function-key`, `arguments-json-string`, `double-wrapped-arguments`,
`arguments-parameter`, `markdown-escapes`) are applied and listed. Nothing here moves
the scan: `_outcome` hands the calls to the sink, or gives the call back as text.
"""

from __future__ import annotations

from typing import Any, cast

from ._compile import ParamDef
from ._jsonscan import MAX_DEPTH, NestingTooDeep, loads
from ._state import CallRun, State
from ._values import read_value

__all__ = ["Built", "build", "one"]

Built = tuple[str, dict[str, Any], str | None, list[str]]  # name, arguments, id, repairs

_KEY_REPAIRS = {"function": "function-key", "args": "args-key", "parameters": "parameters-key"}
_MISSING = object()
_WRAPPER_KEYS = ("arguments", "input")


def build(st: State, run: CallRun) -> list[Built] | None:
    p = run.c.payload
    repairs = list(run.repairs)
    if p.kind == "params" and not run.values:
        schema = _properties(st.tools.get(cast(str, run.name)))
        types = cast(ParamDef, p.param).types
        args: dict[str, Any] = {}
        for key, declared_attr, raw in run.params:
            declared = types.get(declared_attr) if declared_attr is not None else None
            if declared_attr is not None and declared is None and types:
                declared = "json"
            args[key] = read_value(raw, schema.get(key), declared)
        if "arguments-parameter" in st.allowed and len(args) == 1:
            args = _wrapped_parameter(st, cast(str, run.name), args, repairs)
        return _escapes(st, [(run.name, args, run.call_id, repairs)])
    out = []
    wrapped = p.fields["calls"] if p.fields is not None else ()
    for value in run.values:
        if wrapped and type(value) is dict and run.name is None:
            inner = _lookup(value, wrapped)  # {"tool_calls": [call, ...]}
            if isinstance(inner, list):
                value = inner
        items = value if isinstance(value, list) and (p.array or p.kind == "grammar") \
            and run.name is None else [value]
        for item in items:
            built = one(st, p, run.name, run.call_id, item, repairs)
            if built is None:
                return None
            out.append(built)
    return _escapes(st, out) if out else None


def _escapes(st: State, calls: list[Any]) -> list[Any]:
    """Repair `markdown-escapes`: a name or argument key written `solve\\_quadratic`
    (Markdown escaping) reads `solve_quadratic`."""
    if "markdown-escapes" not in st.allowed:
        return calls
    # The output escapes `_` in names (it was rendered as Markdown): then its string
    # values were escaped the same way, and read unescaped too.
    escaped = any("\\_" in c[0] or any("\\_" in k for k in c[1]) for c in calls)
    if not escaped:
        return calls
    out = []
    for name, args, call_id, repairs in calls:
        name = name.replace("\\_", "_")
        args = {k.replace("\\_", "_"): _md_values(v) for k, v in args.items()}
        if "markdown-escapes" not in repairs:
            repairs.append("markdown-escapes")
        out.append((name, args, call_id, repairs))
    return out


def one(st: State, p: Any, header_name: str | None, header_id: str | None, item: Any,
        repairs: list[str]) -> Any:
    if isinstance(item, tuple):  # from a grammar: (name, arguments)
        name, args = item
        return (name, args, None, repairs) if isinstance(args, dict) else None
    if header_name is not None:  # the header named the tool: the value is the arguments
        if not isinstance(item, dict):
            return None
        return (header_name, _unwrap(st, item, header_name, repairs), header_id, repairs)
    if not isinstance(item, dict) or (p.fields is None and not p.name_as_key):
        return None
    if p.name_as_key:
        if len(item) != 1:
            return None
        (name, args), = item.items()
        if not isinstance(args, dict):
            return None
        return (name, args, None, repairs)
    fields = p.fields
    first = fields["name"][0]  # the common case: the first name key is there
    name = item[first] if first in item else _lookup(item, fields["name"])
    used_key = None
    if name is None:
        for alt in ("function",):
            if _KEY_REPAIRS[alt] in st.allowed and alt in item:
                name, used_key = item[alt], alt
                break
    if isinstance(name, dict):  # {"function": {"name": ..., "arguments": ...}}
        inner = name
        name = inner.get("name")
        item = {**item, **{k: v for k, v in inner.items() if k != "name"}}
    if not isinstance(name, str) or not name:
        return None
    if used_key:
        repairs.append(_KEY_REPAIRS[used_key])
    first = fields["arguments"][0]
    args = item[first] if first in item else _lookup(item, fields["arguments"], _MISSING)
    if args is _MISSING:
        for alt in ("args", "parameters"):
            if _KEY_REPAIRS[alt] in st.allowed and alt in item:
                args = item[alt]
                repairs.append(_KEY_REPAIRS[alt])
                break
    if args is _MISSING or args is None or args == "":
        args = {}
    if isinstance(args, str):
        if "arguments-json-string" not in st.allowed:
            return None
        try:
            args = loads(args)
        except NestingTooDeep:
            raise
        except ValueError:
            return None
        repairs.append("arguments-json-string")
    if not isinstance(args, dict):
        return None
    call_id = _lookup(item, fields["id"]) if fields["id"] else None
    return (name, _unwrap(st, args, name, repairs),
            call_id if isinstance(call_id, str) else None, repairs)


def _wrapped_parameter(st: State, name: str, args: dict[str, Any],
                       repairs: list[str]) -> dict[str, Any]:
    """Repair `arguments-parameter`: a call of an offered tool whose only parameter is
    `arguments` or `input`, holding an object (or its JSON text), when the tool's schema
    has no such parameter: the object is the real arguments."""
    (key, value), = args.items()
    tool = st.tools.get(name)
    if key not in _WRAPPER_KEYS or name not in st.tools or key in _properties(tool):
        return args
    if isinstance(value, str) and value.strip()[:1] == "{":
        try:
            value = loads(value)
        except ValueError:  # NestingTooDeep included: then it stays as written
            return args
    if not isinstance(value, dict):
        return args
    repairs.append("arguments-parameter")
    return value


def _unwrap(st: State, args: dict[str, Any], name: str, repairs: list[str]) -> dict[str, Any]:
    if "double-wrapped-arguments" in st.allowed and len(args) == 1 \
            and isinstance(args.get("arguments"), dict) \
            and "arguments" not in _properties(st.tools.get(name)):
        repairs.append("double-wrapped-arguments")
        return args["arguments"]
    return args


def _md_values(value: Any, depth: int = 0) -> Any:
    """String values with Markdown's `\\_` read as `_` (nested values too)."""
    if isinstance(value, str):
        return value.replace("\\_", "_") if "\\_" in value else value
    if depth > 2 * MAX_DEPTH:
        return value
    if isinstance(value, list):
        return [_md_values(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {k: _md_values(v, depth + 1) for k, v in value.items()}
    return value


def _lookup(item: dict[str, Any], keys: tuple[str, ...], missing: Any = None) -> Any:
    for key in keys:
        if key in item:
            return item[key]
        if "." not in key:
            continue
        node: Any = item
        for part in key.split("."):
            if isinstance(node, dict) and part in node:
                node = node[part]
            else:
                break
        else:
            return node
    return missing


def _properties(params: Any) -> dict[str, Any]:
    if isinstance(params, dict):
        props = params.get("properties")
        if isinstance(props, dict):
            return props
    return {}
