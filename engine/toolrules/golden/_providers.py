"""Golden suite `providers`: every provider's wire format, both directions.

Inputs: golden/providers/conversation.cases.yaml (one shared conversation, tool list,
tool results and tool choices) and golden/providers/<provider>.cases.yaml (the model to
use, response bodies and streamed event sequences, `response_models` naming another model
for some of them; a provider without its own file uses the nearest file up its
`extends:` chain).

Output per provider: golden/providers/<id>.golden.yaml with the translated tools, the
tool_choice table, the full request for the conversation, tool result messages, what
parse_request reads back, each response parsed (and rebuilt), each stream's chunks, and
for each `request_tools` case (a tool list a client may send) the tools read or the
refusal.

Invariants checked before anything is written:
- parse_request(build_request(conversation)) gives the conversation back, except for
  what the provider declares `lossy`;
- every tool name sent matches the provider's name pattern, and no keyword listed in
  the cases' `forbid_keywords` appears in a sent schema;
- a stream's final result equals parse_response of the body it names (`equals`);
- parse_response(build_response(parsed)) == parsed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._types import ContentPart, Message, ParsedResponse, StreamChunk, ToolResult
from ._core import GoldenFile, read_cases

__all__ = ["canonical_messages", "golden_files", "parsed_dict"]


def parsed_dict(p: ParsedResponse) -> dict[str, Any]:
    out: dict[str, Any] = {"content": p.content, "reasoning_content": p.reasoning_content,
                           "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                                          for c in p.tool_calls],
                           "finish_reason": p.finish_reason}
    if p.repairs:
        out["repairs"] = list(p.repairs)
    if p.warnings:
        out["warnings"] = list(p.warnings)
    return out


def _chunk(c: StreamChunk) -> dict[str, Any]:
    out: dict[str, Any] = {"type": c.type.value}
    for key in ("content", "index", "tool_call_id", "tool_name", "args_delta", "arguments"):
        value = getattr(c, key)
        if value is not None:
            out[key] = value
    return out


def message_dict(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role}
    if m.content is not None:
        out["content"] = m.content
    if m.reasoning_content:
        out["reasoning_content"] = m.reasoning_content
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments}
                             for c in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name:
        out["name"] = m.name
    if m.is_error:
        out["is_error"] = True
    return out


def canonical_messages(msgs: Iterable[Message], lossy: Iterable[str]) -> list[dict[str, Any]]:
    """Messages reduced to what a provider must carry: call ids become positions, and the
    details the provider declares lossy are left out."""
    from ..providers._messages import content_text

    lossy = set(lossy)
    ids: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    systems: list[str] = []
    for m in msgs:
        if m.role == "system":
            systems.append(content_text(m.content) or "")
            continue
        d: dict[str, Any] = {"role": m.role}
        text = m.content if m.role == "tool" else content_text(m.content)
        if isinstance(text, (dict, list)):
            text = json.dumps(text, sort_keys=True)
        if m.tool_calls and "blank_call_text" in lossy and isinstance(text, str) \
                and not text.strip():
            text = None  # the wire sends a call turn's whitespace-only text as null
        if text:
            d["content"] = text
        if m.tool_calls:
            calls: list[dict[str, Any]] = []
            for c in m.tool_calls:
                ids.setdefault(c.id or f"#{len(ids)}", len(ids))
                calls.append({"name": c.name, "arguments": c.arguments})
                if "call_ids" not in lossy:
                    calls[-1]["ref"] = ids[c.id or ""]
            d["tool_calls"] = calls
        if m.role == "tool":
            if "call_ids" not in lossy:
                d["ref"] = ids.get(m.tool_call_id or "", -1)
            if m.is_error and "tool_error" not in lossy:
                d["is_error"] = True
        if m.reasoning_content and "reasoning" not in lossy:
            d["reasoning"] = m.reasoning_content
        out.append(d)
    if systems:
        out.insert(0, {"role": "system", "content": "\n\n".join(systems)})
    return out


def _walk_keywords(schema: Any) -> Iterable[str]:
    from ..providers._transforms import _LIST_KEYS, _MAP_KEYS, _ONE_KEYS

    if not isinstance(schema, dict):
        return
    yield from schema
    for key in _MAP_KEYS:
        if isinstance(schema.get(key), dict):
            for sub in schema[key].values():
                yield from _walk_keywords(sub)
    for key in _ONE_KEYS:
        if isinstance(schema.get(key), dict):
            yield from _walk_keywords(schema[key])
    for key in _LIST_KEYS:
        if isinstance(schema.get(key), list):
            for sub in schema[key]:
                yield from _walk_keywords(sub)


def _cases_for(engine: Any, root: Path, rid: str) -> tuple[dict[str, Any], str]:
    seen = rid
    while True:
        path = root / "providers" / f"{seen}.cases.yaml"
        if path.exists():
            cases = read_cases(path) or {}
            source = f"golden/providers/{path.name}"
            base = cases.pop("base", None)
            if isinstance(base, str):  # another provider's cases, with these keys replaced
                inherited, base_source = _cases_for(engine, root, base)
                return {**inherited, **cases}, f"{base_source}, {source}"
            return cases, source
        rf = engine.ruleset.get("provider", seen)
        parent = (rf.data or {}).get("extends") if rf is not None else None
        if not isinstance(parent, str):
            return {}, ""
        seen = parent


def _attempt(fn: Any) -> Any:
    from .._errors import ToolrulesError

    try:
        return fn()
    except ToolrulesError as exc:
        return f"error: {type(exc).__name__}: {exc}"


def golden_files(engine: Any, root: Path) -> Iterable[GoldenFile]:
    shared_path = root / "providers" / "conversation.cases.yaml"
    if not shared_path.exists():
        return
    shared = read_cases(shared_path) or {}
    for rid in engine.providers():
        cases, source = _cases_for(engine, root, rid)
        yield _golden(engine, rid, shared, cases, source)


def _golden(engine: Any, rid: str, shared: dict[str, Any], cases: dict[str, Any],
            source: str) -> GoldenFile:
    from .._errors import ToolrulesError

    prov = engine.provider_rules(rid)
    problems: list[str] = []
    model = cases.get("model")
    tools = shared.get("tools") or []
    messages = shared.get("messages") or []
    options = dict(cases.get("options") or {})
    out: dict[str, Any] = {"provider": rid, "model": model}
    if prov.data.get("description"):
        out["description"] = " ".join(str(prov.data["description"]).split())
    out["tools"] = engine.translate_tools(tools, rid, model=model)
    out["tool_choice"] = {str(c): _attempt(lambda c=c: engine.tool_choice(c, rid, tools, model=model))
                          for c in shared.get("choices") or []}
    request = engine.build_request(rid, model, messages, tools=tools,
                                   tool_choice=shared.get("tool_choice", "auto"), **options)
    out["request"] = request
    out["tool_results"] = [engine.tool_result_message(ToolResult(**r), rid)
                           for r in shared.get("results") or []]
    # the reverse direction, and the round-trip invariant
    from ..providers._messages import coerce_messages

    back, back_tools, back_choice = engine.parse_request(request, rid)
    out["parse_request"] = {"messages": [message_dict(m) for m in back],
                            "tools": [t.name for t in back_tools], "tool_choice": back_choice}
    want = canonical_messages(coerce_messages(messages), prov.lossy)
    have = canonical_messages(back, prov.lossy)
    if want != have:
        problems.append(f"parse_request(build_request(...)) differs from the conversation:\n"
                        f"  want {json.dumps(want)}\n  have {json.dumps(have)}")
    sent_names = [t.name for t in back_tools]
    if prov.name_pattern is not None:
        problems.extend(f"tool name {n!r} does not match {prov.name_pattern.pattern!r}"
                        for n in sent_names if not prov.name_pattern.fullmatch(n))
    forbidden = set(cases.get("forbid_keywords") or ())
    if forbidden:
        wire_tools = out["tools"]
        text = json.dumps(wire_tools)
        for tool in json.loads(text):
            for decl in _schemas_in(tool):
                bad = forbidden.intersection(_walk_keywords(decl))
                if bad:
                    problems.append(f"a sent schema holds forbidden keywords {sorted(bad)}")
    # responses
    parsed_bodies: dict[str, ParsedResponse] = {}
    responses: dict[str, Any] = {}
    # a response (and the stream of the same name) answered by another model than the
    # file's: e.g. an id no family rule knows
    models = {str(k): str(v) for k, v in (cases.get("response_models") or {}).items()}
    for name, body in (cases.get("responses") or {}).items():
        model = models.get(name, cases.get("model"))
        try:
            parsed = engine.parse_response(body, rid, tools=tools, model=model, ids="sequential")
        except ToolrulesError as exc:
            responses[name] = f"error: {type(exc).__name__}: {exc}"
            continue
        parsed_bodies[name] = parsed
        rebuilt = engine.build_response(parsed, rid, model=model, response_id="resp-golden", created=0)
        again = engine.parse_response(rebuilt, rid, tools=tools, model=model, ids="sequential")
        if _comparable(again, ids=False, lossy=prov.lossy) != _comparable(parsed, ids=False,
                                                                           lossy=prov.lossy):
            problems.append(f"response {name}: parse_response(build_response(parsed)) differs")
        responses[name] = {"parsed": parsed_dict(parsed), "rebuilt": rebuilt}
    if responses:
        out["responses"] = responses
    streams: dict[str, Any] = {}
    for name, case in (cases.get("streams") or {}).items():
        model = models.get(name, cases.get("model"))
        stream = engine.response_stream(rid, tools=tools, model=model, ids="sequential")
        chunks: list[StreamChunk] = []
        for event in case.get("events") or []:
            chunks.extend(stream.feed(event))
        chunks.extend(stream.close())
        result = stream.result
        target = case.get("equals")
        if target is not None:
            if target not in parsed_bodies:
                problems.append(f"stream {name}: equals names unknown response {target!r}")
            elif _comparable(result) != _comparable(parsed_bodies[target]):
                problems.append(f"stream {name}: result differs from parse_response({target}):\n"
                                f"  stream {parsed_dict(result)}\n"
                                f"  body   {parsed_dict(parsed_bodies[target])}")
        problems.extend(_stream_contract(name, chunks, result))
        streams[name] = {"chunks": [_chunk(c) for c in chunks], "result": parsed_dict(result)}
    if streams:
        out["streams"] = streams
    if models:
        out["response_models"] = models
    model = cases.get("model")
    media = _media_cases(engine, rid, model, shared.get("media") or {}, problems)
    if media:
        out["media"] = media
    entries = _tool_entry_cases(engine, rid, request, cases.get("request_tools") or {})
    if entries:
        out["request_tools"] = entries
    # plain data without shared objects (so the YAML has no anchors)
    content = json.loads(json.dumps(out, ensure_ascii=False))
    return GoldenFile(path=f"providers/{rid}.golden.yaml", content=content, problems=problems,
                      source=", ".join(x for x in ("golden/providers/conversation.cases.yaml", source) if x))


def _with_parts(raw: dict[str, Any]) -> Message:
    from ..providers._messages import coerce_message

    content = raw.get("content")
    if isinstance(content, list):
        raw = {**raw, "content": tuple(ContentPart(**p) for p in content)}
    m = coerce_message({k: v for k, v in raw.items() if k != "content"})
    return Message(role=m.role, content=raw.get("content"), tool_calls=m.tool_calls,
                   tool_call_id=m.tool_call_id, name=m.name)


def _parts_of(msgs: Iterable[Message]) -> list[Any]:
    """The media of a conversation by what they carry (a plain-text document may travel
    as text; a format without a field for the media type may not bring it back)."""
    return [(p.type, p.data, p.url, p.file_id) for m in msgs if isinstance(m.content, tuple)
            for p in m.content if p.type != "text" and p.source != "text"]


def _media_cases(engine: Any, rid: str, model: str | None, cases: dict[str, Any],
                 problems: list[str]) -> dict[str, Any]:
    """Each media case written for the provider (or refused), and read back: the media
    parts must come back as they went, in order."""
    from .._errors import ToolrulesError
    from ..providers._rules import get_path

    prov = engine.provider_rules(rid)
    out: dict[str, Any] = {}
    for name, raw in cases.items():
        msgs = [_with_parts(dict(m)) for m in raw]
        try:
            body = engine.build_request(rid, model, msgs)
        except ToolrulesError as exc:
            out[name] = f"refused: {type(exc).__name__}: {exc}"
            continue
        wire = get_path(body, prov.messages_path)
        out[name] = {"messages": wire}
        try:
            back, _t, _c = engine.parse_request(body, rid)
        except ToolrulesError as exc:
            out[name]["read_back"] = f"error: {type(exc).__name__}: {exc}"
            continue
        sent, got = _parts_of(msgs), _parts_of(back)
        if sent != got and prov.reader.parts:
            problems.append(f"media {name}: parts read back differ:\n  sent {sent}\n  got  {got}")
    return out


def _tool_entry_cases(engine: Any, rid: str, request: dict[str, Any],
                      cases: dict[str, Any]) -> dict[str, Any]:
    """Tool lists a client may send (`request_tools` in the cases): the tools read from
    each (and the entries omitted, with their reasons, for a caller that keeps a record of
    them, as the proxy does), or its refusal (an entry no rule reads is never dropped)."""
    from .._errors import ToolrulesError
    from ..providers._rules import set_path

    prov = engine.provider_rules(rid)
    out: dict[str, Any] = {}
    for name, entries in cases.items():
        body = copy.deepcopy(request)
        set_path(body, prov.tools_path, copy.deepcopy(entries))
        omitted: dict[str, str] = {}
        try:
            _m, tools, _c = engine.parse_request(body, rid, omitted=omitted)
        except ToolrulesError as exc:
            out[name] = f"refused: {type(exc).__name__}: {exc}"
            continue
        names = [t.name for t in tools]
        out[name] = {"tools": names, "omitted": omitted} if omitted else names
    return out


def _schemas_in(tool: Any) -> Iterable[Any]:
    """Every value under a key that holds a tool schema, anywhere in a wire tool."""
    if isinstance(tool, dict):
        for k, v in tool.items():
            if k in ("parameters", "input_schema", "parametersJsonSchema", "json"):
                yield v
            else:
                yield from _schemas_in(v)
    elif isinstance(tool, list):
        for v in tool:
            yield from _schemas_in(v)


def _comparable(p: ParsedResponse, ids: bool = True, lossy: Iterable[str] = ()) -> Any:
    d = parsed_dict(p)
    if "reasoning" in lossy:
        d.pop("reasoning_content")
    if not ids:  # a rebuilt body carries generated (or provider-shaped) call ids, and
        # none of the original body's defects (warnings)
        d.pop("warnings", None)
        for c in d["tool_calls"]:
            c.pop("id")
    return d


def _stream_contract(name: str, chunks: list[StreamChunk], result: ParsedResponse) -> list[str]:
    """What a client rebuilds from committed chunks is the result."""
    from .._types import StreamChunkType as T

    text = "".join(c.content or "" for c in chunks if c.type is T.TEXT) or None
    reasoning = "".join(c.content or "" for c in chunks if c.type is T.REASONING) or None
    calls: dict[int, dict[str, Any]] = {}
    for c in chunks:
        if c.type is T.TOOL_START:
            calls[c.index or 0] = {"name": c.tool_name, "args": ""}
        elif c.type is T.TOOL_ARGS:
            calls[c.index or 0]["args"] += c.args_delta or ""
    rebuilt = [(calls[i]["name"], json.loads(calls[i]["args"])) for i in sorted(calls)]
    want = [(c.name, c.arguments) for c in result.tool_calls]
    out = []
    if text != result.content:
        out.append(f"stream {name}: text chunks do not add up to the content")
    if reasoning != result.reasoning_content:
        out.append(f"stream {name}: reasoning chunks do not add up to the reasoning")
    if rebuilt != want:
        out.append(f"stream {name}: committed call chunks {rebuilt} != result calls {want}")
    return out
