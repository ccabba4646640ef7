"""Bench section `providers`: translating tools, building requests, parsing responses
and consuming provider streams (figures, not pass/fail).

The providers measured are the rule files that extend nothing (one per wire protocol);
response bodies are written by `build_response`, stream events come from the golden
cases when the checkout has them.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

__all__ = ["bench", "sample_tools"]


def sample_tools(n: int = 100) -> list[dict[str, Any]]:
    """`n` distinct, realistic tools: nested objects, enums, $refs, optional parameters."""
    out = []
    for i in range(n):
        out.append({"type": "function", "function": {
            "name": f"tool_{i}",
            "description": f"Tool number {i}: does something useful with its inputs. " * 2,
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for.", "minLength": 1},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
                    "mode": {"type": "string", "enum": ["fast", "thorough", f"m{i}"]},
                    "level": {"type": "integer", "enum": [1, 2, 3]},
                    "range": {"$ref": "#/$defs/Range"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "options": {"type": "object", "properties": {
                        "verbose": {"type": "boolean"}, "lang": {"type": "string"}}},
                },
                "required": ["query"],
                "$defs": {"Range": {"type": "object", "properties": {
                    "start": {"type": "string", "format": "date"},
                    "end": {"type": ["string", "null"], "format": "date"}},
                    "required": ["start"]}},
            }}})
    return out


def _roots(engine: Any) -> list[str]:
    return [p for p in engine.providers()
            if not (engine.ruleset.get("provider", p).data or {}).get("extends")]


def _stream_cases(engine: Any) -> dict[str, list[Any]]:
    """The longest golden stream per provider (empty outside a checkout)."""
    from ..golden._core import golden_root, read_cases

    try:
        root = golden_root() / "providers"
    except FileNotFoundError:
        return {}
    out: dict[str, list[Any]] = {}
    for path in sorted(root.glob("*.cases.yaml")):
        streams = (read_cases(path) or {}).get("streams") or {}
        events = max((c.get("events") or [] for c in streams.values()), key=len, default=[])
        if events:
            out[path.name.removesuffix(".cases.yaml")] = events
    return out


def bench(engine: Any, quick: bool) -> list[tuple[str, str]]:
    from .._types import ParsedResponse, ToolCall
    from ._timing import timeit

    out: list[tuple[str, str]] = []
    tools = sample_tools(100)
    repeat = 3 if quick else 7
    roots = _roots(engine)
    for provider in roots:
        def cold(p: str = provider) -> None:
            engine._compiled.pop("provider_tools", None)
            engine.translate_tools(tools, p)

        t_cold = timeit(cold, repeat=repeat)
        engine.translate_tools(tools, provider)
        t_warm = timeit(partial(engine.translate_tools, tools, provider), repeat=repeat)
        out.append((f"translate_tools 100 tools -> {provider}: cold / cached",
                    f"{t_cold * 1e3:.1f} ms / {t_warm * 1e3:.2f} ms"))
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i in range(10):
        messages.append({"role": "user", "content": f"question {i}"})
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "tool_1", "arguments": '{"query": "x"}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "result"})
    few = tools[:10]
    for provider in roots:
        engine.build_request(provider, "bench-model", messages, tools=few)
        t = timeit(partial(engine.build_request, provider, "bench-model", messages, tools=few),
                   repeat=repeat, number=5)
        out.append((f"build_request {provider}: 31 messages, 10 tools", f"{t * 1e3:.2f} ms"))
    parsed = ParsedResponse(content="Looking.", finish_reason="tool_calls", tool_calls=tuple(
        ToolCall(f"call_{i}", f"tool_{i}", {"query": "rate limits", "limit": 5, "mode": "fast",
                                           "range": {"start": "2025-01-01"}, "tags": ["a", "b"]})
        for i in range(3)))
    n = 20 if quick else 200
    for provider in roots:
        body = json.loads(json.dumps(engine.build_response(parsed, provider, model="m")))
        t = timeit(partial(engine.parse_response, body, provider), repeat=repeat, number=n)
        t_tools = timeit(partial(engine.parse_response, body, provider, tools=tools),
                         repeat=repeat, number=max(1, n // 4))
        out.append((f"parse_response {provider}, 3 calls: plain / with 100 tools (restore)",
                    f"{t * 1e6:.0f} us / {t_tools * 1e6:.0f} us"))
    for provider, events in _stream_cases(engine).items():
        def run(p: str = provider, ev: list[Any] = events) -> None:
            s = engine.response_stream(p)
            for e in ev:
                s.feed(e)
            s.close()

        t = timeit(run, repeat=repeat, number=n // 4 or 1)
        out.append((f"response_stream {provider}: golden stream of {len(events)} events",
                    f"{t * 1e6 / len(events):.0f} us/event"))
    return out
