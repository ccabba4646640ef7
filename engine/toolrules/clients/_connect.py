"""`toolrules.connect()`: a model client for any provider the rules describe."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._http import HttpModel
    from ._local import LocalModel

# The embedded model is not a provider rule: it has no wire format, only weights.
LOCAL = "local"

__all__ = ["connect"]


def connect(provider: str, model: str | None = None, *, base_url: str | None = None,
            api_key: str | None = None, timeout: float | None = 120.0,
            connect_timeout: float | None = 10.0, max_retries: int | None = None,
            request_overrides: Mapping[str, Any] | None = None,
            headers: Mapping[str, str] | None = None, as_model: str | None = None,
            engine: Any = None, gguf: str | os.PathLike[str] | None = None,
            **local: Any) -> HttpModel | LocalModel:
    """A model client (`generate`, `stream`, and `*_sync` twins) for `model` at `provider`.

    `connect("local")` runs the embedded model in-process instead (extra
    `toolrules[local]`; rules/local.yaml): `gguf=PATH` runs other weights, `as_model` (or
    `model`) names the id whose rules apply, and LocalModel's options (n_ctx, threads,
    max_tokens, temperature, seed, constrained, chat_template, style) pass through.

    provider   a rules/providers id or alias (`openai-compatible`, `anthropic`, `ollama`
               ...); `"PROVIDER:MODEL"` works too when `model` is not given
    base_url   the server's address; default: the rule's env var, then its default
    api_key    default: the rule's env var (`OPENAI_API_KEY` for openai-compatible; a
               missing key is fine where the rule says so - local servers)
    timeout    seconds for each read/write (None: no limit); `connect_timeout` for the
               connection
    max_retries  retries of transient failures (default: rules/errors.yaml `clients`)
    request_overrides  merged into every request body (reserved fields are protected)
    headers    extra headers for every request
    as_model   the id whose capabilities and dialect apply, when the served name says
               nothing about the model (a local server's `model.gguf`)
    """
    if str(provider).strip().lower() == LOCAL:
        from ._local import LocalModel

        return LocalModel(gguf, as_model=as_model or model, engine=engine, **local)
    if gguf is not None or local:
        raise TypeError(f"gguf= and {', '.join(sorted(local)) or 'local options'} are for "
                        f"connect({LOCAL!r}) only")
    if model is None:
        provider, sep, rest = str(provider).partition(":")
        if not sep or not rest:
            raise ValueError("connect() needs a model: connect(provider, model=...) or "
                             "connect('PROVIDER:MODEL')")
        model = rest
    from ._http import HttpModel

    return HttpModel(provider, model, base_url=base_url, api_key=api_key, timeout=timeout,
                     connect_timeout=connect_timeout, max_retries=max_retries,
                     request_overrides=request_overrides, headers=headers, as_model=as_model,
                     engine=engine)
