"""ScriptedModel: a model client that answers from a script (tests, replays, demos).

Each turn is what a real model would have produced: raw text in the model's own format,
read with its dialect through the engine (so the emulated and the native-with-dialect
paths are the real parsers), or an assistant message written as a dict (read with the
provider rules of rules/loop.yaml `message_provider`), or a callable that decides from the
conversation. The client records every request it was sent.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._errors import ParseError, ToolrulesError
from .._types import (
    Message,
    ParsedResponse,
    StreamChunk,
    StreamChunkType,
    Tool,
    ToolCall,
    coerce_tools,
)
from ..rules._default import resolve_engine

__all__ = ["ScriptExhaustedError", "ScriptedModel", "ScriptedRequest", "response_chunks"]

Turn = Any  # str | Mapping[str, Any] | ParsedResponse | Callable[..., ...] | BaseException


class ScriptExhaustedError(ToolrulesError):
    """The conversation asked for more turns than the script has."""


class ScriptedRequest:
    """One request a ScriptedModel was sent. `rendered` (the request body a real provider
    would have received) and `prompt` (the emulation prompt, for a model without native
    tools) are built when first read, so recording costs nothing in a hot loop."""

    __slots__ = ("_client", "_prompt", "_rendered", "messages", "options", "tool_choice",
                 "tools")

    def __init__(self, client: ScriptedModel, messages: tuple[Message, ...],
                 tools: tuple[Tool, ...], tool_choice: Any, options: dict[str, Any]):
        self._client = client
        self.messages = messages
        self.tools = tools
        self.tool_choice = tool_choice
        self.options = options
        self._rendered: dict[str, Any] | None = None
        self._prompt: str | None = None

    @property
    def rendered(self) -> dict[str, Any]:
        """The request body (rules/loop.yaml `message_provider` wire format): native tool
        fields, or the emulation prompt and the history written as text."""
        if self._rendered is None:
            c = self._client
            self._rendered = c.engine.build_request(
                c.provider, c.model, list(self.messages), list(self.tools) or None,
                self.tool_choice if self.tools else None)
        return self._rendered

    @property
    def prompt(self) -> str | None:
        """The emulation prompt the model would have received (None: native tools, or no
        tools offered)."""
        c = self._client
        if c.native or not self.tools:
            return None
        if self._prompt is None:
            self._prompt = c.engine.render_emulation(list(self.tools), model=c.model)
        return self._prompt

    def __repr__(self) -> str:
        return (f"<ScriptedRequest {len(self.messages)} messages, "
                f"{len(self.tools)} tools, tool_choice={self.tool_choice!r}>")


class ScriptedModel:
    """A model client whose answers are given in advance.

    `turns`: each one raw text in `model`'s own output format (read with its dialect:
    e.g. ``<tool_call>{"name": ...}</tool_call>`` for a Hermes-style model), an assistant
    message dict (``{"role": "assistant", "content": ..., "tool_calls": [...]}``,
    arguments as a JSON string or an object), a callable ``(messages, tools) -> str |
    dict`` (may be async) for answers that depend on the conversation, or an exception
    instance to raise (a provider failure). A native-tools model without a raw-text
    dialect reads text turns as plain content.

    Calls without an id get deterministic ones (``call_<turn>_<index>``), so a replay of
    the same script produces the same conversation. `requests` records every request.
    """

    def __init__(self, turns: Sequence[Turn], model: str, *,
                 engine: Any = None, generation_prompt: str | None = None,
                 provider: str | None = None, delta_chars: int = 6):
        if isinstance(turns, (str, bytes, Mapping)):
            raise TypeError("turns must be a list of turns (text, message dicts or callables)")
        self.model = model
        self.turns: list[Turn] = list(turns)
        self.engine = resolve_engine(engine)
        cap = self.engine.capability(model)
        self.native = cap.native_tools
        # A native-tools model with no dialect writes no calls in text: its text is content.
        self.reads_text_calls = not (cap.native_tools and cap.dialect is None)
        self.provider = provider or _loop_table(self.engine)["message_provider"]
        self.generation_prompt = generation_prompt
        self.delta_chars = max(1, int(delta_chars))
        self.requests: list[ScriptedRequest] = []
        self.last_response: ParsedResponse | None = None
        self._parser_key: Any = None
        self._parser: Any = None

    @classmethod
    def from_file(cls, path: str | Path, *, engine: Any = None, model: str | None = None
                  ) -> ScriptedModel:
        """A script from YAML: ``model: ID`` and ``turns: [...]`` (texts or message dicts)."""
        import yaml

        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ToolrulesError(f"cannot read script {str(path)!r}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ParseError(f"script {str(path)!r} is not valid YAML: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("turns"), list):
            raise ParseError(f"script {str(path)!r} needs `turns:` (a list of model outputs: "
                             "raw text or assistant message objects) and `model:` (an id)")
        model_id = model or data.get("model")
        if not isinstance(model_id, str) or not model_id:
            raise ParseError(f"script {str(path)!r} names no `model:` id")
        for i, t in enumerate(data["turns"]):
            if not isinstance(t, (str, dict)):
                raise ParseError(f"script {str(path)!r} turn {i + 1} is a {type(t).__name__}; "
                                 "write raw model text or an assistant message object")
        return cls(data["turns"], model=model_id, engine=engine,
                   generation_prompt=data.get("generation_prompt"))

    @property
    def remaining(self) -> int:
        """Turns not used yet."""
        return len(self.turns) - len(self.requests)

    # ------------------------------------------------------------ the client protocol

    async def generate(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None,
                       tool_choice: Any = "auto", **kw: Any) -> ParsedResponse:
        number, turn, tool_list = await self._take(messages, tools, tool_choice, kw)
        parsed = self._read(number, turn, tool_list)
        self.last_response = parsed
        return parsed

    async def stream(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None,
                     tool_choice: Any = "auto", **kw: Any) -> AsyncIterator[StreamChunk]:
        number, turn, tool_list = await self._take(messages, tools, tool_choice, kw)
        if isinstance(turn, str) and self.reads_text_calls:
            finish = kw.get("finish_reason", "stop")
            stream = self._text_parser(tool_list).stream()
            step = self.delta_chars
            for start in range(0, len(turn), step):
                for chunk in stream.feed(turn[start:start + step]):
                    yield _renumbered_chunk(chunk, number)
            for chunk in stream.close(finish_reason=finish):
                yield _renumbered_chunk(chunk, number)
            done = stream.result  # what the stream read, whole: no second parse
            if done is not None:
                self.last_response = ParsedResponse(
                    done.content, done.reasoning_content, _renumbered(done.tool_calls, number),
                    done.finish_reason, done.repairs, turn, done.warnings)
            return
        parsed = self._read(number, turn, tool_list)
        self.last_response = parsed
        for chunk in response_chunks(parsed, self.delta_chars):
            yield chunk

    # ------------------------------------------------------------ reading turns

    async def _take(self, messages: Sequence[Message], tools: Sequence[Tool] | None,
                    tool_choice: Any, options: dict[str, Any]
                    ) -> tuple[int, Turn, tuple[Tool, ...]]:
        tool_list = tools if isinstance(tools, tuple) else coerce_tools(tools)
        msgs = tuple(messages)
        number = len(self.requests) + 1
        self.requests.append(ScriptedRequest(self, msgs, tool_list, tool_choice, options))
        if number > len(self.turns):
            last = msgs[-1] if msgs else None
            said = "" if last is None else \
                f"; the conversation ended with a {last.role} message: {str(last.content)[:120]!r}"
            raise ScriptExhaustedError(
                f"ScriptedModel({self.model}) was asked for turn {number}, but the script has "
                f"{len(self.turns)} turn(s){said}")
        turn = self.turns[number - 1]
        if isinstance(turn, BaseException):
            raise turn
        if callable(turn):
            turn = turn(list(msgs), tool_list)
            if inspect.isawaitable(turn):
                turn = await turn
        if not isinstance(turn, (str, Mapping, ParsedResponse)):
            raise TypeError(f"scripted turn {number} is a {type(turn).__name__}; give raw "
                            "text, an assistant message dict, a ParsedResponse, or a "
                            "callable returning one")
        return number, turn, tool_list

    def _text_parser(self, tools: tuple[Tool, ...]) -> Any:
        # The loop offers the same tool tuple every turn: one parser per tool set.
        key = id(tools)
        if self._parser_key != key or self._parser is None:
            self._parser = self.engine.text_parser(
                model=self.model, tools=tools or None, generation_prompt=self.generation_prompt,
                ids="sequential")
            self._parser_key = key
            self._parser_tools = tools  # keeps id(tools) from being reused while cached
        return self._parser

    def _read(self, number: int, turn: str | Mapping[str, Any] | ParsedResponse,
              tools: tuple[Tool, ...]) -> ParsedResponse:
        if isinstance(turn, ParsedResponse):  # already read (a replayed turn): as it is
            return turn
        if isinstance(turn, str):
            if not self.reads_text_calls:
                return ParsedResponse(content=turn or None, finish_reason="stop", raw=turn)
            parsed = self._text_parser(tools).parse(turn)
            calls = _renumbered(parsed.tool_calls, number)
            if calls is parsed.tool_calls:
                return parsed
            return ParsedResponse(parsed.content, parsed.reasoning_content, calls,
                                  parsed.finish_reason, parsed.repairs, parsed.raw,
                                  parsed.warnings)
        return self._read_message(number, turn, tools)

    def _read_message(self, number: int, turn: Mapping[str, Any],
                      tools: tuple[Tool, ...]) -> ParsedResponse:
        if "choices" in turn:  # a whole response body
            body: dict[str, Any] = dict(turn)
            message = turn
        else:
            message = dict(turn)
            finish = message.pop("finish_reason", None)
            message.setdefault("role", "assistant")
            calls = []
            for i, c in enumerate(message.get("tool_calls") or ()):
                if isinstance(c, Mapping):
                    c = dict(c)
                    c.setdefault("type", "function")
                    if not c.get("id"):
                        c["id"] = f"call_{number}_{i}"
                calls.append(c)
            if calls:
                message["tool_calls"] = calls
            body = {"choices": [{"index": 0, "message": message,
                                 "finish_reason": finish or ("tool_calls" if calls else "stop")}]}
        # sequential ids for calls read from the content (a text fallback): a replay of
        # the same script must produce the same conversation
        parsed = self.engine.parse_response(body, provider=self.provider, tools=tools or None,
                                            model=self.model, ids="sequential")
        return ParsedResponse(parsed.content, parsed.reasoning_content,
                              _renumbered(parsed.tool_calls, number),
                              parsed.finish_reason, parsed.repairs, message, parsed.warnings)


def _renumbered(calls: tuple[ToolCall, ...], number: int) -> tuple[ToolCall, ...]:
    """Parser-made ids (``call_<index>``) become unique in the conversation."""
    if not calls:
        return calls
    out = []
    changed = False
    for i, c in enumerate(calls):
        if c.id == f"call_{i}":
            c = ToolCall(f"call_{number}_{i}", c.name, c.arguments)
            changed = True
        out.append(c)
    return tuple(out) if changed else calls


def _renumbered_chunk(chunk: StreamChunk, number: int) -> StreamChunk:
    if chunk.tool_call_id is None or chunk.tool_call_id != f"call_{chunk.index}":
        return chunk
    return StreamChunk(chunk.type, chunk.content, chunk.index, f"call_{number}_{chunk.index}",
                       chunk.tool_name, chunk.args_delta, chunk.arguments)


def response_chunks(parsed: ParsedResponse, delta_chars: int = 6) -> list[StreamChunk]:
    """A complete response as the chunks a stream of it would carry: reasoning and text in
    deltas of `delta_chars`, then each call committed (start, arguments, end)."""
    out: list[StreamChunk] = []
    for kind, text in ((StreamChunkType.REASONING, parsed.reasoning_content),
                       (StreamChunkType.TEXT, parsed.content)):
        for start in range(0, len(text or ""), delta_chars):
            out.append(StreamChunk(kind, content=(text or "")[start:start + delta_chars]))
    for i, c in enumerate(parsed.tool_calls):
        out.append(StreamChunk(StreamChunkType.TOOL_START, index=i, tool_call_id=c.id,
                               tool_name=c.name))
        out.append(StreamChunk(StreamChunkType.TOOL_ARGS, index=i, tool_call_id=c.id,
                               tool_name=c.name, args_delta=c.arguments_json()))
        out.append(StreamChunk(StreamChunkType.TOOL_END, index=i, tool_call_id=c.id,
                               tool_name=c.name, arguments=c.arguments))
    return out


def _loop_table(engine: Any) -> dict[str, Any]:
    table = engine.ruleset.table("loop")
    if not isinstance(table, dict):
        from .._errors import UnknownRuleError

        raise UnknownRuleError("rule table", "loop", ())
    return table

