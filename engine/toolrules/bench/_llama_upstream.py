"""A llama-server stand-in around the embedded model: the upstream of the real cache test.

llama-server (`--jinja`) answers OpenAI chat completions by rendering each request with the
model's own chat template, evaluating the prompt with the KV cache of its previous request
(the longest common token prefix is reused), and saying how much it reused:
`usage.prompt_tokens_details.cached_tokens` and `timings` (`prompt_n` tokens evaluated,
`cache_n` tokens reused). llama-cpp-python's own server does none of that (its formatters
are its own - the `gemma` one leaves system messages out - and it reports no cache figure),
so `toolrules bench prefix --local` and the local-model tests run this instead: a small
loopback HTTP server doing what llama-server does, around `llama_cpp.Llama`.

- `GET /props`: the chat template it renders (the GGUF's own `tokenizer.chat_template`,
  or `--chat-template-file`, as llama-server takes one), `bos_token`, `eos_token`,
  `model_alias`, `model_path`, `default_generation_settings.n_ctx` - so `toolrules serve`
  configures its route from the template, as with llama-server. `GET /health`,
  `GET /v1/models`.
- `POST /v1/chat/completions`: the request rendered in toolrules' sandbox as llama-server
  renders it (messages as sent, call arguments as objects, tools, `chat_template_kwargs`
  entries as template variables, the generation prompt); a template that raises answers
  500 with its message; a prompt over the context answers 400
  (`exceed_context_size_error`). The rendered text is tokenized as llama-server does it
  (a leading BOS text becomes the model's BOS token) and decoded by `Llama.generate`,
  which keeps the previous evaluation and reuses its longest common token prefix
  (`cache_prompt: false` starts from an empty cache). The model's text comes back as
  `content` (no tool-call parser: the proxy reads calls), until an end-of-generation
  token, a `stop` string, `max_tokens` (`max_completion_tokens`, `n_predict`) or the
  context's end. Sampling: `temperature`, `top_p`, `top_k`, `min_p`, `repeat_penalty`,
  `seed`; `grammar` (GBNF) constrains decoding. Streamed or not.
- Usage as llama-server reports it: `usage` {prompt_tokens (every prompt token),
  completion_tokens, total_tokens, prompt_tokens_details.cached_tokens} and `timings`
  {cache_n, prompt_n, prompt_ms, predicted_n, predicted_ms, ...}; streamed, the last
  chunk carries `timings`, and with `stream_options.include_usage` a last chunk with no
  choices carries `usage` (and the timings).

The figures are measured, not computed from a prefix comparison: the tokens evaluated for
a prompt are what llama.cpp's own counters (`llama_perf_context`: n_p_eval + n_eval)
advanced by while the prompt was decoded, and cache_n is the rest of the prompt. Beside
it, each request's record (`--record FILE`, one JSON line per answered request) keeps
where llama-cpp-python started decoding (its reused prefix, from its own bookkeeping) and
whether the two agree, with the rendered prompt.

One request at a time (one sequence, one cache), as llama-server with one slot. Run as a
process: `python -m toolrules.bench._llama_upstream --model GGUF [--chat-template-file F]
[--alias NAME] [--port N] [--n-ctx N] [--threads N] [--record FILE]`, which prints
`ready <port>` once it listens on 127.0.0.1; `LlamaUpstream` starts one and ends it.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, Protocol

from ..chat_template._render import TemplateRaised, compile_chat_template
from ._prompts import render_like_server

__all__ = [
    "Evaluation",
    "LlamaRunner",
    "LlamaUpstream",
    "Runner",
    "Sampling",
    "StopScanner",
    "UpstreamServer",
    "main",
    "timings_of",
    "usage_of",
]

MAX_BODY = 64 << 20
_SAMPLING_KEYS = {"temperature": float, "top_p": float, "top_k": int, "min_p": float,
                  "repeat_penalty": float, "seed": int}


# ---------------------------------------------------------------- requests and figures

@dataclass(frozen=True)
class Sampling:
    """What a request asks of the decoding."""

    max_tokens: int | None = None
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    grammar: str | None = None
    cache_prompt: bool = True

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Sampling:
        """The request's options; ValueError names one that is not what it should be."""
        values: dict[str, Any] = {}
        for key in ("max_tokens", "max_completion_tokens", "n_predict"):
            value = body.get(key)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{key} must be an integer")
            if value >= 0:  # llama-server: -1 is "until the context ends"
                values["max_tokens"] = value
            break
        for key, kind in _SAMPLING_KEYS.items():
            value = body.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{key} must be a number")
            values[key] = kind(value)
        stop = body.get("stop")
        if isinstance(stop, str):
            values["stop"] = (stop,)
        elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
            values["stop"] = tuple(s for s in stop if s)
        elif stop is not None:
            raise ValueError("stop must be a string or a list of strings")
        grammar = body.get("grammar")
        if grammar is not None and not isinstance(grammar, str):
            raise ValueError("grammar must be a string (GBNF)")
        values["grammar"] = grammar or None
        values["cache_prompt"] = body.get("cache_prompt", True) is not False
        if body.get("n") not in (None, 1):
            raise ValueError("n: one choice per request only")
        fmt = body.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
            raise ValueError("response_format: only text here (use grammar)")
        return cls(**values)


@dataclass
class Evaluation:
    """One request's figures, filled in while it decodes."""

    prompt_tokens: int
    evaluated: int | None = None
    """Prompt tokens decoded for it: llama.cpp's perf counters (n_p_eval + n_eval)."""
    kept: int | None = None
    """Where llama-cpp-python started decoding the prompt: the prefix it reused."""
    predicted: int = 0
    prompt_ms: float = 0.0
    predicted_ms: float = 0.0
    finish: str = "length"

    @property
    def cache_n(self) -> int:
        """Prompt tokens served from the cache: the ones not evaluated."""
        return self.prompt_tokens - (self.evaluated if self.evaluated is not None
                                     else self.prompt_tokens)

    @property
    def agree(self) -> bool | None:
        """Whether the counters and llama-cpp-python's own bookkeeping agree."""
        if self.evaluated is None or self.kept is None:
            return None
        return self.kept + self.evaluated == self.prompt_tokens


def usage_of(ev: Evaluation) -> dict[str, Any]:
    """The `usage` object, as llama-server writes it (prompt_tokens: every prompt token,
    cached or not)."""
    return {"prompt_tokens": ev.prompt_tokens, "completion_tokens": ev.predicted,
            "total_tokens": ev.prompt_tokens + ev.predicted,
            "prompt_tokens_details": {"cached_tokens": ev.cache_n}}


def timings_of(ev: Evaluation) -> dict[str, Any]:
    """The `timings` object, as llama-server writes it (prompt_n: tokens evaluated,
    cache_n: tokens reused)."""
    prompt_n = ev.prompt_tokens - ev.cache_n

    def rates(n: int, ms: float) -> tuple[float, float]:
        return (ms / n if n else 0.0), (1000.0 * n / ms if ms > 0 else 0.0)

    p_tok, p_sec = rates(prompt_n, ev.prompt_ms)
    g_tok, g_sec = rates(ev.predicted, ev.predicted_ms)
    return {"cache_n": ev.cache_n, "prompt_n": prompt_n, "prompt_ms": round(ev.prompt_ms, 3),
            "prompt_per_token_ms": round(p_tok, 3), "prompt_per_second": round(p_sec, 3),
            "predicted_n": ev.predicted, "predicted_ms": round(ev.predicted_ms, 3),
            "predicted_per_token_ms": round(g_tok, 3), "predicted_per_second": round(g_sec, 3)}


class StopScanner:
    """Text as it is generated, cut at the first stop string: what may be said now holds
    back any tail that could still begin a stop string."""

    def __init__(self, stops: Sequence[str]):
        self.stops = [s for s in stops if s]
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.buffer = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        if self.stopped:
            return ""
        self.buffer += text
        hits = [i for i in (self.buffer.find(s) for s in self.stops) if i >= 0]
        if hits:
            out, self.buffer, self.stopped = self.buffer[:min(hits)], "", True
            return out
        cut = len(self.buffer) - self.hold
        if cut <= 0:
            return ""
        out, self.buffer = self.buffer[:cut], self.buffer[cut:]
        return out

    def flush(self) -> str:
        out, self.buffer = ("" if self.stopped else self.buffer), ""
        return out


# ---------------------------------------------------------------- the model

class Runner(Protocol):
    """What the server needs of a model (LlamaRunner; the tests' scripted one)."""

    n_ctx: int

    def tokenize(self, text: str) -> list[int]: ...

    def generate(self, tokens: list[int], sampling: Sampling,
                 ev: Evaluation) -> Generator[str, None, None]: ...


class LlamaRunner:
    """`llama_cpp.Llama` over one GGUF, its KV cache kept between requests."""

    def __init__(self, gguf: str, *, n_ctx: int = 32768, threads: int = 2,
                 n_batch: int = 512):
        import llama_cpp

        self._lib = llama_cpp
        self.n_ctx = n_ctx
        # swa_full: a sliding-window model keeps every position, so a reused prefix holds
        # what the next tokens attend to (llama-server asks for it with --swa-full)
        self.llm = _counting_llama(llama_cpp)(
            model_path=gguf, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
            n_batch=n_batch, swa_full=True, verbose=False)
        self._vocab = self.llm._model.vocab
        self.bos_text = self.llm.detokenize([self.llm.token_bos()], special=True).decode(
            "utf-8", errors="replace")
        self.eos_text = self.llm.detokenize([self.llm.token_eos()], special=True).decode(
            "utf-8", errors="replace")
        self.adds_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self._warm_up()

    def _perf(self) -> int:
        """Tokens llama.cpp has decoded in this context: its perf counters."""
        ctx = self.llm._ctx.ctx
        self._lib.llama_synchronize(ctx)
        data = self._lib.llama_perf_context(ctx)
        return int(data.n_p_eval) + int(data.n_eval)

    def _warm_up(self) -> None:
        """llama.cpp reports each counter as at least 1 (0 reads as 1): one batch of two
        tokens and two single tokens lift both above that, so every difference read later
        is exact. The cache is emptied afterwards."""
        bos = self.llm.token_bos()
        for batch in ([bos, bos], [bos], [bos]):  # each counted when it is synchronized
            self.llm.eval(batch)
            self._lib.llama_synchronize(self.llm._ctx.ctx)
        data = self._lib.llama_perf_context(self.llm._ctx.ctx)
        if int(data.n_p_eval) < 2 or int(data.n_eval) < 2:
            raise RuntimeError("llama.cpp's perf counters do not count decoded tokens here")
        self.llm.reset()
        self.llm.evals.clear()

    def tokenize(self, text: str) -> list[int]:
        """As llama-server: a rendered BOS text at the start is the model's BOS token."""
        if self.adds_bos and self.bos_text and text.startswith(self.bos_text):
            text = text[len(self.bos_text):]
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=True))

    def generate(self, tokens: list[int], sampling: Sampling,
                 ev: Evaluation) -> Generator[str, None, None]:
        llm = self.llm
        if not sampling.cache_prompt:
            llm.reset()  # nothing of the previous evaluation is reused
        grammar = None
        if sampling.grammar:
            try:
                grammar = self._lib.LlamaGrammar.from_string(sampling.grammar, verbose=False)
            except Exception as exc:  # llama.cpp's parser says only that it failed
                raise ValueError(f"grammar does not parse: {exc}") from None
        # no seed: llama.cpp draws one per request
        llm.set_seed(sampling.seed if sampling.seed is not None
                     else self._lib.LLAMA_DEFAULT_SEED)
        budget = self.n_ctx - len(tokens)
        if sampling.max_tokens is not None:
            budget = min(budget, sampling.max_tokens)
        llm.evals.clear()
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        before = self._perf()
        started = time.perf_counter()
        prompt_done = started
        steps = llm.generate(tokens, top_k=sampling.top_k, top_p=sampling.top_p,
                             min_p=sampling.min_p, temp=sampling.temperature,
                             repeat_penalty=sampling.repeat_penalty, grammar=grammar)
        try:
            for token in steps:
                if ev.evaluated is None:  # the prompt is decoded, nothing generated yet
                    prompt_done = time.perf_counter()
                    ev.prompt_ms = 1000 * (prompt_done - started)
                    ev.evaluated = self._perf() - before
                    ev.kept = llm.evals[0][0] if llm.evals else len(tokens)
                if ev.predicted >= budget:
                    ev.finish = "length"
                    break
                if self._lib.llama_vocab_is_eog(self._vocab, token):
                    ev.finish = "stop"
                    break
                ev.predicted += 1
                text = decoder.decode(llm.detokenize([token]))
                if text:
                    yield text
            else:
                ev.finish = "length"
            tail = decoder.decode(b"", final=True)
            if tail:
                yield tail
        finally:
            steps.close()
            ev.predicted_ms = 1000 * (time.perf_counter() - prompt_done)


def _counting_llama(llama_cpp: Any) -> Any:
    """Llama that notes each eval call: (its cache position before, tokens decoded)."""

    class CountingLlama(llama_cpp.Llama):
        def __init__(self, *args: Any, **kwargs: Any):
            self.evals: list[tuple[int, int]] = []
            super().__init__(*args, **kwargs)

        def eval(self, tokens: Sequence[int]) -> None:
            self.evals.append((int(self.n_tokens), len(tokens)))
            super().eval(tokens)

    return CountingLlama


# ---------------------------------------------------------------- the server

@dataclass
class UpstreamServer:
    """The HTTP server around a Runner, on 127.0.0.1 (`port` 0: a free one). In a thread:
    `with UpstreamServer(...) as srv:` ... `srv.url`; or `serve_forever()`."""

    runner: Runner
    template: str
    bos_token: str = ""
    eos_token: str = ""
    alias: str = "model"
    model_path: str = ""
    record: IO[str] | None = None
    port: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._compiled = compile_chat_template(self.template)
        self._lock = threading.Lock()
        self._count = 0
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread: threading.Thread | None = None

    def __enter__(self) -> UpstreamServer:
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def serve_forever(self) -> None:
        self._httpd.serve_forever(poll_interval=0.1)

    def props(self) -> dict[str, Any]:
        return {"chat_template": self.template, "bos_token": self.bos_token,
                "eos_token": self.eos_token, "model_alias": self.alias,
                "model_path": self.model_path, "total_slots": 1,
                "default_generation_settings": {"n_ctx": self.runner.n_ctx}}

    def render(self, body: Mapping[str, Any]) -> str:
        """The prompt, as llama-server renders a chat-completions body."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError("messages must be a non-empty list")
        flat = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise ValueError(f"messages[{i}] must be an object with a role")
            content = m.get("content")
            if isinstance(content, list):  # text parts: one string, as the template reads
                texts = []
                for part in content:
                    if not isinstance(part, dict) or part.get("type") != "text" \
                            or not isinstance(part.get("text"), str):
                        raise ValueError(f"messages[{i}]: only text content here")
                    texts.append(part["text"])
                m = {**m, "content": "\n".join(texts)}
            flat.append(m)
        return render_like_server(self._compiled, {**body, "messages": flat},
                                  bos_token=self.bos_token, eos_token=self.eos_token)

    def note(self, entry: dict[str, Any]) -> None:
        self.records.append(entry)
        if self.record is not None:
            self.record.write(json.dumps(entry, ensure_ascii=False) + "\n")
            self.record.flush()


def _handler(srv: UpstreamServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _json(self, status: int, data: Any) -> None:
            raw = json.dumps(data, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _error(self, status: int, kind: str, message: str) -> None:
            self._json(status, {"error": {"code": status, "type": kind, "message": message}})

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            if path == "/props":
                self._json(200, srv.props())
            elif path == "/health":
                self._json(200, {"status": "ok"})
            elif path in ("/v1/models", "/models"):
                self._json(200, {"object": "list", "data": [
                    {"id": srv.alias, "object": "model", "created": 0, "owned_by": "llamacpp",
                     "meta": {"n_ctx": srv.runner.n_ctx}}]})
            else:
                self._error(404, "not_found_error", "File Not Found")

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            if path not in ("/v1/chat/completions", "/chat/completions"):
                self._error(404, "not_found_error", "File Not Found")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._error(413, "invalid_request_error", "the request body is too large")
                return
            try:
                body = json.loads(self.rfile.read(length) or b"null")
                if not isinstance(body, dict):
                    raise ValueError("the body must be a JSON object")
                sampling = Sampling.of(body)
                prompt = srv.render(body)
            except TemplateRaised as exc:  # llama-server: a 500 with the template's words
                self._error(500, "server_error", exc.message)
                return
            except ValueError as exc:
                self._error(400, "invalid_request_error", str(exc))
                return
            with srv._lock:  # one sequence, one cache: a request at a time
                tokens = srv.runner.tokenize(prompt)
                if len(tokens) >= srv.runner.n_ctx:
                    self._error(400, "exceed_context_size_error",
                                f"the request exceeds the available context size: "
                                f"{len(tokens)} prompt tokens, context {srv.runner.n_ctx}")
                    return
                srv._count += 1
                self._complete(body, sampling, prompt, tokens, srv._count)

        def _complete(self, body: dict[str, Any], sampling: Sampling, prompt: str,
                      tokens: list[int], n: int) -> None:
            ev = Evaluation(prompt_tokens=len(tokens))
            stream = bool(body.get("stream"))
            base = {"id": f"chatcmpl-{n}", "created": int(time.time()),
                    "model": str(body.get("model") or srv.alias)}
            scan = StopScanner(sampling.stop)
            steps = srv.runner.generate(tokens, sampling, ev)
            try:
                if not stream:
                    try:
                        text = "".join(scan.feed(piece) for piece in _until(steps, scan))
                    except ValueError as exc:
                        self._error(400, "invalid_request_error", str(exc))
                        return
                    text += scan.flush()
                    finish = "stop" if scan.stopped else ev.finish
                    self._note(n, ev, prompt, stream)
                    self._json(200, {**base, "object": "chat.completion", "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": finish}],
                        "usage": usage_of(ev), "timings": timings_of(ev)})
                    return
                self._stream(steps, scan, ev, base, body, prompt, n)
            finally:
                steps.close()

        def _stream(self, steps: Iterator[str], scan: StopScanner, ev: Evaluation,
                    base: dict[str, Any], body: dict[str, Any], prompt: str, n: int) -> None:
            chunk = {**base, "object": "chat.completion.chunk"}

            def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
                return {**chunk, "choices": [{"index": 0, "delta": d,
                                              "finish_reason": finish}]}

            try:
                first = next(_until(steps, scan), None)  # the prompt decodes before a byte
            except ValueError as exc:
                self._error(400, "invalid_request_error", str(exc))
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                self._event(delta({"role": "assistant", "content": None}))
                for piece in _chain([] if first is None else [first], _until(steps, scan)):
                    out = scan.feed(piece)
                    if out:
                        self._event(delta({"content": out}))
                tail = scan.flush()
                if tail:
                    self._event(delta({"content": tail}))
                finish = "stop" if scan.stopped else ev.finish
                self._note(n, ev, prompt, True)
                last: list[dict[str, Any]] = [delta({}, finish)]
                options = body.get("stream_options")
                if isinstance(options, dict) and options.get("include_usage"):
                    last.append({**chunk, "choices": [], "usage": usage_of(ev)})
                last[-1]["timings"] = timings_of(ev)
                for event in last:
                    self._event(event)
                self._raw(b"data: [DONE]\n\n")
                self._raw(b"")
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _event(self, data: dict[str, Any]) -> None:
            self._raw(f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode())

        def _raw(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _note(self, n: int, ev: Evaluation, prompt: str, stream: bool) -> None:
            srv.note({"n": n, **asdict(ev), "cache_n": ev.cache_n, "agree": ev.agree,
                      "stream": stream, "prompt": prompt})

    return Handler


def _until(steps: Iterator[str], scan: StopScanner) -> Iterator[str]:
    """The runner's text until a stop string has been seen."""
    for piece in steps:
        yield piece
        if scan.stopped:
            return


def _chain(first: list[str], rest: Iterator[str]) -> Iterator[str]:
    yield from first
    yield from rest


# ---------------------------------------------------------------- as a process

def main(argv: Sequence[str] | None = None) -> int:
    from ..chat_template._gguf import read_gguf_template

    ap = argparse.ArgumentParser(prog="python -m toolrules.bench._llama_upstream",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--model", required=True, help="the GGUF file")
    ap.add_argument("--chat-template-file", help="the chat template to render (default: "
                    "the GGUF's own)")
    ap.add_argument("--alias", help="the model's name in /props and /v1/models")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    ap.add_argument("--n-ctx", type=int, default=32768)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--record", help="append one JSON line per answered request here")
    args = ap.parse_args(argv)
    meta = read_gguf_template(args.model)
    if args.chat_template_file:
        template = Path(args.chat_template_file).read_text(encoding="utf-8")
    elif meta.template is not None:
        template = meta.template
    else:
        ap.error(f"{args.model} carries no chat template: give --chat-template-file")
    runner = LlamaRunner(args.model, n_ctx=args.n_ctx, threads=args.threads)
    record = open(args.record, "a", encoding="utf-8") if args.record else None  # noqa: SIM115
    try:
        srv = UpstreamServer(runner, template, bos_token=meta.bos_token or runner.bos_text,
                             eos_token=meta.eos_token or runner.eos_text,
                             alias=args.alias or meta.name or Path(args.model).stem,
                             model_path=args.model, record=record, port=args.port)
        print(f"ready {srv.port}", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        srv.serve_forever()
    finally:
        if record is not None:
            record.close()
    return 0


class LlamaUpstream:
    """The stand-in as a process on a free loopback port: `with LlamaUpstream(gguf,
    chat_template=path) as up:` ... `up.url` (the server root; `up.url + "/v1"` the API),
    `up.records()` (one dict per answered request). Its stderr (llama.cpp's log) goes to
    `log`. Ended with its process group on exit."""

    def __init__(self, gguf: str, *, chat_template: str | os.PathLike[str] | None = None,
                 alias: str | None = None, n_ctx: int = 32768, threads: int = 2,
                 workdir: str | os.PathLike[str], start_timeout: float = 300.0):
        self.gguf = gguf
        self.chat_template = chat_template
        self.alias = alias
        self.n_ctx = n_ctx
        self.threads = threads
        self.dir = Path(workdir)
        self.start_timeout = start_timeout
        self.record = self.dir / "llama-upstream.jsonl"
        self.log = self.dir / "llama-upstream.log"
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LlamaUpstream:
        import toolrules

        package_root = str(Path(toolrules.__file__).resolve().parent.parent)
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE",
               "PYTHONPATH": os.pathsep.join(
                   p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
        cmd = [sys.executable, "-m", "toolrules.bench._llama_upstream", "--model", self.gguf,
               "--n-ctx", str(self.n_ctx), "--threads", str(self.threads),
               "--record", str(self.record)]
        if self.chat_template is not None:
            cmd += ["--chat-template-file", str(self.chat_template)]
        if self.alias:
            cmd += ["--alias", self.alias]
        self.dir.mkdir(parents=True, exist_ok=True)
        self.record.write_text("", encoding="utf-8")
        with self.log.open("wb") as err:
            self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                                          stdin=subprocess.DEVNULL, env=env,
                                          start_new_session=True)
        try:
            port = self._ready()
        except BaseException:
            self._stop()
            raise
        self.url = f"http://127.0.0.1:{port}"
        return self

    def _ready(self) -> int:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + self.start_timeout
        line = b""
        while time.monotonic() < deadline:
            if sel.select(timeout=0.5):
                line = proc.stdout.readline()
                if line.startswith(b"ready "):
                    return int(line.split()[1])
                if not line and proc.poll() is not None:
                    break
            elif proc.poll() is not None:
                break
        tail = self.log.read_text(errors="replace")[-1500:] if self.log.exists() else ""
        state = (f"exited ({proc.returncode})" if proc.poll() is not None else
                 f"did not say ready within {self.start_timeout:.0f} s")
        raise RuntimeError(f"the llama upstream {state}: {tail}")

    def records(self) -> list[dict[str, Any]]:
        with self.record.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def _stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        if proc.stdout is not None:
            proc.stdout.close()
        self._proc = None

    def __exit__(self, *exc: Any) -> None:
        self._stop()


if __name__ == "__main__":
    sys.exit(main())
