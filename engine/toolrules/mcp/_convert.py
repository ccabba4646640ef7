"""MCP values <-> toolrules values, both ways, on plain JSON (the protocol's wire shapes,
camelCase) so that no SDK is needed to read them:

- a server's tool listing -> `McpTool`s: registry names namespaced by server
  (rules/tool_selection.yaml), schemas normalized (rules/mcp.yaml `schema`), trust level
  and read/write class from the annotations (rules/mcp.yaml `annotations`) or the server
  rule's `tools:` entries;
- a tool result (text, images, audio, embedded resources, resource links, structured
  content, errors) -> a ToolResult output, nothing dropped;
- a ToolResult -> a result for an MCP client (`toolrules mcp serve`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import McpError, SchemaError
from .._types import ContentPart, Tool, ToolResult
from ..calls._namespacing import namespace_tools
from ..calls._policy import provider_name_patterns
from ..providers._transforms import TransformedTool
from ..runtime._context import ToolFailure
from ._rules import McpRules, McpServerSpec

__all__ = ["McpTool", "mcp_tools", "result_output", "served_result"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class McpTool:
    """A server's tool as toolrules sees it: its registry name and definition, the trust
    level and class it runs at (and which rule decided), the arguments the jail checks."""

    server: str
    remote: str
    """The tool's name on the server (what a call sends)."""
    tool: Tool
    """Namespaced name, description, normalized schema: what the model is offered."""
    tier: str
    kind: str
    decided_by: str
    annotations: Mapping[str, Any] = field(default_factory=dict)
    paths: tuple[str, ...] = ()
    hidden: bool = False
    requires_confirmation: bool = False
    timeout: float | None = None
    transformed: TransformedTool | None = field(default=None, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.tool.name

    def restore(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Arguments as the model sent them (normalized schema) -> as the server takes them."""
        return self.transformed.restore(arguments) if self.transformed is not None else arguments

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "server": self.server, "tool": self.remote,
                               "tier": self.tier, "kind": self.kind,
                               "decided_by": self.decided_by}
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        for key in ("paths", "hidden", "requires_confirmation", "timeout"):
            value = getattr(self, key)
            if value:
                out[key] = list(value) if isinstance(value, tuple) else value
        out["description"] = self.tool.description
        out["parameters"] = self.tool.parameters
        return out


def _registry_name(wanted: str, patterns: Sequence[tuple[str, re.Pattern[str]]],
                   taken: set[str]) -> str | None:
    """`wanted` when every provider accepts it and it is free, else a shortened form with a
    hash of the full name; None when nothing fits."""
    def fits(n: str) -> bool:
        return n not in taken and all(p.fullmatch(n) for _, p in patterns)

    if fits(wanted):
        return wanted
    digest = hashlib.sha256(wanted.encode()).hexdigest()[:8]
    short = f"{wanted[:55]}_{digest}"
    return short if fits(short) else None


def mcp_tools(spec: McpServerSpec, listing: Sequence[Mapping[str, Any]], rules: McpRules, *,
              engine: Any = None, taken: set[str] | None = None) -> list[McpTool]:
    """The registry tools of a server's listing (each entry the protocol's Tool object:
    name, description, inputSchema, annotations). Every problem - a malformed schema, a
    name no provider accepts, two tools under one name, an override naming a missing
    argument - is collected, and raised together as one McpError naming server and tools."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError as JsonSchemaError

    taken = set(taken or ())
    patterns = provider_name_patterns(engine)
    problems: list[str] = []
    out: list[McpTool] = []
    if len(listing) > rules.max_tools:
        raise McpError(f"MCP server {spec.name!r} lists {len(listing)} tools; at most "
                       f"{rules.max_tools} are taken (rules/mcp.yaml client.max_tools). Use "
                       "`include:` in its rule to pick the ones you need", server=spec.name)
    for entry in listing:
        remote = entry.get("name")
        if not isinstance(remote, str) or not remote:
            problems.append(f"a tool without a name: {json.dumps(entry, default=str)[:120]}")
            continue
        if spec.include is not None and remote not in spec.include:
            continue
        if remote in spec.exclude:
            continue
        where = f"tool {remote!r}"
        override = spec.tools.get(remote)
        description = (override.description if override and override.description else
                       str(entry.get("description") or entry.get("title") or ""))
        raw = entry.get("inputSchema")
        if raw is None:
            raw = {"type": "object", "properties": {}}
        if not isinstance(raw, Mapping):
            problems.append(f"{where}: inputSchema is a {type(raw).__name__}, not a JSON "
                            "Schema object")
            continue
        if raw.get("type", "object") != "object":
            problems.append(f"{where}: inputSchema has type {raw.get('type')!r}; MCP tool "
                            "arguments are an object (type: object)")
            continue
        schema = {"type": "object", **json.loads(json.dumps(raw))}
        try:
            transformed = rules.pipeline.run(remote, description, schema)
        except SchemaError as exc:
            problems.append(f"{where}: {exc}")
            continue
        params = dict(transformed.parameters or {"type": "object"})
        params.setdefault("properties", {})
        try:
            Draft202012Validator.check_schema(params)
        except JsonSchemaError as exc:
            at = "/".join(str(p) for p in exc.path) or "(root)"
            problems.append(f"{where}: inputSchema is not a valid JSON Schema at {at}: "
                            f"{exc.message}")
            continue
        if not isinstance(params.get("properties"), Mapping):
            problems.append(f"{where}: inputSchema properties is not an object")
            continue
        safe = _UNSAFE.sub("_", remote)
        (named,) = namespace_tools([Tool(safe, transformed.description, params)],
                                   spec.namespace, engine=engine)
        name = _registry_name(named.name, patterns, taken)
        if name is None:
            clash = " (already taken)" if named.name in taken else ""
            problems.append(f"{where}: its registry name {named.name!r}{clash} cannot be made "
                            "to fit every provider's tool-name rules; set a shorter "
                            "`namespace:` or `exclude:` the tool")
            continue
        taken.add(name)
        annotations = entry.get("annotations") if isinstance(entry.get("annotations"),
                                                             Mapping) else {}
        hints = {k: v for k, v in (annotations or {}).items() if k.endswith("Hint")}
        cls = rules.classify(hints)
        tier, kind, decided = cls.tier, cls.kind, f"annotations: {cls.name}"
        paths: tuple[str, ...] = ()
        hidden = confirm = False
        timeout = spec.timeout
        if override is not None:
            if override.tier or override.kind:
                decided = f"{spec.source or spec.name}: tools.{remote}"
            tier = override.tier or tier
            kind = override.kind or kind
            paths, hidden = override.paths, override.hidden
            confirm = override.requires_confirmation
            timeout = override.timeout if override.timeout is not None else timeout
            props = params.get("properties") or {}
            missing = [p for p in paths if p not in props]
            if missing:
                problems.append(f"{where}: tools.{remote}.paths names {', '.join(missing)}, "
                                f"which {'is' if len(missing) == 1 else 'are'} not among its "
                                f"arguments ({', '.join(props) or 'none'})")
                continue
        out.append(McpTool(server=spec.name, remote=remote,
                           tool=Tool(name, named.description, params), tier=tier, kind=kind,
                           decided_by=decided, annotations=hints, paths=tuple(paths),
                           hidden=hidden, requires_confirmation=confirm, timeout=timeout,
                           transformed=transformed))
    if problems:
        lines = "\n  ".join(problems)
        raise McpError(f"MCP server {spec.name!r} ({spec.source or 'declared'}) lists tools "
                       f"toolrules cannot offer:\n  {lines}", server=spec.name)
    return out


# ---------------------------------------------------------------- results: MCP -> toolrules

def _part(block: Mapping[str, Any]) -> ContentPart:
    """One content block as a ContentPart (unknown kinds: their JSON as text)."""
    kind = block.get("type")
    if kind == "text":
        return ContentPart("text", text=str(block.get("text") or ""))
    if kind in ("image", "audio") and isinstance(block.get("data"), str):
        return ContentPart(str(kind), media_type=block.get("mimeType"), data=block["data"])
    if kind == "resource" and isinstance(block.get("resource"), Mapping):
        res = block["resource"]
        uri, mime = res.get("uri"), res.get("mimeType")
        if isinstance(res.get("text"), str):
            return ContentPart("document", text=res["text"], media_type=mime, name=uri)
        if isinstance(res.get("blob"), str):
            medium = "image" if str(mime or "").startswith("image/") else (
                "audio" if str(mime or "").startswith("audio/") else "document")
            return ContentPart(medium, data=res["blob"], media_type=mime, name=uri)
    if kind == "resource_link" and isinstance(block.get("uri"), str):
        bits = [f"Resource link: {block.get('name') or block['uri']} <{block['uri']}>"]
        if block.get("mimeType"):
            bits.append(f"({block['mimeType']})")
        if block.get("description"):
            bits.append(f"- {block['description']}")
        return ContentPart("text", text=" ".join(bits))
    return ContentPart("text", text=json.dumps(dict(block), ensure_ascii=False, default=str))


def _leaves(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _leaves(v)]
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    return []


def _repeats(text: str | None, structured: Any) -> bool:
    """Whether a text block only repeats the structured content: its JSON, or one of its
    text values (a server that renders `{"content": TEXT}` as TEXT)."""
    try:
        if json.loads(text or "") == structured:
            return True
    except ValueError:
        pass
    return text is not None and text.strip() != "" and text in _leaves(structured)


def result_output(server: str, tool: str, result: Mapping[str, Any]) -> Any:
    """A CallToolResult (wire shape) as a ToolResult output: the text (several text blocks
    joined by newlines); the structured content when the text only repeats it (its JSON,
    or one of its text values); else a
    tuple of ContentParts (text, images, audio, documents) with the structured content as
    a JSON text part. `isError` raises ToolFailure(TOOL_ERROR) with the server's text."""
    blocks = result.get("content") or []
    parts = [_part(b) for b in blocks if isinstance(b, Mapping)]
    structured = result.get("structuredContent")
    if result.get("isError"):
        text = "\n".join(p.text or "" for p in parts if p.type == "text").strip()
        if not text and structured is not None:
            text = json.dumps(structured, ensure_ascii=False)
        raise ToolFailure("TOOL_ERROR", f"MCP server {server!r}, tool {tool!r}: "
                          f"{text or 'failed (no message)'}", server=server, mcp_tool=tool)
    if structured is not None:
        parts = [p for p in parts if not (p.type == "text" and _repeats(p.text, structured))]
        if not parts:
            return structured
        parts.append(ContentPart("text", text=json.dumps(structured, ensure_ascii=False)))
    if all(p.type == "text" for p in parts):
        return "\n".join(p.text or "" for p in parts)
    return tuple(parts)


# ---------------------------------------------------------------- results: toolrules -> MCP

def _block(part: ContentPart) -> dict[str, Any]:
    if part.type == "text" or (part.source == "text" and part.type != "document"):
        return {"type": "text", "text": part.text or ""}
    if part.type in ("image", "audio") and part.data is not None:
        return {"type": part.type, "data": part.data,
                "mimeType": part.media_type or "application/octet-stream"}
    uri = part.name or part.url or f"toolrules://part/{part.type}"
    resource: dict[str, Any] = {"uri": uri}
    if part.media_type:
        resource["mimeType"] = part.media_type
    if part.data is not None:
        resource["blob"] = part.data
    elif part.text is not None:
        resource["text"] = part.text
    else:
        return {"type": "resource_link", "uri": part.url or uri, "name": part.name or uri}
    return {"type": "resource", "resource": resource}


def served_result(result: ToolResult, envelope: Mapping[str, Any] | None = None
                  ) -> dict[str, Any]:
    """A ToolResult as an MCP CallToolResult (wire shape): text, media blocks, structured
    content for JSON objects; a failure is `isError` with "CODE: message" as text and the
    envelope error (code, message, rule, hint) as structured content."""
    if not result.ok:
        err = (envelope or {}).get("errors", [{}])[0] if envelope else {}
        code = err.get("code") or "ERROR"
        return {"content": [{"type": "text", "text": f"{code}: {result.error}"}],
                "structuredContent": {"ok": False, "error": err}, "isError": True}
    out = result.output
    if isinstance(out, tuple) and out and all(isinstance(p, ContentPart) for p in out):
        return {"content": [_block(p) for p in out], "isError": False}
    if isinstance(out, str):
        return {"content": [{"type": "text", "text": out}], "isError": False}
    text = json.dumps(out, ensure_ascii=False, default=str)
    body: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    if isinstance(out, Mapping):
        body["structuredContent"] = json.loads(text)
    return body
