"""A small llama-server-like upstream on 127.0.0.1 for the chat-template tests: GET /props
says which template it renders (as llama-server does), POST /v1/chat/completions renders
the request through that template in the sandbox - a template that raises answers 500
with its message, as llama-server does - and answers with the next scripted raw text
(what a model wrote, with no tool-call parser on the server).

Kept small on purpose: the fuller llama-server-like upstream of the normalization tests
lives elsewhere."""

from __future__ import annotations

import contextlib
import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from toolrules.chat_template._render import TemplateRaised, render_chat_template


class PropsServer:
    """`with PropsServer(template, replies=[...]) as up:` ... `up.url`, `up.prompts`."""

    def __init__(self, template: str | None, *, bos: str = "", eos: str = "",
                 replies: list[str] | None = None, props: bool = True,
                 alias: str = "my-model.gguf"):
        self.template = template
        self.bos, self.eos = bos, eos
        self.replies: deque[str] = deque(replies or [])
        self.props = props
        self.alias = alias
        self.prompts: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.props_asked = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, data: Any) -> None:
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/props" and owner.props:
                    owner.props_asked += 1
                    self._send(200, {"chat_template": owner.template,
                                     "bos_token": owner.bos, "eos_token": owner.eos,
                                     "model_alias": owner.alias,
                                     "default_generation_settings": {"n_ctx": 4096}})
                else:
                    self._send(404, {"error": {"code": 404, "message": "File Not Found",
                                               "type": "not_found_error"}})

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                req = json.loads(self.rfile.read(size) or b"{}")
                owner.requests.append(req)
                messages = []
                for m in req.get("messages") or []:
                    m = dict(m)
                    calls = []
                    for c in m.get("tool_calls") or []:  # arguments reach templates as objects
                        fn = dict(c.get("function") or {})
                        with contextlib.suppress(TypeError, ValueError):
                            fn["arguments"] = json.loads(fn.get("arguments") or "{}")
                        calls.append({**c, "function": fn})
                    if calls:
                        m["tool_calls"] = calls
                    messages.append(m)
                try:
                    prompt = render_chat_template(owner.template or "", {
                        "messages": messages, "tools": req.get("tools") or None,
                        "add_generation_prompt": True, "bos_token": owner.bos,
                        "eos_token": owner.eos,
                        # llama-server passes chat_template_kwargs as template variables
                        **(req.get("chat_template_kwargs") or {})})
                except TemplateRaised as exc:
                    self._send(500, {"error": {"code": 500, "message": exc.message,
                                               "type": "server_error"}})
                    return
                owner.prompts.append(prompt)
                text = owner.replies.popleft() if owner.replies else "ok"
                self._send(200, {
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                    "model": owner.alias,
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5,
                              "total_tokens": 15}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> PropsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)
