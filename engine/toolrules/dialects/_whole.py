"""parse() of a complete output without the streaming machine, in the common case.

The scanner (`_scanner.Machine`) is built for streaming: per-step state, held-back
marker prefixes, events through a Sink. A complete text in the common case needs none
of that: text regions connected by literal markers, and calls written `open JSON close`
whose JSON names a tool. `parse_whole` reads such a text with one regex search per
marker and the C JSON decoder, and builds only the objects it returns.

It gives up (returns None) at the first thing it does not handle - a call with a header
or tagged parameters, a repair, a missing close marker, a call inside reasoning that may
never close, start-of-content calls, message headers, a duplicate or declined call - and
the caller then parses the text with the Machine from the start. Results are the same
either way: the property tests compare this path (parse) with the Machine (stream) on
every golden case.
"""

from __future__ import annotations

import json
import json.scanner
import re
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from .._types import ParsedResponse, ToolCall
from ._jsonscan import MAX_DEPTH, too_deep
from ._sink import next_call_id

if TYPE_CHECKING:
    from ._compile import CallDef, Dialect, Region

__all__ = ["WholePlan", "parse_whole"]

_WS = " \t\r\n"
_WS_RUN = re.compile(r"[ \t\r\n]*")
# the C scanner under JSONDecoder.raw_decode, without its wrapper (a failure is a cheap
# StopIteration here, where raw_decode builds a JSONDecodeError with line and column)
_SCAN = cast(Any, json.scanner).make_scanner(json.JSONDecoder())
_DEEP = 2 * MAX_DEPTH


# what an exit marker does here: nothing (dropped), go to a region, read a call, give up
_DROP, _GOTO, _CALL, _OTHER = 0, 1, 2, 3
# what a region's text is: content, reasoning, section text, or something to give up on
_CONTENT, _REASONING, _SECTION, _NOISE, _UNKNOWN = 0, 1, 2, 3, 4
_KINDS = {"content": _CONTENT, "reasoning": _REASONING}


class _Call:
    """A call shape the fast path reads: `open JSON close`, the name and arguments under
    the first of their keys (anything else is the Machine's)."""

    __slots__ = ("args_key", "array", "close", "head", "name_key", "tail")

    def __init__(self, c: CallDef):
        p = c.payload
        assert p.fields is not None
        # blanks, then a character that may open the payload (not consumed)
        self.head = re.compile("[ \t\r\n]*(?=[" + "".join(map(re.escape, sorted(p.starts)))
                               + "])").match
        self.array = p.array
        self.name_key = p.fields["name"][0]
        self.args_key = p.fields["arguments"][0]
        # the close markers, longest first (as the Machine's alternation tries them)
        self.close = tuple(sorted(c.close, key=len, reverse=True))
        # blanks, then the close marker: one match after the payload
        self.tail = re.compile("[ \t\r\n]*(?:" + "|".join(map(re.escape, self.close))
                               + ")").match


class _Region:
    __slots__ = ("actions", "kind", "search", "tentative")

    def __init__(self, r: Region):
        self.search = r.exits.regex.search if r.exits.regex is not None else None
        self.kind = _KINDS.get(r.kind, _UNKNOWN)
        if r.kind == "section":
            self.kind = _NOISE if r.noise else (_SECTION if r.text == "content" else _UNKNOWN)
        self.tentative = r.tentative
        self.actions: dict[str, tuple[Any, ...]] = {}


def _tables(d: Dialect) -> dict[Region, _Region]:
    """Per dialect, once: each region's search and what each of its markers does."""
    out: dict[Region, _Region] = {r: _Region(r) for r in d.regions}
    calls: dict[CallDef, _Call] = {}
    for r, info in out.items():
        for marker, action in r.exits.actions.items():
            what = action[0]
            if what == "drop":
                info.actions[marker] = (_DROP,)
            elif what == "goto" and action[1] in out:
                info.actions[marker] = (_GOTO, out[action[1]])
            elif what == "call" and action[1].fast and action[1].payload.fields is not None \
                    and not action[1].payload.fields["id"] \
                    and not action[1].payload.fields["calls"]:
                c = action[1]
                if c not in calls:
                    calls[c] = _Call(c)
                info.actions[marker] = (_CALL, calls[c])
            else:
                info.actions[marker] = (_OTHER,)
    return out


_CACHE: weakref.WeakKeyDictionary[Dialect, dict[Region, _Region]] = weakref.WeakKeyDictionary()


class WholePlan:
    """What parse_whole needs from one TextParser, checked once: None when the dialect or
    the parser uses something the fast path never handles."""

    __slots__ = ("escapes", "sequential", "start", "strip", "tools", "unwrap")

    def __init__(self, start: _Region, strip: bool, tools: dict[str, Any], sequential: bool,
                 repairs: frozenset[str]):
        self.start = start
        self.strip = strip
        self.tools = tools
        self.sequential = sequential
        # repairs that may apply to a well-formed call: where one might, the Machine decides
        self.unwrap = "double-wrapped-arguments" in repairs
        self.escapes = "markdown-escapes" in repairs

    @classmethod
    def build(cls, d: Dialect, start_state: tuple[Any, ...], tools: dict[str, Any],
              repairs: frozenset[str], ids: str, decline: frozenset[str],
              heuristics: Any) -> WholePlan | None:
        region, header, _msg, call = start_state
        if header is not None or call is not None or heuristics or d.dedupe or d.repeats \
                or decline:
            return None
        if d.messages is not None or d.undecided is not None or d.content.start_calls:
            return None
        if region.kind not in _KINDS:
            return None
        tables = _CACHE.get(d)
        if tables is None:
            tables = _CACHE[d] = _tables(d)
        return cls(tables[region], d.strip, tools, ids == "sequential", repairs)


# a run of zero or more blanks always matches: typed as never None
_ws_run = cast("Callable[[str, int], re.Match[str]]", _WS_RUN.match)


def parse_whole(plan: WholePlan, text: str, finish_reason: str | None) -> ParsedResponse | None:
    """The parse of `text`, or None when the Machine must read it."""
    # Each channel's pieces are joined and stripped at the end: what the Sink's piecewise
    # strip (leading blanks dropped, trailing ones held until more text) amounts to.
    content: list[str] = []
    reasoning: list[str] = []
    found: list[tuple[str, dict[str, Any]]] = []
    warnings: list[str] = []
    tools = plan.tools
    region = plan.start
    pos = 0
    n = len(text)
    while pos < n:
        search = region.search
        m = search(text, pos) if search is not None else None
        end = n if m is None else m.start()
        if end > pos:
            kind = region.kind
            if kind == _CONTENT:
                content.append(text[pos:end])
            elif kind == _REASONING:
                reasoning.append(text[pos:end])
            elif kind == _SECTION:
                piece = text[pos:end]
                if piece.strip(_WS) and "text-inside-call-section" not in warnings:
                    warnings.append("text-inside-call-section")
                content.append(piece)
            elif kind != _NOISE:
                return None
        if m is None:
            break
        pos = m.end()
        action = region.actions[m.group()]
        what = action[0]
        if what == _GOTO:
            region = action[1]
        elif what == _CALL:
            if region.tentative:  # a call there counts only if the reasoning never closes
                return None
            c = action[1]
            h = c.head(text, pos)
            if h is None:
                return None
            start = h.end()
            try:
                value, stop = _SCAN(text, start)
            except (StopIteration, ValueError, RecursionError):
                return None
            t = c.tail(text, stop)
            if t is None:
                return None
            # a decoded value nested d deep is at least 2d characters long
            if stop - start > _DEEP and too_deep(text, start, stop):
                return None
            if type(value) is dict:
                items: Any = (value,)
            elif type(value) is list and c.array and value:
                items = value
            else:
                return None
            for item in items:
                if type(item) is not dict:
                    return None
                name = item.get(c.name_key)
                if type(name) is not str or not name:
                    return None
                args = item.get(c.args_key, item)
                if args is item:  # the first arguments key is missing: alternatives, repairs
                    return None
                if type(args) is not dict:
                    if args is not None and args != "":
                        return None
                    args = {}
                if plan.unwrap and len(args) == 1 and "arguments" in args:
                    return None
                if plan.escapes and ("\\_" in name or any("\\_" in k for k in args)):
                    return None
                if tools and name not in tools:
                    warnings.append(f"unknown-tool: {name}")
                found.append((name, args))
            pos = t.end()
        elif what != _DROP:
            return None
    sequential = plan.sequential
    if len(found) == 1:
        name, args = found[0]
        calls: tuple[ToolCall, ...] = (ToolCall(next_call_id(0, sequential), name, args),)
    else:
        calls = tuple([ToolCall(next_call_id(i, sequential), name, args)
                       for i, (name, args) in enumerate(found)])
    said = thought = None
    if content:
        said = ("".join(content).strip(_WS) if plan.strip else "".join(content)) or None
    if reasoning:
        thought = ("".join(reasoning).strip(_WS) if plan.strip else "".join(reasoning)) or None
    return ParsedResponse(said, thought, calls, finish_reason, (), text,
                          tuple(warnings) if warnings else ())
