"""The neutral tool-call values (UTP in the code): the one internal representation between
every wire format.

Values are frozen dataclasses. Nothing here knows a provider or a model; adapters in
rules/ translate to and from these shapes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from enum import StrEnum
from typing import Any, Protocol

__all__ = [
    "PART_TYPES",
    "Capability",
    "ContentPart",
    "Message",
    "ModelSpec",
    "ParsedResponse",
    "StreamChunk",
    "StreamChunkType",
    "Tool",
    "ToolCall",
    "ToolErrorInfo",
    "ToolResult",
    "coerce_tool",
    "coerce_tools",
]


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the model may call: a name, a description and a JSON Schema for arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI `tools` entry for this tool (the lingua franca of tool lists)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True, init=False)
class ToolCall:
    """A call the model asked for. `arguments` is always a JSON object (a dict).

    `signature` is an opaque token the provider issued with the call (Gemini's
    `thoughtSignature`) that must go back with the same call in later turns; it takes
    no part in comparisons."""

    id: str | None
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    signature: str | None = field(default=None, compare=False, repr=False)

    # Parsers build these in their hot path: the fields go straight into the instance
    # dict instead of a frozen __setattr__ each (about three times as fast; a keyword
    # dict.update is slower than item stores); instances stay frozen.
    def __init__(self, id: str | None, name: str, arguments: dict[str, Any] | None = None,
                 signature: str | None = None):
        d = self.__dict__
        d["id"] = id
        d["name"] = name
        d["arguments"] = {} if arguments is None else arguments
        d["signature"] = signature

    def arguments_json(self) -> str:
        """The arguments as compact JSON text, unicode unescaped."""
        return json.dumps(self.arguments, ensure_ascii=False)



class ToolErrorInfo(Protocol):
    """A structured tool failure as a `ToolResult` carries it; `toolrules.ToolError`
    (calls/) is the one the engine makes. This module sits below calls/, so it names the
    error by what it offers."""

    @property
    def code(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def recoverable(self) -> bool: ...
    @property
    def retry_strategy(self) -> str | None: ...
    @property
    def suggested_fix(self) -> str | None: ...
    @property
    def details(self) -> dict[str, Any] | None: ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The outcome of executing a call: `output` on success, `error` text on failure.

    `tool_error` is the structured failure (code, recoverable, suggested fix; its
    ``details["error"]`` is the envelope code such as PERMISSION_DENIED) when an executor
    produced the result; `error` stays its message text.
    """

    call_id: str | None
    name: str
    output: Any = None
    error: str | None = None
    tool_error: ToolErrorInfo | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


PART_TYPES = ("text", "image", "audio", "document")
"""The kinds of content a message can carry (`ContentPart.type`)."""


@dataclass(frozen=True, slots=True)
class ContentPart:
    """One piece of a message's content when it is more than text: text, an image, audio
    or a document, in the order the sender gave them.

    A medium comes as base64 `data` with its `media_type`, as a `url`, or as a `file_id`
    (a file uploaded to the API it came from); a plain-text document has `text`. `name`:
    a file name or title. `where`: the place in a client's request a reader found the part
    (``messages[2], block 1``), for errors; it takes no part in equality.
    """

    type: str
    text: str | None = None
    media_type: str | None = None
    data: str | None = None
    url: str | None = None
    file_id: str | None = None
    name: str | None = None
    where: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.type not in PART_TYPES:
            raise ValueError(f"a content part's type is one of {', '.join(PART_TYPES)}, "
                             f"not {self.type!r}")
        url = self.url
        # A data: URL (RFC 2397) is base64 data in disguise: keep one form, so every
        # writer sees `data` + `media_type` whichever way the sender wrote it.
        if url is not None and self.data is None and url[:5].lower() == "data:":
            head, sep, payload = url[5:].partition(",")
            if sep and head.lower().endswith(";base64"):
                object.__setattr__(self, "data", payload)
                object.__setattr__(self, "media_type", head[:-7] or self.media_type)
                object.__setattr__(self, "url", None)

    @property
    def source(self) -> str:
        """How the content travels: text, data, url or file_id."""
        if self.type == "text" or (self.text is not None and self.data is None
                                   and self.url is None and self.file_id is None):
            return "text"
        if self.data is not None:
            return "data"
        return "url" if self.url is not None else "file_id"

    def to_dict(self) -> dict[str, Any]:
        """The set fields as a dict (what rule expressions and traces see)."""
        out: dict[str, Any] = {"type": self.type}
        for name in ("text", "media_type", "data", "url", "file_id", "name"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def from_dict(cls, data: Any) -> ContentPart:
        """The part `to_dict` gave (a bare string: a text part). ValueError otherwise."""
        if isinstance(data, str):
            return cls("text", text=data)
        if not isinstance(data, Mapping) or not isinstance(data.get("type"), str):
            raise ValueError("a content part is a mapping with a `type`")
        given = {k: data[k] for k in ("text", "media_type", "data", "url", "file_id", "name")
                 if data.get(k) is not None}
        bad = [k for k, v in given.items() if not isinstance(v, str)]
        if bad:
            raise ValueError(f"a content part's {bad[0]} is a string")
        return cls(data["type"], **given)


@dataclass(frozen=True, slots=True)
class Message:
    """One conversation turn. `tool_calls` on assistant turns, `tool_call_id` on tool results.

    `content` is text (a string), or - when the turn carries images, audio or documents -
    a tuple of `ContentPart`s; a tool result's content may also be any JSON value.
    """

    role: str
    content: Any = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning_content: str | None = None
    is_error: bool = False


@dataclass(frozen=True, init=False)
class ParsedResponse:
    """What a model said: text, reasoning, calls; plus what the parser had to repair.

    `repairs` names each repair applied to malformed output (e.g. ``trailing-commas``);
    `warnings` names things a caller may want to know that were not repairs (an unknown
    tool name, an incomplete call dropped because the output was cut off).
    """

    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    repairs: tuple[str, ...] = ()
    raw: Any = None
    warnings: tuple[str, ...] = ()

    def __init__(self, content: str | None = None, reasoning_content: str | None = None,
                 tool_calls: tuple[ToolCall, ...] = (), finish_reason: str | None = None,
                 repairs: tuple[str, ...] = (), raw: Any = None,
                 warnings: tuple[str, ...] = ()):  # straight into the dict: see ToolCall
        d = self.__dict__
        d["content"] = content
        d["reasoning_content"] = reasoning_content
        d["tool_calls"] = tool_calls
        d["finish_reason"] = finish_reason
        d["repairs"] = repairs
        d["raw"] = raw
        d["warnings"] = warnings

    def _with_raw(self, raw: Any) -> ParsedResponse:
        """This answer with `raw` set: `dataclasses.replace` without its per-call field
        walk (a stream's answer gets its events so, once per request)."""
        new = object.__new__(ParsedResponse)
        new.__dict__.update(self.__dict__)
        new.__dict__["raw"] = raw
        return new


class StreamChunkType(StrEnum):
    """Kinds of typed stream chunks (see docs/concepts/streaming.md, the streaming contract)."""

    TEXT = "text"
    REASONING = "reasoning"
    TOOL_START = "tool_start"
    TOOL_ARGS = "tool_args"
    TOOL_END = "tool_end"
    TOOL_PROGRESS = "tool_progress"


@dataclass(frozen=True, init=False)
class StreamChunk:
    """A typed streaming event.

    `text`/`reasoning` carry `content`; `tool_start`/`tool_args`/`tool_end` describe a
    committed (complete) call at position `index`; `tool_progress` shows a call still
    being generated (not part of the committed result).
    """

    type: StreamChunkType
    content: str | None = None
    index: int | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    args_delta: str | None = None
    arguments: dict[str, Any] | None = None

    def __init__(self, type: StreamChunkType, content: str | None = None,
                 index: int | None = None, tool_call_id: str | None = None,
                 tool_name: str | None = None, args_delta: str | None = None,
                 arguments: dict[str, Any] | None = None):  # straight into the dict: see ToolCall
        d = self.__dict__
        d["type"] = type
        d["content"] = content
        d["index"] = index
        d["tool_call_id"] = tool_call_id
        d["tool_name"] = tool_name
        d["args_delta"] = args_delta
        d["arguments"] = arguments

    @property
    def is_complete(self) -> bool:
        return self.type is StreamChunkType.TOOL_END


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model id taken apart: family, version tuple, variant, sizes and where it runs.

    `size` and `active_size` are parameter counts (``70_000_000_000`` for 70B; a MoE
    ``8x7b`` is 56B, ``30B-A3B`` has active size 3B). `custom` marks fine-tunes and ids
    under an unknown organisation: they inherit their base family's capabilities.
    `known` is False when no family rule matched.
    """

    family: str
    version: tuple[int, ...] = ()
    variant: str | None = None
    size: int | None = None
    provider: str | None = None
    org: str | None = None
    custom: bool = False
    date: str | None = None
    active_size: int | None = None
    known: bool = True
    model_id: str = ""


@dataclass(frozen=True, slots=True)
class Capability:
    """What a model can do with tools. Every field documents its default.

    Defaults are the conservative answer for an unknown model: no native tools, JSON
    emulation. Family rules set what differs.
    """

    native_tools: bool = False
    """Structured tool calling through the provider API. Default False."""
    parallel_tools: bool = False
    """Several calls in one turn. Default False."""
    tool_streaming: bool = False
    """Tool-call arguments stream as they are generated. Default False."""
    json_mode: bool = False
    """A reliable JSON output mode. Default False."""
    reasoning: bool = False
    """Extended thinking (a reasoning channel). Default False."""
    max_output_tokens: int | None = None
    """Output token limit; None when unknown."""
    context_window: int | None = None
    """Context window in tokens; None when unknown."""
    needs_tool_schema_strict: bool = False
    """Tool schemas must be strict (closed objects). Default False."""
    tool_result_in_user_message: bool = False
    """Tool results travel inside a user message. Default False."""
    supports_tool_choice_required: bool = True
    """tool_choice "required" is accepted. Default True."""
    emulation_style: str = "json"
    """Prompt style when tools are emulated: json, compact, parallel, xml, markdown or
    dialect (the model's own trained format). Default json."""
    dialect: str | None = None
    """Raw-text tool-call format the model writes (a rules/dialects id). Default None."""
    supports_forced_tool_choice: bool = True
    """A specific tool can be forced. Default True."""
    tool_calling_reliable: bool = False
    """Reliable enough for enforced tool use (`tool_use_mode="enforced"`). Default False."""
    schema_strategy: str | None = None
    """Schema simplification strategy for weak models (rules/schema_strategies.yaml). Default None."""
    prompt_guidance: bool = False
    """Add tool-calling guidance with examples to the prompt. Default False."""
    validate_retry: bool = False
    """Validate calls and retry with feedback. Default False."""
    text_fallback: bool = False
    """Parse tool intent from plain text as a last resort. Default False."""
    quirks: tuple[str, ...] = ()
    """Named repairs this model needs when its output is parsed. Default none."""
    decline_calls: tuple[str, ...] = ()
    """Tool names this model writes to mean "no call" (e.g. no_function): read as no call,
    with a warning. Default none."""
    input_media: tuple[str, ...] | None = None
    """What the model takes besides text (image, audio, document); () for text only. Default
    None: unknown (such parts go upstream, which decides)."""
    chat_template: str | None = None
    """The model's turn format for raw-text inference: a template under templates/chat/
    (Hugging Face chat-template variables: `messages`, `add_generation_prompt`,
    `bos_token`), for weights that carry none (the embedded local model). Default None."""

    # Turn constraints: what the model's own chat template accepts and renders, where a
    # server renders it (llama-server --jinja, vLLM, LM Studio, Ollama ...). A request to
    # such a server is normalized to fit them (Engine.normalize_turns), never losing text.
    turn_system: str = "anywhere"
    """Where the template takes system messages: `anywhere`; `leading` (any number, before
    every other message); `first` (one, as the first message); `none` (no system role).
    Default anywhere."""
    turn_system_stable: bool = True
    """A system (or developer) text that arrives after the conversation started stays where
    it arrived - as a system message where the template takes one there, else a wrapped
    block in the adjacent user turn - so the leading system prompt, and with it the cached
    prompt prefix, never changes. False: later system texts are folded into the first
    system message (the prompt's start changes with them). Default True."""
    turn_alternate: bool = False
    """User turns and assistant turns without calls must alternate, a user turn first (an
    assistant turn with calls and its tool results stand between them freely). Default
    False."""
    turn_roles: tuple[str, ...] = ("tool",)
    """Roles the template renders besides system, user and assistant: `tool` (tool
    results). Without `tool`, results and the calls they answer are written as text.
    (Developer messages are read as system messages everywhere.) Default (tool,)."""
    turn_content_required: bool = False
    """An assistant message with calls must carry a content field (written as ""). Default
    False."""
    turn_text_with_calls: bool = True
    """The template renders assistant text written beside calls. Default True."""
    turn_history_calls: bool = True
    """The template renders the calls of earlier assistant turns. Default True."""
    turn_calls_per_message: int | None = None
    """At most this many calls in one assistant message (templates that refuse or drop a
    second call): a message with more is written as several, each followed by its
    results. Default None (any number)."""
    turn_call_ids: str | None = None
    """The call ids the template takes, as a pattern of `{name}` (the tool) and `{index}`
    (the call's position in the conversation, from 0), e.g. `functions.{name}:{index}` for
    a template that writes the id where the call's name belongs: the history's ids are
    rewritten to it, results with them. Default None (ids as the client sent them)."""
    turn_results_follow_calls: bool = False
    """Tool results must directly follow the assistant message that made the calls, in
    order. Default False."""
    turn_tools: str = "template"
    """Where the tool definitions go: `template` (the request's tools field, written where
    the template puts them); `system` (the model's trained format in the leading system
    prompt, no tools field: for a template that moves its tool list between turns, which
    would make a server process the whole prompt again every turn). Default template."""
    turn_template_kwargs: tuple[tuple[str, Any], ...] = ()
    """Variables the template reads that keep earlier turns rendered as they were (a rule
    writes a mapping, e.g. `{preserve_thinking: true}`): sent as the server's template
    arguments (the provider rule's `request.template_kwargs`). Default none."""
    turn_tool_schema: tuple[str, ...] = ()
    """Fixes the template needs on the tool schemas it renders (names from the
    `template_fixes` table of rules/schema_strategies.yaml, e.g. `property-types` for a
    template that reads every property's `type`). Default none."""

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """turn_template_kwargs as a mapping."""
        return dict(self.turn_template_kwargs)

    def non_default(self) -> dict[str, Any]:
        """The fields that differ from the defaults (what a resolution decided)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            default = f.default if f.default_factory is MISSING else f.default_factory()
            if value != default:
                if f.name == "turn_template_kwargs":
                    out[f.name] = dict(value)
                else:
                    out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


def coerce_tool(tool: Any) -> Tool:
    """Accept a Tool, an OpenAI tool dict, a bare function dict, or an Anthropic-style dict."""
    if isinstance(tool, Tool):
        return tool
    if hasattr(tool, "model_dump"):
        tool = tool.model_dump(exclude_none=True)
    if not isinstance(tool, dict):
        raise TypeError(f"a tool must be a Tool or a dict, not {type(tool).__name__}")
    fn: dict[str, Any] = tool["function"] if isinstance(tool.get("function"), dict) else tool
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"tool has no name: {tool!r:.200}")
    params = fn.get("parameters")
    if params is None:
        params = fn.get("input_schema", fn.get("parametersJsonSchema"))
    if params is None:
        params = {"type": "object", "properties": {}}
    return Tool(name=name, description=fn.get("description") or "", parameters=params)


def coerce_tools(tools: Any) -> tuple[Tool, ...]:
    """A tuple of Tools from None, one tool, or an iterable of tool-like values."""
    if tools is None:
        return ()
    if isinstance(tools, (Tool, dict)):
        tools = [tools]
    return tuple(coerce_tool(t) for t in tools)
