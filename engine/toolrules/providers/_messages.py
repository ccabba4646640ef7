"""Provider messages: UTP values <-> wire messages, driven by a compiled `Provider`.

Writing: messages are coerced (Message objects, ToolResults or chat-format dicts), call
ids and tool names are made acceptable to the provider (consistently for calls and
their results), each message becomes a *view* that the provider's JMESPath writer turns
into wire message(s), then same-role turns merge and named transforms run.
Reading: the provider's reader expressions pull role, text, reasoning, calls and
results out of each wire message. The tool_choice table is applied and inverted here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import (
    CapabilityError,
    InputTooLargeError,
    ParseError,
    SchemaError,
    UnknownRuleError,
    UnsupportedContentError,
)
from .._jsonutil import decode_object
from .._types import ContentPart, Message, ToolCall, ToolResult
from ..calls._selection import normalize_choice
from ._rules import (
    MAX_BODY_BYTES,
    MESSAGE_TRANSFORMS,
    ChoiceEntry,
    Provider,
    _blank_arguments,
    _is_false,
    prune,
)
from ._transforms import TransformedTool

__all__ = ["WireTools", "choice_value", "coerce_body", "coerce_message", "coerce_messages",
           "content_parts", "content_text", "decode_call", "derived_id", "describe_part",
           "locate_parts", "normalize_choice", "prepare_history", "read_blocks", "read_choice",
           "read_history", "read_wire_message", "refuse_tools", "render_parts", "wire_name",
           "write_messages"]

MAX_MESSAGES = 100_000
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_-]")
_NAME_SENTINEL = "\x00toolrules-name\x00"


# ---------------------------------------------------------------- input coercion

def coerce_body(body: Any, limit: int = MAX_BODY_BYTES, what: str = "body") -> Any:
    """A body as plain JSON data: a dict/list, an SDK object (model_dump), or JSON text."""
    if type(body) is dict:  # the common case, first
        return body
    if hasattr(body, "model_dump"):
        try:
            return body.model_dump(mode="json", by_alias=True, exclude_none=True)
        except TypeError:
            return body.model_dump()
    if hasattr(body, "to_dict") and not isinstance(body, dict):
        return body.to_dict()
    if isinstance(body, (bytes, bytearray)):
        if len(body) > limit:
            raise InputTooLargeError(f"{what} is {len(body)} bytes; the limit is {limit}")
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str):
        if len(body) > limit:
            raise InputTooLargeError(f"{what} is {len(body)} characters; the limit is {limit}")
        try:
            return json.loads(body)
        except ValueError as exc:
            raise ParseError(f"{what} is not JSON: {exc}") from None
    if isinstance(body, (dict, list)):
        return body
    raise ParseError(f"{what} must be a dict, JSON text or an SDK object, not {type(body).__name__}")


def content_parts(content: Any) -> tuple[ContentPart, ...] | None:
    """The parts of content that holds a `ContentPart` beyond text (strings in the list
    become text parts), else None: text-only content stays text everywhere."""
    if not isinstance(content, (list, tuple)) or not any(
            isinstance(p, ContentPart) and p.type != "text" for p in content):
        return None
    out = []
    for p in content:
        if isinstance(p, ContentPart):
            out.append(p)
        elif isinstance(p, str):
            out.append(ContentPart("text", text=p))
        elif isinstance(p, dict) and p.get("type") in ("text", "input_text", "output_text") \
                and isinstance(p.get("text"), str):
            out.append(ContentPart("text", text=p["text"]))
        else:
            raise ParseError("content mixing ContentParts with other values holds a "
                             f"{type(p).__name__}: {json.dumps(p, default=str)[:100]}")
    return tuple(out)


def describe_part(part: ContentPart) -> str:
    """`an image (base64 image/png)`, `a document given by URL` ... for messages."""
    article = "an" if part.type[0] in "aeiou" else "a"
    source = part.source
    if source == "data":
        how = f" (base64 {part.media_type})" if part.media_type else " (base64)"
    elif source == "url":
        how = " given by URL"
    elif source == "file_id":
        how = " given by file id"
    else:
        how = " of plain text" if part.type != "text" else ""
    return f"{article} {part.type} part{how}"


def locate_parts(messages: list[Message]) -> list[Message]:
    """Parts that do not say where they are get their place in `messages` (for errors
    raised after system prompts moved and turns merged)."""
    out = []
    for i, m in enumerate(messages):
        parts = content_parts(m.content)
        if parts is not None and any(p.where is None for p in parts):
            placed = tuple(p if p.where is not None else dataclasses.replace(
                p, where=f"messages[{i}], part {j}") for j, p in enumerate(parts))
            m = dataclasses.replace(m, content=placed)
        out.append(m)
    return out


def _text_only(part: ContentPart, where: str) -> UnsupportedContentError:
    loc = part.where or where
    return UnsupportedContentError(
        f"{loc}: {describe_part(part)} cannot go where only text can ({where}); remove it "
        "or give its content as text", part_type=part.type, where=loc)


def content_text(content: Any, where: str = "here") -> str | None:
    """Message content as text: strings pass, text parts are joined, other values are
    JSON. Content parts beyond text are refused (UnsupportedContentError), not dropped."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)) and any(isinstance(p, ContentPart) for p in content):
        texts = []
        for p in content:
            if isinstance(p, ContentPart):
                if p.type != "text":
                    raise _text_only(p, where)
                texts.append(p.text or "")
            elif isinstance(p, str):
                texts.append(p)
            else:
                texts.append(content_text([p], where) or "")
        return "".join(texts)
    if isinstance(content, list) and all(isinstance(p, (str, dict)) for p in content):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif p.get("type") in ("text", "input_text", "output_text") or (
                    "text" in p and len(p) <= 2 and isinstance(p.get("text"), str)):
                parts.append(p.get("text") or "")
            else:
                raise CapabilityError(f"content part of type {p.get('type')!r} is not supported "
                                      "(toolrules translates text content only)")
        return "".join(parts)
    return json.dumps(content, ensure_ascii=False)


def _decode_arguments(value: Any) -> dict[str, Any] | None:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        return decode_object(value)
    return None


def coerce_message(m: Any) -> Message:
    """A Message from a Message, a ToolResult, or a chat-format dict."""
    if isinstance(m, Message):
        return m
    if isinstance(m, ToolResult):
        return Message(role="tool", content=m.error if m.error is not None else m.output,
                       tool_call_id=m.call_id, name=m.name, is_error=m.error is not None)
    if hasattr(m, "model_dump"):
        m = m.model_dump(exclude_none=True)
    if not isinstance(m, dict):
        raise ParseError(f"a message must be a Message or a dict, not {type(m).__name__}")
    role = m.get("role")
    if not isinstance(role, str):
        raise ParseError(f"message has no role: {json.dumps(m, default=str)[:200]}")
    role = {"developer": "system", "function": "tool", "model": "assistant"}.get(role, role)
    calls = []
    raw_calls = m.get("tool_calls") or ()
    if isinstance(raw_calls, dict):
        raw_calls = [raw_calls]
    for c in raw_calls:
        if isinstance(c, ToolCall):
            calls.append(c)
            continue
        if not isinstance(c, dict):
            raise ParseError(f"a tool call must be a dict, not {type(c).__name__}")
        fn = c["function"] if isinstance(c.get("function"), dict) else c
        args = _decode_arguments(_blank_arguments(fn.get("arguments", fn.get("input"))))
        if args is None:
            raise ParseError(f"tool call {fn.get('name')!r} has arguments that are not a JSON object")
        calls.append(ToolCall(id=c.get("id"), name=str(fn.get("name") or ""), arguments=args))
    content = m.get("content")
    if m.get("content_parts") and isinstance(content, list):  # a transcript's or trace's
        try:
            content = tuple(ContentPart.from_dict(p) for p in content)
        except ValueError as exc:
            raise ParseError(f"a {role} message's content parts: {exc}") from None
    return Message(role=role, content=content, tool_calls=tuple(calls),
                   tool_call_id=m.get("tool_call_id"), name=m.get("name") or m.get("tool_name"),
                   reasoning_content=m.get("reasoning_content") or m.get("reasoning"),
                   is_error=bool(m.get("is_error")))


def coerce_messages(messages: Any) -> list[Message]:
    if messages is None:
        return []
    if isinstance(messages, (Message, dict, ToolResult)):
        messages = [messages]
    out = [coerce_message(m) for m in messages]
    if len(out) > MAX_MESSAGES:
        from .._errors import InputTooLargeError

        raise InputTooLargeError(f"{len(out)} messages; the limit is {MAX_MESSAGES}")
    return out


# ---------------------------------------------------------------- ids and names

_ALNUM = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def derived_id(seed: str, prefix: str = "", length: int = 24) -> str:
    """A deterministic id: `prefix` + base62 of a hash of `seed`, `length` chars in all."""
    n = int.from_bytes(hashlib.sha256(seed.encode()).digest(), "big")
    chars = []
    for _ in range(max(1, length - len(prefix))):
        n, r = divmod(n, 62)
        chars.append(_ALNUM[r])
    return prefix + "".join(chars)


def wire_name(name: str, prov: Provider, taken: set[str]) -> str:
    """The name a tool goes out under: itself, or a sanitized form when the rules allow."""
    pat = prov.name_pattern
    if pat is None or pat.fullmatch(name):
        return name
    if not prov.sanitize_names:
        raise SchemaError(f"tool name {name!r} is not accepted by {prov.id} "
                          f"(must match {pat.pattern!r})")
    safe = _SAFE_NAME.sub("_", name) or "tool"
    if not re.match(r"[A-Za-z_]", safe):
        safe = "_" + safe
    if len(safe) > 64 or safe in taken:
        safe = safe[:55] + "_" + derived_id(name, "", 8)
    if not pat.fullmatch(safe):
        raise SchemaError(f"tool name {name!r} cannot be made to match {pat.pattern!r} for {prov.id}")
    return safe


# ---------------------------------------------------------------- writing messages

@dataclass(slots=True)
class WireTools:
    """The tools of one request as a provider saw them: wire name -> (original name, tool),
    and how to get a tool's transformed schema (to read its arguments back)."""

    by_wire: dict[str, tuple[str, Any]]
    transform: Callable[[Any], TransformedTool]

    def restore(self, call: ToolCall) -> ToolCall:
        """Wire name -> original name; arguments back in the original schema's shape."""
        hit = self.by_wire.get(call.name)
        if hit is None:
            return call
        original, tool = hit
        return ToolCall(id=call.id, name=original,
                        arguments=self.transform(tool).restore(call.arguments),
                        signature=call.signature)


def _part_view(part: ContentPart) -> dict[str, Any]:
    view = part.to_dict()
    view["source"] = part.source
    if part.data is not None:
        view["data_url"] = f"data:{part.media_type or 'application/octet-stream'};base64,{part.data}"
    if part.media_type:
        view["subtype"] = part.media_type.split("/")[-1].split(";")[0].strip().lower()
    return view


def render_parts(prov: Provider, role: str, parts: tuple[ContentPart, ...], where: str
                 ) -> dict[str, Any]:
    """The writer view of a message with media: {text, parts, media} as the provider's
    `messages.media` writes them; anything it cannot write is refused."""
    media = prov.media
    role_name = "tool result" if role == "tool" else f"{role} message"
    rendered: list[Any] = []
    non_text: list[Any] = []
    texts: list[str] = []
    for j, p in enumerate(parts):
        loc = p.where or f"{where}, part {j}"
        if p.type != "text" and role not in media.roles:
            takes = sorted(media.roles)
            raise UnsupportedContentError(
                f"{loc}: {describe_part(p)} cannot be sent to {prov.id!r} in a {role_name}: "
                + (f"its API takes media only in {' and '.join(r + ' messages' for r in takes)}"
                   if takes else "its API (as toolrules writes it) takes text only")
                + f". Remove the {p.type}, give its content as text, or route this model to "
                f"an upstream whose API takes {p.type} input there", part_type=p.type, where=loc)
        expr = media.kinds.get(p.type)
        value = prune(expr(_part_view(p)), set()) if expr is not None else None
        if value is None or value == "" or value == [] or value == {}:
            if p.type == "text":
                value = {"type": "text", "text": p.text or ""}
            else:
                raise UnsupportedContentError(
                    f"{loc}: {describe_part(p)} cannot be sent to {prov.id!r}: its API has "
                    f"no way to carry it (rules/providers/{prov.id}.yaml messages.media). "
                    f"Remove it, give its content as text, or route this model to an "
                    f"upstream that takes {p.type} input", part_type=p.type, where=loc)
        rendered.append(value)
        if p.type == "text":
            texts.append(p.text or "")
        else:
            non_text.append(value)
    return {"text": "".join(texts), "parts": rendered, "media": non_text}


def _tool_view(m: Message, names: dict[str, str], opaque: set[int], prov: Provider,
               where: str) -> dict[str, Any]:
    content = m.content
    parts = content_parts(content)
    if parts is not None:
        pv = render_parts(prov, "tool", parts, where)
        for v in pv["parts"]:
            opaque.add(id(v))
        name = m.name or names.get(m.tool_call_id or "", "")
        return {"role": "tool", "tool_call_id": m.tool_call_id, "name": name or None,
                "text": pv["text"], "output": pv["text"], "output_json": None,
                "is_error": bool(m.is_error), "error": pv["text"] if m.is_error else None,
                "parts": pv["parts"], "media": pv["media"]}
    text = content if isinstance(content, str) else (
        None if content is None else json.dumps(content, ensure_ascii=False))
    output_json = content if isinstance(content, (dict, list)) else None
    if output_json is not None:
        opaque.add(id(output_json))
    name = m.name or names.get(m.tool_call_id or "", "")
    return {"role": "tool", "tool_call_id": m.tool_call_id, "name": name or None,
            "text": text if text is not None else "", "output": content if content is not None else "",
            "output_json": output_json, "is_error": bool(m.is_error),
            "error": text if m.is_error else None}


def _assistant_view(m: Message, opaque: set[int]) -> dict[str, Any]:
    calls = []
    for i, c in enumerate(m.tool_calls):
        opaque.add(id(c.arguments))
        calls.append({"id": c.id, "name": c.name, "arguments": c.arguments,
                      "arguments_json": c.arguments_json(), "index": i,
                      "signature": c.signature})
    text = content_text(m.content)
    return {"role": "assistant", "text": text,
            "reasoning": m.reasoning_content or None, "tool_calls": calls or None}


class _IdMap:
    """Call ids rewritten consistently for one conversation (calls and their results)."""

    def __init__(self, prov: Provider):
        self.rule = prov.call_ids
        self.pattern = prov._id_pattern
        self.map: dict[str, str] = {}

    def __call__(self, call_id: str | None, seed: str) -> str | None:
        if call_id is None:
            if not self.rule.get("required"):
                return None
            return derived_id(seed, self.rule.get("prefix", "call_"), self.rule.get("length", 24))
        if self.pattern is None or self.pattern.fullmatch(call_id):
            return call_id
        hit = self.map.get(call_id)
        if hit is None:
            hit = self.map[call_id] = derived_id(call_id, self.rule.get("prefix", ""),
                                                 self.rule.get("length", 24))
        return hit


def prepare_history(prov: Provider, messages: list[Message],
                    to_wire: Callable[[str], str]) -> list[Message]:
    """Ids and names the provider accepts: remapped ids, missing ids generated (results
    take the id of the pending call with their name), tool names as sent."""
    ids = _IdMap(prov)
    out: list[Message] = []
    pending: list[tuple[str, str | None]] = []  # (name, id) of calls awaiting results
    for mi, m in enumerate(messages):
        if m.role == "assistant" and m.tool_calls:
            calls = []
            for ci, c in enumerate(m.tool_calls):
                new_id = ids(c.id, f"{mi}:{ci}:{c.name}")
                calls.append(ToolCall(id=new_id, name=to_wire(c.name), arguments=c.arguments,
                                      signature=c.signature))
                pending.append((c.name, new_id))
            m = Message(role=m.role, content=m.content, tool_calls=tuple(calls),
                        tool_call_id=m.tool_call_id, name=m.name,
                        reasoning_content=m.reasoning_content, is_error=m.is_error)
        elif m.role == "tool":
            call_id = m.tool_call_id
            name = m.name
            match = None
            for j, (pname, pid) in enumerate(pending):
                if (call_id is not None and pid == ids(call_id, "")) or \
                        (call_id is None and (name is None or pname == name)):
                    match = j
                    break
            if match is not None:
                pname, pid = pending.pop(match)
                call_id, name = pid, name or pname
            else:
                call_id = ids(call_id, f"{mi}:result:{name}")
            m = Message(role="tool", content=m.content, tool_call_id=call_id,
                        name=to_wire(name) if name else None, is_error=m.is_error)
        out.append(m)
    return out


def _fill(template: str, types: list[str], call_id: str | None) -> str:
    kinds = " and ".join(dict.fromkeys(t + "s" if types.count(t) > 1 else t for t in types))
    return template.replace("{types}", kinds).replace("{call_id}", call_id or "?")


def move_result_media(prov: Provider, messages: list[Message]) -> list[Message]:
    """Media in tool results the provider's tool messages cannot carry move to a message
    of `media.move_results.to` right after the run of results (the rule's notes say so
    on both sides); without that rule they stay, and are refused when written."""
    rule = prov.media.move_results
    if not rule or "tool" in prov.media.roles or not any(
            m.role == "tool" and content_parts(m.content) for m in messages):
        return messages
    out: list[Message] = []
    carried: list[ContentPart] = []
    for m in messages:
        if carried and m.role != "tool":
            out.append(Message(role=rule["to"], content=tuple(carried)))
            carried = []
        parts = content_parts(m.content) if m.role == "tool" else None
        if parts is None:
            out.append(m)
            continue
        media = [p for p in parts if p.type != "text"]
        types = [p.type for p in media]
        text = "".join(p.text or "" for p in parts if p.type == "text")
        note = _fill(rule.get("note") or "", types, m.tool_call_id)
        out.append(dataclasses.replace(m, content="\n\n".join(x for x in (text, note) if x)))
        lead = _fill(rule.get("lead") or "", types, m.tool_call_id)
        if lead:
            carried.append(ContentPart("text", text=lead))
        carried.extend(media)
    if carried:
        out.append(Message(role=rule["to"], content=tuple(carried)))
    return out


def write_messages(prov: Provider, messages: list[Message], extra_transforms: Sequence[str] = ()
                   ) -> list[Any]:
    """UTP messages (already prepared) -> the wire message list."""
    names: dict[str, str] = {}
    out: list[Any] = []
    messages = move_result_media(prov, messages)
    for mi, m in enumerate(messages):
        opaque: set[int] = set()
        where = f"messages[{mi}]"
        if m.role == "assistant":
            for c in m.tool_calls:
                if c.id:
                    names[c.id] = c.name
            parts = content_parts(m.content)
            if parts is not None:  # no API takes media from the assistant: refused
                render_parts(prov, "assistant", parts, where)
            view = _assistant_view(m, opaque)
        elif m.role == "tool":
            view = _tool_view(m, names, opaque, prov, where)
        else:
            parts = content_parts(m.content)
            if parts is not None:
                view = {"role": m.role, **render_parts(prov, m.role, parts, where)}
                for v in view["parts"]:
                    opaque.add(id(v))
            else:
                view = {"role": m.role, "text": content_text(m.content) or "",
                        "parts": None, "media": None}
        writer = prov.writers.get(m.role)
        if writer is None:
            raise CapabilityError(f"provider {prov.id!r} has no way to write a {m.role!r} message")
        wire = prune(writer(view), opaque)
        items = wire if isinstance(wire, list) else [wire]
        for item in items:
            if item in (None, {}, []):
                continue
            if prov.merge_field and out and isinstance(item, dict) and isinstance(out[-1], dict) \
                    and out[-1].get("role") == item.get("role"):
                out[-1] = _merged(prov, out[-1], item)
            else:
                out.append(item)
    for name in (*prov.message_transforms, *extra_transforms):
        t = MESSAGE_TRANSFORMS.get(name)
        if t is None or t.where != "messages":
            raise UnknownRuleError("message transform", name,
                                   [k for k, v in MESSAGE_TRANSFORMS.items() if v.where == "messages"])
        out = [t.run(m) for m in out]
    return out


def _merged(prov: Provider, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    key = prov.merge_field or "content"

    def as_list(v: Any) -> list[Any]:
        if isinstance(v, list):
            return v
        if v is None:
            return []
        return [prov.text_block(v) if prov.text_block else v]

    out = dict(a)
    out[key] = [*as_list(a.get(key)), *as_list(b.get(key))]
    return out


# ---------------------------------------------------------------- reading messages

def _join(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                 for v in value if v is not None]
        return "".join(parts) if parts else None
    return json.dumps(value, ensure_ascii=False)


def _listify(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


@dataclass(slots=True)
class ReadMessage:
    role: str | None
    text: str | None
    reasoning: str | None
    calls: list[tuple[Any, Any, Any, Any]]  # raw id, name, arguments, signature
    results: list[dict[str, Any]]


def read_wire_message(prov: Provider, wire: Any) -> ReadMessage:
    r = prov.reader
    role = r.role(wire) if r.role else None
    if isinstance(role, str):
        role = r.roles.get(role, role)
    calls = []
    if r.calls:
        for c in _listify(r.calls(wire)):
            calls.append((r.call["id"](c) if "id" in r.call else None,
                          r.call["name"](c) if "name" in r.call else None,
                          r.call["arguments"](c) if "arguments" in r.call else None,
                          r.call["signature"](c) if "signature" in r.call else None))
    results = []
    if r.results:
        for res in _listify(r.results(wire)):
            results.append({k: e(res) for k, e in r.result.items()})
    return ReadMessage(role=role if isinstance(role, str) else None,
                       text=_join(r.text(wire)) if r.text else None,
                       reasoning=_join(r.reasoning(wire)) if r.reasoning else None,
                       calls=calls, results=results)


def decode_call(prov: Provider, raw_id: Any, name: Any, args: Any,
                warnings: list[str], signature: Any = None) -> ToolCall | None:
    """A wire call -> ToolCall (call transforms applied), or None with a warning.
    `signature`: the provider's opaque token for the call, kept when it is text."""
    for t in prov.call_transforms:
        args = MESSAGE_TRANSFORMS[t].run(args)
    decoded = _decode_arguments(args) if args is not None else {}
    if decoded is None:
        warnings.append(f"dropped call {name!r}: its arguments are not a complete JSON object")
        return None
    if not isinstance(name, str) or not name:
        warnings.append("dropped a call without a tool name")
        return None
    return ToolCall(id=raw_id if isinstance(raw_id, str) and raw_id else None, name=name,
                    arguments=decoded,
                    signature=signature if isinstance(signature, str) and signature else None)


_PART_FIELDS = ("text", "media_type", "data", "url", "file_id", "name")


def _block_type(block: Any) -> str:
    if isinstance(block, dict):
        kind = block.get("type")
        return kind if isinstance(kind, str) else "untyped"
    return type(block).__name__


def read_blocks(prov: Provider, blocks: Any, where: str) -> list[ContentPart]:
    """Content blocks -> UTP parts by the reader's `parts` rules. A block that no rule
    reads, or that a rule refuses, refuses the request: nothing is dropped unseen."""
    rules = prov.reader.parts
    out: list[ContentPart] = []
    for j, block in enumerate(_listify(blocks)):
        here = f"{where}, block {j}"
        kind = _block_type(block)
        rule = next((r for r in rules if not _is_false(r.when(block))), None)
        if rule is None:
            raise UnsupportedContentError(
                f"{here}: a content block of type {kind!r} cannot be carried: toolrules has no "
                f"rule reading it from the {prov.id} format (rules/providers/{prov.id}.yaml "
                "messages.read.parts). Remove the block, or give its content as text",
                part_type=kind, where=here)
        if rule.refuse:
            raise UnsupportedContentError(f"{here}: a {kind!r} block cannot be carried: "
                                          f"{rule.refuse}", part_type=kind, where=here)
        if rule.part is None:  # `skip`: read by another field, or a declared loss
            continue
        value = rule.part(block)
        if not isinstance(value, dict) or not isinstance(value.get("type"), str):
            raise ParseError(f"{here}: the reading rule for {kind!r} blocks gave "
                             f"{json.dumps(value, default=str)[:100]}, not a part")
        fields = {}
        for name in _PART_FIELDS:
            v = value.get(name)
            if v is not None and not isinstance(v, str):
                raise ParseError(f"{here}: the {kind!r} block's {name} is not a string")
            fields[name] = v
        try:
            out.append(ContentPart(value["type"], where=here, **fields))
        except ValueError as exc:
            raise ParseError(f"{here}: {exc}") from None
    return out


def refuse_tools(prov: Provider, entries: Any,
                 omitted: dict[str, str] | None = None) -> list[Any] | None:
    """The request's tool list, checked before it is read: an entry a `tools.read.refuse`
    rule matches (a server or built-in tool, a tool whose schema the provider defines)
    refuses the request, naming the entry. An entry an `omit` rule matches is left out
    when the caller keeps a record (`omitted`: label -> reason, e.g. "tools[2] (type
    'web_search')"), and refuses the request otherwise: never left out unseen. Returns
    the entries still offered, or None when nothing was left out."""
    if entries is None or not prov.tools_refuse:
        return None
    if not isinstance(entries, list):
        raise ParseError(f"a {prov.id} request's {prov.tools_path!r} is a list, not "
                         f"{type(entries).__name__}")
    kept: list[Any] = []
    for i, entry in enumerate(entries):
        rule = next((r for r in prov.tools_refuse if not _is_false(r.when(entry))), None)
        if rule is None:
            kept.append(entry)
            continue
        kind = _block_type(entry)
        here = f"{prov.tools_path}[{i}]"
        if kind != "untyped" or not isinstance(entry, dict):
            label = f"type {kind!r}"
        else:  # an untyped entry (Gemini's {googleSearch: {}}) is known by its fields
            label = "no type, fields " + ", ".join(map(repr, sorted(entry)[:6]))
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str):
            label += f", name {name!r}"
        if rule.omit and omitted is not None:
            omitted[f"{here} ({label})"] = rule.reason
            continue
        raise UnsupportedContentError(f"{here} ({label}): this tool cannot be carried: "
                                      f"{rule.reason}", part_type=kind, where=here)
    return kept if len(kept) < len(entries) else None


def _read_content(parts: list[ContentPart], text: Any) -> Any:
    """Parts when there are media among them, else the text as before."""
    if any(p.type != "text" for p in parts):
        return tuple(parts)
    return text


def read_history(prov: Provider, wires: list[Any]) -> list[Message]:
    """Wire request messages -> UTP messages (assistant items merged as one turn)."""
    out: list[Message] = []
    r = prov.reader
    for i, wire in enumerate(wires):
        where = f"{prov.messages_path}[{i}]"
        if r.refuse is not None:
            reason = r.refuse(wire)
            if not _is_false(reason):
                raise UnsupportedContentError(f"{where}: {reason}", where=where)
        rm = read_wire_message(prov, wire)
        warnings: list[str] = []
        for k, res in enumerate(rm.results):
            content = res.get("content")
            blocks = res.get("blocks")
            rparts = read_blocks(prov, blocks, f"{where}, tool result {k}") \
                if isinstance(blocks, list) and r.parts else []
            if rparts:
                content = _read_content(rparts, "".join(p.text or "" for p in rparts))
            elif isinstance(content, list):
                content = _join(content)
            out.append(Message(role="tool", content=content, tool_call_id=res.get("call_id"),
                               name=res.get("name"), is_error=bool(res.get("is_error"))))
        if rm.results and rm.role == "tool":
            continue
        parts = read_blocks(prov, r.blocks(wire), where) if r.blocks is not None else []
        calls = []
        for raw_id, name, args, sig in rm.calls:
            call = decode_call(prov, raw_id, name, args, warnings, sig)
            if call is None:
                raise ParseError(f"request message holds an unreadable tool call: {warnings[-1]}")
            calls.append(call)
        role = rm.role or "user"
        content = _read_content(parts, rm.text)
        if rm.results and not content and not calls:
            continue
        msg = Message(role=role, content=content, tool_calls=tuple(calls),
                      reasoning_content=rm.reasoning)
        if role == "assistant" and out and out[-1].role == "assistant" and (
                not isinstance(msg.content, tuple) and not isinstance(out[-1].content, tuple)) and (
                not msg.content or (not out[-1].content and not out[-1].tool_calls)):
            prev = out[-1]
            out[-1] = Message(role="assistant",
                              content=(prev.content or "") + (msg.content or "") or None,
                              tool_calls=prev.tool_calls + msg.tool_calls,
                              reasoning_content=((prev.reasoning_content or "")
                                                 + (msg.reasoning_content or "")) or None)
            continue
        out.append(msg)
    return out


# ---------------------------------------------------------------- tool choice

def choice_value(prov: Provider, kind: str, name: str | None, names: list[str]) -> tuple[Any, ChoiceEntry]:
    entry = prov.choices.get(kind)
    if entry is None:
        entry = ChoiceEntry(None)
    if entry.unsupported:
        raise CapabilityError(f"provider {prov.id!r} cannot express tool_choice {kind!r}: "
                              f"{entry.unsupported}")
    value = entry.send({"name": name, "names": names}) if entry.send else None
    return (prune(value, set()) if value is not None else None), entry


def read_choice(prov: Provider, value: Any) -> Any:
    """A wire tool_choice -> 'auto' | 'none' | 'required' | {type: function, function: {name}}."""
    if value is None:
        return None
    for kind in ("auto", "none", "required"):
        entry = prov.choices.get(kind)
        if entry and entry.send and not entry.unsupported and entry.tools == "all" and \
                prune(entry.send({"name": None, "names": []}), set()) == value:
            return kind
    named = prov.choices.get("named")
    if named and named.send:
        pattern = prune(named.send({"name": _NAME_SENTINEL, "names": [_NAME_SENTINEL]}), set())
        found = _capture(pattern, value)
        if found:
            return {"type": "function", "function": {"name": found}}
    for kind in ("auto", "none", "required"):  # choices that also restrict the tools
        entry = prov.choices.get(kind)
        if entry and entry.send and prune(entry.send({"name": None, "names": []}), set()) == value:
            return kind
    raise ParseError(f"provider {prov.id!r}: cannot read tool_choice {value!r}")


def _capture(pattern: Any, value: Any) -> str | None:
    if pattern == _NAME_SENTINEL:
        return value if isinstance(value, str) else None
    if isinstance(pattern, dict) and isinstance(value, dict) and set(pattern) == set(value):
        found = None
        for k, v in pattern.items():
            got = _capture(v, value[k])
            if got is None and v != value[k]:
                return None
            found = found or got
        return found
    if isinstance(pattern, list) and isinstance(value, list) and len(pattern) == len(value):
        found = None
        for p, v in zip(pattern, value):
            got = _capture(p, v)
            if got is None and p != v:
                return None
            found = found or got
        return found
    return None
