"""Asking a model server which chat template it renders (where its provider rule says how:
`http.chat_template`, e.g. llama-server's GET /props) - for `toolrules serve`, which
configures a route from the template, and `toolrules inspect --server`.

One small synchronous GET with a short timeout (it runs once, at start); the reply is
untrusted: its size is capped and only the fields the rule names are read.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from .._errors import CapabilityError
from ..chat_template._inspect import TemplateSource

__all__ = ["TemplateUnavailable", "fetch_server_template"]

_MAX_REPLY = 16 << 20
_LOOPBACK = ("127.", "localhost", "::1", "[::1]")


class TemplateUnavailable(CapabilityError):
    """The server did not say which chat template it renders (no such endpoint, no
    answer, no template in the reply). `url` is where it was asked (None: its provider
    rule says no place to ask)."""

    def __init__(self, message: str, url: str | None):
        super().__init__(message)
        self.url = url


def fetch_server_template(engine: Any, provider: str, base_url: str | None, *,
                          api_key: str | None = None, timeout: float = 5.0
                          ) -> TemplateSource:
    """Ask the server at `base_url` (a `provider` rule's base URL, /v1 or not) for its
    chat template (origin: the URL asked; name: the served model's name or file, when the
    server says). Raises TemplateUnavailable saying what was asked and what to do."""
    from ..providers._transport import http_rules

    rules = http_rules(engine, provider)
    base = rules.resolve_base(base_url)
    url = rules.template_url(base)
    if url is None:
        raise TemplateUnavailable(f"provider {provider!r} says no place to ask a server for "
                                  "its chat template (no http.chat_template in its rule)", None)
    headers = {"Accept": "application/json", **rules.headers,
               **rules.auth_headers(rules.key(api_key))}
    request = urllib.request.Request(url, headers=headers, method="GET")
    host = urlsplit(url).hostname or ""
    handlers = [urllib.request.ProxyHandler({})] if host.startswith(_LOOPBACK) else []
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(request, timeout=timeout) as reply:
            raw = reply.read(_MAX_REPLY + 1)
    except urllib.error.HTTPError as exc:
        hint = ("the server has no such endpoint (not every server says which template it "
                "renders)" if exc.code == 404 else
                "pass the upstream's key (its rule's env var)" if exc.code in (401, 403)
                else "the server failed")
        raise TemplateUnavailable(f"GET {url}: HTTP {exc.code}: {hint}", url) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TemplateUnavailable(f"GET {url}: no answer ({reason}); is the server running "
                                  "at that address?", url) from None
    if len(raw) > _MAX_REPLY:
        raise TemplateUnavailable(f"GET {url}: the reply is over {_MAX_REPLY >> 20} MB", url)
    try:
        data = json.loads(raw.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as exc:
        raise TemplateUnavailable(f"GET {url}: the reply is not JSON ({exc.msg})", url) from None
    found = rules.template_reply(data)
    if "template" not in found:
        raise TemplateUnavailable(f"GET {url}: the reply names no chat template (where "
                                  "the provider rule's http.chat_template looks)", url)
    return TemplateSource(found["template"], url, found.get("bos_token", ""),
                          found.get("eos_token", ""), found.get("name"))
