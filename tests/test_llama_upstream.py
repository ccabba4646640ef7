"""The llama-server stand-in (toolrules.bench._llama_upstream), the upstream of the real
cache test: llama-server's endpoints and answer shapes, checked over real loopback HTTP.

Without the model: a scripted runner (one token per character, a cache of its last
evaluation) behind the real HTTP server - /props and the other GETs, the usage and
timings llama-server reports (streamed: on the last chunk; the usage chunk only when
`stream_options.include_usage` asks), rendering as llama-server renders (chat_template_kwargs
as variables, call arguments as objects, text parts as one string), stop strings,
the errors llama-server answers, and the proxy carrying the cached figure to the official
SDKs.

With the model (marker `local`): Gemma 3 270M behind the stand-in, the proxy in front, the
official `openai` and `anthropic` SDKs as clients - the first request evaluates its whole
prompt, each later turn only its new tokens, and the cached tokens each client is told are
the ones llama.cpp did not evaluate (its own perf counters) and llama-cpp-python reused.
"""

from __future__ import annotations

import json
import random
from collections.abc import Generator
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated")

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from serve_helpers import ProxyServer, an, oa  # noqa: E402
from toolrules.bench._llama_upstream import (  # noqa: E402
    Evaluation,
    Sampling,
    StopScanner,
    UpstreamServer,
    timings_of,
    usage_of,
)

TEMPLATE = """{{- bos_token -}}
{%- if greeting is defined %}[{{ greeting }}]{% endif -%}
{%- for m in messages -%}
{%- if m.role == 'system' and not loop.first %}{{ raise_exception('System message must be first') }}{% endif -%}
<|{{ m.role }}|>{{ m.content or '' }}
{%- for c in m.tool_calls or [] %}<call>{{ c.function.name }}:{{ c.function.arguments.cmd }}</call>{% endfor -%}
<|end|>
{%- endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% endif -%}"""

SYSTEM = "You answer in one line. " * 20


class ScriptedRunner:
    """One token per character; keeps its last evaluation and reuses the common prefix, as
    llama-cpp-python does; answers the next scripted reply in word pieces."""

    def __init__(self, n_ctx: int = 4096):
        self.n_ctx = n_ctx
        self.cache: list[int] = []
        self.replies: list[str] = []

    def tokenize(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def generate(self, tokens: list[int], sampling: Sampling,
                 ev: Evaluation) -> Generator[str, None, None]:
        kept = 0
        if sampling.cache_prompt:
            while kept < min(len(self.cache), len(tokens)) and self.cache[kept] == tokens[kept]:
                kept += 1
        ev.kept, ev.evaluated, ev.prompt_ms = kept, len(tokens) - kept, 2.0
        self.cache = list(tokens)
        reply = self.replies.pop(0) if self.replies else "Paris is the capital."
        budget = sampling.max_tokens if sampling.max_tokens is not None else 10 ** 6
        for piece in reply.split(" "):
            piece = piece if ev.predicted == 0 else " " + piece
            if ev.predicted >= budget:
                ev.finish = "length"
                return
            ev.predicted += 1
            ev.predicted_ms += 1.0
            self.cache += self.tokenize(piece)
            yield piece
        ev.finish = "stop"


@pytest.fixture
def stand_in():
    runner = ScriptedRunner()
    with UpstreamServer(runner, TEMPLATE, bos_token="<s>", eos_token="</s>",
                        alias="scripted-model", model_path="/models/scripted.gguf") as srv:
        yield srv


def post(srv: UpstreamServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=10)


def events(srv: UpstreamServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = post(srv, {**body, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    lines = [ln[6:] for ln in r.text.splitlines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(ln) for ln in lines[:-1]]


CONVERSATION = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": "What is the capital of France?"}]
NEXT = [*CONVERSATION, {"role": "assistant", "content": "Paris is the capital."},
        {"role": "user", "content": "And of Italy?"}]


# ---------------------------------------------------------------- figures and pieces

def test_usage_and_timings_are_llama_servers_shapes():
    ev = Evaluation(prompt_tokens=1000, evaluated=40, kept=960, predicted=5, prompt_ms=80.0,
                    predicted_ms=50.0, finish="stop")
    assert ev.cache_n == 960 and ev.agree
    assert usage_of(ev) == {"prompt_tokens": 1000, "completion_tokens": 5, "total_tokens": 1005,
                            "prompt_tokens_details": {"cached_tokens": 960}}
    t = timings_of(ev)
    assert (t["cache_n"], t["prompt_n"], t["predicted_n"]) == (960, 40, 5)
    assert t["prompt_per_token_ms"] == 2.0 and t["predicted_per_second"] == 100.0
    assert not Evaluation(prompt_tokens=10, evaluated=3, kept=6).agree
    # not measured (nothing decoded yet): nothing is claimed as cached
    assert Evaluation(prompt_tokens=10).cache_n == 0


def test_a_stop_string_cuts_the_text_wherever_the_pieces_split():
    text = "alpha beta<END>gamma"
    rng = random.Random(7)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(text)), 4))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
        scan = StopScanner(["<END>", "zzz"])
        out = "".join(scan.feed(p) for p in pieces) + scan.flush()
        assert out == "alpha beta" and scan.stopped
    scan = StopScanner([])
    assert scan.feed("a<") + scan.feed("b") + scan.flush() == "a<b" and not scan.stopped


def test_request_options_are_read_and_bad_ones_refused():
    s = Sampling.of({"max_completion_tokens": 7, "temperature": 0, "stop": "x", "seed": 3,
                     "cache_prompt": False, "grammar": "root ::= \"a\""})
    assert (s.max_tokens, s.temperature, s.stop, s.seed, s.cache_prompt) == (7, 0.0, ("x",),
                                                                           3, False)
    assert Sampling.of({"n_predict": -1}).max_tokens is None  # until the context ends
    for bad in ({"max_tokens": "8"}, {"temperature": "hot"}, {"stop": [1]}, {"n": 2},
                {"response_format": {"type": "json_object"}}, {"grammar": 5}):
        with pytest.raises(ValueError):
            Sampling.of(bad)


# ---------------------------------------------------------------- the server over HTTP

def test_props_health_and_models_say_what_llama_server_says(stand_in):
    props = httpx.get(stand_in.url + "/props").json()
    assert props["chat_template"] == TEMPLATE
    assert (props["bos_token"], props["eos_token"]) == ("<s>", "</s>")
    assert props["model_alias"] == "scripted-model"
    assert props["model_path"] == "/models/scripted.gguf"
    assert props["default_generation_settings"]["n_ctx"] == 4096
    assert httpx.get(stand_in.url + "/health").json() == {"status": "ok"}
    assert [m["id"] for m in httpx.get(stand_in.url + "/v1/models").json()["data"]] == \
        ["scripted-model"]
    assert httpx.get(stand_in.url + "/nothing").status_code == 404


def test_an_answer_reports_every_prompt_token_and_the_cached_ones(stand_in):
    first = post(stand_in, {"messages": CONVERSATION}).json()
    assert first["choices"][0]["message"] == {"role": "assistant",
                                              "content": "Paris is the capital."}
    assert first["choices"][0]["finish_reason"] == "stop"
    p1 = first["usage"]["prompt_tokens"]
    assert p1 == len(stand_in.records[0]["prompt"])  # one token per character
    assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert first["timings"]["prompt_n"] == p1 and first["timings"]["cache_n"] == 0
    assert first["usage"]["completion_tokens"] == first["timings"]["predicted_n"] == 4
    second = post(stand_in, {"messages": NEXT, "max_tokens": 2}).json()
    u, t = second["usage"], second["timings"]
    # the second prompt extends the first and its answer: all of that is reused
    cached = len(stand_in.records[0]["prompt"]) + len(" Paris is the capital.") - 1
    assert u["prompt_tokens_details"]["cached_tokens"] == t["cache_n"] >= p1
    assert t["prompt_n"] + t["cache_n"] == u["prompt_tokens"] > p1
    assert t["cache_n"] <= cached
    assert second["choices"][0]["finish_reason"] == "length"
    assert u["completion_tokens"] == 2 and u["total_tokens"] == u["prompt_tokens"] + 2
    rec = stand_in.records[1]
    assert (rec["prompt_tokens"], rec["evaluated"], rec["cache_n"], rec["stream"]) == \
        (u["prompt_tokens"], t["prompt_n"], t["cache_n"], False)
    # cache_prompt false: llama-server evaluates the whole prompt
    third = post(stand_in, {"messages": NEXT, "cache_prompt": False}).json()
    assert third["timings"]["cache_n"] == 0


def test_a_stream_ends_with_the_timings_and_the_usage_when_asked(stand_in):
    whole = post(stand_in, {"messages": CONVERSATION}).json()
    with_usage = events(stand_in, {"messages": NEXT,
                                   "stream_options": {"include_usage": True}})
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in with_usage
                   if e["choices"])
    assert text == whole["choices"][0]["message"]["content"]
    assert with_usage[0]["choices"][0]["delta"]["role"] == "assistant"
    finish, last = with_usage[-2], with_usage[-1]
    assert finish["choices"][0]["finish_reason"] == "stop" and "usage" not in finish
    assert last["choices"] == [] and last["object"] == "chat.completion.chunk"
    assert last["usage"]["prompt_tokens_details"]["cached_tokens"] == \
        last["timings"]["cache_n"] > 0
    assert last["timings"]["prompt_n"] + last["timings"]["cache_n"] == \
        last["usage"]["prompt_tokens"]
    plain = events(stand_in, {"messages": NEXT})
    assert not any("usage" in e for e in plain)
    assert plain[-1]["choices"][0]["finish_reason"] == "stop"
    assert plain[-1]["timings"]["cache_n"] > 0
    assert plain[-1]["timings"]["prompt_n"] + plain[-1]["timings"]["cache_n"] == \
        last["usage"]["prompt_tokens"]


def test_it_renders_as_llama_server_renders(stand_in):
    call = {"id": "c1", "type": "function",
            "function": {"name": "run", "arguments": json.dumps({"cmd": "ls -la"})}}
    post(stand_in, {"chat_template_kwargs": {"greeting": "hi"}, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "one"},
                                     {"type": "text", "text": "two"}]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "x.txt"}]})
    assert stand_in.records[-1]["prompt"] == (
        "<s>[hi]<|user|>one\ntwo<|end|><|assistant|><call>run:ls -la</call><|end|>"
        "<|tool|>x.txt<|end|><|assistant|>")


def test_stop_strings_end_the_answer_streamed_and_not(stand_in):
    stand_in.runner.replies = ["one two STOP three", "one two STOP three"]
    whole = post(stand_in, {"messages": CONVERSATION, "stop": ["STOP"]}).json()
    assert whole["choices"][0]["message"]["content"] == "one two "
    assert whole["choices"][0]["finish_reason"] == "stop"
    streamed = events(stand_in, {"messages": CONVERSATION, "stop": "STOP"})
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in streamed) == \
        "one two "


def test_the_errors_llama_server_answers(stand_in):
    raised = post(stand_in, {"messages": [*CONVERSATION, {"role": "system", "content": "x"}]})
    assert raised.status_code == 500
    assert raised.json()["error"]["message"] == "System message must be first"
    stand_in.runner.n_ctx = 50
    over = post(stand_in, {"messages": CONVERSATION})
    assert over.status_code == 400
    assert over.json()["error"]["type"] == "exceed_context_size_error"
    stand_in.runner.n_ctx = 4096
    for body in ({"messages": []}, {"messages": CONVERSATION, "max_tokens": "8"},
                 {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}):
        r = post(stand_in, body)
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert stand_in.records == []  # nothing was evaluated


def test_the_proxy_configures_the_route_from_props_and_passes_the_cache_figure_on(
        stand_in, engine):
    """As with llama-server: the route is configured from the stand-in's template, and
    the cached tokens it reports reach the SDKs' usage, streamed and not."""
    with ProxyServer(upstream="llamacpp:scripted-model", base_url=stand_in.url + "/v1",
                     engine=engine) as proxy:
        assert proxy.config.routes[-1].template.reason is None
        oa(proxy).chat.completions.create(model="scripted-model", messages=CONVERSATION)
        r = oa(proxy).chat.completions.create(model="scripted-model", messages=NEXT)
        rec = stand_in.records[-1]
        assert r.usage.prompt_tokens == rec["prompt_tokens"]
        assert r.usage.prompt_tokens_details.cached_tokens == rec["cache_n"] > 0
        with an(proxy).messages.stream(model="scripted-model", max_tokens=20, system=SYSTEM,
                                       messages=[m for m in NEXT if m["role"] != "system"]
                                       ) as s:
            final = s.get_final_message()
        rec = stand_in.records[-1]
        assert rec["stream"] and SYSTEM.strip() in rec["prompt"]
        assert final.usage.cache_read_input_tokens == rec["cache_n"] > 0
        assert final.usage.input_tokens + final.usage.cache_read_input_tokens == \
            rec["prompt_tokens"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_bench_reads_what_each_api_tells_the_client(stand_in, engine, stream):
    """bench prefix --local reads the client's figures from the raw answers of the three
    fronts (what the agents parse): they are the stand-in's own."""
    from toolrules.bench._prefix_local import client_usage

    user = [m for m in NEXT if m["role"] != "system"]
    bodies = {
        "/v1/messages": {"model": "m", "max_tokens": 20, "system": SYSTEM, "messages": user},
        "/v1/responses": {"model": "m", "instructions": SYSTEM, "input": user},
        "/v1/chat/completions": {"model": "m", "messages": NEXT,
                                 **({"stream_options": {"include_usage": True}}
                                    if stream else {})}}
    with ProxyServer(upstream="llamacpp:scripted-model", base_url=stand_in.url + "/v1",
                     engine=engine) as proxy:
        for path, body in bodies.items():
            r = httpx.post(proxy.url + path, json={**body, "stream": stream}, timeout=10,
                           headers={"anthropic-version": "2023-06-01"})
            assert r.status_code == 200, r.text
            rec = stand_in.records[-1]
            assert rec["cache_n"] > 0 or path == "/v1/messages"
            assert client_usage(r.content, stream) == (rec["prompt_tokens"], rec["cache_n"]), \
                path


# ---------------------------------------------------------------- the real model

LONG_SYSTEM = ("You are a careful assistant for a small shell workspace. Answer briefly, "
               "name the files you would read, and never invent command output. ") * 24


@pytest.fixture(scope="module")
def gemma(engine, tmp_path_factory):
    """The embedded model behind the stand-in, as `bench prefix --local` runs it."""
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("needs llama-cpp-python (the local extra)")
    try:
        from toolrules.clients import default_gguf

        gguf = default_gguf()
    except Exception as exc:  # the weights package is optional
        pytest.skip(f"local weights not available: {exc}")
    from toolrules.bench._llama_upstream import LlamaUpstream
    from toolrules.bench._prefix_local import LOCAL_MODEL, chat_template_file

    with LlamaUpstream(gguf, chat_template=chat_template_file(engine, gguf), alias=LOCAL_MODEL,
                       n_ctx=8192, workdir=tmp_path_factory.mktemp("gemma")) as up, \
            ProxyServer(upstream=f"llamacpp:{LOCAL_MODEL}", base_url=up.url + "/v1",
                        engine=engine) as proxy:
        yield up, proxy


@pytest.mark.local
def test_the_sdks_are_told_the_tokens_the_model_reused(gemma):
    """A conversation through the proxy into Gemma 3 270M: the first request evaluates its
    whole prompt; each later turn (the chat API streamed, then Anthropic's streamed)
    evaluates only what it added, and the cached tokens the SDK reports are exactly the
    prompt tokens llama.cpp did not evaluate - the prefix llama-cpp-python reused."""
    import anthropic
    import openai

    up, proxy = gemma
    chat = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0, timeout=900)
    history: list[dict[str, Any]] = [
        {"role": "system", "content": LONG_SYSTEM},
        {"role": "user", "content": "Which file holds the project's version number?"}]
    r = chat.chat.completions.create(model="gemma-3-270m", messages=history, max_tokens=8,
                                     temperature=0)
    first = up.records()[-1]
    assert first["evaluated"] == first["prompt_tokens"] > 500 and first["kept"] == 0
    assert LONG_SYSTEM.strip() in first["prompt"]  # the system text reaches the model
    assert r.usage.prompt_tokens == first["prompt_tokens"]
    assert (r.usage.prompt_tokens_details.cached_tokens or 0) == 0

    history += [{"role": "assistant", "content": r.choices[0].message.content or "ok"},
                {"role": "user", "content": "And which one lists its dependencies?"}]
    chunks = list(chat.chat.completions.create(
        model="gemma-3-270m", messages=history, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    usage = next(c.usage for c in reversed(chunks) if c.usage is not None)
    second = up.records()[-1]
    assert second["stream"] and second["agree"]
    assert second["evaluated"] < second["prompt_tokens"] // 4
    assert second["kept"] >= first["prompt_tokens"]
    assert usage.prompt_tokens == second["prompt_tokens"]
    assert usage.prompt_tokens_details.cached_tokens == second["kept"] == \
        second["prompt_tokens"] - second["evaluated"]

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    messages = [*history[1:], {"role": "assistant", "content": text or "ok"},
                {"role": "user", "content": "Thanks. Where are the tests?"}]
    client = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0, timeout=900)
    with client.messages.stream(model="gemma-3-270m", max_tokens=8, system=LONG_SYSTEM,
                                messages=messages) as s:
        final = s.get_final_message()
    third = up.records()[-1]
    assert third["stream"] and third["agree"]
    assert third["evaluated"] < third["prompt_tokens"] // 4
    assert final.usage.cache_read_input_tokens == third["kept"] == \
        third["prompt_tokens"] - third["evaluated"]
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == \
        third["prompt_tokens"]
