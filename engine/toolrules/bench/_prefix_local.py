"""`toolrules bench prefix --local`: the real cache test. The embedded model (the local
extra's GGUF) behind a llama-server stand-in (`_llama_upstream`: llama-cpp-python's
`Llama`, the chat template rendered as llama-server renders it, its KV cache kept between
requests), `toolrules serve`'s app in front of it, serving a recorded session turn by
turn as the agent sent it (streamed where it streamed).

Per turn, from two sides that are checked against each other:
- the model: the prompt tokens it decoded, counted by llama.cpp's own perf counters, and
  the prefix llama-cpp-python reused (its bookkeeping), with the rendered prompt;
- the client: the prompt and cached tokens it is told in its own API's usage (Anthropic
  `input_tokens` + `cache_read_input_tokens`, Responses `input_tokens_details.
  cached_tokens`, chat `prompt_tokens_details.cached_tokens`) - what the agent's usage
  view shows.
They agree when evaluated + client-cached == prompt tokens (server's and client's count
alike) and the reused prefix is the cached figure. Beside it: whether every text the
client sent (system and developer texts first) reached the rendered prompt.

The route is configured from the template the stand-in says it renders (GET /props), as
`toolrules serve` does with llama-server: the GGUF's own template, or - the bundled
Gemma GGUF carries none - the one the model's rules name (`chat_template`), given to
the stand-in as llama-server takes `--chat-template-file`.

The session: the recorded one whose first prompt is shortest (Codex's: Claude Code's
~40K-character system prompt and tools take minutes per uncached turn on two cores), its
main conversation in order; `--quick` replays its first four requests. Each request keeps
its body but a small output limit (the prompt is what is measured; the model's own answer
is not what the agent recorded, so a turn's prompt never extends into it).
"""

from __future__ import annotations

import asyncio
import copy
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._prompts import client_texts
from ._prompts import present as _present
from ._sessions import Request, Session

__all__ = ["LocalTurn", "client_usage", "local_rows", "serve_session"]

LOCAL_MODEL = "gemma-3-270m"
N_CTX = 32768
OUTPUT_TOKENS = 8
SMALL_SHARE = 0.25  # a later turn evaluates well under this share of its prompt


@dataclass(frozen=True)
class LocalTurn:
    """One request of the session, as the model and as the client saw it."""

    seq: int
    after: str
    """`first request`, `tool result` or `user prompt`."""
    upstream: tuple[tuple[int, int, int], ...]
    """Per upstream request the turn made (a validation retry makes more): prompt tokens
    of the rendered prompt, those decoded for it (llama.cpp's perf counters), and the
    prefix llama-cpp-python kept from its previous evaluation."""
    client_prompt: int | None
    client_cached: int | None
    """The prompt and cached tokens the client is told (the proxy adds a retry's up)."""
    texts: int = 0
    missing: tuple[str, ...] = ()
    """Client texts (system, developer, user, tool results, arguments) not in the prompt."""
    missing_system: tuple[str, ...] = ()
    note: str = ""

    @property
    def prompt_tokens(self) -> int | None:
        return self.upstream[0][0] if self.upstream else None

    @property
    def evaluated(self) -> int | None:
        return self.upstream[0][1] if self.upstream else None

    @property
    def reused(self) -> int | None:
        return self.upstream[0][2] if self.upstream else None

    @property
    def agrees(self) -> bool:
        """The client is told what the model did: over the turn's upstream requests,
        evaluated + client-cached == prompt tokens (the client's count and the model's),
        and the cached figure is the prefix the model reused."""
        if not self.upstream or self.client_cached is None:
            return False
        prompt, evaluated, reused = (sum(col) for col in zip(*self.upstream, strict=True))
        return (self.client_prompt == prompt and evaluated + self.client_cached == prompt
                and reused == self.client_cached)


def _limited(r: Request) -> dict[str, Any]:
    """The recorded body, answered short: the prompt is unchanged."""
    body = copy.deepcopy(r.body)
    if r.path.endswith("/messages"):
        body["max_tokens"] = OUTPUT_TOKENS
        body.pop("thinking", None)  # a thinking budget needs a larger max_tokens
    elif r.path.endswith("/responses"):
        body["max_output_tokens"] = OUTPUT_TOKENS
    else:
        body.pop("max_tokens", None)
        body["max_completion_tokens"] = OUTPUT_TOKENS
    return body


def client_usage(content: bytes, streamed: bool) -> tuple[int | None, int | None]:
    """(prompt tokens, cached tokens) the client is told: an answer's `usage`, or a
    stream's usage objects merged in order (Anthropic's message_start then
    message_delta, the Responses API's response.completed, chat's last chunk)."""
    usage: dict[str, Any] = {}
    if streamed:
        for line in content.decode("utf-8", errors="replace").splitlines():
            if not line.startswith("data:"):
                continue
            try:
                event = json.loads(line[5:].strip())
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            for holder in (event, event.get("message"), event.get("response")):
                if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
                    usage.update(holder["usage"])
    else:
        try:
            data = json.loads(content)
        except ValueError:
            return None, None
        if isinstance(data, dict) and isinstance(data.get("usage"), dict):
            usage = data["usage"]
    if not usage:
        return None, None
    prompt = usage.get("input_tokens", usage.get("prompt_tokens"))
    read = usage.get("cache_read_input_tokens")
    cached = read
    for key in ("input_tokens_details", "prompt_tokens_details"):
        details = usage.get(key)
        if cached is None and isinstance(details, dict):
            cached = details.get("cached_tokens")
    if isinstance(prompt, int) and isinstance(read, int):
        prompt += read + int(usage.get("cache_creation_input_tokens") or 0)
    return (prompt if isinstance(prompt, int) else None,
            cached if isinstance(cached, int) else None)


async def _serve(engine: Any, requests: Sequence[Request], upstream: Any) -> list[LocalTurn]:
    import httpx

    from ..serve import create_app, load_config

    config = load_config(engine, upstream=f"llamacpp:{LOCAL_MODEL}",
                         base_url=upstream.url + "/v1")
    route = config.routes[-1]
    if route.template is None or route.template.reason is not None:
        reason = route.template.describe() if route.template else "not asked"
        raise RuntimeError(f"the proxy did not configure the route from the upstream's "
                           f"chat template ({reason})")
    app: Any = create_app(engine, config)
    state = app.state.serve
    fronts = {f.path: f.provider for f in state.fronts if f.path}
    turns: list[LocalTurn] = []
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://proxy", timeout=3600) as client:
            for r in requests:
                front = fronts[r.path]
                before = len(upstream.records())
                body = _limited(r)
                headers = {k: v for k, v in r.headers.items()
                           if k in ("anthropic-version", "anthropic-beta")}
                resp = await client.post(r.path, json=body, headers=headers)
                content = await resp.aread()
                records = upstream.records()[before:]
                msgs, _t, _c = engine.parse_request(r.body, front, omitted={})
                after = "first request" if not turns else (
                    "tool result" if msgs and msgs[-1].role == "tool" else "user prompt")
                if resp.status_code != 200 or not records:
                    turns.append(LocalTurn(r.seq, after, (), None, None,
                                           note=f"HTTP {resp.status_code}: "
                                                f"{content[:300].decode(errors='replace')}"))
                    continue
                prompt, cached = client_usage(content, bool(body.get("stream")))
                kept, _taken = engine.front(front).take_volatile(msgs)
                system = client_texts([m for m in kept if m.role in ("system", "developer")])
                wanted = client_texts(kept)
                text = str(records[0].get("prompt") or "")  # the turn's own prompt
                disagree = [rec["n"] for rec in records if not rec.get("agree")]
                turns.append(LocalTurn(
                    r.seq, after,
                    tuple((rec["prompt_tokens"], rec["evaluated"], rec["kept"])
                          for rec in records),
                    prompt, cached, len(wanted),
                    tuple(t for t in wanted if not _present(t, text)),
                    tuple(t for t in system if not _present(t, text)),
                    note="" if not disagree else
                    "llama.cpp's counters and llama-cpp-python's reused prefix disagree"))
    finally:
        await state.upstreams.aclose()
    return turns


def chat_template_file(engine: Any, gguf: str) -> Path | None:
    """The chat template the stand-in renders: None (the GGUF's own) when the weights
    carry one, else the template file the model's rules name."""
    from ..chat_template._gguf import read_gguf_template

    if read_gguf_template(gguf).template is not None:
        return None
    name = engine.capability(LOCAL_MODEL).chat_template
    asset = engine.ruleset.templates.get(name) if name else None
    if asset is None:
        raise RuntimeError(f"{gguf} carries no chat template and the rules of "
                           f"{LOCAL_MODEL!r} name none")
    return Path(asset.path)


def serve_session(engine: Any, session: Session, *, limit: int | None = None,
                  workdir: str | Path | None = None) -> tuple[list[LocalTurn], str]:
    """The session's main conversation served by the embedded model: one LocalTurn per
    request, and what rendered it (the template)."""
    from ..clients._local import default_gguf
    from ._llama_upstream import LlamaUpstream

    conv = session.conversations[0]
    requests = [r for r in session.requests if r.main and r.conversation == conv]
    if limit is not None:
        requests = requests[:limit]
    gguf = default_gguf(engine)
    template = chat_template_file(engine, gguf)
    what = "the GGUF's own chat template" if template is None else \
        f"{template.parent.name}/{template.name} (the GGUF carries no template; the " \
        f"model's rules name it)"
    with tempfile.TemporaryDirectory(prefix="toolrules-prefix-local-") as tmp, \
            LlamaUpstream(gguf, chat_template=template, alias=LOCAL_MODEL, n_ctx=N_CTX,
                          threads=2, workdir=workdir or tmp) as upstream:
        return asyncio.run(_serve(engine, requests, upstream)), what


def local_rows(engine: Any, sessions: Sequence[Session], quick: bool) -> list[tuple[str, ...]]:
    try:
        import llama_cpp

        from ..clients._local import default_gguf

        default_gguf(engine)
    except Exception as exc:  # the local extra and the weights are optional
        return [("local: skipped", f"needs llama-cpp-python and the local weights "
                                   f"(pip install 'toolrules[local]'): {exc}")]
    one = [s for s in sessions if s.conversations and s.conversations[0] == "main"] \
        or list(sessions)
    session = min(one, key=lambda s: len(str(s.requests[0].body)))
    started = time.perf_counter()
    turns, template = serve_session(engine, session, limit=4 if quick else None)
    seconds = time.perf_counter() - started
    tag = f"local: {session.name} on {LOCAL_MODEL}"
    version = getattr(llama_cpp, "__version__", "?")
    out: list[tuple[str, ...]] = [
        (f"{tag}: upstream", f"llama-server stand-in (llama-cpp-python {version}, "
                             f"n_ctx {N_CTX}, 2 threads) rendering {template}"),
        (f"{tag}: turns served", f"{len(turns)} in {seconds:.0f} s")]
    for t in turns:
        label = f"{tag}: #{t.seq} " + (t.after if t.seq == turns[0].seq else f"after {t.after}")
        if t.evaluated is None or t.prompt_tokens is None:
            out.append((label, t.note or "no figure", "no figure"))
            continue
        told = "no usage" if t.client_prompt is None else (
            f"prompt {t.client_prompt}, cached "
            f"{'not reported' if t.client_cached is None else t.client_cached}")
        extra = (f"; {len(t.upstream)} upstream requests (a validation retry), the "
                 f"client is told their sum" if len(t.upstream) > 1 else "") + \
            (f"; {t.note}" if t.note else "")
        out.append((label, f"evaluated {t.evaluated} of {t.prompt_tokens} prompt tokens "
                           f"({100 * t.evaluated / t.prompt_tokens:.1f} %), reused "
                           f"{t.reused}; the client is told: {told}{extra}",
                    "ok" if t.agrees else "the client's figure is not the model's"))
    measured = [t for t in turns if t.evaluated is not None and t.prompt_tokens]
    if measured and measured[0] is turns[0]:
        first = turns[0]
        out.append((f"{tag}: the first request evaluates its whole prompt",
                    f"{first.evaluated} of {first.prompt_tokens}",
                    "ok" if first.evaluated == first.prompt_tokens else "no"))
    later = [t for t in measured[1:] if t is not turns[0]]
    if later:
        shares = [(t.evaluated or 0) / (t.prompt_tokens or 1) for t in later]
        out.append((f"{tag}: turns after the first, evaluated share of the prompt",
                    f"median {100 * statistics.median(shares):.1f} %, max "
                    f"{100 * max(shares):.1f} % over {len(later)} turns",
                    "ok" if max(shares) < SMALL_SHARE else
                    f"a turn evaluates {100 * max(shares):.0f} % of its prompt"))
    if measured:
        agree = sum(t.agrees for t in measured)
        out.append((f"{tag}: evaluated + client-cached == prompt tokens",
                    f"{agree} of {len(turns)} turns",
                    "ok" if agree == len(turns) else "no"))
        missing_system = sum(len(t.missing_system) for t in measured)
        missing = [m for t in measured for m in t.missing]
        out.append((f"{tag}: every client text in the model's prompt",
                    f"{sum(t.texts for t in measured) - len(missing)} of "
                    f"{sum(t.texts for t in measured)} texts; system and developer texts "
                    f"missing: {missing_system}" + (
                        f" (first missing: {json.dumps(missing[0][:80])})" if missing else ""),
                    "ok" if not missing else "texts missing"))
    return out
