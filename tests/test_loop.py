"""The tool loop (ToolLoop) with scripted models in real output styles, against the real
executor: guardrails, policy at execution, events, streaming, validation retry."""

from __future__ import annotations

import asyncio
import json

import pytest

import toolrules
from toolrules import (
    LoopEventType,
    ScriptedModel,
    ToolExecutor,
    ToolLoop,
    ToolRegistry,
)

ENGINE = toolrules.load()

QWEN = "Qwen/Qwen3-8B"                          # native tools, hermes text
LLAMA_EMULATED = "llama3:8b"                    # no native tools: emulated, llama3-json answers
LLAMA_NATIVE = "meta-llama/Llama-3.1-8B-Instruct"   # native, llama3-json text
GPT = "gpt-4o"                                  # native, no raw-text dialect


def hermes(tool: str, /, **args: object) -> str:
    """A call as Qwen/Hermes models write it."""
    return f'<tool_call>\n{json.dumps({"name": tool, "arguments": args})}\n</tool_call>'


def llama(tool: str, /, **args: object) -> str:
    """A call as Llama 3.x models write it (JSON with "parameters")."""
    return json.dumps({"name": tool, "parameters": args})


def oai(*calls: tuple[str, dict[str, object]], content: str | None = None) -> dict:
    """An OpenAI-format assistant message with calls."""
    return {"role": "assistant", "content": content,
            "tool_calls": [{"type": "function",
                            "function": {"name": n, "arguments": json.dumps(a)}}
                           for n, a in calls]}


class Calls:
    """Which handlers ran, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, dict]] = []


@pytest.fixture
def app():
    calls = Calls()
    reg = ToolRegistry(engine=ENGINE)

    @reg.tool(kind="read")
    def get_weather(city: str) -> str:
        """Current weather for a city.

        Args:
            city: City name, e.g. "Paris".
        """
        calls.log.append(("get_weather", {"city": city}))
        return f"Sunny in {city}"

    @reg.tool(kind="write")
    def save_note(text: str) -> str:
        """Save a note.

        Args:
            text: The note text.
        """
        calls.log.append(("save_note", {"text": text}))
        return "saved"

    @reg.tool(kind="write")
    def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: The file to delete.
        """
        calls.log.append(("delete_file", {"path": path}))
        return "deleted"

    @reg.tool(kind="write", hidden=True)
    def facts_commit(fact: str) -> str:
        """Commit a fact (the app calls this after the user confirms).

        Args:
            fact: The fact.
        """
        calls.log.append(("facts_commit", {"fact": fact}))
        return "committed"

    @reg.tool(kind="read")
    def lookup(key: str) -> str:
        """Look up a key; fails for unknown keys.

        Args:
            key: The key.
        """
        calls.log.append(("lookup", {"key": key}))
        raise FileNotFoundError(f"no entry {key!r}")

    executor = ToolExecutor(reg, trust="workspace", denied=["delete_file"], engine=ENGINE)
    return executor, calls


def run(model, executor, **kw):
    return ToolLoop(model, executor, engine=ENGINE, **kw).run_sync("Do the task.")


def names(calls: Calls) -> list[str]:
    return [n for n, _ in calls.log]


# ---------------------------------------------------------------- the basic round trip

def test_a_call_runs_and_its_result_goes_back_as_a_tool_message(app):
    executor, calls = app
    model = ScriptedModel([hermes("get_weather", city="Paris"), "It is sunny in Paris."],
                          model=QWEN, engine=ENGINE)
    out = run(model, executor)
    assert out.stopped == "done" and out.ok
    assert out.content == "It is sunny in Paris."
    assert out.rounds == 2 and out.tool_calls == 1
    assert calls.log == [("get_weather", {"city": "Paris"})]
    call, result = out.tool_history[0]
    assert call.name == "get_weather" and result.ok and result.output == "Sunny in Paris"
    roles = [m.role for m in out.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    tool_msg = out.messages[2]
    assert tool_msg.tool_call_id == call.id == out.messages[1].tool_calls[0].id
    assert tool_msg.content == "Sunny in Paris"
    # the second request carried the result; hidden and denied tools were never offered
    sent = model.requests[1]
    assert sent.messages[-1].role == "tool"
    offered = {t.name for t in model.requests[0].tools}
    assert offered == {"get_weather", "save_note", "lookup"}


def test_the_emulated_model_gets_the_prompt_and_its_history_as_text(app):
    executor, calls = app
    model = ScriptedModel([llama("get_weather", city="Oslo"), "Sunny in Oslo."],
                          model=LLAMA_EMULATED, engine=ENGINE)
    out = run(model, executor)
    assert out.ok and calls.log == [("get_weather", {"city": "Oslo"})]
    first = model.requests[0]
    assert first.prompt is not None and "get_weather" in first.prompt
    assert "facts_commit" not in first.prompt and "delete_file" not in first.prompt
    body = model.requests[1].rendered
    assert "tools" not in body  # emulation: no native tool field
    text = json.dumps(body["messages"])
    assert "Sunny in Oslo" in text and "get_weather" in text


# ---------------------------------------------------------------- guardrails

def test_max_rounds_ends_with_a_final_answer_without_tools(app):
    executor, calls = app
    # a model that never stops calling: even its closing turn is a call
    turns = [hermes("get_weather", city=c) for c in ("Paris", "Oslo", "Rome", "Bern")]
    model = ScriptedModel(turns, model=QWEN, engine=ENGINE)
    out = run(model, executor, max_rounds=3)
    assert out.stopped == "max_rounds" and out.truncated and not out.ok
    assert out.tool_calls == 3 and names(calls) == ["get_weather"] * 3
    # the closing turn: no tools offered, told why
    closing = model.requests[3]
    assert closing.tools == () and closing.messages[-1].role == "user"
    assert "limit of 3 tool rounds" in closing.messages[-1].content
    assert out.rounds == 4
    # the closing turn's call is not run; there is no answer text
    assert ("get_weather", {"city": "Bern"}) not in calls.log and out.content == ""
    notices = [r["notice"] for r in out.trace.to_dicts() if r["type"] == "notice"]
    assert notices == ["max_rounds", "calls_ignored"]


def test_max_rounds_closing_turn_text_is_the_answer(app):
    executor, _ = app
    model = ScriptedModel([hermes("get_weather", city="Paris"), "Paris is sunny."],
                          model=QWEN, engine=ENGINE)
    out = run(model, executor, max_rounds=1)
    assert out.stopped == "max_rounds" and out.content == "Paris is sunny."
    assert model.requests[1].tools == ()


def test_max_tool_calls_refuses_the_rest_and_closes(app):
    executor, calls = app
    turn = "\n".join(hermes("get_weather", city=c) for c in ("A", "B", "C"))
    model = ScriptedModel([turn, "Done with what I have."], model=QWEN, engine=ENGINE)
    out = run(model, executor, max_tool_calls=2)
    assert out.stopped == "max_tool_calls"
    assert len(calls.log) == 2 and out.tool_calls == 2
    refused = out.tool_history[2][1]
    assert not refused.ok and "limit of 2 tool calls" in refused.error
    assert out.content == "Done with what I have."


def test_a_repeated_identical_call_is_refused_then_the_loop_stops(app):
    executor, calls = app
    same = hermes("get_weather", city="Paris")
    model = ScriptedModel([same, same, same, same, "Paris is sunny."], model=QWEN, engine=ENGINE)
    out = run(model, executor, repeat_limit=3)
    # runs 1 and 2 execute; the 3rd is answered without running; the 4th stops the loop
    assert len(calls.log) == 2
    third = out.tool_history[2][1]
    assert not third.ok and "already made 2 time(s)" in third.error
    assert out.stopped == "repeated_call"
    assert out.content == "Paris is sunny."
    assert model.requests[-1].tools == ()
    notices = [r["notice"] for r in out.trace.to_dicts() if r["type"] == "notice"]
    assert "repeated_call" in notices


def test_different_arguments_are_not_repeats(app):
    executor, calls = app
    turns = [hermes("get_weather", city=c) for c in ("A", "B", "C", "D")] + ["ok"]
    out = run(ScriptedModel(turns, model=QWEN, engine=ENGINE), executor)
    assert out.stopped == "done" and len(calls.log) == 4


def test_an_empty_final_answer_gets_one_finalization_turn_without_tools(app):
    executor, _ = app
    model = ScriptedModel([hermes("get_weather", city="Rome"), "", "Rome is sunny."],
                          model=QWEN, engine=ENGINE)
    out = run(model, executor)
    assert out.stopped == "done" and out.content == "Rome is sunny."
    final_request = model.requests[2]
    assert final_request.tools == ()
    assert "last reply was empty" in final_request.messages[-1].content


def test_an_empty_final_answer_without_the_fix_stops_as_empty(app):
    executor, _ = app
    model = ScriptedModel([hermes("get_weather", city="Rome"), "   "], model=QWEN, engine=ENGINE)
    out = run(model, executor, fix_empty_final=False)
    assert out.stopped == "empty_final" and len(model.requests) == 2


def test_an_answer_that_stays_empty_after_the_retry(app):
    executor, _ = app
    model = ScriptedModel([hermes("get_weather", city="Rome"), "", ""], model=QWEN, engine=ENGINE)
    out = run(model, executor)
    assert out.stopped == "empty_final" and len(model.requests) == 3


def test_validation_retry_sends_an_invalid_call_back_with_feedback(app):
    executor, calls = app
    # llama3 (emulated) has validate_retry: the missing `city` is caught before execution
    model = ScriptedModel([llama("get_weather", town="Paris"), llama("get_weather", city="Paris"),
                           "Sunny in Paris."], model=LLAMA_EMULATED, engine=ENGINE)
    out = run(model, executor)
    assert out.ok and calls.log == [("get_weather", {"city": "Paris"})]
    _, bad = out.tool_history[0]
    assert not bad.ok and bad.tool_error is not None
    assert bad.tool_error.details["error"] == "INVALID_ARGUMENTS"
    feedback = out.messages[2].content
    assert out.messages[2].role == "tool" and "city" in feedback
    # the feedback carries a corrected example in the model's own format
    assert '"name": "get_weather"' in feedback
    # the model saw it as text (emulated history)
    assert "city" in json.dumps(model.requests[1].rendered["messages"][-1])
    notices = [r["notice"] for r in out.trace.to_dicts() if r["type"] == "notice"]
    assert "validation_retry" in notices


def test_without_validate_retry_the_executor_refuses_invalid_arguments(app):
    executor, calls = app
    model = ScriptedModel([hermes("get_weather", town="Paris"), hermes("get_weather", city="Paris"),
                           "Sunny."], model=QWEN, engine=ENGINE)
    out = run(model, executor)
    assert out.ok and len(calls.log) == 1
    first = out.tool_history[0][1]
    assert first.tool_error.details["error"] == "INVALID_ARGUMENTS"
    assert json.loads(out.messages[2].content)["error"]["code"] == "INVALID_ARGUMENTS"


# ---------------------------------------------------------------- policy at execution

def test_hidden_and_denied_tools_called_anyway_are_refused_by_the_executor(app):
    executor, calls = app
    turn = hermes("facts_commit", fact="sky is green") + "\n" + hermes("delete_file", path="a")
    model = ScriptedModel([turn, "I could not do that."], model=QWEN, engine=ENGINE)
    out = run(model, executor)
    assert calls.log == []
    codes = [r.tool_error.details["error"] for _, r in out.tool_history]
    assert codes == ["TOOL_NOT_ALLOWED", "TOOL_NOT_ALLOWED"]
    for m in out.messages[2:4]:
        assert m.role == "tool" and m.is_error
        assert json.loads(m.content)["error"]["code"] == "TOOL_NOT_ALLOWED"
    assert out.ok and out.content == "I could not do that."


def test_a_call_in_another_dialects_format_is_text_not_a_call(app):
    executor, calls = app
    # a Qwen (hermes) model writing a Llama-3 <|python_tag|> call: not its format
    foreign = '<|python_tag|>{"name": "delete_file", "parameters": {"path": "a"}}<|eom_id|>'
    model = ScriptedModel([foreign], model=QWEN, engine=ENGINE)
    out = run(model, executor)
    assert calls.log == [] and out.tool_calls == 0 and out.tool_history == ()
    assert out.stopped == "done" and "delete_file" in out.content
    # and a Llama model writing a hermes <tool_call> block
    model = ScriptedModel([hermes("delete_file", path="a")], model=LLAMA_NATIVE, engine=ENGINE)
    out = run(model, executor)
    assert calls.log == [] and out.tool_history == ()


def test_a_foreign_format_that_parses_in_the_models_own_dialect_still_meets_the_policy(app):
    executor, calls = app
    # Llama 3.1's own <|python_tag|> format parses: the policy refuses hidden and denied
    turns = ['<|python_tag|>{"name": "facts_commit", "parameters": {"fact": "x"}}<|eom_id|>',
             '<|python_tag|>{"name": "delete_file", "parameters": {"path": "a"}}<|eom_id|>',
             "Neither is possible."]
    out = run(ScriptedModel(turns, model=LLAMA_NATIVE, engine=ENGINE), executor)
    assert calls.log == []
    assert [r.tool_error.details["error"] for _, r in out.tool_history] == \
        ["TOOL_NOT_ALLOWED", "TOOL_NOT_ALLOWED"]
    assert out.content == "Neither is possible."


def test_an_unknown_tool_gets_the_executors_error_listing_the_tools(app):
    executor, calls = app
    model = ScriptedModel([hermes("launch_rocket", target="moon"), hermes("get_weather", city="X"),
                           "ok"], model=QWEN, engine=ENGINE)
    out = run(model, executor)
    first = out.tool_history[0][1]
    assert first.tool_error.details["error"] == "UNKNOWN_TOOL"
    body = json.loads(out.messages[2].content)
    assert "get_weather" in body["error"]["message"]
    assert names(calls) == ["get_weather"]


def test_an_unknown_tool_from_a_validating_model_also_goes_to_the_executor(app):
    executor, _ = app
    model = ScriptedModel([llama("launch_rocket", target="moon"), "ok"], model=LLAMA_EMULATED,
                          engine=ENGINE)
    out = run(model, executor)
    assert out.tool_history[0][1].tool_error.details["error"] == "UNKNOWN_TOOL"


# ---------------------------------------------------------------- tool_use_mode and failures

def test_enforced_mode_nudges_then_fails(app):
    executor, calls = app
    model = ScriptedModel(["The weather is nice.", "Still nice.", "Really nice."], model=QWEN,
                          engine=ENGINE)
    out = run(model, executor, tool_use_mode="enforced", max_nudges=2)
    assert out.stopped == "tool_use_required" and not out.ok
    assert len(model.requests) == 3 and calls.log == []
    # a native model that supports it is asked with tool_choice "required"
    assert model.requests[0].tool_choice == "required"
    nudge = model.requests[1].messages[-1]
    assert nudge.role == "user" and "get_weather" in nudge.content


def test_enforced_mode_accepts_the_answer_once_a_tool_succeeded(app):
    executor, calls = app
    model = ScriptedModel(["Nice weather.", hermes("get_weather", city="Oslo"), "Sunny."],
                          model=QWEN, engine=ENGINE)
    out = run(model, executor, tool_use_mode="enforced")
    assert out.ok and out.content == "Sunny." and names(calls) == ["get_weather"]
    assert model.requests[2].tool_choice == "auto"


def test_enforced_mode_on_an_emulated_model_nudges_in_text(app):
    executor, calls = app
    model = ScriptedModel(["No tools needed.", llama("get_weather", city="Oslo"), "Sunny."],
                          model=LLAMA_EMULATED, engine=ENGINE)
    out = run(model, executor, tool_use_mode="enforced")
    assert out.ok and names(calls) == ["get_weather"]
    assert "tool_choice" not in model.requests[0].rendered


class _Forcing(ScriptedModel):
    """A client that says whether tool_choice "required" makes its turn a call (as the
    local model does under its call grammar), whatever the model's capability."""

    def __init__(self, *args, forces: bool, **kw):
        super().__init__(*args, **kw)
        self.forces_calls = forces


def test_enforced_mode_requires_a_call_from_a_client_that_can_force_one(app):
    executor, calls = app
    model = _Forcing([llama("get_weather", city="Oslo"), "Sunny."], model=LLAMA_EMULATED,
                     engine=ENGINE, forces=True)
    out = run(model, executor, tool_use_mode="enforced")
    assert out.ok and names(calls) == ["get_weather"]
    # emulated (no native tool_choice), yet asked with "required" until a tool succeeded
    assert [r.tool_choice for r in model.requests] == ["required", "auto"]


def test_enforced_mode_trusts_the_client_over_the_capability(app):
    executor, _ = app
    model = _Forcing(["Nice weather.", hermes("get_weather", city="Oslo"), "Sunny."],
                     model=QWEN, engine=ENGINE, forces=False)
    out = run(model, executor, tool_use_mode="enforced")
    assert out.ok
    # native with supports_tool_choice_required, but the client says it cannot force one
    assert model.requests[0].tool_choice == "auto"
    assert model.requests[1].messages[-1].role == "user"   # nudged in text instead


def test_disabled_mode_offers_no_tools_and_runs_none(app):
    executor, calls = app
    model = ScriptedModel([hermes("get_weather", city="Paris") + "\nI would check."],
                          model=QWEN, engine=ENGINE)
    out = run(model, executor, tool_use_mode="disabled")
    assert model.requests[0].tools == () and calls.log == []
    assert out.stopped == "done" and out.content == "I would check."
    notices = [r["notice"] for r in out.trace.to_dicts() if r["type"] == "notice"]
    assert notices == ["calls_ignored"]


def test_tool_failure_policy_fatal_stops_at_the_first_failure(app):
    executor, _ = app
    model = ScriptedModel([hermes("lookup", key="k1"), "never asked"], model=QWEN, engine=ENGINE)
    out = run(model, executor, tool_failure_policy="fatal")
    assert out.stopped == "tool_failed" and not out.ok
    assert len(model.requests) == 1 and "no entry" in out.error
    assert out.tool_history[0][1].tool_error.code == "not_found"


def test_enforced_mode_defaults_to_fatal_failures(app):
    executor, _ = app
    model = ScriptedModel([hermes("lookup", key="k1"), "never"], model=QWEN, engine=ENGINE)
    out = run(model, executor, tool_use_mode="enforced")
    assert out.stopped == "tool_failed"


def test_tolerated_failures_go_back_with_the_retry_ladders_hint(app):
    executor, calls = app
    turns = [hermes("lookup", key="k1"), hermes("lookup", key="k2"), hermes("lookup", key="k3"),
             "No entries found."]
    out = run(ScriptedModel(turns, model=QWEN, engine=ENGINE), executor)
    assert out.ok and names(calls) == ["lookup"] * 3
    steps = [json.loads(m.content)["next_step"] for m in out.messages if m.role == "tool"]
    # not_found climbs rephrase -> interference -> vortex (rules/errors.yaml ladders)
    assert steps[0].startswith("Fix the arguments")
    assert "failed 2 times" in steps[1] and "Change the approach" in steps[1]
    assert "failed 3 times" in steps[2] and "Stop retrying" in steps[2]


def test_a_transient_failure_of_a_read_tool_is_retried_by_the_loop(app):
    executor, _ = app
    attempts = []

    @executor.registry.tool(kind="read")
    def flaky(q: str) -> str:
        """Flaky lookup.

        Args:
            q: Query.
        """
        attempts.append(q)
        if len(attempts) == 1:
            raise TimeoutError("upstream slow")
        return "found"

    model = ScriptedModel([hermes("flaky", q="x"), "found it"], model=QWEN, engine=ENGINE)
    out = run(model, executor)
    assert attempts == ["x", "x"] and out.tool_history[0][1].ok
    assert out.tool_calls == 2
    notices = [r["notice"] for r in out.trace.to_dicts() if r["type"] == "notice"]
    assert notices == ["auto_retry"]


def test_a_transient_failure_of_a_write_tool_is_not_repeated(app):
    executor, _ = app
    attempts = []

    @executor.registry.tool(kind="write")
    def push(q: str) -> str:
        """Push.

        Args:
            q: Data.
        """
        attempts.append(q)
        raise TimeoutError("upstream slow")

    out = run(ScriptedModel([hermes("push", q="x"), "failed"], model=QWEN, engine=ENGINE), executor)
    assert attempts == ["x"] and not out.tool_history[0][1].ok


# ---------------------------------------------------------------- byte caps

def test_oversized_arguments_are_not_run(app):
    executor, calls = app
    model = ScriptedModel([hermes("save_note", text="x" * 500), "too long"], model=QWEN,
                          engine=ENGINE)
    out = run(model, executor, max_tool_args_bytes=100)
    assert calls.log == []
    r = out.tool_history[0][1]
    assert r.tool_error.details["error"] == "ARGUMENTS_TOO_LARGE"
    assert "limit is 100 bytes" in json.loads(out.messages[2].content)["error"]["message"]


def test_oversized_output_is_replaced(app):
    executor, _ = app

    @executor.registry.tool(kind="read")
    def dump() -> str:
        """Dump everything."""
        return "y" * 5000

    out = run(ScriptedModel([hermes("dump"), "too big"], model=QWEN, engine=ENGINE), executor,
              max_tool_output_bytes=1000)
    r = out.tool_history[0][1]
    assert r.tool_error.details["error"] == "TOOL_OUTPUT_TOO_LARGE"
    assert "y" * 100 not in out.messages[2].content


# ---------------------------------------------------------------- parallel calls

def test_parallel_calls_run_and_come_back_in_call_order_with_their_ids(app):
    executor, _ = app
    order: list[str] = []

    @executor.registry.tool(kind="read")
    async def slow_read(name: str, delay: float) -> str:
        """Read slowly.

        Args:
            name: Which.
            delay: Seconds.
        """
        await asyncio.sleep(delay)
        order.append(name)
        return f"read {name}"

    turn = "\n".join([hermes("slow_read", name="first", delay=0.05),
                      hermes("slow_read", name="second", delay=0.0),
                      hermes("save_note", text="after reads"),
                      hermes("slow_read", name="third", delay=0.0)])
    model = ScriptedModel([turn, "all done"], model=QWEN, engine=ENGINE)
    out = run(model, executor)
    # the two reads ran together (second finished first); results still in call order
    assert order[:2] == ["second", "first"]
    assistant = out.messages[1]
    tool_msgs = [m for m in out.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_msgs] == [c.id for c in assistant.tool_calls]
    assert [m.content for m in tool_msgs] == ["read first", "read second", "saved", "read third"]
    assert len({c.id for c in assistant.tool_calls}) == 4


def test_duplicate_call_ids_in_one_turn_are_made_unique(app):
    executor, calls = app
    turn = oai(("get_weather", {"city": "A"}), ("get_weather", {"city": "B"}))
    for c in turn["tool_calls"]:
        c["id"] = "same"
    out = run(ScriptedModel([turn, "ok"], model=GPT, engine=ENGINE), executor)
    ids = [c.id for c in out.messages[1].tool_calls]
    assert len(set(ids)) == 2 and len(calls.log) == 2
    assert [m.tool_call_id for m in out.messages if m.role == "tool"] == ids


# ---------------------------------------------------------------- events

def _events(model, executor, stream=False, **kw):
    loop = ToolLoop(model, executor, engine=ENGINE, **kw)

    async def collect():
        return [e async for e in loop.events("Do the task.", stream=stream)]
    return asyncio.run(collect())


def _comparable(events):
    out = []
    for e in events:
        d = e.to_dict()
        if d["type"] == "done":
            d["outcome"].pop("content", None)
        out.append(d)
    return out


def test_events_are_the_same_for_a_native_and_an_emulated_model(app):
    executor, _ = app
    native = ScriptedModel([oai(("get_weather", {"city": "Paris"}), ("save_note", {"text": "hi"})),
                            {"role": "assistant", "content": "Done: sunny, note saved."}],
                           model=GPT, engine=ENGINE)
    emulated = ScriptedModel([llama("get_weather", city="Paris") + "; "
                              + llama("save_note", text="hi"),
                              "Done: sunny, note saved."], model=LLAMA_EMULATED, engine=ENGINE)
    a = _events(native, executor)
    b = _events(emulated, executor)
    assert _comparable(a) == _comparable(b)
    kinds = [e.type for e in a]
    assert kinds == [LoopEventType.TOOL_CALL, LoopEventType.TOOL_CALL,
                     LoopEventType.TOOL_RESULT, LoopEventType.TOOL_RESULT,
                     LoopEventType.TEXT, LoopEventType.DONE]
    assert a[-1].outcome.content == b[-1].outcome.content == "Done: sunny, note saved."


def test_streaming_events_deliver_deltas_and_complete_calls(app):
    executor, _ = app
    turns = ["<think>\nNeed weather.\n</think>\n\nChecking.\n" + hermes("get_weather", city="Rome"),
             "Rome is sunny today."]
    events = _events(ScriptedModel(turns, model=QWEN, engine=ENGINE, delta_chars=3), executor,
                     stream=True)
    texts = [e.content for e in events if e.type is LoopEventType.TEXT]
    assert len(texts) > 3 and all(len(t) <= 3 for t in texts)
    whole = [e.content for e in _events(ScriptedModel(turns, model=QWEN, engine=ENGINE), executor)
             if e.type is LoopEventType.TEXT]
    assert whole == ["Checking.", "Rome is sunny today."]
    assert "".join(texts) == "".join(whole)
    reasoning = "".join(e.content for e in events if e.type is LoopEventType.REASONING)
    assert "Need weather." in reasoning
    kinds = [e.type for e in events]
    progress = [i for i, k in enumerate(kinds) if k is LoopEventType.TOOL_PROGRESS]
    call_at = kinds.index(LoopEventType.TOOL_CALL)
    assert progress and max(progress) < call_at < kinds.index(LoopEventType.TOOL_RESULT)
    call = events[call_at].call
    assert call.name == "get_weather" and call.arguments == {"city": "Rome"}
    done = events[-1]
    assert done.type is LoopEventType.DONE and done.outcome.content == "Rome is sunny today."
    # the same run without streaming ends the same way
    plain = ToolLoop(ScriptedModel(turns, model=QWEN, engine=ENGINE), executor,
                     engine=ENGINE).run_sync("Do the task.")
    assert plain.content == done.outcome.content
    assert [(c.name, c.arguments) for c, _ in plain.tool_history] == \
        [(c.name, c.arguments) for c, _ in done.outcome.tool_history]


def test_streamed_native_turns_give_the_same_events_as_unstreamed(app):
    executor, _ = app
    turns = [oai(("get_weather", {"city": "Paris"}), content="Let me see."), "Sunny."]
    a = _events(ScriptedModel(turns, model=GPT, engine=ENGINE), executor)
    b = _events(ScriptedModel(turns, model=GPT, engine=ENGINE, delta_chars=1000), executor,
                stream=True)
    assert _comparable(a) == _comparable(b)


# ---------------------------------------------------------------- input shapes, sync use

def test_run_accepts_messages_and_a_system_prompt(app):
    executor, _ = app
    model = ScriptedModel(["Hi."], model=QWEN, engine=ENGINE)
    loop = ToolLoop(model, executor, engine=ENGINE, system="Be brief.")
    out = loop.run_sync([{"role": "user", "content": "hello"}])
    assert [m.role for m in model.requests[0].messages] == ["system", "user"]
    assert out.content == "Hi."


def test_bad_settings_are_clear_errors(app):
    executor, _ = app
    model = ScriptedModel([], model=QWEN, engine=ENGINE)
    with pytest.raises(ValueError, match="tool_use_mode"):
        ToolLoop(model, executor, tool_use_mode="sometimes")
    with pytest.raises(ValueError, match="tool_failure_policy"):
        ToolLoop(model, executor, tool_failure_policy="maybe")
    with pytest.raises(TypeError, match="model client"):
        ToolLoop(object(), executor)
