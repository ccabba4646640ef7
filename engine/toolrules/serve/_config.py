"""The proxy's configuration: a rule of kind `serve` (bundled `rules/serve/default.yaml`,
overlays' `serve/*.yaml`, or `--config FILE`) merged over the default, validated like
every rule file (schema, cross-checks, `path:line:col` problems), compiled into routes.

A route maps public model names to an upstream (a provider rule, a model, a base URL,
a key's env var). Its tool options become an explicit capability override for the
model id whose rules apply - compiled into a route engine - so the same interpreter
that serves every other caller decides native or emulated, the prompt, the schema
strategy and validation: behaviour comes from rules and configuration, never from a
name in code.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._errors import CapabilityError, Problem, RuleError, ToolrulesError
from ..rules._loader import RuleFile, RuleSet
from ..rules._serve_rules import DEFAULT_ID, check_config, merge_config
from ._exchange import JsonTexts

__all__ = ["Route", "RouteTemplate", "RouteTools", "ServeConfig", "ServerSettings", "Upstream",
           "ask_template", "load_config"]

CATCH_ALL = ".*"


@dataclass(frozen=True)
class Upstream:
    provider: str
    model: str | None = None
    model_id: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    timeout: float | None = None
    connect_timeout: float | None = None
    max_retries: int | None = None
    servers: tuple[str, ...] = ()
    """Several servers of the same model (base URLs); empty: the one at `base_url`."""
    health_interval: float = 5.0
    """Seconds between two health checks of each of several servers."""
    health_timeout: float = 2.0
    """Seconds a health check may take."""
    balance_factor: float = 1.25
    """A new conversation's server may carry at most this many times the fair share of
    the requests in flight."""
    slots: int | None = None
    """Pin each conversation to one of this many slots of its server (the provider rule
    names the field: request.slot)."""


@dataclass(frozen=True)
class RouteTools:
    mode: str = "auto"
    emulation_style: str | None = None
    schema_strategy: str | None = None
    prompt_guidance: bool | None = None
    validation_retries: int | None = None
    text_fallback: bool | None = None
    constrained: bool = False


@dataclass(frozen=True)
class RouteTemplate:
    """What a route took from the chat template its upstream said it renders - or why it
    kept the rules' configuration."""

    url: str | None
    """Where the server was asked."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Capability fields derived from the template (turn_*, dialect, reasoning ...)."""
    sha256: str | None = None
    name: str | None = None
    """The served model's name or file, as the server said."""
    reason: str | None = None
    """Why the rules' configuration was kept (None: the template configured the route)."""
    source: str | None = field(default=None, repr=False, compare=False)
    """The template itself (what the proxy renders to see the prompts the server sees)."""
    bos_token: str = field(default="", repr=False, compare=False)
    eos_token: str = field(default="", repr=False, compare=False)

    def describe(self) -> str:
        if self.reason is not None:
            return f"chat template: the rules' configuration ({self.reason})"
        what = ", ".join(f"{k} {'/'.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
                         for k, v in self.fields.items())
        model = f" ({self.name})" if self.name else ""
        return (f"chat template from {self.url}{model}, sha256 {str(self.sha256)[:12]}: "
                f"{what or 'nothing to set'}")


@dataclass(frozen=True)
class Route:
    """Public name(s) -> upstream, with tool options. `engine` applies the options."""

    index: int
    name: str | None
    pattern: re.Pattern[str] | None
    upstream: Upstream
    tools: RouteTools = field(default_factory=RouteTools)
    request_overrides: dict[str, Any] = field(default_factory=dict)
    listed: bool = True
    engine: Any = None
    builtin_tools: str = "omit"
    """A tool entry the client's API rule may omit (a built-in tool the upstream cannot
    provide): `omit` leaves it out of the tools offered, reported; `refuse`: a 400."""
    template: RouteTemplate | None = None
    """What the upstream's own chat template configured (None: not asked)."""

    def matches(self, model: str) -> bool:
        if self.name is not None and model == self.name:
            return True
        return self.pattern is not None and self.pattern.search(model) is not None

    @property
    def passes_names(self) -> bool:
        """The client's model name goes upstream as it is (no `upstream.model`)."""
        return self.upstream.model is None

    def upstream_model(self, requested: str) -> str:
        """The model name sent upstream: the route's, or the client's passed through."""
        return self.upstream.model or requested

    def model_id(self, requested: str) -> str:
        """The id whose rules decide the upstream model's capability."""
        return self.upstream.model_id or self.upstream.model or requested

    def capability_overrides(self, engine: Any) -> dict[str, Any]:
        """The tool options as capability fields, over what the upstream's chat template
        configured (empty: the rules decide alone)."""
        t = self.tools
        out: dict[str, Any] = dict(self.template.fields) if self.template is not None else {}
        if t.mode == "native":
            out["native_tools"] = True
        elif t.mode == "emulate":
            out["native_tools"] = False
        if t.emulation_style is not None:
            table = engine.ruleset.table("emulation") or {}
            if t.emulation_style in (table.get("styles") or {}) or t.emulation_style == "dialect":
                out["emulation_style"] = t.emulation_style
            else:  # a trained format: the model's dialect, prompted in its own format
                out["emulation_style"] = "dialect"
                out["dialect"] = t.emulation_style
        if t.schema_strategy is not None:
            out["schema_strategy"] = None if t.schema_strategy == "none" else t.schema_strategy
        if t.prompt_guidance is not None:
            out["prompt_guidance"] = t.prompt_guidance
        if t.validation_retries is not None:
            out["validate_retry"] = t.validation_retries > 0
        if t.text_fallback is not None:
            out["text_fallback"] = t.text_fallback
        return out


@dataclass(frozen=True)
class ServerSettings:
    max_body_bytes: int = 32 << 20
    keep_alive: float = 15.0
    chars_per_token: float = 4.0
    api_keys_env: str | None = None
    timeout: float = 600.0
    connect_timeout: float = 10.0
    max_retries: int = 0
    builtin_tools: str = "omit"
    parse_timeout: float = 5.0
    models_cache: float = 30.0
    models_timeout: float = 5.0
    prefix_memory: float = 64.0
    metrics: bool = True
    ready_cache: float = 5.0
    ready_timeout: float = 2.0


@dataclass(frozen=True)
class ServeConfig:
    fronts: tuple[str, ...]
    server: ServerSettings
    routes: tuple[Route, ...]
    held_call: str
    source: str
    json_output: JsonTexts = field(default_factory=JsonTexts)
    """What the proxy writes to the upstream model about a JSON answer (`messages`)."""

    def route(self, model: str | None) -> Route | None:
        """The first route whose name or pattern matches `model`."""
        if not isinstance(model, str) or not model:
            return None
        for r in self.routes:
            if r.matches(model):
                return r
        return None

    def listed_models(self) -> list[str]:
        """The names the configuration lists (GET /v1/models adds what the upstreams of
        pass-through routes list)."""
        return [r.name for r in self.routes if r.name is not None and r.listed]


# ---------------------------------------------------------------- loading

def _config_file(path: Path, layer: int) -> RuleFile:
    from ..rules._yaml import YamlProblem, load_yaml

    rf = RuleFile(kind="serve", id=path.stem, path=path, display=os.path.relpath(path)
                  if path.is_absolute() else str(path), layer=layer, text="")
    try:
        rf.text = path.read_text(encoding="utf-8")
        rf.data, rf.yaml_warnings = load_yaml(rf.text)
    except OSError as exc:
        raise RuleError([Problem(str(path), 1, 1, "error",
                                 f"cannot read the configuration: {exc.strerror}",
                                 "file-read")]) from None
    except YamlProblem as exc:
        rf.yaml_problem = exc
    return rf


def _problems(rs: RuleSet, rf: RuleFile) -> list[Problem]:
    """Schema and cross-check problems of one configuration file."""
    from ..rules._lint import Reporter, schema_problems

    rep = Reporter(thorough=False)
    if rf.yaml_problem is not None:
        p = rf.yaml_problem
        return [Problem(rf.display, p.line, p.col, "error", p.message, p.check)]
    single = RuleSet(rs.layers, {"serve": {rf.id: rf}}, {}, {})
    failed = schema_problems(single, rep)
    if not failed and isinstance(rf.data, dict):
        check_config(rs, rep, rf, rf.data)
    return sorted(rep.problems, key=lambda p: (p.line, p.col, p.check))


def _route(index: int, data: dict[str, Any], server: ServerSettings) -> Route:
    up = data.get("upstream") or {}
    tools = data.get("tools") or {}
    pattern = data.get("pattern")
    servers = tuple(str(u).rstrip("/") for u in up.get("servers") or ())
    health = up.get("health") or {}
    return Route(
        index=index, name=data.get("model"),
        pattern=re.compile(pattern) if isinstance(pattern, str) else None,
        upstream=Upstream(
            provider=str(up["provider"]), model=up.get("model"), model_id=up.get("model_id"),
            # a fleet's first server answers what is asked once (its chat template)
            base_url=up.get("base_url") or (servers[0] if servers else None),
            api_key_env=up.get("api_key_env"),
            timeout=up.get("timeout", server.timeout),
            connect_timeout=up.get("connect_timeout", server.connect_timeout),
            max_retries=up.get("max_retries", server.max_retries),
            servers=servers if len(servers) > 1 else (),
            health_interval=float(health.get("interval", Upstream.health_interval)),
            health_timeout=float(health.get("timeout", Upstream.health_timeout)),
            balance_factor=float(up.get("balance_factor") or Upstream.balance_factor),
            slots=up.get("slots")),
        tools=RouteTools(
            mode=tools.get("mode") or "auto", emulation_style=tools.get("emulation_style"),
            schema_strategy=tools.get("schema_strategy"),
            prompt_guidance=tools.get("prompt_guidance"),
            validation_retries=tools.get("validation_retries"),
            text_fallback=tools.get("text_fallback"),
            constrained=bool(tools.get("constrained"))),
        request_overrides=dict(data.get("request_overrides") or {}),
        listed=bool(data.get("list", data.get("model") is not None)),
        builtin_tools=str(data.get("builtin_tools") or server.builtin_tools))


def ask_template(engine: Any, route: Route, ask: str | None) -> RouteTemplate | None:
    """The route's configuration from the chat template its upstream renders, where the
    provider rule says how to ask (http.chat_template) and the route does not say
    `chat_template: rules`. A server that does not say, or a template that does not
    render, keeps the rules' configuration, with the reason (logged)."""
    import logging

    from ..chat_template._render import TemplateRaised
    from ..clients._template import TemplateUnavailable, fetch_server_template
    from ..providers._transport import http_rules

    if ask == "rules":
        return None
    up = route.upstream
    log = logging.getLogger("toolrules.serve")
    where = f"route {route.name or route.index}"
    try:
        if http_rules(engine, up.provider).template_path is None:
            return None
    except CapabilityError:
        return None
    try:
        key = os.environ.get(up.api_key_env) if up.api_key_env else None
        # several servers of one model render one template: the first that says
        for i, url in enumerate(up.servers or (up.base_url,)):
            try:
                served = fetch_server_template(
                    engine, up.provider, url, api_key=key,
                    timeout=min(float(up.connect_timeout or 5.0), 5.0))
                break
            except TemplateUnavailable:
                if i + 1 == len(up.servers or (up.base_url,)):
                    raise
        report = engine.inspect_template(served.text, bos_token=served.bos_token,
                                         eos_token=served.eos_token, origin=served.origin)
    except TemplateUnavailable as exc:
        log.warning("%s: the upstream's chat template is unknown, the rules decide: %s",
                    where, exc)
        return RouteTemplate(exc.url, reason=str(exc))
    except TemplateRaised as exc:
        log.warning("%s: the upstream's chat template %s; the rules decide", where,
                    exc.message)
        return RouteTemplate(None, reason=f"its template does not render: {exc.message}")
    except ToolrulesError as exc:  # no base URL to ask, a template over the size limit
        log.warning("%s: the upstream's chat template is not used, the rules decide: %s",
                    where, exc)
        return RouteTemplate(None, reason=str(exc))
    derived = RouteTemplate(served.origin, report.capability, report.sha256, served.name,
                            source=served.text, bos_token=served.bos_token,
                            eos_token=served.eos_token)
    log.info("%s: %s", where, derived.describe())
    return derived


def route_engine(engine: Any, route: Route) -> Any:
    """The engine a route's requests use: the rule set plus the route's tool options as
    an explicit override for its model id (a pass-through route: for every id)."""
    from .._engine import Engine

    overrides = route.capability_overrides(engine)
    if not overrides:
        return engine
    rs: RuleSet = engine.ruleset
    entry: dict[str, Any] = {"set": overrides}
    if route.upstream.model_id or route.upstream.model:
        entry["id"] = route.upstream.model_id or route.upstream.model
    else:
        entry["pattern"] = CATCH_ALL
    # '~' sorts after every rule id: the route's word is the last one for its model
    rid = f"~serve-route-{route.index}"
    rf = RuleFile(kind="model", id=rid, path=Path(rid), display=f"serve route {route.index}",
                  layer=len(rs.layers), text="", data={"overrides": [entry]})
    files = {kind: dict(bucket) for kind, bucket in rs.files.items()}
    files.setdefault("model", {})[rid] = rf
    derived = RuleSet(rs.layers, files, rs.templates, rs.grammars, list(rs.replaced),
                      f"{rs.digest}:{rid}:{sorted(overrides.items())}")
    return Engine(derived)


def load_config(engine: Any, path: str | os.PathLike[str] | None = None, *,
                upstream: str | None = None, base_url: str | None = None) -> ServeConfig:
    """The proxy configuration: `path` (or the bundled default alone) merged over the
    default, plus a catch-all route for `upstream` (`PROVIDER[:MODEL]`, e.g. the CLI's
    --upstream). Raises RuleError listing every problem, `path:line:col` marked."""
    rs: RuleSet = engine.ruleset
    if path is not None:
        rf = _config_file(Path(path), len(rs.layers))
        problems = _problems(rs, rf)
        errors = [p for p in problems if p.level == "error"]
        if errors:
            raise RuleError(problems)
        data = merge_config(rs, rf.data, None)
        source = rf.display
    else:
        base = rs.get("serve", DEFAULT_ID)
        data = merge_config(rs, base.data if base is not None and isinstance(base.data, dict)
                            else {}, DEFAULT_ID)
        source = base.display if base is not None else "(built-in defaults)"
    srv = data.get("server") or {}
    server = ServerSettings(
        max_body_bytes=int(srv.get("max_body_bytes", ServerSettings.max_body_bytes)),
        keep_alive=float(srv.get("keep_alive", ServerSettings.keep_alive)),
        chars_per_token=float(srv.get("chars_per_token", ServerSettings.chars_per_token)) or 4.0,
        api_keys_env=srv.get("api_keys_env"),
        timeout=float(srv.get("timeout", ServerSettings.timeout)),
        connect_timeout=float(srv.get("connect_timeout", ServerSettings.connect_timeout)),
        max_retries=int(srv.get("max_retries", ServerSettings.max_retries)),
        builtin_tools=str(srv.get("builtin_tools") or ServerSettings.builtin_tools),
        parse_timeout=float(srv.get("parse_timeout", ServerSettings.parse_timeout)),
        models_cache=float(srv.get("models_cache", ServerSettings.models_cache)),
        models_timeout=float(srv.get("models_timeout", ServerSettings.models_timeout)),
        prefix_memory=float(srv.get("prefix_memory", ServerSettings.prefix_memory)),
        metrics=bool(srv.get("metrics", ServerSettings.metrics)),
        ready_cache=float(srv.get("ready_cache", ServerSettings.ready_cache)),
        ready_timeout=float(srv.get("ready_timeout", ServerSettings.ready_timeout)))
    route_data = [r for r in data.get("routes") or () if isinstance(r, dict)]
    if upstream:
        provider, _sep, model = upstream.partition(":")
        engine.provider_rules(provider)  # an unknown provider fails here, with the known ones
        route_data.append({"pattern": CATCH_ALL, "list": bool(model),
                           "upstream": {"provider": provider, "model": model or None,
                                        "base_url": base_url}})
        if model:  # the model is also listed under its own name
            route_data[-1]["model"] = model
    elif base_url:
        route_data = [{**r, "upstream": {**(r.get("upstream") or {}), "base_url": base_url}}
                      if not (r.get("upstream") or {}).get("base_url")
                      and not (r.get("upstream") or {}).get("servers") else r
                      for r in route_data]
    routes = []
    for i, rd in enumerate(route_data):
        route = _route(i, rd, server)
        asked = ask_template(engine, route, (rd.get("upstream") or {}).get("chat_template"))
        if asked is not None:
            route = replace(route, template=asked)
        routes.append(replace(route, engine=route_engine(engine, route)))
    messages = data.get("messages") or {}
    return ServeConfig(fronts=tuple(data.get("fronts") or ()), server=server,
                       routes=tuple(routes),
                       held_call=" ".join(str(messages.get("held_call") or "").split()),
                       source=source, json_output=JsonTexts(**{
                           k: " ".join(str(messages[m]).split())
                           for k, m in (("ask", "json_output"), ("retry", "json_retry"))
                           if messages.get(m)}))
