"""Engine methods for raw model text: `text_parser(model=..., dialect=...)`.

    parser = engine.text_parser(model="Qwen/Qwen3-8B", tools=tools,
                                generation_prompt="<|im_start|>assistant\\n<think>\\n")
    parser.parse(text, finish_reason="stop")        # -> ParsedResponse
    stream = parser.stream()
    stream.feed(delta)                              # -> list[StreamChunk]
    stream.close(finish_reason="stop")              # -> list[StreamChunk]
"""

from __future__ import annotations

import math
import time
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from .._errors import (
    MAX_TEXT_CHARS,
    InputTooLargeError,
    ParseError,
    ParseTimeoutError,
    UnknownRuleError,
)
from .._types import ParsedResponse, StreamChunk, coerce_tools
from ..rules._part import Part

if TYPE_CHECKING:  # the scanner is imported on first use: `import toolrules` stays light
    from ._compile import Dialect
    from ._scanner import Machine, Sink

__all__ = ["DialectsPart", "ParseClock", "TextParser", "TextStream", "parse_clock",
           "parse_deadline"]


# Seconds one output may take to read, in the current context (a proxy request, a loop
# run): parsers made or used under it stop with ParseTimeoutError past it. None: no limit.
_DEADLINE: ContextVar[float | None] = ContextVar("toolrules_parse_deadline", default=None)


class _Scope:
    """`var` set to `value` within a `with` block (a class, not a generator: a proxy
    enters two of these per request)."""

    __slots__ = ("_token", "_value", "_var")

    def __init__(self, var: ContextVar[Any], value: Any):
        self._var = var
        self._value = value
        self._token: Any = None

    def __enter__(self) -> Any:
        self._token = self._var.set(self._value)
        return self._value

    def __exit__(self, *exc: object) -> None:
        self._var.reset(self._token)


class _Deadline(_Scope):
    __slots__ = ()

    def __enter__(self) -> None:
        seconds = self._value
        if seconds is not None and seconds <= 0:
            raise ValueError(f"a parse deadline is a positive number of seconds, not "
                             f"{seconds!r}")
        super().__enter__()


def parse_deadline(seconds: float | None) -> AbstractContextManager[None]:
    """Within this block (and the tasks started in it), reading one model output with a
    text parser may take at most `seconds` of parsing time, whole or summed over a
    stream's deltas; past it the parser raises ParseTimeoutError instead of going on.
    `toolrules serve` and the tool loop read every reply under one (`parse_timeout`)."""
    return _Deadline(_DEADLINE, seconds)


class ParseClock:
    """What text parsers did in a context (a proxy request, for its metrics)."""

    __slots__ = ("calls", "dialect", "seconds")

    def __init__(self) -> None:
        self.seconds = 0.0
        """Seconds spent reading outputs, whole or over a stream's deltas."""
        self.calls = 0
        """Calls read from the outputs' text."""
        self.dialect: str | None = None
        """The dialect that read the last of them."""

    def read(self, result: ParsedResponse, dialect: str) -> None:
        if result.tool_calls:
            self.calls += len(result.tool_calls)
            self.dialect = dialect


# Where the parsers' work is added up, in the current context: parse_clock().
_CLOCK: ContextVar[ParseClock | None] = ContextVar("toolrules_parse_clock", default=None)


def parse_clock() -> AbstractContextManager[ParseClock]:
    """Within this block (and the tasks started in it), text parsers add the time they
    spend reading model outputs and the calls they read to the ParseClock it yields."""
    return _Scope(_CLOCK, ParseClock())


class TextParser:
    """Parses one model's raw output text with one dialect (reusable, thread-safe)."""

    def __init__(self, dialect: Dialect, tools: dict[str, Any], repairs: frozenset[str],
                 generation_prompt: str | None, ids: str = "random",
                 max_chars: int = MAX_TEXT_CHARS, heuristics: Any = None,
                 decline: frozenset[str] = frozenset()):
        self.dialect = dialect
        self.tools = tools
        self.repairs = repairs
        self.generation_prompt = (generation_prompt if generation_prompt is not None
                                  else dialect.default_prompt)
        self.ids = ids
        self.max_chars = max_chars
        self.heuristics = heuristics
        self.decline = dialect.decline | decline  # names that mean "no call"
        from ._scanner import Machine, Sink
        from ._whole import WholePlan, parse_whole

        self._classes = (Machine, Sink)
        probe = Machine(dialect, Sink(False, dialect.strip, tools, False, ids), repairs, tools)
        probe.prime(self.generation_prompt)
        self._start = probe.start_state()  # the prompt is scanned once, not per parse
        # parse() tries the whole-text fast path first when this parser allows it
        self._whole = WholePlan.build(dialect, self._start, tools, repairs, ids, self.decline,
                                      heuristics)
        self._parse_whole = parse_whole

    @property
    def starts_in_reasoning(self) -> bool:
        """True when the generation prompt left the output inside a reasoning block."""
        return self._start[0].kind == "reasoning"

    def _machine(self, streaming: bool) -> Machine:
        Machine, Sink = self._classes
        sink = Sink(streaming, self.dialect.strip, self.tools, self.dialect.dedupe, self.ids)
        sink.decline = self.decline
        m = Machine(self.dialect, sink, self.repairs, self.tools)
        m.restore(self._start)
        m.limit = _DEADLINE.get()
        clock = m.clock = _CLOCK.get()
        if clock is not None and m.limit is None:
            m.limit = math.inf  # timed, never late
        return m

    def parse(self, text: str, finish_reason: str | None = "stop") -> ParsedResponse:
        """Content, reasoning and calls of a complete output."""
        if not isinstance(text, str):
            raise ParseError(f"model output must be text (str), not {type(text).__name__}")
        if len(text) > self.max_chars:
            raise InputTooLargeError(f"model output is {len(text)} characters; the limit is "
                                     f"{self.max_chars} (text_parser(max_chars=...))")
        limit = _DEADLINE.get()
        clock = _CLOCK.get()
        started = time.perf_counter() if limit is not None or clock is not None else 0.0
        if self._whole is not None:
            result = self._parse_whole(self._whole, text, finish_reason)
            if clock is not None:
                clock.seconds += time.perf_counter() - started
                if result is not None:
                    clock.read(result, self.dialect.id)
            if limit is not None and time.perf_counter() - started > limit:
                raise ParseTimeoutError(f"reading the model's output ({len(text)} characters) "
                                        f"took longer than the parse deadline ({limit:g} s)",
                                        text)
            if result is not None:
                return result
        m = self._machine(streaming=False)
        if limit is not None:
            m.spent = time.perf_counter() - started
        m.load(text)
        try:
            m.close(finish_reason)
        except ParseTimeoutError as exc:
            exc.text = text
            raise
        result = _result(m.sink, finish_reason, text, self.heuristics)
        if clock is not None:
            clock.read(result, self.dialect.id)
        return result

    def stream(self) -> TextStream:
        """A new incremental parser for one streamed output."""
        return TextStream(self)


class TextStream:
    """Feed deltas, get typed chunks; work per delta is proportional to the delta."""

    def __init__(self, parser: TextParser):
        self._parser = parser
        self._m = parser._machine(streaming=True)
        self._closed = False
        self._chars = 0
        self._max = parser.max_chars
        # under a deadline the text is kept, so a timeout can show what was read
        limit = self._m.limit
        self._seen: list[str] | None = [] if limit is not None and limit < math.inf else None
        self.result: ParsedResponse | None = None

    def feed(self, delta: str) -> list[StreamChunk]:
        if self._closed:
            raise ParseError("feed() after close()")
        if type(delta) is not str and not isinstance(delta, str):
            raise ParseError(f"a delta must be text (str), not {type(delta).__name__}")
        chars = self._chars = self._chars + len(delta)
        if chars > self._max:
            raise InputTooLargeError(f"streamed output passed {self._max} "
                                     "characters (text_parser(max_chars=...))")
        m = self._m
        if self._seen is None:
            m.feed(delta)
        else:
            self._seen.append(delta)
            try:
                m.feed(delta)
            except ParseTimeoutError as exc:
                exc.text = "".join(self._seen)
                raise
        sink = m.sink
        out = sink.out
        if out:
            sink.out = []
            return out
        return []

    def close(self, finish_reason: str | None = "stop") -> list[StreamChunk]:
        if self._closed:
            return []
        self._closed = True
        m = self._m
        try:
            m.close(finish_reason)
        except ParseTimeoutError as exc:
            exc.text = "".join(self._seen or ())
            raise
        self.result = _result(m.sink, finish_reason, None, self._parser.heuristics)
        if m.clock is not None:
            m.clock.read(self.result, self._parser.dialect.id)
        out, m.sink.out = m.sink.out, []
        return out


def _result(sink: Sink, finish_reason: str | None, raw: str | None,
            heuristics: Any) -> ParsedResponse:
    content = "".join(sink.content.parts) or None
    if heuristics and not sink.calls and content:  # the opt-in last rung, as ordinary calls
        found = heuristics(content)
        for call in found:
            sink.call(call.name, call.arguments, call.id, "", [])
        if found:
            sink.warn("calls-inferred-from-text")
    return ParsedResponse(content, "".join(sink.reasoning.parts) or None, tuple(sink.calls),
                          finish_reason, tuple(sink.repairs), raw, tuple(sink.warnings))


class DialectsPart(Part):
    """text_parser / dialect lookup."""

    def dialect(self, name: str) -> Dialect:
        """The compiled dialect `name` (rules/dialects/<name>.yaml)."""
        return self._compiled_dialect(name, ())

    def _compiled_dialect(self, name: str, extra: tuple[str, ...]) -> Dialect:
        """`name` compiled with `extra` repairs added (a model's quirks may widen how its
        payloads are scanned: `single-quotes` makes '...' a string)."""
        cache: dict[Any, Dialect] = self._cached("dialects", dict)
        key: Any = (name, extra) if extra else name
        d = cache.get(key)
        if d is None:
            rf = self.ruleset.get("dialect", name)
            if rf is None:
                raise UnknownRuleError("dialect", name, self.ruleset.ids("dialect"))
            from ._compile import compile_dialect

            data = rf.data
            if extra:
                data = {**data, "repairs": [*(data.get("repairs") or ()), *extra]}
            d = compile_dialect(name, data)
            d.grammar_parsers = {}
            for g in d.grammars:
                d.grammar_parsers[g] = self._grammar(g)
            cache[key] = d
        return d

    def _grammar(self, name: str) -> Any:
        from ._grammars import build_grammar

        asset = self.ruleset.grammars.get(name)
        if asset is None:
            raise UnknownRuleError("grammar", name, list(self.ruleset.grammars))
        return build_grammar(asset.text, [str(asset.path.parent)])

    def dialect_for(self, model: str | None = None, dialect: str | None = None) -> str:
        """The dialect id used for `model`: its own, the one its emulation style asks for,
        or `auto` for an id no family rule knows (as the proxy reads such a model)."""
        if dialect:
            return dialect
        if model is None:
            return "auto"
        res = self.engine.resolve_model(model)
        cap = res.capability
        if cap.native_tools:
            return cap.dialect or "auto"
        if not res.spec.known and not res.overridden and not cap.dialect:
            # an id no family rule (nor an override) knows: the shape of its output is
            # unknown too
            return "auto"
        # emulated: the answer comes in the format the emulation prompt asked for
        return self.engine.select_emulation(model).dialect

    def text_parser(self, model: str | None = None, tools: Any = None, *,
                    dialect: str | None = None, generation_prompt: str | None = None,
                    repairs: Any = None, ids: str = "random", max_chars: int = MAX_TEXT_CHARS,
                    heuristics: bool = False) -> TextParser:
        """A parser for `model`'s raw output (its dialect), or for `dialect` directly.

        Allowed repairs are the dialect's plus the model's quirks (plus `repairs`); the
        model's `decline_calls` (and the dialect's `decline`) name calls that mean "no call".
        `heuristics=True` also infers calls from prose ("I'll use the X tool") when no
        structured call is found (off by default: it guesses).
        """
        name = self.dialect_for(model, dialect)
        d = self.dialect(name)
        allowed = set(d.repairs)
        decline: frozenset[str] = frozenset()
        if model is not None:
            cap = self.engine.capability(model)
            allowed |= set(cap.quirks)
            decline = frozenset(cap.decline_calls)
        if repairs:
            allowed |= set(repairs)
        if "single-quotes" in allowed and "single-quotes" not in d.repairs:
            d = self._compiled_dialect(name, ("single-quotes",))
        tool_map = {t.name: t.parameters for t in coerce_tools(tools)}
        finder = None
        if heuristics:
            from ._heuristics import heuristic_finder

            finder = heuristic_finder(self, tool_map)
        return TextParser(d, tool_map, frozenset(allowed), generation_prompt, ids=ids,
                          max_chars=max_chars, heuristics=finder, decline=decline)
