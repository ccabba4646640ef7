"""Golden suite `serve`: what the proxy sends upstream and what its client gets back.

Inputs: golden/serve/<name>.cases.yaml - `cases:` each {name, front (the client API),
request (the client's body), params (the request path's parameters, for an API that
names the model in the path), route (a `serve` route: upstream provider and model, tool
options), upstream (one reply per upstream turn: a string is an assistant text in the
upstream's own format, a mapping a raw body)}. Each case runs twice through the proxy's
exchange - answered whole, and streamed (the upstream replies re-sent as the upstream's
own stream events, the client answer written in the front's event grammar).

Output: golden/serve/<name>.golden.yaml with, per case, the upstream request bodies
(every turn, retries included), the client's response body and its event stream.

Invariants (regen refuses to write a file that breaks them): the streamed answer reads
back as the whole one (same text, same calls); every call the client gets validates
against the schema the client sent; no call marker of the upstream's dialect is left in
the client's text.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._types import ParsedResponse
from ._core import GoldenFile, read_cases

__all__ = ["golden_files"]

_MARKERS = ("<tool_call>", "</tool_call>", "<function=", "[TOOL_CALLS]", "```json")


def _sse_events(data: bytes) -> list[dict[str, Any]]:
    """SSE bytes -> [{event?, data}] (data parsed when it is JSON)."""
    out = []
    for block in data.decode().split("\n\n"):
        if not block.strip():
            continue
        ev: dict[str, Any] = {}
        for line in block.split("\n"):
            key, _, value = line.partition(": ")
            if key == "event":
                ev["event"] = value
            elif key == "data":
                try:
                    ev["data"] = json.loads(value)
                except ValueError:
                    ev["data"] = value
        out.append(ev)
    return out


def _upstream_stream(engine: Any, provider: str, parsed: ParsedResponse) -> list[Any]:
    """An answer as the upstream's own stream events (its front's grammar): text in
    small pieces, then each call."""
    front = engine.front(provider)
    writer = front.writer(lambda p, u: {}, response_id="up-1", model="up", created=0)
    data = writer.start()
    text = parsed.content or ""
    for i in range(0, len(text), 7):
        data += writer.text(text[i:i + 7])
    for call in parsed.tool_calls:
        data += writer.tool_call(call)
    data += writer.finish(parsed)
    return [ev["data"] for ev in _sse_events(data) if isinstance(ev.get("data"), dict)]


def _run_case(engine: Any, case: dict[str, Any], stream: bool) -> dict[str, Any]:
    from ..serve._config import _route, route_engine
    from ..serve._exchange import Exchange, options_for
    from ..serve._replay import RecordedUpstream

    front = engine.front(case["front"])
    body = case["request"]
    config_route = _route(0, case["route"], _settings())
    route = replace(config_route, engine=route_engine(engine, config_route))
    requested = front.requested_model(body, case.get("params") or {})
    provider = engine.provider_rules(route.upstream.provider).id
    replies = []
    for reply in case.get("upstream") or ():
        if isinstance(reply, str):
            reply = engine.build_response(ParsedResponse(content=reply, finish_reason="stop"),
                                          provider, "up", response_id="up-1", created=0)
        if stream:  # the same answer as the upstream would stream it (no text parsing)
            parsed = engine.parse_response(reply, provider, ids="sequential")
            reply = _upstream_stream(engine, provider, parsed)
        replies.append(reply)
    client = RecordedUpstream(route.engine, provider, route.upstream_model(requested),
                              route.model_id(requested), replies, ids="sequential",
                              record=True, request_overrides=route.request_overrides or None)
    msgs, tools, choice = engine.parse_request(body, front.provider)
    ex = Exchange(route=route, client=client, messages=msgs, tools=tools, choice=choice,
                  options=options_for(front, engine.provider_rules(provider).options, body),
                  held_call="Not run: fix the other calls.", numbered_ids=True,
                  json_output=front.read_json_output(body))
    rid = front.prov.id_prefix + "golden"
    out: dict[str, Any] = {}
    if stream:
        writer = front.writer(lambda p, u: engine.build_response(
            p, front.provider, requested, response_id=rid, created=0, usage=u),
            response_id=rid, model=requested, created=0, request=body,
            usage={"input_tokens": 0})

        async def go() -> tuple[bytes, ParsedResponse]:
            data = writer.start()
            final = ParsedResponse()
            async for kind, value in ex.events():
                if kind == "text":
                    data += writer.text(value)
                elif kind == "reasoning":
                    data += writer.reasoning(value)
                elif kind == "call":
                    data += writer.tool_call(value)
                else:
                    final = value
                    data += writer.finish(value, {"input_tokens": 0, "output_tokens": 0})
            return data, final

        data, final = asyncio.run(go())
        out["events"] = _sse_events(data)
    else:
        final = asyncio.run(ex.complete())
        out["response"] = engine.build_response(final, front.provider, requested,
                                                response_id=rid, created=0,
                                                usage={"input_tokens": 0, "output_tokens": 0})
    out["upstream_requests"] = client.requests
    out["final"] = final
    out["tools"] = tools
    return out


def _settings() -> Any:
    from ..serve._config import ServerSettings

    return ServerSettings()


def _check(name: str, whole: dict[str, Any], streamed: dict[str, Any]) -> list[str]:
    import jsonschema

    problems = []
    a, b = whole["final"], streamed["final"]
    if (a.content, [(c.name, c.arguments) for c in a.tool_calls]) != \
            (b.content, [(c.name, c.arguments) for c in b.tool_calls]):
        problems.append(f"{name}: the stream reads back differently: {b.content!r} "
                        f"{b.tool_calls} vs {a.content!r} {a.tool_calls}")
    schemas = {t.name: t.parameters for t in whole["tools"]}
    for c in a.tool_calls:
        if c.name in schemas:
            try:
                jsonschema.validate(c.arguments, schemas[c.name])
            except jsonschema.ValidationError as exc:
                problems.append(f"{name}: call {c.name} does not validate: {exc.message}")
    for marker in _MARKERS:
        if marker in (a.content or ""):
            problems.append(f"{name}: marker {marker!r} left in the client's text")
    return problems


def golden_files(engine: Any, root: Path) -> Iterable[GoldenFile]:
    for cases_path in sorted((root / "serve").glob("*.cases.yaml")):
        name = cases_path.name.removesuffix(".cases.yaml")
        data = read_cases(cases_path) or {}
        out: list[dict[str, Any]] = []
        problems: list[str] = []
        for case in data.get("cases") or []:
            try:
                whole = _run_case(engine, case, stream=False)
                streamed = _run_case(engine, case, stream=True)
            except Exception as exc:  # a broken case is a reviewable problem, not a crash
                problems.append(f"{case.get('name')}: {type(exc).__name__}: {exc}")
                continue
            problems.extend(_check(case.get("name", "?"), whole, streamed))
            out.append({"name": case.get("name"), "front": case["front"],
                        "upstream_requests": whole["upstream_requests"],
                        "response": whole["response"], "events": streamed["events"]})
        yield GoldenFile(path=f"serve/{name}.golden.yaml", content={"cases": out},
                         problems=problems, source=f"golden/serve/{name}.cases.yaml")
