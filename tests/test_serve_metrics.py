"""`GET /metrics` and `GET /ready` of `toolrules serve`, over real HTTP on 127.0.0.1.

A real Prometheus parser (prometheus_client's) reads the scrape while a scripted session
runs through the proxy: calls read from raw text by the model's dialect, a repair, a
validation retry, a turn rewrite, cached tokens the upstream reported, the prefix a
conversation's next turn kept. With `--workers 2` the counts of both workers add up.
`/ready` answers 200 while the upstream answers and 503 once it is gone; a route of two
servers with one down stays ready, its health gauges 1 and 0.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families

from serve_helpers import ProxyServer, oa
from wire_server import Reply, Seen, WireServer, json_reply, sse_reply

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city"]}}}

# the calls as a Hermes-format model writes them in its text
REPAIRED = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c",}}'
            '\n</tool_call>')  # a trailing comma: the `trailing-commas` repair
INVALID = '<tool_call>\n{"name": "get_weather", "arguments": {"unit": "c"}}\n</tool_call>'
VALID = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n</tool_call>'


def chat(content: str, usage: dict[str, Any] | None = None) -> Reply:
    body: dict[str, Any] = {
        "id": "chatcmpl-up", "object": "chat.completion", "created": 1, "model": "up",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}]}
    if usage:
        body["usage"] = usage
    return json_reply(body)


def streamed(pieces: list[str]) -> Reply:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "up",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return sse_reply([chunk({"role": "assistant", "content": ""}),
                      *(chunk({"content": p}) for p in pieces), chunk({}, "stop"),
                      "data: [DONE]"])


def models_or(reply: Any) -> Any:
    """A responder: GET .../models (the health check) lists a model; else `reply(seen)`."""
    def respond(seen: Seen) -> Reply:
        if seen.method == "GET" and seen.path.endswith("/models"):
            return json_reply({"object": "list", "data": [{"id": "m", "object": "model"}]})
        return reply(seen)
    return respond


# ---------------------------------------------------------------- reading a scrape

def scrape(url: str) -> dict[str, Any]:
    r = httpx.get(url + "/metrics", timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def value(fams: dict[str, Any], sample: str, **labels: str) -> float:
    """The sum of `sample`'s values whose labels include `labels` (0: none)."""
    total = 0.0
    for fam in fams.values():
        for s in fam.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def gauges(fams: dict[str, Any], name: str, route: str | None = None) -> dict[str, float]:
    """server -> value of a gauge (of one route's servers)."""
    return {s.labels["server"]: s.value for s in fams[name].samples
            if route is None or s.labels["route"] == route}


# ---------------------------------------------------------------- a scripted session

ROUTES = """
server: {{ready_cache: 0.2, ready_timeout: 1}}
routes:
  - model: qwen
    upstream: {{provider: openai-compatible, model: qwen3-8b, model_id: Qwen/Qwen3-8B,
                base_url: {url}/v1}}
    tools: {{mode: emulate, validation_retries: 1}}
  - model: qwen35
    upstream: {{provider: openai-compatible, model: qwen35, model_id: Qwen/Qwen3.5-4B,
                base_url: {url}/v1}}
"""


def test_the_figures_move_as_a_session_runs(tmp_path):
    with WireServer(responder=models_or(lambda s: chat("done"))) as up, \
            ProxyServer(config=ROUTES.format(url=up.url), tmp=tmp_path) as proxy:
        server = up.url + "/v1"
        before = scrape(proxy.url)
        assert value(before, "toolrules_requests_total") == 0
        assert gauges(before, "toolrules_upstream_up", "qwen") == {server: 0.0}  # not answered yet
        assert value(before, "toolrules_upstream_in_flight") == 0
        client = oa(proxy)
        ask = [{"role": "user", "content": "Weather in Paris?"}]

        # 1. a call read from raw text by the Hermes dialect, repaired; cached tokens
        up.replies.append(chat(REPAIRED, {"prompt_tokens": 120, "completion_tokens": 30,
                                          "prompt_tokens_details": {"cached_tokens": 80}}))
        r = client.chat.completions.create(model="qwen", messages=ask, tools=[WEATHER])
        call = r.choices[0].message.tool_calls[0]
        assert json.loads(call.function.arguments) == {"city": "Paris", "unit": "c"}
        m = scrape(proxy.url)
        assert value(m, "toolrules_requests_total", route="qwen", front="openai",
                     server=server, status="200") == 1
        assert value(m, "toolrules_tool_calls_total", route="qwen", read="hermes") == 1
        assert value(m, "toolrules_repairs_total", route="qwen",
                     repair="trailing-commas") == 1
        assert value(m, "toolrules_prompt_tokens_total", route="qwen", server=server) == 120
        assert value(m, "toolrules_cached_tokens_total", route="qwen", server=server) == 80
        assert value(m, "toolrules_completion_tokens_total", route="qwen",
                     server=server) == 30
        assert value(m, "toolrules_request_duration_seconds_count", route="qwen",
                     stream="false") == 1
        assert value(m, "toolrules_upstream_duration_seconds_count", server=server) == 1
        assert value(m, "toolrules_parse_duration_seconds_count", route="qwen") == 1
        assert value(m, "toolrules_parse_duration_seconds_sum", route="qwen") > 0
        assert value(m, "toolrules_proxy_overhead_seconds_count", route="qwen") == 1
        assert gauges(m, "toolrules_upstream_up", "qwen") == {server: 1.0}

        # 2. the conversation's next turn: an invalid call goes back once (a retry), the
        # fixed one reaches the client; the prompt kept the last one as its prefix
        up.replies.extend([chat(INVALID), chat(VALID)])
        turn = [*ask, r.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "18 C"},
                {"role": "user", "content": "And in Lyon?"}]
        r2 = client.chat.completions.create(model="qwen", messages=turn, tools=[WEATHER])
        assert json.loads(r2.choices[0].message.tool_calls[0].function.arguments) == \
            {"city": "Lyon"}
        m = scrape(proxy.url)
        assert value(m, "toolrules_validation_retries_total", route="qwen") == 1
        assert value(m, "toolrules_invalid_answers_total", route="qwen") == 1
        assert value(m, "toolrules_tool_calls_total", route="qwen", read="hermes") == 2
        assert value(m, "toolrules_upstream_duration_seconds_count", server=server) == 3
        assert value(m, "toolrules_prompt_prefix_reuse_ratio_count", route="qwen") == 1
        assert value(m, "toolrules_prompt_prefix_reuse_ratio_sum", route="qwen") > 0.5

        # 3. a streamed answer: time to first token
        up.replies.append(streamed(["Sunny ", "all ", "week."]))
        with client.chat.completions.create(model="qwen", messages=ask, stream=True) as s:
            text = "".join(c.choices[0].delta.content or "" for c in s if c.choices)
        assert text == "Sunny all week."
        m = scrape(proxy.url)
        assert value(m, "toolrules_time_to_first_token_seconds_count", route="qwen",
                     front="openai") == 1
        assert value(m, "toolrules_request_duration_seconds_count", route="qwen",
                     stream="true") == 1

        # 4. a turn rewrite: a system message mid-conversation, for a template that takes
        # one only first
        up.replies.append(chat("ok"))
        client.chat.completions.create(model="qwen35", messages=[
            {"role": "system", "content": "Be brief."}, *ask,
            {"role": "assistant", "content": "Sunny."},
            {"role": "system", "content": "The user switched to plan mode."},
            {"role": "user", "content": "Plan a trip."}])
        m = scrape(proxy.url)
        kinds = {s.labels["kind"]: s.value for s in m["toolrules_turn_rewrites"].samples
                 if s.labels["route"] == "qwen35" and s.name.endswith("_total")}
        assert kinds and all(v >= 1 for v in kinds.values()), kinds

        # 5. errors by status: an unknown model (404), an upstream failure (502)
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="nope", messages=ask)
        up.replies.append(Reply(status=500, body=b'{"error": {"message": "boom"}}'))
        with pytest.raises(openai.APIStatusError):
            client.chat.completions.create(model="qwen", messages=ask)
        m = scrape(proxy.url)
        assert value(m, "toolrules_request_errors_total", status="404") == 1
        assert value(m, "toolrules_request_errors_total", route="qwen", status="502") == 1
        assert value(m, "toolrules_requests_total", route="qwen") == 4
        assert gauges(m, "toolrules_upstream_up", "qwen") == {server: 0.0}  # it answered 5xx
        assert value(m, "toolrules_upstream_in_flight") == 0


def test_metrics_can_be_turned_off(tmp_path):
    with WireServer(responder=models_or(lambda s: chat("done"))) as up, \
            ProxyServer(config=ROUTES.format(url=up.url).replace(
                "server: {", "server: {metrics: false, ", 1), tmp=tmp_path) as proxy:
        assert httpx.get(proxy.url + "/metrics").status_code == 404
        assert proxy.app.state.serve.metrics is None


# ---------------------------------------------------------------- /ready

def test_ready_until_the_upstream_is_gone(tmp_path):
    up = WireServer(responder=models_or(lambda s: chat("done")))
    with up, ProxyServer(config=ROUTES.format(url=up.url), tmp=tmp_path) as proxy:
        r = httpx.get(proxy.url + "/ready", timeout=10)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["status"] == "ready"
        assert [(x["name"], x["ready"]) for x in body["routes"]] == [("qwen", True),
                                                                   ("qwen35", True)]
        assert body["routes"][0]["servers"] == [{"url": up.url + "/v1", "state": "up"}]
        assert httpx.get(proxy.url + "/health").status_code == 200
    # the upstream is gone (its socket closed): within ready_cache the proxy sees it
    with ProxyServer(config=ROUTES.format(url=up.url), tmp=tmp_path) as proxy:
        r = httpx.get(proxy.url + "/ready", timeout=10)
        assert r.status_code == 503, r.text
        body = r.json()
        assert body["status"] == "not ready"
        states = body["routes"][0]["servers"]
        assert states[0]["state"] == "down" and states[0]["reason"]
        assert httpx.get(proxy.url + "/health").status_code == 200  # alive all the same
        assert gauges(scrape(proxy.url), "toolrules_upstream_up", "qwen") == \
            {up.url + "/v1": 0.0}


def _dead_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    return f"http://127.0.0.1:{port}/v1"


def test_a_route_with_one_server_down_is_still_ready(tmp_path):
    dead = _dead_url()
    with WireServer(responder=models_or(lambda s: chat("fine"))) as up:
        live = up.url + "/v1"
        cfg = f"""
server: {{ready_cache: 0.2, ready_timeout: 1}}
routes:
  - model: pair
    upstream:
      provider: openai-compatible
      model: m
      servers: [{dead}, {live}]
      health: {{interval: 60, timeout: 0.5}}
      connect_timeout: 1
"""
        with ProxyServer(config=cfg, tmp=tmp_path) as proxy:
            for i in range(3):  # new conversations: some are sent to the dead one first
                r = oa(proxy).chat.completions.create(
                    model="pair", messages=[{"role": "user", "content": f"hello {i}"}])
                assert r.choices[0].message.content == "fine"
            r = httpx.get(proxy.url + "/ready", timeout=10)
            assert r.status_code == 200, r.text
            (route,) = r.json()["routes"]
            assert {s["url"]: s["state"] for s in route["servers"]} == {dead: "down",
                                                                        live: "up"}
            m = scrape(proxy.url)
            assert gauges(m, "toolrules_upstream_up") == {dead: 0.0, live: 1.0}
            assert value(m, "toolrules_requests_total", route="pair", server=live,
                         status="200") == 3
            assert value(m, "toolrules_upstream_in_flight", server=live) == 0


# ---------------------------------------------------------------- several workers

def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_workers_add_up(tmp_path):
    n = 24
    with WireServer(responder=models_or(lambda s: chat("done"))) as up:
        cfg = tmp_path / "proxy.yaml"
        cfg.write_text(ROUTES.format(url=up.url), encoding="utf-8")
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "toolrules", "serve", "--config", str(cfg), "--port",
             str(port), "--workers", "2", "--log-level", "warning"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 90
            while True:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                try:
                    if httpx.get(url + "/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the proxy did not start"
                time.sleep(0.2)
            for i in range(n):
                # a connection each: the kernel spreads them over the workers
                with httpx.Client(timeout=20) as c:
                    r = c.post(url + "/v1/chat/completions", json={
                        "model": "qwen", "messages": [{"role": "user", "content": f"hi {i}"}]})
                    assert r.status_code == 200, r.text
            for _ in range(4):  # whichever worker answers the scrape, it adds them all up
                with httpx.Client(timeout=20) as c:
                    r = c.get(url + "/metrics")
                fams = {f.name: f for f in text_string_to_metric_families(r.text)}
                assert value(fams, "toolrules_requests_total", route="qwen",
                             status="200") == n
                assert value(fams, "toolrules_request_duration_seconds_count",
                             route="qwen") == n
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# ---------------------------------------------------------------- the docs agree

def test_the_dashboard_and_the_docs_name_only_real_metrics(tmp_path):
    import re

    root = Path(__file__).resolve().parent.parent / "docs" / "reference"
    dashboard = json.loads((root / "grafana-dashboard.json").read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    page = (root / "metrics.md").read_text(encoding="utf-8")
    with WireServer(responder=models_or(lambda s: chat("done"))) as up, \
            ProxyServer(config=ROUTES.format(url=up.url), tmp=tmp_path) as proxy:
        fams = scrape(proxy.url)
    # a family's samples: NAME_total for a counter, NAME_bucket/_sum/_count for a histogram
    known = {s for f in fams.values() for s in (f.name, f"{f.name}_total", f"{f.name}_bucket",
                                                 f"{f.name}_sum", f"{f.name}_count")}
    named = set(re.findall(r"toolrules_[a-z_]+", " ".join(exprs)))
    assert named and named <= known, named - known
    table = set(re.findall(r"^\| `(toolrules_[a-z_]+)` \|", page, re.M))
    families = {f.name + ("_total" if f.type == "counter" else "") for f in fams.values()}
    assert table == families, (table ^ families)


def test_a_client_that_goes_away_ends_its_upstream_request(tmp_path):
    """Mid-stream, the client closes its connection: the proxy stops reading the upstream
    (in flight back to 0 long before the upstream would have finished) and counts it."""
    slow = streamed([f"word{i} " for i in range(40)])
    slow.chunk_delay = 0.1  # 4 s in all
    with WireServer(responder=models_or(lambda s: slow)) as up, \
            ProxyServer(config=ROUTES.format(url=up.url), tmp=tmp_path) as proxy:
        started = time.monotonic()
        with httpx.Client(timeout=10) as c, c.stream(
                "POST", proxy.url + "/v1/chat/completions",
                json={"model": "qwen", "stream": True,
                      "messages": [{"role": "user", "content": "talk"}]}) as r:
            for line in r.iter_lines():
                if "word1" in line:
                    break
        deadline = time.monotonic() + 3
        while True:
            m = scrape(proxy.url)
            if value(m, "toolrules_requests_total", route="qwen") == 1:
                break
            assert time.monotonic() < deadline, "the stream did not end"
            time.sleep(0.05)
        assert value(m, "toolrules_upstream_in_flight", route="qwen") == 0
        assert time.monotonic() - started < 3.5


def test_calls_a_native_server_left_as_text_are_counted_by_their_dialect(tmp_path):
    cfg = """
routes:
  - model: native
    upstream: {{provider: openai-compatible, model: qwen3-8b, model_id: Qwen/Qwen3-8B,
                base_url: {url}/v1}}
"""
    with WireServer(responder=models_or(lambda s: chat("done"))) as up, \
            ProxyServer(config=cfg.format(url=up.url), tmp=tmp_path) as proxy:
        client = oa(proxy)
        ask = [{"role": "user", "content": "Weather in Paris?"}]
        up.replies.append(chat(REPAIRED))  # a server without a tool parser: raw text
        r = client.chat.completions.create(model="native", messages=ask, tools=[WEATHER])
        assert r.choices[0].message.tool_calls[0].function.name == "get_weather"
        up.replies.append(json_reply({  # the server's own field
            "id": "c", "object": "chat.completion", "created": 1, "model": "up",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None, "tool_calls": [{
                    "id": "call_1", "type": "function", "function": {
                        "name": "get_weather", "arguments": '{"city": "Lyon"}'}}]}}]}))
        client.chat.completions.create(model="native", messages=ask, tools=[WEATHER])
        m = scrape(proxy.url)
        assert value(m, "toolrules_tool_calls_total", route="native", read="hermes") == 1
        assert value(m, "toolrules_tool_calls_total", route="native", read="native") == 1
        assert value(m, "toolrules_repairs_total", route="native",
                     repair="trailing-commas") == 1
