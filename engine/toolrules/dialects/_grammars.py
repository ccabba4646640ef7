"""Lark grammars for payloads that are not JSON (pythonic call lists, object literals).

Grammars live in grammars/*.lark and are compiled (LALR) once per content hash. The
engine turns a parse tree into values through a fixed vocabulary of rule names, so a
new grammar needs no code:

    calls   -> list of calls            call  -> (name, {kwargs})   kwarg -> key = value
    object  -> dict (of pair)           pair  -> key : value        array/list/tuple -> list
    string  -> quoted text, escapes read   rawstring -> text between its delimiters as is
    number  -> int or float             true / false / null
    name / key -> text (stripped)

`%import common.X` works as usual; grammars/common.lark holds shared terminals.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ._jsonscan import MAX_DEPTH, NestingTooDeep, unescape

__all__ = ["build_grammar", "parse_payload", "tree_to_value"]

_PARSERS: dict[str, Any] = {}
_NESTING = frozenset({"calls", "call", "object", "dict", "array", "list", "tuple"})


def build_grammar(text: str, import_paths: list[str] | None = None) -> Any:
    """An LALR parser for `text`, cached by content hash. Raises lark errors."""
    key = hashlib.sha256(text.encode()).hexdigest()
    parser = _PARSERS.get(key)
    if parser is None:
        from lark import Lark

        parser = Lark(text, parser="lalr", start="start", maybe_placeholders=False,
                      import_paths=import_paths or [])
        _PARSERS[key] = parser
    return parser


def _unquote(token: str) -> str:
    return unescape(token[1:-1])


_DELIMITED = re.compile(r"(<\|[^|]{0,8}\|>|['\"])(.*)\1", re.S)


def _raw(text: str) -> str:
    """Text between a token's own delimiters (<|"|>...<|"|>, '...', "..."), taken as is."""
    m = _DELIMITED.fullmatch(text)
    return m.group(2) if m else text


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def tree_to_value(node: Any, depth: int = 0) -> Any:
    """The value of a parse tree. The scanner bounds a payload's bracket depth before
    parsing (MAX_DEPTH); this bound only keeps the recursion finite whatever the input."""
    from lark import Token, Tree

    if isinstance(node, Token):
        return str(node)
    if not isinstance(node, Tree):
        return node
    kind = node.data
    kids = node.children
    if kind in _NESTING:
        depth += 1
        if depth > 2 * MAX_DEPTH:
            raise NestingTooDeep(f"nested deeper than {MAX_DEPTH} brackets")
    if kind in ("start", "value"):
        return tree_to_value(kids[0], depth) if kids else None
    if kind == "calls":
        return [tree_to_value(k, depth) for k in kids]
    if kind == "call":
        name = tree_to_value(kids[0], depth).strip()
        args: dict[str, Any] = {}
        for k in kids[1:]:
            if isinstance(k, Tree) and k.data == "kwarg":
                key, value = tree_to_value(k, depth)
                args[key] = value
            else:
                raise ValueError("positional arguments are not tool arguments")
        return (name, args)
    if kind in ("kwarg", "pair"):
        key = tree_to_value(kids[0], depth)  # a quoted key keeps its spaces, bare ones trimmed
        return (key if isinstance(key, str) else json.dumps(key), tree_to_value(kids[1], depth))
    if kind in ("object", "dict"):
        return dict(tree_to_value(k, depth) for k in kids)
    if kind in ("array", "list", "tuple"):
        return [tree_to_value(k, depth) for k in kids]
    if kind == "string":
        return _unquote(str(kids[0]))
    if kind == "rawstring":
        return _raw(str(kids[0]))
    if kind == "number":
        return _number(str(kids[0]))
    if kind == "true":
        return True
    if kind == "false":
        return False
    if kind == "null":
        return None
    if kind in ("name", "key"):  # a delimited key is taken as is, a bare one trimmed
        m = _DELIMITED.fullmatch(str(kids[0]))
        return m.group(2) if m else str(kids[0]).strip()
    raise ValueError(f"grammar rule {kind!r} is not in the value vocabulary")


def parse_payload(dialect: Any, grammar: str, text: str) -> Any:
    """Parse `text` with the dialect's grammar; ValueError when it does not fit."""
    from lark.exceptions import LarkError

    parser = dialect.grammar_parsers.get(grammar)
    if parser is None:
        raise ValueError(f"grammar {grammar!r} is not loaded")
    try:
        tree = parser.parse(text)
    except LarkError as exc:
        raise ValueError(str(exc)) from None
    return tree_to_value(tree)
