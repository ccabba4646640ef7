"""The proxy measures what each turn's prompt keeps of its conversation's last one - what
a server's prompt cache reuses: `prefix_share` in the access log, and once per
conversation a warning on the turn that breaks it (where, the text around it, what
caused it). Real HTTP on loopback: the official SDKs against `toolrules serve` in front
of a llama-server-like upstream that renders a chat template (tests/props_server.py)."""

from __future__ import annotations

import logging
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolrules

pytest.importorskip("starlette")

sys.path.insert(0, str(Path(__file__).parent))
from props_server import PropsServer
from serve_helpers import ProxyServer, an, oa
from toolrules.serve._conversations import Conversations

MODEL = "prefix-model"  # no family rule knows it: the template configures the route

CHATML = textwrap.dedent("""
    {%- if tools %}<|im_start|>system
    {{ tools | tojson }}<|im_end|>
    {% endif %}
    {%- for m in messages %}<|im_start|>{{ m.role }}
    {{ m.content or '' }}<|im_end|>
    {% endfor %}
    {%- if add_generation_prompt %}<|im_start|>assistant
    {% endif %}
""").strip("\\n")

# what a template does that nothing fixes: the turn count first, so every turn moves it
COUNTING = "{{ messages | length }} turns\n" + CHATML


@pytest.fixture(scope="module")
def engine():
    return toolrules.load(use_env=False, cache=False)


def _turns(client, n: int) -> list[list[dict]]:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi."}]
    out = [list(msgs)]
    for i in range(n - 1):
        msgs += [{"role": "assistant", "content": f"Answer {i}."},
                 {"role": "user", "content": f"Question {i}?"}]
        out.append(list(msgs))
    for m in out:
        client.chat.completions.create(model=MODEL, messages=m)
    return out


def test_each_turn_logs_the_share_of_the_last_prompt_it_keeps(engine, access, caplog):
    caplog.set_level(logging.INFO, logger="toolrules.serve")
    with PropsServer(CHATML, replies=["ok"] * 3) as up, \
            ProxyServer(upstream="llamacpp", base_url=up.url + "/v1", engine=engine) as proxy:
        _turns(oa(proxy), 3)
    posts = [a for a in access() if a.get("method") == "POST"]
    assert len(posts) == 3 and len({a["conversation"] for a in posts}) == 1
    assert "prefix_share" not in posts[0]  # the first turn has nothing to keep
    assert [a["prefix_share"] for a in posts[1:]] == [1.0, 1.0]
    assert up.prompts[2].startswith(up.prompts[1]) and up.prompts[1].startswith(up.prompts[0])
    assert not [r for r in caplog.records if "keeps" in r.getMessage()]


def test_a_template_that_moves_text_is_logged_once_with_where_and_why(engine, access, caplog):
    caplog.set_level(logging.INFO, logger="toolrules.serve")
    with PropsServer(COUNTING, replies=["ok"] * 3) as up, \
            ProxyServer(upstream="llamacpp", base_url=up.url + "/v1", engine=engine) as proxy:
        _turns(oa(proxy), 3)
    posts = [a for a in access() if a.get("method") == "POST"]
    shares = [a["prefix_share"] for a in posts[1:]]
    assert all(0 <= s < 0.1 for s in shares), shares  # it parts at the first line
    # the share is of the prompt the server rendered
    assert not up.prompts[1].startswith(up.prompts[0])
    warned = [r.getMessage() for r in caplog.records if "keeps" in r.getMessage()]
    assert len(warned) == 1, warned  # once per conversation
    text = warned[0]
    assert f"conversation {posts[0]['conversation']}" in text
    assert "first difference at char 0" in text
    assert '"2 turns' in text and '"4 turns' in text
    assert "the chat template renders earlier turns differently" in text


def test_a_client_that_changes_an_earlier_message_is_named_as_the_cause(engine, access,
                                                                      caplog):
    caplog.set_level(logging.INFO, logger="toolrules.serve")
    with PropsServer(CHATML, replies=["ok"] * 2) as up, \
            ProxyServer(upstream="llamacpp", base_url=up.url + "/v1", engine=engine) as proxy:
        client = an(proxy)
        first = [{"role": "user", "content": "Hi."}]
        client.messages.create(model=MODEL, max_tokens=50, system="Be brief.", messages=first)
        client.messages.create(model=MODEL, max_tokens=50, system="Be brief.", messages=[
            {"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "And?"}])
        client.messages.create(model=MODEL, max_tokens=50, system="Be brief.", messages=[
            {"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "And? (edited by the client)"},
            {"role": "assistant", "content": "x"}, {"role": "user", "content": "More?"}])
    posts = [a for a in access() if a.get("method") == "POST"]
    assert posts[1]["prefix_share"] == 1.0  # the first prompt grew
    assert posts[2]["prefix_share"] < 1.0
    [text] = [r.getMessage() for r in caplog.records if "keeps" in r.getMessage()]
    # (positions count the system prompt first, as the rewrites in the access log do)
    assert "cause: the client sent messages[3] changed since its last request" in text


def test_conversations_are_told_apart_and_memory_is_bounded():
    from toolrules._types import Message

    conv = Conversations(max_chars=100)
    a = [Message("system", "S"), Message("user", "one")]
    a2 = [*a, Message("assistant", "A"), Message("user", "two")]
    b = [Message("system", "S"), Message("user", "other")]
    first = conv.observe(b"a" * 16, "x" * 60, a, [])
    assert first.share is None
    assert conv.observe(b"b" * 16, "y" * 60, b, []).share is None  # evicts a
    assert conv.observe(b"a" * 16, "x" * 70, a2, []).share is None  # a was forgotten
    again = conv.observe(b"a" * 16, "x" * 70 + "z", [*a2, Message("user", "3")], [])
    assert again.share == 1.0 and again.conversation.startswith((b"a" * 16).hex()[:12])
    assert conv.observe(b"c" * 16, "c" * 101, a, []).share is None  # too big to keep
    assert sum(len(v.image) for v in conv._last.values()) <= 100


def test_conversations_that_share_their_opening_are_kept_apart():
    """Two sessions of one agent in one folder open alike (Codex: the same instructions
    and environment message): each later turn goes with the session it continues."""
    from toolrules._types import Message

    conv = Conversations(max_chars=10_000)
    head = [Message("system", "S"), Message("user", "<environment_context/>")]
    one = [*head, Message("user", "List the files.")]
    two = [*head, Message("user", "Show me the files.")]
    s1 = conv.observe(b"k" * 16, "P1", one, [])
    s2 = conv.observe(b"k" * 16, "P2", two, [])  # a new conversation, not a turn of one
    assert s1.share is None and s2.share is None and s1.conversation != s2.conversation
    t1 = conv.observe(b"k" * 16, "P1+a", [*one, Message("assistant", "ok"),
                                          Message("user", "more")], [])
    t2 = conv.observe(b"k" * 16, "P2+b", [*two, Message("assistant", "ok"),
                                          Message("user", "more")], [])
    assert (t1.conversation, t1.share) == (s1.conversation, 1.0)
    assert (t2.conversation, t2.share) == (s2.conversation, 1.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), st.integers(0, 30)),
                min_size=1, max_size=40))
def test_each_key_finds_its_own_conversations_among_many(steps):
    """Each key's conversations are found among its own few (not by walking every one
    kept), in recency order, within the memory bound - whatever the sequence."""
    from toolrules._types import Message

    conv = Conversations(max_chars=120)
    for key, turn, size in steps:
        msgs = [Message("user", f"open {key}")]
        for i in range(turn):
            msgs += [Message("assistant", f"a{i}"), Message("user", f"u{i}")]
        conv.observe(bytes([key]) * 16, f"{key}:" + "x" * (size + 2 * turn), msgs, [])
        assert conv._chars == sum(len(v.image) for v in conv._last.values()) <= 120
        kept = [slot for slot in conv._last]
        assert sorted(s for slots in conv._slots.values() for s in slots) == sorted(kept)
        for cid, slots in conv._slots.items():  # oldest first, as kept
            assert slots == [s for s in kept if s[0] == cid]
            assert 0 < len(slots) <= conv._PER_KEY


def test_prefix_memory_zero_turns_the_measure_off(engine, access, tmp_path):
    config = textwrap.dedent("""
        server: {prefix_memory: 0}
        routes:
          - pattern: '.*'
            upstream: {provider: llamacpp, base_url: 'URL/v1'}
    """)
    with PropsServer(CHATML, replies=["ok"] * 2) as up, \
            ProxyServer(config=config.replace("URL", up.url), tmp=tmp_path,
                        engine=engine) as proxy:
        _turns(oa(proxy), 2)
    posts = [a for a in access() if a.get("method") == "POST"]
    assert len(posts) == 2
    assert not any("prefix_share" in a or "conversation" in a for a in posts)
