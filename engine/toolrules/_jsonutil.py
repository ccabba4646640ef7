"""Small JSON helpers shared by schema transforms, validation and value typing; and the
JSON reading and writing of the proxy's hot path (`loads`, `dumps_compact`): orjson when
it is installed (the serve extra brings it), the standard library otherwise - with the
standard library's results and errors either way."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["decode_object", "dumps_compact", "json_type", "loads", "resolve_pointer"]

# orjson, imported on first use (`import toolrules` stays cheap); False: not installed
_ORJSON: Any = None


def _orjson() -> Any:
    global _ORJSON
    try:
        import orjson
    except ImportError:  # pragma: no cover - the serve extra installs it
        _ORJSON = False
    else:
        _ORJSON = orjson
    return _ORJSON


# 19 digits in a row may be an integer past 64 bits, which orjson reads as a float. Found
# with every digit made a 0 and a search for nineteen of them: a regex for the same is
# ten times slower than orjson's whole read of an agent's 100 KB request.
# (text is looked at as UTF-8: bytes.translate is five times faster than str.translate)
_ZEROS = bytes.maketrans(b"0123456789", b"0000000000")
_LONG = b"0" * 19


def _has_long_number(data: str | bytes | bytearray) -> bool:
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    return _LONG in data.translate(_ZEROS)



def loads(data: str | bytes | bytearray) -> Any:
    """`json.loads(data)`: the same values, and the same ValueError for what is not JSON
    (orjson reads it first; what orjson refuses - NaN, other encodings - and text with a
    number of 19 digits or more, which it would round, go to the standard library)."""
    fast = _ORJSON if _ORJSON is not None else _orjson()
    if fast and not _has_long_number(data):
        try:
            return fast.loads(data)
        except ValueError:
            pass
    return json.loads(data)


def dumps_compact(value: Any) -> str:
    """`json.dumps(value, ensure_ascii=False, separators=(",", ":"))`, faster: the same
    JSON, though a number may be spelled differently (`1e-05` as `0.00001`) and NaN or
    Infinity is written null; what orjson cannot write (integer keys, huge integers) is
    written by the standard library."""
    fast = _ORJSON if _ORJSON is not None else _orjson()
    if fast and (type(value) is dict or type(value) is list):
        try:
            return fast.dumps(value).decode()
        except TypeError:
            pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_type(value: Any) -> str | None:
    """The JSON type name of a Python value (None when it is not a JSON value)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return None


def resolve_pointer(root: Any, ref: str) -> Any:
    """The node a local JSON pointer (`#/$defs/Thing`) names in `root`, or None."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    node = root
    for raw in ref[1:].split("/")[1:] if ref[1:2] == "/" else ([] if ref == "#" else [None]):
        if raw is None:
            return None
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def decode_object(text: str) -> dict[str, Any] | None:
    """The JSON object `text` holds, or None when it is not JSON or not an object."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
