"""Text regions: content, reasoning, call sections, and the markers between them.

`step_region` reads the text of the current region up to the first marker that leaves
it (holding back only a tail that may still become a marker) and `act`s on that marker:
another region, a call (begun here, read by the call phases), a message header, or the
end of the undecided start. At the start of the content it also tries the start shapes
(a bare call with no open marker). `region_read` is the same loop for `Machine.feed`'s
region lane: how much of a delta is text before anything needs deciding.
"""

from __future__ import annotations

from typing import Any

from ._compile import Region
from ._payload import fast_call
from ._state import WS, State, remember, ws_run

__all__ = ["act", "emit", "flush_undecided", "region_read", "step_region"]


def emit(st: State, region: Region, text: str) -> None:
    kind = region.kind
    if kind == "content":
        st.sink.text("content", text)
        if st.start_ok and text.strip(WS):
            st.start_ok = False
    elif kind == "reasoning":
        st.sink.text("reasoning", text)
    elif kind == "section":
        if region.noise:
            return
        if text.strip(WS):
            st.sink.warn("text-inside-call-section")
        st.sink.text(region.text, text)
    elif kind == "undecided":
        st.undecided.append(text)


def flush_undecided(st: State, kind: str) -> None:
    text = "".join(st.undecided)
    st.undecided = []
    if text:
        st.sink.text(kind, text)
        if kind == "content" and text.strip(WS):
            st.start_ok = False


def step_region(st: State, final: bool) -> bool:
    r = st.region
    buf, pos = st.buf, st.pos
    n = len(buf)
    if pos >= n:
        return False
    if r.start_calls and st.start_ok and not st.sink.has_content():
        # leading whitespace is held (consumed once) until we know if a call starts
        i = ws_run(buf, pos).end()
        if i > pos:
            st.lead.append(buf[pos:i])
            st.pos = pos = i
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
            for k in range(st.start_skip, len(r.start_calls)):
                c = r.start_calls[k]
                if c.starts_with(buf[i]):
                    if r.kind == "undecided":
                        flush_undecided(st, "content")
                        st.region = r = st.d.content
                    run = st.begin_call(c, r, anchored=True)
                    run.start_index = k
                    run.raw.extend(st.lead)
                    st.lead = []
                    return True
        if at_marker is None:
            st.start_ok = False
        if st.lead:
            lead, st.lead = "".join(st.lead), []
            emit(st, r, lead)
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
            emit(st, r, buf[pos:start])
        marker = m.group()
        action = exits.actions[marker]
        if not final and m.end() == n and _yields(action):
            # a lenient shape's open marker ends the text so far: held until the next
            # character shows whether a header may follow ("[1]" never starts a call)
            st.pos = start
            return False
        st.pos = m.end()
        act(st, r, action, marker)
        return True
    end = n if final else n - r.exits.holdback(buf, pos)
    if end > pos:
        emit(st, r, buf[pos:end])
        st.pos = end
    return False


def act(st: State, r: Region, action: tuple[Any, ...], marker: str) -> None:
    kind = action[0]
    if kind == "goto":
        target = action[1]
        if r.kind == "reasoning" and r.tentative and st.sink.deferred is not None \
                and target is not r and target.text != "reasoning":
            st.sink.resolve(calls_are_text=True)  # the reasoning closed: calls were text
        if target.tentative and target.kind == "section":  # entering one, inside reasoning
            st.sink.defer()
            st.sink.marker(marker)
        elif r.tentative and r.kind == "section":  # leaving it
            st.sink.marker(marker)
        st.region = target
    elif kind == "call":
        c = action[1]
        tentative = r.tentative
        if st.pos < len(st.buf) and _no_header(action, st.buf, st.pos, r):
            # a lenient shape whose header cannot begin here ("[1]", "[[", "{x"): its
            # marker is text, as the header step would find, without a call run
            emit(st, r, marker)
            return
        if tentative:
            st.sink.defer()
        elif st.final and c.fast and fast_call(st, c, r, marker):
            return
        st.begin_call(c, r, anchored=False, marker=marker, tentative=tentative)
    elif kind == "header":
        st.header = []
        st.header_msg = action[1]
    elif kind == "resolve":  # leaving the undecided start region
        reasoning, then = action[1], action[2]
        flush_undecided(st, "reasoning" if reasoning is not None else "content")
        st.region = st.d.content
        act(st, st.d.content, then, marker)
    # ("drop",): the marker simply disappears


def region_read(r: Region, s: str) -> int:
    """How much of `s` step_region, streaming, emits as text before waiting (the rest is
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
    return remember(r.memo, s, end)


def _no_header(action: tuple[Any, ...], buf: str, i: int, r: Region) -> bool:
    """Whether the marker before `buf[i]` opens a lenient call shape whose header cannot
    begin with that character: then the marker is text (what the header step finds)."""
    if action[0] != "call" or not action[1].offered or r.tentative:
        return False
    h = action[1].header
    return h is not None and h.foreign is not None and buf[i] not in WS \
        and h.foreign.match(buf, i) is not None


def _yields(action: tuple[Any, ...]) -> bool:
    """Whether a marker gives way to the start shapes: a lenient call's open marker."""
    return action[0] == "call" and action[1].offered
