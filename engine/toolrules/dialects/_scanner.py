"""The incremental scanner: one pass over model output, driven by a compiled Dialect.

`Machine.feed(delta)` appends to a buffer and advances through it; every step consumes
text, so nothing is scanned twice except a held-back tail that could still become a
marker (bounded by the longest marker). `Machine.close(finish_reason)` handles the end:
an unfinished call is dropped when the output was cut off (`length`) and otherwise given
back as text. Events go to a `Sink`, which either builds stream chunks or collects the
pieces of a ParsedResponse - the same events either way, so a stream split any way gives
what parse() gives.
"""

from __future__ import annotations

import html
import itertools
import json
import re
import secrets
import time
from collections.abc import Callable
from typing import Any, cast

from .._errors import ParseError, ParseTimeoutError
from .._types import StreamChunk, StreamChunkType, ToolCall
from ._compile import CallDef, Dialect, HeaderLane, MarkerTable, ParamDef, Region
from ._jsonscan import (
    CALL_NAME,
    MAX_DEPTH,
    Balanced,
    NestingTooDeep,
    RepairFailed,
    list_spans,
    loads,
    mend_call_list,
    repair_json,
    too_deep,
)
from ._values import read_value

__all__ = ["Machine", "Sink", "next_call_id"]

_WS = " \t\r\n"
_WS_RUN = re.compile(r"[ \t\r\n]*")
# a run of zero or more blanks always matches: typed as never None
_ws_run = cast("Callable[[str, int], re.Match[str]]", _WS_RUN.match)
_DECODER = json.JSONDecoder()
# built once: json.dumps with options builds an encoder per call (a call's cost, per call)
_KEY_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False).encode
_ARGS_JSON = json.JSONEncoder(ensure_ascii=False).encode
# A call header (or a parameter key) holds at most this many characters; past it the call
# is malformed at exactly that position, in both modes (the decision never depends on
# how the text was split into deltas).
_MAX_HEADER = 4096
_MAX_HEAD = 256  # payload `head` (a function name before its bracket)
_ID_PREFIX = secrets.token_hex(5)  # unique per process; the counter makes ids unique in it
_ID_COUNTER = itertools.count(1)
_PROBE_CHARS = 512
# Every step of the machine that reports progress must consume text, change phase, region
# or call, or end a call (_run checks each one). Backing that up, the steps of one output
# are bounded by _STEPS_BASE + _STEPS_PER_CHAR x the characters it was given (re-reading
# given-back text included: each start shape reads the text at most once more). A
# machine that breaks either rule has a bug: it raises a ParseError naming the dialect
# and the position instead of spinning.
_STEPS_PER_CHAR = 16
_STEPS_BASE = 1024
_CLOCK_STEPS = 64  # under a parse deadline, the clock is read every this many steps
_NAME_PROBE = re.compile(r'"([A-Za-z_]+)"\s*:\s*"([^"\\]{1,128})"')
_KEY_REPAIRS = {"function": "function-key", "args": "args-key", "parameters": "parameters-key"}
_TOO_DEEP = "nesting-too-deep"  # a value nested past MAX_DEPTH: the call is kept as text

# what feed() may read without stepping the machine (Machine.lane)
_REGION, _PAYLOAD, _VALUE, _HEADER, _RAW, _HOLD = range(6)
# a payload head (a function name) waits for a character that may end it: a non-word one
_HEAD_WAKE = re.compile(r"\W")
_NEWLINE = re.compile("\n")

_TEXT = StreamChunkType.TEXT
_REASONING = StreamChunkType.REASONING
_PROGRESS = StreamChunkType.TOOL_PROGRESS


def next_call_id(index: int, sequential: bool) -> str:
    """An id for a call the format gave none: call_<index>, or unique in the process."""
    return f"call_{index}" if sequential else f"call_{_ID_PREFIX}{next(_ID_COUNTER):x}"


class _Channel:
    """One text stream of a response (content or reasoning) and its strip state."""

    __slots__ = ("chunk", "parts", "pending", "started")

    def __init__(self, chunk: StreamChunkType):
        self.chunk = chunk
        self.parts: list[str] = []
        self.started = False   # something non-blank was emitted
        self.pending = ""      # trailing whitespace held until more text follows


class Sink:
    """Receives scanner events; streams chunks or collects a parse result."""

    __slots__ = ("calls", "content", "decline", "dedupe", "deferred", "ids", "muted", "out",
                 "reasoning", "repairs", "seen", "streaming", "strip", "tools", "warnings")

    def __init__(self, streaming: bool, strip: bool, tools: dict[str, Any], dedupe: bool,
                 ids: str):
        self.streaming = streaming
        self.strip = strip
        self.tools = tools
        self.dedupe = dedupe
        self.ids = ids
        self.out: list[StreamChunk] = []
        self.content = _Channel(_TEXT)
        self.reasoning = _Channel(_REASONING)
        self.calls: list[ToolCall] = []
        self.repairs: list[str] = []
        self.warnings: list[str] = []
        self.seen: set[str] | None = None
        self.deferred: list[tuple[Any, ...]] | None = None
        self.muted = False
        self.decline: frozenset[str] = frozenset()  # names that mean "no call"

    # ------------------------------------------------------------ text

    def text(self, kind: str, s: str) -> None:
        if self.muted or not s:
            return
        if self.deferred is not None:
            self.deferred.append(("text", kind, s))
            return
        ch = self.content if kind == "content" else self.reasoning
        if ch.started and not ch.pending and s[-1] not in _WS:  # (per delta: the common case)
            ch.parts.append(s)
            if self.streaming:
                self.out.append(StreamChunk(ch.chunk, s))
            return
        self._text(kind, s)

    def _text(self, kind: str, s: str) -> None:
        ch = self.content if kind == "content" else self.reasoning
        if self.strip:
            if not ch.started:
                s = s.lstrip(_WS)
                if not s:
                    return
            core = s.rstrip(_WS)
            if not core:
                ch.pending += s
                return
            tail = s[len(core):]
            s = ch.pending + core
            ch.pending = tail
        ch.started = True
        ch.parts.append(s)
        if self.streaming:
            self.out.append(StreamChunk(ch.chunk, s))

    def has_content(self) -> bool:
        return self.content.started

    # ------------------------------------------------------------ calls

    def call(self, name: str, arguments: dict[str, Any], call_id: str | None, raw: str,
             repairs: list[str]) -> None:
        if self.muted:
            return
        if self.deferred is not None:
            self.deferred.append(("call", name, arguments, call_id, raw, repairs))
            return
        self._call(name, arguments, call_id, repairs)

    def _call(self, name: str, arguments: dict[str, Any], call_id: str | None,
              repairs: list[str]) -> None:
        if name in self.decline and name not in self.tools:
            self.warn(f"declined-call: {name}")
            return
        if self.dedupe:
            key = name + "\0" + _KEY_JSON(arguments)
            if self.seen is None:
                self.seen = set()
            if key in self.seen:
                self.warn(f"duplicate-call-dropped: {name}")
                return
            self.seen.add(key)
        for r in repairs:
            if r not in self.repairs:
                self.repairs.append(r)
        if self.tools and name not in self.tools:
            self.warnings.append(f"unknown-tool: {name}")
        index = len(self.calls)
        if call_id is None:
            call_id = next_call_id(index, self.ids == "sequential")
        call = ToolCall(id=call_id, name=name, arguments=arguments)
        self.calls.append(call)
        if self.streaming:
            args_json = _ARGS_JSON(arguments)
            self.out.append(StreamChunk(StreamChunkType.TOOL_START, index=index,
                                        tool_call_id=call_id, tool_name=name))
            self.out.append(StreamChunk(StreamChunkType.TOOL_ARGS, index=index,
                                        tool_call_id=call_id, tool_name=name, args_delta=args_json))
            self.out.append(StreamChunk(StreamChunkType.TOOL_END, index=index,
                                        tool_call_id=call_id, tool_name=name, arguments=arguments))

    def progress(self, name: str | None, fragment: str) -> None:
        if self.streaming and fragment and not self.muted:  # per delta: positional is faster
            self.out.append(StreamChunk(_PROGRESS, None, len(self.calls), None, name, fragment))

    def warn(self, message: str) -> None:
        if not self.muted and message not in self.warnings:
            self.warnings.append(message)

    # ------------------------------------------------------------ deferral

    def defer(self) -> None:
        if self.deferred is None and not self.muted:
            self.deferred = []

    def marker(self, s: str) -> None:
        """A section marker around tentative calls: text again if the calls turn out text."""
        if self.deferred is not None and not self.muted:
            self.deferred.append(("marker", s))

    def resolve(self, calls_are_text: bool) -> None:
        """End a deferral: replay events; calls become reasoning text if `calls_are_text`."""
        events, self.deferred = self.deferred, None
        for ev in events or ():
            if ev[0] == "text":
                self._text(ev[1], ev[2])
            elif ev[0] == "marker":
                if calls_are_text:
                    self._text("reasoning", ev[1])
            elif calls_are_text:
                self._text("reasoning", ev[4])
            else:
                self._call(ev[1], ev[2], ev[3], ev[5])


class _CallRun:
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


class Machine:
    """Runs one dialect over one output (and, first, over the generation prompt)."""

    __slots__ = ("_pending_call", "allowed", "buf", "call", "chars", "d", "dropped", "final",
                 "header", "header_msg", "lane", "lead", "limit", "lists", "need", "pos",
                 "region", "sink", "spent", "start_ok", "start_skip", "steps", "tools",
                 "undecided", "wake")

    def __init__(self, dialect: Dialect, sink: Sink, repairs: frozenset[str],
                 tools: dict[str, Any]):
        self.d = dialect
        self.sink = sink
        self.allowed = repairs
        self.tools = tools
        self.buf = ""
        self.pos = 0
        self.region: Region = dialect.start
        self.call: _CallRun | None = None
        self.header: list[str] | None = None
        self.header_msg: Any = None
        self.start_ok = True
        self.undecided: list[str] = []
        self.lead: list[str] = []
        self.final = False
        self._pending_call: _CallRun | None = None
        self.start_skip = 0    # start shapes already tried on this text (they did not fit)
        self.chars = 0         # characters given to the machine (the step budget)
        self.steps = 0         # progressing steps taken
        self.dropped = 0       # characters read and dropped from the front of `buf`
        self.limit: float | None = None  # seconds this output may take (parse_deadline)
        self.spent = 0.0       # seconds taken so far (with a limit)
        self.lists: set[str] = set()  # dedupe repeats: the call lists read so far
        self.lane: tuple[Any, ...] | None = None  # see feed()
        self.need = 0          # feed: buffer length before which no step can decide ...
        self.wake = _NEWLINE   # ... unless a character this finds arrives

    # ------------------------------------------------------------ driving

    def prime(self, prompt: str | None) -> None:
        """Scan the generation prompt silently: it decides the starting region."""
        self._pending_call = None
        if prompt:
            self.sink.muted = True
            self.load(prompt[-4096:])
            self._run(final=True)
            self.sink.muted = False
            self.buf, self.pos = "", 0
            self.chars = self.steps = self.dropped = 0
            self._pending_call, self.call = self.call, None
        und = self.d.undecided
        if und is not None and (self.region is self.d.content or self.region is und.reasoning):
            self.region = und  # reasoning only if its close marker comes
        self.start_ok = True

    def start_state(self) -> tuple[Any, ...]:
        """What prime() decided, to start later machines without scanning the prompt again.

        A prompt may also pre-open a call (a forced call prefilled up to its open marker):
        a call that has not read anything yet carries over to the output.
        """
        call = None
        run = self._pending_call
        if run is not None and not (run.header or run.payload or run.params or run.values):
            call = (run.c, run.ret, run.tentative, run.phase)
        return (self.region, None if self.header is None else list(self.header),
                self.header_msg, call)

    def restore(self, state: tuple[Any, ...]) -> None:
        self.region, header, self.header_msg, call = state
        self.header = None if header is None else list(header)
        if call is not None:
            c, ret, tentative, phase = call
            self.call = _CallRun(c, ret, False, tentative)
            self.call.phase = phase

    def load(self, text: str) -> None:
        """Append `text` without scanning it yet (parse() hands the whole text to close())."""
        self.buf += text
        self.chars += len(text)

    def feed(self, delta: str) -> None:
        # Most deltas only extend what is being read: text with no marker in it, a value's
        # text with no quote or stop character and no bracket that ends it, a header with
        # no end marker, a held-back tail that may still become a marker. Such a delta is
        # taken here as the waiting step would take it, without running the machine: the
        # same events, far fewer instructions per token. `lane` (set after each run of
        # the machine) says what is being read.
        if not delta:  # nothing a step could decide on anew
            return
        if self.need:  # a step waits for this much text (or a wake character)
            if len(self.buf) + len(delta) < self.need and self.wake.search(delta) is None:
                self.buf += delta
                self.chars += len(delta)
                return
            self.need = 0
        lane = self.lane
        if lane is not None:
            kind = lane[0]
            if kind == _PAYLOAD:
                run = lane[1]
                bal = run.bal
                if not self.buf and lane[2][bal.quote].search(delta) is None:
                    # (quotes are always notable: no name can show up here)
                    n = len(delta)
                    self.chars += n
                    self.dropped += n
                    run.raw.append(delta)
                    run.payload.append(delta)
                    run.plen += n
                    if run.probe < _PROBE_CHARS and run.name is None:
                        run.probe += n
                    sink = self.sink
                    if sink.streaming and not sink.muted and n:
                        sink.out.append(StreamChunk(_PROGRESS, None, len(sink.calls), None,
                                                    run.name or run.progress_name, delta))
                    return
                if self._payload_lane(run, bal, delta):
                    return
            else:
                buf = self.buf
                s = buf + delta if buf else delta
                if kind == _REGION:
                    r = lane[1]
                    starts = lane[2]
                    if starts is None or starts.search(s) is None:
                        end = len(s)
                    else:
                        end = r.memo.get(s, -2) if len(s) <= _MEMO_CHARS else -2
                        if end == -2:
                            end = _region_read(r, s)
                    if end >= 0:
                        self.chars += len(delta)
                        self.dropped += end
                        if end == len(s):
                            self.buf = ""
                            self._emit(r, s)
                        else:
                            self.buf = s[end:]
                            if end:
                                self._emit(r, s[:end])
                        return
                elif kind == _HEADER:
                    run = lane[1]
                    hl = lane[2]
                    n = len(s)
                    if run.hlen + n <= _MAX_HEADER and (run.header or not (
                            s[0] in _WS or (lane[3] and s[0] in run.c.payload.starts))):
                        if hl.notable.search(s) is None:
                            end = n
                        else:
                            end = hl.memo.get(s, -2) if n <= _MEMO_CHARS else -2
                            if end == -2:
                                end = _header_read(hl, s)
                        if end >= 0:
                            self.chars += len(delta)
                            self.dropped += end
                            self.buf = s[end:] if end < n else ""
                            if end:
                                text = s[:end] if end < n else s
                                run.header.append(text)
                                run.raw.append(text)
                                run.hlen += end
                            return
                elif kind == _HOLD:  # a step waits to see whether a marker comes
                    if s in lane[2] and s[0] not in lane[3]:
                        self.buf = s
                        self.chars += len(delta)
                        return
                else:  # _VALUE (a parameter's value) or _RAW (markup skipped or dropped)
                    run = lane[1]
                    table = lane[2]
                    starts = table.starts
                    n = len(s)
                    if starts is None or starts.search(s) is None:
                        end = n
                    else:
                        end = table.memo.get(s, -2) if n <= _MEMO_CHARS else -2
                        if end == -2:
                            end = _table_read(table, s)
                    if end >= 0:
                        self.chars += len(delta)
                        self.dropped += end
                        self.buf = s[end:] if end < n else ""
                        frag = s[:end] if end < n else s
                        if frag:
                            run.raw.append(frag)
                        if kind == _VALUE:
                            run.value.append(frag)
                            self.sink.progress(run.name, frag)
                        return
        self.buf += delta
        self.chars += len(delta)
        self._run(final=False)
        self.lane = self._lane()

    def _lane(self) -> tuple[Any, ...] | None:
        """What the next delta may extend without the machine stepping (see feed)."""
        run = self.call
        if run is None:
            r = self.region
            if self.header is not None or self.lead or (
                    r.start_calls and self.start_ok and not self.sink.has_content()):
                return None
            return (_REGION, r, r.exits.starts)
        phase = run.phase
        if phase == "payload":
            bal = run.bal
            if run.started and bal is not None and bal.started:
                return (_PAYLOAD, run, bal.spec.notable)
            p = run.c.payload
            if not run.started and not p.fence:  # a held tail that may be the next marker
                return (_HOLD, run, run.ret.exits.prefixes, p.starts + _WS)
            return None
        if phase == "close":
            if run.c.close:  # a held tail that may be the close marker
                return (_HOLD, run, run.c.close_table.prefixes, _WS)
            return None
        if phase == "params":
            if run.value_end is not None and run.confirming is None:
                return (_VALUE, run, run.value_end)
            return None
        if phase == "header":
            h = run.c.header
            if h is not None:
                return (_HEADER, run, h.lane(run.ret.exits), h.optional)
            return None
        if phase == "skip":
            return (_RAW, run, run.c.close_table)
        if phase == "drop":
            return (_RAW, run, run.c.drop_until)
        return None

    def _payload_lane(self, run: _CallRun, bal: Balanced, delta: str) -> bool:
        """_step_payload's scan while the value goes on (brackets that do not close it, a
        string opening or closing): the scan's state is put back if it would decide."""
        s = self.buf + delta if self.buf else delta
        depth, quote, started = bal.depth, bal.quote, bal.started
        bal.item_end = -1
        new, status = bal.scan(s, 0, False)
        if status != "more":
            bal.depth, bal.quote, bal.started = depth, quote, started
            return False
        if bal.item_end >= 0:
            run.item_end = run.plen + bal.item_end
        self.chars += len(delta)
        self.dropped += new
        self.buf = s[new:]
        if new:
            self._took(run, s[:new])
        return True

    def _took(self, run: _CallRun, frag: str) -> None:
        """A payload's scan read `frag`."""
        run.raw.append(frag)
        run.payload.append(frag)
        run.plen += len(frag)
        if self.sink.streaming:
            p = run.c.payload
            if run.name is None and p.fields is not None and run.probe < _PROBE_CHARS:
                run.probe += len(frag)  # a UI wants the name early: look near the start
                if '"' in frag:  # (the name's closing quote: only then can it be found)
                    nm = _NAME_PROBE.search("".join(run.payload)[:_PROBE_CHARS])
                    if nm is not None and nm.group(1) in p.fields["name"]:
                        run.progress_name = nm.group(2)
            self.sink.progress(run.name or run.progress_name, frag)

    def close(self, finish_reason: str | None) -> None:
        self._run(final=True)
        while self.call is not None:
            self._call_eof(finish_reason)
            self._run(final=True)  # text a call gave back is read again
        if self.lead:  # whitespace held while waiting for a possible call at the start
            lead, self.lead = "".join(self.lead), []
            self._emit(self.region, lead)
        if self.header is not None:
            self.sink.warn("incomplete-message-header-dropped")
            self.header = None
        if self.region.kind == "undecided":  # no close marker came: the reply
            cut = finish_reason == "length" and self.d.undecided_cut == "reasoning"
            self._flush_undecided("reasoning" if cut else "content")
        if self.sink.deferred is not None:
            self.sink.resolve(calls_are_text=False)
        # trailing whitespace still pending in the sink is dropped (strip semantics)

    def _run(self, final: bool) -> None:
        self.final = final
        budget = _STEPS_BASE + _STEPS_PER_CHAR * self.chars
        if self.limit is not None:
            self._timed(final, budget)
        else:
            self._loop(final, budget)
        if self.pos:
            self.dropped += self.pos
            self.buf = self.buf[self.pos:]
            if self.need:
                self.need -= self.pos
            self.pos = 0

    def _timed(self, final: bool, budget: int) -> None:
        """_loop under the parse deadline: the time is checked every _CLOCK_STEPS steps
        and when the run ends (a stream's deltas add up)."""
        limit = cast(float, self.limit)
        started = time.perf_counter()
        try:
            self._loop(final, budget, started + limit - self.spent)
        finally:
            self.spent += time.perf_counter() - started
        if self.spent > limit:
            raise self._late()

    def _late(self) -> ParseTimeoutError:
        return ParseTimeoutError(
            f"dialect {self.d.id!r}: reading the model's output took longer than the parse "
            f"deadline ({self.limit:g} s) at character {self.dropped + self.pos} of "
            f"{self.chars}; the request ends here (raise the deadline with parse_timeout "
            "if such outputs are expected)")

    def _loop(self, final: bool, budget: int, until: float | None = None) -> None:
        while True:
            # what a progressing step must change, read cheaply (this runs per delta)
            pos = self.pos
            size = len(self.buf)
            call = self.call
            region = self.region
            header = self.header
            phase = None
            if call is not None:
                phase = call.phase
                if phase == "params":
                    phase = _phase(call)
                progressed = self._step_call(final)
            elif header is not None:
                progressed = self._step_header(final)
            else:
                progressed = self._step_region(final)
            if not progressed:
                break
            self.steps += 1
            if self.steps > budget:
                raise self._stuck(f"took more than {budget} steps for {self.chars} characters")
            if self.pos == pos and len(self.buf) == size and self.call is call \
                    and self.region is region and self.header is header \
                    and (call is None or _phase(call) == phase):
                raise self._stuck("a step reported progress but changed nothing")
            if until is not None and not self.steps % _CLOCK_STEPS \
                    and time.perf_counter() > until:
                raise self._late()

    def _stuck(self, why: str) -> ParseError:
        run = self.call
        where = f"in a call ({run.phase})" if run is not None else f"in {self.region.kind}"
        return ParseError(
            f"dialect {self.d.id!r}: the scanner stopped making progress at character "
            f"{self.dropped + self.pos} {where}: {why}. This is a bug in toolrules: please "
            "report it with the model output that caused it.")

    # ------------------------------------------------------------ text regions

    def _emit(self, region: Region, text: str) -> None:
        kind = region.kind
        if kind == "content":
            self.sink.text("content", text)
            if self.start_ok and text.strip(_WS):
                self.start_ok = False
        elif kind == "reasoning":
            self.sink.text("reasoning", text)
        elif kind == "section":
            if region.noise:
                return
            if text.strip(_WS):
                self.sink.warn("text-inside-call-section")
            self.sink.text(region.text, text)
        elif kind == "undecided":
            self.undecided.append(text)

    def _flush_undecided(self, kind: str) -> None:
        text = "".join(self.undecided)
        self.undecided = []
        if text:
            self.sink.text(kind, text)
            if kind == "content" and text.strip(_WS):
                self.start_ok = False

    def _step_region(self, final: bool) -> bool:
        r = self.region
        buf, pos = self.buf, self.pos
        n = len(buf)
        if pos >= n:
            return False
        if r.start_calls and self.start_ok and not self.sink.has_content():
            # leading whitespace is held (consumed once) until we know if a call starts
            i = _ws_run(buf, pos).end()
            if i > pos:
                self.lead.append(buf[pos:i])
                self.pos = pos = i
            if i >= n and not final:
                return False
            at_marker = None
            if i < n:
                # A marker of the region at the start ([TOOL_CALLS], <think>) is read
                # first, and the start stays open through it: a bare call may follow the
                # reasoning. (A lenient shape's open marker gives way to the start shapes.)
                at_marker = r.exits.match(buf, i, final)
                if at_marker is None and not final and r.exits.is_prefix_at(buf, i):
                    return False
                if at_marker is not None and _yields(r.exits.actions[at_marker.group()]):
                    at_marker = None
            if i < n and at_marker is None:
                for k in range(self.start_skip, len(r.start_calls)):
                    c = r.start_calls[k]
                    if c.starts_with(buf[i]):
                        if r.kind == "undecided":
                            self._flush_undecided("content")
                            self.region = r = self.d.content
                        run = self._begin_call(c, r, anchored=True)
                        run.start_index = k
                        run.raw.extend(self.lead)
                        self.lead = []
                        return True
            if at_marker is None:
                self.start_ok = False
            if self.lead:
                lead, self.lead = "".join(self.lead), []
                self._emit(r, lead)
            if pos >= n:
                return False
        exits = r.exits
        if final:
            m = exits.regex.search(buf, pos) if exits.regex is not None else None
        else:
            m = exits.search(buf, pos, final)
        while m is not None and m.end() < n and _no_header(exits.actions[m.group()], buf,
                                                           m.end(), r):
            m = exits.search(buf, m.end(), final)  # a lenient marker no call follows: text
        if m is not None:
            start = m.start()
            if start > pos:
                self._emit(r, buf[pos:start])
            marker = m.group()
            action = exits.actions[marker]
            if not final and m.end() == n and _yields(action):
                # a lenient shape's open marker ends the text so far: held until the next
                # character shows whether a header may follow ("[1]" never starts a call)
                self.pos = start
                return False
            self.pos = m.end()
            self._act(r, action, marker)
            return True
        end = n if final else n - r.exits.holdback(buf, pos)
        if end > pos:
            self._emit(r, buf[pos:end])
            self.pos = end
        return False

    def _act(self, r: Region, action: tuple[Any, ...], marker: str) -> None:
        kind = action[0]
        if kind == "goto":
            target = action[1]
            if r.kind == "reasoning" and r.tentative and self.sink.deferred is not None \
                    and target is not r and target.text != "reasoning":
                self.sink.resolve(calls_are_text=True)  # the reasoning closed: calls were text
            if target.tentative and target.kind == "section":  # entering one, inside reasoning
                self.sink.defer()
                self.sink.marker(marker)
            elif r.tentative and r.kind == "section":  # leaving it
                self.sink.marker(marker)
            self.region = target
        elif kind == "call":
            c = action[1]
            tentative = r.tentative
            if self.pos < len(self.buf) and _no_header(action, self.buf, self.pos, r):
                # a lenient shape whose header cannot begin here ("[1]", "[[", "{x"): its
                # marker is text, as the header step would find, without a call run
                self._emit(r, marker)
                return
            if tentative:
                self.sink.defer()
            elif self.final and c.fast and self._fast_call(c, r, marker):
                return
            self._begin_call(c, r, anchored=False, marker=marker, tentative=tentative)
        elif kind == "header":
            self.header = []
            self.header_msg = action[1]
        elif kind == "resolve":  # leaving the undecided start region
            reasoning, then = action[1], action[2]
            self._flush_undecided("reasoning" if reasoning is not None else "content")
            self.region = self.d.content
            self._act(self.d.content, then, marker)
        # ("drop",): the marker simply disappears

    # ------------------------------------------------------------ message headers

    def _step_header(self, final: bool) -> bool:
        buf, pos = self.buf, self.pos
        n = len(buf)
        msg = self.header_msg
        header = self.header
        assert header is not None  # _run steps here only inside a message header
        m = msg.header_end.search(buf, pos, final)
        if m is None:
            end = n if final else n - msg.header_end.holdback(buf, pos)
            if end > pos:
                header.append(buf[pos:end])
                self.pos = end
            return False
        header.append(buf[pos:m.start()])
        self.pos = m.end()
        what = msg.header_end.actions[m.group()]
        text = "".join(header)
        self.header = None
        if what == "abort":
            self.sink.warn("message-header-without-body-dropped")
            self.region = self.d.between
            return True
        if what == "restart":
            self.sink.warn("message-header-without-body-dropped")
            self.header = []
            return True
        for route in msg.routes:
            rm = route.pattern.search(text)
            if rm is None:
                continue
            target = route.target
            if isinstance(target, Region):
                self.region = target
            else:
                run = self._begin_call(target, self.d.between, anchored=False, marker="")
                name = rm.groupdict().get("name")
                run.name = name.strip() if name else None
                if rm.groupdict().get("id"):
                    run.call_id = rm.group("id")
            return True
        self.region = self.d.between
        return True

    # ------------------------------------------------------------ calls

    def _fast_call(self, c: CallDef, ret: Region, marker: str) -> bool:
        """The whole text is at hand and the call is `open JSON close`: read it in one go.

        Only the plain success path is taken here; anything else (a repair, junk, a
        missing close marker) falls back to the general scanner, so results are the same.
        """
        buf = self.buf
        start = _ws_run(buf, self.pos).end()
        if start >= len(buf) or buf[start] not in c.payload.starts:
            return False
        try:
            value, end = _DECODER.raw_decode(buf, start)
        except (ValueError, RecursionError):
            return False
        close = c.close_table.regex
        assert close is not None  # c.fast: the call has close markers
        m = close.match(buf, _ws_run(buf, end).end())
        if m is None or too_deep(buf, start, end):
            return False
        repairs: list[str] = []
        try:
            if type(value) is dict:
                built = self._one(c.payload, None, None, value, repairs)
                if built is None:
                    return False
                calls = [built]
            elif type(value) is list and c.payload.array:
                calls = [self._one(c.payload, None, None, v, repairs) for v in value]
                if not calls or None in calls:
                    return False
            else:
                return False
        except NestingTooDeep:
            return False
        # the raw text only matters if these calls may still turn out to be text
        raw = marker + buf[self.pos:m.end()] if self.sink.deferred is not None else ""
        self.pos = m.end()
        for name, args, call_id, reps in calls:
            self.sink.call(name, args, call_id, raw, reps)
        return True

    def _begin_call(self, c: CallDef, ret: Region, anchored: bool, marker: str = "",
                    tentative: bool = False) -> _CallRun:
        run = _CallRun(c, ret, anchored, tentative)
        if marker:
            run.raw.append(marker)
        self.call = run
        return run

    def _step_call(self, final: bool) -> bool:
        run = self.call
        assert run is not None  # _run steps here only inside a call
        phase = run.phase
        if phase == "header":
            return self._step_header_call(run, final)
        if phase == "payload":
            return self._step_payload(run, final)
        if phase == "after":
            return self._step_after(run, final)
        if phase == "params":
            return self._step_params(run, final)
        if phase == "skip":
            return self._step_skip(run, final)
        if phase == "drop":
            return self._step_drop(run, final)
        return self._step_close(run, final)

    def _consume(self, run: _CallRun, end: int) -> str:
        text = self.buf[self.pos:end]
        if text:
            run.raw.append(text)
        self.pos = end
        return text

    def _skip_ws(self, run: _CallRun) -> int:
        i = _ws_run(self.buf, self.pos).end()
        if i > self.pos:
            run.raw.append(self.buf[self.pos:i])
            self.pos = i
        return i

    def _step_header_call(self, run: _CallRun, final: bool) -> bool:
        h = run.c.header
        assert h is not None
        buf, pos = self.buf, self.pos
        n = len(buf)
        if h.optional and not run.header:
            i = self._skip_ws(run)
            pos = self.pos
            if i >= n and not final:
                return False
            if i < n and buf[i] in run.c.payload.starts:
                run.phase = "payload"
                return True
        if not run.header:
            i = _ws_run(buf, pos).end()
            if i > pos:
                self._consume(run, i)
                pos = i
            if i >= n:
                return False
        # The header ends at its end marker - unless a marker of the surrounding region
        # (the next call's open marker, a section or reasoning marker) comes first: then
        # this was no call, and that marker is read again. One search finds the first of
        # either, and only up to where the header would pass _MAX_HEADER (a marker that
        # starts by `limit` ends by `window`): never a search to the end of the text per
        # header, however many unfinished headers the text holds.
        limit = pos + _MAX_HEADER - run.hlen
        table = h.ends_or_exits(run.ret.exits)
        window = limit + table.maxlen
        found = table.search(buf, pos, final, window)
        m = None  # the header's end marker
        if found is not None:
            known = found.start()
            what = table.actions[found.group()]
            if what[0] == "end":
                m = found
            elif what[0] == "break" and known <= limit:
                run.header.append(self._consume(run, known))
                run.phase = "drop"
                return True
            else:
                m = h.ends.match(buf, known, final)  # an end marker there too wins
                if m is None and known <= limit:
                    run.header.append(self._consume(run, known))
                    self._passthrough(run, "call-header-interrupted")
                    return True
        elif window < n:
            known = window  # no end marker by the limit: too long
        else:
            known = n if final else n - table.holdback(buf, pos)
        if h.foreign is not None:  # a character no header holds: this is no call
            fm = h.foreign.search(buf, pos, min(known, limit))
            if fm is not None:
                run.header.append(self._consume(run, fm.start()))
                self._malformed(run, "call-header-not-recognized")
                return True
        if m is None or known > limit:
            if known > limit:
                run.header.append(self._consume(run, limit))
                self._malformed(run, "call-header-too-long")
                return True
            if known > pos:
                run.header.append(self._consume(run, known))
                run.hlen += known - pos
            return False
        run.header.append(self._consume(run, m.start()))
        if h.ends.actions[m.group()] == "until":
            self._consume(run, m.end())
        text = "".join(run.header)
        if h.text:  # prose before the payload: content once the call is read
            run.lead = text
            run.phase = "payload"
            return True
        if h.pattern is not None:
            hm = h.pattern.search(text)
            if hm is None:
                self._malformed(run, "call-header-not-recognized")
                return True
            groups = hm.groupdict()
            if h.in_payload:
                return self._header_as_payload(run, groups.get("name"))
            name = groups.get("name")
            run.name = _unescape(name.strip(), h.unescape) if name else None
            if groups.get("id"):
                run.call_id = _unescape(groups["id"].strip(), h.unescape)
            if groups.get("self_close"):
                run.phase = "close"
                run.values = [{}]
                self._finish_call(run)
                return True
        else:
            run.name = text.strip() or None
        if not run.name:
            self._malformed(run, "call-without-name")
            return True
        run.phase = "params" if run.c.payload.kind == "params" else (
            "close" if run.c.payload.kind == "none" else "payload")
        if run.c.payload.kind == "none":
            run.values = [{}]
        return True

    def _header_as_payload(self, run: _CallRun, name: str | None) -> bool:
        """Header `in_payload`: what was read since the call began (its open marker
        included) starts the payload; the header only checked it (and its first name)."""
        if run.c.offered and name is not None and not self._offered(name):
            self._passthrough(run, "tool-not-offered")
            return True
        p = run.c.payload
        text = "".join(run.raw)
        bal = Balanced(p.spec, bracketed=not p.delimited)
        new, status = bal.scan(text, 0, False)
        if status != "more" or new != len(text):
            self._malformed(run, "payload-not-recognized")
            return True
        run.bal = bal
        run.started = True
        run.payload = [text]
        run.plen = len(text)
        run.item_end = -1
        run.phase = "payload"
        return True

    def _offered(self, name: str) -> bool:
        if name in self.tools:
            return True
        return "markdown-escapes" in self.allowed and name.replace("\\_", "_") in self.tools

    # -------------------------------------------------- json / grammar payloads

    def _step_payload(self, run: _CallRun, final: bool) -> bool:
        p = run.c.payload
        buf, n = self.buf, len(self.buf)
        if not run.started:
            i = self.pos
            if i < n and buf[i] in _WS:
                i = self._skip_ws(run)
            if i >= n:
                return False
            if p.fence and not final and n - i < 3 and "```".startswith(buf[i:]):
                return False  # maybe the start of a fence
            if p.fence and buf.startswith("```", i):
                j = buf.find("\n", i)
                if j < 0:
                    if not final and n - i < 16:
                        self.need, self.wake = i + 16, _NEWLINE  # nothing to decide before
                        return False
                    j = i + 3
                    while j < n and buf[j].isalnum():
                        j += 1
                else:
                    j += 1
                self._consume(run, j)
                i = self._skip_ws(run)
                if i >= n:
                    return False
            if buf[i] not in p.starts:
                exits = run.ret.exits  # the next call (or a section...) starts instead
                if exits.match(buf, i, final) is not None:
                    self._passthrough(run, "call-interrupted")
                    return True
                if not final and exits.is_prefix_at(buf, i):
                    return False
                self._malformed(run, "payload-not-recognized")
                return True
            if p.head is not None and buf[i] not in p.spec.brackets:
                hm = p.head.match(buf, i)
                j = i if hm is None else hm.end()
                if j == i or j - i > _MAX_HEAD:
                    self._malformed(run, "payload-not-recognized")
                    return True
                if j + 1 >= n and not final:
                    # the head may go on (an atom like \\_ is two characters): nothing is
                    # decided before the character after it, or past _MAX_HEAD; a head that
                    # runs to the end is matched again only when a character that may end
                    # it comes (a non-word one), not per delta
                    self.need = j + 2 if j < n else i + _MAX_HEAD + 2
                    self.wake = _HEAD_WAKE
                    return False
                head = self._consume(run, j)
                run.payload.append(head)
                run.plen += len(head)
            run.started = True
            run.bal = Balanced(p.spec, bracketed=not p.delimited)
            run.item_end = -1
            if final and p.kind == "json":  # whole text at hand: let the C decoder find the end
                try:
                    value, end = _DECODER.raw_decode(buf, i)
                except (ValueError, RecursionError):
                    pass
                else:
                    if isinstance(value, (dict, list)) and not too_deep(buf, i, end):
                        self._consume(run, end)
                        run.values.append(value)
                        run.mark = len(run.raw)
                        run.started = False
                        run.bal = None
                        run.phase = "after"
                        return True
        pos = self.pos
        bal = run.bal
        assert bal is not None  # set when the payload started
        bal.item_end = -1
        new, status = bal.scan(buf, pos, final)
        if bal.item_end >= 0:  # where the last complete element of an array ended
            run.item_end = run.plen + bal.item_end - pos
        if new > pos:
            self.pos = new
            self._took(run, buf[pos:new])
        if status == "more":
            return False
        if status == "bad":
            self._malformed(run, "payload-not-recognized")
            return True
        if status == "deep":
            self._malformed(run, _TOO_DEEP)
            return True
        return self._payload_done(run, at_marker=(status == "stop"))

    def _payload_done(self, run: _CallRun, at_marker: bool) -> bool:
        p = run.c.payload
        text = "".join(run.payload)
        run.payload = []
        run.plen = 0
        if p.kind == "grammar":
            from ._grammars import parse_payload

            try:
                value = parse_payload(self.d, cast(str, p.grammar), text, p.json_values)
            except NestingTooDeep:
                self._malformed(run, _TOO_DEEP)
                return True
            except ValueError:
                self._malformed(run, "payload-grammar-mismatch")
                return True
        else:
            try:
                value, used = repair_json(text, self.allowed, at_end_marker=at_marker)
            except NestingTooDeep:
                self._malformed(run, _TOO_DEEP)
                return True
            except RepairFailed:
                self._malformed(run, "payload-not-json")
                return True
            run.repairs.extend(used)
        run.values.append(value)
        run.mark = len(run.raw)
        run.bal = None
        run.started = False
        run.phase = "after"
        return True

    def _step_after(self, run: _CallRun, final: bool) -> bool:
        """After a payload value: another value after a separator, a suffix, then close.

        Whitespace is only consumed here when something may follow it (a separator or a
        suffix): streaming waits to see what comes, so both modes agree on who owns it.
        """
        p = run.c.payload
        if not (p.separator or p.line_separated or p.suffix or p.fence):
            run.phase = "close"
            return True
        buf, n = self.buf, len(self.buf)
        start = self.pos
        i = self._skip_ws(run)
        if i > start and "\n" in buf[start:i]:
            run.newline = True
        if i >= n and not final:
            return False
        rest = buf[i:i + 16]
        for sep in p.separator:
            if buf.startswith(sep, i):
                self._consume(run, i + len(sep))
                run.newline = False
                run.phase = "payload"
                return True
            if not final and len(rest) < len(sep) and sep.startswith(rest):
                return False
        for lit in ([p.suffix] if p.suffix else []) + (["```"] if p.fence else []):
            if buf.startswith(lit, i):
                self._consume(run, i + len(lit))
                run.phase = "close"
                return True
            if not final and len(rest) < len(lit) and lit.startswith(rest):
                return False
        if p.line_separated and run.newline and i < n and buf[i] in p.starts:
            run.newline = False
            run.phase = "payload"  # the next value on a new line
            return True
        run.phase = "close"
        return True

    def _give_back(self, text: str) -> None:
        """Make `text` (just consumed) the next thing read. It usually still stands right
        before `pos`: stepping back is free, where copying the rest of a whole-text
        buffer on every give-back would make many of them quadratic."""
        k = len(text)
        if k <= self.pos and self.buf.startswith(text, self.pos - k):
            self.pos -= k
        else:
            self.buf = text + self.buf[self.pos:]
            self.pos = 0

    def _rewind(self, run: _CallRun) -> bool:
        """Payload `rest: text`: what follows the last complete value is not a value. Give
        it back to the scanner as text; the complete values are the calls."""
        if not run.c.payload.rest_text or run.mark < 0 or not run.values or run.c.close:
            return False
        tail = "".join(run.raw[run.mark:])
        del run.raw[run.mark:]
        self._give_back(tail)
        run.payload = []
        run.plen = 0
        run.bal = None
        run.started = False
        run.newline = False
        run.phase = "close"
        return True

    # -------------------------------------------------- closing a call

    def _step_close(self, run: _CallRun, final: bool) -> bool:
        c = run.c
        buf, n = self.buf, len(self.buf)
        i = self._skip_ws(run) if c.close else self.pos
        if not c.close:
            self._finish_call(run)
            return True
        if i >= n:
            return False
        m = c.close_table.match(buf, i, final)
        if m is not None:
            self._consume(run, m.end())
            self._finish_call(run)
            return True
        if not final and c.close_table.is_prefix_at(buf, i):
            return False
        # not our close marker: fine if a marker of the region we return to follows
        # (the close was omitted, e.g. the next call starts), otherwise malformed
        exits = run.ret.exits
        if exits.match(buf, i, final) is not None:
            self._finish_call(run)
            return True
        if not final and exits.is_prefix_at(buf, i):
            return False
        run.phase = "skip"
        return True

    def _step_skip(self, run: _CallRun, final: bool) -> bool:
        """Malformed call: consume through its close marker, then give it back as text."""
        buf = self.buf
        m = run.c.close_table.search(buf, self.pos, final)
        if m is None:
            end = len(buf) if final else len(buf) - run.c.close_table.holdback(buf, self.pos)
            self._consume(run, end)
            return False
        self._consume(run, m.end())
        if run.c.payload.search and self._search_lists(run):
            return True
        self._passthrough(run, "call-malformed")
        return True

    def _step_drop(self, run: _CallRun, final: bool) -> bool:
        """A call whose header broke off (header `breaks`): markup that is no call. It is
        dropped through its close marker, or up to the next call's open marker."""
        buf = self.buf
        table = run.c.drop_until
        m = table.search(buf, self.pos, final)
        if m is None:
            end = len(buf) if final else len(buf) - table.holdback(buf, self.pos)
            self._consume(run, end)
            return False
        self._consume(run, m.end() if table.actions[m.group()] == "close" else m.start())
        self.call = None
        self.region = run.ret
        self.sink.warn("call-header-unterminated-dropped")
        return True

    def _call_eof(self, finish_reason: str | None) -> None:
        run = self.call
        assert run is not None
        if run.phase in ("after", "close") and run.values:
            self._finish_call(run)
            return
        if finish_reason != "length" and self._mend(run):
            return
        if self._rewind(run):  # the unfinished tail is text, not a cut-off call
            return
        # a call at the start whose payload had not begun may have been plain text
        unbegun = run.anchored and not run.values and (run.phase == "header" or (
            run.phase == "payload" and (run.bal is None or not run.bal.started)))
        if finish_reason == "length" and not unbegun:
            # cut off: never a half call, but complete calls before the cut are kept
            self.call = None
            self.region = run.ret
            kept = list(run.values)
            if run.phase == "payload" and run.item_end > 0:
                head = "".join(run.payload)[:run.item_end].lstrip()
                if head.startswith("["):
                    try:
                        value, _ = repair_json(head + "]", self.allowed)
                    except RepairFailed:
                        value = None
                    if isinstance(value, list) and value:
                        kept.append(value)
            if run.lead:
                self.sink.text(run.ret.text, run.lead)
            if kept:
                run.values = kept
                try:
                    built = self._build(run) or ()
                except NestingTooDeep:
                    built = ()
                for name, args, call_id, repairs in built:
                    self.sink.call(name, args, call_id, "".join(run.raw), repairs)
            self.sink.warn("truncated-call-dropped")
            return
        self._passthrough(run, "incomplete-call")

    def _mend(self, run: _CallRun) -> bool:
        """Repairs `missing-final-bracket` / `unbalanced-quotes`: a Python call list the
        model finished without its closing bracket, or with a quote around a call never
        closed, read at the end of the output (never when it was cut off) - only when every
        call in it names an offered tool. A JSON call list whose every element is complete
        reads the same way (`[{...}, {...}` at the end)."""
        p = run.c.payload
        brackets = "missing-final-bracket" in self.allowed
        quotes = "unbalanced-quotes" in self.allowed
        if run.phase != "payload" or not (brackets or quotes) \
                or run.bal is None or not run.bal.started:
            return False
        if p.kind == "json":
            return brackets and self._mend_json_list(run)
        if p.kind != "grammar":
            return False
        text = "".join(run.payload)
        got = mend_call_list(text, brackets, quotes)
        if got is None:
            return False
        mended, end, used = got
        if too_deep(mended):
            return False
        from ._grammars import parse_payload

        try:
            value = parse_payload(self.d, cast(str, p.grammar), mended, p.json_values)
        except ValueError:  # NestingTooDeep included
            return False
        if end < len(text):
            self._unconsume(run, text[end:])  # what follows the list is read again: text
        run.payload = []
        run.plen = 0
        run.bal = None
        run.started = False
        run.values.append(value)
        run.repairs.extend(used)
        run.lenient = True
        self._finish_call(run)
        return True

    def _mend_json_list(self, run: _CallRun) -> bool:
        """Repair `missing-final-bracket` on a JSON array: only blanks (or a comma) follow
        its last complete element, so the list lacks nothing but its `]`."""
        if run.item_end <= 0:
            return False
        text = "".join(run.payload)
        head = text[:run.item_end]
        if text[run.item_end:].strip(_WS + ",") or not head.lstrip(_WS).startswith("["):
            return False
        try:
            value, used = repair_json(head + "]", self.allowed)
        except (RepairFailed, NestingTooDeep):
            return False
        if not isinstance(value, list) or not value:
            return False
        run.payload = []
        run.plen = 0
        run.bal = None
        run.started = False
        run.values.append(value)
        run.repairs.extend([*used, "missing-final-bracket"])
        run.lenient = True
        self._finish_call(run)
        return True

    def _search_lists(self, run: _CallRun) -> bool:
        """Payload `search: offered`: a block of code that is no call list may hold one
        (`return [calc(radius=5)]`): call lists inside it whose calls all name offered
        tools are its calls; the rest of the block was the model's wrapping code."""
        text = "".join(run.raw)
        spans: dict[int, int] | None = None
        values: list[Any] = []
        after = tries = 0
        from ._grammars import parse_payload

        for m in _LIST_START.finditer(text):
            i = m.start()
            if i < after or not self._offered(m.group(1)):
                continue
            if spans is None:
                spans = list_spans(text)
            j = spans.get(i)
            tries += 1
            if j is None or tries > 64:
                continue
            segment = text[i:j]
            if too_deep(segment):
                continue
            try:
                value = parse_payload(self.d, cast(str, run.c.payload.grammar), segment,
                                      run.c.payload.json_values)
            except ValueError:
                continue
            if isinstance(value, list) and value:
                values.append(value)
                after = j
        if not values:
            return False
        run.values = values
        run.repairs = []  # (the block's own failure to read as calls is no repair)
        run.lenient = True
        self._finish_call(run)
        return True

    def _next_start(self, run: _CallRun) -> bool:
        """A call at the start of the content that does not fit gives way to the next start
        shape that may begin with its text: the text is read again (each shape once)."""
        shapes = run.ret.start_calls
        k = run.start_index + 1
        if k <= 0 or k >= len(shapes):
            return False
        text = "".join(run.raw)
        first = text.lstrip(_WS)[:1] or self.buf[self.pos:self.pos + 1]  # nothing read yet
        if not first or not any(c.starts_with(first) for c in shapes[k:]):
            return False
        self._give_back(text)
        self.call = None
        self.region = run.ret
        self.start_skip = k
        return True

    def _malformed(self, run: _CallRun, why: str) -> None:
        if why == _TOO_DEEP:
            run.deep = True
        if self._rewind(run):
            return
        # A call that does not fit is skipped through its close marker and given back as
        # text - except inside reasoning, where an open marker is often just mentioned
        # ("I could use <tool_call> here"): skipping would swallow the reasoning's own close
        # marker, so the text goes back at once and the reasoning reads on.
        if run.c.close and not run.anchored and run.phase != "skip" \
                and run.ret.kind != "reasoning":  # (a section opened in reasoning is no mention)
            run.phase = "skip"
            run.repairs.append(why)
            return
        self._passthrough(run, why)

    def _passthrough(self, run: _CallRun, why: str) -> None:
        """Give a call that is not a call back as text, verbatim, where it stood."""
        if run.anchored:
            if self._next_start(run):
                return
            # no start shape fits the text at the start: it is text (trying the same
            # shapes again on the same characters would never end)
            self.start_ok = False
        self.call = None
        self.region = run.ret
        raw = "".join(run.raw)
        kind = run.ret.text
        self.sink.text(kind, raw)
        if kind == "content" and raw.strip(_WS):
            self.start_ok = False
        if run.deep or why == _TOO_DEEP:  # said even at the start: it is hostile, not prose
            self.sink.warn(f"{_TOO_DEEP}-kept-as-text")
        elif not run.anchored and (kind == "content" or run.ret.kind == "section") \
                and not run.c.offered:
            # (in reasoning: a mention, nothing lost - unless it stood in a call section
            # opened there; a lenient shape: ordinary text)
            self.sink.warn(f"{why}-kept-as-text")

    # -------------------------------------------------- tagged parameters

    def _step_params(self, run: _CallRun, final: bool) -> bool:
        pd = run.c.payload.param
        assert pd is not None  # a params payload has its param spec (lint checks it)
        buf, n = self.buf, len(self.buf)
        if run.key is None and not run.value_end:
            # between parameters: a parameter, the call's close, or the suffix
            i = self._skip_ws(run)
            if i >= n:
                return False
            if run.c.payload.json and not run.params and not run.values \
                    and buf[i] in run.c.payload.starts:
                run.phase = "payload"
                return True
            rest = buf[i:i + 64]
            suffix = run.c.payload.suffix or ""
            if not final and ((len(rest) < len(suffix) and suffix.startswith(rest)) or
                              run.c.close_table.is_prefix(rest)):
                return False  # could still become the suffix or the close marker
            if suffix and buf.startswith(suffix, i):
                self._consume(run, i + len(suffix))
                return True
            m = run.c.close_table.match(buf, i, final)
            if m is not None:
                self._consume(run, m.end())
                self._finish_call(run)
                return True
            for m_open in pd.open:
                if buf.startswith(m_open, i):
                    self._consume(run, i + len(m_open))
                    run.key = ""
                    run.header = []
                    run.hlen = 0
                    return True
            if not final and (any(_starts(o, buf, i) for o in pd.open) or
                              run.c.close_table.is_prefix_at(buf, i) or
                              _starts(run.c.payload.suffix or "\0", buf, i)):
                return False
            self._malformed(run, "params-unexpected-text")
            return True
        if run.value_end is None:
            # reading the key part up to key_until, then an optional value-open marker
            if run.key == "":
                pos = self.pos
                limit = pos + _MAX_HEADER - run.hlen  # the same bound as a call header
                window = limit + pd.key_until.maxlen
                m = pd.key_until.search(buf, pos, final, window)
                if m is not None:
                    known = m.start()
                elif window < n:
                    known = window  # no end of the key by the limit: too long
                else:
                    known = n if final else n - pd.key_until.holdback(buf, pos)
                if m is None or known > limit:
                    if known > limit:
                        run.header.append(self._consume(run, limit))
                        self._malformed(run, "param-key-too-long")
                        return True
                    run.header.append(self._consume(run, known))
                    run.hlen += known - pos
                    return False
                run.header.append(self._consume(run, m.start()))
                self._consume(run, m.end())
                key_text = "".join(run.header)
                run.header = []
                if pd.key_pattern is not None:
                    km = pd.key_pattern.search(key_text)
                    if km is None:
                        self._malformed(run, "param-key-not-recognized")
                        return True
                    key = km.group("key")
                    run.key_type = km.groupdict().get("type")
                else:
                    key = key_text.strip()
                    run.key_type = None
                run.key = _unescape(key, pd.unescape) if key else key
                if not run.key:
                    self._malformed(run, "param-without-key")
                    return True
            if pd.value_open:
                i = self._skip_ws(run)
                if i >= n:
                    return False
                for vo in pd.value_open:
                    if buf.startswith(vo, i):
                        self._consume(run, i + len(vo))
                        break
                else:
                    if not final and any(_starts(vo, buf, i) for vo in pd.value_open):
                        return False
                    self._malformed(run, "param-value-missing")
                    return True
            run.value = []
            run.value_end = pd.value_end(cast(str, run.key), run.c.close)
            return True
        return self._step_value(run, pd, final)

    def _step_value(self, run: _CallRun, pd: Any, final: bool) -> bool:
        buf, pos, n = self.buf, self.pos, len(self.buf)
        if run.confirming is not None:
            # a close tag was seen; it only counts if a structural tag follows it
            i = _ws_run(buf, pos).end()
            if i > pos:
                run.confirming.append(self._consume(run, i))
            if i >= n and not final:
                return False
            confirm = pd.confirm_end if run.ending >= 0 else pd.confirm
            if i < n and confirm.match(buf, i, final) is None:
                if not final and confirm.is_prefix_at(buf, i):
                    return False
                run.value.extend(run.confirming)  # it was text inside the value
                run.confirming = None
                run.ending = -1
                return True
            pending, run.confirming = run.confirming, None
            if run.ending >= 0:  # the call's close marker: read again, after this value
                self._unconsume(run, "".join(pending[run.ending:]))
                run.ending = -1
            return self._end_value(run, pd)
        table = run.value_end
        assert table is not None  # set when the value opened
        m = table.search(buf, pos, final)
        if m is None:
            end = n if final else n - table.holdback(buf, pos)
            frag = self._consume(run, end)
            run.value.append(frag)
            self.sink.progress(run.name, frag)
            return False
        what = table.actions[m.group()]
        run.value.append(self._consume(run, m.start()))
        if what == "close" and pd.confirm:
            run.confirming = [self._consume(run, m.end())]
            return True
        if what == "end" and pd.confirm_end:
            run.confirming = [self._consume(run, m.end())]
            run.ending = 0
            return True
        if what == "close":
            self._consume(run, m.end())
        return self._end_value(run, pd)

    def _unconsume(self, run: _CallRun, text: str) -> None:
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
        self._give_back(text)

    def _end_value(self, run: _CallRun, pd: Any) -> bool:
        value = "".join(run.value)
        if pd.trim == "newline":
            if value.startswith("\n"):
                value = value[1:]
            if value.endswith("\n"):
                value = value[:-1]
        elif pd.trim == "strip":
            value = value.strip()
        run.params.append((cast(str, run.key), run.key_type, value))
        run.key = None
        run.key_type = None
        run.value = []
        run.value_end = None
        return True

    # -------------------------------------------------- building the calls

    def _finish_call(self, run: _CallRun) -> None:
        self.call = None
        self.region = run.ret
        try:
            calls = self._build(run)
        except NestingTooDeep:
            self._passthrough(run, _TOO_DEEP)
            return
        if calls is None:
            self._passthrough(run, "payload-not-a-call")
            return
        if (run.c.offered or run.lenient) and not all(self._offered(c[0]) for c in calls):
            self._passthrough(run, "tool-not-offered")  # a lenient reading names known tools
            return
        if self.d.repeats:
            key = _KEY_JSON([(c[0], c[1]) for c in calls])
            if key in self.lists:  # the model restating calls it already made
                self._passthrough(run, "repeated-calls")
                self.sink.warn("repeated-calls-kept-as-text")
                return
            if self.d.first_list and self.lists:  # rambling on after its calls
                self._passthrough(run, "further-calls")
                self.sink.warn("further-calls-kept-as-text")
                return
            self.lists.add(key)
        raw = "".join(run.raw)
        if run.lead:
            self.sink.text(run.ret.text, run.lead)
        for name, args, call_id, repairs in calls:
            self.sink.call(name, args, call_id, raw, repairs)
        if run.anchored:
            self.start_ok = False

    def _build(self, run: _CallRun) -> list[tuple[str, dict[str, Any], str | None, list[str]]] | None:
        p = run.c.payload
        repairs = list(run.repairs)
        if p.kind == "params" and not run.values:
            schema = _properties(self.tools.get(cast(str, run.name)))
            types = cast(ParamDef, p.param).types
            args: dict[str, Any] = {}
            for key, declared_attr, raw in run.params:
                declared = types.get(declared_attr) if declared_attr is not None else None
                if declared_attr is not None and declared is None and types:
                    declared = "json"
                args[key] = read_value(raw, schema.get(key), declared)
            if "arguments-parameter" in self.allowed and len(args) == 1:
                args = self._wrapped_parameter(cast(str, run.name), args, repairs)
            return self._escapes([(run.name, args, run.call_id, repairs)])
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
                built = self._one(p, run.name, run.call_id, item, repairs)
                if built is None:
                    return None
                out.append(built)
        return self._escapes(out) if out else None

    def _escapes(self, calls: list[Any]) -> list[Any]:
        """Repair `markdown-escapes`: a name or argument key written `solve\\_quadratic`
        (Markdown escaping) reads `solve_quadratic`."""
        if "markdown-escapes" not in self.allowed:
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

    def _one(self, p: Any, header_name: str | None, header_id: str | None, item: Any,
             repairs: list[str]) -> Any:
        if isinstance(item, tuple):  # from a grammar: (name, arguments)
            name, args = item
            return (name, args, None, repairs) if isinstance(args, dict) else None
        if header_name is not None:  # the header named the tool: the value is the arguments
            if not isinstance(item, dict):
                return None
            return (header_name, self._unwrap(item, header_name, repairs), header_id, repairs)
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
                if _KEY_REPAIRS[alt] in self.allowed and alt in item:
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
                if _KEY_REPAIRS[alt] in self.allowed and alt in item:
                    args = item[alt]
                    repairs.append(_KEY_REPAIRS[alt])
                    break
        if args is _MISSING or args is None or args == "":
            args = {}
        if isinstance(args, str):
            if "arguments-json-string" not in self.allowed:
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
        return (name, self._unwrap(args, name, repairs),
                call_id if isinstance(call_id, str) else None, repairs)

    def _wrapped_parameter(self, name: str, args: dict[str, Any],
                           repairs: list[str]) -> dict[str, Any]:
        """Repair `arguments-parameter`: a call of an offered tool whose only parameter is
        `arguments` or `input`, holding an object (or its JSON text), when the tool's schema
        has no such parameter: the object is the real arguments."""
        (key, value), = args.items()
        tool = self.tools.get(name)
        if key not in _WRAPPER_KEYS or name not in self.tools or key in _properties(tool):
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

    def _unwrap(self, args: dict[str, Any], name: str, repairs: list[str]) -> dict[str, Any]:
        if "double-wrapped-arguments" in self.allowed and len(args) == 1 \
                and isinstance(args.get("arguments"), dict) \
                and "arguments" not in _properties(self.tools.get(name)):
            repairs.append("double-wrapped-arguments")
            return args["arguments"]
        return args


_MISSING = object()
# a call list inside a block of code: [name( or ['name(
_LIST_START = re.compile(r"""\[\s*['"]?(""" + CALL_NAME + r""")\s*\(""")


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
_WRAPPER_KEYS = ("arguments", "input")


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


# Lanes (Machine.feed) remember their decisions on held-back texts up to this long: a
# decision depends on the text and the compiled dialect only, and the same few texts (a
# marker's prefixes, `[[`) come back again and again.
_MEMO_CHARS = 64
_MEMO_SIZE = 4096


def _remember(memo: dict[str, int], s: str, end: int) -> int:
    if len(s) <= _MEMO_CHARS and len(memo) < _MEMO_SIZE:
        memo[s] = end
    return end


def _region_read(r: Region, s: str) -> int:
    """How much of `s` _step_region, streaming, emits as text before waiting (the rest is
    held back: a possible marker, or a lenient shape's open marker that ends the text so
    far); -1 when a marker in it acts (the machine's step). The same loop as the step."""
    exits = r.exits
    n = len(s)
    m = exits.search(s, 0, False)
    while m is not None and m.end() < n and _no_header(exits.actions[m.group()], s,
                                                       m.end(), r):
        m = exits.search(s, m.end(), False)
    if m is None:
        end = n - exits.holdback(s, 0)
    elif m.end() == n and _yields(exits.actions[m.group()]):
        end = m.start()
    else:
        end = -1
    return _remember(r.memo, s, end)


def _table_read(table: MarkerTable, s: str) -> int:
    """How much of `s` a step reading up to one of `table`'s markers takes before waiting
    (_step_value, _step_skip, _step_drop); -1 when a marker in it decides."""
    end = -1 if table.search(s, 0, False) is not None else len(s) - table.holdback(s, 0)
    return _remember(table.memo, s, end)


def _header_read(hl: HeaderLane, s: str) -> int:
    """How much of `s` _step_header_call takes as header text before waiting; -1 when a
    marker ends or interrupts the header, or a character no header holds comes."""
    table = hl.table
    if table.search(s, 0, False) is not None:
        end = -1
    else:
        end = len(s) - table.holdback(s, 0)
        if hl.foreign is not None and hl.foreign.search(s, 0, end) is not None:
            end = -1
    return _remember(hl.memo, s, end)


def _no_header(action: tuple[Any, ...], buf: str, i: int, r: Region) -> bool:
    """Whether the marker before `buf[i]` opens a lenient call shape whose header cannot
    begin with that character: then the marker is text (what the header step finds)."""
    if action[0] != "call" or not action[1].offered or r.tentative:
        return False
    h = action[1].header
    return h is not None and h.foreign is not None and buf[i] not in _WS \
        and h.foreign.match(buf, i) is not None


def _yields(action: tuple[Any, ...]) -> bool:
    """Whether a marker gives way to the start shapes: a lenient call's open marker."""
    return action[0] == "call" and action[1].offered


def _phase(run: _CallRun) -> Any:
    """A call's phase as a progressing step must change it (with the text position)."""
    if run.phase == "params":  # a parameter's own steps: key, value, confirmation
        return (run.key, run.value_end, run.confirming, len(run.params))
    return run.phase


def _starts(literal: str, buf: str, i: int) -> bool:
    """literal.startswith(buf[i:]) without copying a long rest of the buffer."""
    return len(buf) - i <= len(literal) and literal.startswith(buf[i:i + len(literal)])


def _unescape(text: str, how: str | None) -> str:
    return html.unescape(text) if how == "xml" else text
