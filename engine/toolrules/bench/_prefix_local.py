"""`toolrules bench prefix --local`: the real cache test. The embedded model (the local
extra's GGUF) behind llama-cpp-python's OpenAI-compatible server, `toolrules serve`'s
app in front of it, serving a recorded session turn by turn: how many prompt tokens the
server actually evaluated per turn.

llama-cpp-python keeps the tokens of its previous evaluation and reuses the longest
common token prefix with the next prompt; with `verbose` its log says so per request
(`Llama.generate: N prefix-match hit, remaining M prompt tokens to eval`, or that the
whole prompt was cached). Evaluated = M; with no such line, the whole prompt (the
prompt tokens the server reports). Beside it: the cached tokens the client is told in
its own API's usage (Anthropic `cache_read_input_tokens`, Responses
`input_tokens_details.cached_tokens`, chat `prompt_tokens_details.cached_tokens`) - "not
reported" while the proxy does not pass the server's cache figures on.

The session: the recorded one whose first prompt is shortest (Codex's: Claude Code's
~40K-character system prompt and tools take minutes per uncached turn on two cores), its
main conversation in order; `--quick` replays its first four requests. Each request is
sent non-streamed with a small output limit (the prompt is what is measured; the model's
own answer is not what the agent recorded, so a turn's prompt never extends into it).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._sessions import Request, Session

__all__ = ["LocalTurn", "local_rows", "parse_eval_log", "serve_session"]

LOCAL_MODEL = "gemma-3-270m"
N_CTX = 32768
OUTPUT_TOKENS = 8
_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")
_CACHED = re.compile(r"Llama\.generate: full prompt already cached")
_NO_REUSE = re.compile(r"prefix-match found but partial kv removal not supported")


@dataclass(frozen=True)
class LocalTurn:
    seq: int
    after: str
    prompt_tokens: int | None
    evaluated: int | None
    reused: int | None
    client_cached: int | None
    note: str = ""


def parse_eval_log(text: str, prompt_tokens: int | None) -> tuple[int | None, int | None, str]:
    """(evaluated, reused, note) from the server's log lines of one request."""
    hit = _HIT.findall(text)
    if hit:
        reused, remaining = hit[-1]
        return int(remaining), int(reused), ""
    if _CACHED.search(text):
        return 0, prompt_tokens, "whole prompt cached"
    note = "the cache could not be cut back: full prompt" if _NO_REUSE.search(text) else ""
    return prompt_tokens, 0 if prompt_tokens is not None else None, note


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def llama_server(gguf: str, log: Path) -> Iterator[str]:
    """`python -m llama_cpp.server` on a free loopback port, its log in `log`; ended
    (its process group) on exit."""
    import httpx

    port = _free_port()
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", gguf, "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", str(N_CTX), "--n_threads", "2",
             "--logits_all", "false", "--chat_format", "gemma", "--model_alias", LOCAL_MODEL,
             "--verbose", "true"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited ({proc.returncode}): "
                                   f"{log.read_text(errors='replace')[-800:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("llama_cpp.server did not answer within 180 s")
            time.sleep(0.5)
        yield url + "/v1"
    finally:
        import signal

        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue


def _limited(r: Request) -> dict[str, Any]:
    """The recorded body, answered whole and short: the prompt is unchanged."""
    body = copy.deepcopy(r.body)
    body["stream"] = False
    for key in ("max_tokens", "max_output_tokens", "max_completion_tokens"):
        if key in body:
            body[key] = OUTPUT_TOKENS
    if r.path.endswith("/messages"):
        body["max_tokens"] = OUTPUT_TOKENS
        body.pop("thinking", None)
    elif r.path.endswith("/responses"):
        body["max_output_tokens"] = OUTPUT_TOKENS
    else:
        body["max_tokens"] = OUTPUT_TOKENS
    return body


def _usage(data: Any) -> tuple[int | None, int | None]:
    """(prompt tokens, cached tokens) from a client-API answer's usage."""
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return None, None
    prompt = usage.get("input_tokens", usage.get("prompt_tokens"))
    cached = usage.get("cache_read_input_tokens")
    for key in ("input_tokens_details", "prompt_tokens_details"):
        details = usage.get(key)
        if cached is None and isinstance(details, dict):
            cached = details.get("cached_tokens")
    if isinstance(prompt, int) and isinstance(usage.get("cache_read_input_tokens"), int):
        prompt += usage["cache_read_input_tokens"]  # Anthropic counts them apart
    return (prompt if isinstance(prompt, int) else None,
            cached if isinstance(cached, int) else None)


async def _serve(engine: Any, requests: Sequence[Request], base_url: str,
                 log: Path) -> list[LocalTurn]:
    import httpx

    from ..serve import create_app, load_config

    config = load_config(engine, upstream=f"llamacpp:{LOCAL_MODEL}", base_url=base_url)
    app: Any = create_app(engine, config)
    state = app.state.serve
    fronts = {f.path: f.provider for f in state.fronts if f.path}
    turns: list[LocalTurn] = []
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://proxy", timeout=1800) as client:
            for r in requests:
                start = log.stat().st_size
                resp = await client.post(r.path, json=_limited(r),
                                         headers={"anthropic-version": "2023-06-01"})
                msgs, _t, _c = engine.parse_request(r.body, fronts[r.path], omitted={})
                after = "first request" if not turns else (
                    "tool result" if msgs and msgs[-1].role == "tool" else "user prompt")
                with log.open("rb") as f:
                    f.seek(start)
                    text = f.read().decode("utf-8", errors="replace")
                if resp.status_code != 200:
                    turns.append(LocalTurn(r.seq, after, None, None, None, None,
                                           f"HTTP {resp.status_code}: {resp.text[:200]}"))
                    continue
                prompt, cached = _usage(resp.json())
                evaluated, reused, note = parse_eval_log(text, prompt)
                turns.append(LocalTurn(r.seq, after, prompt, evaluated, reused, cached, note))
    finally:
        await state.upstreams.aclose()
    return turns


def serve_session(engine: Any, session: Session, *, limit: int | None = None
                  ) -> list[LocalTurn]:
    """The session's main conversation served by the embedded model; one LocalTurn per
    request.

    llama-cpp-python's server writes the model's turns with its own `gemma` formatter,
    which leaves system messages out (the model's template would fold them into the first
    user turn): an overlay tells the proxy to carry the system text in the first user
    turn itself (`turn_system: none`), so the prompt holds the whole conversation."""
    from .._engine import load
    from ..clients._local import default_gguf

    conv = session.conversations[0]
    requests = [r for r in session.requests if r.main and r.conversation == conv]
    if limit is not None:
        requests = requests[:limit]
    with tempfile.TemporaryDirectory(prefix="toolrules-prefix-") as tmp:
        overlay = Path(tmp) / "rules"
        (overlay / "models").mkdir(parents=True)
        (overlay / "models" / "zz-bench-local-server.yaml").write_text(
            f"overrides:\n  - id: {LOCAL_MODEL}\n    set: {{turn_system: none}}\n",
            encoding="utf-8")
        layers = [str(layer.rules) for layer in engine.ruleset.layers if not layer.bundled]
        served = load(paths=[*layers, str(overlay)], use_env=False, cache=False)
        log = Path(tmp) / "llama-server.log"
        with llama_server(default_gguf(engine), log) as url:
            return asyncio.run(_serve(served, requests, url, log))


def local_rows(engine: Any, sessions: Sequence[Session], quick: bool) -> list[tuple[str, ...]]:
    try:
        import llama_cpp
        import llama_cpp.server  # noqa: F401

        from ..clients._local import default_gguf

        default_gguf(engine)
    except Exception as exc:  # the local and server extras are optional
        return [("local: skipped", f"needs llama-cpp-python[server] and the local weights "
                                   f"(pip install 'toolrules[local,server]'): {exc}")]
    one = [s for s in sessions if s.conversations and s.conversations[0] == "main"] \
        or list(sessions)
    session = min(one, key=lambda s: len(str(s.requests[0].body)))
    started = time.perf_counter()
    turns = serve_session(engine, session, limit=4 if quick else None)
    seconds = time.perf_counter() - started
    tag = f"local: {session.name} on {LOCAL_MODEL}"
    out: list[tuple[str, ...]] = [(f"{tag}: turns served", f"{len(turns)} in {seconds:.0f} s")]
    for t in turns:
        if t.evaluated is None:
            out.append((f"{tag}: #{t.seq} after {t.after}", t.note or "no figure"))
            continue
        cached = "not reported" if t.client_cached is None else f"{t.client_cached}"
        note = f" ({t.note})" if t.note else ""
        out.append((f"{tag}: #{t.seq} after {t.after}",
                    f"evaluated {t.evaluated} of {t.prompt_tokens} prompt tokens, reused "
                    f"{t.reused}{note}; cached tokens the client is told: {cached}"))
    later = [t for t in turns[1:] if t.evaluated is not None and t.prompt_tokens]
    if later:
        shares = [(t.evaluated or 0) / t.prompt_tokens for t in later if t.prompt_tokens]
        out.append((f"{tag}: turns after the first, evaluated share of the prompt",
                    f"median {100 * statistics.median(shares):.1f} %, max "
                    f"{100 * max(shares):.1f} %"))
    return out
