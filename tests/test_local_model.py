"""The embedded local model on real weights (Gemma 3 270M, rules/local.yaml): in-process
through `toolrules.connect("local")`, and through llama-cpp-python's OpenAI-compatible
server over real HTTP.

Constrained decoding is checked by running the model under the grammar: every call it
writes must validate against the offered schemas, whatever the model "wanted". Tool
selection is reported (the README's figures), not asserted: a 270M base model chooses
badly, and that is the point of measuring it.

Greedy decoding keeps runs repeatable; max_tokens stays small (the model writes ~20-40
tokens a second on one busy core).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import toolrules
from toolrules import Tool
from toolrules.bench._local import TASKS, TOOLS, run_tasks

pytestmark = pytest.mark.local

if importlib.util.find_spec("llama_cpp") is None:
    pytest.skip("llama_cpp is not installed: pip install 'toolrules[local]' (the local model's "
                "runtime); CI installs it", allow_module_level=True)

MODEL = "gemma-3-270m"


@pytest.fixture(scope="module")
def local():
    from toolrules.clients import default_gguf

    try:
        default_gguf()
    except (ImportError, OSError) as exc:
        pytest.skip(f"the bundled weights are not installed: {exc}")
    return toolrules.connect("local").load()


# ---------------------------------------------------------------- in-process

def test_connect_local_is_the_rules_model(local):
    assert isinstance(local, toolrules.LocalModel) and local.model == MODEL
    assert Path(local.gguf).is_file()
    assert isinstance(local, toolrules.ModelClient)
    again = toolrules.connect("local")
    assert again._runtime() is local._runtime()  # one instance per process


def test_constrained_calls_are_schema_valid_over_the_task_set(local, engine):
    run = run_tasks(local, engine, tool_choice="required", max_tokens=128)
    print(f"\nconstrained, required: {run.with_call}/{run.answers} answers call a tool, "
          f"{run.valid} schema-valid, right tool {run.right_tool}/{run.answers}, "
          f"key argument {run.right_argument}/{run.answers}, {run.seconds:.1f}s")
    assert run.answers == len(TASKS)
    assert run.with_call >= len(TASKS) - 1  # an answer cut at max_tokens holds no call
    assert run.valid == run.with_call, [(q, p.tool_calls) for q, p in run.outputs]
    for _q, parsed in run.outputs:
        if parsed.tool_calls:
            assert parsed.finish_reason in ("tool_calls", "stop")
            assert len(parsed.tool_calls) == 1


# schemas beyond the task set: nesting, arrays with bounds, enums, anyOf, $ref, required
# keys after optional ones, integers with a minimum
HARD = [
    Tool("plan_trip", "Plan a trip.", {
        "type": "object", "$defs": {"stop": {"type": "object", "properties": {
            "city": {"type": "string"}, "nights": {"type": "integer", "minimum": 1}},
            "required": ["city", "nights"]}},
        "properties": {"travellers": {"type": "integer", "minimum": 1},
                       "stops": {"type": "array", "items": {"$ref": "#/$defs/stop"},
                                 "minItems": 1, "maxItems": 3},
                       "class": {"type": "string", "enum": ["economy", "business"]},
                       "notes": {"type": ["string", "null"]}},
        "required": ["stops", "class"]}),
    Tool("set_flags", "Set feature flags.", {
        "type": "object", "properties": {
            "flags": {"type": "object", "additionalProperties": {"type": "boolean"},
                      "minProperties": 1, "maxProperties": 3},
            "scope": {"anyOf": [{"type": "string", "enum": ["all"]},
                                {"type": "array", "items": {"type": "string"}, "maxItems": 2}]},
            "dry_run": {"type": "boolean"}},
        "required": ["flags", "scope", "dry_run"]}),
]


@pytest.mark.parametrize("request_text,tool", [
    ("Plan a trip to Rome for two nights, business class", "plan_trip"),
    ("Turn on dark_mode for all users", "set_flags"),
])
def test_the_model_under_the_grammar_writes_valid_calls_for_hard_schemas(local, engine,
                                                                         request_text, tool):
    parsed = local.generate_sync([{"role": "user", "content": request_text}], HARD, tool,
                                 max_tokens=160)
    assert parsed.finish_reason != "length", parsed.raw
    assert [c.name for c in parsed.tool_calls] == [tool]
    assert engine.validate_tool_call(parsed.tool_calls[0], HARD) == []


def test_auto_answers_are_text_or_valid_calls(local, engine):
    run = run_tasks(local, engine, tool_choice="auto", tasks=TASKS[::4], max_tokens=64)
    assert run.valid == run.with_call
    for _q, parsed in run.outputs:
        assert parsed.tool_calls or (parsed.content or "").strip()


def test_unconstrained_is_reported_not_asserted(local, engine):
    run = run_tasks(local, engine, tool_choice="auto", constrained=False, tasks=TASKS[:2],
                    max_tokens=48)
    assert run.answers == 2  # whatever the model wrote was read without an error


def _collect(model, *args, **kw):
    async def go():
        chunks = [c async for c in model.stream(*args, **kw)]
        return chunks, model.last_response
    return asyncio.run(go())


def test_stream_equals_generate(local):
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    whole = local.generate_sync(msgs, list(TOOLS), "required", max_tokens=64)
    chunks, last = _collect(local, msgs, list(TOOLS), "required", max_tokens=64)
    ends = [c for c in chunks if c.type is toolrules.StreamChunkType.TOOL_END]
    assert [(c.tool_name, c.arguments) for c in ends] == \
        [(c.name, c.arguments) for c in whole.tool_calls]
    assert [(c.name, c.arguments) for c in last.tool_calls] == \
        [(c.name, c.arguments) for c in whole.tool_calls]
    plain = local.generate_sync([{"role": "user", "content": "Say hello."}], max_tokens=16)
    chunks, last = _collect(local, [{"role": "user", "content": "Say hello."}], max_tokens=16)
    assert "".join(c.content or "" for c in chunks) == (plain.content or "")
    assert last.content == plain.content


def test_generation_runs_off_the_event_loop(local):
    async def go():
        ticks = 0
        stop = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        t = asyncio.create_task(ticker())
        await local.generate([{"role": "user", "content": "Count to five."}], max_tokens=24)
        stop.set()
        await t
        return ticks

    assert asyncio.run(go()) > 5


def test_unknown_options_and_missing_weights_are_clear_errors(local):
    with pytest.raises(TypeError, match="does not take option"):
        local.generate_sync([{"role": "user", "content": "hi"}], max_tokens=4, nucleus=0.3)
    with pytest.raises(toolrules.CapabilityError, match="no GGUF file"):
        toolrules.connect("local", gguf="/nonexistent/model.gguf")
    with pytest.raises(TypeError, match="connect"):
        toolrules.connect("openai-compatible", "x", gguf="/x.gguf")


def test_tool_loop_completes_a_task_in_a_workspace(local, tmp_path):
    (tmp_path / "notes.txt").write_text("The secret word is basil.\n", encoding="utf-8")
    executor = toolrules.ToolExecutor(toolrules.builtin_tools(workspace=tmp_path),
                                      workspace=tmp_path, trust="read_only",
                                      allowed=["read_file"])
    # one round with a tool call required, then the loop's closing turn without tools
    loop = toolrules.ToolLoop(local, executor, max_rounds=1, tool_choice="required",
                              max_tokens=96)
    started = time.perf_counter()
    out = loop.run_sync("Read notes.txt")
    print(f"\nloop: {out.rounds} rounds, {time.perf_counter() - started:.1f}s, "
          f"calls {[(c.name, c.arguments) for c, _ in out.tool_history]}, "
          f"answer {out.content[:80]!r}")
    assert len(out.tool_history) == 1
    call, result = out.tool_history[0]
    assert call.name == "read_file" and call.arguments["path"] == "notes.txt"
    assert result.ok and "basil" in str(result.output)
    # the result went back to the model, which then answered in a turn without tools
    assert out.stopped == "max_rounds" and out.rounds == 2
    assert any(m.role == "tool" and "basil" in str(m.content) for m in out.messages)
    assert out.content.strip()
    # what it answers is the 270M base model's: it repeats its call (README, Local model)
    assert local.last_prompt is not None and "basil" in local.last_prompt.text


# ---------------------------------------------------------------- over HTTP

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(local, engine, tmp_path_factory):
    """llama-cpp-python's OpenAI-compatible server on loopback, rendering the Gemma turn
    format from our template (its own `gemma` format drops system messages, where the
    emulation prompt travels)."""
    pytest.importorskip("uvicorn", reason="llama_cpp.server needs the [server] extra")
    httpx = pytest.importorskip("httpx")
    rules = engine.ruleset.templates["chat/gemma.j2"].text
    cfg = tmp_path_factory.mktemp("server") / "tokenizer_config.json"
    cfg.write_text(json.dumps({"chat_template": rules, "bos_token": "<bos>",
                               "eos_token": "<eos>"}), encoding="utf-8")
    port = _free_port()
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    log = cfg.parent / "server.log"
    with open(log, "wb") as sink:  # a file, not a pipe nobody reads: the server logs a lot
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", local.gguf, "--host",
             "127.0.0.1", "--port", str(port), "--n_ctx", "4096", "--model_alias", MODEL,
             "--chat_format", "hf-tokenizer-config", "--hf_tokenizer_config_path", str(cfg)],
            stdout=sink, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:]
                pytest.fail(f"llama_cpp.server exited: {tail}")
            try:
                if httpx.get(url + "/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("llama_cpp.server did not answer /v1/models within 120 s")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_server_openai_compatible_generate_and_stream(server, engine):
    model = toolrules.connect("openai-compatible", MODEL, base_url=server)
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    whole = model.generate_sync(msgs, list(TOOLS), max_tokens=48, temperature=0, seed=0)
    # The server has no tool parser: a call the model wrote comes back as content and is
    # read with the emulation's dialect (unconstrained, this model mostly copies the prompt's
    # format line - a call to "tool_name" - which validation then refuses).
    assert whole.tool_calls or whole.content
    assert "```json" not in (whole.content or "")
    for c in whole.tool_calls:
        if c.name not in {t.name for t in TOOLS}:
            assert engine.validate_tool_call(c, list(TOOLS))
    chunks = list(model.stream_sync(msgs, list(TOOLS), max_tokens=48, temperature=0, seed=0))
    text = "".join(c.content or "" for c in chunks
                   if c.type is toolrules.StreamChunkType.TEXT)
    ends = [(c.tool_name, c.arguments) for c in chunks
            if c.type is toolrules.StreamChunkType.TOOL_END]
    assert text == (whole.content or "")
    assert ends == [(c.name, c.arguments) for c in whole.tool_calls]
    assert len(chunks) > 3  # streamed in pieces, not one block
    model.close()


def test_server_with_the_grammar_in_the_request_returns_a_valid_call(server, engine):
    model = toolrules.connect("llamacpp", MODEL, base_url=server)
    msgs = [{"role": "user", "content": "Send an email to bob@example.com: the build is green"}]
    whole = model.generate_sync(msgs, list(TOOLS), "required", constrained=True,
                                max_tokens=96, temperature=0, seed=0)
    assert len(whole.tool_calls) == 1
    assert engine.validate_tool_call(whole.tool_calls[0], list(TOOLS)) == []
    chunks = list(model.stream_sync(msgs, list(TOOLS), "required", constrained=True,
                                    max_tokens=96, temperature=0, seed=0))
    ends = [(c.tool_name, c.arguments) for c in chunks
            if c.type is toolrules.StreamChunkType.TOOL_END]
    assert ends == [(c.name, c.arguments) for c in whole.tool_calls]
    model.close()
