"""A model server with a prompt cache, scripted, on 127.0.0.1: the upstream of the tests of
cached-token usage and of routes with several servers.

POST /v1/chat/completions renders the request (tools, then each message) into a prompt of
4-character tokens and keeps its last few prompts, as a server's prompt cache does: the
longest common prefix with one of them is the answer's cached tokens. It answers
"<name>: <n>" (its name and how many requests it answered), streamed or not, and reports
usage in one of two styles:

- `llama`: what an older llama-server says - no `usage`, only `timings` (`prompt_n`:
  tokens evaluated, `cache_n`: tokens reused, `predicted_n`), on the answer or on a
  stream's last chunk; `stream_options` is not known;
- `openai`: `usage.prompt_tokens` (every prompt token), `prompt_tokens_details.
  cached_tokens`, `completion_tokens`, as OpenAI, vLLM and newer llama-servers say it; a
  stream's usage comes in a last chunk only when `stream_options.include_usage` asks.

GET /health answers 200 (503 while `loading`), GET /v1/models the model list. Runs in a
thread (`with CacheServer(...) as srv`) or as a process:
`python tests/cache_server.py --name A --style openai [--port N] [--delay S]`, which
prints `ready <port>` once it listens.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = 4          # characters per token
KEEP = 4           # prompts the cache keeps


def render(body: dict[str, Any]) -> str:
    """The prompt a request renders to: tools first, then each message."""
    out = [f"<tools>{json.dumps(body.get('tools') or [], sort_keys=True)}</tools>"]
    for m in body.get("messages") or []:
        content = m.get("content")
        text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
        calls = json.dumps(m.get("tool_calls"), sort_keys=True) if m.get("tool_calls") else ""
        out.append(f"<{m.get('role')}>{text}{calls}</{m.get('role')}>")
    return "".join(out) + "<assistant>"


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class CacheServer:
    def __init__(self, name: str, style: str = "openai", port: int = 0, delay: float = 0.0):
        assert style in ("llama", "openai")
        self.name = name
        self.style = style
        self.delay = delay
        self.loading = False
        self.cache: list[str] = []
        self.bodies: list[dict[str, Any]] = []
        self.reported: list[dict[str, int]] = []   # {prompt, cached, completion} per answer
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, data: Any) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == "/health":
                    if owner.loading:
                        self._json(503, {"error": {"code": 503, "message": "Loading model"}})
                    else:
                        self._json(200, {"status": "ok"})
                elif path == "/v1/models":
                    self._json(200, {"object": "list", "data": [
                        {"id": "cached-model", "object": "model", "created": 1}]})
                else:
                    self._json(404, {"error": {"code": 404, "message": "File Not Found"}})

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(size) or b"{}")
                if self.path.split("?")[0] != "/v1/chat/completions":
                    self._json(404, {"error": {"message": "File Not Found"}})
                    return
                if owner.loading:
                    self._json(503, {"error": {"code": 503, "message": "Loading model"}})
                    return
                if owner.delay:
                    time.sleep(owner.delay)
                text, counts = owner.answer(body)
                if body.get("stream"):
                    self._stream(body, text, counts)
                else:
                    self._json(200, {"id": "chatcmpl-c", "object": "chat.completion",
                                     "created": 1, "model": owner.name,
                                     "choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant",
                                                              "content": text}}],
                                     **owner.usage(counts)})

            def _stream(self, body: dict[str, Any], text: str, counts: dict[str, int]) -> None:
                def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
                    return {"id": "chatcmpl-c", "object": "chat.completion.chunk", "created": 1,
                            "model": owner.name, "choices": [{"index": 0, "delta": delta,
                                                              "finish_reason": finish}]}
                usage = owner.usage(counts)
                events = [chunk({"role": "assistant", "content": ""}),
                          chunk({"content": text[:3]}), chunk({"content": text[3:]}),
                          chunk({}, "stop")]
                if owner.style == "llama":
                    events[-1].update(usage)  # timings on the last chunk
                elif (body.get("stream_options") or {}).get("include_usage"):
                    events.append({"id": "chatcmpl-c", "object": "chat.completion.chunk",
                                   "created": 1, "model": owner.name, "choices": [], **usage})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for ev in [*(f"data: {json.dumps(e)}\n\n" for e in events), "data: [DONE]\n\n"]:
                    raw = ev.encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    def answer(self, body: dict[str, Any]) -> tuple[str, dict[str, int]]:
        prompt = render(body)
        with self.lock:
            best = max((common_prefix(prompt, p) for p in self.cache), default=0)
            self.cache = [*self.cache, prompt][-KEEP:]
            self.bodies.append(body)
            n = len(self.bodies)
            total = -(-len(prompt) // TOKEN)
            counts = {"prompt": total, "cached": min(best // TOKEN, total), "completion": 2}
            self.reported.append(counts)
        return f"{self.name}: {n}", counts

    def usage(self, counts: dict[str, int]) -> dict[str, Any]:
        if self.style == "llama":
            return {"timings": {"prompt_n": counts["prompt"] - counts["cached"],
                                "cache_n": counts["cached"], "predicted_n": counts["completion"],
                                "prompt_ms": 1.0, "predicted_ms": 1.0}}
        return {"usage": {"prompt_tokens": counts["prompt"],
                          "completion_tokens": counts["completion"],
                          "total_tokens": counts["prompt"] + counts["completion"],
                          "prompt_tokens_details": {"cached_tokens": counts["cached"]}}}

    def __enter__(self) -> CacheServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--style", default="openai", choices=["llama", "openai"])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--delay", type=float, default=0.0)
    args = ap.parse_args()
    srv = CacheServer(args.name, args.style, args.port, args.delay)
    print(f"ready {srv.port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        srv.httpd.serve_forever(poll_interval=0.05)
    sys.exit(0)


if __name__ == "__main__":
    main()
