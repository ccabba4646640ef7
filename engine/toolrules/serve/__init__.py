"""`toolrules serve`: a proxy that lets any client talk to any model server, and adds
working tool calling where the model or the server lacks it.

Clients speak their own API (the fronts: OpenAI chat completions, Anthropic messages,
OpenAI responses - provider rules with a `serve:` section); each request is routed by
model name (a `serve` rule: `load_config`) to an upstream that is called natively or
through emulation, and answered in the client's format, streamed or not. Starlette and
uvicorn come with the `serve` extra.
"""

from __future__ import annotations

from ._config import Route, RouteTools, ServeConfig, ServerSettings, Upstream, load_config
from ._run import ServeSettings, app_from_env, build_app, run

__all__ = ["Route", "RouteTools", "ServeConfig", "ServeSettings", "ServerSettings", "Upstream",
           "app_from_env", "build_app", "create_app", "load_config", "run"]


def create_app(engine: object, config: ServeConfig, **kw: object) -> object:
    """The ASGI app (see `toolrules.serve._app.create_app`)."""
    from ._app import create_app as make

    return make(engine, config, **kw)  # type: ignore[arg-type]
