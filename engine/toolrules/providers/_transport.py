"""Transport facts of a provider rule (`http:`): where requests go, how the key travels,
how a stream is asked for and framed, where an error body keeps the provider's message.

Pure data and string work - no HTTP library here; `toolrules.clients` sends the
requests. Nothing here knows a provider: every fact comes from rules/providers/*.yaml.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from .._errors import CapabilityError, ParseError
from ..rules._loader import RuleSet
from ._rules import Expr, merged_sections

__all__ = ["AUTH_KINDS", "FRAMINGS", "HttpRules", "check_rules", "compile_http", "http_rules"]

AUTH_KINDS = ("header", "query", "aws-sigv4", "none")
FRAMINGS = ("sse", "ndjson", "aws-eventstream")
PLACEHOLDERS = ("model", "region")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list):
        return tuple(v for v in value if isinstance(v, str) and v)
    return ()


def first_env(names: tuple[str, ...], environ: Mapping[str, str] | None = None) -> str | None:
    """The value of the first variable in `names` that is set and not blank."""
    env = os.environ if environ is None else environ
    for name in names:
        value = env.get(name)
        if value and value.strip():
            return value.strip()
    return None


@dataclass(frozen=True)
class HttpRules:
    """One provider's `http:` section, compiled (its `extends:` chain merged)."""

    provider: str
    base_url: str | None
    base_url_env: tuple[str, ...]
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    omit: tuple[str, ...]
    region_env: tuple[str, ...]
    region_default: str | None
    auth_kind: str
    auth_header: str | None
    auth_scheme: str | None
    auth_param: str | None
    auth_env: tuple[str, ...]
    auth_optional: bool
    auth_service: str | None
    auth_extra: str | None
    stream_body: dict[str, Any]
    stream_path: str | None
    stream_query: dict[str, str]
    framing: str | None
    stream_error: Expr | None
    error_message: Expr | None
    error_type: Expr | None
    retry_after: tuple[str, ...]
    retry_delay: Expr | None
    models_path: str | None = None
    models_list: Expr | None = None
    placeholders: frozenset[str] = field(default=frozenset())
    template_path: str | None = None
    """GET path (from the server root) of the server's chat template (http.chat_template)."""
    template_fields: tuple[tuple[str, Expr], ...] = ()
    """(template | bos_token | eos_token | name, expression over the reply)."""
    health_path: str | None = None
    """GET path (from the server root) that says whether the server can take requests."""

    # ------------------------------------------------------------ where to

    def region(self, environ: Mapping[str, str] | None = None) -> str | None:
        return first_env(self.region_env, environ) or self.region_default

    def resolve_base(self, base_url: str | None = None,
                     environ: Mapping[str, str] | None = None) -> str:
        """The base URL: the caller's, else the env var's, else the rule's default."""
        base = base_url or first_env(self.base_url_env, environ) or self.base_url
        if not base:
            hint = (f" or set {' / '.join(self.base_url_env)}" if self.base_url_env else "")
            raise CapabilityError(f"provider {self.provider!r} has no default address: pass "
                                  f"base_url=...{hint}")
        if "://" not in base:  # host:port, as some servers' own variables hold it
            base = "http://" + base
        if "{region}" in base:
            region = self.region(environ)
            if not region:
                raise CapabilityError(f"provider {self.provider!r} needs a region: set "
                                      f"{' / '.join(self.region_env) or 'its region'}")
            base = base.replace("{region}", region)
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise CapabilityError(f"base URL {_safe(base)!r} is not an http(s) URL")
        return base.rstrip("/")

    def url(self, base: str, model: str | None, *, stream: bool = False,
            environ: Mapping[str, str] | None = None) -> str:
        """The full request URL without the key (auth is added by the client)."""
        path = self.stream_path if stream and self.stream_path else self.path
        if "{" in path:  # placeholders: the model, the region
            if "{model}" in path and not model:
                raise CapabilityError(f"provider {self.provider!r} needs a model for its URL")
            values = {"model": quote(model or "", safe=""),
                      "region": self.region(environ) or ""}
            path = _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), path)
        if path and not path.startswith("/"):
            path = "/" + path
        if not self.query and not (stream and self.stream_query):
            return base + path
        query = dict(self.query)
        if stream:
            query.update(self.stream_query)
        return base + path + ("?" + urlencode(query) if query else "")

    def models_url(self, base: str) -> str | None:
        """Where the provider lists its models (GET), or None when its rule says nowhere."""
        if not self.models_path:
            return None
        path = self.models_path if self.models_path.startswith("/") else "/" + self.models_path
        return base + path

    def read_models(self, data: Any) -> list[dict[str, Any]]:
        """The models in a listing answer: [{id, created?, created_at?, display_name?}]
        (entries without a string id are skipped)."""
        if self.models_list is None:
            return []
        found = _search(self.models_list, data)
        out = []
        for item in found if isinstance(found, list) else ():
            if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"]:
                out.append({k: v for k, v in item.items()
                            if k in ("id", "created", "created_at", "display_name")
                            and v is not None})
        return out

    def template_url(self, base: str) -> str | None:
        """Where the server says which chat template it renders: the rule's path from the
        server root (`base` without a trailing API version such as /v1). None: the rule
        says no such place."""
        return _from_root(base, self.template_path)

    def health_url(self, base: str) -> str | None:
        """Where to ask whether the server can take requests: the rule's `http.health`
        path from the server root, else the model list; None: the rule says neither."""
        return _from_root(base, self.health_path) or self.models_url(base)

    def template_reply(self, data: Any) -> dict[str, str]:
        """The template's source, bos/eos tokens and the model's name in a reply (the ones
        found, as text)."""
        out: dict[str, str] = {}
        for key, expr in self.template_fields:
            value = _search(expr, data) if isinstance(data, (dict, list)) else None
            if isinstance(value, str) and value:
                out[key] = value
        return out

    # ------------------------------------------------------------ the key

    def key(self, api_key: str | None = None, environ: Mapping[str, str] | None = None
            ) -> str | None:
        """The caller's key, else the first env var that holds one."""
        if api_key:
            return api_key
        return first_env(self.auth_env, environ)

    def missing_key_message(self) -> str:
        where = " or ".join(self.auth_env)
        return (f"no API key for provider {self.provider!r}: pass api_key=..."
                + (f" or set {where}" if where else ""))

    def needs_key(self) -> bool:
        return self.auth_kind in ("header", "query") and not self.auth_optional

    def auth_headers(self, key: str | None) -> dict[str, str]:
        if key is None or self.auth_kind not in ("header", "aws-sigv4") or not self.auth_header:
            return {}
        return {self.auth_header: f"{self.auth_scheme} {key}" if self.auth_scheme else key}

    def auth_query(self, key: str | None) -> dict[str, str]:
        if key is None or self.auth_kind != "query" or not self.auth_param:
            return {}
        return {self.auth_param: key}

    # ------------------------------------------------------------ bodies

    def http_body(self, body: dict[str, Any], stream: bool) -> dict[str, Any]:
        """The request body as sent: `omit` fields out, the stream flags in."""
        out = {k: v for k, v in body.items() if k not in self.omit}
        if stream and self.stream_body:
            out = _merge(out, self.stream_body)
        return out

    def error_text(self, data: Any) -> str | None:
        """The provider's message in an error body (parsed JSON) or None."""
        if self.error_message is None or not isinstance(data, (dict, list)):
            return None
        return _text(_search(self.error_message, data))

    def error_kind(self, data: Any) -> str | None:
        if self.error_type is None or not isinstance(data, (dict, list)):
            return None
        return _text(_search(self.error_type, data))

    def stream_failure(self, event: Any) -> str | None:
        """The provider's message when a stream event reports a failure, else None."""
        if self.stream_error is None or not isinstance(event, dict):
            return None
        value = _search(self.stream_error, event)
        if value in (None, False, "", [], {}):
            return None
        return _text(value) or "the provider reported an error in the stream"

    def delay_in_body(self, data: Any) -> float | None:
        """A wait the error body asks for ('46s', '1.5s', 30), in seconds."""
        if self.retry_delay is None or not isinstance(data, (dict, list)):
            return None
        return parse_seconds(_search(self.retry_delay, data))


# ---------------------------------------------------------------- helpers

def _search(expr: Expr, data: Any) -> Any:
    try:
        return expr(data)
    except ParseError:
        return None


def _text(value: Any) -> str | None:
    import json

    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _from_root(base: str, path: str | None) -> str | None:
    """`path` from the server root: `base` without a trailing API version (/v1)."""
    if not path:
        return None
    root = re.sub(r"/v\d+(?:beta\d*|alpha\d*)?/?$", "", base.rstrip("/"))
    return root + (path if path.startswith("/") else "/" + path)


def _safe(url: str) -> str:
    """A URL without its query string (which may carry a key)."""
    return url.split("?", 1)[0]


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*$")


def parse_seconds(value: Any) -> float | None:
    """Seconds from 30, '30', '1.5s', '250ms'; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value >= 0 else None
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            n = float(m.group(1))
            return n / 1000.0 if m.group(2) == "ms" else n
    return None


def compile_http(data: dict[str, Any], provider: str) -> HttpRules | None:
    """A merged provider rule's `http:` section, compiled; None when it has none."""
    http = data.get("http")
    if not isinstance(http, dict) or not http.get("path"):
        return None
    w = f"provider {provider} http"
    auth = http.get("auth") or {}
    stream = http.get("stream") or {}
    errors = http.get("errors") or {}
    region = http.get("region") or {}
    models = http.get("models") or {}

    def expr(value: Any, where: str) -> Expr | None:
        return Expr(value, f"{w}.{where}") if isinstance(value, str) and value else None

    texts = [str(http.get("path") or ""), str(stream.get("path") or ""),
             str(http.get("base_url") or "")]
    found = http.get("chat_template")
    chat: dict[str, Any] = found if isinstance(found, dict) else {}
    template_fields = tuple((k, e) for k in ("template", "bos_token", "eos_token", "name")
                            if (e := expr(chat.get(k), f"chat_template.{k}")) is not None)
    return HttpRules(
        provider=provider,
        base_url=http.get("base_url"),
        base_url_env=_names(http.get("base_url_env")),
        path=str(http["path"]),
        query={str(k): str(v) for k, v in (http.get("query") or {}).items()},
        headers={str(k): str(v) for k, v in (http.get("headers") or {}).items()},
        omit=tuple(http.get("omit") or ()),
        region_env=_names(region.get("env")),
        region_default=region.get("default"),
        auth_kind=auth.get("kind", "header" if auth.get("header") else "none"),
        auth_header=auth.get("header"),
        auth_scheme=auth.get("scheme"),
        auth_param=auth.get("param"),
        auth_env=_names(auth.get("env")),
        auth_optional=bool(auth.get("optional")),
        auth_service=auth.get("service"),
        auth_extra=auth.get("extra"),
        stream_body=dict(stream.get("body") or {}),
        stream_path=stream.get("path"),
        stream_query={str(k): str(v) for k, v in (stream.get("query") or {}).items()},
        framing=stream.get("framing"),
        stream_error=expr(stream.get("error"), "stream.error"),
        error_message=expr(errors.get("message"), "errors.message"),
        error_type=expr(errors.get("type"), "errors.type"),
        retry_after=tuple(h.lower() for h in (errors.get("retry_after") or ["retry-after"])),
        retry_delay=expr(errors.get("retry_delay"), "errors.retry_delay"),
        models_path=models.get("path"),
        models_list=expr(models.get("list"), "models.list"),
        placeholders=frozenset(m for t in texts for m in _PLACEHOLDER.findall(t)),
        template_path=chat.get("path") if chat.get("template") else None,
        template_fields=template_fields,
        health_path=(http.get("health") or {}).get("path"),
    )


def http_rules(engine: Any, provider: str) -> HttpRules:
    """The compiled `http:` facts of `provider` (an id or alias), cached per engine."""
    prov = engine.provider_rules(provider)
    cache: dict[str, HttpRules | None] = engine._cached("provider_http", dict)
    if prov.id not in cache:
        cache[prov.id] = compile_http(prov.data, prov.id)
    hit = cache[prov.id]
    if hit is None:
        raise CapabilityError(f"provider {prov.id!r} has no `http` rules (base URL, path, "
                              "auth): it cannot be connected to; add them to its rule file")
    return hit


# ---------------------------------------------------------------- lint

def check_rules(rs: RuleSet, rep: Any, failed: set[tuple[str, str]]) -> None:
    """Cross-checks of `http:`: placeholders, what each auth kind needs, framings a
    stream needs, and a complete section once `extends:` is merged."""
    providers = rs.files.get("provider", {})
    for rid, rf in sorted(providers.items()):
        if ("provider", rid) not in failed and isinstance(rf.data, dict) and \
                isinstance(rf.data.get("http"), dict):
            _check_own(rep, rf, rf.data["http"])
    for rid, rf, merged, http, where in merged_sections(rs, failed, "http"):
        if not http.get("path"):
            rep.error(rf, where, f"provider {rid!r} has `http` but no `http.path` (and "
                      "inherits none)", "http-incomplete")
            continue
        auth = http.get("auth") or {}
        kind = auth.get("kind", "header" if auth.get("header") else "none")
        needs = {"header": ("header",), "query": ("param",),
                 "aws-sigv4": ("service", "extra")}.get(kind, ())
        for key in needs:
            if not auth.get(key):
                rep.error(rf, where, f"auth kind {kind!r} needs `http.auth.{key}` (and "
                          "inherits none)", "http-auth")
        texts = [str(http.get("base_url") or ""), str(http.get("path") or ""),
                 str((http.get("stream") or {}).get("path") or "")]
        if any("{region}" in t for t in texts) and not (http.get("region") or {}).get("default") \
                and not (http.get("region") or {}).get("env"):
            rep.error(rf, where, "`{region}` is used but `http.region` gives no env var or "
                      "default", "http-placeholder")
        chat = http.get("chat_template")
        if isinstance(chat, dict):
            for key in ("path", "template"):
                if not chat.get(key):
                    rep.error(rf, where, f"`http.chat_template` needs `{key}` (and inherits "
                              "none)", "http-incomplete")
        stream = http.get("stream") or {}
        if (merged.get("stream") or {}).get("events") and not stream.get("framing"):
            rep.error(rf, where, f"provider {rid!r} has stream events but no "
                      "`http.stream.framing`", "http-incomplete")
        models = http.get("models") or {}
        if models and not (models.get("path") and models.get("list")):
            missing = "path" if not models.get("path") else "list"
            rep.error(rf, where, f"`http.models` needs `{missing}` too (and inherits none): "
                      "where the models are listed and how to read them", "http-incomplete")


def _check_own(rep: Any, rf: Any, http: dict[str, Any]) -> None:
    for key, value in (("base_url", http.get("base_url")), ("path", http.get("path")),
                       ("stream.path", (http.get("stream") or {}).get("path"))):
        if not isinstance(value, str):
            continue
        for name in _PLACEHOLDER.findall(value):
            if name not in PLACEHOLDERS:
                rep.error(rf, ("http", *key.split(".")), f"unknown placeholder {{{name}}} "
                          f"(known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)})",
                          "http-placeholder")
    base = http.get("base_url")
    if isinstance(base, str) and not re.match(r"^https?://[^/]", base):
        rep.error(rf, ("http", "base_url"), f"base_url {base!r} is not an http(s) URL",
                  "http-base-url")
    for key, value in (("path", http.get("path")),
                       ("models.path", (http.get("models") or {}).get("path")),
                       ("health.path", (http.get("health") or {}).get("path"))):
        if isinstance(value, str) and value and not value.startswith("/"):
            rep.error(rf, ("http", *key.split(".")), f"{key} {value!r} must start with '/'",
                      "http-path")
