"""The incremental scanner: one pass over model output, driven by a compiled Dialect.

`Machine.feed(delta)` appends to a buffer and advances through it; every step consumes
text, so nothing is scanned twice except a held-back tail that could still become a
marker (bounded by the longest marker). `Machine.close(finish_reason)` handles the end:
an unfinished call is dropped when the output was cut off (`length`) and otherwise given
back as text. Events go to a `Sink`, which either builds stream chunks or collects the
pieces of a ParsedResponse - the same events either way, so a stream split any way gives
what parse() gives.

This module is the driver: the step loop (with its progress check and step budget),
the streaming lanes of `feed`, the generation prompt, and the end of the output. Each
step belongs to a phase, in a module of its own, working on the machine's `State`:

    _text      regions and the markers between them      _payload   JSON / grammar values
    _header    message headers and call headers          _params    tagged parameters
    _closing   close markers, skipped calls, the end     _outcome   calls, or text given back
    _build     calls from values, typed and repaired     _sink      events -> chunks / result
"""

from __future__ import annotations

import time
from typing import Any, cast

from .._errors import ParseError, ParseTimeoutError
from .._types import StreamChunk, StreamChunkType
from ._closing import call_eof, step_close, step_drop, step_skip
from ._header import header_read, step_call_header, step_message_header
from ._params import step_params
from ._payload import payload_lane, step_after, step_payload
from ._sink import Sink, next_call_id
from ._state import (
    MAX_HEADER,
    MEMO_CHARS,
    PROBE_CHARS,
    WS,
    CallRun,
    State,
    phase_of,
    table_read,
)
from ._text import emit, flush_undecided, region_read, step_region

__all__ = ["Machine", "Sink", "next_call_id"]

# Every step of the machine that reports progress must consume text, change phase, region
# or call, or end a call (_loop checks each one). Backing that up, the steps of one output
# are bounded by _STEPS_BASE + _STEPS_PER_CHAR x the characters it was given (re-reading
# given-back text included: each start shape reads the text at most once more). A
# machine that breaks either rule has a bug: it raises a ParseError naming the dialect
# and the position instead of spinning.
_STEPS_PER_CHAR = 16
_STEPS_BASE = 1024
_CLOCK_STEPS = 64  # under a parse deadline, the clock is read every this many steps

# what feed() may read without stepping the machine (Machine.lane)
_REGION, _PAYLOAD, _VALUE, _HEADER, _RAW, _HOLD = range(6)
_PROGRESS = StreamChunkType.TOOL_PROGRESS


class Machine(State):
    """Runs one dialect over one output (and, first, over the generation prompt).

    The machine is its State plus the driving: each step is a phase's function over
    that state, called from `_loop` (or taken inline by `feed`'s lanes, per delta).
    """

    __slots__ = ()

    # the steps outside a call, as methods (a test stands a broken step in here)
    _step_region = step_region
    _step_header = step_message_header

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
            self.unnested = False  # (the output's own text decides)
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
            self.call = CallRun(c, ret, False, tentative)
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
        # The lanes stay inline here, not a function each: this runs once per delta.
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
                    if bal.after and not delta.isspace():
                        bal.after = False  # (something stands after the closed value)
                    n = len(delta)
                    self.chars += n
                    self.dropped += n
                    run.raw.append(delta)
                    run.payload.append(delta)
                    run.plen += n
                    if run.probe < PROBE_CHARS and run.name is None:
                        run.probe += n
                    sink = self.sink
                    if sink.streaming and not sink.muted and n:
                        sink.out.append(StreamChunk(_PROGRESS, None, len(sink.calls), None,
                                                    run.name or run.progress_name, delta))
                    return
                if payload_lane(self, run, bal, delta):
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
                        end = r.memo.get(s, -2) if len(s) <= MEMO_CHARS else -2
                        if end == -2:
                            end = region_read(r, s)
                    if end >= 0:
                        self.chars += len(delta)
                        self.dropped += end
                        if end == len(s):
                            self.buf = ""
                            emit(self, r, s)
                        else:
                            self.buf = s[end:]
                            if end:
                                emit(self, r, s[:end])
                        return
                elif kind == _HEADER:
                    run = lane[1]
                    hl = lane[2]
                    n = len(s)
                    if run.hlen + n <= MAX_HEADER and (run.header or not (
                            s[0] in WS or (lane[3] and s[0] in run.c.payload.starts))):
                        if hl.notable.search(s) is None:
                            end = n
                        else:
                            end = hl.memo.get(s, -2) if n <= MEMO_CHARS else -2
                            if end == -2:
                                end = header_read(hl, s)
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
                        end = table.memo.get(s, -2) if n <= MEMO_CHARS else -2
                        if end == -2:
                            end = table_read(table, s)
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
                return (_HOLD, run, run.ret.exits.prefixes, p.starts + WS)
            return None
        if phase == "close":
            if run.c.close:  # a held tail that may be the close marker
                return (_HOLD, run, run.c.close_table.prefixes, WS)
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

    def close(self, finish_reason: str | None) -> None:
        self._run(final=True)
        while self.call is not None:
            call_eof(self, finish_reason)
            self._run(final=True)  # text a call gave back is read again
        if self.lead:  # whitespace held while waiting for a possible call at the start
            lead, self.lead = "".join(self.lead), []
            emit(self, self.region, lead)
        if self.header is not None:
            self.sink.warn("incomplete-message-header-dropped")
            self.header = None
        if self.region.kind == "undecided":  # no close marker came: the reply
            cut = finish_reason == "length" and self.d.undecided_cut == "reasoning"
            flush_undecided(self, "reasoning" if cut else "content")
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
            took = time.perf_counter() - started
            self.spent += took
            if self.clock is not None:
                self.clock.seconds += took
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
                    phase = phase_of(call)
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
                    and (call is None or phase_of(call) == phase):
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

    def _step_call(self, final: bool) -> bool:
        run = self.call
        assert run is not None  # _run steps here only inside a call
        phase = run.phase
        if phase == "header":
            return step_call_header(self, run, final)
        if phase == "payload":
            return step_payload(self, run, final)
        if phase == "after":
            return step_after(self, run, final)
        if phase == "params":
            return step_params(self, run, final)
        if phase == "skip":
            return step_skip(self, run, final)
        if phase == "drop":
            return step_drop(self, run, final)
        return step_close(self, run, final)
