"""Bench section `serve`: what the proxy adds on top of calling the upstream directly.

Processes on loopback: a zero-latency fake OpenAI-compatible upstream (raw asyncio
HTTP/1.1, canned answers), `toolrules serve` in front of it (one worker, its metrics on
as by default), and - when their programs are found - LiteLLM's proxy and
claude-code-router in front of the same upstream, and a bare pass-through (bytes in,
bytes out, on the same client and transport: the floor any proxy's added latency on this
machine is read against, measured with one client); the load comes from
this process (a keep-alive pool of the small asyncio HTTP client, uvloop when
installed). On a machine with two or more CPUs each proxy runs on CPU 0 alone and the
upstream and the load on the others, so a proxy's figures are what one core of it
does, whatever the load generator costs. For 1 and
16 concurrent clients, non-streamed and streamed: requests/s, p50/p99 latency and the
time to the first byte of a stream, directly and through each proxy, in one run - each
target warmed first, then rounds (three with --quick, five without) in which each
measurement is taken of every target in turn, medians - and the proxy's ratios to each
peer against the goals (twice the requests/s, half the added latency), each latency goal
beside the floor: what it leaves for a proxy's own work. Bounded: a request count and a
time limit per measurement.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["bench", "fake_upstream", "pass_through"]

# A Qwen3 name: the rules know its raw-text call format (Hermes `<tool_call>`), which the
# fake upstream writes when a request offers tools - as servers without a tool parser do.
_MODEL = "qwen3-8b"
_BODY = {"model": _MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
_TOOL = {"name": "get_weather", "description": "Current weather for a city.",
         "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
_RAW_CALL = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": '
             '{"city": "Paris"}}\n</tool_call>')
_LITELLM_CANDIDATES = ("litellm", "/tmp/litellm-venv/bin/litellm")
_CCR_CANDIDATES = ("ccr", "/tmp/ccr/node_modules/.bin/ccr")


def _ccr_candidates() -> tuple[str, ...]:
    """`ccr` on the PATH, else where the tests' npm prefix holds it (TOOLRULES_NPM_DIR,
    else ~/.cache/toolrules/npm; tests/npm_packages.py pins the version)."""
    npm = os.environ.get("TOOLRULES_NPM_DIR") or str(Path.home() / ".cache" / "toolrules" /
                                                      "npm")
    return (*_CCR_CANDIDATES, str(Path(npm) / "node_modules" / ".bin" / "ccr"))
# Both proxies check a client key (LiteLLM refuses to start without one): same work.
_KEY = "sk-bench-" + "0123456789abcdef" * 2


# ---------------------------------------------------------------- the fake upstream

def _answer(content: str = "Hello there!") -> bytes:
    body = json.dumps({"id": "chatcmpl-fake", "object": "chat.completion", "created": 1,
                       "model": _MODEL, "choices": [{"index": 0, "finish_reason": "stop",
                       "message": {"role": "assistant", "content": content}}],
                       "usage": {"prompt_tokens": 5, "completion_tokens": 3,
                                 "total_tokens": 8}}).encode()
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


def _chunk(data: bytes) -> bytes:
    """`data` as one chunk of a chunked HTTP/1.1 body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _stream_answer() -> bytes:
    def ev(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data = json.dumps({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                           "created": 1, "model": _MODEL,
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        return f"data: {data}\n\n".encode()
    events = [ev({"role": "assistant", "content": ""}), ev({"content": "Hello "}),
              ev({"content": "there!"}), ev({}, "stop"), b"data: [DONE]\n\n"]
    chunks = b"".join(_chunk(e) for e in events) + b"0\r\n\r\n"
    return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + chunks)


_MODELS = json.dumps({"object": "list", "data": [{"id": _MODEL, "object": "model",
                                                  "created": 0, "owned_by": "bench"}]}).encode()
_MODELS_ANSWER = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                  + str(len(_MODELS)).encode() + b"\r\n\r\n" + _MODELS)


async def _serve_upstream(sock: socket.socket) -> None:
    plain, streamed, raw_call = _answer(), _stream_answer(), _answer(_RAW_CALL)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:].strip())
                body = await reader.readexactly(length) if length else b""
                if head.startswith(b"GET"):
                    writer.write(_MODELS_ANSWER)
                elif b'"tools"' in body:  # a server without a tool parser: calls as text
                    writer.write(raw_call)
                elif b'"stream":true' in body.replace(b" ", b""):
                    writer.write(streamed)
                else:
                    writer.write(plain)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, sock=sock, backlog=1024)
    async with server:
        await server.serve_forever()


def fake_upstream(port: int) -> None:
    """Run the zero-latency upstream on 127.0.0.1:`port` until killed."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    _run(_serve_upstream(sock))


def _run(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


# ---------------------------------------------------------------- the bare pass-through

class _Pass(asyncio.Protocol):
    """One client connection of the bare pass-through: each request's body goes to the
    upstream as it came, the answer's bytes back as they come (chunked when streamed) - no
    framework, no translation, nothing counted: what any proxy on this machine adds at
    least (see `pass_through`)."""

    def __init__(self, upstream: str, client: Any) -> None:
        import httptools

        self.upstream = upstream
        self.client = client
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.last: asyncio.Task[None] | None = None  # answers go out in request order

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except Exception:  # a malformed request: drop the connection
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        url, body, self.url, self.body = self.url, b"".join(self.body), b"", []
        self.last = asyncio.get_running_loop().create_task(self._answer(self.last, url, body))

    async def _answer(self, before: asyncio.Task[None] | None, url: bytes,
                      body: bytes) -> None:
        if before is not None:
            await before
        write = self.transport.write
        if url == b"/health":
            write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            return
        stream = b'"stream":true' in body
        try:
            r = await self.client.send(self.client.build_request(
                "POST", self.upstream + url.decode("latin-1"), content=body,
                headers={"content-type": "application/json"}), stream=stream)
        except Exception:
            write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            return
        kind = r.headers.get("content-type", "application/json").encode("latin-1")
        head = b"HTTP/1.1 %d OK\r\ncontent-type: %s\r\n" % (r.status_code, kind)
        if not stream:
            write(head + b"content-length: %d\r\n\r\n%s" % (len(r.content), r.content))
            return
        head += b"transfer-encoding: chunked\r\n\r\n"
        try:
            async for chunk in r.aiter_bytes():
                write(head + _chunk(chunk))
                head = b""
        except Exception:  # the upstream broke off: so does the answer, unfinished
            self.transport.close()
            return
        write(head + b"0\r\n\r\n")


def pass_through(port: int, upstream_port: int) -> None:
    """Run the bare pass-through on 127.0.0.1:`port` in front of the upstream on
    `upstream_port` until killed: the floor each proxy's added latency is read against."""
    from ..clients._fasthttp import FastClient

    async def main() -> None:
        client = FastClient(30, 10)
        upstream = f"http://127.0.0.1:{upstream_port}"
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Pass(upstream, client), "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    _run(main())


# ---------------------------------------------------------------- processes

def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen[bytes], limit: float) -> bool:
    import httpx

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            httpx.get(url, timeout=1)
            return True
        except httpx.HTTPError:
            time.sleep(0.1)
    return False


class _Started:
    """A started program: true when it answers; `pid` leads its process group."""

    def __init__(self, ok: bool, pid: int | None):
        self.ok = ok
        self.pid = pid

    def __bool__(self) -> bool:
        return self.ok


def _group_cpu(pgid: int | None) -> float | None:
    """CPU seconds (user + sys) of every process of the group `pgid` so far (Linux; None
    elsewhere): what a proxy spent, whatever else the machine runs."""
    if pgid is None or not os.path.isdir("/proc"):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # the fields after the name: state ppid pgrp ...
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _cpus() -> tuple[set[int], set[int]] | None:
    """(the proxies' CPU, everything else's) when this process may use two or more CPUs
    and can pin processes (Linux), else None."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        return None
    return {mine[0]}, set(mine[1:])


def _pinned(cpus: set[int] | None) -> Any:
    if not cpus:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


@contextmanager
def _process(args: list[str], ready_url: str, limit: float,
             env: dict[str, str] | None = None,
             cpus: set[int] | None = None) -> Iterator[_Started]:
    """Run `args` (in its own process group; on `cpus` when given - its children inherit
    them) until the block ends; true when `ready_url` answers within `limit` s."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})}, start_new_session=True,
                            preexec_fn=_pinned(cpus))
    try:
        yield _Started(_wait_http(ready_url, proc, limit), proc.pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def _which(candidates: tuple[str, ...]) -> str | None:
    for cand in candidates:
        path = shutil.which(cand) or (cand if os.path.isfile(cand) and os.access(cand, os.X_OK)
                                      else None)
        if path:
            return path
    return None


# ---------------------------------------------------------------- load

@dataclass
class _Run:
    rps: float
    p50: float
    p99: float
    ttfb50: float | None
    errors: int
    count: int
    cpu: float | None = None  # the target's CPU seconds per request


def _headers(api: str) -> dict[str, str]:
    if api == "anthropic":
        return {"content-type": "application/json", "x-api-key": _KEY,
                "anthropic-version": "2023-06-01"}
    return {"content-type": "application/json", "authorization": f"Bearer {_KEY}"}


async def _load(url: str, clients: int, stream: bool, count: int, limit: float,
                api: str = "openai") -> _Run:
    """`clients` concurrent workers over one keep-alive pool (the small asyncio client of
    clients/_fasthttp.py: a load generator that costs less than what it measures)."""
    from ..clients._fasthttp import FastClient

    body = json.dumps({**_BODY, "stream": stream}).encode()
    headers = _headers(api)
    latencies: list[float] = []
    ttfbs: list[float] = []
    errors = 0
    sent = 0
    deadline = time.perf_counter() + limit
    client = FastClient(30, 10)

    async def one(stream_it: bool) -> bool:
        request = client.build_request("POST", url, content=body if stream_it else
                                       json.dumps(_BODY).encode(), headers=headers)
        t0 = time.perf_counter()
        if not stream_it:
            r = await client.send(request)
            return r.status_code == 200 and b"Hello" in r.content
        r = await client.send(request, stream=True)
        first = None
        async for _chunk in r.aiter_bytes():
            if first is None:
                first = time.perf_counter()
        if first is not None:
            ttfbs.append(first - t0)
        return r.status_code == 200

    async def worker() -> None:
        nonlocal errors, sent
        while sent < count and time.perf_counter() < deadline:
            sent += 1
            t0 = time.perf_counter()
            try:
                ok = await one(stream)
            except Exception:  # any failure counts as an error of the target
                ok = False
            if ok:
                latencies.append(time.perf_counter() - t0)
            else:
                errors += 1

    await asyncio.gather(*(one(False) for _ in range(min(clients, 4))))  # warm up
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    wall = time.perf_counter() - t0
    await client.aclose()
    lat = sorted(latencies) or [0.0]
    return _Run(rps=len(latencies) / wall if wall else 0.0, p50=statistics.median(lat),
                p99=lat[min(len(lat) - 1, int(len(lat) * 0.99))],
                ttfb50=statistics.median(ttfbs) if ttfbs else None, errors=errors,
                count=len(latencies) + errors)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


# ---------------------------------------------------------------- the section

async def _tool_use(url: str) -> str:
    """One Anthropic request offering a tool, answered upstream with a raw-text call:
    does the client get a tool_use block?"""
    from ..clients._fasthttp import FastClient

    client = FastClient(30, 10)
    body = json.dumps({**_BODY, "max_tokens": 64, "tools": [_TOOL],
                       "messages": [{"role": "user", "content": "Weather in Paris?"}]}).encode()
    try:
        r = await client.send(client.build_request("POST", url, content=body,
                                                   headers=_headers("anthropic")))
        data = json.loads(r.content)
    except Exception as exc:
        return f"failed: {exc}"
    finally:
        await client.aclose()
    blocks = [b.get("type") for b in data.get("content") or [] if isinstance(b, dict)]
    if "tool_use" in blocks:
        use = next(b for b in data["content"] if b.get("type") == "tool_use")
        return f"tool_use block {use.get('name')}({json.dumps(use.get('input'))})"
    text = "".join(b.get("text", "") for b in data.get("content") or [] if isinstance(b, dict))
    return f"no tool_use: the call came back as text {text[-40:]!r}"


def bench(engine: Any, quick: bool) -> list[tuple[str, str]]:
    """Direct vs toolrules serve vs LiteLLM's proxy (OpenAI API) and vs LiteLLM and
    claude-code-router (Anthropic API), each when installed: req/s, added latency, TTFB,
    and whether a raw-text call reaches an Anthropic client as a tool_use block."""
    if not all(_has(m) for m in ("starlette", "uvicorn", "httpx", "httptools")):
        return [("serve", "skipped: pip install 'toolrules[serve]'")]
    n1, n16, warm, limit = (300, 3000, 2000, 3.0) if quick else (1000, 8000, 5000, 6.0)
    rounds = 3 if quick else 5
    up_port, our_port, lite_port, ccr_port, bare_port = (_port(), _port(), _port(), _port(),
                                                         _port())
    up_url = f"http://127.0.0.1:{up_port}"
    ours_url, lite_url = f"http://127.0.0.1:{our_port}", f"http://127.0.0.1:{lite_port}"
    ccr_url, bare_url = f"http://127.0.0.1:{ccr_port}", f"http://127.0.0.1:{bare_port}"
    targets: list[tuple[str, str, str]] = [("direct", "openai", f"{up_url}/v1/chat/completions")]
    pids: dict[str, int | None] = {}
    out: list[tuple[str, str]] = []
    checks: list[tuple[str, str]] = []
    py = sys.executable
    split = _cpus()
    proxy_cpu, rest = split if split else (None, None)
    with tempfile.TemporaryDirectory() as tmp, _own_cpus(rest), \
            _process([py, "-c", f"from toolrules.bench._serve import fake_upstream; "
                      f"fake_upstream({up_port})"], f"{up_url}/v1/models", 20,
                     cpus=rest) as up_ok:
        if not up_ok:
            return [("serve", "skipped: the fake upstream did not start")]
        ours = [py, "-c", "from toolrules.cli import main; main()", "serve", "--upstream",
                f"openai-compatible:{_MODEL}", "--base-url", f"{up_url}/v1",
                "--port", str(our_port), "--log-level", "info", "--api-key", _KEY]
        lite, ccr = _which(_LITELLM_CANDIDATES), _which(_ccr_candidates())
        cfg = Path(tmp) / "litellm.yaml"
        # an OpenAI-compatible server has chat completions: LiteLLM's /v1/messages would go
        # to the Responses API without this setting
        cfg.write_text(json.dumps({"model_list": [{"model_name": _MODEL, "litellm_params": {
            "model": f"openai/{_MODEL}", "api_base": f"{up_url}/v1", "api_key": "x"}}],
            "litellm_settings": {"use_chat_completions_url_for_anthropic_messages": True}}))
        ccr_home = Path(tmp) / "ccr"
        (ccr_home / ".claude-code-router").mkdir(parents=True)
        (ccr_home / ".claude-code-router" / "config.json").write_text(json.dumps({
            "PORT": ccr_port, "HOST": "127.0.0.1", "APIKEY": _KEY, "LOG": False,
            "Providers": [{"name": "upstream", "api_base_url": f"{up_url}/v1/chat/completions",
                           "api_key": "x", "models": [_MODEL]}],
            "Router": {"default": f"upstream,{_MODEL}"}}))
        with _process(ours, f"{ours_url}/health", 60, cpus=proxy_cpu) as ours_ok, \
                _process([py, "-c", f"from toolrules.bench._serve import pass_through; "
                          f"pass_through({bare_port}, {up_port})"], f"{bare_url}/health", 20,
                         cpus=proxy_cpu) as bare_ok, \
                (_process([lite, "--config", str(cfg), "--port", str(lite_port),
                           "--num_workers", "1"], f"{lite_url}/health/liveliness", 180,
                          env={"LITELLM_LOG": "ERROR", "LITELLM_MASTER_KEY": _KEY},
                          cpus=proxy_cpu)
                 if lite else _null()) as lite_ok, \
                (_process([ccr, "start"], f"{ccr_url}/health", 60, env={"HOME": str(ccr_home)},
                          cpus=proxy_cpu)
                 if ccr else _null()) as ccr_ok:
            pids.update({"toolrules serve": ours_ok.pid, "LiteLLM proxy": lite_ok.pid,
                         "claude-code-router": ccr_ok.pid, BARE: bare_ok.pid})
            if bare_ok:
                targets.append((BARE, "openai", f"{bare_url}/v1/chat/completions"))
            else:
                out.append((BARE, "did not start"))
            if ours_ok:
                targets += [("toolrules serve", "openai", f"{ours_url}/v1/chat/completions"),
                            ("toolrules serve", "anthropic", f"{ours_url}/v1/messages")]
            else:
                out.append(("toolrules serve", "did not start"))
            if lite_ok:
                targets += [("LiteLLM proxy", "openai", f"{lite_url}/chat/completions"),
                            ("LiteLLM proxy", "anthropic", f"{lite_url}/v1/messages")]
            else:
                out.append(("LiteLLM proxy", "did not start" if lite else
                            "not installed (pip install 'litellm[proxy]'): compare with the "
                            "issue's anchors"))
            if ccr_ok:
                targets.append(("claude-code-router", "anthropic", f"{ccr_url}/v1/messages"))
            else:
                out.append(("claude-code-router", "did not start" if ccr else
                            "not installed (npm install @musistudio/claude-code-router)"))
            # every target warmed first (claude-code-router's JIT, the proxies' caches),
            # then `rounds` interleaved rounds - each in another order - and the median
            runs: dict[tuple[str, str, int, bool], list[_Run]] = {}
            for name, api, url in targets:
                for stream in (False, True):
                    _run(_load(url, 16, stream, warm // 4 if name == BARE else warm, limit,
                               api))
            # each measurement is taken of every target in turn (seconds apart: a machine
            # that slows down for a while slows the figures compared alike)
            for k in range(rounds):
                order = targets[k % len(targets):] + targets[:k % len(targets)]
                for clients, count in ((1, n1), (16, n16)):
                    for stream in (False, True):
                        for name, api, url in order:
                            if name == BARE and clients > 1:  # a floor for latency only
                                continue
                            cpu0 = _group_cpu(pids.get(name))
                            r = _run(_load(url, clients, stream, count, limit, api))
                            cpu1 = _group_cpu(pids.get(name))
                            if cpu0 is not None and cpu1 is not None and r.count:
                                r.cpu = (cpu1 - cpu0) / r.count
                            runs.setdefault((name, api, clients, stream), []).append(r)
            results = {key: _median(rs) for key, rs in runs.items()}
            for name, api, url in targets:
                if api == "anthropic":
                    checks.append((f"{name}: raw-text call to an Anthropic client",
                                   _run(_tool_use(url))))
            if ours_ok:  # measured with its metrics on (the default): what a scrape saw
                checks.append(("toolrules serve: GET /metrics", _scraped(ours_url)))
    direct = {k[2:]: v for k, v in results.items() if k[0] == "direct"}
    out.insert(0, ("CPUs", f"each proxy on CPU {min(proxy_cpu)} alone; the upstream and the "
                   f"load on {','.join(map(str, sorted(rest)))}" if proxy_cpu and rest else
                   "one CPU: the proxies, the upstream and the load share it"))
    out.insert(1, ("method", f"each target warmed, then {rounds} rounds, each measurement "
                   "of every target in turn: medians"))
    for (name, api, clients, stream), r in results.items():
        mode = "stream" if stream else "non-stream"
        label = f"{name} ({api}), {clients:>2} client(s), {mode}"
        fig = f"{r.rps:8.0f} req/s  p50 {_ms(r.p50)}  p99 {_ms(r.p99)}"
        if stream and r.ttfb50 is not None:
            fig += f"  ttfb p50 {_ms(r.ttfb50)}"
        if name != "direct":
            d = direct[(clients, stream)]
            fig += f"  added p50 {_ms(r.p50 - d.p50)}"
            ttfb = _added(r, d, "ttfb50")
            if ttfb is not None:
                fig += f"  added ttfb {_ms(ttfb)}"
        if r.cpu is not None:
            fig += f"  cpu {_ms(r.cpu)}/req"
        fig += f"  errors {r.errors}/{r.count}"
        out.append((label, fig))
    return out + _ratios(results, direct) + checks


# The goals the proxy is held to beside each peer: at least twice its requests/s (16
# clients) and at most half its added latency (1 client; streams: to the first byte too).
GOAL_RPS = 2.0
GOAL_LATENCY = 0.5
# The floor beside them: bytes passed through on the same transport, nothing else done.
BARE = "bare pass-through"


def _ratios(results: dict[tuple[str, str, int, bool], _Run],
            direct: dict[tuple[int, bool], _Run]) -> list[tuple[str, str]]:
    """toolrules serve beside each peer on the same API, against the goals."""
    out = []
    for (name, api, clients, stream), peer in results.items():
        ours = results.get(("toolrules serve", api, clients, stream))
        if name in ("direct", "toolrules serve", BARE) or ours is None:
            continue
        mode = "stream" if stream else "non-stream"
        label = f"toolrules serve / {name} ({api}), {clients:>2} client(s), {mode}"
        if clients > 1:
            ratio = ours.rps / peer.rps if peer.rps else float("inf")
            out.append((label, f"req/s {ratio:.2f}x  (goal >= {GOAL_RPS:g}x: "
                        f"{'met' if ratio >= GOAL_RPS else 'not met'})"))
            continue
        d = direct[(clients, stream)]
        bare = results.get((BARE, "openai", clients, stream))
        for what, figure in (("added p50", "p50"), ("added ttfb", "ttfb50")):
            mine, theirs = _added(ours, d, figure), _added(peer, d, figure)
            if mine is None or theirs is None:  # a time to first byte: streams only
                continue
            floor = _added(bare, d, figure)
            ratio = mine / theirs if theirs > 0 else float("inf")
            out.append((f"{label}, {what}", f"{_ms(mine)} / {_ms(theirs)} = {ratio:.2f}  "
                        f"(goal <= {GOAL_LATENCY:g}: "
                        f"{'met' if ratio <= GOAL_LATENCY else 'not met'})"))
            if floor is not None:  # what the goal leaves once the machine's share is paid
                goal = theirs * GOAL_LATENCY
                out.append((f"{label}, {what}, beside the floor",
                            f"goal {_ms(goal)} - {BARE} {_ms(floor)} = "
                            f"{_ms(goal - floor)} for the proxy's own work; "
                            f"toolrules serve's: {_ms(mine - floor)}"))
    return out


def _added(run: _Run | None, direct: _Run, figure: str) -> float | None:
    """`run`'s `figure` (p50, ttfb50) less the direct call's; None when either lacks it."""
    mine = getattr(run, figure, None)
    base = getattr(direct, figure)
    return None if mine is None or base is None else float(mine - base)


def _median(runs: list[_Run]) -> _Run:
    """Each figure's median over the rounds (errors and counts: summed)."""
    def mid(values: list[float | None]) -> float | None:
        got = [v for v in values if v is not None]
        return statistics.median(got) if got else None

    return _Run(rps=statistics.median(r.rps for r in runs),
                p50=statistics.median(r.p50 for r in runs),
                p99=statistics.median(r.p99 for r in runs),
                ttfb50=mid([r.ttfb50 for r in runs]), errors=sum(r.errors for r in runs),
                count=sum(r.count for r in runs), cpu=mid([r.cpu for r in runs]))


def _scraped(url: str) -> str:
    import httpx

    try:
        r = httpx.get(f"{url}/metrics", timeout=10)
    except httpx.HTTPError as exc:
        return f"failed: {exc}"
    if r.status_code != 200:
        return f"off (HTTP {r.status_code})"
    total = 0.0
    for line in r.text.splitlines():
        if line.startswith("toolrules_requests_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return f"on: toolrules_requests_total {total:.0f}"


@contextmanager
def _own_cpus(cpus: set[int] | None) -> Iterator[None]:
    """This process (the load generator) on `cpus` for the block."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@contextmanager
def _null() -> Iterator[_Started]:
    yield _Started(False, None)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
