"""Running the proxy for tests: a real uvicorn server on 127.0.0.1 in a thread, in front
of a scripted upstream (tests/wire_server.py)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

import toolrules
from toolrules.serve import create_app, load_config
from toolrules.serve._protocol import protocol


class ProxyServer:
    """`with ProxyServer(config_text or upstream=...) as proxy:` ... `proxy.url`."""

    def __init__(self, *, config: str | None = None, upstream: str | None = None,
                 base_url: str | None = None, api_keys: tuple[str, ...] = (),
                 trace_dir: str | None = None, tmp: Path | None = None, engine: Any = None,
                 **app_kw: Any):
        self.engine = engine or toolrules.load()
        path = None
        if config is not None:
            assert tmp is not None
            path = tmp / "proxy.yaml"
            path.write_text(config, encoding="utf-8")
        self.config = load_config(self.engine, path, upstream=upstream, base_url=base_url)
        self.app = create_app(self.engine, self.config, api_keys=api_keys, trace_dir=trace_dir,
                              **app_kw)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = uvicorn.Config(self.app, log_level="warning", access_log=False,
                             timeout_graceful_shutdown=5, lifespan="on",
                             http=protocol())  # the protocol `toolrules serve` runs on
        self.server = uvicorn.Server(cfg)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.run(self.server.serve(sockets=[self._sock]))

    def __enter__(self) -> ProxyServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the proxy did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)


# ---------------------------------------------------------------- shared by the SDK tests

def chat_reply(text: str = "ok") -> Any:
    """A whole chat-completions answer from the scripted upstream."""
    from wire_server import json_reply

    return json_reply({"id": "chatcmpl-up", "object": "chat.completion", "created": 1,
                       "model": "up", "choices": [{"index": 0, "finish_reason": "stop",
                                                   "message": {"role": "assistant",
                                                               "content": text}}]})


def an(proxy: ProxyServer) -> Any:
    """The official Anthropic SDK pointed at the proxy (no retries: a refusal shows)."""
    import anthropic

    return anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0, timeout=20)


def oa(proxy: ProxyServer) -> Any:
    """The official OpenAI SDK pointed at the proxy."""
    import openai

    return openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0, timeout=20)


def route_to(provider: str, model: str, base_url: str) -> str:
    """A proxy configuration with one route: `model` to `provider` at `base_url`, its key
    from TOOLRULES_TEST_UPSTREAM_KEY (the test sets it)."""
    return f"""
routes:
  - model: {model}
    upstream: {{provider: {provider}, model: {model}, base_url: {base_url},
                api_key_env: TOOLRULES_TEST_UPSTREAM_KEY}}
"""


def refusal(e: Any) -> dict[str, Any]:
    """The error object of a 400 refusal (either SDK's exception), checked for its type."""
    assert e.value.status_code == 400
    body = e.value.body
    err = body.get("error", body) if isinstance(body, dict) else body
    assert err["type"] == "invalid_request_error"
    return dict(err)


def openai_compatible_proxy(upstream: Any, **kw: Any) -> ProxyServer:
    """The proxy in front of the scripted upstream as an OpenAI-compatible server (client
    model names pass through)."""
    return ProxyServer(upstream="openai-compatible", base_url=upstream.url + "/v1", **kw)


def anthropic_proxy(upstream: Any, tmp: Path, monkeypatch: Any, **kw: Any) -> ProxyServer:
    """The proxy routing claude-sonnet-4-5 to the scripted upstream as Anthropic."""
    monkeypatch.setenv("TOOLRULES_TEST_UPSTREAM_KEY", "sk-test")
    return ProxyServer(config=route_to("anthropic", "claude-sonnet-4-5", upstream.url),
                       tmp=tmp, **kw)

