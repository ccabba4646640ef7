"""Payloads: a JSON or grammar value (or several) read with a string-aware scan.

`step_payload` finds where a payload starts (past blanks, a code fence, a function
name before its bracket), then scans it with `Balanced` - markers inside JSON strings
are data - and `payload_done` decodes it (JSON with the allowed repairs, or the
dialect's grammar). `step_after` reads what may follow a value: a separator and another
value, a suffix, a closing fence. `payload_lane` and `took` are the streaming path for a
value that goes on; `fast_call` reads a whole `open JSON close` call at once when the
whole text is at hand.
"""

from __future__ import annotations

import json
import re
from typing import cast

from ._build import one
from ._compile import CallDef, Region
from ._jsonscan import Balanced, NestingTooDeep, RepairFailed, repair_json, too_deep
from ._outcome import malformed, passthrough
from ._state import BROKEN, NEWLINE, PROBE_CHARS, TOO_DEEP, WS, CallRun, State, ws_run

__all__ = ["fast_call", "payload_lane", "step_after", "step_payload"]

_DECODER = json.JSONDecoder()
_MAX_HEAD = 256  # payload `head` (a function name before its bracket)
# a payload head (a function name) waits for a character that may end it: a non-word one
_HEAD_WAKE = re.compile(r"\W")
_NAME_PROBE = re.compile(r'"([A-Za-z_]+)"\s*:\s*"([^"\\]{1,128})"')


def fast_call(st: State, c: CallDef, ret: Region, marker: str) -> bool:
    """The whole text is at hand and the call is `open JSON close`: read it in one go.

    Only the plain success path is taken here; anything else (a repair, junk, a
    missing close marker) falls back to the general scanner, so results are the same.
    """
    buf = st.buf
    start = ws_run(buf, st.pos).end()
    if start >= len(buf) or buf[start] not in c.payload.starts:
        return False
    try:
        value, end = _DECODER.raw_decode(buf, start)
    except (ValueError, RecursionError):
        return False
    close = c.close_table.regex
    assert close is not None  # c.fast: the call has close markers
    m = close.match(buf, ws_run(buf, end).end())
    if m is None or too_deep(buf, start, end):
        return False
    repairs: list[str] = []
    try:
        if type(value) is dict:
            built = one(st, c.payload, None, None, value, repairs)
            if built is None:
                return False
            calls = [built]
        elif type(value) is list and c.payload.array:
            calls = [one(st, c.payload, None, None, v, repairs) for v in value]
            if not calls or None in calls:
                return False
        else:
            return False
    except NestingTooDeep:
        return False
    # the raw text only matters if these calls may still turn out to be text
    raw = marker + buf[st.pos:m.end()] if st.sink.deferred is not None else ""
    st.pos = m.end()
    for name, args, call_id, reps in calls:
        st.sink.call(name, args, call_id, raw, reps)
    return True


def step_payload(st: State, run: CallRun, final: bool) -> bool:
    p = run.c.payload
    buf, n = st.buf, len(st.buf)
    if not run.started:
        i = st.pos
        if i < n and buf[i] in WS:
            i = st.skip_ws(run)
        if i >= n:
            return False
        if p.fence and not final and n - i < 3 and "```".startswith(buf[i:]):
            return False  # maybe the start of a fence
        if p.fence and buf.startswith("```", i):
            j = buf.find("\n", i)
            if j < 0:
                if not final and n - i < 16:
                    st.need, st.wake = i + 16, NEWLINE  # nothing to decide before
                    return False
                j = i + 3
                while j < n and buf[j].isalnum():
                    j += 1
            else:
                j += 1
            st.consume(run, j)
            i = st.skip_ws(run)
            if i >= n:
                return False
        if buf[i] not in p.starts:
            exits = run.ret.exits  # the next call (or a section...) starts instead
            if exits.match(buf, i, final) is not None:
                passthrough(st, run, "call-interrupted")
                return True
            if not final and exits.is_prefix_at(buf, i):
                return False
            malformed(st, run, "payload-not-recognized")
            return True
        if p.head is not None and buf[i] not in p.spec.brackets:
            hm = p.head.match(buf, i)
            j = i if hm is None else hm.end()
            if j == i or j - i > _MAX_HEAD:
                malformed(st, run, "payload-not-recognized")
                return True
            if j + 1 >= n and not final:
                # the head may go on (an atom like \\_ is two characters): nothing is
                # decided before the character after it, or past _MAX_HEAD; a head that
                # runs to the end is matched again only when a character that may end
                # it comes (a non-word one), not per delta
                st.need = j + 2 if j < n else i + _MAX_HEAD + 2
                st.wake = _HEAD_WAKE
                return False
            head = st.consume(run, j)
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
                    st.consume(run, end)
                    run.took_value(value)
                    return True
    pos = st.pos
    bal = run.bal
    assert bal is not None  # set when the payload started
    bal.item_end = -1
    new, status = bal.scan(buf, pos, final)
    if bal.item_end >= 0:  # where the last complete element of an array ended
        run.item_end = run.plen + bal.item_end - pos
    if new > pos:
        st.pos = new
        _took(st, run, buf[pos:new])
    if status == "more":
        return False
    if status == "bad":
        # (a value broken by the next one right after it, `adjacent`: read again there)
        malformed(st, run, BROKEN if bal.started else "payload-not-recognized")
        return True
    if status == "deep":
        malformed(st, run, TOO_DEEP)
        return True
    return _payload_done(st, run, at_marker=(status == "stop"))


def _payload_done(st: State, run: CallRun, at_marker: bool) -> bool:
    p = run.c.payload
    text = "".join(run.payload)
    run.payload = []
    run.plen = 0
    if p.kind == "grammar":
        from ._grammars import parse_payload

        try:
            value = parse_payload(st.d, cast(str, p.grammar), text, p.json_values)
        except NestingTooDeep:
            malformed(st, run, TOO_DEEP)
            return True
        except ValueError:
            malformed(st, run, "payload-grammar-mismatch")
            return True
    else:
        try:
            value, used = repair_json(text, st.allowed, at_end_marker=at_marker)
        except NestingTooDeep:
            malformed(st, run, TOO_DEEP)
            return True
        except RepairFailed:
            malformed(st, run, "payload-not-json")
            return True
        run.repairs.extend(used)
    run.took_value(value)
    return True


def step_after(st: State, run: CallRun, final: bool) -> bool:
    """After a payload value: another value after a separator, a suffix, then close.

    Whitespace is only consumed here when something may follow it (a separator or a
    suffix): streaming waits to see what comes, so both modes agree on who owns it.
    """
    p = run.c.payload
    if not (p.separator or p.line_separated or p.suffix or p.fence):
        run.phase = "close"
        return True
    buf, n = st.buf, len(st.buf)
    start = st.pos
    i = st.skip_ws(run)
    if i > start and "\n" in buf[start:i]:
        run.newline = True
    if i >= n and not final:
        return False
    rest = buf[i:i + 16]
    for sep in p.separator:
        if buf.startswith(sep, i):
            st.consume(run, i + len(sep))
            run.newline = False
            run.phase = "payload"
            return True
        if not final and len(rest) < len(sep) and sep.startswith(rest):
            return False
    for lit in ([p.suffix] if p.suffix else []) + (["```"] if p.fence else []):
        if buf.startswith(lit, i):
            st.consume(run, i + len(lit))
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


def payload_lane(st: State, run: CallRun, bal: Balanced, delta: str) -> bool:
    """step_payload's scan while the value goes on (brackets that do not close it, a
    string opening or closing): the scan's state is put back if it would decide."""
    s = st.buf + delta if st.buf else delta
    depth, quote, started, after = bal.depth, bal.quote, bal.started, bal.after
    objects = bal.objects[:] if bal.spec.adjacent else bal.objects
    bal.item_end = -1
    new, status = bal.scan(s, 0, False)
    if status != "more":
        bal.depth, bal.quote, bal.started, bal.after = depth, quote, started, after
        bal.objects = objects
        return False
    if bal.item_end >= 0:
        run.item_end = run.plen + bal.item_end
    st.chars += len(delta)
    st.dropped += new
    st.buf = s[new:]
    if new:
        _took(st, run, s[:new])
    return True


def _took(st: State, run: CallRun, frag: str) -> None:
    """A payload's scan read `frag`."""
    run.raw.append(frag)
    run.payload.append(frag)
    run.plen += len(frag)
    if st.sink.streaming:
        p = run.c.payload
        if run.name is None and p.fields is not None and run.probe < PROBE_CHARS:
            run.probe += len(frag)  # a UI wants the name early: look near the start
            if '"' in frag:  # (the name's closing quote: only then can it be found)
                nm = _NAME_PROBE.search("".join(run.payload)[:PROBE_CHARS])
                if nm is not None and nm.group(1) in p.fields["name"]:
                    run.progress_name = nm.group(2)
        st.sink.progress(run.name or run.progress_name, frag)
