"""`toolrules serve` in front of a real local model: llama-cpp-python's OpenAI-compatible
server (`python -m llama_cpp.server`) running the bundled Gemma 3 270M weights.

Gemma 3 has no native tool calling: its rules make the proxy emulate - the emulation
prompt goes upstream, the model's text is read with the prompt's dialect. A 270M base
model rarely writes a good call, so these checks are about the path, not the model: the
official SDKs get well-formed answers, streamed and not, and every tool_use block that
comes back validates against the schema the client sent."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time

import jsonschema
import pytest

pytestmark = [pytest.mark.local,
              pytest.mark.filterwarnings("ignore:The model .* is deprecated")]

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("starlette") is None:
    pytest.skip("needs llama-cpp-python[server] and the serve extra", allow_module_level=True)

import anthropic  # noqa: E402
import openai  # noqa: E402

from serve_helpers import ProxyServer  # noqa: E402
from test_serve import WEATHER, WEATHER_OPENAI  # noqa: E402

MODEL = "gemma-3-270m"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server():
    try:
        from toolrules.clients import default_gguf

        gguf = default_gguf()
    except Exception as exc:  # the weights package is optional
        pytest.skip(f"local weights not available: {exc}")
    port = _free_port()
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", gguf, "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "4096", "--n_threads", "2", "--chat_format", "gemma",
         "--model_alias", MODEL],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.skip("llama_cpp.server did not start")
        try:
            if httpx.get(url + "/models", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.skip("llama_cpp.server did not answer within 120 s")
    yield url
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def proxy(llama_server):
    with ProxyServer(upstream=f"openai-compatible:{MODEL}", base_url=llama_server) as p:
        yield p


def _check_uses(blocks: list[object]) -> None:
    for b in blocks:
        if getattr(b, "type", None) == "tool_use":
            assert b.name == "get_weather"
            jsonschema.validate(b.input, WEATHER["input_schema"])


def test_local_model_anthropic_client(proxy):
    client = anthropic.Anthropic(base_url=proxy.url, api_key="x", max_retries=0, timeout=300)
    m = client.messages.create(model="claude-sonnet-4-5", max_tokens=48, tools=[WEATHER],
                               messages=[{"role": "user", "content": "What is the weather "
                                          "in Paris? Use the tool."}])
    assert m.stop_reason in ("end_turn", "tool_use", "max_tokens")
    assert m.content, "an answer came back"
    _check_uses(m.content)
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=32,
                                messages=[{"role": "user", "content": "Say hello."}]) as s:
        text = "".join(ev.text for ev in s if ev.type == "text")
        final = s.get_final_message()
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert text == "".join(b.text for b in final.content if b.type == "text")


def test_local_model_openai_client_multi_turn(proxy):
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0, timeout=300)
    r = client.chat.completions.create(
        model=MODEL, max_tokens=48, tools=[WEATHER_OPENAI], messages=[
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "3 C and cloudy"}])
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    msg = r.choices[0].message
    assert msg.content or msg.tool_calls
    chunks = list(client.chat.completions.create(
        model=MODEL, max_tokens=24, stream=True,
        messages=[{"role": "user", "content": "Count to three."}]))
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_local_model_constrained_to_a_valid_call(llama_server, tmp_path):
    """With `constrained: true` the upstream decodes under the call grammar: even a 270M
    base model's answer is a valid call, which the client gets as a tool_use block."""
    import toolrules

    if not toolrules.load().provider_rules("llamacpp").data.get("constrained"):
        pytest.skip("the llamacpp rule has no `constrained:` section here")
    cfg = tmp_path / "proxy.yaml"
    cfg.write_text(f"""
routes:
  - model: claude-sonnet-4-5
    upstream: {{provider: llamacpp, model: {MODEL}, base_url: {llama_server}}}
    tools: {{constrained: true}}
""", encoding="utf-8")
    with ProxyServer(config=cfg.read_text(), tmp=tmp_path) as proxy:
        client = anthropic.Anthropic(base_url=proxy.url, api_key="x", max_retries=0,
                                     timeout=300)
        m = client.messages.create(model="claude-sonnet-4-5", max_tokens=128, tools=[WEATHER],
                                   tool_choice={"type": "any"}, extra_body={"temperature": 0},
                                   messages=[{"role": "user", "content":
                                              "What is the weather in Paris?"}])
    uses = [b for b in m.content if b.type == "tool_use"]
    assert len(uses) == 1 and m.stop_reason == "tool_use"
    _check_uses(uses)
