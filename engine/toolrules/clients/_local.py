"""The embedded local model: a GGUF run in-process by llama.cpp (llama-cpp-python), the
model client that works offline (`toolrules.connect("local")`, extra `toolrules[local]`).

Everything model-specific comes from the rules through the model id (`as_model`): the turn
format (capability `chat_template`), the emulation prompt that offers the tools, the
dialect that reads the answer, and the grammar that admits only a valid call in that
format (`Engine.call_grammar`), under which the model decodes by default - so the tool
loop works unchanged. Which weights run without a GGUF, and the inference defaults, are
rules/local.yaml.

Inference runs in a worker thread, off the event loop. One llama.cpp instance per weights
file and context size per process, shared by every client (loading costs a second and the
memory of the weights); its calls are serialized, as a llama.cpp context serves one
sequence at a time.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import importlib
import os
import sys
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import CapabilityError, UnknownRuleError
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
from ._base import iterate_sync, sync_loop

if TYPE_CHECKING:
    from ..emulation._chat_prompt import ChatPrompt
    from ..emulation._grammar import CallGrammar

__all__ = ["LocalModel", "default_gguf", "local_rules"]

_TEXT_KINDS = (StreamChunkType.TEXT, StreamChunkType.REASONING)
_OPTIONS = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
            "repeat_penalty", "constrained")

_RUNTIMES: dict[tuple[str, int, int | None, int], _Runtime] = {}
_RUNTIMES_LOCK = threading.Lock()
_DEFAULT_PATHS: dict[tuple[str, str], str] = {}


# ---------------------------------------------------------------- rules and weights

def local_rules(engine: Any) -> dict[str, Any]:
    """rules/local.yaml of `engine`."""
    table = engine.ruleset.table("local")
    if not isinstance(table, dict):
        raise UnknownRuleError("rule table", "local", ())
    return table


def _import_runtime(rules: Mapping[str, Any]) -> Any:
    for name, value in (rules.get("env") or {}).items():
        os.environ.setdefault(str(name), str(value))
    try:
        import llama_cpp
    except ImportError:
        raise ImportError(f"the local model's runtime is not installed: "
                          f"{rules.get('install')}") from None
    return llama_cpp


def default_gguf(engine: Any = None) -> str:
    """The path of the weights rules/local.yaml names (its package builds the file from
    the parts installed with it; nothing is downloaded)."""
    rules = local_rules(resolve_engine(engine))
    spec = rules["model"]
    package, func = str(spec["package"]), str(spec["path"])
    key = (package, func)
    hit = _DEFAULT_PATHS.get(key)
    if hit is not None and Path(hit).is_file():
        return hit
    if "." in package or package in sys.stdlib_module_names:
        raise CapabilityError(f"rules/local.yaml: model.package {package!r} must name the "
                              "package that ships the weights")
    try:
        module = importlib.import_module(package)
    except ImportError:
        raise ImportError(f"the default local model's weights are not installed (package "
                          f"{package!r}): {rules.get('install')}") from None
    fn = getattr(module, func, None)
    if not callable(fn) or str(getattr(fn, "__module__", "")).split(".")[0] != package:
        raise CapabilityError(f"rules/local.yaml: {package}.{func} is not a function of "
                              f"package {package!r}")
    path = str(fn())
    if not Path(path).is_file():
        raise CapabilityError(f"{package}.{func}() gave {path!r}, which is not a file")
    _DEFAULT_PATHS[key] = path
    return path


class _Runtime:
    """One loaded model, its lock, and the grammars compiled for it."""

    def __init__(self, lm: Any, lib: Any):
        self.lm = lm
        self.lib = lib
        self.lock = threading.Lock()
        self.grammars: dict[str, Any] = {}
        self.control_tokens: dict[str, int | None] = {}

    def split_stops(self, stops: Sequence[str]) -> tuple[list[str], frozenset[int]]:
        """Stop strings as text, except the ones that are one control token: decoded text
        never shows those, so they stop by token id."""
        text: list[str] = []
        ids: set[int] = set()
        for s in stops:
            tok = self.control_tokens.get(s)
            if tok is None and s not in self.control_tokens:
                found = self.lm.tokenize(s.encode("utf-8"), add_bos=False, special=True)
                tok = found[0] if len(found) == 1 and self.lib.llama_vocab_is_control(
                    self.lm._model.vocab, found[0]) else None
                self.control_tokens[s] = tok
            if tok is None:
                text.append(s)
            else:
                ids.add(tok)
        return text, frozenset(ids)

    def grammar(self, text: str) -> Any:
        g = self.grammars.get(text)
        if g is None:
            if len(self.grammars) > 64:
                self.grammars.clear()
            g = self.grammars[text] = self.lib.LlamaGrammar.from_string(text, verbose=False)
        return g


def _close_all() -> None:
    """Free the loaded models before the interpreter tears the binding down (a model
    freed during teardown finds its library half gone and says so on stderr)."""
    with _RUNTIMES_LOCK:
        for rt in _RUNTIMES.values():
            close = getattr(rt.lm, "close", None)
            if close is not None:
                close()
        _RUNTIMES.clear()


atexit.register(_close_all)


def _runtime(path: str, n_ctx: int, threads: int | None, n_batch: int, seed: int,
             rules: Mapping[str, Any]) -> _Runtime:
    key = (os.path.realpath(path), n_ctx, threads, n_batch)
    with _RUNTIMES_LOCK:
        hit = _RUNTIMES.get(key)
        if hit is None:
            lib = _import_runtime(rules)
            kw: dict[str, Any] = {"n_ctx": n_ctx, "n_batch": n_batch, "seed": seed,
                                  "verbose": False}
            if threads is not None:
                kw["n_threads"] = kw["n_threads_batch"] = threads
            try:
                lm = lib.Llama(model_path=path, **kw)
            except (ValueError, RuntimeError) as exc:
                raise CapabilityError(f"cannot load the weights {path!r}: {exc}") from None
            hit = _RUNTIMES[key] = _Runtime(lm, lib)
    return hit


def _token_stop(ids: frozenset[int]) -> Any:
    """A stopping criterion: the last token written is one of `ids` (llama-cpp-python
    asks it before the next step, so the stop token is the turn's last, decoded as '')."""
    first: list[int] = []

    def stop(input_ids: Any, logits: Any) -> bool:
        if not first:
            first.append(len(input_ids))
            return False
        return len(input_ids) > first[0] and int(input_ids[-1]) in ids

    return stop


def _tagged(parsed: ParsedResponse, tag: str) -> ParsedResponse:
    if not parsed.tool_calls:
        return parsed
    calls = tuple(ToolCall(f"call_{tag}_{i}", c.name, c.arguments)
                  for i, c in enumerate(parsed.tool_calls))
    return ParsedResponse(parsed.content, parsed.reasoning_content, calls, parsed.finish_reason,
                          parsed.repairs, parsed.raw, parsed.warnings)


def _tagged_chunk(chunk: StreamChunk, tag: str) -> StreamChunk:
    if chunk.tool_call_id is None or chunk.index is None:
        return chunk
    return StreamChunk(chunk.type, chunk.content, chunk.index, f"call_{tag}_{chunk.index}",
                       chunk.tool_name, chunk.args_delta, chunk.arguments)


# ---------------------------------------------------------------- the client

@dataclass(frozen=True, slots=True)
class _Request:
    prompt: ChatPrompt
    tools: tuple[Tool, ...]
    grammar: CallGrammar | None
    """The constraint as asked (None: free decoding)."""
    call_only: CallGrammar | None
    """With text allowed: the same tools, a call only."""
    kwargs: dict[str, Any]
    stops: tuple[str, ...]
    tag: str
    """Call ids of this turn: call_<tag>_<index>, the tag a digest of the prompt - the
    same conversation gets the same ids (the next prompt holds them), another one others."""


class LocalModel:
    """A GGUF model run in-process; `toolrules.connect("local")` builds one.

    `await generate(messages, tools, tool_choice, **options)` -> ParsedResponse;
    `stream(...)` -> async iterator of StreamChunk (then `last_response`);
    `generate_sync` / `stream_sync` for code without an event loop. Options: max_tokens,
    temperature, top_p, top_k, min_p, seed, stop, repeat_penalty, constrained.

    gguf       the weights (default: rules/local.yaml `model`)
    as_model   the id whose rules apply (default: rules/local.yaml `model.id` for the
               default weights, else the file's name)
    constrained  decode offered tools under their grammar (`Engine.call_grammar`)
    reuse_prefix  keep the evaluated prompt prefix between requests (faster multi-turn;
               greedy answers may then depend on what was asked before)
    chat_template  a template under templates/ instead of the model's rule; a template
               embedded in the weights is used when neither says one

    With tool_choice auto, a turn is decoded freely up to the first of the dialect's
    markers (the grammar's text branch, without paying for a grammar over the whole
    vocabulary at every token); a turn that writes no text, or that begins a call, is
    decoded again under the call grammar. Every call that comes back was decoded under
    the grammar.
    """

    def __init__(self, gguf: str | os.PathLike[str] | None = None, *,
                 as_model: str | None = None, n_ctx: int | None = None,
                 threads: int | None = None, max_tokens: int | None = None,
                 temperature: float | None = None, seed: int | None = None,
                 constrained: bool | None = None, chat_template: str | None = None,
                 style: str | None = None, reuse_prefix: bool | None = None,
                 engine: Any = None):
        self.engine = resolve_engine(engine)
        self._rules = local_rules(self.engine)
        inf = self._rules.get("inference") or {}
        self._gguf = None if gguf is None else os.fspath(gguf)
        if self._gguf is not None and not Path(self._gguf).is_file():
            raise CapabilityError(f"no GGUF file at {self._gguf!r}")
        default_id = str(self._rules["model"]["id"])
        self.model: str = as_model or (default_id if self._gguf is None
                                       else Path(self._gguf).stem)
        self.n_ctx = int(n_ctx or inf.get("n_ctx") or 4096)
        self.n_batch = int(inf.get("n_batch") or 512)
        self.threads = threads if threads is not None else inf.get("threads")
        self.max_tokens = int(max_tokens or inf.get("max_tokens") or 512)
        self.temperature = float(temperature if temperature is not None
                                 else inf.get("temperature", 0.0))
        self.seed = int(seed if seed is not None else inf.get("seed", 0))
        self.constrained = bool(constrained if constrained is not None
                                else inf.get("constrained", True))
        self.reuse_prefix = bool(reuse_prefix if reuse_prefix is not None
                                 else inf.get("reuse_prefix", False))
        self.chat_template = chat_template
        self.style = style
        self.last_response: ParsedResponse | None = None
        self.last_prompt: ChatPrompt | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        where = Path(self._gguf).name if self._gguf else "default weights"
        return f"<LocalModel {self.model} ({where})>"

    @property
    def gguf(self) -> str:
        """The weights file (the default one is located on first use)."""
        if self._gguf is None:
            self._gguf = default_gguf(self.engine)
        return self._gguf

    def preflight(self) -> None:
        """Raise now what the first request would (the runtime or the weights missing),
        without loading the weights."""
        _import_runtime(self._rules)
        self.gguf  # noqa: B018 - locating the weights is the check

    @property
    def forces_calls(self) -> bool:
        """tool_choice "required" makes the turn a call: with constrained decoding the
        turn is decoded under the call grammar (the loop's enforced mode relies on it)."""
        return self.constrained

    def _runtime(self) -> _Runtime:
        return _runtime(self.gguf, self.n_ctx, self.threads, self.n_batch, self.seed,
                        self._rules)

    def load(self) -> LocalModel:
        """Load the weights now (else on the first request)."""
        self._runtime()
        return self

    # ------------------------------------------------------------ requests

    def _prepare(self, messages: Any, tools: Any, tool_choice: Any,
                 options: dict[str, Any]) -> _Request:
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            raise TypeError(f"LocalModel does not take option(s) {', '.join(unknown)} "
                            f"(options: {', '.join(_OPTIONS)})")
        rt = self._runtime()
        tool_list = coerce_tools(tools)
        embedded = None
        cap = self.engine.capability(self.model)
        if self.chat_template is None and cap.chat_template is None:
            embedded = rt.lm.metadata.get("tokenizer.chat_template")
        prompt = self.engine.chat_prompt(messages, self.model, tools=tool_list,
                                         tool_choice=tool_choice, style=self.style,
                                         template=self.chat_template, embedded=embedded)
        grammar = call_only = None
        if options.get("constrained", self.constrained) and prompt.dialect is not None:
            grammar = self.engine.call_grammar(tool_list, self.model, format="gbnf",
                                               tool_choice=tool_choice, style=self.style)
            if grammar is not None and grammar.text_allowed:
                call_only = self.engine.call_grammar(tool_list, self.model, format="gbnf",
                                                     tool_choice="required", style=self.style)
        stops = list(prompt.stop)
        extra = options.get("stop")
        if extra:
            stops += [extra] if isinstance(extra, str) else list(extra)
        kwargs: dict[str, Any] = {
            "max_tokens": int(options.get("max_tokens") or self.max_tokens),
            "temperature": float(options.get("temperature", self.temperature)),
            "seed": int(options.get("seed", self.seed)),
        }
        for key in ("top_p", "top_k", "min_p", "repeat_penalty"):
            if options.get(key) is not None:
                kwargs[key] = options[key]
        self.last_prompt = prompt
        tag = hashlib.sha256(prompt.text.encode("utf-8")).hexdigest()[:10]
        return _Request(prompt, tool_list if prompt.dialect else (), grammar, call_only, kwargs,
                        tuple(stops), tag)

    def _parser(self, req: _Request) -> Any:
        if req.prompt.dialect is None:
            return None
        return self.engine.text_parser(self.model, req.tools, dialect=req.prompt.dialect,
                                       ids="sequential")

    # ------------------------------------------------------------ decoding (worker thread)

    def _decode(self, rt: _Runtime, prompt: str, kwargs: dict[str, Any],
                stops: Sequence[str], grammar: str | None, cancel: threading.Event
                ) -> Iterator[tuple[str, str | None]]:
        """(text piece, finish reason or None) as llama.cpp writes them."""
        kw = dict(kwargs)
        text_stops, token_stops = rt.split_stops(stops)
        if text_stops:
            kw["stop"] = text_stops
        if token_stops:
            kw["stopping_criteria"] = rt.lib.StoppingCriteriaList([_token_stop(token_stops)])
        if grammar is not None:
            kw["grammar"] = rt.grammar(grammar)
        if not self.reuse_prefix:
            # A prompt prefix kept from the previous request is evaluated in other batches
            # than a fresh prompt, which moves the logits by rounding - enough to flip a
            # greedy choice now and then. Evaluating every prompt whole keeps an answer a
            # function of its prompt alone.
            rt.lm.reset()
        it = rt.lm.create_completion(prompt, stream=True, **kw)
        try:
            for part in it:
                choice = part["choices"][0]
                yield str(choice.get("text") or ""), choice.get("finish_reason")
                if cancel.is_set():
                    return
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def _phases(self, req: _Request, parser: Any, cancel: threading.Event
                ) -> Iterator[tuple[str, str, str | None]]:
        """The turn as ("piece", text, finish reason or None) events. With text allowed
        under a constraint: free text up to the first marker (the grammar's text branch),
        then - when that text is blank or the dialect reads a call in it - ("restart", "",
        None) and the turn again under the call grammar."""
        rt = self._runtime()
        prompt, g = req.prompt.text, req.grammar
        with rt.lock:
            if g is None or req.call_only is None:
                for piece, finish in self._decode(rt, prompt, req.kwargs, req.stops,
                                                  g.text if g is not None else None, cancel):
                    yield "piece", piece, finish
                return
            text: list[str] = []
            finish = None
            for piece, why in self._decode(rt, prompt, req.kwargs, (*req.stops, *g.markers),
                                           None, cancel):
                text.append(piece)
                finish = why or finish
                yield "piece", piece, why
            if cancel.is_set():
                return
            whole = "".join(text)
            if whole.strip() and not parser.parse(whole, finish_reason=finish).tool_calls:
                return
            yield "restart", "", None
            for piece, why in self._decode(rt, prompt, req.kwargs, req.stops,
                                           req.call_only.text, cancel):
                yield "piece", piece, why

    @staticmethod
    def _plain(text: str, finish: str) -> ParsedResponse:
        return ParsedResponse(content=text or None, finish_reason=finish, raw=text)

    # ------------------------------------------------------------ the protocol

    async def generate(self, messages: Sequence[Message | dict[str, Any]],
                       tools: Sequence[Tool | dict[str, Any]] | None = None,
                       tool_choice: Any = "auto", **options: Any) -> ParsedResponse:
        """One model turn, read with the model's dialect when tools were offered."""
        req = await asyncio.to_thread(self._prepare, messages, tools, tool_choice, options)
        parser = self._parser(req)

        def run() -> tuple[str, str]:
            text: list[str] = []
            finish = "stop"
            for kind, piece, why in self._phases(req, parser, threading.Event()):
                if kind == "restart":
                    text.clear()
                    finish = "stop"
                    continue
                text.append(piece)
                finish = why or finish
            return "".join(text), finish

        text, finish = await asyncio.to_thread(run)
        parsed = _tagged(parser.parse(text, finish_reason=finish), req.tag) \
            if parser is not None else self._plain(text, finish)
        self.last_response = parsed
        return parsed

    def stream(self, messages: Sequence[Message | dict[str, Any]],
               tools: Sequence[Tool | dict[str, Any]] | None = None,
               tool_choice: Any = "auto", **options: Any) -> AsyncIterator[StreamChunk]:
        """One model turn as typed chunks as the model writes it; `last_response` holds
        the whole turn after the last chunk."""
        return self._stream(messages, tools, tool_choice, options)

    async def _stream(self, messages: Any, tools: Any, tool_choice: Any,
                      options: dict[str, Any]) -> AsyncGenerator[StreamChunk, None]:
        req = await asyncio.to_thread(self._prepare, messages, tools, tool_choice, options)
        parser = self._parser(req)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any, Any]] = asyncio.Queue()
        cancel = threading.Event()

        def work() -> None:
            try:
                for event in self._phases(req, parser, cancel):
                    loop.call_soon_threadsafe(queue.put_nowait, event)
            except BaseException as exc:  # handed to the consumer, raised there
                loop.call_soon_threadsafe(queue.put_nowait, ("error", exc, None))
            else:
                loop.call_soon_threadsafe(queue.put_nowait, ("done", None, None))

        worker = loop.run_in_executor(None, work)
        stream = parser.stream() if parser is not None else None
        held: list[StreamChunk] = []  # calls of a free phase that may be decoded again
        free_phase = req.call_only is not None
        text: list[str] = []
        finish = "stop"
        try:
            while True:
                kind, value, why = await queue.get()
                if kind == "error":
                    raise value
                if kind == "done":
                    break
                if kind == "restart":
                    stream = parser.stream()
                    held.clear()
                    free_phase = False
                    text.clear()
                    finish = "stop"
                    continue
                finish = str(why) if why else finish
                if not value:
                    continue
                text.append(value)
                if stream is None:
                    yield StreamChunk(StreamChunkType.TEXT, content=value)
                    continue
                for chunk in stream.feed(value):
                    if free_phase and chunk.type not in _TEXT_KINDS:
                        held.append(chunk)
                    else:
                        yield _tagged_chunk(chunk, req.tag)
        finally:
            cancel.set()
            await asyncio.shield(worker)
        whole = "".join(text)
        if stream is None:
            self.last_response = self._plain(whole, finish)
            return
        for chunk in held:
            yield _tagged_chunk(chunk, req.tag)
        for chunk in stream.close(finish_reason=finish):
            yield _tagged_chunk(chunk, req.tag)
        done = stream.result
        self.last_response = _tagged(done if done is not None else parser.parse(whole, finish),
                                     req.tag)

    # ------------------------------------------------------------ sync facade

    def _sync_loop(self) -> asyncio.AbstractEventLoop:
        self._loop = sync_loop(self._loop)
        return self._loop

    def generate_sync(self, messages: Sequence[Message | dict[str, Any]],
                      tools: Sequence[Tool | dict[str, Any]] | None = None,
                      tool_choice: Any = "auto", **options: Any) -> ParsedResponse:
        """`generate` for code without an event loop."""
        return self._sync_loop().run_until_complete(
            self.generate(messages, tools, tool_choice, **options))

    def stream_sync(self, messages: Sequence[Message | dict[str, Any]],
                    tools: Sequence[Tool | dict[str, Any]] | None = None,
                    tool_choice: Any = "auto", **options: Any) -> Iterator[StreamChunk]:
        """`stream` for code without an event loop."""
        loop = self._sync_loop()
        agen = self._stream(messages, tools, tool_choice, options)
        yield from iterate_sync(loop, agen)

    def close(self) -> None:
        """Close the sync facade's loop (the loaded weights stay for other clients)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()
        self._loop = None


if TYPE_CHECKING:  # the client satisfies the loop's protocol
    from ._base import ModelClient

    _check: type[ModelClient] = LocalModel
