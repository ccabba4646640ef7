"""A provider's API as a proxy serves it to clients (the rule's `serve:` section).

`Front` reads what a client's request asks for beyond messages and tools (options, a
stream, its API key, a JSON answer, the model named in the path), writes error bodies in
the API's own shape, lists models, and makes a `StreamWriter`: the API's server-sent-event grammar driven by the rule's
`serve.events` expressions. The writer thinks in content blocks - text, reasoning, one
per tool call - each opened, fed and closed; the rule says which events each step
writes (none, one, several), so one interpreter speaks every grammar.

Nothing here knows an API: every event, field name and error type is in the rule.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .._errors import CapabilityError, UnsupportedContentError
from .._jsonutil import dumps_compact
from .._types import ContentPart, Message, ParsedResponse, ToolCall
from ._messages import derived_id
from ._rules import Expr, Provider

__all__ = ["BlockEvents", "EventGrammar", "FieldCase", "Front", "StreamWriter", "VolatileText",
           "compile_fields", "compile_front", "fold_signature", "iso_time", "signature_in_id",
           "unfold_signature", "usage_view", "wire_call_id"]

_KINDS = ("text", "reasoning", "tool")


def _exprs(values: Any, where: str) -> tuple[Expr, ...]:
    return tuple(Expr(v, f"{where}[{i}]") for i, v in enumerate(values or ()) if isinstance(v, str))


def _opt(value: Any, where: str) -> Expr | None:
    return Expr(value, where) if isinstance(value, str) and value else None


def _status_table(table: Any) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in (table or {}).items()}


@dataclass(frozen=True, slots=True)
class BlockEvents:
    start: tuple[Expr, ...]
    delta: tuple[Expr, ...]
    stop: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class EventGrammar:
    name: Expr | None
    sequence: str | None
    done: str | None
    start: tuple[Expr, ...]
    blocks: dict[str, BlockEvents]
    finish: tuple[Expr, ...]
    ping: Expr | None
    error: Expr | None
    needs_response: bool = True
    """The finish events use the whole body (`response`): build it only then."""


@dataclass(frozen=True, slots=True)
class FieldCase:
    """One way a request field is accounted for: `read` (the proxy reads and carries it),
    `ignore` (no effect on the answer; `reason` says why) or `refuse` (`reason`: why it
    cannot be carried and what to do) - when `when` holds, or always. A read object may
    have its own fields accounted for, key by key (`fields`)."""

    action: str
    reason: str | None = None
    when: Expr | None = None
    fields: dict[str, tuple[FieldCase, ...]] | None = None


_ACTIONS = ("read", "ignore", "refuse")


def _field_case(value: Any, where: str) -> FieldCase | None:
    if value == "read":
        return FieldCase("read")
    if not isinstance(value, dict):
        return None
    when = _opt(value.get("when"), f"{where}.when")
    for action in _ACTIONS[1:]:
        if isinstance(value.get(action), str):
            return FieldCase(action, str(value[action]).strip(), when)
    if isinstance(value.get("fields"), dict):
        return FieldCase("read", None, when, compile_fields(value["fields"], f"{where}.fields"))
    return FieldCase("read", None, when) if value.get("read") is True else None


def compile_fields(table: Any, where: str) -> dict[str, tuple[FieldCase, ...]] | None:
    """`serve.fields`: field -> its cases in order (a single case or a list of them); a
    case `{fields: {...}}` reads an object whose own fields are accounted for the same way."""
    if not isinstance(table, dict):
        return None
    out: dict[str, tuple[FieldCase, ...]] = {}
    for name, value in table.items():
        items = value if isinstance(value, list) else [value]
        cases = (_field_case(v, f"{where}.{name}[{i}]") for i, v in enumerate(items))
        out[str(name)] = tuple(c for c in cases if c is not None)
    return out


@dataclass(frozen=True, slots=True)
class VolatileText:
    """Client metadata riding in the conversation's text (`serve.volatile`): what to take
    out of which roles' texts, and what becomes of it."""

    id: str
    pattern: re.Pattern[str]
    roles: frozenset[str]
    action: str
    """drop, or after (carried as a system text after the conversation)."""
    why: str


def _volatile(entries: Any) -> tuple[VolatileText, ...]:
    out = []
    for e in entries or ():
        if isinstance(e, dict) and isinstance(e.get("match"), str):
            out.append(VolatileText(str(e.get("id") or "volatile"), re.compile(e["match"], re.M),
                                    frozenset(e.get("roles") or ("system",)),
                                    str(e.get("action") or "drop"),
                                    " ".join(str(e.get("why") or "").split())))
    return tuple(out)


def _without(content: Any, pattern: re.Pattern[str]) -> tuple[Any, list[str]]:
    """`content` (text or content parts) without the matches of `pattern`, and what was
    taken out."""
    taken: list[str] = []

    def cut(text: str) -> str:
        def keep(m: re.Match[str]) -> str:
            taken.append(m.group(0))
            return ""
        return pattern.sub(keep, text)

    if isinstance(content, str):
        return cut(content), taken
    if isinstance(content, tuple):
        parts = tuple(replace(p, text=cut(p.text)) if isinstance(p, ContentPart) and p.text
                      else p for p in content)
        return parts, taken
    return content, taken


def _blank(content: Any) -> bool:
    if isinstance(content, str):
        return not content.strip()
    if isinstance(content, tuple):
        return all(isinstance(p, ContentPart) and p.type == "text" and not (p.text or "").strip()
                   for p in content)
    return content is None


@dataclass(frozen=True)
class Front:
    """One client API: how its requests are read and its answers and errors written."""

    provider: str
    path: str | None
    model_path: str | None
    keys: tuple[str, ...]
    stream: Expr | None
    options: dict[str, Expr]
    parallel: Expr | None
    count_tokens_path: str | None
    count_tokens_body: Expr | None
    models_path: str | None
    models_header: str | None
    models_body: Expr | None
    error_body: Expr | None
    error_types: dict[str, str]
    error_codes: dict[str, str]
    events: EventGrammar | None
    prov: Provider
    fields: dict[str, tuple[FieldCase, ...]] | None = None
    """`serve.fields`: how every top-level field of a request is accounted for (None: the
    rule has no table, and nothing is checked)."""
    stream_path: str | None = None
    """`serve.stream_path`: a second endpoint whose every answer is streamed."""
    stream_query: dict[str, str] | None = None
    """`serve.stream_query`: query parameters a stream endpoint's request must carry."""
    model_param: str | None = None
    """`serve.model_param`: the path parameter naming the model (else the body's field)."""
    key_query: tuple[str, ...] = ()
    """`serve.key_query`: query parameters that may carry the client's key (after `keys`)."""
    json_output: Expr | None = None
    """`serve.json_output`: {schema, name} when the client asks for a JSON answer."""
    prompt_fields: tuple[str, ...] = ()
    """The body fields that hold the prompt (messages, system, tools): token estimates."""
    versions: tuple[str, ...] = ()
    """`serve.versions`: other API versions every path is served under too."""
    count_request: Expr | None = None
    """`serve.count_tokens.request`: the request to count, in a count_tokens body."""

    def served(self, path: str | None) -> tuple[str, ...]:
        """`path` and the same path under each of `serve.versions` (its first segment
        replaced): `/v1beta/models` also as `/v1/models`."""
        if not path:
            return ()
        out = [path]
        head, sep, rest = path.lstrip("/").partition("/")
        for version in self.versions:
            if sep and version != head:
                out.append(f"/{version}/{rest}")
        return tuple(out)

    def counted(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """The request a count_tokens body asks to count (`count_tokens.request`)."""
        if self.count_request is None:
            return body
        value = self.count_request(body)
        return value if isinstance(value, dict) else body

    volatile: tuple[VolatileText, ...] = ()
    """`serve.volatile`: client metadata taken out of the conversation's texts."""

    def take_volatile(self, messages: list[Message]) -> tuple[list[Message], list[dict[str, Any]]]:
        """The conversation without the client metadata the rule lists (`serve.volatile`):
        each match dropped, or carried as a system text after the conversation; a message
        left with no text goes. Returns the messages and one rewrite record per use
        ({action, messages, why}, as turn rewrites are recorded)."""
        if not self.volatile:
            return messages, []
        out: list[Message] = []
        rewrites: list[dict[str, Any]] = []
        after: list[str] = []
        for i, m in enumerate(messages):
            content = m.content
            for rule in self.volatile:
                if m.role not in rule.roles:
                    continue
                content, taken = _without(content, rule.pattern)
                if taken:
                    moved = rule.action == "after"
                    if moved:
                        after.extend(t.strip() for t in taken if t.strip())
                    rewrites.append({"action": "volatile-moved-after" if moved
                                     else "volatile-dropped", "messages": [i],
                                     "why": f"{rule.id}: {rule.why}"})
            if content is m.content:
                out.append(m)
            elif not (_blank(content) and not m.tool_calls):
                out.append(replace(m, content=_trim(content)))
        if after:
            out.append(Message(role="system", content="\n".join(after)))
        return out, rewrites

    # ------------------------------------------------------------ requests

    def wants_stream(self, body: Mapping[str, Any]) -> bool:
        return bool(self.stream(body)) if self.stream is not None else False

    def requested_model(self, body: Mapping[str, Any], params: Mapping[str, Any]) -> Any:
        """The model name the client asked for: the path parameter `serve.model_param`
        names, else the body field of the rule's `request.model` (or `model`)."""
        if self.model_param:
            return params.get(self.model_param)
        return body.get(self.model_path or "model")

    def stream_query_problem(self, query: Mapping[str, str]) -> str | None:
        """Why a request to the stream endpoint cannot be answered (a query parameter the
        rule requires is missing or differs), or None."""
        for name, value in (self.stream_query or {}).items():
            got = query.get(name)
            if got != value:
                return (f"the stream endpoint answers with server-sent events only: send "
                        f"`?{name}={value}`" + (f" (not {name}={got!r})" if got else ""))
        return None

    def read_json_output(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """{schema (JSON Schema or None), name} when the client asks for a JSON answer
        (`serve.json_output`); the schema is read like tool parameters
        (`tools.read.pipeline`: e.g. upper-case type names to JSON Schema's)."""
        if self.json_output is None:
            return None
        value = self.json_output(body)
        if not isinstance(value, dict):
            return None
        schema = value.get("schema")
        if isinstance(schema, dict) and self.prov.tools_read_pipeline.steps:
            schema = self.prov.tools_read_pipeline.run("json_output", "", schema).parameters
        name = value.get("name")
        return {"schema": schema if isinstance(schema, dict) else None,
                "name": name if isinstance(name, str) and name else None}

    def read_options(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """build_request options the client set (max_tokens, temperature, ...)."""
        out: dict[str, Any] = {}
        for name, expr in self.options.items():
            value = expr(body)
            if value is not None:
                out[name] = value
        return out

    def account(self, body: Mapping[str, Any]) -> dict[str, str]:
        """Every top-level field of the client's request accounted for by the rule: read,
        ignored (returned: field -> the stated reason) or refused - an
        UnsupportedContentError naming the field, why and what to do. A field no rule
        mentions is refused too: a proxy that cannot say what a field does must not drop
        it. A null value asks for nothing and passes. An object read field by field
        (`fields` in its case) has each of its fields accounted for the same way
        (`generationConfig.topK`)."""
        if self.fields is None:
            return {}
        ignored: dict[str, str] = {}
        self._account(body, body, self.fields, "", ignored)
        return ignored

    def _account(self, body: Mapping[str, Any], obj: Mapping[str, Any],
                 table: dict[str, tuple[FieldCase, ...]], prefix: str,
                 ignored: dict[str, str]) -> None:
        for key, value in obj.items():
            if value is None:
                continue
            name = prefix + key
            cases = table.get(key)
            if cases is None:
                raise UnsupportedContentError(
                    f"request field `{name}` is not supported: no rule of the "
                    f"{self.provider} front says how to carry it. Leave it out, or call the "
                    "provider directly", part_type="field", where=name)
            for case in cases:
                if case.when is not None and not _truthy(case.when(body)):
                    continue
                if case.action == "ignore":
                    ignored[name] = case.reason or "no effect on the answer"
                elif case.action == "refuse":
                    raise UnsupportedContentError(f"request field `{name}`: {case.reason}",
                                                  part_type="field", where=name)
                elif case.fields is not None:
                    if not isinstance(value, dict):
                        raise UnsupportedContentError(
                            f"request field `{name}` must be an object", part_type="field",
                            where=name)
                    self._account(body, value, case.fields, name + ".", ignored)
                break
            else:
                shown = json.dumps(value, ensure_ascii=False, default=str)
                shown = shown if len(shown) <= 80 else shown[:77] + "..."
                raise UnsupportedContentError(
                    f"request field `{name}` with the value {shown} is not supported by the "
                    f"{self.provider} front. Leave it out, or call the provider directly",
                    part_type="field", where=name)

    def read_parallel(self, body: Mapping[str, Any]) -> bool | None:
        if self.parallel is None:
            return None
        value = self.parallel(body)
        return value if isinstance(value, bool) else None

    def client_key(self, headers: Mapping[str, str],
                   query: Mapping[str, str] | None = None) -> str | None:
        """The key a client sent (headers looked up lower-case, then the query
        parameters of `serve.key_query`), without `Bearer `."""
        for name in self.keys:
            value = headers.get(name)
            if value:
                value = value.strip()
                if value[:7].lower() == "bearer ":
                    value = value[7:].strip()
                return value or None
        for name in self.key_query if query is not None else ():
            value = (query or {}).get(name)
            if value and value.strip():
                return value.strip()
        return None

    # ------------------------------------------------------------ answers

    def _lookup(self, table: dict[str, str], status: int) -> str | None:
        return table.get(str(status)) or table.get(f"{status // 100}xx")

    def error_type(self, status: int) -> str | None:
        return self._lookup(self.error_types, status)

    def error(self, status: int, message: str, *, type: str | None = None,
              code: str | None = None) -> dict[str, Any]:
        """An error body in the API's own shape."""
        view = {"status": status, "message": message,
                "type": type or self.error_type(status) or "error",
                "code": code or self._lookup(self.error_codes, status)}
        if self.error_body is None:
            return {"error": {"message": message, "type": view["type"]}}
        body = self.error_body(view)
        return body if isinstance(body, dict) else {"error": {"message": message}}

    def models(self, models: list[dict[str, Any]]) -> dict[str, Any]:
        if self.models_body is None:
            raise CapabilityError(f"provider {self.provider!r} lists no models (serve.models)")
        return self.models_body({"models": models}) or {}

    def count_tokens(self, tokens: int) -> dict[str, Any]:
        if self.count_tokens_body is None:
            raise CapabilityError(f"provider {self.provider!r} counts no tokens "
                                  "(serve.count_tokens)")
        return self.count_tokens_body({"tokens": tokens}) or {}

    def writer(self, build: Callable[[ParsedResponse, dict[str, Any] | None], dict[str, Any]], *,
               response_id: str, model: str | None, created: int | None = None,
               request: Mapping[str, Any] | None = None,
               usage: dict[str, Any] | None = None) -> StreamWriter:
        """A writer for one streamed answer; `build(parsed, usage)` writes the whole
        body (what `response` holds in the finish events)."""
        if self.events is None:
            raise CapabilityError(f"provider {self.provider!r} has no stream grammar "
                                  "(serve.events)")
        when = int(time.time()) if created is None else int(created)
        view = {"id": response_id, "model": model, "created": when,
                "created_at": iso_time(when),
                "usage": usage_view(usage), "request": request or {}}
        return StreamWriter(self.events, self.prov, view, build)


def usage_view(usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The `usage` a response's build and stream expressions see: {input_tokens (every
    prompt token, cached ones included), cached_tokens (of those, read from the server's
    prompt cache: present only when the upstream said), output_tokens} plus
    `uncached_input_tokens` (input_tokens less cached_tokens: what an API that counts
    cache reads apart, as Anthropic's does, calls its input tokens)."""
    if usage is None:
        return None
    out = dict(usage)
    total = out.get("input_tokens")
    if isinstance(total, int):
        cached = out.get("cached_tokens")
        out["uncached_input_tokens"] = max(0, total - cached) if isinstance(cached, int) \
            else total
    return out


# A call's signature carried in its id, for APIs with no field for it: the id, this
# marker, then the signature's UTF-8 bytes in unpadded URL-safe base64 (letters, digits,
# `-` and `_`: every API's id pattern takes them).
_SIG_MARK = "__sig_"


def signature_in_id(prov: Provider) -> bool:
    """Does this API carry a call's signature in the call's id (`serve.signature_in_id`)?"""
    serve = prov.data.get("serve")
    return isinstance(serve, dict) and serve.get("signature_in_id") is True


def fold_signature(call_id: str | None, signature: str | None) -> str | None:
    """`call_id` with `signature` folded in (unchanged when there is no signature)."""
    if not signature or call_id is None:
        return call_id
    data = base64.urlsafe_b64encode(signature.encode("utf-8")).decode("ascii").rstrip("=")
    return f"{call_id}{_SIG_MARK}{data}"


def unfold_signature(call_id: str | None) -> tuple[str | None, str | None]:
    """(the id, the signature) of an id `fold_signature` wrote; (id, None) otherwise."""
    if not call_id or _SIG_MARK not in call_id:
        return call_id, None
    head, _, data = call_id.partition(_SIG_MARK)
    try:
        raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
        return head, raw.decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return call_id, None


def wire_call_id(prov: Provider, call_id: str | None, seed: str) -> str | None:
    """The id a call goes out under in `prov`'s format (build_response's rule): kept when
    the provider accepts it, else derived from it (or from `seed` when there is none and
    ids are required)."""
    rule = prov.call_ids
    if call_id is None:
        if rule.get("required"):
            return derived_id(seed, rule.get("prefix", "call_"), rule.get("length", 24))
        return None
    pat = prov._id_pattern
    if pat is not None and not pat.fullmatch(call_id):
        return derived_id(call_id, rule.get("prefix", ""), rule.get("length", 24))
    return call_id


class StreamWriter:
    """Events of one streamed answer in the API's grammar, as SSE bytes.

    `start()` once, then `text(delta)`, `reasoning(delta)` and `tool_call(call)` in any
    order (a change of kind closes the open block), `finish(parsed)` once - or `error()`
    at any point after `start()`. Each returns the bytes to send.
    """

    def __init__(self, grammar: EventGrammar, prov: Provider, view: dict[str, Any],
                 build: Callable[[ParsedResponse, dict[str, Any] | None], dict[str, Any]]):
        self._g = grammar
        self._prov = prov
        self._view = view
        self._build = build
        self._seq = 0
        self._index = -1          # block index (every block counts)
        self._calls = 0           # tool calls written
        self._open: str | None = None
        self._parts: list[str] = []
        self.started = False
        self.closed = False

    # ------------------------------------------------------------ framing

    def _encode(self, events: list[Any]) -> bytes:
        out: list[str] = []
        g = self._g
        for ev in events:
            if ev is None:
                continue
            if g.sequence and isinstance(ev, dict):
                ev[g.sequence] = self._seq
                self._seq += 1
            name = g.name(ev) if g.name is not None else None
            data = dumps_compact(ev)
            out.append(f"event: {name}\ndata: {data}\n\n" if isinstance(name, str)
                       else f"data: {data}\n\n")
        return "".join(out).encode("utf-8")

    def _run(self, exprs: tuple[Expr, ...], view: dict[str, Any]) -> list[Any]:
        return [e(view) for e in exprs]

    def _block_view(self, **extra: Any) -> dict[str, Any]:
        return {**self._view, "index": self._index, "call_index": self._calls, **extra}

    # ------------------------------------------------------------ steps

    def start(self) -> bytes:
        self.started = True
        return self._encode(self._run(self._g.start, self._view))

    def _close_open(self) -> list[Any]:
        if self._open is None:
            return []
        block = self._g.blocks.get(self._open)
        text = "".join(self._parts)
        self._open = None
        self._parts = []
        if block is None:
            return []
        return self._run(block.stop, self._block_view(text=text))

    def _delta(self, kind: str, delta: str) -> bytes:
        if not delta:
            return b""
        events: list[Any] = []
        block = self._g.blocks.get(kind)
        if self._open != kind:
            events.extend(self._close_open())
            self._open = kind
            self._index += 1
            if block is not None:
                events.extend(self._run(block.start, self._block_view(text="")))
        self._parts.append(delta)
        if block is not None:
            events.extend(self._run(block.delta, self._block_view(delta=delta)))
        return self._encode(events)

    def text(self, delta: str) -> bytes:
        return self._delta("text", delta)

    def reasoning(self, delta: str) -> bytes:
        return self._delta("reasoning", delta)

    def call_id(self, call: ToolCall) -> str | None:
        cid = wire_call_id(self._prov, call.id, f"{self._view['id']}:{self._calls}")
        return fold_signature(cid, call.signature) if signature_in_id(self._prov) else cid

    def tool_call(self, call: ToolCall) -> bytes:
        """A whole call: its block opened, its arguments in one delta, closed."""
        events = self._close_open()
        self._index += 1
        args = call.arguments_json()
        view_call = {"id": self.call_id(call), "name": call.name, "arguments": call.arguments,
                     "arguments_json": args, "signature": call.signature}
        block = self._g.blocks.get("tool")
        if block is not None:
            events.extend(self._run(block.start, self._block_view(call=view_call, text="")))
            events.extend(self._run(block.delta, self._block_view(call=view_call, delta=args)))
            events.extend(self._run(block.stop, self._block_view(call=view_call, text=args)))
        self._calls += 1
        return self._encode(events)

    def ping(self) -> bytes:
        if self._g.ping is None:
            return b": ping\n\n"  # an SSE comment: every client skips it
        return self._encode([self._g.ping(self._view)])

    def finish(self, parsed: ParsedResponse, usage: dict[str, Any] | None = None) -> bytes:
        """Close the open block and the stream. `parsed`: the whole answer as streamed
        (its calls with the ids `tool_call` used)."""
        if usage is not None:
            self._view["usage"] = usage_view(usage)
        events = self._close_open()
        body = self._build(parsed, self._view.get("usage")) if self._g.needs_response else None
        view = {**self._view, "finish_reason": self._prov.wire_finish(
            parsed.finish_reason or ("tool_calls" if parsed.tool_calls else "stop")),
            "response": body}
        events.extend(self._run(self._g.finish, view))
        self.closed = True
        data = self._encode(events)
        if self._g.done:
            data += f"data: {self._g.done}\n\n".encode()
        return data

    def error(self, status: int, message: str, *, type: str | None = None,
              code: str | None = None, front: Front | None = None) -> bytes:
        """A failure after the stream started: the grammar's error event (the stream
        ends after it)."""
        self.closed = True
        view = {**self._view, "status": status, "message": message,
                "type": type or (front.error_type(status) if front else None) or "error",
                "code": code or (front._lookup(front.error_codes, status) if front else None)}
        if self._g.error is None:
            return self._encode([{"error": {"message": message, "type": view["type"]}}])
        return self._encode([self._g.error(view)])


def compile_front(prov: Provider) -> Front:
    """The `serve:` section of a (merged) provider rule."""
    d = prov.data.get("serve") or {}
    w = f"provider {prov.id} serve"
    ct = d.get("count_tokens") or {}
    models = d.get("models") or {}
    err = d.get("error") or {}
    ev = d.get("events")
    grammar = None
    if isinstance(ev, dict):
        blocks = {}
        for kind in _KINDS:
            b = ev.get(kind)
            if isinstance(b, dict):
                blocks[kind] = BlockEvents(_exprs(b.get("start"), f"{w}.events.{kind}.start"),
                                           _exprs(b.get("delta"), f"{w}.events.{kind}.delta"),
                                           _exprs(b.get("stop"), f"{w}.events.{kind}.stop"))
        grammar = EventGrammar(
            name=_opt(ev.get("name"), f"{w}.events.name"), sequence=ev.get("sequence"),
            done=ev.get("done"), start=_exprs(ev.get("start"), f"{w}.events.start"),
            blocks=blocks, finish=_exprs(ev.get("finish"), f"{w}.events.finish"),
            ping=_opt(ev.get("ping"), f"{w}.events.ping"),
            error=_opt(ev.get("error"), f"{w}.events.error"),
            needs_response=any("response" in str(src) for src in ev.get("finish") or ()))
    return Front(
        provider=prov.id, path=d.get("path"), model_path=prov.model_path,
        keys=tuple(str(k).lower() for k in d.get("keys") or ()),
        stream=_opt(d.get("stream"), f"{w}.stream"),
        options={k: Expr(v, f"{w}.options.{k}") for k, v in (d.get("options") or {}).items()
                 if isinstance(v, str) and v},
        parallel=_opt(d.get("parallel"), f"{w}.parallel"),
        count_tokens_path=ct.get("path"), count_tokens_body=_opt(ct.get("body"), f"{w}.count_tokens.body"),
        models_path=models.get("path"), models_header=(models.get("header") or "").lower() or None,
        models_body=_opt(models.get("body"), f"{w}.models.body"),
        error_body=_opt(err.get("body"), f"{w}.error.body"),
        error_types=_status_table(err.get("types")), error_codes=_status_table(err.get("codes")),
        events=grammar, prov=prov, fields=compile_fields(d.get("fields"), f"{w}.fields"),
        stream_path=d.get("stream_path"),
        stream_query={str(k): str(v) for k, v in (d.get("stream_query") or {}).items()} or None,
        model_param=d.get("model_param"),
        key_query=tuple(str(k) for k in d.get("key_query") or ()),
        json_output=_opt(d.get("json_output"), f"{w}.json_output"),
        prompt_fields=_prompt_fields(prov),
        versions=tuple(str(v).strip("/") for v in d.get("versions") or ()),
        count_request=_opt(ct.get("request"), f"{w}.count_tokens.request"),
        volatile=_volatile(d.get("volatile")))


def _prompt_fields(prov: Provider) -> tuple[str, ...]:
    """The top-level body fields the rule reads the prompt from: its messages, its
    system prompt (when it is a field of its own) and its tools."""
    paths = [prov.messages_path, prov.tools_path]
    if prov.system_placement == "field":
        paths.insert(1, prov.system_path or "system")
    return tuple(dict.fromkeys(p.split(".")[0] for p in paths if p))


def _trim(content: Any) -> Any:
    """A text left by a cut without the blank lines at its start (where the cut text
    stood); content parts as they are."""
    return content.lstrip("\n") if isinstance(content, str) else content


def _truthy(value: Any) -> bool:
    """JMESPath truth: false, null, empty strings, lists and objects are false."""
    return not (value is None or value is False or value in ("", [], {}))


_ISO: tuple[int, str] = (-1, "")  # the last second written, and its text (one tuple: threads)


def iso_time(when: int) -> str:
    """`when` (epoch seconds) as ISO 8601 UTC; answers come many a second."""
    global _ISO
    last = _ISO
    if last[0] != when:
        last = _ISO = (when, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)))
    return last[1]
