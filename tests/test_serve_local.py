"""`toolrules serve` in front of a real local model: the bundled Gemma 3 270M weights
behind the llama-server stand-in (toolrules.bench._llama_upstream: llama-cpp-python's
`Llama`, the chat template rendered as llama-server renders it - the rules' Gemma template,
the GGUF carries none - served at GET /props, so the proxy configures the route from it).
llama-cpp-python's own server (`--chat_format gemma`) leaves system messages out, and with
them the emulation prompt that offers the tools: not a fair upstream for these checks.

Gemma 3 has no native tool calling: its rules make the proxy emulate - the emulation
prompt goes upstream, the model's text is read with the prompt's dialect. A 270M base
model rarely writes a good call, so these checks are about the path, not the model: the
official SDKs get well-formed answers, streamed and not, and every tool_use block that
comes back validates against the schema the client sent."""

from __future__ import annotations

import importlib.util

import jsonschema
import pytest

pytestmark = [pytest.mark.local,
              pytest.mark.filterwarnings("ignore:The model .* is deprecated")]

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("starlette") is None:
    pytest.skip("needs llama-cpp-python (the local extra) and the serve extra",
                allow_module_level=True)

import anthropic  # noqa: E402
import openai  # noqa: E402

from serve_helpers import ProxyServer  # noqa: E402
from test_serve import WEATHER, WEATHER_OPENAI  # noqa: E402

MODEL = "gemma-3-270m"


@pytest.fixture(scope="module")
def stand_in(engine, tmp_path_factory):
    try:
        from toolrules.clients import default_gguf

        gguf = default_gguf()
    except Exception as exc:  # the weights package is optional
        pytest.skip(f"local weights not available: {exc}")
    from toolrules.bench._llama_upstream import LlamaUpstream
    from toolrules.bench._prefix_local import chat_template_file

    with LlamaUpstream(gguf, chat_template=chat_template_file(engine, gguf), alias=MODEL,
                       n_ctx=4096, workdir=tmp_path_factory.mktemp("stand-in")) as up:
        yield up


@pytest.fixture(scope="module")
def llama_server(stand_in):
    return stand_in.url + "/v1"


@pytest.fixture(scope="module")
def proxy(llama_server):
    with ProxyServer(upstream=f"openai-compatible:{MODEL}", base_url=llama_server) as p:
        yield p


def _valid(block: object) -> bool:
    if getattr(block, "name", None) != "get_weather":
        return False
    try:
        jsonschema.validate(getattr(block, "input", None), WEATHER["input_schema"])
    except jsonschema.ValidationError:
        return False
    return True


def _check_uses(blocks: list[object], logged: dict | None = None) -> None:
    """Every tool_use block validates against the client's schema - or, as the proxy
    documents it (a call that stays invalid once the validation retries are spent goes to
    the client), the access log counted it invalid after retrying. The model sees the
    tools (its prompt carries the emulation text), so a 270M base model sometimes copies
    the prompt's example call."""
    uses = [b for b in blocks if getattr(b, "type", None) == "tool_use"]
    bad = [b for b in uses if not _valid(b)]
    if logged is None:
        assert bad == []
    elif bad:
        assert logged.get("invalid", 0) >= len(bad) and logged["attempts"] > 1, logged


def test_local_model_anthropic_client(proxy, stand_in, access):
    client = anthropic.Anthropic(base_url=proxy.url, api_key="x", max_retries=0, timeout=300)
    before = len(stand_in.records())
    m = client.messages.create(model="claude-sonnet-4-5", max_tokens=48, tools=[WEATHER],
                               messages=[{"role": "user", "content": "What is the weather "
                                          "in Paris? Use the tool."}])
    # the emulation prompt (the system text that offers the tool) reaches the model
    prompt = stand_in.records()[before]["prompt"]
    assert "get_weather" in prompt and WEATHER["description"] in prompt
    assert m.stop_reason in ("end_turn", "tool_use", "max_tokens")
    assert m.content, "an answer came back"
    _check_uses(m.content, access()[-1])
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
