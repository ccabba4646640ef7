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


class ProxyServer:
    """`with ProxyServer(config_text or upstream=...) as proxy:` ... `proxy.url`."""

    def __init__(self, *, config: str | None = None, upstream: str | None = None,
                 base_url: str | None = None, api_keys: tuple[str, ...] = (),
                 trace_dir: str | None = None, tmp: Path | None = None, engine: Any = None):
        self.engine = engine or toolrules.load()
        path = None
        if config is not None:
            assert tmp is not None
            path = tmp / "proxy.yaml"
            path.write_text(config, encoding="utf-8")
        self.config = load_config(self.engine, path, upstream=upstream, base_url=base_url)
        self.app = create_app(self.engine, self.config, api_keys=api_keys, trace_dir=trace_dir)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = uvicorn.Config(self.app, log_level="warning", access_log=False,
                             timeout_graceful_shutdown=5, lifespan="on")
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
