"""Lark grammars for payloads that are not JSON (pythonic call lists, object literals).

Grammars live in grammars/*.lark and are compiled (LALR) once per content hash. The
engine turns a parse tree into values through a fixed vocabulary of rule names, so a
new grammar needs no code:

    calls   -> list of calls            call  -> (name, {kwargs})   kwarg -> key = value
    object  -> dict (of pair)           pair  -> key : value        array/list/tuple -> list
    string  -> quoted text, escapes read   rawstring -> text between its delimiters as is
    number  -> int or float             true / false / null
    source  -> the source text of a bare name or expression (my_data, data['x']), as written:
               never evaluated
    name / key -> text (stripped)

`%import common.X` works as usual; grammars/common.lark holds shared terminals.

Payloads are read by a small LALR driver over Lark's own tables and contextual lexers
that builds the values during the parse (`_Reader`): Lark's parser is generic and slow
per token (about 5 ms per KB of a value like [[1],[1],...]); the driver reads the same
language, token for token, at a fraction of that. Should Lark's internals ever not be
what the driver expects, payloads go through Lark's own parse and `tree_to_value`.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ._jsonscan import COMMA_MENDS, MAX_DEPTH, NestingTooDeep, scan_json, unescape

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
    if kind == "source":
        return str(kids[0])
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


class _KwArg(tuple):
    """(key, value) of a keyword argument: a call takes these and nothing else."""


# The value vocabulary as rule callbacks: each rule's value from its children's values
# (what tree_to_value gives for the same tree).

def _first(kids: list[Any]) -> Any:
    return kids[0] if kids else None


def _same(kids: list[Any]) -> list[Any]:
    return kids


def _call(kids: list[Any]) -> tuple[str, dict[str, Any]]:
    name = kids[0]
    if not isinstance(name, str):
        raise ValueError("a call's name is not text")
    args: dict[str, Any] = {}
    for k in kids[1:]:
        if type(k) is not _KwArg:
            raise ValueError("positional arguments are not tool arguments")
        args[k[0]] = k[1]
    return (name.strip(), args)


def _pair(kids: list[Any]) -> tuple[str, Any]:
    key = kids[0]  # a quoted key keeps its spaces, bare ones trimmed
    return (key if isinstance(key, str) else json.dumps(key), kids[1])


def _kwarg(kids: list[Any]) -> _KwArg:
    return _KwArg(_pair(kids))


def _name(kids: list[Any]) -> str:  # a delimited key is taken as is, a bare one trimmed
    m = _DELIMITED.fullmatch(kids[0])
    return m.group(2) if m else str(kids[0]).strip()


_VOCABULARY: dict[str, Any] = {
    "start": _first, "value": _first, "calls": _same, "call": _call, "kwarg": _kwarg,
    "pair": _pair, "object": dict, "dict": dict, "array": _same, "list": _same,
    "tuple": _same, "string": lambda kids: _unquote(kids[0]),
    "rawstring": lambda kids: _raw(kids[0]), "source": lambda kids: str(kids[0]),
    "number": lambda kids: _number(kids[0]),
    "true": lambda kids: True, "false": lambda kids: False, "null": lambda kids: None,
    "name": _name, "key": _name,
}


class _Inline:
    """The node of a helper rule (`_x`, and the rules Lark makes for x*): its parent rule
    takes its children in place (what Lark's child filters read: `.children`)."""

    __slots__ = ("children",)

    def __init__(self, children: list[Any]):
        self.children = children


def _not_in_vocabulary(name: str) -> Any:
    def refuse(children: list[Any]) -> Any:
        raise ValueError(f"grammar rule {name!r} is not in the value vocabulary")
    return refuse


def _callbacks(lark: Any) -> dict[Any, Any]:
    """Each rule's callback: Lark's own shaping (which children a rule keeps, inlined
    helpers, `?rule` single children) around the value vocabulary - what
    `ParseTreeBuilder.create_callback` builds, with values in place of trees."""
    out = {}
    for rule, chain in lark._parse_tree_builder.rule_builders:
        name = str(rule.alias or rule.options.template_source or rule.origin.name)
        if name.startswith("_"):
            f: Any = _Inline
        elif name in _VOCABULARY:
            f = _VOCABULARY[name]
        else:
            f = _not_in_vocabulary(name)
        for wrap in chain:
            f = wrap(f)
        out[rule] = f
    return out


class _State:
    """One LALR state: what each symbol does here, and the lexer for the next token."""

    __slots__ = ("actions", "ignore", "jgoto", "match", "special")

    def __init__(self) -> None:
        # per symbol name (plain str keys: Lark's are Tokens, whose __eq__ is Python
        # code): (None, next state) to shift or go to, (callback, size, rule name) to reduce
        self.actions: dict[str, tuple[Any, ...]] = {}
        self.match: Any = None
        self.ignore: frozenset[str] = frozenset()
        self.special: dict[str, Any] = {}
        # where a list or dict value may stand here: its Python type -> the state after it
        self.jgoto: dict[type, _State] | None = None


def _first_match(mres: tuple[Any, ...]) -> Any:
    """Lark splits a lexer of more than 100 terminals over several regexes."""
    def match(text: str, pos: int) -> Any:
        for mre in mres:
            m = mre.match(text, pos)
            if m is not None:
                return m
        return None
    return match


class _Reader:
    """An LALR driver over a Lark parser's tables, contextual lexers and tree shaping
    (which children a rule keeps, which rules inline), with the value vocabulary as
    the rules' callbacks: no Token or Tree objects, no second pass over a tree."""

    __slots__ = ("end", "memo", "start")

    def __init__(self, lark: Any):
        # recent payloads and what they read to (a model restating a call, or a call
        # streamed again after a cut, reads the same text): values come out fresh copies
        self.memo: dict[tuple[str, bool | str], Any] = {}
        from lark.parsers.lalr_analysis import Shift

        frontend = lark.parser
        table = frontend.parser.parser.parse_table
        callbacks = _callbacks(lark)
        states = {index: _State() for index in table.states}
        for index, row in table.states.items():
            states[index].actions = {
                str(sym): (None, states[arg]) if action is Shift else
                (callbacks[arg], len(arg.expansion), str(arg.origin.name))
                for sym, (action, arg) in row.items()}
        for index, basic in frontend.lexer.lexers.items():
            scanner = basic.scanner  # builds the lexer's regexes and keyword callbacks
            st = states[index]
            mres = tuple(scanner._mres)
            st.match = mres[0].match if len(mres) == 1 else _first_match(mres)
            st.ignore = frozenset(basic.ignore_types)
            st.special = dict(basic.callback)
            if any(type(f).__name__ != "UnlessCallback" for f in st.special.values()):
                raise TypeError("lexer callbacks this reader does not know")
        for st in states.values():
            gotos: dict[type, _State] = {}
            for name, kind in (("list", list), ("array", list), ("dict", dict),
                               ("object", dict)):
                entry = st.actions.get(name)
                if entry is not None and entry[0] is None:
                    gotos.setdefault(kind, entry[1])
            st.jgoto = gotos or None
        self.start = states[table.start_states["start"]]
        self.end = states[table.end_states["start"]]

    def parse(self, text: str, json_values: bool | str = False) -> Any:
        """The value of `text`. `json_values`: a list or dict written as plain JSON, where
        the grammar expects a value, is read at once by the C JSON scanner (the grammar
        must read JSON lists and dicts as JSON does; strings with \\u escapes and NaN
        are left to the grammar); "lists": only lists of numbers, booleans and nulls."""
        from lark import Token

        end = self.end
        st = self.start
        stack = [st]
        values: list[Any] = []
        pos, n = 0, len(text)
        mends = [COMMA_MENDS]  # trailing commas the grammars allow and JSON does not
        while True:
            if json_values and pos < n and st.jgoto is not None and text[pos] in "[{":
                decoded, stop = scan_json(text, pos, mends)
                if stop > 0 and text.find("\\u", pos, stop) < 0 and (
                        json_values is True or _plain(decoded, 0)):
                    target = st.jgoto.get(type(decoded))
                    if target is not None:
                        st = target
                        stack.append(st)
                        values.append(decoded)
                        pos = stop
                        continue
            if pos < n:
                m = st.match(text, pos)
                if m is None:
                    raise ValueError(f"unexpected character {text[pos]!r} at {pos}")
                value: Any = m.group()
                kind = m.lastgroup
                pos = m.end()
                if kind in st.special:  # a keyword its regex terminal also matched
                    kind = st.special[kind](Token(kind, value)).type
                if kind in st.ignore:
                    continue
            else:
                kind, value = "$END", ""
            while True:
                entry = st.actions.get(kind)
                if entry is None:
                    raise ValueError(f"unexpected {kind} at {pos}")
                callback = entry[0]
                if callback is None:  # shift
                    if kind == "$END":
                        raise ValueError("unexpected end")
                    st = entry[1]
                    stack.append(st)
                    values.append(value)
                    break
                size = entry[1]
                if size:
                    kids = values[-size:]
                    del stack[-size:]
                    del values[-size:]
                else:
                    kids = []
                reduced = callback(kids)
                st = stack[-1].actions[entry[2]][1]
                stack.append(st)
                values.append(reduced)
                if kind == "$END" and st is end:
                    return values[-1]


_READERS: dict[int, tuple[Any, _Reader | None]] = {}


def _reader(lark: Any) -> _Reader | None:
    got = _READERS.get(id(lark))
    if got is None or got[0] is not lark:
        try:
            reader: _Reader | None = _Reader(lark)
        except (AttributeError, KeyError, TypeError, ImportError):  # other Lark internals
            reader = None
        got = _READERS[id(lark)] = (lark, reader)
    return got[1]


def _plain(value: Any, depth: int) -> bool:
    """json_values "lists": a list of numbers, booleans, nulls and such lists only (what
    a grammar with its own string and object syntax still writes as JSON does)."""
    if type(value) is not list or depth > MAX_DEPTH:
        return False
    for v in value:
        if type(v) is list:
            if not _plain(v, depth + 1):
                return False
        elif not (v is None or type(v) in (int, float, bool)):
            return False
    return True


_MEMO_TEXT = 512  # payloads longer than this are read anew each time
_MEMO_ENTRIES = 256
_MISSING = object()


def _fresh(value: Any) -> Any:
    """A copy of a read value that shares no list or dict with it."""
    kind = type(value)
    if kind is dict:
        return {k: _fresh(v) for k, v in value.items()}
    if kind is list:
        return [_fresh(v) for v in value]
    if kind is tuple:
        return tuple(_fresh(v) for v in value)
    return value


def parse_payload(dialect: Any, grammar: str, text: str, json_values: bool | str = False) -> Any:
    """Parse `text` with the dialect's grammar; ValueError when it does not fit.
    `json_values`: see _Reader.parse (the payload's `json_values` option)."""
    from lark.exceptions import LarkError

    parser = dialect.grammar_parsers.get(grammar)
    if parser is None:
        raise ValueError(f"grammar {grammar!r} is not loaded")
    reader = _reader(parser)
    if reader is not None:
        if len(text) > _MEMO_TEXT:
            return reader.parse(text, json_values)
        key = (text, json_values)
        got = reader.memo.get(key, _MISSING)
        if got is _MISSING:
            try:
                got = reader.parse(text, json_values)
            except ValueError as exc:
                got = exc
            if len(reader.memo) >= _MEMO_ENTRIES:
                reader.memo.clear()
            reader.memo[key] = got
        if isinstance(got, ValueError):
            raise ValueError(*got.args) from None
        return _fresh(got)
    try:
        tree = parser.parse(text)
    except LarkError as exc:
        raise ValueError(str(exc)) from None
    return tree_to_value(tree)
