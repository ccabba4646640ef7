"""No model reply can hang a parser, the proxy or the loop.

- The replies that used to spin forever (a run of word characters at the start, in the
  pythonic, auto and Llama 4 readers) read as text, whole and streamed, in a subprocess
  with a time limit (a hang fails the test, not the suite).
- A machine that stops making progress is a ParseError naming the dialect and position.
- Under `parse_deadline`, a parse that is too slow raises ParseTimeoutError with the text
  read; `toolrules serve` ends that one request with a 502 in the client's shape (or the
  stream's error event) and goes on serving; the tool loop stops with parse_timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import toolrules
from toolrules.dialects._scanner import Machine, Sink

ISSUE_LINES = textwrap.dedent("""
    import json, time, toolrules
    e = toolrules.load()
    out = []
    for label, make, text in [
        ("pythonic", lambda: e.text_parser(dialect="pythonic"), "x" * 257),
        ("auto", lambda: e.text_parser(dialect="auto"), "x" * 300),
        ("llama4", lambda: e.text_parser(model="meta-llama/Llama-4-Scout-17B-16E-Instruct"),
         "x" * 300),
    ]:
        p = make()
        p.parse("warm up")
        t = time.perf_counter()
        r = p.parse(text)
        whole = time.perf_counter() - t
        st = p.stream()
        chunks = []
        for i in range(0, len(text), 7):
            chunks += st.feed(text[i:i + 7])
        chunks += st.close()
        streamed = "".join(c.content or "" for c in chunks if c.type == "text")
        out.append([label, r.content == text, streamed == text, len(r.tool_calls), whole])
    print(json.dumps(out))
""")


def test_the_issue_lines_return_their_text_at_once():
    proc = subprocess.run([sys.executable, "-c", ISSUE_LINES], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for label, whole_ok, stream_ok, calls, _seconds in json.loads(proc.stdout):
        assert (label, whole_ok, stream_ok, calls) == (label, True, True, 0)


def test_a_step_that_changes_nothing_is_a_parse_error_not_a_hang(monkeypatch):
    e = toolrules.load()
    p = e.text_parser(dialect="hermes")

    def stuck(self: Machine, final: bool) -> bool:
        return True  # claims progress, consumes nothing

    monkeypatch.setattr(Machine, "_step_region", stuck)
    with pytest.raises(toolrules.ParseError) as err:
        p.stream().feed("hello")
    msg = str(err.value)
    assert "dialect 'hermes'" in msg and "at character 0" in msg
    assert "changed nothing" in msg and "bug in toolrules" in msg


def test_a_cycle_of_steps_runs_into_the_step_budget(monkeypatch):
    """Two steps that undo each other change state every time: the budget ends it."""
    e = toolrules.load()
    p = e.text_parser(dialect="hermes")

    def flip(self: Machine, final: bool) -> bool:
        self.start_ok = not self.start_ok
        self.region = self.d.content if self.region is not self.d.content else self.region
        self.buf += ""  # nothing read
        self.header = [] if self.header is None else None
        return True

    monkeypatch.setattr(Machine, "_step_region", flip)
    monkeypatch.setattr(Machine, "_step_header", flip)
    with pytest.raises(toolrules.ParseError, match=r"took more than \d+ steps for 5 char"):
        p.stream().feed("hello")


# ---------------------------------------------------------------- the deadline

def _slow(monkeypatch: Any, seconds: float = 0.002) -> None:
    """Every call the scanner reads takes `seconds` more: a parser forced to be slow."""
    original = Sink._call

    def slow(self: Sink, *args: Any) -> None:
        time.sleep(seconds)
        original(self, *args)

    monkeypatch.setattr(Sink, "_call", slow)


CALLS = "[" + ", ".join(f"get_weather(city='c{i}')" for i in range(400)) + "]"
# the same calls as an emulated model (JSON emulation, json-fenced) writes them
FENCED = "\n\n".join(f'```json\n{{"name": "get_weather", "arguments": {{"city": "c{i}"}}}}\n```'
                     for i in range(400))


def test_without_a_deadline_a_slow_parse_finishes(monkeypatch):
    _slow(monkeypatch, 0.0001)
    p = toolrules.load().text_parser(dialect="pythonic")
    assert len(p.parse(CALLS).tool_calls) == 400


def test_a_parse_past_its_deadline_raises_with_the_text(monkeypatch):
    _slow(monkeypatch)
    p = toolrules.load().text_parser(dialect="pythonic")
    started = time.perf_counter()
    with toolrules.parse_deadline(0.1), pytest.raises(toolrules.ParseTimeoutError) as err:
        p.parse(CALLS)
    assert time.perf_counter() - started < 2
    assert err.value.text == CALLS
    assert "parse deadline (0.1 s)" in str(err.value)
    with toolrules.parse_deadline(0.1), pytest.raises(toolrules.ParseTimeoutError) as err:
        st = p.stream()
        for i in range(0, len(CALLS), 9):
            st.feed(CALLS[i:i + 9])
        st.close()
    assert CALLS.startswith(err.value.text) and err.value.text
    with pytest.raises(ValueError, match="positive"), toolrules.parse_deadline(0):
        pass


# ---------------------------------------------------------------- the proxy

def _upstream_text(text: str) -> Any:
    from wire_server import json_reply

    return json_reply({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": text}}]})


def test_the_proxy_fails_one_slow_reply_and_serves_the_others(monkeypatch, tmp_path):
    import httpx

    from serve_helpers import ProxyServer
    from wire_server import WireServer

    _slow(monkeypatch)
    config = """
server: {parse_timeout: 0.3}
routes:
  - model: google/gemma-3-12b-it
    upstream: {provider: openai-compatible, base_url: URL/v1}
"""

    def answer(seen: Any) -> Any:
        body = json.loads(seen.body)
        slow = body["messages"][-1]["content"] == "slow"
        return _upstream_text(FENCED if slow else "a short answer")

    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    with WireServer(responder=answer) as up, ProxyServer(
            config=config.replace("URL", up.url), tmp=tmp_path,
            trace_dir=str(tmp_path / "traces")) as proxy:
        results: dict[str, Any] = {}

        def ask(word: str) -> None:
            with httpx.Client(timeout=30) as c:
                results[word] = c.post(proxy.url + "/v1/chat/completions", json={
                    "model": "google/gemma-3-12b-it", "tools": tools,
                    "messages": [{"role": "user", "content": word}]})

        slow = threading.Thread(target=ask, args=("slow",))
        slow.start()
        time.sleep(0.05)
        ask("quick")
        slow.join(timeout=30)
        assert results["quick"].status_code == 200
        assert results["quick"].json()["choices"][0]["message"]["content"] == "a short answer"
        late = results["slow"]
        assert late.status_code == 502
        err = late.json()["error"]
        assert "parse deadline" in err["message"] and err["type"]
        # the worker still serves
        ask("quick")
        assert results["quick"].status_code == 200
    records = [json.loads(x) for f in (tmp_path / "traces").glob("*.jsonl")
               for x in f.read_text().splitlines()]
    timeouts = [r for r in records if r.get("error") == "parse_timeout"]
    assert len(timeouts) == 1 and timeouts[0]["raw"] == FENCED


def test_the_loop_stops_with_parse_timeout_and_keeps_the_raw_text(monkeypatch, tmp_path):
    _slow(monkeypatch)
    e = toolrules.load()
    reg = toolrules.ToolRegistry()

    @reg.tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        return "sunny"

    model = toolrules.ScriptedModel([CALLS, "done"], model="meta-llama/Llama-4-Scout-17B-16E-Instruct",
                                    engine=e)
    ex = toolrules.ToolExecutor(reg, workspace=str(tmp_path), engine=e)
    loop = toolrules.ToolLoop(model, ex, parse_timeout=0.2, engine=e,
                              trace_path=tmp_path / "t.jsonl")
    assert model.engine.dialect_for("meta-llama/Llama-4-Scout-17B-16E-Instruct") == "pythonic"
    outcome = loop.run_sync("weather please")
    assert outcome.stopped == "parse_timeout"
    assert "parse deadline (0.2 s)" in (outcome.error or "")
    records = [json.loads(x) for x in Path(tmp_path / "t.jsonl").read_text().splitlines()]
    assert any(r.get("error") == "parse_timeout" and r.get("raw") == CALLS for r in records)
