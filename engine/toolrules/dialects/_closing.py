"""How a call ends: its close marker, a malformed call skipped or dropped, the output's end.

`step_close` reads the close marker after a call's payload (or finds the next call or
section instead); `step_skip` reads a malformed call through its close marker before it
goes back as text, where a block of code may still hold call lists (`search: offered`);
`step_drop` drops markup whose header broke off. `call_eof` decides an unfinished call
at the end of the output: complete calls are kept, a cut-off one (`length`) is dropped,
a Python call list missing its last bracket may be mended, anything else is text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, cast

from ._build import build
from ._jsonscan import (
    CALL_NAME,
    NestingTooDeep,
    RepairFailed,
    list_spans,
    mend_call_list,
    repair_json,
    too_deep,
)
from ._outcome import finish_call, passthrough, rewind
from ._state import WS, CallRun, State

__all__ = ["call_eof", "step_close", "step_drop", "step_skip"]

# a call list inside a block of code: [name( or ['name(
_LIST_START = re.compile(r"""\[\s*['"]?(""" + CALL_NAME + r""")\s*\(""")


def step_close(st: State, run: CallRun, final: bool) -> bool:
    c = run.c
    buf, n = st.buf, len(st.buf)
    i = st.skip_ws(run) if c.close else st.pos
    if not c.close:
        finish_call(st, run)
        return True
    if i >= n:
        return False
    m = c.close_table.match(buf, i, final)
    if m is not None:
        st.consume(run, m.end())
        finish_call(st, run)
        return True
    if not final and c.close_table.is_prefix_at(buf, i):
        return False
    # not our close marker: fine if a marker of the region we return to follows
    # (the close was omitted, e.g. the next call starts), otherwise malformed
    exits = run.ret.exits
    if exits.match(buf, i, final) is not None:
        finish_call(st, run)
        return True
    if not final and exits.is_prefix_at(buf, i):
        return False
    run.phase = "skip"
    return True


def step_skip(st: State, run: CallRun, final: bool) -> bool:
    """Malformed call: consume through its close marker, then give it back as text."""
    buf = st.buf
    m = run.c.close_table.search(buf, st.pos, final)
    if m is None:
        end = len(buf) if final else len(buf) - run.c.close_table.holdback(buf, st.pos)
        st.consume(run, end)
        return False
    st.consume(run, m.end())
    if run.c.payload.search and _search_lists(st, run):
        return True
    passthrough(st, run, "call-malformed")
    return True


def step_drop(st: State, run: CallRun, final: bool) -> bool:
    """A call whose header broke off (header `breaks`): markup that is no call. It is
    dropped through its close marker, or up to the next call's open marker."""
    buf = st.buf
    table = run.c.drop_until
    m = table.search(buf, st.pos, final)
    if m is None:
        end = len(buf) if final else len(buf) - table.holdback(buf, st.pos)
        st.consume(run, end)
        return False
    st.consume(run, m.end() if table.actions[m.group()] == "close" else m.start())
    st.call = None
    st.region = run.ret
    st.sink.warn("call-header-unterminated-dropped")
    return True


def call_eof(st: State, finish_reason: str | None) -> None:
    run = st.call
    assert run is not None
    if run.nest_at >= 0 and finish_reason != "length" and _unnest(st, run):
        return
    if run.phase in ("after", "close") and run.values:
        finish_call(st, run)
        return
    if finish_reason != "length" and _mend(st, run):
        return
    if rewind(st, run):  # the unfinished tail is text, not a cut-off call
        return
    # a call at the start whose payload had not begun may have been plain text
    unbegun = run.anchored and not run.values and (run.phase == "header" or (
        run.phase == "payload" and (run.bal is None or not run.bal.started)))
    if finish_reason == "length" and not unbegun:
        # cut off: never a half call, but complete calls before the cut are kept
        st.call = None
        st.region = run.ret
        kept = list(run.values)
        if run.phase == "payload" and run.item_end > 0:
            head = "".join(run.payload)[:run.item_end].lstrip()
            if head.startswith("["):
                try:
                    value, _ = repair_json(head + "]", st.allowed)
                except RepairFailed:
                    value = None
                if isinstance(value, list) and value:
                    kept.append(value)
        if run.lead:
            st.sink.text(run.ret.text, run.lead)
        if kept:
            run.values = kept
            try:
                built = build(st, run) or ()
            except NestingTooDeep:
                built = ()
            for name, args, call_id, repairs in built:
                st.sink.call(name, args, call_id, "".join(run.raw), repairs)
        st.sink.warn("truncated-call-dropped")
        return
    passthrough(st, run, "incomplete-call")


def _unnest(st: State, run: CallRun) -> bool:
    """Param `nest`: a value that began a call inside it runs to the end of the output,
    so one begun was no whole call (or took the real call's close marker). What followed
    the first one's open marker is read again, its markers counting as they do elsewhere,
    as if no call could begin inside a value - nor may one for the rest of the output
    (so text is read again at most once)."""
    pd = run.c.payload.param
    if pd is None or run.key is None or run.value_end is None or run.confirming is not None:
        return False
    tail = "".join(run.value[run.nest_at:])
    del run.value[run.nest_at:]
    run.nest = 0
    run.nest_at = -1
    st.unnested = True
    run.value_end = pd.value_end(run.key, run.c.close)
    if tail:
        st.unconsume(run, tail)
    return True


def _mend(st: State, run: CallRun) -> bool:
    """Repairs `missing-final-bracket` / `unbalanced-quotes`: a Python call list the
    model finished without its closing bracket, or with a quote around a call never
    closed, read at the end of the output (never when it was cut off) - only when every
    call in it names an offered tool. A JSON call list whose every element is complete
    reads the same way (`[{...}, {...}` at the end)."""
    p = run.c.payload
    brackets = "missing-final-bracket" in st.allowed
    quotes = "unbalanced-quotes" in st.allowed
    if run.phase != "payload" or not (brackets or quotes) \
            or run.bal is None or not run.bal.started:
        return False
    if p.kind == "json":
        return brackets and _mend_json_list(st, run)
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
        value = parse_payload(st.d, cast(str, p.grammar), mended, p.json_values)
    except ValueError:  # NestingTooDeep included
        return False
    if end < len(text):
        st.unconsume(run, text[end:])  # what follows the list is read again: text
    return _mended(st, run, value, used)


def _mend_json_list(st: State, run: CallRun) -> bool:
    """Repair `missing-final-bracket` on a JSON array: only blanks (or a comma) follow
    its last complete element, so the list lacks nothing but its `]`."""
    if run.item_end <= 0:
        return False
    text = "".join(run.payload)
    head = text[:run.item_end]
    if text[run.item_end:].strip(WS + ",") or not head.lstrip(WS).startswith("["):
        return False
    try:
        value, used = repair_json(head + "]", st.allowed)
    except (RepairFailed, NestingTooDeep):
        return False
    if not isinstance(value, list) or not value:
        return False
    return _mended(st, run, value, [*used, "missing-final-bracket"])


def _mended(st: State, run: CallRun, value: Any, used: Sequence[str]) -> bool:
    """A call list completed by a repair at the end of the output: its calls, when they
    all name offered tools (a lenient reading)."""
    run.payload = []
    run.plen = 0
    run.bal = None
    run.started = False
    run.values.append(value)
    run.repairs.extend(used)
    run.lenient = True
    finish_call(st, run)
    return True


def _search_lists(st: State, run: CallRun) -> bool:
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
        if i < after or not st.offered(m.group(1)):
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
            value = parse_payload(st.d, cast(str, run.c.payload.grammar), segment,
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
    finish_call(st, run)
    return True
