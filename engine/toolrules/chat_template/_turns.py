"""A conversation fitted to the turn constraints of the model's own chat template.

A server that renders the model's chat template (llama-server --jinja, vLLM, LM Studio,
Ollama ...) hands the messages to Jinja written by the model's makers, and many of those
templates refuse or silently drop what coding agents send: a system message after the
first, two leading system messages, two user turns in a row, an assistant turn with calls
and no content, text beside calls, calls in the history. The capability's `turn_*` fields
say what a model's template takes (rules/models); `normalize_turns` rewrites a
conversation to fit them and never drops text: every text the client sent stands in a
message the template renders. Each rewrite is recorded as a `TurnRewrite` (the access
log, the trace and `toolrules request --explain` show them).

The steps, in order (each only when its constraint asks for it):
1. calls and results the template cannot take are written as text in the model's own
   format (no tool role, calls not rendered in the history, text beside calls dropped
   where turns must alternate);
2. text the template drops beside calls moves into its own assistant turn before them;
   a message with more calls than the template takes becomes several, each followed by
   its results;
3. tool results move right after the turn that made the calls;
4. system texts move where the template takes them: several leading ones join the first;
   one that arrives after the conversation started stays where it arrived - a wrapped
   block in the next user turn (turn_system_stable, the default: the start of the prompt,
   which a server's cache holds, never changes) - or joins the first system message where
   a rule asks for that; with no system role, every system text is such a block;
5. user and assistant turns alternate: consecutive turns of one role merge, a user turn
   opens the conversation;
6. an assistant turn with calls gets the content field its template reads;
7. call ids take the form the template reads (last: the index counts the calls the
   template renders, after steps 1-2 wrote some as text or split them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .._types import Capability, ContentPart, Message, ToolCall

__all__ = ["TurnRewrite", "Turns", "is_permissive", "normalize_turns", "violations"]


@dataclass(frozen=True, slots=True)
class TurnRewrite:
    """One change made to fit a template: what was done to which messages, and why.

    `messages` are positions in the conversation as it was given (0-based)."""

    action: str
    messages: tuple[int, ...]
    why: str

    def describe(self) -> str:
        where = ", ".join(f"messages[{i}]" for i in self.messages)
        return f"{self.action} ({where}): {self.why}"

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "messages": list(self.messages), "why": self.why}


@dataclass(frozen=True, slots=True)
class Turns:
    """A conversation fitted to a model's turn constraints, and the rewrites made."""

    messages: tuple[Message, ...]
    rewrites: tuple[TurnRewrite, ...] = ()


@dataclass(slots=True)
class _Slot:
    """A message being rewritten and the positions of the messages it came from."""

    m: Message
    origin: tuple[int, ...] = field(default_factory=tuple)


# Why each constraint rewrites (the capability field named, so a reader can find the rule).
_WHY = {
    "no-tool-role": "the template has no tool role (turn_roles): results are written as "
                    "user text, the calls they answer as text in the model's format",
    "history-calls": "the template does not render earlier calls (turn_history_calls: "
                     "false): they are written as text in the model's format",
    "text-with-calls": "the template drops text written beside calls "
                       "(turn_text_with_calls: false)",
    "call-ids": "the template writes a call's id where its name belongs: ids take the "
                "form it reads (turn_call_ids)",
    "calls-per-message": "the template takes one call per assistant message "
                         "(turn_calls_per_message)",
    "results-follow": "tool results must directly follow the turn that made the calls "
                      "(turn_results_follow_calls)",
    "orphan-result": "no earlier turn made this call, and results must follow their calls "
                     "(turn_results_follow_calls): written as user text",
    "system-first": "the template takes one system message, as the first message "
                    "(turn_system: first)",
    "system-leading": "the template takes system messages only before all others "
                      "(turn_system: leading)",
    "system-none": "the template has no system role (turn_system: none)",
    "system-stable": "a system text that arrives after the conversation started stays where "
                     "it arrived, so the start of the prompt never changes "
                     "(turn_system_stable)",
    "alternate": "user turns and assistant turns without calls must alternate, a user "
                 "turn first (turn_alternate)",
    "content": "the template reads the content of an assistant turn with calls "
               "(turn_content_required)",
}


def is_permissive(cap: Capability) -> bool:
    """True when the constraints ask for no rewrite at all."""
    return (cap.turn_system == "anywhere" and not cap.turn_alternate
            and "tool" in cap.turn_roles and cap.turn_history_calls
            and cap.turn_text_with_calls and not cap.turn_results_follow_calls
            and not cap.turn_content_required and not cap.turn_calls_per_message
            and not cap.turn_call_ids)


def normalize_turns(messages: Sequence[Message], cap: Capability, *,
                    calls_as_text: Callable[[list[Message]], list[Message]],
                    system_block: Callable[[str], str], join: str = "\n\n") -> Turns:
    """`messages` fitted to `cap`'s turn constraints (see the module docstring).

    `calls_as_text(group)` writes an assistant turn with calls and its results as text
    turns in the model's format (the emulated history); `system_block(text)` wraps a
    system text carried in a user turn."""
    if is_permissive(cap):
        return Turns(tuple(messages))
    n = _Normalizer(cap, calls_as_text, system_block, join)
    slots = [_Slot(m, (i,)) for i, m in enumerate(messages)]
    slots = n.calls_and_results(slots)
    slots = n.text_beside_calls(slots)
    slots = n.calls_per_message(slots)
    slots = n.results_after_calls(slots)
    slots = n.systems(slots)
    slots = n.alternate(slots)
    slots = n.content(slots)
    slots = n.call_ids(slots)  # last: the index counts the calls the template renders
    return Turns(tuple(s.m for s in slots), tuple(n.rewrites))


class _Normalizer:
    def __init__(self, cap: Capability, calls_as_text: Callable[[list[Message]], list[Message]],
                 system_block: Callable[[str], str], join: str):
        self.cap = cap
        self.to_text = calls_as_text
        self.block = system_block
        self.join = join
        self.rewrites: list[TurnRewrite] = []

    def record(self, action: str, origin: Sequence[int], why: str) -> None:
        self.rewrites.append(TurnRewrite(action, tuple(sorted(set(origin))), _WHY[why]))

    # ------------------------------------------------------------ 7. call ids

    def call_ids(self, slots: list[_Slot]) -> list[_Slot]:
        """The history's call ids in the form the template takes (results keep matching)."""
        pattern = self.cap.turn_call_ids
        if not pattern:
            return slots
        index = 0
        renamed: dict[str, str] = {}
        changed: list[int] = []
        for s in slots:
            m = s.m
            if m.role == "assistant" and m.tool_calls:
                calls = []
                for c in m.tool_calls:
                    new = _call_id(pattern, c.name, index)
                    index += 1
                    if c.id:
                        renamed[c.id] = new
                    calls.append(c if c.id == new else ToolCall(new, c.name, c.arguments))
                if tuple(calls) != m.tool_calls:
                    s.m = replace(m, tool_calls=tuple(calls))
                    changed.extend(s.origin)
            elif m.role == "tool" and m.tool_call_id in renamed and \
                    renamed[m.tool_call_id] != m.tool_call_id:
                s.m = replace(m, tool_call_id=renamed[m.tool_call_id])
                changed.extend(s.origin)
        if changed:
            self.record("call-ids-rewritten", changed, "call-ids")
        return slots

    # ------------------------------------------------------------ 1. calls as text

    def calls_and_results(self, slots: list[_Slot]) -> list[_Slot]:
        cap = self.cap
        if "tool" not in cap.turn_roles:
            why = "no-tool-role"
        elif not cap.turn_history_calls:
            why = "history-calls"
        else:
            return slots
        return self._as_text(slots, lambda s: True, why)

    def _as_text(self, slots: list[_Slot], pick: Callable[[_Slot], bool],
                 why: str) -> list[_Slot]:
        """Every picked assistant turn with calls, and the results that follow it (and
        results no turn before them made), written as text turns; the results of a calls
        turn kept native stay native."""
        out: list[_Slot] = []
        i = 0
        while i < len(slots):
            s = slots[i]
            calls = s.m.role == "assistant" and bool(s.m.tool_calls) and pick(s)
            native = bool(out) and (out[-1].m.role == "tool" or bool(out[-1].m.tool_calls))
            if not calls and (s.m.role != "tool" or native):
                out.append(s)  # not picked, or a result of a turn kept native
                i += 1
                continue
            j = _results_end(slots, i + 1)
            out.extend(self._written(slots[i:j], why))
            i = j
        return out

    def _written(self, group: list[_Slot], why: str) -> list[_Slot]:
        """An assistant turn with calls and its results - or results alone - as the text
        turns `calls_as_text` writes: the assistant's text, then one turn for the results."""
        head = group[0].origin if group[0].m.role == "assistant" else ()
        results = tuple(k for g in group if g.m.role == "tool" for k in g.origin)
        if head:
            self.record("calls-as-text", head, why)
        if results:
            self.record("results-as-text", results, why)
        return [_Slot(m, head if m.role == "assistant" and head else results or head)
                for m in self.to_text([g.m for g in group])]

    # ------------------------------------------------------------ 2. text beside calls

    def text_beside_calls(self, slots: list[_Slot]) -> list[_Slot]:
        if self.cap.turn_text_with_calls:
            return slots
        if self.cap.turn_alternate:  # a turn of its own would break alternation
            return self._as_text(slots, lambda s: bool(_text(s.m.content).strip()),
                                 "text-with-calls")
        out: list[_Slot] = []
        for s in slots:
            m = s.m
            if m.role == "assistant" and m.tool_calls and _text(m.content).strip():
                out.append(_Slot(Message("assistant", m.content,
                                         reasoning_content=m.reasoning_content), s.origin))
                out.append(_Slot(Message("assistant", None, m.tool_calls), s.origin))
                self.record("text-split-from-calls", s.origin, "text-with-calls")
            else:
                out.append(s)
        return out

    # ------------------------------------------------------------ 2b. calls per message

    def calls_per_message(self, slots: list[_Slot]) -> list[_Slot]:
        """An assistant message with more calls than the template takes becomes several,
        each followed by the results of its own calls (found among the results right
        after the message)."""
        most = self.cap.turn_calls_per_message
        if not most:
            return slots
        out: list[_Slot] = []
        i = 0
        while i < len(slots):
            s = slots[i]
            m = s.m
            if m.role != "assistant" or len(m.tool_calls) <= most:
                out.append(s)
                i += 1
                continue
            j = _results_end(slots, i + 1)
            results = slots[i + 1:j]
            used: set[int] = set()
            calls = m.tool_calls
            for k in range(0, len(calls), most):
                part = calls[k:k + most]
                first = k == 0
                out.append(_Slot(Message("assistant", m.content if first else None, part,
                                         reasoning_content=m.reasoning_content if first
                                         else None), s.origin))
                ids = {c.id for c in part if c.id}
                for n, r in enumerate(results):
                    if n not in used and r.m.tool_call_id in ids:
                        out.append(r)
                        used.add(n)
            out.extend(r for n, r in enumerate(results) if n not in used)
            self.record("calls-split", s.origin, "calls-per-message")
            i = j
        return out

    # ------------------------------------------------------------ 3. results after calls

    def results_after_calls(self, slots: list[_Slot]) -> list[_Slot]:
        if not self.cap.turn_results_follow_calls:
            return slots
        out: list[_Slot] = []
        placed: set[int] = set()
        by_id: dict[str, int] = {}
        for k, s in enumerate(slots):
            if s.m.role == "tool" and s.m.tool_call_id:
                by_id.setdefault(s.m.tool_call_id, k)
        for k, s in enumerate(slots):
            if k in placed:
                continue
            m = s.m
            if m.role == "tool":
                # a result that no earlier turn asked for: text the template can take
                out.extend(self._written([s], "orphan-result"))
                placed.add(k)
                continue
            out.append(s)
            placed.add(k)
            if m.role != "assistant" or not m.tool_calls:
                continue
            taken: list[int] = []  # the results of these calls, in call order
            for c in m.tool_calls:
                r = by_id.get(c.id or "")
                if r is not None and r not in placed and r > k:
                    taken.append(r)
            for r in taken:
                out.append(slots[r])
                placed.add(r)
            if taken != list(range(k + 1, k + 1 + len(taken))):
                self.record("results-moved", [i for r in taken for i in slots[r].origin],
                            "results-follow")
        return out

    # ------------------------------------------------------------ 4. system texts

    def systems(self, slots: list[_Slot]) -> list[_Slot]:
        mode = self.cap.turn_system
        if mode == "anywhere":
            return slots
        stable = self.cap.turn_system_stable
        lead = 0
        while lead < len(slots) and slots[lead].m.role == "system":
            lead += 1
        carried: list[tuple[int, _Slot, str]] = []  # (position, system slot, why)
        out: list[_Slot] = []
        first: _Slot | None = None
        for k, s in enumerate(slots):
            if s.m.role != "system":
                out.append(s)
                continue
            if mode == "none":
                carried.append((len(out), s, "system-none"))
            elif k < lead and (k == 0 or mode == "leading"):
                first = first or s
                out.append(s)
            elif k < lead:  # mode first: a second leading system message - the
                # conversation has not started, so joining the first changes no prompt
                assert first is not None
                self._fold(first, s, "system-first")
            elif first is not None and not stable:
                self._fold(first if mode == "first" else out[lead - 1], s,
                           "system-first" if mode == "first" else "system-leading")
            elif first is None and not stable:
                out.insert(0, _Slot(s.m, s.origin))  # the only system text: to the front
                first = out[0]
                lead = 1
                self.record("system-moved-to-start", s.origin,
                            "system-first" if mode == "first" else "system-leading")
            else:
                carried.append((len(out), s, "system-stable"))
        for pos, s, why in reversed(carried):
            self._carry(out, pos, s, why)
        return out

    def _fold(self, into: _Slot, s: _Slot, why: str) -> None:
        into.m = replace(into.m, content=_join(into.m.content, s.m.content, self.join))
        into.origin = (*into.origin, *s.origin)
        self.record("system-folded", (*into.origin[:1], *s.origin), why)

    def _carry(self, out: list[_Slot], pos: int, s: _Slot, why: str) -> None:
        """A system text as a wrapped block in a user turn. One that came after the
        conversation started stays where it arrived, so its rendering never depends on
        what comes after it: a user turn of its own there - or, where turns must
        alternate, joined to the user turn right before it, else to the one right after
        it. One at the start goes into the first user turn. Never between calls and
        their results."""
        block = self.block(_text(s.m.content))
        while pos < len(out) and out[pos].m.role == "tool":
            pos += 1
        if pos > 0:
            prev = out[pos - 1]
            if not self.cap.turn_alternate:
                out.insert(pos, _Slot(Message("user", block), s.origin))
                self.record("system-to-new-user-turn", s.origin, why)
                return
            if prev.m.role == "user":
                prev.m = replace(prev.m, content=_join(prev.m.content, block, self.join))
                prev.origin = (*prev.origin, *s.origin)
                self.record("system-to-user-turn", (*s.origin, *prev.origin[:1]), why)
                return
            if pos < len(out) and out[pos].m.role != "user":
                out.insert(pos, _Slot(Message("user", block), s.origin))
                self.record("system-to-new-user-turn", s.origin, why)
                return
        for k in range(pos, len(out)):
            u = out[k]
            if u.m.role == "user":
                u.m = replace(u.m, content=_join(block, u.m.content, self.join))
                u.origin = (*u.origin, *s.origin)
                self.record("system-to-user-turn", (*s.origin, *u.origin[:1]), why)
                return
        out.append(_Slot(Message("user", block), s.origin))
        self.record("system-to-new-user-turn", s.origin, why)

    # ------------------------------------------------------------ 5. alternation

    def alternate(self, slots: list[_Slot]) -> list[_Slot]:
        """User turns and assistant turns without calls alternate, a user turn first. An
        assistant turn with calls and its results stand between them freely (templates
        that have a tool role check alternation on the other turns); a text turn right
        before a calls turn joins it, where the template renders text beside calls."""
        if not self.cap.turn_alternate:
            return slots
        joined: list[_Slot] = []
        for s in slots:
            prev = joined[-1] if joined else None
            if prev is not None and s.m.role == "assistant" and s.m.tool_calls and \
                    prev.m.role == "assistant" and not prev.m.tool_calls and \
                    self.cap.turn_text_with_calls:
                prev.m = _merge(prev.m, s.m, self.join)
                prev.origin = (*prev.origin, *s.origin)
                self.record("merged", prev.origin, "alternate")
                continue
            joined.append(s)
        out: list[_Slot] = []
        last: _Slot | None = None  # the last counted turn
        for s in joined:
            role = s.m.role
            if role in ("system", "tool") or (role == "assistant" and s.m.tool_calls):
                out.append(s)
                continue
            if last is None and role == "assistant":
                last = _Slot(Message("user", ""), s.origin)
                out.append(last)
                self.record("user-turn-added", s.origin, "alternate")
            if last is not None and last.m.role == role:
                if out[-1] is last:  # right after a turn of its own role: one turn
                    last.m = _merge(last.m, s.m, self.join)
                    last.origin = (*last.origin, *s.origin)
                    self.record("merged", last.origin, "alternate")
                    continue
                # calls and results stand between two turns of one role: an empty turn of
                # the other role keeps the order of what was said
                filler = Message("assistant" if role == "user" else "user", "")
                out.append(_Slot(filler, s.origin))
                self.record(f"{filler.role}-turn-added", s.origin, "alternate")
            out.append(s)
            last = s
        return out

    # ------------------------------------------------------------ 6. content

    def content(self, slots: list[_Slot]) -> list[_Slot]:
        if not self.cap.turn_content_required:
            return slots
        for s in slots:
            if s.m.role == "assistant" and s.m.tool_calls and s.m.content is None:
                s.m = replace(s.m, content="")
                self.record("content-added", s.origin, "content")
        return slots


# ---------------------------------------------------------------- checking

def violations(messages: Sequence[Message], cap: Capability) -> list[str]:
    """What in `messages` breaks `cap`'s turn constraints (empty: the conversation fits).
    normalize_turns' output never breaks them; golden regeneration and the tests check."""
    out: list[str] = []
    systems = [i for i, m in enumerate(messages) if m.role == "system"]
    mode = cap.turn_system
    if mode == "none" and systems:
        out.append(f"messages[{systems[0]}]: a system message (turn_system: none)")
    elif mode == "first" and (len(systems) > 1 or (systems and systems[0] != 0)):
        out.append(f"system messages at {systems} (turn_system: first)")
    elif mode == "leading" and systems != list(range(len(systems))):
        out.append(f"system messages at {systems} (turn_system: leading)")
    for i, m in enumerate(messages):
        calls = m.role == "assistant" and bool(m.tool_calls)
        if m.role == "tool" and "tool" not in cap.turn_roles:
            out.append(f"messages[{i}]: a tool result (turn_roles has no tool)")
        if calls and not cap.turn_history_calls:
            out.append(f"messages[{i}]: calls in the history (turn_history_calls: false)")
        if calls and not cap.turn_text_with_calls and _text(m.content).strip():
            out.append(f"messages[{i}]: text beside calls (turn_text_with_calls: false)")
        if calls and cap.turn_calls_per_message and \
                len(m.tool_calls) > cap.turn_calls_per_message:
            out.append(f"messages[{i}]: {len(m.tool_calls)} calls in one message "
                       "(turn_calls_per_message)")
        if calls and cap.turn_content_required and m.content is None:
            out.append(f"messages[{i}]: calls without content (turn_content_required)")
    if cap.turn_call_ids:
        index = 0
        for i, m in enumerate(messages):
            for c in m.tool_calls:
                want = _call_id(cap.turn_call_ids, c.name, index)
                index += 1
                if c.id != want:
                    out.append(f"messages[{i}]: call id {c.id!r}, not {want!r} "
                               "(turn_call_ids)")
    if cap.turn_results_follow_calls:
        owner: Message | None = None
        for i, m in enumerate(messages):
            if m.role == "assistant" and m.tool_calls:
                owner = m
            elif m.role == "tool":
                ids = {c.id for c in owner.tool_calls} if owner is not None else set()
                if m.tool_call_id not in ids:
                    out.append(f"messages[{i}]: a result away from its call "
                               "(turn_results_follow_calls)")
            else:
                owner = None
    if cap.turn_alternate:
        counted = [(i, m.role) for i, m in enumerate(messages)
                   if m.role == "user" or (m.role == "assistant" and not m.tool_calls)]
        for k, (i, role) in enumerate(counted):
            if role != ("user" if k % 2 == 0 else "assistant"):
                out.append(f"messages[{i}]: {role} out of turn (turn_alternate)")
                break
    return out


# ---------------------------------------------------------------- content helpers

def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "".join(p.text or "" if isinstance(p, ContentPart) else
                       (p if isinstance(p, str) else "") for p in content)
    return str(content)


def _parts(content: Any) -> tuple[Any, ...]:
    if content is None or content == "":
        return ()
    if isinstance(content, (list, tuple)):
        return tuple(content)
    return (ContentPart("text", text=content if isinstance(content, str) else str(content)),)


def _join(a: Any, b: Any, sep: str) -> Any:
    """Two contents as one: text joined by `sep`; media parts kept in order."""
    if (a is None or isinstance(a, str)) and (b is None or isinstance(b, str)):
        return sep.join(x for x in (a, b) if x) if (a or b) else a if b is None else b
    left, right = _parts(a), _parts(b)
    if left and right:
        return (*left, ContentPart("text", text=sep), *right)
    return left or right


def _call_id(pattern: str, name: str, index: int) -> str:
    """A call id in the form `turn_call_ids` gives ({name}, {index})."""
    return pattern.replace("{name}", name).replace("{index}", str(index))


def _results_end(slots: list[_Slot], i: int) -> int:
    """Where the run of tool results starting at `slots[i]` ends."""
    while i < len(slots) and slots[i].m.role == "tool":
        i += 1
    return i


def _merge(a: Message, b: Message, sep: str) -> Message:
    """Two consecutive turns of one role as one: texts joined, calls kept in order."""
    reasoning = "\n\n".join(x for x in (a.reasoning_content, b.reasoning_content) if x) or None
    return Message(a.role, _join(a.content, b.content, sep), (*a.tool_calls, *b.tool_calls),
                   a.tool_call_id, a.name, reasoning, a.is_error)
