"""Compiling a dialect rule (rules/dialects/*.yaml) into marker tables and call shapes.

A dialect is a set of *regions* (content, reasoning, sections that hold calls, and for
header-routed formats the space between messages) connected by literal markers. Each
region compiles to one `MarkerTable`: a regex alternation of its exit markers (longest
first) plus the set of proper marker prefixes, so the scanner can hold back exactly a
possible partial marker at the end of a delta and nothing else.

Calls have an optional header (text naming the tool, matched by a regex) and a payload:
a JSON value (string-aware; markers inside strings are data), tagged parameters whose
values are text typed by the tool schema, or a Lark grammar. Nothing here knows any
particular format: the YAML says which markers mean what.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, cast

from ._jsonscan import BalancedSpec, first_chars, holdback

__all__ = ["CallDef", "Dialect", "HeaderDef", "HeaderLane", "MarkerTable", "ParamDef", "PayloadDef",
           "Region", "RouteDef", "check_rules", "compile_dialect"]

_JSON_QUOTES = (('"', '"', True),)
_JSON_QUOTES_LENIENT = (('"', '"', True), ("'", "'", True))


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str) and v]


class MarkerTable:
    """Literal markers of one region or phase, each bound to an action."""

    __slots__ = ("actions", "firsts", "maxlen", "memo", "prefixes", "regex", "starts")

    def __init__(self, pairs: Iterable[tuple[str, Any]] = ()):
        self.actions: dict[str, Any] = {}
        for marker, action in pairs:
            self.actions.setdefault(marker, action)
        markers = sorted(self.actions, key=len, reverse=True)
        self.regex = re.compile("|".join(re.escape(m) for m in markers)) if markers else None
        self.prefixes = frozenset(m[:k] for m in markers for k in range(1, len(m)))
        self.maxlen = max((len(m) for m in markers), default=0)
        self.firsts = first_chars(self.prefixes)
        self.starts = first_chars(markers)  # any character a marker begins with
        # the streaming scanner's decisions on short held-back texts (see Machine.feed)
        self.memo: dict[str, int] = {}

    def search(self, buf: str, pos: int, final: bool = True,
               endpos: int | None = None) -> re.Match[str] | None:
        """The leftmost (longest) marker from pos (and ending by endpos); while streaming,
        None if that match could still grow into a longer marker (``` now, ```json once
        more text arrives)."""
        if self.regex is None:
            return None
        m = self.regex.search(buf, pos) if endpos is None else self.regex.search(buf, pos, endpos)
        if m is not None and not final and len(buf) - m.start() < self.maxlen \
                and buf[m.start():] in self.prefixes:
            return None
        return m

    def match(self, buf: str, pos: int, final: bool = True) -> re.Match[str] | None:
        if self.regex is None:
            return None
        m = self.regex.match(buf, pos)
        if m is not None and not final and len(buf) - pos < self.maxlen \
                and buf[pos:] in self.prefixes:
            return None
        return m

    def holdback(self, buf: str, start: int) -> int:
        """Length of the longest tail of buf[start:] that could begin a marker."""
        return holdback(buf, start, self.prefixes, self.firsts, self.maxlen)

    def is_prefix(self, text: str) -> bool:
        return text in self.prefixes

    def is_prefix_at(self, buf: str, i: int) -> bool:
        """is_prefix(buf[i:]) without copying a long rest of the buffer."""
        return len(buf) - i < self.maxlen and buf[i:] in self.prefixes

    def __bool__(self) -> bool:
        return bool(self.actions)


class Nest:
    """A whole call written inside a parameter's value (param `nest`): begun by `open`, a
    name up to `until`, blanks and one of `then`; ended by `close`. Inside it, markers
    are text of the value."""

    NAME = 256   # characters a name may hold
    BLANKS = 64  # blanks between the name and what follows it
    DEPTH = 16   # calls inside calls inside a value, at most

    def __init__(self, spec: dict[str, Any]):
        self.open = spec["open"]
        self.until = spec["until"]
        self.then = tuple(_as_list(spec["then"]))
        self.close = spec["close"]
        self.table = MarkerTable([(self.open, "nest"), (self.close, "unnest")])
        self._name = re.compile(r"[^\s<>]{0,256}")  # NAME
        self._blanks = re.compile(r"[ \t\r\n]{0,64}")  # BLANKS

    def begins(self, buf: str, j: int, final: bool) -> bool | None:
        """Whether the `open` marker ending at j begins a whole call (None: not known yet).
        Looks at most NAME + BLANKS characters (and the markers) past it: bounded."""
        n = len(buf)
        e = cast("re.Match[str]", self._name.match(buf, j)).end()
        if e >= n:
            return False if final else None
        if e == j:
            return False
        if not buf.startswith(self.until, e):
            if not final and n - e < len(self.until) and self.until.startswith(buf[e:]):
                return None
            return False
        k = cast("re.Match[str]", self._blanks.match(buf, e + len(self.until))).end()
        if k >= n:
            return False if final else None
        for t in self.then:
            if buf.startswith(t, k):
                return True
            if not final and n - k < len(t) and t.startswith(buf[k:]):
                return None
        return False


class ParamDef:
    """Tagged parameters: open, key, optional value-open, value, close."""

    def __init__(self, spec: dict[str, Any]):
        self.open = _as_list(spec.get("open"))
        self.key_until = MarkerTable((m, "key") for m in _as_list(spec.get("key_until")))
        pattern = spec.get("key_pattern")
        self.key_pattern = re.compile(pattern) if pattern else None
        self.value_open = _as_list(spec.get("value_open"))
        self.close = _as_list(spec.get("close"))
        opt = spec.get("close_optional", False)
        self.close_optional = opt if opt in ("call", "param") else ("both" if opt else "")
        self.confirm = MarkerTable((m, "confirm") for m in _as_list(spec.get("confirm")))
        # the call's close marker inside a value whose own close was omitted: it ends the
        # value only when one of these (or the end of the output) follows it
        self.confirm_end = MarkerTable((m, "confirm") for m in _as_list(spec.get("confirm_end")))
        self.trim = spec.get("trim", "none")
        self.types = dict(spec.get("types") or {})
        self.unescape = spec.get("unescape")
        self._close_cache: dict[str, MarkerTable] = {}
        nest = spec.get("nest")
        self.nest = None if not nest else Nest(nest)

    def value_end(self, key: str, call_close: Sequence[str]) -> MarkerTable:
        """Markers that end the value of `key` (cached per key)."""
        table = self._close_cache.get(key)
        if table is None:
            pairs: list[tuple[str, Any]] = [(c.replace("{key}", key), "close") for c in self.close]
            if self.close_optional in ("both", "param"):
                pairs += [(m, "next") for m in self.open]
            if self.close_optional in ("both", "call"):
                pairs += [(m, "end") for m in call_close]
            if self.nest is not None:
                pairs.append((self.nest.open, "nest"))
            table = MarkerTable(pairs)
            if len(self._close_cache) < 256:
                self._close_cache[key] = table
        return table


class PayloadDef:
    """How a call's payload is read (json / params / grammar / none)."""

    def __init__(self, spec: dict[str, Any], stops: Sequence[str], lenient: bool):
        self.kind = spec.get("kind", "json")
        fields = spec.get("fields")
        self.fields = None if fields is None else {
            "name": tuple(fields.get("name") or ("name",)),
            "arguments": tuple(fields.get("arguments") or ("arguments",)),
            "id": tuple(fields.get("id") or ()),
            "calls": tuple(fields.get("calls") or ()),
        }
        self.name_as_key = bool(spec.get("name_as_key"))
        self.array = bool(spec.get("array", self.fields is not None or self.name_as_key))
        seps = _as_list(spec.get("separator"))
        self.separator = tuple(s for s in seps if s.strip())   # literal separators
        self.line_separated = any(s and not s.strip() for s in seps)  # whitespace separates
        head = spec.get("head")
        self.head = re.compile(head) if head else None
        self.rest_text = spec.get("rest") == "text"
        # an opening bracket right after a closed value inside the payload breaks it
        # there: the broken value is text, what begins at the bracket is read again
        self.restart_adjacent = spec.get("restart") == "adjacent"
        self.fence = bool(spec.get("fence"))
        self.suffix = spec.get("suffix")
        self.param = ParamDef(spec["param"]) if spec.get("param") else None
        self.json = bool(spec.get("json"))  # params payloads: a JSON object may stand instead
        self.grammar = spec.get("grammar")
        self.search = spec.get("search") == "offered"
        # grammar payloads whose lists and dicts read JSON as JSON does: such values are
        # read by the C JSON scanner (the same values, at a fraction of the cost)
        jv = spec.get("json_values")
        self.json_values: bool | str = jv if jv == "lists" else bool(jv)
        self.delimited = False
        if self.kind == "grammar":
            quotes = [tuple(q) for q in spec.get("strings") or (('"', '"', True), ("'", "'", True))]
            brackets = spec.get("brackets", "()[]{}")
            self.starts = spec.get("starts") or "[{("
            self.delimited = bool(spec.get("until_close"))
            # a value may be one quoted string ('get_time()'), where `starts` lets a quote
            # begin it (or a header read into the payload began with one)
            self.spec = BalancedSpec(quotes, brackets, stops, quoted_values=True)
        else:
            self.starts = spec.get("starts") or "{["
            self.spec = BalancedSpec(_JSON_QUOTES_LENIENT if lenient else _JSON_QUOTES,
                                     "{}[]", stops, adjacent=self.restart_adjacent)


class HeaderLane:
    """For the scanner: the characters a header's step must look at: any its header may
    not hold, and any that may begin its end marker or a marker of the region around it;
    and the markers the step looks for (`table`), with its decisions on short texts."""

    __slots__ = ("foreign", "memo", "notable", "table")

    def __init__(self, h: Any, exits: MarkerTable):
        table = h.ends_or_exits(exits)
        firsts = sorted({m[0] for m in table.actions})
        parts = ["[" + "".join(map(re.escape, firsts)) + "]"] if firsts else []
        if h.foreign is not None:
            parts.append(h.foreign.pattern)
        self.notable = re.compile("|".join(parts) or "(?!)")
        self.table = table
        self.foreign = h.foreign
        self.memo: dict[str, int] = {}


class HeaderDef:
    def __init__(self, spec: dict[str, Any], kept: Sequence[str]):
        until = _as_list(spec.get("until"))
        keep = spec.get("keep")  # true: every until marker starts the payload; a list: those
        kept_until = set(until) if keep is True else set(_as_list(keep))
        pairs = [(m, "keep" if m in kept_until else "until") for m in until]
        pairs += [(m, "keep") for m in kept]
        self.ends = MarkerTable(pairs)
        pattern = spec.get("pattern")
        self.pattern = re.compile(pattern, re.S) if pattern else None
        self.optional = bool(spec.get("optional"))
        # prose before the payload (the payload names the tool): content once the call reads
        self.text = bool(spec.get("text"))
        # the header (from the open marker on) is also the payload's first text: a call
        # list's first name is checked before the list is read
        self.in_payload = bool(spec.get("in_payload"))
        self.unescape = spec.get("unescape")
        # markers that cannot stand in a header before its end marker: the open marker
        # was followed by no header at all (`<function=name` and a new line, no `>`)
        self.breaks = _as_list(spec.get("breaks"))
        chars = spec.get("chars")
        self.chars = re.compile(f"[{chars}]") if chars else None       # one allowed char
        self.foreign = re.compile(f"[^{chars}]") if chars else None    # any other char
        self._with_exits: dict[int, tuple[MarkerTable, MarkerTable]] = {}
        self._lanes: dict[int, tuple[MarkerTable, Any]] = {}

    def lane(self, exits: MarkerTable) -> Any:
        """The scanner's header lane for this header in a region with `exits` (cached)."""
        got = self._lanes.get(id(exits))
        if got is None or got[0] is not exits:
            got = self._lanes[id(exits)] = (exits, HeaderLane(self, exits))
        return got[1]

    def ends_or_exits(self, exits: MarkerTable) -> MarkerTable:
        """The header's end markers ("end", action) and the markers that leave the region
        around the call ("exit",) in one table: one search finds whichever comes first."""
        got = self._with_exits.get(id(exits))
        if got is None or got[0] is not exits:
            table = MarkerTable([(m, ("end", a)) for m, a in self.ends.actions.items()] +
                                [(m, ("break",)) for m in self.breaks] +
                                [(m, ("exit",)) for m in exits.actions])
            got = self._with_exits[id(exits)] = (exits, table)
        return got[1]


class CallDef:
    """One call shape: where it starts, its header, its payload, how it ends."""

    def __init__(self, spec: dict[str, Any], index: int, lenient: bool):
        self.label = spec.get("name") or f"calls[{index}]"
        self.open = _as_list(spec.get("open"))
        self.at = spec.get("at", "anywhere")
        regions = spec.get("in")
        self.regions = tuple(_as_list(regions)) if regions is not None else ("content",)
        self.close = tuple(_as_list(spec.get("close")))
        self.close_table = MarkerTable((m, "close") for m in self.close)
        # a lenient shape: its calls count only when every one names an offered tool;
        # anything else is its text, silently
        self.offered = spec.get("names") == "offered"
        payload = spec.get("payload") or {"kind": "json"}
        self.payload = PayloadDef(payload, self.close, lenient)
        kept: list[str] = list(self.close)
        self.header = HeaderDef(spec["header"], kept) if spec.get("header") else None
        # a call dropped for a broken header runs to its close marker or the next call
        self.drop_until = MarkerTable([(m, "close") for m in self.close] +
                                      [(m, "open") for m in self.open])
        # eligible for the whole-text fast path: open, one JSON value, close (an optional
        # prose header is absent when the value starts at once, all the fast path reads)
        p = self.payload
        h = self.header
        self.fast = ((h is None or (h.optional and h.text)) and p.kind == "json"
                     and bool(self.close)
                     and not p.separator and not p.line_separated and not p.fence
                     and not p.suffix and bool(self.open))

    def starts_with(self, ch: str) -> bool:
        """Whether a call found at the start of the content may begin with `ch`."""
        h = self.header
        if h is not None and not h.optional and h.chars is not None:
            return h.chars.match(ch) is not None
        return ch in self.payload.starts


class Region:
    """A text region: where its text goes and which markers leave it."""

    __slots__ = ("exits", "kind", "memo", "name", "noise", "reasoning", "start_calls",
                 "tentative", "text")

    def __init__(self, kind: str, name: str):
        self.kind = kind          # content | reasoning | drop | section | between | undecided
        self.name = name
        self.exits = MarkerTable()
        self.start_calls: tuple[CallDef, ...] = ()
        self.tentative = False    # calls here count only if the reasoning never closes
        self.reasoning: Region | None = None  # undecided: the reasoning it may turn out to be
        self.noise = False        # section: text outside calls is template noise (dropped)
        # where text given back from a call here goes: a section opened inside reasoning
        # gives it back to the reasoning
        self.text = "reasoning" if kind == "reasoning" else "content"
        # the streaming scanner's decisions on short held-back texts (see Machine.feed)
        self.memo: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"<Region {self.name}>"


class RouteDef:
    def __init__(self, pattern: str, target: Any):
        self.pattern = re.compile(pattern, re.S)
        self.target = target      # a Region, or a CallDef (name from the pattern's groups)


class MessagesDef:
    def __init__(self) -> None:
        self.header_end = MarkerTable()
        self.routes: list[RouteDef] = []


class Dialect:
    """A compiled dialect: regions, calls, repairs, defaults."""

    def __init__(self, rule_id: str, data: dict[str, Any]):
        self.id = rule_id
        self.description = data.get("description", "")
        self.default_prompt = data.get("default_prompt")
        self.strip = bool(data.get("strip", True))
        self.repairs = frozenset(data.get("repairs") or ())
        dedupe = data.get("dedupe")
        self.dedupe = dedupe is True               # every identical call is reported once
        # a call list repeated as a whole is text (and with `first`, any later list)
        self.repeats = dedupe in ("repeats", "first")
        self.first_list = dedupe == "first"        # only the first call list is read
        self.decline = frozenset(data.get("decline") or ())
        self.grammars: set[str] = set()
        self.grammar_parsers: dict[str, Any] = {}
        lenient = "single-quotes" in self.repairs
        drop = _as_list(data.get("drop"))

        self.content = Region("content", "content")
        self.regions: list[Region] = [self.content]
        reasoning_defs = data.get("reasoning") or []
        reasoning: list[Region] = []
        for i, r in enumerate(reasoning_defs):
            reg = Region("reasoning", f"reasoning[{i}]")
            reg.tentative = r.get("calls", "never") == "unclosed"
            reasoning.append(reg)
            self.regions.append(reg)
        sections: dict[str, Region] = {}
        for s in data.get("sections") or []:
            reg = Region("section", s["name"])
            reg.noise = s.get("text") == "drop"
            sections[s["name"]] = reg
            self.regions.append(reg)
        self.calls = [CallDef(c, i, lenient) for i, c in enumerate(data.get("calls") or [])]
        if self.repeats:  # every call list is compared with the earlier ones
            for c in self.calls:
                c.fast = False
        for c in self.calls:
            if c.payload.grammar:
                self.grammars.add(c.payload.grammar)

        content_pairs: list[tuple[str, Any]] = []
        for i, r in enumerate(reasoning_defs):
            content_pairs += [(m, ("goto", reasoning[i])) for m in _as_list(r.get("open"))]
        for s in data.get("sections") or []:
            content_pairs += [(m, ("goto", sections[s["name"]])) for m in _as_list(s.get("open"))]
        content_calls = [c for c in self.calls if "content" in c.regions]
        for c in content_calls:
            content_pairs += [(m, ("call", c)) for m in c.open]
        for r in reasoning_defs:  # a stray closing marker is never content
            content_pairs += [(m, ("drop",)) for m in _as_list(r.get("close"))]
        content_pairs += [(m, ("drop",)) for m in drop]
        self.content.start_calls = tuple(c for c in content_calls if not c.open)

        for i, r in enumerate(reasoning_defs):
            pairs: list[tuple[str, Any]] = [
                (m, ("goto", self.content)) for m in _as_list(r.get("close"))]
            if r.get("calls", "never") != "never":
                for c in content_calls:
                    pairs += [(m, ("call", c)) for m in c.open]
            pairs += [(m, ("drop",)) for m in drop]
            reasoning[i].exits = MarkerTable(pairs)
        for s in data.get("sections") or []:
            reg = sections[s["name"]]
            pairs = [(m, ("goto", self.content)) for m in _as_list(s.get("close"))]
            for c in self.calls:
                if s["name"] in c.regions:
                    pairs += [(m, ("call", c)) for m in c.open]
            pairs += [(m, ("drop",)) for m in drop]
            reg.exits = MarkerTable(pairs)
        # Where reasoning may hold calls (`calls: unclosed | always`), it may hold sections of
        # calls too: each such reasoning region gets its own copy of every section, closing
        # back into that reasoning; calls there are tentative like the reasoning's own.
        for i, r in enumerate(reasoning_defs):
            if r.get("calls", "never") == "never":
                continue
            extra: list[tuple[str, Any]] = []
            for s in data.get("sections") or []:
                inner = Region("section", f"{s['name']}@reasoning[{i}]")
                inner.noise = sections[s["name"]].noise
                inner.tentative = reasoning[i].tentative
                inner.text = "reasoning"
                pairs = [(m, ("goto", reasoning[i])) for m in _as_list(s.get("close"))]
                for c in self.calls:
                    if s["name"] in c.regions:
                        pairs += [(m, ("call", c)) for m in c.open]
                pairs += [(m, ("drop",)) for m in drop]
                inner.exits = MarkerTable(pairs)
                self.regions.append(inner)
                extra += [(m, ("goto", inner)) for m in _as_list(s.get("open"))]
            if extra:
                reasoning[i].exits = MarkerTable([*reasoning[i].exits.actions.items(), *extra])

        self.start = self.content
        self.messages: MessagesDef | None = None
        msg = data.get("messages")
        if msg:
            self._compile_messages(msg, drop, lenient, content_pairs)
        self.content.exits = MarkerTable(content_pairs)

        self.undecided: Region | None = None
        self.undecided_cut = "content"  # what undecided text cut off by max_tokens is
        for i, r in enumerate(reasoning_defs):
            if r.get("implicit"):
                self.undecided_cut = r.get("cut_off", "content")
                und = Region("undecided", "undecided")
                und.reasoning = reasoning[i]
                pairs = [(m, ("resolve", reasoning[i], ("goto", self.content)))
                         for m in _as_list(r.get("close"))]
                pairs += [(m, ("resolve", None, a)) for m, a in content_pairs]
                und.exits = MarkerTable(pairs)
                und.start_calls = self.content.start_calls
                self.undecided = und
                self.regions.append(und)
                break

    def _compile_messages(self, msg: dict[str, Any], drop: list[str], lenient: bool,
                          content_pairs: list[tuple[str, Any]]) -> None:
        m = MessagesDef()
        self.messages = m
        starts = _as_list(msg.get("start"))
        ends = _as_list(msg.get("end"))
        between = Region("between" if msg.get("outside", "drop") == "drop" else "content",
                         "between")
        self.regions.append(between)
        between.exits = MarkerTable([(s, ("header", m)) for s in starts] +
                                    [(d, ("drop",)) for d in drop])
        m.header_end = MarkerTable(
            [(h, "end") for h in _as_list(msg.get("header_end"))] +
            [(e, "abort") for e in ends] + [(s, "restart") for s in starts])
        for i, route in enumerate(msg.get("routes") or []):
            to = route.get("to")
            route_ends = _as_list(route.get("end")) or ends
            if to == "call":
                c = CallDef({"name": f"messages.routes[{i}]", "close": route_ends,
                             "payload": route.get("payload") or {"kind": "json"}}, i, lenient)
                c.regions = ()
                self.calls.append(c)
                m.routes.append(RouteDef(route["match"], c))
                continue
            kind = {"content": "content", "reasoning": "reasoning", "drop": "drop"}[to]
            body = Region(kind, f"messages.routes[{i}]")
            body.exits = MarkerTable([(e, ("goto", between)) for e in route_ends] +
                                     [(s, ("header", m)) for s in starts] +
                                     [(d, ("drop",)) for d in drop])
            self.regions.append(body)
            m.routes.append(RouteDef(route["match"], body))
        self.between = between
        self.start = between
        # the content region of a message format is only reached through routes
        content_pairs += [(s, ("header", m)) for s in starts]


def compile_dialect(rule_id: str, data: dict[str, Any]) -> Dialect:
    return Dialect(rule_id, data)


# ---------------------------------------------------------------- lint cross-checks

def check_rules(rs: Any, rep: Any, failed: set[tuple[str, str]]) -> None:
    from ..rules._lint import check_regex

    grammars = set(rs.grammars)
    for rid, rf in sorted(rs.files.get("dialect", {}).items()):
        if ("dialect", rid) in failed or not isinstance(rf.data, dict):
            continue
        data = rf.data
        if data.get("id") != rid:
            rep.error(rf, ("id",), f"dialect id {data.get('id')!r} must equal the file stem "
                      f"{rid!r}", "rule-id")
        section_names = {s.get("name") for s in data.get("sections") or []}
        for j, c in enumerate(data.get("calls") or []):
            base: tuple[Any, ...] = ("calls", j)
            payload = c.get("payload") or {}
            kind = payload.get("kind")
            if not c.get("open") and c.get("at") != "start":
                rep.error(rf, base, "a call without `open` markers needs `at: start` (it is "
                          "recognized at the start of the content)", "dialect-call-open")
            if c.get("at") == "start" and c.get("open"):
                rep.error(rf, base + ("at",), "`at: start` is for calls without an open "
                          "marker; remove `open` or `at`", "dialect-call-open")
            for name in _as_list(c.get("in")):
                if name != "content" and name not in section_names:
                    rep.error(rf, base + ("in",), f"no section named {name!r} (sections: "
                              f"{', '.join(sorted(n for n in section_names if n)) or 'none'})",
                              "dialect-section")
            header = c.get("header") or {}
            if header.get("pattern") and header.get("in_payload"):
                check_regex(rep, rf, base + ("header", "pattern"), header["pattern"])
            elif header.get("pattern"):
                _check_group(rep, rf, base + ("header", "pattern"), header["pattern"], "name",
                             "the header pattern")
            if isinstance(header.get("chars"), str):
                check_regex(rep, rf, base + ("header", "chars"), f"[{header['chars']}]")
            elif c.get("at") == "start" and header and not header.get("optional"):
                rep.error(rf, base + ("header",), "a call `at: start` with a header needs "
                          "`chars:` (the characters a header holds; the call begins with one)",
                          "dialect-call-open")
            _check_payload(rep, rf, base + ("payload",), payload, kind, grammars,
                           named=bool(header) and not header.get("in_payload"),
                           closed=bool(c.get("close")))
        msg = data.get("messages") or {}
        for j, route in enumerate(msg.get("routes") or []):
            base = ("messages", "routes", j)
            if route.get("to") == "call":
                _check_group(rep, rf, base + ("match",), route.get("match"), "name",
                             "a call route")
            else:
                check_regex(rep, rf, base + ("match",), route.get("match"))
                payload = route.get("payload") or {"kind": "json"}
                _check_payload(rep, rf, base + ("payload",), payload, payload.get("kind"),
                               grammars, named=True, closed=True)
        _check_marker_conflicts(rep, rf, data)


def _check_payload(rep: Any, rf: Any, base: tuple[Any, ...], payload: dict[str, Any],
                   kind: Any, grammars: set[str], named: bool, closed: bool) -> None:
    from ..rules._lint import check_regex

    if payload.get("head"):
        check_regex(rep, rf, base + ("head",), payload["head"])
    if payload.get("search") and kind != "grammar":
        rep.error(rf, base + ("search",), "`search` reads call lists inside a block of code: "
                  "it needs a grammar payload", "dialect-payload")
    if payload.get("rest") == "text" and closed:
        rep.error(rf, base + ("rest",), "`rest: text` is for calls without a close marker "
                  "(inside markers, text after the values makes the call malformed)",
                  "dialect-payload")
    if kind == "params" and not payload.get("param"):
        rep.error(rf, base, "a params payload needs `param:` (open, key_until, close)",
                  "dialect-payload")
    if kind == "params" and not named:
        rep.error(rf, base, "a params payload needs a header that names the tool",
                  "dialect-payload")
    if kind == "grammar":
        g = payload.get("grammar")
        if not g:
            rep.error(rf, base, "a grammar payload needs `grammar: <file>.lark`",
                      "dialect-payload")
        elif g not in grammars:
            rep.error(rf, base + ("grammar",), f"grammar {g!r} is not in grammars/ "
                      f"(have: {', '.join(sorted(grammars)) or 'none'})", "missing-grammar")
    if kind == "json" and not named and payload.get("fields") is None \
            and not payload.get("name_as_key"):
        rep.error(rf, base, "a JSON payload without a header must say where the name is: "
                  "`fields: {name: [name], arguments: [arguments]}` or `name_as_key: true`",
                  "dialect-payload")
    param = payload.get("param") or {}
    if param.get("key_pattern"):
        _check_group(rep, rf, base + ("param", "key_pattern"), param["key_pattern"], "key",
                     "the key pattern")


def _check_group(rep: Any, rf: Any, path: tuple[Any, ...], pattern: Any, group: str,
                 what: str) -> None:
    """The regex compiles, is safe, and has the named group the engine reads."""
    from ..rules._lint import check_regex

    rx = check_regex(rep, rf, path, pattern)
    if rx is not None and group not in rx.groupindex:
        rep.error(rf, path, f"{what} needs a (?P<{group}>...) group", "dialect-groups")


def _check_marker_conflicts(rep: Any, rf: Any, data: dict[str, Any]) -> None:
    """The same marker may not mean two things in the content region."""
    seen: dict[str, tuple[Any, ...]] = {}
    for i, r in enumerate(data.get("reasoning") or []):
        for m in _as_list(r.get("open")):
            seen.setdefault(m, ("reasoning", i, "open"))
    for i, s in enumerate(data.get("sections") or []):
        for m in _as_list(s.get("open")):
            if m in seen:
                rep.error(rf, ("sections", i, "open"), f"marker {m!r} is also used by "
                          f"{'.'.join(map(str, seen[m]))}", "dialect-marker-conflict")
            seen.setdefault(m, ("sections", i, "open"))
    for j, c in enumerate(data.get("calls") or []):
        if "content" not in (_as_list(c.get("in")) or ["content"]):
            continue
        for m in _as_list(c.get("open")):
            if m in seen and seen[m][0] != "calls":
                rep.error(rf, ("calls", j, "open"), f"marker {m!r} is also used by "
                          f"{'.'.join(map(str, seen[m]))}", "dialect-marker-conflict")
            seen.setdefault(m, ("calls", j, "open"))
