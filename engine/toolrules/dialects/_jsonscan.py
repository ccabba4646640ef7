"""Finding where a payload ends, and repairing almost-JSON.

`Balanced` is an incremental, string-aware bracket matcher: fed a growing buffer it
reports when the value that started at its first opening bracket is closed, never
looking at a character twice. Markers inside strings are data; markers outside strings
(a call's end marker) stop the scan so a missing closing brace can be repaired.

`repair_json` rebuilds strict JSON from common model mistakes, but only with the
repairs a dialect allows, and names each repair it used.

Nesting is bounded: a value nested deeper than `MAX_DEPTH` brackets is malformed input
(`NestingTooDeep`), found by a linear, string-aware pre-scan before any decoder (the
C JSON decoder, the repair tokenizer, a grammar) could recurse into it.
"""

from __future__ import annotations

import json
import json.scanner
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

__all__ = ["CALL_NAME", "COMMA_MENDS", "MAX_DEPTH", "Balanced", "BalancedSpec",
           "NestingTooDeep", "RepairFailed", "first_chars", "holdback", "list_spans", "loads", "loads_strict", "mend_call_list",
           "repair_json", "scan_json", "too_deep", "unescape"]

MAX_DEPTH = 64
"""The deepest bracket nesting a value read from model output may have. Real arguments
nest a few levels; thousands of brackets are hostile input that would make a recursive
decoder (and every consumer after it) run out of stack."""

_OPENERS = {"{": "}", "[": "]", "(": ")"}
_CLOSERS = {"}", "]", ")"}


@dataclass(frozen=True, slots=True)
class Quote:
    open: str
    close: str
    escapes: bool


def first_chars(prefixes: Iterable[str]) -> re.Pattern[str] | None:
    chars = sorted({p[0] for p in prefixes})
    return re.compile("[" + "".join(map(re.escape, chars)) + "]") if chars else None


def holdback(buf: str, start: int, prefixes: frozenset[str], firsts: re.Pattern[str] | None,
             maxlen: int) -> int:
    """Length of the longest tail of buf[start:] in `prefixes` (proper prefixes of tokens
    at most `maxlen` long; `firsts` matches their first characters). Runs once per delta:
    one regex search for a possible first character, not a slice per tail length."""
    if firsts is None:
        return 0
    n = len(buf)
    m = firsts.search(buf, max(start, n - maxlen + 1))
    while m is not None:
        i = m.start()
        if buf[i:] in prefixes:
            return n - i
        m = firsts.search(buf, i + 1)
    return 0


class BalancedSpec:
    """What counts as a string and a bracket for one payload kind (compiled once)."""

    def __init__(self, quotes: Sequence[tuple[str, str, bool]], brackets: str = "{}[]",
                 stops: Iterable[str] = (), quoted_values: bool = False,
                 adjacent: bool = False):
        self.quotes = tuple(Quote(*q) for q in quotes)
        self.quoted_values = quoted_values  # a value may be one quoted string
        # an opening bracket right after a closed value inside the value (only blanks
        # between: no comma, no colon) breaks the value there: "bad" at that bracket
        self.adjacent = adjacent
        self.brackets = brackets
        self.stops = tuple(sorted(set(stops), key=len, reverse=True))
        alts = [re.escape(q.open) for q in sorted(self.quotes, key=lambda q: -len(q.open))]
        alts += [re.escape(s) for s in self.stops]
        alts.append("[" + re.escape(brackets) + "]")
        self.outside = re.compile("|".join(alts))
        self.inside = tuple(
            re.compile((r"\\.|\\\Z|" if q.escapes else "") + re.escape(q.close), re.S)
            for q in self.quotes)
        tokens = [q.open for q in self.quotes] + list(self.stops)
        self.prefixes = frozenset(t[:k] for t in tokens for k in range(1, len(t)))
        self.maxlen = max((len(t) for t in tokens), default=1)
        self.quote_open = {q.open: i for i, q in enumerate(self.quotes)}
        self.firsts = first_chars(self.prefixes)
        # per state (-1: outside strings, else inside that quote) the characters a scan
        # must look at; a delta with none of them only extends the value
        outside = {b for b in brackets} | {t[0] for t in tokens}
        self.notable: dict[int, re.Pattern[str]] = {
            -1: re.compile("[" + "".join(map(re.escape, sorted(outside))) + "]")}
        for i, q in enumerate(self.quotes):
            chars = {q.close[0]} | ({"\\"} if q.escapes else set())
            self.notable[i] = re.compile("[" + "".join(map(re.escape, sorted(chars))) + "]")

    def holdback(self, buf: str, start: int) -> int:
        return holdback(buf, start, self.prefixes, self.firsts, self.maxlen)


class Balanced:
    """Incremental scan of one bracketed value.

    `scan(buf, pos, final)` returns (new_pos, status): "more" (need input), "done"
    (value closed at new_pos), "stop" (a stop marker begins at new_pos, outside any
    string, before the value closed), "bad" (the text does not start a value; or, with
    the spec's `adjacent`, an opening bracket at new_pos follows a value closed inside an
    object with only blanks between - the value is broken there), or "deep" (the bracket
    that opens level MAX_DEPTH + 1 ends at new_pos).
    """

    __slots__ = ("after", "bracketed", "depth", "item_end", "objects", "quote", "spec",
                 "started")

    def __init__(self, spec: BalancedSpec, bracketed: bool = True):
        self.spec = spec
        self.depth = 0
        self.quote = -1
        self.bracketed = bracketed
        self.started = not bracketed  # unbracketed: runs to a stop marker outside strings
        self.item_end = -1  # buffer position just after the last closed top-level element
        # (spec.adjacent) only blanks since a value closed inside an object; per open
        # bracket, whether it opened an object
        self.after = False
        self.objects: list[bool] = []

    def scan(self, buf: str, pos: int, final: bool) -> tuple[int, str]:
        spec = self.spec
        n = len(buf)
        if not self.started:
            while pos < n and buf[pos].isspace():
                pos += 1
            if pos >= n:
                return pos, "more"
            ch = buf[pos]
            if spec.quoted_values and ch in spec.quote_open:  # a whole quoted value
                self.started = True
                self.quote = spec.quote_open[ch]
                pos += 1
            elif ch not in _OPENERS or ch not in spec.brackets:
                return pos, "bad"
            else:
                self.started = True
                self.depth = 1
                pos += 1
                if spec.adjacent:
                    self.objects.append(ch == "{")
        while pos < n:
            if self.quote >= 0:
                m = spec.inside[self.quote].search(buf, pos)
                if m is None:
                    close = spec.quotes[self.quote].close
                    if final or len(close) == 1:
                        return n, "more"
                    for k in range(min(len(close) - 1, n - pos), 0, -1):
                        if buf.endswith(close[:k]):
                            return n - k, "more"
                    return n, "more"
                tok = m.group()
                if tok == "\\":  # a backslash at the very end: wait for its partner
                    return m.start(), "more"
                pos = m.end()
                if tok[0] == "\\" and spec.quotes[self.quote].escapes and len(tok) == 2:
                    continue
                self.quote = -1
                if self.depth == 0 and self.bracketed:  # a quoted value closed
                    return pos, "done"
                self.after = spec.adjacent and self.depth > 0 and self.objects[-1]
                continue
            m = spec.outside.search(buf, pos)
            if m is None:
                keep = 0 if final else spec.holdback(buf, pos)
                if self.after and buf[pos:n - keep].strip():
                    self.after = False
                return n - keep, "more"
            tok = m.group()
            if self.after:  # (each character is looked at here once: linear)
                self.after = False
                if tok in _OPENERS and not buf[pos:m.start()].strip():
                    return m.start(), "bad"
            if tok in spec.quote_open:
                if not final and m.end() == n and spec.holdback(buf, m.start()):
                    return m.start(), "more"
                self.quote = spec.quote_open[tok]
                pos = m.end()
            elif tok in _OPENERS:
                self.depth += 1
                pos = m.end()
                if spec.adjacent:
                    self.objects.append(tok == "{")
                if self.depth > MAX_DEPTH:
                    return pos, "deep"
            elif tok in _CLOSERS:
                pos = m.end()
                if self.depth == 0:  # unbracketed text: a stray closer is just text
                    continue
                self.depth -= 1
                if spec.adjacent:
                    self.objects.pop()
                if self.depth == 1:
                    self.item_end = pos
                if self.depth == 0 and self.bracketed:
                    return pos, "done"
                self.after = spec.adjacent and self.depth > 0 and self.objects[-1]
            else:  # a stop marker outside strings
                return m.start(), "stop"
        return pos, "more"


# ---------------------------------------------------------------- lenient JSON

class RepairFailed(ValueError):
    """The text is not JSON and the allowed repairs cannot make it JSON."""


class NestingTooDeep(RepairFailed):
    """The value nests brackets deeper than MAX_DEPTH: malformed input, never decoded."""


# runs of brackets (a run counts at once) and string openers, outside strings
_DEPTH_TOKEN = re.compile(r"""[\[{]+|[\]}]+|["']""")
_STRING_REST = {'"': re.compile(r'[^"\\]*+(?:\\.[^"\\]*+)*+"', re.S),
                "'": re.compile(r"[^'\\]*+(?:\\.[^'\\]*+)*+'", re.S)}


def too_deep(text: str, start: int = 0, end: int | None = None, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON-like `text[start:end]` nests `[`/`{` deeper than `limit` outside
    strings ("..." and '...'). Linear: a count in C first, then one pass over bracket runs
    and whole strings only when there are enough brackets to be too deep."""
    if end is None:
        end = len(text)
    if text.count("[", start, end) + text.count("{", start, end) <= limit:
        return False
    depth = 0
    pos = start
    search = _DEPTH_TOKEN.search
    while True:
        m = search(text, pos, end)
        if m is None:
            return False
        tok = m.group()
        c = tok[0]
        if c == "[" or c == "{":
            depth += len(tok)
            if depth > limit:
                return True
            pos = m.end()
        elif c == "]" or c == "}":
            depth = max(0, depth - len(tok))
            pos = m.end()
        else:
            q = _STRING_REST[c].match(text, m.end(), end)
            if q is None:  # a string that never closes: nothing after it is structure
                return False
            pos = q.end()


def loads(text: str) -> Any:
    """json.loads for model text, bounded: NestingTooDeep past MAX_DEPTH."""
    if too_deep(text):
        raise NestingTooDeep(f"nested deeper than {MAX_DEPTH} brackets")
    try:
        return json.loads(text)
    except RecursionError:  # only if the caller's own stack is nearly exhausted
        raise NestingTooDeep("nested too deep for the stack") from None


_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<dq>"(?:[^"\\]|\\.)*")
  | (?P<sq>'(?:[^'\\]|\\.)*')
  | (?P<num>-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_$][\w$]*)
  | (?P<punct>[{}\[\]:,])
""", re.X | re.S)

_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_MD_ESCAPE = re.compile(r"\\.")


def _md_unescape(m: re.Match[str]) -> str:
    return "_" if m.group() == "\\_" else m.group()


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "0": "\0", "\\": "\\",
            "'": "'", '"': '"', "/": "/"}
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")


def unescape(body: str) -> str:
    """The text of a quoted string's body with backslash escapes read (JSON or Python
    style: \\n, \\', \\uXXXX ...); an unknown escape is kept as written."""
    if "\\" not in body:
        return body
    out = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt == "u" and _HEX4.fullmatch(body, i + 2, i + 6):
                out.append(chr(int(body[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _sq_to_json(token: str) -> str:
    return json.dumps(unescape(token[1:-1]), ensure_ascii=False)


def loads_strict(text: str) -> object:
    """json.loads that refuses NaN/Infinity (not JSON) - model output must be real JSON.
    The caller bounds the depth first (`too_deep`)."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise NestingTooDeep("nested too deep for the stack") from None


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


_STRICT_SCAN = cast(Any, json.scanner).make_scanner(json.JSONDecoder(parse_constant=_no_constant))
COMMA_MENDS = 4
"""How many trailing commas one read may take out (each costs a copy of the text)."""


def scan_json(text: str, pos: int, mends: list[int]) -> tuple[Any, int]:
    """(value, end) of the JSON value at `pos` by the C scanner (NaN and Infinity refused),
    or (None, -1). A trailing comma before `]` or `}` (`[1, 2,]`), where the scanner stops,
    is taken out and the scan tried again: at most `mends[0]` in all (the list is shared by
    the reads of one text, and counted down)."""
    work = text
    removed = 0
    while True:
        try:
            value, stop = _STRICT_SCAN(work, pos)
            return value, stop + removed
        except StopIteration as exc:
            at = exc.value
        except json.JSONDecodeError as exc:
            at = exc.pos
        except (ValueError, RecursionError):
            return None, -1
        if mends[0] <= 0 or not isinstance(at, int) or at >= len(work) or work[at] not in "]}":
            return None, -1
        j = at - 1
        while j > pos and work[j] in " \t\r\n":
            j -= 1
        if work[j] != ",":
            return None, -1
        mends[0] -= 1
        work = work[:j] + work[j + 1:]
        removed += 1


def repair_json(text: str, allowed: frozenset[str] | set[str],
                at_end_marker: bool = False) -> tuple[object, tuple[str, ...]]:
    """Parse `text` as JSON, applying only `allowed` repairs; return (value, repairs used).

    Repairs: trailing-commas, single-quotes, unquoted-keys, python-literals,
    markdown-escapes (``\\_`` in a string reads ``_``), and missing-final-brace (only when
    the payload was cut by a call's end marker). NestingTooDeep past MAX_DEPTH.
    """
    if too_deep(text):
        raise NestingTooDeep(f"nested deeper than {MAX_DEPTH} brackets")
    try:
        return loads_strict(text), ()
    except ValueError:
        pass
    if "trailing-commas" in allowed:  # the common repair, found by the C scanner
        start = len(text) - len(text.lstrip())
        value, end = scan_json(text, start, [COMMA_MENDS])
        if end >= 0 and not text[end:].strip():
            return value, ("trailing-commas",)
    used: list[str] = []
    out: list[str] = []
    stack: list[str] = []
    toks = []
    pos = 0
    n = len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise RepairFailed(f"unexpected character {text[pos]!r} at {pos}")
        pos = m.end()
        if m.lastgroup != "ws":
            toks.append((m.lastgroup, m.group()))

    def use(name: str) -> None:
        if name not in allowed:
            raise RepairFailed(f"needs repair {name!r}, which this dialect does not allow")
        if name not in used:
            used.append(name)

    for i, (kind, tok) in enumerate(toks):
        nxt = toks[i + 1][1] if i + 1 < len(toks) else None
        if kind == "dq" and "\\_" in tok:  # \_ is no JSON escape: Markdown escaped a _
            fixed = _MD_ESCAPE.sub(_md_unescape, tok)
            if fixed != tok:
                use("markdown-escapes")
            out.append(fixed)
        elif kind == "dq" or kind == "num":
            out.append(tok)
        elif kind == "sq":
            use("single-quotes")
            out.append(_sq_to_json(tok))
        elif kind == "ident":
            if tok in ("true", "false", "null") and nxt != ":":
                out.append(tok)
            elif tok in _PY_LITERALS and nxt != ":":
                use("python-literals")
                out.append(_PY_LITERALS[tok])
            elif nxt == ":" and stack and stack[-1] == "}":
                use("unquoted-keys")
                out.append(json.dumps(tok))
            else:
                raise RepairFailed(f"bare word {tok!r} is not JSON")
        elif tok == ",":
            if nxt in ("}", "]"):
                use("trailing-commas")
                continue
            out.append(tok)
        elif tok in "{[":
            stack.append(_OPENERS[tok])
            out.append(tok)
        elif tok in "}]":
            if not stack or stack[-1] != tok:
                raise RepairFailed(f"unbalanced {tok!r}")
            stack.pop()
            out.append(tok)
        else:
            out.append(tok)
    if stack:
        if not at_end_marker:
            raise RepairFailed("unclosed brackets")
        use("missing-final-brace")
        out.extend(reversed(stack))
    try:
        return loads_strict("".join(out)), tuple(used)
    except ValueError as exc:
        raise RepairFailed(str(exc)) from None


# ---------------------------------------------------------------- Python call lists

CALL_NAME = r"(?:[A-Za-z_]|\\_)(?:[\w.\-]|\\_)*"
"""A Python call's name as models write it (Markdown may escape its `_` as `\\_`)."""
_CALL_AHEAD = re.compile(r"\s*" + CALL_NAME + r"\s*\(")
_AFTER_CALL = re.compile(r"\s*(?:[,\]]|\Z)")
_LIST_TOKEN = re.compile(r"""[\[\](){}'"]""")
_LINE_STRING = {'"': re.compile(r'[^"\\\n]*(?:\\.[^"\\\n]*)*"'),
                "'": re.compile(r"[^'\\\n]*(?:\\.[^'\\\n]*)*'")}


def _before(text: str, i: int) -> str:
    """The last non-blank character before i ('' at the start)."""
    j = i - 1
    while j >= 0 and text[j] in " \t\r\n":
        j -= 1
    return text[j] if j >= 0 else ""


def mend_call_list(text: str, brackets: bool,
                   quotes: bool) -> tuple[str, int, tuple[str, ...]] | None:
    """A Python call list (or one quoted call) left unfinished at the end of the output,
    mended the two ways real outputs need, and no other: a quote opened around a call and
    never closed is dropped (`unbalanced-quotes`: ['f(x=1)] reads [f(x=1)]), and list
    brackets left open after complete calls are closed (`missing-final-bracket`). Returns
    the mended value, how much of `text` it spans, and the repairs used; None when it
    cannot be mended so (an open call, an open string inside a call). Linear."""
    out: list[str] = []
    used: list[str] = []
    stack: list[str] = []
    last = pos = 0
    end = -1
    while True:
        m = _LIST_TOKEN.search(text, pos)
        if m is None:
            break
        tok, i = m.group(), m.start()
        pos = m.end()
        if tok in "'\"":
            closed = _LINE_STRING[tok].match(text, pos)
            if closed is not None:
                pos = closed.end()
                if not stack:  # a quoted value that closed: the value ends there
                    end = pos
                    break
                continue
            before = _before(text, i)
            around = (before in ("", "[", ",") and _CALL_AHEAD.match(text, pos) is not None) \
                or (before == ")" and _AFTER_CALL.match(text, pos) is not None)
            if not (quotes and around):
                return None
            out.append(text[last:i])
            last = pos
            if "unbalanced-quotes" not in used:
                used.append("unbalanced-quotes")
            continue
        if tok in _OPENERS:
            stack.append(_OPENERS[tok])
            if len(stack) > MAX_DEPTH:
                return None
            continue
        if not stack or stack[-1] != tok:
            return None
        stack.pop()
        if not stack:
            end = pos
            break
    if end < 0:  # open at the end of the output: only list brackets may be closed
        if not stack or not brackets or any(c != "]" for c in stack):
            return None
        end = len(text)
        tail = "]" * len(stack)
        used.append("missing-final-bracket")
    else:
        tail = ""
    if not used:
        return None
    out.append(text[last:end])
    return "".join(out) + tail, end, tuple(used)


def list_spans(text: str) -> dict[int, int]:
    """Where each `[` of `text` closes (string-aware, one line per string): the call
    lists a block of code may hold are looked up here. Linear."""
    spans: dict[int, int] = {}
    stack: list[tuple[str, int]] = []
    pos = 0
    while True:
        m = _LIST_TOKEN.search(text, pos)
        if m is None:
            return spans
        tok, i = m.group(), m.start()
        pos = m.end()
        if tok in "'\"":
            closed = _LINE_STRING[tok].match(text, pos)
            if closed is not None:
                pos = closed.end()
        elif tok in _OPENERS:
            if len(stack) < 4 * MAX_DEPTH:
                stack.append((_OPENERS[tok], i))
        elif stack and stack[-1][0] == tok:
            closer, start = stack.pop()
            if closer == "]":
                spans[start] = pos
