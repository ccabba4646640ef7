"""Starting the proxy: one process (uvicorn), or several workers sharing the port.

Workers are separate processes, so the settings travel in the environment
(`TOOLRULES_SERVE_SETTINGS`, JSON) and each worker builds its app with `app_from_env()`
- the same factory gunicorn's uvicorn worker can call:

    gunicorn -w 4 -k uvicorn.workers.UvicornWorker 'toolrules.serve:app_from_env()'

Their metrics meet in PROMETHEUS_MULTIPROC_DIR (a fresh temporary directory unless one is
set; under gunicorn, set it yourself), so `GET /metrics` adds up every worker's figures.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["SETTINGS_ENV", "ServeSettings", "app_from_env", "build_app", "run"]

SETTINGS_ENV = "TOOLRULES_SERVE_SETTINGS"


@dataclass(frozen=True)
class ServeSettings:
    """What `toolrules serve` was asked for (no secrets: client keys stay in the
    environment variable the configuration names)."""

    config: str | None = None
    upstream: str | None = None
    base_url: str | None = None
    trace_dir: str | None = None
    rules: tuple[str, ...] = field(default_factory=tuple)


def _api_keys(env_name: str | None) -> list[str]:
    if not env_name:
        return []
    raw = os.environ.get(env_name, "")
    return [k.strip() for k in raw.split(",") if k.strip()]


def build_app(settings: ServeSettings, api_keys: Sequence[str] | None = None,
              engine: Any = None) -> Any:
    """The ASGI app for `settings` (client keys: `api_keys`, else the configuration's
    env var)."""
    from .._engine import load
    from ._app import create_app
    from ._config import load_config

    engine = engine or load(paths=list(settings.rules))
    config = load_config(engine, settings.config, upstream=settings.upstream,
                         base_url=settings.base_url)
    keys = list(api_keys) if api_keys else _api_keys(config.server.api_keys_env)
    return create_app(engine, config, api_keys=keys, trace_dir=settings.trace_dir)


def app_from_env() -> Any:
    """The app of a worker process: settings from TOOLRULES_SERVE_SETTINGS."""
    raw = os.environ.get(SETTINGS_ENV)
    data = json.loads(raw) if raw else {}
    _logging(str(data.pop("log_level", "info")))
    data["rules"] = tuple(data.get("rules") or ())
    app = build_app(ServeSettings(**data))
    _settle()
    return app


def _settle() -> None:
    """What a long-lived server does once its rules are loaded: the objects that stay for
    its life (rules, compiled expressions, templates - tens of thousands) are left out of
    the garbage collector's full passes, which would otherwise walk all of them again and
    again (a pause of tens of ms, a few percent of the CPU under load)."""
    gc.collect()
    gc.freeze()


def _logging(level: str) -> None:
    from ._app import PlainLines

    handler = PlainLines()
    for name in ("toolrules.serve", "toolrules.serve.access"):
        logger = logging.getLogger(name)
        logger.setLevel(getattr(logging, level.upper(), logging.INFO))
        if not logger.handlers:
            logger.addHandler(handler)
        logger.propagate = False


def run(settings: ServeSettings, *, host: str = "127.0.0.1", port: int = 8080, workers: int = 1,
        api_keys: Sequence[str] | None = None, log_level: str = "info",
        graceful_timeout: float = 30.0, ready: Callable[[], Any] | None = None) -> None:
    """Serve until SIGINT/SIGTERM: new connections stop, requests in flight (streams too)
    finish within `graceful_timeout` seconds."""
    import importlib.util

    import uvicorn

    _logging(log_level)
    from ._protocol import protocol

    fast = {"loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
            "http": protocol()}
    # proxy_headers off: nothing here reads the client's address (X-Forwarded-For would
    # only be parsed for it, on every request)
    common = dict(host=host, port=port, access_log=False, log_level=log_level,
                  timeout_graceful_shutdown=int(graceful_timeout), server_header=False,
                  proxy_headers=False, **fast)
    if workers > 1:
        os.environ[SETTINGS_ENV] = json.dumps({**asdict(settings), "log_level": log_level,
                                               "rules": list(settings.rules)})
        # the workers' metrics meet in one directory; a scrape adds them up
        from ._metrics import MULTIPROC_ENV

        own = None
        if not os.environ.get(MULTIPROC_ENV):
            own = os.environ[MULTIPROC_ENV] = tempfile.mkdtemp(prefix="toolrules-metrics-")
        if ready is not None:
            ready()
        try:
            uvicorn.run("toolrules.serve._run:app_from_env", factory=True, workers=workers,
                        **common)  # type: ignore[arg-type]
        finally:
            if own is not None:
                shutil.rmtree(own, ignore_errors=True)
                os.environ.pop(MULTIPROC_ENV, None)
        return
    app = build_app(settings, api_keys)
    _settle()
    if ready is not None:
        ready()
    uvicorn.run(app, **common)  # type: ignore[arg-type]
