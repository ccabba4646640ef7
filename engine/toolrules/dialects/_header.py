"""Headers: a message header (which region or call follows) and a call header (the tool).

A message header (`<|start|>assistant<|channel|>...` before its end marker) is read
whole, then its routes pick the region or call that follows. A call header (`name[ARGS]`,
`<function=NAME>`, `functions.NAME:IDX`) is read up to its end marker - never past
MAX_HEADER characters, and given back as text if a marker of the surrounding region
comes first - then its pattern yields the tool's name and id, and the call goes on to
its payload or parameters. `header_read` is the same decision for `Machine.feed`'s
header lane.
"""

from __future__ import annotations

from ._compile import HeaderLane, Region
from ._jsonscan import Balanced
from ._outcome import finish_call, malformed, passthrough
from ._state import MAX_HEADER, CallRun, State, remember, unescape, ws_run

__all__ = ["header_read", "step_call_header", "step_message_header"]


def step_message_header(st: State, final: bool) -> bool:
    buf, pos = st.buf, st.pos
    n = len(buf)
    msg = st.header_msg
    header = st.header
    assert header is not None  # _run steps here only inside a message header
    m = msg.header_end.search(buf, pos, final)
    if m is None:
        end = n if final else n - msg.header_end.holdback(buf, pos)
        if end > pos:
            header.append(buf[pos:end])
            st.pos = end
        return False
    header.append(buf[pos:m.start()])
    st.pos = m.end()
    what = msg.header_end.actions[m.group()]
    text = "".join(header)
    st.header = None
    if what == "abort":
        st.sink.warn("message-header-without-body-dropped")
        st.region = st.d.between
        return True
    if what == "restart":
        st.sink.warn("message-header-without-body-dropped")
        st.header = []
        return True
    for route in msg.routes:
        rm = route.pattern.search(text)
        if rm is None:
            continue
        target = route.target
        if isinstance(target, Region):
            st.region = target
        else:
            run = st.begin_call(target, st.d.between, anchored=False, marker="")
            name = rm.groupdict().get("name")
            run.name = name.strip() if name else None
            if rm.groupdict().get("id"):
                run.call_id = rm.group("id")
        return True
    st.region = st.d.between
    return True


def step_call_header(st: State, run: CallRun, final: bool) -> bool:
    h = run.c.header
    assert h is not None
    buf, pos = st.buf, st.pos
    n = len(buf)
    if h.optional and not run.header:
        i = st.skip_ws(run)
        pos = st.pos
        if i >= n and not final:
            return False
        if i < n and buf[i] in run.c.payload.starts:
            run.phase = "payload"
            return True
    if not run.header:
        i = ws_run(buf, pos).end()
        if i > pos:
            st.consume(run, i)
            pos = i
        if i >= n:
            return False
    # The header ends at its end marker - unless a marker of the surrounding region
    # (the next call's open marker, a section or reasoning marker) comes first: then
    # this was no call, and that marker is read again. One search finds the first of
    # either, and only up to where the header would pass MAX_HEADER (a marker that
    # starts by `limit` ends by `window`): never a search to the end of the text per
    # header, however many unfinished headers the text holds.
    limit = pos + MAX_HEADER - run.hlen
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
            run.header.append(st.consume(run, known))
            run.phase = "drop"
            return True
        else:
            m = h.ends.match(buf, known, final)  # an end marker there too wins
            if m is None and known <= limit:
                run.header.append(st.consume(run, known))
                passthrough(st, run, "call-header-interrupted")
                return True
    elif window < n:
        known = window  # no end marker by the limit: too long
    else:
        known = n if final else n - table.holdback(buf, pos)
    if h.foreign is not None:  # a character no header holds: this is no call
        fm = h.foreign.search(buf, pos, min(known, limit))
        if fm is not None:
            run.header.append(st.consume(run, fm.start()))
            malformed(st, run, "call-header-not-recognized")
            return True
    if m is None or known > limit:
        if known > limit:
            run.header.append(st.consume(run, limit))
            malformed(st, run, "call-header-too-long")
            return True
        if known > pos:
            run.header.append(st.consume(run, known))
            run.hlen += known - pos
        return False
    run.header.append(st.consume(run, m.start()))
    if h.ends.actions[m.group()] == "until":
        st.consume(run, m.end())
    text = "".join(run.header)  # read: the tool's name (and id) from it, or no call
    if h.text:  # prose before the payload: content once the call is read
        run.lead = text
        run.phase = "payload"
        return True
    if h.pattern is not None:
        hm = h.pattern.search(text)
        if hm is None:
            malformed(st, run, "call-header-not-recognized")
            return True
        groups = hm.groupdict()
        if h.in_payload:
            return _header_as_payload(st, run, groups.get("name"))
        name = groups.get("name")
        run.name = unescape(name.strip(), h.unescape) if name else None
        if groups.get("id"):
            run.call_id = unescape(groups["id"].strip(), h.unescape)
        if groups.get("self_close"):
            run.phase = "close"
            run.values = [{}]
            finish_call(st, run)
            return True
    else:
        run.name = text.strip() or None
    if not run.name:
        malformed(st, run, "call-without-name")
        return True
    run.phase = "params" if run.c.payload.kind == "params" else (
        "close" if run.c.payload.kind == "none" else "payload")
    if run.c.payload.kind == "none":
        run.values = [{}]
    return True


def _header_as_payload(st: State, run: CallRun, name: str | None) -> bool:
    """Header `in_payload`: what was read since the call began (its open marker
    included) starts the payload; the header only checked it (and its first name)."""
    if run.c.offered and name is not None and not st.offered(name):
        passthrough(st, run, "tool-not-offered")
        return True
    p = run.c.payload
    text = "".join(run.raw)
    bal = Balanced(p.spec, bracketed=not p.delimited)
    new, status = bal.scan(text, 0, False)
    if status != "more" or new != len(text):
        malformed(st, run, "payload-not-recognized")
        return True
    run.bal = bal
    run.started = True
    run.payload = [text]
    run.plen = len(text)
    run.item_end = -1
    run.phase = "payload"
    return True


def header_read(hl: HeaderLane, s: str) -> int:
    """How much of `s` step_call_header takes as header text before waiting; -1 when a
    marker ends or interrupts the header, or a character no header holds comes."""
    table = hl.table
    if table.search(s, 0, False) is not None:
        end = -1
    else:
        end = len(s) - table.holdback(s, 0)
        if hl.foreign is not None and hl.foreign.search(s, 0, end) is not None:
            end = -1
    return remember(hl.memo, s, end)
