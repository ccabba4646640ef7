"""The Gemini API front of `toolrules serve` over real HTTP on 127.0.0.1, with the
official `google-genai` SDK as the client: generate_content, generate_content_stream,
count_tokens, the model list, a function-calling round trip, JSON answers, keys and
errors in Gemini's shape - in front of a scripted OpenAI-compatible upstream that writes
its calls as raw Qwen3-Coder text, and of a scripted Gemini upstream (thought signatures
carried back unchanged)."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
genai = pytest.importorskip("google.genai")

from google.genai import errors as genai_errors  # noqa: E402
from google.genai import types  # noqa: E402

from serve_helpers import ProxyServer, route_to  # noqa: E402
from wire_server import Seen, WireServer, json_reply, sse_reply  # noqa: E402

MODEL = "Qwen/Qwen3-Coder-30B-A3B-Instruct"  # the rules know it: qwen3-coder dialect
SHELL = types.FunctionDeclaration(
    name="run_shell_command", description="Run a shell command.",
    parameters_json_schema={"type": "object", "properties": {"command": {"type": "string"}},
                            "required": ["command"]})
CALL_TEXT = ("I'll run it.\n<tool_call>\n<function=run_shell_command>\n<parameter=command>\n"
             "ls -la\n</parameter>\n</function>\n</tool_call>")
ROUTING_SCHEMA = {"type": "OBJECT", "properties": {
    "complexity_reasoning": {"type": "STRING"}, "complexity_score": {"type": "INTEGER"}},
    "required": ["complexity_reasoning", "complexity_score"]}


class Upstream:
    """A scripted OpenAI-compatible server: each reply text in turn (the last repeats),
    streamed in small pieces when asked; every request body kept."""

    def __init__(self, *texts: str):
        self.texts = list(texts)
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, seen: Seen) -> Any:
        body = seen.json()
        self.bodies.append(body)
        text = self.texts[min(len(self.bodies), len(self.texts)) - 1]
        if not body.get("stream"):
            return json_reply({"id": "c", "object": "chat.completion", "created": 1,
                               "model": "up", "choices": [{"index": 0, "finish_reason": "stop",
                                                           "message": {"role": "assistant",
                                                                       "content": text}}],
                               "usage": {"prompt_tokens": 11, "completion_tokens": 7,
                                         "total_tokens": 18}})

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "up",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        return sse_reply([chunk({"role": "assistant", "content": ""}),
                          *(chunk({"content": text[i:i + 6]}) for i in range(0, len(text), 6)),
                          chunk({}, "stop"), "data: [DONE]"])


def client(proxy: ProxyServer, key: str = "unused", version: str | None = None) -> Any:
    opts = types.HttpOptions(base_url=proxy.url, api_version=version) if version \
        else types.HttpOptions(base_url=proxy.url)
    return genai.Client(api_key=key, http_options=opts)


_CLIENTS: list[Any] = []


def _keep(c: Any) -> Any:
    """A client kept alive for the test: the SDK closes its HTTP client when the client
    object goes away, which a call on a temporary can outlive."""
    _CLIENTS.append(c)
    del _CLIENTS[:-8]
    return c


def tools_config(**kw: Any) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[SHELL])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True), **kw)


@contextlib.contextmanager
def _serving(script: Upstream, **kw: Any) -> Iterator[tuple[WireServer, ProxyServer]]:
    with WireServer(script) as up, ProxyServer(upstream=f"openai-compatible:{MODEL}",
                                               base_url=up.url + "/v1", **kw) as proxy:
        yield up, proxy


class _Both:
    """The scripted upstream and the proxy, served together (`with`): the upstream
    starts first, as the proxy asks it for its chat template."""

    def __init__(self, script: Upstream, kw: dict[str, Any]):
        self.cm = _serving(script, **kw)
        self.proxy: Any = None

    def __enter__(self) -> _Both:
        self.up, self.proxy_server = self.cm.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cm.__exit__(*exc)

    @property
    def url(self) -> str:
        return self.proxy_server.url


@pytest.fixture
def qwen():
    """(the scripted upstream's script, a context, the proxy) - every name routed to the
    Qwen3-Coder model; `with ctx:` serves both, `proxy.url` once inside."""
    def make(*texts: str, **kw: Any) -> tuple[Upstream, Any, Any]:
        script = Upstream(*texts)
        both = _Both(script, kw)
        return script, both, both
    return make


# ---------------------------------------------------------------- generateContent

@pytest.mark.parametrize("version", ["v1beta", "v1"])
def test_generate_content_turns_raw_call_text_into_a_function_call(qwen, version):
    script, up, proxy = qwen(CALL_TEXT)
    with up:
        resp = _keep(client(proxy, version=version)).models.generate_content(
            model="gemini-3.8-flash", contents="List the files.", config=tools_config())
    calls = resp.function_calls
    assert [(c.name, c.args) for c in calls] == [("run_shell_command", {"command": "ls -la"})]
    assert calls[0].id  # an id the client sends back with the result
    parts = resp.candidates[0].content.parts
    assert parts[0].text == "I'll run it." and "<tool_call>" not in parts[0].text
    assert resp.candidates[0].finish_reason == types.FinishReason.STOP
    assert resp.usage_metadata.prompt_token_count == 11
    sent = script.bodies[0]
    assert sent["model"] == MODEL  # the name in the path, mapped by the route
    assert sent["tools"][0]["function"]["name"] == "run_shell_command"
    assert sent["tools"][0]["function"]["parameters"]["properties"] == {
        "command": {"type": "string"}}


def test_a_function_calling_round_trip_carries_the_call_and_its_result(qwen):
    script, up, proxy = qwen(CALL_TEXT, "The directory holds proof.txt.")
    with up:
        c = client(proxy)
        first = c.models.generate_content(model="gemini-3.8-flash", contents="List the files.",
                                          config=tools_config())
        call = first.function_calls[0]
        history = [types.Content(role="user", parts=[types.Part(text="List the files.")]),
                   first.candidates[0].content,
                   types.Content(role="user", parts=[types.Part.from_function_response(
                       name=call.name, response={"output": "proof.txt"})])]
        second = c.models.generate_content(model="gemini-3.8-flash", contents=history,
                                           config=tools_config())
    assert second.text == "The directory holds proof.txt."
    msgs = script.bodies[1]["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool"]
    sent_call = msgs[1]["tool_calls"][0]
    assert sent_call["function"]["name"] == "run_shell_command"
    assert json.loads(sent_call["function"]["arguments"]) == {"command": "ls -la"}
    assert msgs[2]["tool_call_id"] == sent_call["id"] and msgs[2]["content"] == "proof.txt"


def test_schemas_in_proto_spelling_and_upper_case_types_are_read(qwen):
    """The SDK sends `parameters` schemas with proto field names (`any_of`,
    `max_length`) and upper-case types; the upstream gets JSON Schema."""
    decl = types.FunctionDeclaration(name="pick", description="Pick one.", parameters=types.Schema(
        type="OBJECT", properties={"x": types.Schema(type="STRING", max_length=3),
                                   "y": types.Schema(any_of=[types.Schema(type="STRING"),
                                                             types.Schema(type="INTEGER")])},
        required=["x"]))
    script, up, proxy = qwen("ok")
    with up:
        _keep(client(proxy)).models.generate_content(
            model="m", contents="hi", config=types.GenerateContentConfig(
                tools=[types.Tool(function_declarations=[decl])],
                automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)))
    params = script.bodies[0]["tools"][0]["function"]["parameters"]
    assert params["properties"]["x"] == {"type": "string", "maxLength": 3}
    assert params["properties"]["y"] == {"anyOf": [{"type": "string"}, {"type": "integer"}]}


# ---------------------------------------------------------------- streamGenerateContent

def test_generate_content_stream_sends_text_then_the_whole_call(qwen):
    script, up, proxy = qwen(CALL_TEXT)
    with up:
        chunks = list(_keep(client(proxy)).models.generate_content_stream(
            model="gemini-3.8-flash", contents="List the files.", config=tools_config()))
    text = "".join(p.text for ch in chunks for p in ch.candidates[0].content.parts or ()
                   if p.text)
    calls = [c for ch in chunks for c in ch.function_calls or ()]
    assert text == "I'll run it."
    assert [(c.name, c.args) for c in calls] == [("run_shell_command", {"command": "ls -la"})]
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.total_token_count > 0
    assert script.bodies[0]["stream"] is True


def test_the_stream_endpoint_answers_server_sent_events_only(qwen):
    _script, up, proxy = qwen("ok")
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    with up:
        r = httpx.post(f"{proxy.url}/v1beta/models/m:streamGenerateContent", json=body)
        ok = httpx.post(f"{proxy.url}/v1beta/models/m:streamGenerateContent?alt=sse", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["status"] == "INVALID_ARGUMENT" and "alt=sse" in r.json()["error"]["message"]
    events = [json.loads(line[6:]) for line in ok.text.splitlines() if line.startswith("data: ")]
    assert "".join(p.get("text", "") for e in events
                   for p in e["candidates"][0]["content"]["parts"]) == "ok"


# ---------------------------------------------------------------- countTokens, models

def test_count_tokens_is_the_proxys_estimate(qwen):
    _script, up, proxy = qwen("ok")
    with up:
        c = client(proxy)
        short = c.models.count_tokens(model="gemini-3.8-flash", contents="hello")
        long = c.models.count_tokens(model="gemini-3.8-flash", contents="hello " * 200)
        wrapped = httpx.post(f"{proxy.url}/v1beta/models/m:countTokens", json={
            "generateContentRequest": {"model": "models/m", "contents": [
                {"role": "user", "parts": [{"text": "hello " * 200}]}]}}).json()
    assert 0 < short.total_tokens < long.total_tokens
    assert abs(wrapped["totalTokens"] - long.total_tokens) <= 2


def test_the_model_list_names_the_routed_models(qwen):
    _script, up, proxy = qwen("ok")
    with up:
        models = list(_keep(client(proxy)).models.list())
        openai_shape = httpx.get(f"{proxy.url}/v1/models").json()
    assert [m.name for m in models] == [f"models/{MODEL}"]
    assert "generateContent" in models[0].supported_actions
    assert openai_shape["object"] == "list"  # /v1/models without a Gemini key header


def test_a_model_name_with_slashes_is_read_from_the_path(qwen):
    script, up, proxy = qwen("ok")
    with up:
        assert _keep(client(proxy)).models.generate_content(model=MODEL, contents="hi").text == "ok"
    assert script.bodies[0]["model"] == MODEL


# ---------------------------------------------------------------- JSON answers

def test_a_json_answer_is_asked_for_in_the_upstreams_terms_and_taken_out_of_a_fence(qwen):
    """Gemini CLI's routing step: responseMimeType application/json with a schema."""
    script, up, proxy = qwen('Here it is:\n```json\n{"complexity_reasoning": "simple", '
                             '"complexity_score": 7}\n```')
    with up:
        resp = _keep(client(proxy)).models.generate_content(
            model="gemini-3.5-flash-lite", contents="Rate this task.",
            config=types.GenerateContentConfig(response_mime_type="application/json",
                                               response_json_schema=ROUTING_SCHEMA))
    assert json.loads(resp.text) == {"complexity_reasoning": "simple", "complexity_score": 7}
    assert len(script.bodies) == 1
    fmt = script.bodies[0]["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["schema"]["properties"]["complexity_score"] == {"type": "integer"}


def test_an_invalid_json_answer_goes_back_once_with_what_is_wrong(qwen):
    script, up, proxy = qwen('{"complexity_reasoning": "simple"}',
                             '{"complexity_reasoning": "simple", "complexity_score": 3}')
    with up:
        resp = _keep(client(proxy)).models.generate_content(
            model="gemini-3.5-flash-lite", contents="Rate this task.",
            config=types.GenerateContentConfig(response_mime_type="application/json",
                                               response_schema=ROUTING_SCHEMA))
    assert json.loads(resp.text)["complexity_score"] == 3
    assert len(script.bodies) == 2
    retry = script.bodies[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": '{"complexity_reasoning": "simple"}'}
    assert "complexity_score" in retry[-1]["content"] and retry[-1]["role"] == "user"


def test_a_streamed_json_answer_is_checked_before_it_is_sent(qwen):
    _script, up, proxy = qwen('```json\n{"complexity_reasoning": "x", "complexity_score": 2}\n```')
    with up:
        chunks = list(_keep(client(proxy)).models.generate_content_stream(
            model="m", contents="Rate.", config=types.GenerateContentConfig(
                response_mime_type="application/json", response_json_schema=ROUTING_SCHEMA)))
    text = "".join(ch.text or "" for ch in chunks)
    assert json.loads(text) == {"complexity_reasoning": "x", "complexity_score": 2}


def test_an_upstream_api_without_json_output_is_asked_in_the_prompt(tmp_path, monkeypatch):
    """An Anthropic upstream's rule has no `json_output:` section: the instruction and
    the schema go into the system prompt, and the answer is still validated."""
    bodies: list[dict[str, Any]] = []

    def anthropic_up(seen: Seen) -> Any:
        bodies.append(seen.json())
        return json_reply({"id": "msg_1", "type": "message", "role": "assistant",
                           "model": "claude-sonnet-4-5", "stop_reason": "end_turn",
                           "content": [{"type": "text", "text": '{"complexity_reasoning": "a", '
                                        '"complexity_score": 1}'}],
                           "usage": {"input_tokens": 5, "output_tokens": 5}})

    monkeypatch.setenv("TOOLRULES_TEST_UPSTREAM_KEY", "sk-test")
    with WireServer(anthropic_up) as up, ProxyServer(
            config=route_to("anthropic", "claude-sonnet-4-5", up.url), tmp=tmp_path) as proxy:
        resp = _keep(client(proxy)).models.generate_content(
            model="claude-sonnet-4-5", contents="Rate.", config=types.GenerateContentConfig(
                response_mime_type="application/json", response_json_schema=ROUTING_SCHEMA))
    assert json.loads(resp.text)["complexity_score"] == 1
    assert "complexity_score" in bodies[0]["system"] and "JSON" in bodies[0]["system"]


# ---------------------------------------------------------------- keys and errors

@pytest.fixture
def keyed(qwen):
    return lambda *t: qwen(*t, api_keys=("secret",))


def test_keys_are_checked_when_the_proxy_has_them(keyed):
    _script, up, proxy = keyed("ok")
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    with up:
        assert _keep(client(proxy, key="secret")).models.generate_content(
            model="m", contents="hi").text == "ok"
        assert httpx.post(f"{proxy.url}/v1beta/models/m:generateContent?key=secret",
                          json=body).status_code == 200
        missing = httpx.post(f"{proxy.url}/v1beta/models/m:generateContent", json=body)
        with pytest.raises(genai_errors.ClientError) as e:
            _keep(client(proxy, key="wrong")).models.generate_content(model="m", contents="hi")
    assert e.value.code == 401 and e.value.status == "UNAUTHENTICATED"
    assert missing.status_code == 401
    assert missing.json()["error"] == {"code": 401, "message": "invalid or missing API key",
                                       "status": "UNAUTHENTICATED"}


@pytest.mark.parametrize(("extra", "named"), [
    ({"cachedContent": "cachedContents/abc"}, "cachedContent"),
    ({"generationConfig": {"responseLogprobs": True}}, "generationConfig.responseLogprobs"),
    ({"generationConfig": {"candidateCount": 2}}, "generationConfig.candidateCount"),
    ({"generationConfig": {"responseMimeType": "text/x.enum"}}, "generationConfig.responseMimeType"),
    ({"generationConfig": {"bogus": 1}}, "generationConfig.bogus"),
    ({"bogus": 1}, "bogus"),
])
def test_a_field_the_proxy_cannot_carry_is_refused_naming_it(qwen, extra, named):
    script, up, proxy = qwen("ok")
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], **extra}
    with up:
        r = httpx.post(f"{proxy.url}/v1beta/models/m:generateContent", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == 400 and err["status"] == "INVALID_ARGUMENT"
    assert f"`{named}`" in err["message"]
    assert not script.bodies  # nothing went upstream


def test_fields_with_no_effect_pass_and_a_built_in_tool_is_refused(qwen):
    script, up, proxy = qwen("ok")
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
            "generationConfig": {"candidateCount": 1, "topK": 40, "temperature": 0.2}}
    with up:
        ok = httpx.post(f"{proxy.url}/v1beta/models/m:generateContent", json=body)
        search = httpx.post(f"{proxy.url}/v1beta/models/m:generateContent",
                            json={**body, "tools": [{"googleSearch": {}}]})
        code = httpx.post(f"{proxy.url}/v1beta/models/m:generateContent", json={"contents": [
            {"role": "model", "parts": [{"executableCode": {"code": "print(1)"}}]}]})
    assert ok.status_code == 200 and script.bodies[0]["temperature"] == 0.2
    assert search.status_code == 400 and "googleSearch" in search.json()["error"]["message"]
    assert code.status_code == 400 and "code execution" in code.json()["error"]["message"]


def test_an_upstream_failure_is_an_error_in_geminis_shape(tmp_path):
    def broken(_seen: Seen) -> Any:
        return json_reply({"error": {"message": "boom"}}, 500)

    with WireServer(broken) as up, ProxyServer(upstream=f"openai-compatible:{MODEL}",
                                               base_url=up.url + "/v1") as proxy, \
            pytest.raises(genai_errors.ServerError) as e:
        c = client(proxy)
        c.models.generate_content(model="m", contents="hi")
    assert e.value.code == 502 and e.value.status == "UNAVAILABLE"


# ---------------------------------------------------------------- thought signatures

def test_a_thought_signature_comes_back_on_the_same_call(tmp_path, monkeypatch):
    """A Gemini upstream's call carries a thoughtSignature: the client gets it on the
    call's part and sends it back, and the upstream sees it on the same call."""
    sig = base64.b64encode(b"opaque-signature").decode()
    seen: list[Seen] = []

    def gemini_up(s: Seen) -> Any:
        seen.append(s)
        body = s.json()
        if any("functionResponse" in p for c in body["contents"] for p in c["parts"]):
            parts = [{"text": "Done."}]
        else:
            parts = [{"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}},
                      "thoughtSignature": sig}]
        answer = {"candidates": [{"content": {"role": "model", "parts": parts},
                                  "finishReason": "STOP", "index": 0}]}
        if s.path.endswith(":streamGenerateContent"):
            return sse_reply([answer])
        return json_reply(answer)

    monkeypatch.setenv("TOOLRULES_TEST_UPSTREAM_KEY", "upstream-key")
    with WireServer(gemini_up) as up, ProxyServer(
            config=route_to("gemini", "gemini-2.5-flash", up.url), tmp=tmp_path) as proxy:
        c = client(proxy)
        for stream in (False, True):
            if stream:
                chunks = list(c.models.generate_content_stream(
                    model="gemini-2.5-flash", contents="List.", config=tools_config()))
                content = next(ch.candidates[0].content for ch in chunks if ch.function_calls)
            else:
                content = c.models.generate_content(model="gemini-2.5-flash", contents="List.",
                                                    config=tools_config()).candidates[0].content
            part = content.parts[0]
            assert part.function_call.name == "run_shell_command"
            assert part.thought_signature == b"opaque-signature"
            history = [types.Content(role="user", parts=[types.Part(text="List.")]), content,
                       types.Content(role="user", parts=[types.Part.from_function_response(
                           name="run_shell_command", response={"output": "a.txt"})])]
            assert c.models.generate_content(model="gemini-2.5-flash", contents=history,
                                             config=tools_config()).text == "Done."
            back = seen[-1].json()["contents"][1]["parts"]
            assert back[0]["functionCall"]["name"] == "run_shell_command"
            assert back[0]["thoughtSignature"] == sig
    assert seen[0].query == {"key": ["upstream-key"]}


def test_a_signature_rides_in_the_call_id_for_clients_of_other_apis(tmp_path, monkeypatch):
    """An Anthropic or OpenAI client has no field for a Gemini upstream's
    thoughtSignature: it travels in the call's id and comes back on the same call (and
    the ids the upstream sees are its own again)."""
    import anthropic
    import openai

    sig = base64.b64encode(b"sig/with+chars=").decode()
    seen: list[dict[str, Any]] = []

    def gemini_up(s: Seen) -> Any:
        body = s.json()
        seen.append(body)
        if any("functionResponse" in p for c in body["contents"] for p in c["parts"]):
            parts = [{"text": "Done."}]
        else:
            parts = [{"functionCall": {"id": "g1", "name": "run_shell_command",
                                       "args": {"command": "ls"}}, "thoughtSignature": sig}]
        return json_reply({"candidates": [{"content": {"role": "model", "parts": parts},
                                           "finishReason": "STOP", "index": 0}]})

    tool = {"name": "run_shell_command", "description": "Run a command.",
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                             "required": ["command"]}}
    monkeypatch.setenv("TOOLRULES_TEST_UPSTREAM_KEY", "upstream-key")
    with WireServer(gemini_up) as up, ProxyServer(
            config=route_to("gemini", "gemini-2.5-flash", up.url), tmp=tmp_path) as proxy:
        an = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
        first = an.messages.create(model="gemini-2.5-flash", max_tokens=100, tools=[tool],
                                   messages=[{"role": "user", "content": "List."}])
        use = next(b for b in first.content if b.type == "tool_use")
        assert use.id.startswith("g1__sig_") and use.input == {"command": "ls"}
        an.messages.create(model="gemini-2.5-flash", max_tokens=100, tools=[tool], messages=[
            {"role": "user", "content": "List."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": use.id,
                                               "name": use.name, "input": use.input}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                          "content": "a.txt"}]}])
        back = seen[-1]["contents"]
        assert back[1]["parts"][0] == {"functionCall": {"id": "g1", "name": "run_shell_command",
                                                        "args": {"command": "ls"}},
                                       "thoughtSignature": sig}
        assert back[2]["parts"][0]["functionResponse"]["id"] == "g1"

        oa = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        fn = {"type": "function", "function": {"name": tool["name"],
                                               "parameters": tool["input_schema"]}}
        reply = oa.chat.completions.create(model="gemini-2.5-flash", tools=[fn],
                                           messages=[{"role": "user", "content": "List."}])
        call = reply.choices[0].message.tool_calls[0]
        oa.chat.completions.create(model="gemini-2.5-flash", tools=[fn], messages=[
            {"role": "user", "content": "List."},
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "a.txt"}])
        back = seen[-1]["contents"]
        assert back[1]["parts"][0]["thoughtSignature"] == sig
        assert back[1]["parts"][0]["functionCall"]["id"] == "g1"
        assert back[2]["parts"][0]["functionResponse"]["id"] == "g1"
