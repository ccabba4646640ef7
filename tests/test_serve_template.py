"""`toolrules serve --upstream llamacpp --base-url URL` asks the server which chat template
it renders (GET /props) and configures the route from it: a model the rules have never
seen gets its turn constraints, its call format and native tools with no rules edit. A
server that does not say, or a template that does not render, leaves the rules in charge,
with the reason logged and shown.

The upstream is a small llama-server-like server on 127.0.0.1 (tests/props_server.py)
rendering each request with its template (our own, in the tagged-parameter format) and
answering with raw model text - no tool-call parser on the server."""

from __future__ import annotations

import json
import logging
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

import toolrules
from toolrules.cli import main
from toolrules.serve import load_config

sys.path.insert(0, str(Path(__file__).parent))
from props_server import PropsServer
from serve_helpers import ProxyServer, an, oa

MODEL = "my-local-model"  # no family rule knows it

TEMPLATE = textwrap.dedent("""
    {%- if tools %}<|im_start|>system
    {% if messages[0].role == 'system' %}{{ messages[0].content }}

    {% endif %}You can call these functions:
    {% for t in tools %}{{ t | tojson }}
    {% endfor %}Call one as <tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call><|im_end|>
    {% elif messages[0].role == 'system' %}<|im_start|>system
    {{ messages[0].content }}<|im_end|>
    {% endif %}
    {%- for m in messages %}
    {%- if m.role == 'system' %}{% if not loop.first %}{{ raise_exception('System message must be at the beginning.') }}{% endif %}
    {%- elif m.role == 'assistant' %}<|im_start|>assistant
    {% if m.reasoning_content %}<think>
    {{ m.reasoning_content }}
    </think>

    {% endif %}{{ m.content or '' }}
    {%- for c in m.tool_calls or [] %}
    <tool_call>
    <function={{ c.function.name }}>
    {% for k, v in c.function.arguments | items %}<parameter={{ k }}>
    {{ v if v is string else v | tojson }}
    </parameter>
    {% endfor %}</function>
    </tool_call>
    {%- endfor %}<|im_end|>
    {% elif m.role == 'tool' %}<|im_start|>user
    <tool_response>
    {{ m.content }}
    </tool_response><|im_end|>
    {% elif m.role == 'user' %}<|im_start|>user
    {{ m.content }}<|im_end|>
    {% else %}{{ raise_exception('Unexpected message role.') }}
    {%- endif %}
    {%- endfor %}
    {%- if add_generation_prompt %}<|im_start|>assistant
    {% endif %}
""").strip("\n")

RAW_CALL = ("I will look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
            "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def engine():
    return toolrules.load(use_env=False, cache=False)


def test_the_route_takes_its_configuration_from_the_served_template(engine, caplog):
    caplog.set_level(logging.INFO, logger="toolrules.serve")
    with PropsServer(TEMPLATE, alias="weights/my-local-model.Q4_K_M.gguf") as up:
        config = load_config(engine, upstream="llamacpp", base_url=up.url + "/v1")
        assert up.props_asked == 1
    [route] = config.routes
    derived = route.template
    assert derived is not None and derived.reason is None
    assert derived.url == f"{up.url}/props"
    assert derived.name == "weights/my-local-model.Q4_K_M.gguf"
    assert derived.fields["dialect"] == "qwen3-coder"
    assert derived.fields["turn_system"] == "first"
    assert derived.fields["native_tools"] is True
    # the rules alone know nothing of this model ...
    before = engine.capability(MODEL)
    assert (before.native_tools, before.dialect, before.turn_system) == (False, None, "anywhere")
    # ... the route's engine has what the template showed
    cap = route.engine.capability(MODEL)
    assert (cap.native_tools, cap.dialect, cap.turn_system) == (True, "qwen3-coder", "first")
    assert cap.turn_roles == ("tool",)
    description = derived.describe()
    assert description.startswith(f"chat template from {up.url}/props "
                                  "(weights/my-local-model.Q4_K_M.gguf), sha256 ")
    assert "dialect qwen3-coder" in description and "turn_system first" in description
    logged = [r.getMessage() for r in caplog.records if r.name == "toolrules.serve"]
    assert any("chat template from" in m and "turn_system first" in m for m in logged)


def test_an_unknown_model_calls_tools_through_the_proxy(engine):
    with PropsServer(TEMPLATE, replies=[RAW_CALL, RAW_CALL]) as up, \
            ProxyServer(upstream="llamacpp", base_url=up.url + "/v1", engine=engine) as proxy:
        res = oa(proxy).chat.completions.create(
            model=MODEL, tools=TOOLS,
            messages=[{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "Weather in Paris for 3 days?"}])
        msg = res.choices[0].message
        assert [(c.function.name, c.function.arguments) for c in msg.tool_calls] == \
            [("get_weather", '{"city": "Paris", "days": 3}')]
        assert msg.content == "I will look."
        assert res.choices[0].finish_reason == "tool_calls"
        # the tools went natively: the server's template wrote them into the prompt
        assert up.requests[0]["tools"][0]["function"]["name"] == "get_weather"
        assert '"name": "get_weather"' in up.prompts[0]
        assert "Be brief." in up.prompts[0]
        # Claude Code's API too
        msg2 = an(proxy).messages.create(
            model=MODEL, max_tokens=200, system="Be brief.",
            tools=[{"name": "get_weather", "description": "Weather for a city.",
                    "input_schema": TOOLS[0]["function"]["parameters"]}],
            messages=[{"role": "user", "content": "Weather in Paris for 3 days?"}])
        uses = [b for b in msg2.content if b.type == "tool_use"]
        assert [(u.name, u.input) for u in uses] == [("get_weather", {"city": "Paris", "days": 3})]
        assert msg2.stop_reason == "tool_use"


def test_a_route_may_keep_the_rules_alone(engine, tmp_path):
    config = textwrap.dedent("""
        routes:
          - pattern: '.*'
            upstream: {provider: llamacpp, base_url: 'URL/v1', chat_template: rules}
    """)
    with PropsServer(TEMPLATE, replies=["Sunny."]) as up, \
            ProxyServer(config=config.replace("URL", up.url), tmp=tmp_path,
                        engine=engine) as proxy:
        res = oa(proxy).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Weather?"}])
        assert res.choices[0].message.content == "Sunny."
        assert up.props_asked == 0
    route = proxy.config.routes[0]
    assert route.template is None
    cap = route.engine.capability(MODEL)
    assert (cap.dialect, cap.turn_system) == (None, "anywhere")


def test_a_server_without_props_keeps_the_rules(engine, caplog):
    caplog.set_level(logging.INFO, logger="toolrules.serve")
    with PropsServer(TEMPLATE, props=False) as up:
        config = load_config(engine, upstream="llamacpp", base_url=up.url + "/v1")
    derived = config.routes[0].template
    assert derived is not None and derived.fields == {}
    assert derived.reason == (f"GET {up.url}/props: HTTP 404: the server has no such endpoint "
                              "(not every server says which template it renders)")
    assert derived.describe().startswith("chat template: the rules' configuration (GET ")
    assert config.routes[0].engine.capability(MODEL).native_tools is False
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("the rules decide" in r.getMessage() and "HTTP 404" in r.getMessage()
               for r in warned)


def test_a_template_that_does_not_render_keeps_the_rules(engine, caplog):
    caplog.set_level(logging.INFO, logger="toolrules.serve")
    with PropsServer("{% for m in messages %}{{ m.content }") as up:
        config = load_config(engine, upstream="llamacpp", base_url=up.url)
    derived = config.routes[0].template
    assert derived is not None and derived.fields == {}
    assert derived.reason.startswith("its template does not render: TemplateSyntaxError")
    assert any("the rules decide" in r.getMessage() for r in caplog.records)


def test_a_stopped_server_keeps_the_rules(engine):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    config = load_config(engine, upstream="llamacpp", base_url=f"http://127.0.0.1:{port}/v1")
    assert "no answer" in (config.routes[0].template.reason or "")


def test_hosted_providers_are_not_asked(engine):
    config = load_config(engine, upstream="groq:llama-3.3-70b-versatile")
    assert config.routes[0].template is None


def test_serve_check_shows_what_was_derived():
    with PropsServer(TEMPLATE) as up:
        res = CliRunner().invoke(main, ["serve", "--check", "--upstream", "llamacpp",
                                        "--base-url", up.url + "/v1"])
    assert res.exit_code == 0, res.output
    assert f"chat template from {up.url}/props (my-model.gguf), sha256 " in res.output
    assert "dialect qwen3-coder" in res.output


# ---------------------------------------------------------------- prompts that only grow

BENCH = Path(__file__).resolve().parent.parent / "templates" / "bench"


def _bench_template(name: str) -> str:
    return (BENCH / f"{name}.jinja").read_text(encoding="utf-8")


def test_a_template_that_drops_earlier_thinking_is_sent_its_own_variable(engine):
    """The template leaves the (empty) thinking block of earlier turns out once a newer
    user message exists, unless `preserve_thinking`: inspected at start, the route sends
    that variable with every request, so the next prompt extends the last."""
    with PropsServer(_bench_template("drop-thinking"), replies=["Hello.", "Again."]) as up, \
            ProxyServer(upstream="llamacpp", base_url=up.url + "/v1", engine=engine) as proxy:
        cap = proxy.config.routes[0].engine.capability(MODEL)
        assert cap.template_kwargs == {"preserve_thinking": True}
        client = oa(proxy)
        first = [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": "Hi."}]
        client.chat.completions.create(model=MODEL, messages=first)
        client.chat.completions.create(model=MODEL, messages=[
            *first, {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Once more."}])
    assert [r.get("chat_template_kwargs") for r in up.requests] == \
        [{"preserve_thinking": True}] * 2
    assert up.prompts[1].startswith(up.prompts[0])


def test_a_client_sets_its_own_template_variable_over_the_route(engine):
    with PropsServer(_bench_template("drop-thinking"), replies=["Hello."]) as up, \
            ProxyServer(upstream="llamacpp", base_url=up.url + "/v1", engine=engine) as proxy:
        body = proxy.engine.build_request(
            "llamacpp", MODEL, [{"role": "user", "content": "Hi."}],
            request_overrides={"chat_template_kwargs": {"enable_thinking": False}})
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert proxy.engine.provider_rules("llamacpp").template_kwargs_path == \
        "chat_template_kwargs"


def test_a_template_that_moves_its_tool_list_gets_the_tools_in_the_system_prompt(engine):
    """The template writes the tool list before the LAST user message: it would move on
    every new prompt. The route offers the tools in the leading system prompt, in the
    model's trained format, and reads the raw call back."""
    raw = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]'
    with PropsServer(_bench_template("tools-before-last-user"),
                     replies=[raw, "It is sunny."]) as up, \
            ProxyServer(upstream="llamacpp", base_url=up.url + "/v1", engine=engine) as proxy:
        cap = proxy.config.routes[0].engine.capability(MODEL)
        assert cap.turn_tools == "system"
        client = oa(proxy)
        first = [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": "Weather in Paris?"}]
        res = client.chat.completions.create(model=MODEL, messages=first, tools=TOOLS)
        call = res.choices[0].message.tool_calls[0]
        assert (call.function.name, json.loads(call.function.arguments)) == \
            ("get_weather", {"city": "Paris"})
        second = [*first, res.choices[0].message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
        client.chat.completions.create(model=MODEL, tools=TOOLS, messages=second)
        client.chat.completions.create(model=MODEL, tools=TOOLS, messages=[
            *second, {"role": "assistant", "content": "It is sunny."},
            {"role": "user", "content": "And tomorrow?"}])
    assert all("tools" not in r for r in up.requests)
    assert "get_weather" in up.requests[0]["messages"][0]["content"]
    # the model's own tool block, inside the leading system prompt - not before the
    # last user message, where the template would have written it
    p0 = up.prompts[0]
    assert p0.index("[AVAILABLE_TOOLS]") < p0.index("[/SYSTEM_PROMPT]") < p0.index("[INST]")
    assert up.prompts[1].startswith(up.prompts[0])
    assert up.prompts[2].startswith(up.prompts[1])


def test_a_template_that_reads_every_property_type_gets_typed_schemas(engine):
    """A property without `type` (Claude Code sends one) breaks a template that reads each
    property's type: the route's inspection found the fix, and the request renders."""
    untyped = [{"type": "function", "function": {
        "name": "run", "description": "Run a workflow.",
        "parameters": {"type": "object", "properties": {
            "name": {"type": "string"}, "args": {"description": "anything"}}}}}]
    with PropsServer(_bench_template("property-type"), replies=["Done."]) as up, \
            ProxyServer(upstream="llamacpp", base_url=up.url + "/v1", engine=engine) as proxy:
        cap = proxy.config.routes[0].engine.capability(MODEL)
        assert cap.turn_tool_schema == ("property-types",)
        res = oa(proxy).chat.completions.create(
            model=MODEL, tools=untyped, messages=[{"role": "user", "content": "Go."}])
    assert res.choices[0].message.content == "Done."
    sent = up.requests[0]["tools"][0]["function"]["parameters"]["properties"]
    assert sent["args"] == {"description": "anything", "type": "string"}
    assert len(up.prompts) == 1
