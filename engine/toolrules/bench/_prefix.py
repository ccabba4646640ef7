"""Bench section `prefix`: does every turn's prompt extend the last one?

A server answers an agent's turn fast only when the new rendered prompt starts with what
its cache holds - the previous prompt. Recorded agent sessions (every request body
Claude Code and Codex sent, in order: templates/bench/sessions/, re-recorded by
tests/record_sessions.py) are replayed through the proxy - the real app (fronts, route,
turn normalization, build_request) in this process - into a loopback upstream that
renders a chat template as llama-server does (`GET /props` says which, so the route is
configured from it; each request's messages, tools and chat_template_kwargs rendered in
the sandbox) and answers with the turn the agent recorded next. Per fixture x template:

- per turn, the share of the previous rendered prompt (same conversation) that the new
  one keeps as its prefix - characters, and tokens where a tokenizer is at hand (the
  embedded model's GGUF vocabulary) - and where the first difference is;
- template errors (the template refused or failed to render a request);
- whether every text the client sent (system texts, messages, tool results, argument
  values) appears in the rendered prompt;
- for a fixture holding two new conversations of one agent: whether the second's prompt
  starts with the first's whole system prompt and tool definitions.

`--local` adds the real cache test: the embedded model behind a llama-server stand-in
(`_llama_upstream`) serving a recorded session, and the prompt tokens it evaluated per
turn (llama.cpp's own counters), checked against the cached tokens the client is told.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..chat_template._prefix import around, common_prefix
from ..chat_template._render import TemplateRaised, compile_chat_template
from ._prompts import BOS, EOS, client_texts, render_like_server
from ._prompts import present as _present
from ._sessions import Request, Session, bench_sessions, bench_templates, load_session

__all__ = [
    "PrefixReport",
    "Session",
    "TurnFigure",
    "bench",
    "bench_sessions",
    "bench_templates",
    "common_prefix",
    "load_session",
    "measure",
    "render_like_server",
]

# The upstream model's name: no family rule knows it, so what the route knows of it
# comes from the chat template the upstream serves (GET /props), as for a new model.
MODEL = "prefix-bench-model"
PROVIDER = "llamacpp"
TARGET = 0.99  # the share of the previous prompt a turn keeps (issue: >= 99 %)
CONTEXT = 30  # characters each side of a first difference (60 around it)


# ---------------------------------------------------------------- rendering as a server does



def _snippet(text: str, at: int) -> str:
    return around(text, at, CONTEXT)


class TemplateUpstream:
    """A loopback chat-completions server that renders one chat template as llama-server
    does and answers with `answer` (set before each request): says its template at
    GET /props, keeps each rendered prompt (or the template's error) in `seen`."""

    def __init__(self, source: str, name: str):
        self.source = source
        self.name = name
        self.template = compile_chat_template(source)
        self.answer: dict[str, Any] = {"content": "ok"}
        self.seen: list[tuple[str | None, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/props"):
                    outer._send(self, 200, {"chat_template": outer.source, "bos_token": BOS,
                                            "eos_token": EOS, "model_path": outer.name})
                elif self.path.rstrip("/").endswith("/models"):
                    outer._send(self, 200, {"object": "list", "data": [
                        {"id": MODEL, "object": "model", "created": 0, "owned_by": "bench"}]})
                else:
                    outer._send(self, 404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                outer._complete(self, body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> TemplateUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, data: Any) -> None:
        raw = json.dumps(data).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)

    def _complete(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        try:
            prompt: str | None = render_like_server(self.template, body)
            error = None
        except TemplateRaised as exc:  # what llama-server answers: a 500 with the message
            prompt, error = None, exc.message
        self.seen.append((prompt, error))
        if error is not None:
            self._send(h, 500, {"error": {"code": 500, "type": "server_error",
                                          "message": error}})
            return
        msg = {"role": "assistant", **self.answer}
        finish = "tool_calls" if msg.get("tool_calls") else "stop"
        usage = {"prompt_tokens": len(prompt or "") // 4, "completion_tokens": 8,
                 "total_tokens": len(prompt or "") // 4 + 8}
        base = {"id": "chatcmpl-bench", "created": 1, "model": MODEL}
        if not body.get("stream"):
            self._send(h, 200, {**base, "object": "chat.completion", "usage": usage,
                                "choices": [{"index": 0, "message": msg,
                                             "finish_reason": finish}]})
            return
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if msg.get("content"):
            deltas.append({"content": msg["content"]})
        for i, c in enumerate(msg.get("tool_calls") or []):
            deltas.append({"tool_calls": [{"index": i, **c}]})
        events = [{**base, "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
                  for d in deltas]
        events.append({**base, "object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        events.append({**base, "object": "chat.completion.chunk", "choices": [],
                       "usage": usage})
        raw = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)
        raw += b"data: [DONE]\n\n"
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)


# ---------------------------------------------------------------- the replay

def _answer(engine: Any, front: str, now: Request, following: Request | None) -> dict[str, Any]:
    """What the upstream answers to `now`: the assistant turn the agent recorded next in
    the same conversation (so the next recorded request is consistent), else a text."""
    if following is None:
        return {"content": "Done."}
    have, _t, _c = engine.parse_request(now.body, front, omitted={})
    then, _t, _c = engine.parse_request(following.body, front, omitted={})
    if len(then) <= len(have) or then[len(have)].role != "assistant":
        return {"content": "Done."}
    m = then[len(have)]
    text = m.content if isinstance(m.content, str) else "".join(
        getattr(p, "text", "") or "" for p in (m.content or ()))
    out: dict[str, Any] = {"content": text or None}
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function", "function": {
            "name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
            for c in m.tool_calls]
    return out


@dataclass(frozen=True)
class TurnFigure:
    """One request compared with the previous request of its conversation."""

    seq: int
    conversation: str
    after: str
    """What the client added: `tool result` or `user prompt`."""
    chars: int
    kept: int
    """Characters of the previous prompt the new one keeps as its prefix."""
    share: float
    token_share: float | None
    prev_context: str
    new_context: str

    def describe(self) -> str:
        tokens = f", {100 * self.token_share:.1f} % tokens" if self.token_share is not None \
            else ""
        where = "" if self.kept >= self.chars else (
            f"; first difference at char {self.kept:,}: previous {self.prev_context} | "
            f"new {self.new_context}")
        return f"{100 * self.share:.2f} % chars{tokens}{where}"


@dataclass
class PrefixReport:
    """One fixture replayed into one template."""

    session: str
    template: str
    requests: int = 0
    errors: int = 0
    first_error: str | None = None
    proxy_errors: int = 0
    first_proxy_error: str | None = None
    turns: list[TurnFigure] = field(default_factory=list)
    texts: int = 0
    missing: list[str] = field(default_factory=list)
    volatile: dict[str, int] = field(default_factory=dict)
    """Client metadata the front's rules took out (rule id -> requests)."""
    new_conversations: str | None = None
    prompts: list[tuple[Request, str | None]] = field(default_factory=list)
    fronts: dict[str, str] = field(default_factory=dict)
    route: str = ""

    @property
    def shares(self) -> list[float]:
        return [t.share for t in self.turns]

    def keep(self) -> str:
        if not self.turns:
            return "no turns to compare"
        s = self.shares
        return (f"min {100 * min(s):.2f} % / median {100 * statistics.median(s):.2f} % "
                f"over {len(s)} turns")


def _tokenizer() -> Callable[[str], list[int]] | None:
    """The embedded model's GGUF vocabulary (llama-cpp-python), when installed."""
    try:
        import llama_cpp

        from ..clients._local import default_gguf

        gguf = default_gguf()
    except Exception:  # the `local` extra is optional: characters only
        return None
    with open_devnull():
        vocab = llama_cpp.Llama(model_path=gguf, vocab_only=True, verbose=False)

    def tokenize(text: str) -> list[int]:
        return list(vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    return tokenize


@contextlib.contextmanager
def open_devnull() -> Iterator[None]:
    """llama.cpp's loader writes to stderr from C: hushed while the vocabulary loads."""
    import os
    import sys

    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        yield
        return
    saved = os.dup(fd)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), fd)
        try:
            yield
        finally:
            os.dup2(saved, fd)
            os.close(saved)


async def _replay(engine: Any, session: Session, upstream: TemplateUpstream,
                  report: PrefixReport, fitted: bool = True) -> None:
    import dataclasses

    import httpx

    from ..serve import create_app, load_config
    from ..serve._config import route_engine

    config = load_config(engine, upstream=f"{PROVIDER}:{MODEL}", base_url=upstream.url + "/v1")
    if not fitted:  # the rules' configuration: what the template does to unfitted prompts
        routes = []
        for route in config.routes:
            bare = dataclasses.replace(route, template=None)
            routes.append(dataclasses.replace(bare, engine=route_engine(engine, bare)))
        config = dataclasses.replace(config, routes=tuple(routes))
    app: Any = create_app(engine, config)
    state = app.state.serve
    fronts = {f.path: f.provider for f in state.fronts if f.path}
    report.fronts.update(fronts)
    report.route = config.routes[-1].template.describe() if config.routes[-1].template \
        else "the rules' configuration"
    chains: dict[tuple[str, bool], list[Request]] = {}
    for r in session.requests:
        chains.setdefault((r.conversation, r.main), []).append(r)
    following: dict[int, Request | None] = {}
    for chain in chains.values():
        for a, b in zip(chain, [*chain[1:], None]):
            following[a.seq] = b
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy",
                                     timeout=120) as client:
            for r in session.requests:
                front = fronts.get(r.path)
                if front is None:
                    raise ValueError(f"{session.name} #{r.seq}: no front serves {r.path}")
                upstream.answer = _answer(engine, front, r, following.get(r.seq))
                before = len(upstream.seen)
                headers = {k: v for k, v in r.headers.items()
                           if k in ("anthropic-version", "anthropic-beta")}
                resp = await client.post(r.path, json=r.body, headers=headers)
                await resp.aread()
                report.requests += 1
                rendered = upstream.seen[before:]
                if resp.status_code != 200 and not any(e for _p, e in rendered):
                    report.proxy_errors += 1
                    report.first_proxy_error = report.first_proxy_error or \
                        f"#{r.seq}: {resp.status_code} {resp.text[:300]}"
                prompt = None
                for p, e in rendered[:1]:  # the request the proxy sent for this turn
                    prompt = p
                    if e is not None:
                        report.errors += 1
                        report.first_error = report.first_error or f"#{r.seq}: {e}"
                report.prompts.append((r, prompt))
    finally:
        await state.upstreams.aclose()


def measure(engine: Any, session: Session, template: Path | str, *,
            tokenize: Callable[[str], list[int]] | None = None,
            fitted: bool = True) -> PrefixReport:
    """Replay `session` through the proxy into an upstream rendering `template` (`fitted`:
    the route configured from the template's inspection, as `toolrules serve` does; else
    the rules' configuration alone)."""
    path = Path(template)
    report = PrefixReport(session.name, path.stem)
    with TemplateUpstream(path.read_text(encoding="utf-8"), path.name) as upstream:
        asyncio.run(_replay(engine, session, upstream, report, fitted))
    fronts = report.fronts
    last: dict[tuple[str, bool], str] = {}
    token_cache: dict[str, list[int]] = {}

    def tokens(text: str) -> list[int]:
        assert tokenize is not None
        if text not in token_cache:
            token_cache[text] = tokenize(text)
        return token_cache[text]

    for r, prompt in report.prompts:
        msgs, _tools, _choice = engine.parse_request(r.body, fronts[r.path], omitted={})
        if prompt is None:
            continue
        # client metadata the front's rules take out (serve.volatile) is not conversation:
        # counted apart; every other text must reach the prompt
        msgs, taken = engine.front(fronts[r.path]).take_volatile(msgs)
        for t in taken:
            rule = t["why"].split(":", 1)[0]
            report.volatile[rule] = report.volatile.get(rule, 0) + 1
        wanted = client_texts(msgs)
        report.texts += len(wanted)
        report.missing += [t for t in wanted if not _present(t, prompt)]
        key = (r.conversation, r.main)
        prev = last.get(key)
        last[key] = prompt
        if prev is None or not r.main:
            continue
        kept = common_prefix(prev, prompt)
        token_share = None
        if tokenize is not None:
            a, b = tokens(prev), tokens(prompt)
            token_share = common_prefix(a, b) / len(a) if a else 1.0
        after = "tool result" if msgs and msgs[-1].role == "tool" else "user prompt"
        report.turns.append(TurnFigure(r.seq, r.conversation, after, len(prev), kept,
                                       kept / len(prev) if prev else 1.0, token_share,
                                       _snippet(prev, kept), _snippet(prompt, kept)))
    report.new_conversations = _new_conversations(engine, session, report, fronts)
    return report


def _new_conversations(engine: Any, session: Session, report: PrefixReport,
                       fronts: Mapping[str, str]) -> str | None:
    """Whether the second new conversation's first prompt starts with the first's whole
    system prompt and tool definitions (None: the fixture holds one conversation)."""
    firsts: list[tuple[Request, str | None]] = []
    seen: set[str] = set()
    for r, prompt in report.prompts:
        if r.main and r.conversation not in seen:
            seen.add(r.conversation)
            firsts.append((r, prompt))
    if len(firsts) < 2 or session.requests[0].conversation == "main":
        return None
    (r1, p1), (_r2, p2) = firsts[:2]
    if p1 is None or p2 is None:
        return "not rendered (template error)"
    msgs, tools, _c = engine.parse_request(r1.body, fronts[r1.path], omitted={})
    first_user = next((m for m in msgs if m.role == "user"), None)
    texts = client_texts([first_user]) if first_user is not None else []
    head = p1.find(texts[0][:40]) if texts else -1
    if head <= 0:
        return "no: the first user text is not found in the prompt"
    tool_end = 0
    for t in tools or ():
        doc = (t.description or "").strip()[:40]
        at = p1.find(doc) if doc else p1.find(t.name)
        tool_end = max(tool_end, at)
    shared = common_prefix(p1, p2)
    if tool_end > head:
        return (f"no: the tool definitions come after the first user text (char "
                f"{tool_end:,} > {head:,}); shared prefix {shared:,} chars")
    if shared >= head:
        return f"yes ({shared:,} chars shared; system prompt + tools: {head:,})"
    return (f"no: {shared:,} of the {head:,} chars of system prompt + tools shared "
            f"({100 * shared / head:.1f} %); first difference: {_snippet(p1, shared)} | "
            f"{_snippet(p2, shared)}")


# ---------------------------------------------------------------- the section

def bench(engine: Any, quick: bool, *, templates: Sequence[str] = (),
          sessions: Sequence[str] = (), local: bool = False,
          unfitted: bool = False) -> list[tuple[str, ...]]:
    """Rows (label, figure[, verdict]) for `toolrules bench prefix`."""
    try:
        import httpx  # noqa: F401
        import starlette  # noqa: F401
    except ImportError as exc:
        return [("skipped", f"needs the serve extra (pip install 'toolrules[serve]'): {exc}")]
    tpaths = [Path(t) for t in templates] or bench_templates()
    spaths = [Path(s) for s in sessions] or bench_sessions()
    if not tpaths or not spaths:
        return [("skipped", "no templates or no recorded sessions found")]
    loaded = [load_session(p) for p in spaths]
    tokenize = None if quick else _tokenizer()
    out: list[tuple[str, ...]] = [
        ("sessions", ", ".join(f"{s.name} ({len(s.requests)} requests, "
                               f"{s.header.get('package', '?')})" for s in loaded)),
        ("templates", ", ".join(p.stem for p in tpaths)),
        ("tokens", "GGUF vocabulary of the embedded model" if tokenize else
         "characters only" + (" (--quick)" if quick else " (no llama-cpp-python / weights)")),
        ("route", "the rules' configuration (--unfitted)" if unfitted else
         "configured from each template's inspection, as toolrules serve does")]
    for s in loaded:
        for t in tpaths:
            report = measure(engine, s, t, tokenize=tokenize, fitted=not unfitted)
            out += rows(report)
    if local:
        from ._prefix_local import local_rows

        out += local_rows(engine, loaded, quick)
    return out


def rows(r: PrefixReport) -> list[tuple[str, ...]]:
    """The figures of one fixture x template."""
    tag = f"{r.session} x {r.template}"
    ok_errors = "ok" if r.errors == 0 and r.proxy_errors == 0 else "template errors"
    errors = f"{r.errors} of {r.requests}" + (f" (first: {r.first_error})"
                                               if r.first_error else "")
    if r.proxy_errors:
        errors += f"; proxy refused {r.proxy_errors} (first: {r.first_proxy_error})"
    out: list[tuple[str, ...]] = [(f"{tag}: template errors", errors, ok_errors)]
    if r.turns:
        low = min(r.turns, key=lambda t: t.share)
        verdict = "ok" if low.share >= TARGET else f"below {100 * TARGET:.0f} %"
        out.append((f"{tag}: keep-share", r.keep(), verdict))
        for t in r.turns:
            out.append((f"{tag}: #{t.seq} after {t.after} ({t.conversation})", t.describe()))
    missing = ("no prompt rendered" if not r.texts and r.errors else
               f"all {r.texts} present" if not r.missing else
               f"{len(r.missing)} of {r.texts} missing (first: "
               f"{json.dumps(r.missing[0][:80], ensure_ascii=False)})")
    if r.volatile:
        out.append((f"{tag}: client metadata taken out (serve.volatile)",
                    ", ".join(f"{k} in {n} request(s)" for k, n in sorted(r.volatile.items()))))
    out.append((f"{tag}: every client text in the prompt", missing,
                "not rendered" if not r.texts and r.errors else
                "ok" if not r.missing else "texts missing"))
    if r.new_conversations is not None:
        out.append((f"{tag}: new conversations share system prompt + tools",
                    r.new_conversations,
                    "ok" if r.new_conversations.startswith("yes") else "not shared"))
    return out
