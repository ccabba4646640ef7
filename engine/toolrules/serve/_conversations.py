"""What each conversation's prompt kept of its last one - the share a server's prompt cache
can reuse - for the access log (`prefix_share`) and, once per conversation, a log line on
the turn that breaks it: where the prompts part, the text around it, and what caused it.

The prompt is what the upstream server renders: where the route knows the chat template
its server renders (asked at start), the proxy renders the request the same way; else
the request as sent stands for it (tools, then each message, as JSON). Kept per worker, in
memory, bounded by characters (least recently used conversations go first): nothing is
shared between workers or kept across restarts - a conversation whose last prompt is not
at hand is measured from its next turn on.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._jsonutil import dumps_compact
from .._types import Message
from ..chat_template._prefix import around, common_prefix
from ..providers._rules import get_path

__all__ = ["Conversations", "PrefixBreak", "PrefixSeen", "prompt_image"]

log = logging.getLogger("toolrules.serve")


@dataclass(frozen=True, slots=True)
class PrefixBreak:
    """Where a turn's prompt stopped extending the last one, and why."""

    at: int
    previous: str
    new: str
    cause: str


@dataclass(frozen=True, slots=True)
class PrefixSeen:
    """One request measured against its conversation's last one."""

    conversation: str
    share: float | None
    """The share of the last prompt kept as this one's prefix (None: the first turn seen)."""
    broke: PrefixBreak | None = None


@dataclass(slots=True)
class _Last:
    image: str
    client: tuple[str, ...]
    rewrites: tuple[str, ...]
    logged: bool


def _digest(m: Message) -> str:
    # the dataclass's repr holds every field that says what the message is (a call's
    # provider signature is left out), a few times faster than its JSON: a session's
    # every message is digested on every turn
    return hashlib.blake2b(repr(m).encode("utf-8", "backslashreplace"),
                           digest_size=12).hexdigest()


def prompt_image(body: Mapping[str, Any], messages_path: str, tools_path: str,
                 template: Any = None, bos: str = "", eos: str = "") -> str:
    """The prompt a server renders for `body`: the template rendered as servers render it
    (`template`: its source; a template that does not render stands for no prompt, ""),
    else the request's tools and messages, each as one JSON line."""
    if template is not None:
        from ..chat_template._render import TemplateRaised, render_request

        try:
            return render_request(template, body, bos_token=bos, eos_token=eos)
        except TemplateRaised:
            return ""
    tools = get_path(body, tools_path)
    messages = get_path(body, messages_path) or []
    lines = [dumps_compact(tools)] if tools else []
    lines.extend(dumps_compact(m) for m in messages)
    return "\n".join(lines)


class Conversations:
    """The last prompt of each conversation this worker served (at most `max_chars`
    characters in all).

    Conversations are found by their leading content (`key`: the system prompt and the
    first user message), and among those that share it - two sessions of one agent in one
    folder often do - by the messages the client sends again: a turn belongs to the one
    whose last request its messages extend the furthest. A request with no assistant turn
    yet opens a conversation."""

    _PER_KEY = 8  # conversations kept apart under one leading content

    def __init__(self, max_chars: int):
        self.max_chars = max_chars
        self._last: OrderedDict[tuple[str, int], _Last] = OrderedDict()
        # each key's slots, oldest first (a request looks only at its own key's few)
        self._slots: dict[str, list[tuple[str, int]]] = {}
        self._serial: dict[str, int] = {}
        self._chars = 0

    def _pop(self, slot: tuple[str, int]) -> _Last:
        last = self._last.pop(slot)
        self._chars -= len(last.image)
        slots = self._slots[slot[0]]
        slots.remove(slot)
        if not slots:
            del self._slots[slot[0]]
        return last

    def _match(self, cid: str, client: tuple[str, ...], lead: int) -> tuple[str, int] | None:
        """The conversation under `cid` this request continues: the one whose client
        messages it repeats the furthest - all of them, or past its first answer (`lead`:
        the messages before it)."""
        best, best_n = None, lead
        for slot in reversed(self._slots.get(cid, ())):  # the most recent first
            prior = self._last[slot].client
            n = 0
            while n < len(prior) and n < len(client) and prior[n] == client[n]:
                n += 1
            if n > best_n or (n == len(prior) and n >= best_n):
                best, best_n = slot, n
        return best

    def observe(self, key: bytes, image: str, messages: Sequence[Message],
                rewrites: Sequence[Mapping[str, Any]]) -> PrefixSeen:
        """Measure `image` (this request's prompt) against the conversation's last one and
        keep it in its place. `messages`: the conversation as the client sent it (client
        metadata taken out); `rewrites`: what the proxy changed, for the cause."""
        cid = key.hex()[:12]
        client = tuple(_digest(m) for m in messages)
        done = tuple(sorted(json.dumps(r, sort_keys=True, default=str) for r in rewrites))
        lead = next((i for i, m in enumerate(messages) if m.role == "assistant"), None)
        slot = self._match(cid, client, lead) if lead is not None else None
        last = self._pop(slot) if slot is not None else None
        if last is None:  # a conversation opens (or one whose last prompt is not at hand)
            serial = self._serial.get(cid, 0) + 1
            self._serial[cid] = serial
            slot = (cid, serial)
            same = list(self._slots.get(cid, ()))
            for old in same[:max(0, len(same) + 1 - self._PER_KEY)]:
                self._pop(old)
        assert slot is not None
        name = cid if slot[1] == 1 else f"{cid}-{slot[1]}"
        logged = last.logged if last is not None else False
        seen = PrefixSeen(name, None)
        if last is not None and last.image and image:
            kept = common_prefix(last.image, image)
            share = kept / len(last.image)
            broke = None
            if kept < len(last.image):
                broke = PrefixBreak(kept, around(last.image, kept), around(image, kept),
                                    self._cause(last, client, rewrites, done))
            seen = PrefixSeen(name, share, broke)
            if broke is not None and not logged:
                logged = True
                log.warning("conversation %s: this turn's prompt keeps %.1f %% of the last "
                            "one (a server's cache reuses only that much); first difference "
                            "at char %d: previous %s | new %s; cause: %s (logged once per "
                            "conversation)", name, 100 * share, kept, broke.previous,
                            broke.new, broke.cause)
        if self.max_chars > 0 and len(image) <= self.max_chars:
            self._last[slot] = _Last(image, client, done, logged)
            self._slots.setdefault(cid, []).append(slot)
            self._chars += len(image)
            while self._chars > self.max_chars and self._last:
                self._pop(next(iter(self._last)))  # the least recent
        return seen

    @staticmethod
    def _cause(last: _Last, client: tuple[str, ...], rewrites: Sequence[Mapping[str, Any]],
               done: tuple[str, ...]) -> str:
        """What changed the earlier part of the prompt: the client's own messages, a
        rewrite the proxy made this time and not the last, or the chat template."""
        n = len(last.client)
        for i, (a, b) in enumerate(zip(last.client, client, strict=False)):
            if a != b:
                return f"the client sent messages[{i}] changed since its last request"
        if len(client) < n:
            return f"the client sent {n - len(client)} message(s) fewer than its last request"
        new = [r for r, key in zip(rewrites, (json.dumps(r, sort_keys=True, default=str)
                                              for r in rewrites), strict=True)
               if key not in done and any(i < n for i in r.get("messages") or ())]
        if new:
            r = new[0]
            where = ", ".join(f"messages[{i}]" for i in r.get("messages") or ())
            return f"the proxy's rewrite {r.get('action')} ({where}): {r.get('why')}"
        return ("the chat template renders earlier turns differently as the conversation "
                "grows (run `toolrules inspect --template` on it: its prompt-prefix probes "
                "say what moves and what keeps it)")
