"""`toolrules serve` and the built-in tools a client offers, over real HTTP on 127.0.0.1 with
the official `openai` and `anthropic` SDKs: tools the provider's servers run (web search,
web fetch, code execution, file search, image generation, remote MCP) are optional
capabilities the upstream cannot provide - they are omitted, not refused: left out of the
tools the model is offered, and reported with their reason in the access log (`omitted`)
and the trace's start record. A Responses `namespace` entry is omitted the same way (its
calls would have to come back tagged with the namespace). A route (or the server) with
`builtin_tools: refuse` refuses them with a 400 instead. The request Codex CLI sends goes
through."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated")

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import anthropic  # noqa: E402
import openai  # noqa: E402

import toolrules  # noqa: E402
from serve_helpers import (  # noqa: E402
    ProxyServer,
    an,
    chat_reply,
    oa,
    refusal,
    route_to,
)
from toolrules import RuleError  # noqa: E402
from toolrules.serve import load_config  # noqa: E402
from wire_server import WireServer  # noqa: E402


def fn(name: str, **props: Any) -> dict[str, Any]:
    return {"type": "function", "name": name, "description": f"The {name} tool.",
            "strict": False, "parameters": {"type": "object", "properties": {
                k: {"type": v} for k, v in props.items()}, "additionalProperties": False}}


# What Codex CLI 0.169 sends (captured, trimmed): function tools, a namespace of function
# tools, a web search it offers as an option, a developer message, its bookkeeping fields.
NAMESPACE = {"type": "namespace", "name": "multi_agent_v1",
             "description": "Tools to spawn and talk to sub-agents.",
             "tools": [fn("spawn_agent", message="string"), fn("wait", ids="array")]}
CODEX_TOOLS = [fn("shell", command="array", workdir="string"),
               fn("update_plan", plan="array"), NAMESPACE,
               fn("view_image", path="string"),
               {"type": "web_search", "external_web_access": False}]
CODEX_INPUT = [
    {"type": "message", "role": "developer",
     "content": [{"type": "input_text", "text": "<permissions>read-only</permissions>"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hi"}]},
]
CODEX_EXTRA = {"client_metadata": {"originator": "codex_exec", "session_id": "s-1"}}

RESPONSES_HOSTED = [
    {"type": "web_search"},
    {"type": "web_search_preview"},
    {"type": "file_search", "vector_store_ids": ["vs_1"]},
    {"type": "code_interpreter", "container": {"type": "auto"}},
    {"type": "image_generation"},
    {"type": "mcp", "server_label": "docs", "server_url": "https://example.com/mcp"},
]
ANTHROPIC_SERVER = [
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
    {"type": "web_fetch_20250910", "name": "web_fetch"},
    {"type": "code_execution_20250825", "name": "code_execution"},
    {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
]
READ = {"name": "read_file", "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
CHAT_FN = {"type": "function", "function": {
    "name": "read_file", "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}


@pytest.fixture(scope="module")
def proxy(upstream, traces, engine):
    """The proxy in front of an OpenAI-compatible server (as for a local model)."""
    with ProxyServer(upstream="openai-compatible", base_url=upstream.url + "/v1",
                     trace_dir=str(traces), engine=engine) as p:
        yield p


@pytest.fixture
def strict(upstream, tmp_path, monkeypatch, engine):
    """A route that refuses built-in tools (`builtin_tools: refuse`)."""
    monkeypatch.setenv("TOOLRULES_TEST_UPSTREAM_KEY", "sk-test")
    cfg = route_to("openai-compatible", "gpt-4o", upstream.url + "/v1") + \
        "    builtin_tools: refuse\n"
    with ProxyServer(config=cfg, tmp=tmp_path, engine=engine) as p:
        yield p


@pytest.fixture(autouse=True)
def fresh(upstream):
    upstream.requests.clear()
    upstream.replies.clear()


def offered(upstream: WireServer) -> list[str]:
    """The tool names the upstream was offered (chat completions tools)."""
    return [t["function"]["name"] for t in upstream.requests[-1].json().get("tools") or ()]


# ---------------------------------------------------------------- Codex CLI

@pytest.mark.parametrize("stream", [False, True])
def test_a_codex_request_goes_through(upstream, proxy, access, traces: Path, stream):
    upstream.replies.append(chat_reply("hi"))
    r = oa(proxy).responses.create(
        model="gpt-5-codex", instructions="You are Codex.", input=CODEX_INPUT,
        tools=CODEX_TOOLS, tool_choice="auto", parallel_tool_calls=False,
        reasoning={"summary": "auto"}, store=False, stream=stream,
        include=["reasoning.encrypted_content"], prompt_cache_key="s-1",
        extra_body=CODEX_EXTRA)
    if stream:
        events = list(r)
        assert events[-1].type == "response.completed"
        assert events[-1].response.output_text == "hi"
    else:
        assert r.output_text == "hi"
    # the function tools are offered; the namespace's tools and web search are not
    assert offered(upstream) == ["shell", "update_plan", "view_image"]
    sent = json.dumps(upstream.requests[-1].json())
    assert "spawn_agent" not in sent and "web_search" not in sent
    assert "<permissions>read-only</permissions>" in sent  # the developer message is carried
    info = access()[-1]
    assert info["status"] == 200
    omitted = info["omitted"]
    assert list(omitted) == ["tools[2] (type 'namespace', name 'multi_agent_v1')",
                             "tools[4] (type 'web_search')"]
    assert "`function_call.namespace`" in omitted["tools[2] (type 'namespace', name 'multi_agent_v1')"]
    assert "runs on OpenAI's servers" in omitted["tools[4] (type 'web_search')"]
    assert "never gets a call" in omitted["tools[4] (type 'web_search')"]
    assert "client's own records" in info["ignored"]["client_metadata"]
    assert {"store", "include", "prompt_cache_key"} <= set(info["ignored"])
    start = json.loads((traces / f"{info['id']}.jsonl").read_text().splitlines()[0])
    assert start["type"] == "start" and start["omitted"] == omitted
    assert "spawn_agent" not in json.dumps(start["tools"])
    assert all(name in json.dumps(start["tools"]) for name in ("shell", "view_image"))


def test_a_codex_request_to_a_strict_route_is_refused(upstream, strict):
    with pytest.raises(openai.BadRequestError) as e:
        oa(strict).responses.create(model="gpt-4o", input=CODEX_INPUT, tools=CODEX_TOOLS,
                                    store=False, extra_body=CODEX_EXTRA)
    msg = refusal(e)["message"]
    assert "tools[2] (type 'namespace', name 'multi_agent_v1')" in msg
    assert "refuses content it cannot carry" in msg
    assert upstream.requests == []
    # without the namespace, the web search is refused next
    with pytest.raises(openai.BadRequestError) as e:
        oa(strict).responses.create(model="gpt-4o", input="hi", stream=True,
                                    tools=[fn("shell"), {"type": "web_search"}])
    assert "tools[1] (type 'web_search')" in refusal(e)["message"]
    assert upstream.requests == []


# ---------------------------------------------------------------- other built-in tools

@pytest.mark.parametrize("tool", RESPONSES_HOSTED, ids=lambda t: t["type"])
def test_responses_hosted_tools_are_omitted(upstream, proxy, access, tool):
    upstream.replies.append(chat_reply("fine"))
    r = oa(proxy).responses.create(model="gpt-4o", input="look it up",
                                   tools=[fn("read_file", path="string"), tool])
    assert r.output_text == "fine"
    assert offered(upstream) == ["read_file"]
    reason = access()[-1]["omitted"][f"tools[1] (type {tool['type']!r})"]
    assert "built-in tool" in reason and "Declare what you need as a function tool" in reason


def test_only_built_in_tools_leave_no_tools(upstream, proxy, access):
    upstream.replies.append(chat_reply("fine"))
    r = oa(proxy).responses.create(model="gpt-4o", input="hi",
                                   tools=[{"type": "web_search"}, NAMESPACE])
    assert r.output_text == "fine"
    assert not upstream.requests[-1].json().get("tools")
    assert len(access()[-1]["omitted"]) == 2


def test_chat_web_search_tool_is_omitted(upstream, proxy, access):
    upstream.replies.append(chat_reply("fine"))
    r = oa(proxy).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "x"}],
        tools=[CHAT_FN, {"type": "web_search"}, {"type": "browser_search"}])
    assert r.choices[0].message.content == "fine"
    assert offered(upstream) == ["read_file"]
    assert set(access()[-1]["omitted"]) == {"tools[1] (type 'web_search')",
                                            "tools[2] (type 'browser_search')"}


@pytest.mark.parametrize("tool", ANTHROPIC_SERVER, ids=lambda t: t["type"])
@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_server_tools_are_omitted(upstream, proxy, access, tool, stream):
    upstream.replies.append(chat_reply("fine"))
    r = an(proxy).messages.create(model="gpt-4o", max_tokens=20, tools=[READ, tool],
                                  stream=stream,
                                  messages=[{"role": "user", "content": "look it up"}])
    if stream:
        kinds = [ev.type for ev in r]
        assert kinds[-1] == "message_stop"
    else:
        assert r.content[0].text == "fine"
    assert offered(upstream) == ["read_file"]
    label = f"tools[1] (type {tool['type']!r}, name {tool['name']!r})"
    reason = access()[-1]["omitted"][label]
    assert "server tool" in reason and "Anthropic's servers run" in reason


def test_anthropic_server_tools_refused_by_a_strict_server(upstream, tmp_path, engine):
    cfg = "server: {builtin_tools: refuse}\n"
    with ProxyServer(config=cfg, tmp=tmp_path, engine=engine, upstream="openai-compatible",
                     base_url=upstream.url + "/v1") as p:
        assert p.config.routes[0].builtin_tools == "refuse"
        with pytest.raises(anthropic.BadRequestError) as e:
            an(p).messages.create(model="gpt-4o", max_tokens=20,
                                  tools=[READ, ANTHROPIC_SERVER[0]],
                                  messages=[{"role": "user", "content": "look it up"}])
    assert "tools[1] (type 'web_search_20250305'" in refusal(e)["message"]
    assert upstream.requests == []


# ---------------------------------------------------------------- the configuration

def test_builtin_tools_setting_is_checked(tmp_path, engine):
    path = tmp_path / "proxy.yaml"
    path.write_text("routes:\n  - model: m\n    upstream: {provider: openai-compatible}\n"
                    "    builtin_tools: drop\n", encoding="utf-8")
    with pytest.raises(RuleError) as e:
        load_config(engine, path)
    assert "builtin_tools" in str(e.value)
    path.write_text("server: {builtin_tools: refuse}\nroutes:\n  - model: m\n"
                    "    upstream: {provider: openai-compatible}\n    builtin_tools: omit\n",
                    encoding="utf-8")
    cfg = load_config(engine, path, upstream="openai-compatible")
    assert [r.builtin_tools for r in cfg.routes] == ["omit", "refuse"]
    assert load_config(engine).server.builtin_tools == "omit"


def test_parse_request_omits_only_for_a_caller_that_keeps_a_record(engine):
    body = {"model": "m", "input": "hi", "tools": [fn("shell"), NAMESPACE,
                                                   {"type": "web_search"}]}
    omitted: dict[str, str] = {}
    _m, tools, _c = engine.parse_request(body, "openai-responses", omitted=omitted)
    assert [t.name for t in tools] == ["shell"]
    assert list(omitted) == ["tools[1] (type 'namespace', name 'multi_agent_v1')",
                             "tools[2] (type 'web_search')"]
    assert len(body["tools"]) == 3  # the caller's body is left as it was
    with pytest.raises(toolrules.UnsupportedContentError) as e:
        engine.parse_request(body, "openai-responses")
    assert e.value.where == "tools[1]"
    # refusals stay refusals even for a caller that keeps a record
    with pytest.raises(toolrules.UnsupportedContentError):
        engine.parse_request({**body, "tools": [{"type": "custom", "name": "apply_patch"}]},
                             "openai-responses", omitted={})


def test_a_tool_choice_naming_an_omitted_tool_is_refused(upstream, proxy):
    with pytest.raises(anthropic.BadRequestError) as e:
        an(proxy).messages.create(model="gpt-4o", max_tokens=20,
                                  tools=[READ, ANTHROPIC_SERVER[0]],
                                  tool_choice={"type": "tool", "name": "web_search"},
                                  messages=[{"role": "user", "content": "look it up"}])
    msg = refusal(e)["message"]
    assert "the tool choice names 'web_search', which is not offered" in msg
    assert "tools[1] (type 'web_search_20250305', name 'web_search') is omitted" in msg
    assert upstream.requests == []
