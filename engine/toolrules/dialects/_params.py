"""Tagged parameters: `<parameter=KEY>value</parameter>` pairs, their values as text.

`step_params` is one step of a params payload: between parameters it reads a
parameter's open marker, the call's close marker or the payload's suffix; in a
parameter, its key up to the key's end (bounded like a call header), then an optional
value-open marker. `_step_value` reads the value up to its close marker - which, where
the dialect asks, only counts when a structural tag follows it - and `_end_value` trims
it. Values are typed later, from the tool's schema (`_build`).
"""

from __future__ import annotations

from typing import cast

from ._compile import ParamDef
from ._outcome import finish_call, malformed
from ._state import MAX_HEADER, CallRun, State, starts, unescape, ws_run

__all__ = ["step_params"]


def step_params(st: State, run: CallRun, final: bool) -> bool:
    pd = run.c.payload.param
    assert pd is not None  # a params payload has its param spec (lint checks it)
    # between parameters and a parameter's key are read here, not in functions of their
    # own: each delta there is a step (no lane), and a call per step costs
    buf, n = st.buf, len(st.buf)
    if run.key is None and not run.value_end:
        # between parameters: a parameter, the call's close, or the suffix
        i = st.skip_ws(run)
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
            st.consume(run, i + len(suffix))
            return True
        m = run.c.close_table.match(buf, i, final)
        if m is not None:
            st.consume(run, m.end())
            finish_call(st, run)
            return True
        for m_open in pd.open:
            if buf.startswith(m_open, i):
                st.consume(run, i + len(m_open))
                run.key = ""
                run.header = []
                run.hlen = 0
                return True
        if not final and (any(starts(o, buf, i) for o in pd.open) or
                          run.c.close_table.is_prefix_at(buf, i) or
                          starts(run.c.payload.suffix or "\0", buf, i)):
            return False
        malformed(st, run, "params-unexpected-text")
        return True
    if run.value_end is None:
        # reading the key part up to key_until, then an optional value-open marker
        if run.key == "":
            pos = st.pos
            limit = pos + MAX_HEADER - run.hlen  # the same bound as a call header
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
                    run.header.append(st.consume(run, limit))
                    malformed(st, run, "param-key-too-long")
                    return True
                run.header.append(st.consume(run, known))
                run.hlen += known - pos
                return False
            run.header.append(st.consume(run, m.start()))
            st.consume(run, m.end())
            key_text = "".join(run.header)
            run.header = []
            if pd.key_pattern is not None:
                km = pd.key_pattern.search(key_text)
                if km is None:
                    malformed(st, run, "param-key-not-recognized")
                    return True
                key = km.group("key")
                run.key_type = km.groupdict().get("type")
            else:
                key = key_text.strip()
                run.key_type = None
            run.key = unescape(key, pd.unescape) if key else key
            if not run.key:
                malformed(st, run, "param-without-key")
                return True
        if pd.value_open:
            i = st.skip_ws(run)
            if i >= n:
                return False
            for vo in pd.value_open:
                if buf.startswith(vo, i):
                    st.consume(run, i + len(vo))
                    break
            else:
                if not final and any(starts(vo, buf, i) for vo in pd.value_open):
                    return False
                malformed(st, run, "param-value-missing")
                return True
        run.value = []
        run.value_end = pd.value_end(cast(str, run.key), run.c.close)
        return True
    return _step_value(st, run, pd, final)


def _step_value(st: State, run: CallRun, pd: ParamDef, final: bool) -> bool:
    buf, pos, n = st.buf, st.pos, len(st.buf)
    if run.confirming is not None:
        # a close tag was seen; it only counts if a structural tag follows it
        i = ws_run(buf, pos).end()
        if i > pos:
            run.confirming.append(st.consume(run, i))
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
            st.unconsume(run, "".join(pending[run.ending:]))
            run.ending = -1
        return _end_value(st, run, pd)
    table = run.value_end
    assert table is not None  # set when the value opened
    m = table.search(buf, pos, final)
    if m is None:
        end = n if final else n - table.holdback(buf, pos)
        frag = st.consume(run, end)
        run.value.append(frag)
        st.sink.progress(run.name, frag)
        return False
    what = table.actions[m.group()]
    run.value.append(st.consume(run, m.start()))
    if what == "nest" or what == "unnest":
        return _nest(st, run, pd, what, m.end(), final)
    if what == "close" and pd.confirm:
        run.confirming = [st.consume(run, m.end())]
        return True
    if what == "end" and pd.confirm_end:
        run.confirming = [st.consume(run, m.end())]
        run.ending = 0
        return True
    if what == "close":
        st.consume(run, m.end())
    return _end_value(st, run, pd)


def _nest(st: State, run: CallRun, pd: ParamDef, what: str, end: int, final: bool) -> bool:
    """Param `nest`: a whole call written inside the value (a file showing the format):
    its markers are text of the value, up to its close marker."""
    nest = pd.nest
    assert nest is not None  # the value's tables hold nest markers only then
    begins: bool | None = False
    if what == "unnest":
        run.nest -= 1
        if not run.nest:
            run.value_end = pd.value_end(cast(str, run.key), run.c.close)
    else:
        begins = False if run.nest >= nest.DEPTH or st.unnested \
            else nest.begins(st.buf, end, final)
        if begins is None:
            return False  # (a bounded look past the marker: its name and what follows)
        if begins:
            run.nest += 1
            run.value_end = nest.table
    run.value.append(st.consume(run, end))
    if begins and run.nest_at < 0:
        run.nest_at = len(run.value)
    return True


def _end_value(st: State, run: CallRun, pd: ParamDef) -> bool:
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
    run.nest = 0
    run.nest_at = -1
    return True
