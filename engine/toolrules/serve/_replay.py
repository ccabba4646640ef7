"""Replaying a proxy trace (`toolrules replay` on a `--trace-dir` file): the recorded
upstream answers go through the same exchange again - parsing with the model's rules,
restoring simplified arguments, the text fallback, validation and its retries - and what
the client would get is compared with what it got. A recorded session becomes an offline
regression test of the proxy's reading of a real model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from .._types import ParsedResponse, StreamChunk, Tool
from ..runtime._events import message_from_dict
from ..runtime._trace import Trace, plain
from ._config import Route, RouteTools, Upstream, route_engine
from ._exchange import Exchange

__all__ = ["RecordedUpstream", "ServeReplay", "replay_serve_trace"]


@dataclass(frozen=True)
class ServeReplay:
    """What the replay found: `divergences` (empty: the same answer again)."""

    divergences: tuple[str, ...]
    turns: int
    calls: int

    @property
    def ok(self) -> bool:
        return not self.divergences


class RecordedUpstream:
    """An upstream that answers each turn with a recorded body (or list of stream events),
    read through the provider's rules exactly as a live answer is. With `record=True`
    it also keeps the request body each turn would have sent (`requests`)."""

    def __init__(self, engine: Any, provider: str, model: str, as_model: str,
                 turns: list[Any], *, ids: str = "random", record: bool = False,
                 request_overrides: dict[str, Any] | None = None):
        self.engine = engine
        self.provider = provider
        self.model = model
        self.as_model = as_model
        self._turns = list(turns)
        self._ids = ids
        self._record = record
        self._overrides = request_overrides
        self.requests: list[dict[str, Any]] = []
        self.last_response: ParsedResponse | None = None

    def _next(self, messages: Any, tools: Any, tool_choice: Any, options: dict[str, Any]) -> Any:
        if self._record:
            body = self.engine.build_request(self.provider, self.as_model, messages, tools=tools,
                                             tool_choice=tool_choice,
                                             request_overrides=self._overrides, **options)
            if self.as_model != self.model:
                body["model"] = self.model
            self.requests.append(body)
        if not self._turns:
            raise RuntimeError("the exchange asked for more upstream turns than were recorded")
        return self._turns.pop(0)

    async def generate(self, messages: Any, tools: Any = None, tool_choice: Any = None,
                       **options: Any) -> ParsedResponse:
        raw = self._next(messages, tools, tool_choice, options)
        parsed: ParsedResponse = self.engine.parse_response(raw, self.provider, tools=tools,
                                                            model=self.as_model, ids=self._ids)
        self.last_response = parsed
        return parsed

    def stream(self, messages: Any, tools: Any = None, tool_choice: Any = None,
               **options: Any) -> AsyncIterator[StreamChunk]:
        return self._stream(self._next(messages, tools, tool_choice, options), tools)

    async def _stream(self, events: Any, tools: Any) -> AsyncIterator[StreamChunk]:
        reader = self.engine.response_stream(self.provider, tools=tools, model=self.as_model,
                                             ids=self._ids)
        for ev in events if isinstance(events, list) else []:
            for c in reader.feed(ev):
                yield c
        for c in reader.close():
            yield c
        self.last_response = reader.result


def _key(calls: list[Any]) -> list[tuple[str, str]]:
    return [(c["name"] if isinstance(c, dict) else c.name,
             json.dumps(c["arguments"] if isinstance(c, dict) else c.arguments, sort_keys=True))
            for c in calls]


async def replay_serve_trace(trace: Trace, engine: Any) -> ServeReplay:
    """Run the recorded exchange again; compare the calls, text and attempts."""
    start = plain(trace.records[0])
    route_info = start.get("route") or {}
    tools_opts = RouteTools(**(route_info.get("tools") or {}))
    route = Route(index=int(route_info.get("index", 0)), name=None, pattern=None,
                  upstream=Upstream(provider=start["provider"], model=start.get("upstream_model"),
                                    model_id=start.get("model")),
                  tools=tools_opts)
    route = replace(route, engine=route_engine(engine, route))
    turns = [plain(r.get("response") or {}).get("raw") for r in trace.of_type("turn")]
    client = RecordedUpstream(route.engine, start["provider"], start.get("upstream_model") or "",
                               start.get("model") or "", turns)
    tools = [Tool(name=t["function"]["name"], description=t["function"].get("description") or "",
                  parameters=t["function"].get("parameters") or {})
             for t in start.get("tools") or ()]
    # images and documents come back as ContentParts: the replay reads what was sent
    messages = [message_from_dict(m) for m in start.get("messages") or ()]
    ex = Exchange(route=route, client=client, messages=messages, tools=tools,
                  choice=start.get("tool_choice"), options={},
                  held_call=start.get("held_call") or "")
    if (start.get("settings") or {}).get("stream"):
        final = None
        async for kind, value in ex.events():
            if kind == "done":
                final = value
        assert final is not None
    else:
        final = await ex.complete()
    done: dict[str, Any] = next((plain(r) for r in reversed(trace.records)
                                 if r.get("type") == "done"), {})
    out = []
    if _key(done.get("calls") or []) != _key(list(final.tool_calls)):
        out.append(f"calls differ: recorded {_key(done.get('calls') or [])}, replayed "
                   f"{_key(list(final.tool_calls))}")
    if (done.get("content") or None) != (final.content or None):
        out.append(f"text differs: recorded {done.get('content')!r}, replayed {final.content!r}")
    if done.get("attempts") is not None and done.get("attempts") != ex.outcome.attempts:
        out.append(f"upstream turns differ: recorded {done.get('attempts')}, replayed "
                   f"{ex.outcome.attempts}")
    return ServeReplay(tuple(out), len(turns), len(final.tool_calls))
