"""Conversations fitted to the model's own chat template.

The templates in tests/chat_templates/ each reproduce one documented behaviour of a public
template (a system-position guard, single-system rendering, an alternation guard, no tool
role, content read on call turns, text beside calls or calls in the history not rendered).
The agent fixtures (tests/turn_fixtures.py) are what Claude Code, Codex and OpenAI chat
clients send. Rendered as llama-server renders them, unnormalized requests are refused or
lose text; normalized, every fixture renders on every template with every text the client
sent in the prompt - directly, and through `toolrules serve` over real HTTP.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

import toolrules
from toolrules import Message, ToolCall
from toolrules.chat_template._render import TemplateRaised, render_chat_template
from toolrules.chat_template._turns import violations
from turn_fixtures import FIXTURES, texts
from wire_server import Reply, WireServer, json_reply, sse_reply

TEMPLATES = Path(__file__).parent / "chat_templates"
CONSTRAINTS: dict[str, dict[str, Any]] = yaml.safe_load(
    (TEMPLATES / "constraints.yaml").read_text(encoding="utf-8"))
NAMES = sorted(CONSTRAINTS)


def _family(name: str, native: bool) -> str:
    """A test family whose variants are the test templates, with their constraints."""
    # ids are normalized before matching (`_` reads `-`)
    clauses = [{"when": {"variant": t.replace("_", "-")}, "set": dict(c)}
               for t, c in CONSTRAINTS.items() if c]
    defaults: dict[str, Any] = {"native_tools": native, "parallel_tools": True}
    if native:
        defaults["dialect"] = "hermes"
    return yaml.safe_dump({
        "family": name, "description": f"test family ({'native' if native else 'emulated'} "
                                       "tools): one variant per test chat template",
        "match": [f"^{name}-(?P<variant>[a-z-]+)$"], "defaults": defaults,
        "capabilities": clauses}, sort_keys=False)


@pytest.fixture(scope="module")
def eng(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("turn-rules")
    (root / "models").mkdir()
    (root / "models" / "tmplnative.yaml").write_text(_family("tmplnative", True))
    (root / "models" / "tmplemu.yaml").write_text(_family("tmplemu", False))
    return toolrules.load(paths=[root], use_env=False)


def _source(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")


def render_like_server(source: str, body: dict[str, Any]) -> str:
    """What llama-server (--jinja) does with a chat-completions body: the messages as
    given, call arguments decoded to objects, the tools, the generation prompt."""
    msgs = []
    for m in body["messages"]:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": json.loads(
                c["function"]["arguments"])}} for c in m["tool_calls"]]
        msgs.append(m)
    return render_chat_template(source, {"messages": msgs, "tools": body.get("tools"),
                                         "add_generation_prompt": True, "bos_token": "<s>",
                                         "eos_token": "</s>"})


def _missing(prompt: str, wanted: list[str]) -> list[str]:
    return [t for t in wanted if t.strip() not in prompt and json.dumps(t)[1:-1] not in prompt]


def _wire(eng: Any, fixture: str, model: str, provider: str,
          rewrites: list[Any] | None = None) -> dict[str, Any]:
    api, body = FIXTURES[fixture]
    msgs, tools, choice = eng.parse_request(body, api)
    return eng.build_request(provider, model, msgs, tools=tools, tool_choice=choice,
                             rewrites=rewrites)


# ---------------------------------------------------------------- the property

@pytest.mark.parametrize("mode", ["tmplnative", "tmplemu"])
@pytest.mark.parametrize("template", NAMES)
@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_every_fixture_renders_on_every_template_with_nothing_lost(eng, fixture, template, mode):
    model = f"{mode}-{template}"
    cap = eng.capability(model)
    assert {k: getattr(cap, k) for k in CONSTRAINTS[template]} == {
        k: tuple(v) if isinstance(v, list) else v for k, v in CONSTRAINTS[template].items()}
    body = _wire(eng, fixture, model, "llamacpp")
    prompt = render_like_server(_source(template), body)
    assert _missing(prompt, texts(FIXTURES[fixture][1])) == []


def test_without_normalization_the_templates_refuse_or_drop(eng):
    """The control: the same bodies written for an API that renders no template (openai,
    same wire format) fail on the templates in the documented ways - so the property above
    can fail."""
    outcomes: dict[tuple[str, str], str] = {}
    for fixture in FIXTURES:
        for template in NAMES:
            body = _wire(eng, fixture, f"tmplnative-{template}", "openai")
            try:
                prompt = render_like_server(_source(template), body)
            except TemplateRaised as exc:
                outcomes[fixture, template] = f"raised: {exc.message}"
                continue
            lost = _missing(prompt, texts(FIXTURES[fixture][1]))
            outcomes[fixture, template] = f"lost {len(lost)}" if lost else "ok"
    assert outcomes["claude-code-2.1", "system_first"] == \
        "raised: System message must be at the beginning."
    assert outcomes["codex-0.169", "user_assistant_only"].startswith("raised: Only user and")
    assert outcomes["chat-two-systems", "alternating"] == \
        "raised: Conversation roles must alternate user/assistant/user/assistant/..."
    assert outcomes["chat-two-systems", "content_attr"].startswith("raised: ")
    assert outcomes["chat-two-systems", "single_system"] == "lost 1"  # the second system
    assert outcomes["claude-code-2.1", "calls_without_text"] == "lost 1"  # text beside a call
    assert outcomes["chat-two-systems", "no_tool_role"].startswith("lost")
    assert outcomes["claude-code-2.1", "no_history_calls"].startswith("lost")
    assert outcomes["chat-assistant-first", "one_call"] == \
        "raised: This model only supports single tool-calls at once!"
    assert all(v == "ok" for (f, t), v in outcomes.items() if t == "permissive")
    bad = sum(v != "ok" for v in outcomes.values())
    assert bad >= 20, outcomes


def test_a_permissive_template_gets_the_conversation_untouched(eng):
    rewrites: list[Any] = []
    for fixture in FIXTURES:
        a = _wire(eng, fixture, "tmplnative-permissive", "llamacpp", rewrites)
        b = _wire(eng, fixture, "tmplnative-permissive", "openai")
        assert a["messages"] == b["messages"]
    assert rewrites == []


# ---------------------------------------------------------------- each rewrite

def _cap(eng: Any, **turns: Any) -> Any:
    return replace(eng.capability("tmplnative-permissive"), **turns)


def _roles(turns: Any) -> list[str]:
    return [m.role for m in turns.messages]


CALL = ToolCall("c1", "get_weather", {"city": "Paris"})


def test_later_system_messages_fold_into_the_first_where_a_rule_asks(eng):
    msgs = [Message("system", "A"), Message("user", "u"), Message("system", "B"),
            Message("user", "v")]
    t = eng.normalize_turns(msgs, capability=_cap(eng, turn_system="first",
                                                  turn_system_stable=False))
    assert [(m.role, m.content) for m in t.messages] == [
        ("system", "A\n\nB"), ("user", "u"), ("user", "v")]
    assert [(r.action, r.messages) for r in t.rewrites] == [("system-folded", (0, 2))]
    assert "turn_system: first" in t.rewrites[0].why


def test_a_later_system_text_becomes_a_user_turn_where_it_arrived(eng):
    msgs = [Message("system", "A"), Message("system", "B"), Message("user", "u"),
            Message("assistant", "a"), Message("system", "C"), Message("user", "v")]
    cap = _cap(eng, turn_system="first")
    assert cap.turn_system_stable  # the default
    t = eng.normalize_turns(msgs, capability=cap)
    # the leading texts come before any turn: joined, they change no later prompt
    assert t.messages[0] == Message("system", "A\n\nB")
    assert t.messages[1].content == "u"
    # consecutive user turns are fine here: a turn of its own, whatever comes after it
    assert [(m.role, m.content) for m in t.messages[3:]] == [
        ("user", "<system_message>\nC\n</system_message>"), ("user", "v")]
    assert [r.action for r in t.rewrites] == ["system-folded", "system-to-new-user-turn"]


def test_where_turns_alternate_a_later_system_text_joins_the_user_turn_beside_it(eng):
    cap = _cap(eng, turn_system="first", turn_alternate=True)
    # right after a user turn: joined to it (it came with that turn)
    t = eng.normalize_turns([Message("system", "A"), Message("user", "u"),
                             Message("system", "C"), Message("assistant", "a")],
                            capability=cap)
    assert [(m.role, m.content) for m in t.messages] == [
        ("system", "A"), ("user", "u\n\n<system_message>\nC\n</system_message>"),
        ("assistant", "a")]
    # after an answer, before the next user turn: joined to that one
    t = eng.normalize_turns([Message("system", "A"), Message("user", "u"),
                             Message("assistant", "a"), Message("system", "C"),
                             Message("user", "v")], capability=cap)
    assert t.messages[-1].content == "<system_message>\nC\n</system_message>\n\nv"
    # never between a call and its result
    t = eng.normalize_turns([Message("system", "A"), Message("user", "u"),
                             Message("assistant", None, (CALL,)), Message("system", "C"),
                             Message("tool", "sunny", tool_call_id="c1"),
                             Message("assistant", "done")], capability=cap)
    roles = [m.role for m in t.messages]
    assert roles[2:4] == ["assistant", "tool"] and t.messages[2].tool_calls
    assert any("C" in str(m.content) for m in t.messages[4:] if m.role == "user")


def test_a_later_system_text_leaves_the_prompt_of_the_turns_before_it_unchanged(eng):
    """The rendered conversation before a later system text is what it was the turn
    before: the text stays where it arrived (never joins the leading system prompt)."""
    before = [Message("system", "A"), Message("user", "u"), Message("assistant", "a")]
    after = [*before, Message("system", "mode switched"), Message("user", "v")]
    cap = _cap(eng, turn_system="first", turn_alternate=True)
    t0 = eng.normalize_turns(before, capability=cap).messages
    t1 = eng.normalize_turns(after, capability=cap).messages
    assert t1[:len(t0)] == t0
    assert "mode switched" in t1[-1].content and "v" in t1[-1].content


def test_a_system_text_after_the_last_user_turn_gets_a_user_turn_of_its_own(eng):
    msgs = [Message("user", "u"), Message("assistant", None, (CALL,)),
            Message("tool", "sunny", tool_call_id="c1"), Message("system", "late")]
    t = eng.normalize_turns(msgs, capability=_cap(eng, turn_system="none"))
    assert _roles(t) == ["user", "assistant", "tool", "user"]
    assert "late" in t.messages[-1].content
    assert t.rewrites[-1].action == "system-to-new-user-turn"


def test_no_system_role_puts_the_system_text_into_the_first_user_turn(eng):
    t = eng.normalize_turns([Message("system", "S"), Message("user", "u")],
                            capability=_cap(eng, turn_system="none"))
    assert _roles(t) == ["user"]
    assert t.messages[0].content.startswith("<system_message>\nS\n</system_message>")


def test_leading_systems_stay_and_a_later_one_joins_the_last_where_a_rule_asks(eng):
    msgs = [Message("system", "A"), Message("system", "B"), Message("user", "u"),
            Message("system", "C")]
    t = eng.normalize_turns(msgs, capability=_cap(eng, turn_system="leading",
                                                  turn_system_stable=False))
    assert [(m.role, m.content) for m in t.messages] == [
        ("system", "A"), ("system", "B\n\nC"), ("user", "u")]
    t = eng.normalize_turns(msgs, capability=_cap(eng, turn_system="leading"))
    assert [(m.role, m.content) for m in t.messages] == [
        ("system", "A"), ("system", "B"), ("user", "u"),
        ("user", "<system_message>\nC\n</system_message>")]


def test_alternation_merges_turns_and_opens_with_a_user_turn(eng):
    msgs = [Message("assistant", "hello"), Message("user", "a"), Message("user", "b"),
            Message("assistant", "x"), Message("assistant", None, (CALL,)),
            Message("tool", "r", tool_call_id="c1"), Message("user", "c")]
    t = eng.normalize_turns(msgs, capability=_cap(eng, turn_alternate=True))
    assert [(m.role, m.content, bool(m.tool_calls)) for m in t.messages] == [
        ("user", "", False), ("assistant", "hello", False), ("user", "a\n\nb", False),
        ("assistant", "x", True), ("tool", "r", False), ("assistant", "", False),
        ("user", "c", False)]
    actions = [r.action for r in t.rewrites]
    assert actions.count("merged") == 2 and "user-turn-added" in actions
    assert "assistant-turn-added" in actions


def test_call_turns_get_the_content_their_template_reads(eng):
    t = eng.normalize_turns([Message("user", "u"), Message("assistant", None, (CALL,))],
                            capability=_cap(eng, turn_content_required=True))
    assert t.messages[1].content == "" and t.messages[1].tool_calls == (CALL,)
    assert t.rewrites[0].action == "content-added"


def test_text_beside_calls_moves_to_its_own_turn(eng):
    msgs = [Message("user", "u"), Message("assistant", "thinking aloud", (CALL,)),
            Message("tool", "r", tool_call_id="c1")]
    t = eng.normalize_turns(msgs, capability=_cap(eng, turn_text_with_calls=False))
    assert [(m.role, m.content, m.tool_calls) for m in t.messages] == [
        ("user", "u", ()), ("assistant", "thinking aloud", ()), ("assistant", None, (CALL,)),
        ("tool", "r", ())]
    assert t.rewrites[0].action == "text-split-from-calls"


def test_where_turns_alternate_only_calls_with_text_are_written_as_text(eng):
    """Text beside calls and alternating turns: the turn with text is written as text with
    its results; a calls turn without text, and its results, stay native."""
    c2 = ToolCall("c2", "get_weather", {"city": "Rome"})
    msgs = [Message("user", "u"), Message("assistant", None, (CALL,)),
            Message("tool", "sunny", tool_call_id="c1"), Message("user", "v"),
            Message("assistant", "checking Rome", (c2,)),
            Message("tool", "rain", tool_call_id="c2"), Message("user", "w")]
    cap = _cap(eng, turn_text_with_calls=False, turn_alternate=True)
    t = eng.normalize_turns(msgs, capability=cap)
    assert [(m.role, m.tool_calls, m.tool_call_id) for m in t.messages[:3]] == [
        ("user", (), None), ("assistant", (CALL,), None), ("tool", (), "c1")]
    assert t.messages[2].content == "sunny"
    assert [m.role for m in t.messages[3:]] == ["assistant", "user", "assistant", "user"]
    assert "checking Rome" in t.messages[5].content and not t.messages[5].tool_calls
    assert "rain" in t.messages[6].content and "w" in t.messages[6].content
    assert [(r.action, r.messages) for r in t.rewrites if r.action.endswith("-as-text")] == [
        ("calls-as-text", (4,)), ("results-as-text", (5,))]
    assert violations(t.messages, cap) == []


def test_without_a_tool_role_calls_and_results_are_written_in_the_models_format(eng):
    msgs = [Message("user", "u"), Message("assistant", "ok", (CALL,)),
            Message("tool", "sunny", tool_call_id="c1", name="get_weather")]
    t = eng.normalize_turns(msgs, "tmplnative-no_tool_role")
    assert _roles(t) == ["user", "assistant", "user"]
    # hermes, the family's dialect: the call reads back from the text
    back = eng.text_parser(dialect="hermes").parse(t.messages[1].content)
    assert [(c.name, c.arguments) for c in back.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert "sunny" in t.messages[2].content
    assert [r.action for r in t.rewrites] == ["calls-as-text", "results-as-text"]


def test_parallel_calls_become_one_call_a_message_each_with_its_result(eng):
    c2 = ToolCall("c2", "get_weather", {"city": "Rome"})
    msgs = [Message("user", "u"), Message("assistant", "both", (CALL, c2)),
            Message("tool", "r2", tool_call_id="c2"), Message("tool", "r1", tool_call_id="c1"),
            Message("user", "thanks")]
    t = eng.normalize_turns(msgs, capability=_cap(eng, turn_calls_per_message=1))
    assert [(m.role, m.content, m.tool_calls) for m in t.messages] == [
        ("user", "u", ()), ("assistant", "both", (CALL,)), ("tool", "r1", ()),
        ("assistant", None, (c2,)), ("tool", "r2", ()), ("user", "thanks", ())]
    assert [(r.action, r.messages) for r in t.rewrites] == [("calls-split", (1,))]


def test_call_ids_take_the_form_the_template_reads(eng):
    c2 = ToolCall("toolu_02", "read_file", {"path": "a"})
    msgs = [Message("user", "u"), Message("assistant", None, (CALL, c2)),
            Message("tool", "r1", tool_call_id="c1"), Message("tool", "r2", tool_call_id="toolu_02"),
            Message("assistant", None, (ToolCall("x", "get_weather", {"city": "Oslo"}),)),
            Message("tool", "r3", tool_call_id="x")]
    t = eng.normalize_turns(msgs, "moonshotai/Kimi-K2-Thinking")
    ids = [c.id for m in t.messages for c in m.tool_calls]
    assert ids == ["functions.get_weather:0", "functions.read_file:1", "functions.get_weather:2"]
    assert [m.tool_call_id for m in t.messages if m.role == "tool"] == ids
    assert [r.action for r in t.rewrites] == ["call-ids-rewritten"]


def test_results_move_right_after_their_calls_and_orphans_become_text(eng):
    c2 = ToolCall("c2", "get_weather", {"city": "Rome"})
    msgs = [Message("user", "u"), Message("assistant", None, (CALL, c2)),
            Message("user", "meanwhile"), Message("tool", "r2", tool_call_id="c2"),
            Message("tool", "r1", tool_call_id="c1"), Message("tool", "lost", tool_call_id="zz")]
    t = eng.normalize_turns(msgs, capability=_cap(eng, turn_results_follow_calls=True))
    assert [(m.role, m.content) for m in t.messages][:5] == [
        ("user", "u"), ("assistant", None), ("tool", "r1"), ("tool", "r2"),
        ("user", "meanwhile")]
    assert t.messages[5].role == "user" and "lost" in t.messages[5].content
    assert [r.action for r in t.rewrites] == ["results-moved", "results-as-text"]


def test_media_survive_a_merge(eng):
    from toolrules import ContentPart

    img = ContentPart("image", media_type="image/png", data="iVBORw0KGgo=")
    msgs = [Message("user", "look"), Message("user", (ContentPart("text", text="at"), img))]
    t = eng.normalize_turns(msgs, capability=_cap(eng, turn_alternate=True))
    assert len(t.messages) == 1
    parts = t.messages[0].content
    assert img in parts and "".join(p.text or "" for p in parts).startswith("look")


# ---------------------------------------------------------------- explain and the CLI

def test_request_explain_lists_each_rewrite(eng, tmp_path, capsys):
    from click.testing import CliRunner

    from toolrules.cli import main

    body = dict(FIXTURES["chat-two-systems"][1], model="google/gemma-3-12b-it")
    (tmp_path / "in.json").write_text(json.dumps(body))
    rules = tmp_path / "rules" / "models"
    rules.mkdir(parents=True)
    (rules / "tmplnative.yaml").write_text(_family("tmplnative", True))
    res = CliRunner().invoke(main, ["request", str(tmp_path / "in.json"), "--provider",
                                    "llamacpp", "--model", "tmplnative-alternating",
                                    "--explain", "--rules", str(tmp_path / "rules")])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["messages"][0]["role"] == "system"
    lines = [x for x in res.stderr.splitlines() if x.startswith("rewrite: ")]
    assert any("system-folded (messages[0], messages[1])" in x for x in lines)
    assert any(x.startswith("rewrite: merged") and "turn_alternate" in x for x in lines)
    res = CliRunner().invoke(main, ["request", str(tmp_path / "in.json"), "--provider",
                                    "openai", "--explain"])
    assert "no rewrite: openai does not render the model's chat template" in res.stderr


# ---------------------------------------------------------------- through the proxy

class TemplateUpstream(WireServer):
    """An OpenAI-compatible server that renders each request with a chat template as
    llama-server does: a 500 with the template's message when it refuses."""

    def __init__(self, template: str):
        super().__init__(responder=self._answer)
        self.source = _source(template)
        self.prompts: list[str] = []

    def _answer(self, seen: Any) -> Reply:
        body = json.loads(seen.body)
        try:
            prompt = render_like_server(self.source, body)
        except TemplateRaised as exc:
            return json_reply({"error": {"code": 500, "message": exc.message,
                                         "type": "server_error"}}, status=500)
        self.prompts.append(prompt)
        if body.get("stream"):
            return sse_reply([
                {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": "done"},
                              "finish_reason": None}]},
                {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                 "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, "[DONE]"])
        return json_reply({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": "done"}}]})


def _send(proxy: Any, api: str, body: dict[str, Any], stream: bool) -> Any:
    import httpx

    path = {"anthropic": "/v1/messages", "openai": "/v1/chat/completions",
            "openai-responses": "/v1/responses"}[api]
    with httpx.Client(timeout=30) as c:
        if stream:
            with c.stream("POST", proxy.url + path, json={**body, "stream": True},
                          headers={"x-api-key": "k"}) as r:
                return r.status_code, r.read().decode()
        r = c.post(proxy.url + path, json=body, headers={"x-api-key": "k"})
        return r.status_code, r.text


@pytest.mark.parametrize("template", ["system_first", "user_assistant_only", "alternating",
                                      "single_system", "content_attr", "calls_without_text",
                                      "one_call"])
@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_through_the_proxy_every_fixture_reaches_the_template_intact(eng, fixture, template,
                                                                     access):
    from serve_helpers import ProxyServer

    api, body = FIXTURES[fixture]
    model = f"tmplnative-{template}"
    with TemplateUpstream(template) as up, ProxyServer(
            upstream="llamacpp", base_url=up.url + "/v1", engine=eng) as proxy:
        status, text = _send(proxy, api, {**body, "model": model}, stream=False)
        assert status == 200, text
        assert _missing(up.prompts[-1], texts(body)) == []
    logged = access()
    assert logged[-1]["status"] == 200
    # the access log says what was moved and why: what build_request reports
    expected: list[Any] = []
    _wire(eng, fixture, model, "llamacpp", expected)
    assert logged[-1].get("rewrites", []) == [r.as_dict() for r in expected]


@pytest.mark.parametrize("api_fixture", ["claude-code-2.1", "codex-0.169", "chat-two-systems"])
def test_streamed_requests_are_normalized_too(eng, api_fixture):
    from serve_helpers import ProxyServer

    api, body = FIXTURES[api_fixture]
    with TemplateUpstream("alternating") as up, ProxyServer(
            upstream="llamacpp", base_url=up.url + "/v1", engine=eng) as proxy:
        status, text = _send(proxy, api, {**body, "model": "tmplemu-alternating"}, stream=True)
        assert status == 200, text
        assert "done" in text
        assert _missing(up.prompts[-1], texts(body)) == []


def test_the_trace_records_each_rewrite(eng, tmp_path):
    from serve_helpers import ProxyServer

    api, body = FIXTURES["claude-code-2.1"]
    with TemplateUpstream("system_first") as up, ProxyServer(
            upstream="llamacpp", base_url=up.url + "/v1", engine=eng,
            trace_dir=str(tmp_path)) as proxy:
        status, _ = _send(proxy, api, {**body, "model": "tmplnative-system_first"}, False)
        assert status == 200
    records = [json.loads(x) for f in tmp_path.glob("*.jsonl")
               for x in f.read_text().splitlines()]
    turn = next(r for r in records if r["type"] == "turn")
    rewrites = turn["request"]["rewrites"]
    # the two system blocks are one system message; the one in the middle stays where it
    # arrived, a user turn of its own (the leading system prompt never changes)
    msgs, _, _ = eng.parse_request(body, api)
    assert [r["action"] for r in rewrites] == ["system-to-new-user-turn"]
    assert [msgs[i].role for i in rewrites[0]["messages"]] == ["system"]
    assert msgs[rewrites[0]["messages"][0]].content == \
        "The user switched to plan mode (cc-sys-mid)."


def test_an_unnormalizable_refusal_still_reaches_the_client_as_an_error(eng, caplog):
    """A template that refuses what the rules did not foresee: the client gets the error in
    its API's shape, naming the template's message, never a hang."""
    from serve_helpers import ProxyServer

    api, body = FIXTURES["chat-two-systems"]
    caplog.set_level(logging.WARNING)
    with TemplateUpstream("alternating") as up, ProxyServer(
            upstream="llamacpp", base_url=up.url + "/v1", engine=eng) as proxy:
        # the permissive variant: nothing is rewritten, so the template refuses
        status, text = _send(proxy, api, {**body, "model": "tmplnative-permissive"}, False)
    assert status >= 500
    assert "Conversation roles must alternate" in text


# ---------------------------------------------------------------- the property, generated

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_KINDS = ["system", "user", "assistant", "calls", "text+calls", "result", "orphan"]


@st.composite
def _conversations(draw: Any) -> list[Message]:
    kinds = draw(st.lists(st.sampled_from(_KINDS), min_size=1, max_size=9))
    out: list[Message] = []
    pending: list[ToolCall] = []
    for k, kind in enumerate(kinds):
        text = f"t{k}x"
        if kind in ("system", "user", "assistant"):
            out.append(Message(kind, text))
        elif kind in ("calls", "text+calls"):
            calls = tuple(ToolCall(f"c{k}_{j}", "get_weather", {"city": f"a{k}y{j}"})
                          for j in range(draw(st.integers(1, 3))))
            pending.extend(calls)
            out.append(Message("assistant", text if kind == "text+calls" else None, calls))
        elif kind == "result" and pending:
            c = pending.pop(draw(st.integers(0, len(pending) - 1)))
            out.append(Message("tool", text, tool_call_id=c.id, name=c.name))
        else:
            out.append(Message("tool", text, tool_call_id=f"none{k}", name="get_weather"))
    return out


_CONSTRAINTS = st.fixed_dictionaries({
    "turn_system": st.sampled_from(["anywhere", "leading", "first", "none"]),
    "turn_system_stable": st.booleans(), "turn_alternate": st.booleans(),
    "turn_roles": st.sampled_from([(), ("tool",)]),
    "turn_content_required": st.booleans(), "turn_text_with_calls": st.booleans(),
    "turn_history_calls": st.booleans(), "turn_results_follow_calls": st.booleans(),
    "turn_calls_per_message": st.sampled_from([None, 1]),
    "turn_call_ids": st.sampled_from([None, "functions.{name}:{index}"])})


def _all_text(msgs: Any) -> str:
    parts = []
    for m in msgs:
        parts.append(m.content if isinstance(m.content, str) else "")
        parts.extend(json.dumps(c.arguments) for c in m.tool_calls)
    return "\n".join(parts)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv=_conversations(), turns=_CONSTRAINTS)
def test_any_conversation_fits_any_constraints_and_keeps_every_text(eng, conv, turns):
    cap = _cap(eng, **turns)
    out = eng.normalize_turns(conv, capability=cap)
    assert violations(out.messages, cap) == []
    kept = _all_text(out.messages)
    for m in conv:
        if isinstance(m.content, str):
            assert m.content in kept
        for c in m.tool_calls:
            assert c.arguments["city"] in kept
    if not out.rewrites:
        assert list(out.messages) == conv


# ---------------------------------------------------------------- golden coverage

def test_golden_turns_name_a_constrained_family_without_a_case():
    """The turns golden builder reports a family whose rules set turn constraints but
    that no case model covers; with the cases as shipped, nothing is reported."""
    from toolrules.golden._emulation import _turns

    engine = toolrules.load()
    cases = yaml.safe_load((Path(__file__).parents[1] / "golden" / "emulation" /
                            "turns.cases.yaml").read_text(encoding="utf-8"))
    shipped = list(_turns(engine, cases))
    assert shipped and all(not g.problems for g in shipped)
    assert "emulation/turns/gemma.golden.yaml" in [g.path for g in shipped]
    without = dict(cases, models=[m for m in cases["models"] if "gemma" not in m])
    files = {g.path: g for g in _turns(engine, without)}
    assert "emulation/turns/gemma.golden.yaml" not in files
    assert files["emulation/turns/_coverage.golden.yaml"].problems == [
        "family gemma sets turn constraints; add one of its models to "
        "golden/emulation/turns.cases.yaml"]


# A template written for this test from the documented behaviour of Command R7B's chat
# template: an assistant turn with calls renders its tool_plan and the calls, never the
# text written beside them; it has no developer role (toolrules reads developer as system).
_R7B_LIKE = """{{ bos_token }}{% for m in messages %}
{%- if m.role == 'system' %}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>{{ m.content }}<|END_OF_TURN_TOKEN|>
{%- elif m.role == 'user' %}<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{ m.content }}<|END_OF_TURN_TOKEN|>
{%- elif m.role == 'assistant' and m.tool_calls %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>\
<|START_THINKING|>{{ m.tool_plan }}<|END_THINKING|><|START_ACTION|>[{% for c in m.tool_calls %}\
{"tool_call_id": "{{ loop.index0 }}", "tool_name": "{{ c.function.name }}", "parameters": \
{{ c.function.arguments | tojson }}}{% if not loop.last %}, {% endif %}{% endfor %}]<|END_ACTION|><|END_OF_TURN_TOKEN|>
{%- elif m.role == 'assistant' %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{{ m.content }}<|END_OF_TURN_TOKEN|>
{%- elif m.role == 'tool' %}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>{{ m.content }}<|END_OF_TURN_TOKEN|>
{%- endif %}{% endfor %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"""


def test_command_r7b_text_beside_calls_gets_a_turn_of_its_own():
    """The bundled command family says R7B's template drops the text beside calls
    (turn_text_with_calls: false): normalized, that text and a developer message reach
    the prompt; sent as written, the text beside the call is lost."""
    bundled = toolrules.load(use_env=False)
    model = "CohereForAI/c4ai-command-r7b-12-2024"
    assert bundled.capability(model).turn_text_with_calls is False
    assert bundled.capability("command-a-03-2025").turn_text_with_calls is True
    body = {"messages": [
        {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me check the forecast.", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}}}}]}
    msgs, tools, choice = bundled.parse_request(body, "openai")
    fitted = bundled.normalize_turns(msgs, model, tools=tools)
    assert [r.action for r in fitted.rewrites] == ["text-split-from-calls"]
    wanted = ["Answer in French.", "Weather in Paris?", "Let me check the forecast.", "sunny"]
    normalized = bundled.build_request("llamacpp", model, msgs, tools=tools, tool_choice=choice)
    assert _missing(render_like_server(_R7B_LIKE, normalized), wanted) == []
    as_written = bundled.build_request("openai", model, msgs, tools=tools, tool_choice=choice)
    assert _missing(render_like_server(_R7B_LIKE, as_written), wanted) == [
        "Let me check the forecast."]
