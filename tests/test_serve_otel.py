"""OpenTelemetry traces of `toolrules serve`: the app made in-process with a tracer
provider of the test's own (opentelemetry-sdk's InMemorySpanExporter), served by uvicorn
on 127.0.0.1, a scripted upstream behind it, the official `openai` SDK in front.

A streamed request with an invalid call that goes back once yields one SERVER span with
the GenAI attributes, a CLIENT span per call upstream (the retry's under a
`validation_retry` span), a `parse` span under each; no prompt text is recorded unless
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT says so; the client's traceparent
parents the request's span; with nothing configured tracing is off.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind

from serve_helpers import ProxyServer, oa
from test_serve_metrics import INVALID, VALID, WEATHER, chat, models_or, streamed
from wire_server import WireServer

ROUTE = """
routes:
  - model: qwen
    upstream: {{provider: openai-compatible, model: qwen3-8b, model_id: Qwen/Qwen3-8B,
                base_url: {url}/v1}}
    tools: {{mode: emulate, validation_retries: 1}}
"""
SECRET = "my secret prompt about Paris"


@pytest.fixture
def spans() -> Any:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _run(tmp_path: Any, provider: Any, **kw: Any) -> Any:
    with WireServer(responder=models_or(lambda s: chat("done"))) as up, \
            ProxyServer(config=ROUTE.format(url=up.url), tmp=tmp_path,
                        tracer_provider=provider) as proxy:
        pieces = [INVALID[i:i + 7] for i in range(0, len(INVALID), 7)]
        up.replies.extend([streamed(pieces), streamed([VALID])])
        with oa(proxy).chat.completions.create(
                model="qwen", stream=True, tools=[WEATHER],
                messages=[{"role": "user", "content": SECRET}], **kw) as s:
            calls = [tc for c in s if c.choices for tc in (c.choices[0].delta.tool_calls or ())]
        args = "".join(tc.function.arguments or "" for tc in calls if tc.function)
        assert json.loads(args) == {"city": "Lyon"}
        return up


def test_a_streamed_request_is_one_span_tree(tmp_path, spans):
    provider, exporter = spans
    up = _run(tmp_path, provider)
    got = exporter.get_finished_spans()
    (root,) = [s for s in got if s.kind is SpanKind.SERVER]
    assert root.name == "chat qwen"
    a = root.attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == "qwen"
    assert a["gen_ai.response.model"] == "qwen3-8b"
    assert a["server.address"] == "127.0.0.1" and a["server.port"] == up.port
    assert a["http.response.status_code"] == 200
    assert a["toolrules.stream"] is True and a["toolrules.attempts"] == 2
    assert a["toolrules.tool_calls"] == 1 and a["toolrules.mode"] == "emulated"
    assert a["toolrules.time_to_first_token"] > 0
    by_parent: dict[Any, list[Any]] = {}
    for s in got:
        by_parent.setdefault(s.parent.span_id if s.parent else None, []).append(s)
    assert all(s.context.trace_id == root.context.trace_id for s in got)
    children = by_parent[root.context.span_id]
    first = [s for s in children if s.kind is SpanKind.CLIENT]
    (retry,) = [s for s in children if s.name == "validation_retry"]
    (second,) = by_parent[retry.context.span_id]
    assert [c.name for c in first + [second]] == ["chat qwen3-8b", "chat qwen3-8b"]
    assert first[0].attributes["toolrules.attempt"] == 1
    assert second.attributes["toolrules.attempt"] == 2
    for call in (first[0], second):
        assert call.attributes["server.port"] == up.port
        (parse,) = by_parent[call.context.span_id]
        assert parse.name == "parse"
        assert call.start_time <= parse.start_time <= parse.end_time <= call.end_time
    assert root.start_time <= first[0].start_time and second.end_time <= root.end_time
    # no prompt, no answer, no arguments anywhere
    text = json.dumps([dict(s.attributes) for s in got])
    assert SECRET not in text and "Lyon" not in text


def test_content_is_recorded_only_when_asked(tmp_path, spans, monkeypatch):
    provider, exporter = spans
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    _run(tmp_path, provider)
    (root,) = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert SECRET in root.attributes["gen_ai.input.messages"]
    assert "Lyon" in root.attributes["gen_ai.output.messages"]


def test_the_clients_traceparent_parents_the_span(tmp_path, spans):
    provider, exporter = spans
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    _run(tmp_path, provider,
         extra_headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
    (root,) = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert f"{root.context.trace_id:032x}" == trace_id
    assert f"{root.parent.span_id:016x}" == "00f067aa0ba902b7"


def test_tracing_is_off_unless_configured(tmp_path, monkeypatch):
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    from toolrules.serve._otel import tracing

    assert tracing() is None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert tracing() is None


def test_the_environment_sets_up_the_sdk(tmp_path):
    """OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_ENDPOINT set up a provider with those
    exporters (a fresh interpreter: the global provider is set once per process)."""
    import os
    import subprocess
    import sys

    code = ("from opentelemetry import trace\n"
            "from toolrules.serve._otel import tracing\n"
            "t = tracing()\n"
            "p = trace.get_tracer_provider()\n"
            "names = sorted(type(s.span_exporter).__name__ for s in "
            "p._active_span_processor._span_processors)\n"
            "print(type(p).__name__, p.resource.attributes['service.name'], names)\n")
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console,otlp",
           "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    env.pop("OTEL_SERVICE_NAME", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60, check=True).stdout.strip()
    assert out == "TracerProvider toolrules-serve ['ConsoleSpanExporter', 'OTLPSpanExporter']"
