"""What becomes of a call the scanner has read: its calls, or its text given back.

`finish_call` builds the calls (`_build`) and hands them to the sink, unless they name
tools not offered or repeat earlier ones. A call that is no call - malformed,
interrupted, not offered - goes back as text, verbatim, where it stood: `malformed`
first skips it through its close marker (outside reasoning), `passthrough` gives it
back, `rewind` keeps the complete values of a `rest: text` payload and gives back what
follows, and a call at the start that does not fit gives way to the next start shape
(`next_start`).
"""

from __future__ import annotations

from ._build import build
from ._jsonscan import NestingTooDeep
from ._sink import KEY_JSON
from ._state import BROKEN, TOO_DEEP, WS, CallRun, State

__all__ = ["finish_call", "malformed", "passthrough", "rewind"]


def finish_call(st: State, run: CallRun) -> None:
    st.call = None
    st.region = run.ret
    try:
        calls = build(st, run)
    except NestingTooDeep:
        passthrough(st, run, TOO_DEEP)
        return
    if calls is None:
        passthrough(st, run, "payload-not-a-call")
        return
    if (run.c.offered or run.lenient) and not all(st.offered(c[0]) for c in calls):
        passthrough(st, run, "tool-not-offered")  # a lenient reading names known tools
        return
    if st.d.repeats:
        key = KEY_JSON([(c[0], c[1]) for c in calls])
        if key in st.lists:  # the model restating calls it already made
            passthrough(st, run, "repeated-calls")
            st.sink.warn("repeated-calls-kept-as-text")
            return
        if st.d.first_list and st.lists:  # rambling on after its calls
            passthrough(st, run, "further-calls")
            st.sink.warn("further-calls-kept-as-text")
            return
        st.lists.add(key)
    raw = "".join(run.raw)
    if run.lead:
        st.sink.text(run.ret.text, run.lead)
    for name, args, call_id, repairs in calls:
        st.sink.call(name, args, call_id, raw, repairs)
    if run.anchored:
        st.start_ok = False


def malformed(st: State, run: CallRun, why: str) -> None:
    if why == TOO_DEEP:
        run.deep = True
    if rewind(st, run):
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
    passthrough(st, run, why)


def passthrough(st: State, run: CallRun, why: str) -> None:
    """Give a call that is not a call back as text, verbatim, where it stood."""
    if run.anchored:
        if _next_start(st, run):
            return
        # no start shape fits the text at the start: it is text (trying the same
        # shapes again on the same characters would never end)
        st.start_ok = False
    st.call = None
    st.region = run.ret
    raw = "".join(run.raw)
    kind = run.ret.text
    st.sink.text(kind, raw)
    if kind == "content" and raw.strip(WS):
        st.start_ok = False
    if run.deep or why == TOO_DEEP:  # said even at the start: it is hostile, not prose
        st.sink.warn(f"{TOO_DEEP}-kept-as-text")
    elif why == BROKEN:
        st.sink.warn(f"{BROKEN}-kept-as-text")
    elif not run.anchored and (kind == "content" or run.ret.kind == "section") \
            and not run.c.offered:
        # (in reasoning: a mention, nothing lost - unless it stood in a call section
        # opened there; a lenient shape: ordinary text)
        st.sink.warn(f"{why}-kept-as-text")


def rewind(st: State, run: CallRun) -> bool:
    """Payload `rest: text`: what follows the last complete value is not a value. Give
    it back to the scanner as text; the complete values are the calls."""
    if not run.c.payload.rest_text or run.mark < 0 or not run.values or run.c.close:
        return False
    tail = "".join(run.raw[run.mark:])
    del run.raw[run.mark:]
    st.give_back(tail)
    run.payload = []
    run.plen = 0
    run.bal = None
    run.started = False
    run.newline = False
    run.phase = "close"
    return True


def _next_start(st: State, run: CallRun) -> bool:
    """A call at the start of the content that does not fit gives way to the next start
    shape that may begin with its text: the text is read again (each shape once)."""
    shapes = run.ret.start_calls
    k = run.start_index + 1
    if k <= 0 or k >= len(shapes):
        return False
    text = "".join(run.raw)
    first = text.lstrip(WS)[:1] or st.buf[st.pos:st.pos + 1]  # nothing read yet
    if not first or not any(c.starts_with(first) for c in shapes[k:]):
        return False
    st.give_back(text)
    st.call = None
    st.region = run.ret
    st.start_skip = k
    return True
