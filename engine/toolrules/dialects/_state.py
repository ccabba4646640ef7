"""The state of one scan: what every phase reads and moves, and the moves they share.

`State` holds one output's scan - the buffer and position, the region, the message
header, the call being read (a `CallRun`), the sink, the step budget's counters and what
the streaming lanes wait for - and the primitive moves on the buffer every phase uses
(consume, skip blanks, give text back). The phases (`_text`, `_header`, `_payload`,
`_params`, `_closing`) are functions over a State; `_scanner.Machine` drives them.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any, cast

from ._compile import CallDef, Dialect, MarkerTable, Region
from ._jsonscan import Balanced
from ._sink import Sink

__all__ = ["BROKEN", "MAX_HEADER", "MEMO_CHARS", "NEWLINE", "PROBE_CHARS", "TOO_DEEP", "WS", "CallRun",
           "State", "phase_of", "remember", "starts", "table_read", "unescape", "ws_run"]

WS = " \t\r\n"
_WS_RUN = re.compile(r"[ \t\r\n]*")
# a run of zero or more blanks always matches: typed as never None
ws_run = cast("Callable[[str, int], re.Match[str]]", _WS_RUN.match)
NEWLINE = re.compile("\n")
# A call header (or a parameter key) holds at most this many characters; past it the call
# is malformed at exactly that position, in both modes (the decision never depends on
# how the text was split into deltas).
MAX_HEADER = 4096
PROBE_CHARS = 512  # a streamed payload is probed this far for its tool name (progress)
TOO_DEEP = "nesting-too-deep"  # a value nested past MAX_DEPTH: the call is kept as text
# a value broken off by another one right after it (payload `restart: adjacent`): the
# broken call is kept as text, said even where other text is not, and the other is read
BROKEN = "payload-broken"


class CallRun:
    """Per-call scanning state."""

    __slots__ = (
        "anchored",
        "bal",
        "c",
        "call_id",
        "confirming",
        "deep",
        "ending",
        "header",
        "hlen",
        "item_end",
        "key",
        "key_type",
        "lead",
        "lenient",
        "mark",
        "name",
        "nest",
        "nest_at",
        "newline",
        "params",
        "payload",
        "phase",
        "plen",
        "probe",
        "progress_name",
        "raw",
        "repairs",
        "ret",
        "start_index",
        "started",
        "tentative",
        "value",
        "value_end",
        "values",
    )

    def __init__(self, c: CallDef, ret: Region, anchored: bool, tentative: bool):
        self.c = c
        self.ret = ret
        self.anchored = anchored
        self.tentative = tentative
        self.raw: list[str] = []
        self.header: list[str] = []
        self.payload: list[str] = []
        self.values: list[Any] = []
        self.params: list[tuple[str, str | None, str]] = []
        self.repairs: list[str] = []
        self.name: str | None = None
        self.call_id: str | None = None
        self.bal: Balanced | None = None
        self.started = False
        self.key: str | None = None
        self.key_type: str | None = None
        self.value: list[str] = []
        self.value_end: MarkerTable | None = None
        self.confirming: list[str] | None = None
        # confirming the call's close marker found inside a value: where it begins in
        # `confirming` (-1: confirming a value's own close marker, or nothing)
        self.ending = -1
        self.nest = 0          # param `nest`: whole calls open inside the value being read
        self.nest_at = -1      # where the first one began: fragments in `value` then
        self.probe = 0
        self.progress_name: str | None = None
        self.plen = 0          # characters in `payload`
        self.item_end = -1     # payload offset after the last complete array element
        self.mark = -1         # len(raw) after the last complete value (payload `rest: text`)
        self.start_index = -1  # anchored: which of the region's start shapes this is
        self.newline = False   # a newline was skipped after the last value
        self.deep = False      # malformed because a value nested past MAX_DEPTH
        self.lenient = False   # read by a repair at the end: its calls must be offered tools
        self.lead = ""         # header `text`: prose before the payload, content if it reads
        self.hlen = 0          # characters in `header`
        if c.header is not None:
            self.phase = "header"
        elif c.payload.kind == "params":
            self.phase = "params"
        elif c.payload.kind == "none":
            self.phase = "close"
        else:
            self.phase = "payload"

    def took_value(self, value: Any) -> None:
        """The payload's value is read: what follows it comes next."""
        self.values.append(value)
        self.mark = len(self.raw)
        self.bal = None
        self.started = False
        self.phase = "after"


class State:
    """One output's scan: the buffer, where it stands, and what it is inside."""

    __slots__ = ("_pending_call", "allowed", "buf", "call", "chars", "clock", "d", "dropped",
                 "final", "header", "header_msg", "lane", "lead", "limit", "lists", "need", "pos",
                 "region", "sink", "spent", "start_ok", "start_skip", "steps", "tools",
                 "undecided", "unnested", "wake")

    def __init__(self, dialect: Dialect, sink: Sink, repairs: frozenset[str],
                 tools: dict[str, Any]):
        self.d = dialect
        self.sink = sink
        self.allowed = repairs
        self.tools = tools
        self.buf = ""
        self.pos = 0
        self.region: Region = dialect.start
        self.call: CallRun | None = None
        self.header: list[str] | None = None
        self.header_msg: Any = None
        self.start_ok = True
        self.undecided: list[str] = []
        self.lead: list[str] = []
        self.final = False
        self._pending_call: CallRun | None = None
        self.start_skip = 0    # start shapes already tried on this text (they did not fit)
        self.chars = 0         # characters given to the machine (the step budget)
        self.steps = 0         # progressing steps taken
        self.dropped = 0       # characters read and dropped from the front of `buf`
        self.limit: float | None = None  # seconds this output may take (parse_deadline)
        self.spent = 0.0       # seconds taken so far (with a limit)
        self.clock: Any = None  # parse_clock()'s ParseClock: the seconds are added there
        self.lists: set[str] = set()  # dedupe repeats: the call lists read so far
        # param `nest`: a call begun inside a value ran to the end once; no more begin
        # (each text is read again at most once: linear)
        self.unnested = False
        self.lane: tuple[Any, ...] | None = None  # see feed()
        self.need = 0          # feed: buffer length before which no step can decide ...
        self.wake = NEWLINE    # ... unless a character this finds arrives

    def consume(self, run: CallRun, end: int) -> str:
        text = self.buf[self.pos:end]
        if text:
            run.raw.append(text)
        self.pos = end
        return text

    def skip_ws(self, run: CallRun) -> int:
        i = ws_run(self.buf, self.pos).end()
        if i > self.pos:
            run.raw.append(self.buf[self.pos:i])
            self.pos = i
        return i

    def give_back(self, text: str) -> None:
        """Make `text` (just consumed) the next thing read. It usually still stands right
        before `pos`: stepping back is free, where copying the rest of a whole-text
        buffer on every give-back would make many of them quadratic."""
        k = len(text)
        if k <= self.pos and self.buf.startswith(text, self.pos - k):
            self.pos -= k
        else:
            self.buf = text + self.buf[self.pos:]
            self.pos = 0

    def unconsume(self, run: CallRun, text: str) -> None:
        """Give back `text`, the last characters this call consumed: they are read again."""
        k = len(text)
        while k:
            last = run.raw[-1]
            if len(last) <= k:
                run.raw.pop()
                k -= len(last)
            else:
                run.raw[-1] = last[:-k]
                k = 0
        self.give_back(text)

    def begin_call(self, c: CallDef, ret: Region, anchored: bool, marker: str = "",
                   tentative: bool = False) -> CallRun:
        run = CallRun(c, ret, anchored, tentative)
        if marker:
            run.raw.append(marker)
        self.call = run
        return run

    def offered(self, name: str) -> bool:
        if name in self.tools:
            return True
        return "markdown-escapes" in self.allowed and name.replace("\\_", "_") in self.tools


def phase_of(run: CallRun) -> Any:
    """A call's phase as a progressing step must change it (with the text position)."""
    if run.phase == "params":  # a parameter's own steps: key, value, confirmation
        return (run.key, run.value_end, run.confirming, len(run.params))
    return run.phase


def starts(literal: str, buf: str, i: int) -> bool:
    """literal.startswith(buf[i:]) without copying a long rest of the buffer."""
    return len(buf) - i <= len(literal) and literal.startswith(buf[i:i + len(literal)])


def unescape(text: str, how: str | None) -> str:
    return html.unescape(text) if how == "xml" else text


# Lanes (Machine.feed) remember their decisions on held-back texts up to this long: a
# decision depends on the text and the compiled dialect only, and the same few texts (a
# marker's prefixes, `[[`) come back again and again.
MEMO_CHARS = 64
_MEMO_SIZE = 4096


def remember(memo: dict[str, int], s: str, end: int) -> int:
    if len(s) <= MEMO_CHARS and len(memo) < _MEMO_SIZE:
        memo[s] = end
    return end


def table_read(table: MarkerTable, s: str) -> int:
    """How much of `s` a step reading up to one of `table`'s markers takes before waiting
    (a parameter's value, a skipped or dropped call); -1 when a marker in it decides."""
    end = -1 if table.search(s, 0, False) is not None else len(s) - table.holdback(s, 0)
    return remember(table.memo, s, end)
