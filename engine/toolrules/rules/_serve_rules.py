"""Proxy configurations (kind "serve"): merging a configuration over the bundled
`default`, and lint's cross-checks - fronts that can be served, routes that name a
reachable upstream, strategies and emulation styles that exist, request overrides that
would touch reserved fields."""

from __future__ import annotations

from typing import Any

from ._lint import check_regex
from ._loader import RuleFile, RuleSet, merge

__all__ = ["DEFAULT_ID", "check_config", "check_rules", "merge_config"]

DEFAULT_ID = "default"




def merge_config(rs: RuleSet, data: dict[str, Any], own_id: str | None = None) -> dict[str, Any]:
    """A configuration over the bundled `default` one (itself when it is the default)."""
    from ._yaml import plain

    base = rs.get("serve", DEFAULT_ID)
    mine = plain(data)
    if own_id == DEFAULT_ID or base is None or not isinstance(base.data, dict):
        return mine
    return merge(plain(base.data), mine)


def _provider_ids(rs: RuleSet) -> dict[str, str]:
    """Every provider id and alias -> the rule id."""
    out: dict[str, str] = {}
    for rid, rf in rs.files.get("provider", {}).items():
        out[rid] = rid
        if isinstance(rf.data, dict):
            for alias in rf.data.get("aliases") or ():
                out.setdefault(str(alias).lower(), rid)
    return out


def _merged_provider(rs: RuleSet, rid: str) -> dict[str, Any] | None:
    """A provider's data with its `extends:` chain applied (None: a broken chain, which
    the provider checks report)."""
    from ._yaml import plain

    chain: list[dict[str, Any]] = []
    seen: set[str] = set()
    current: str | None = rid
    while current is not None:
        rf = rs.get("provider", current)
        if rf is None or current in seen or not isinstance(rf.data, dict):
            return None
        seen.add(current)
        chain.append(plain(rf.data))
        parent = rf.data.get("extends")
        current = parent if isinstance(parent, str) else None
    out: dict[str, Any] = {}
    for data in reversed(chain):
        out = merge(out, data)
    return out


def _hint(name: str, known: list[str]) -> str:
    from difflib import get_close_matches

    close = get_close_matches(name, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_config(rs: RuleSet, rep: Any, rf: RuleFile, data: dict[str, Any]) -> None:
    """Cross-checks of one configuration (`rf` locates the problems)."""
    merged = merge_config(rs, data, rf.id if rf.kind == "serve" else None)
    providers = _provider_ids(rs)
    own_fronts = data.get("fronts")
    for i, front in enumerate(merged.get("fronts") or ()):
        where = ("fronts", i) if isinstance(own_fronts, list) else ()
        rid = providers.get(str(front).lower())
        if rid is None:
            rep.error(rf, where, f"front {front!r} is not a provider" + _hint(
                str(front), sorted(providers)), "serve-front")
            continue
        front_rule = _merged_provider(rs, rid) or {}
        serve = front_rule.get("serve") or {}
        if not serve.get("path") or not serve.get("events"):
            rep.error(rf, where, f"provider {rid!r} has no `serve` section with a path and an "
                      "event grammar: it cannot be served to clients", "serve-front")
    table = (rs.table("schema_strategies") or {}).get("strategies") or {}
    emulation = rs.table("emulation") or {}
    styles = sorted({*(emulation.get("styles") or {}), *(emulation.get("trained") or {}),
                     "dialect"})
    names: dict[str, int] = {}
    for i, route in enumerate(data.get("routes") or ()):
        if not isinstance(route, dict):
            continue
        here = ("routes", i)
        name, pattern = route.get("model"), route.get("pattern")
        if name is None and pattern is None:
            rep.error(rf, here, "a route needs `model` (a public name) or `pattern` (a regex "
                      "over names)", "serve-route")
        if isinstance(name, str):
            if name in names:
                rep.error(rf, (*here, "model"), f"model {name!r} is routed twice (first in "
                          f"routes[{names[name]}]): the second route is never used",
                          "serve-route")
            names.setdefault(name, i)
        if pattern is not None:
            check_regex(rep, rf, (*here, "pattern"), pattern)
        upstream = route.get("upstream") or {}
        prov_name = upstream.get("provider")
        rid = providers.get(str(prov_name).lower()) if prov_name else None
        prov: dict[str, Any] = {}
        if not prov_name:
            rep.error(rf, (*here, "upstream"), "the upstream needs `provider` (a rules/"
                      "providers id)", "serve-upstream")
        elif rid is None:
            rep.error(rf, (*here, "upstream", "provider"), f"provider {prov_name!r} does not "
                      "exist" + _hint(str(prov_name), sorted(providers)), "serve-upstream")
        else:
            prov = _merged_provider(rs, rid) or {}
            if not (prov.get("http") or {}).get("path"):
                rep.error(rf, (*here, "upstream", "provider"), f"provider {rid!r} has no "
                          "`http` section: the proxy cannot reach it", "serve-upstream")
        _check_servers(rep, rf, (*here, "upstream"), upstream, rid, prov)
        tools = route.get("tools") or {}
        if tools.get("constrained") and rid is not None and not prov.get("constrained"):
            rep.error(rf, (*here, "tools", "constrained"), f"provider {rid!r} takes no "
                      "constraint (its rule has no `constrained:` section)",
                      "serve-constrained")
        strategy = tools.get("schema_strategy")
        if isinstance(strategy, str) and strategy != "none" and strategy not in table:
            rep.error(rf, (*here, "tools", "schema_strategy"), f"schema strategy {strategy!r} "
                      "is not defined in rules/schema_strategies.yaml" + _hint(
                          strategy, sorted(table)), "missing-strategy")
        style = tools.get("emulation_style")
        if isinstance(style, str) and style not in styles:
            rep.error(rf, (*here, "tools", "emulation_style"), f"emulation style {style!r} "
                      f"does not exist (known: {', '.join(styles)})", "serve-style")
        if tools.get("mode") == "native" and style is not None:
            rep.warning(rf, (*here, "tools", "emulation_style"), "mode `native` never "
                        "emulates: emulation_style has no effect", "serve-style")
        overrides = route.get("request_overrides") or {}
        reserved = set((prov.get("request") or {}).get("reserved") or ())
        for key in overrides:
            if key in reserved:
                rep.warning(rf, (*here, "request_overrides", key), f"{key!r} is reserved in "
                            f"{rid} requests: the override is ignored", "serve-reserved")


def _check_servers(rep: Any, rf: RuleFile, where: tuple[Any, ...], upstream: dict[str, Any],
                   rid: str | None, prov: dict[str, Any]) -> None:
    """A route's several servers: URLs, no base_url beside them, what the provider rule
    can check and pin."""
    import re

    servers = upstream.get("servers") or []
    if servers and upstream.get("base_url"):
        rep.error(rf, (*where, "base_url"), "give either `base_url` (one server) or "
                  "`servers` (several), not both", "serve-servers")
    seen: dict[str, int] = {}
    for j, url in enumerate(servers):
        if not isinstance(url, str):
            continue
        if not re.match(r"^https?://[^/\s]+", url):
            rep.error(rf, (*where, "servers", j), f"server {url!r} is not an http(s) URL "
                      "(a base URL such as http://10.0.0.5:8080/v1)", "serve-servers")
        key = url.rstrip("/")
        if key in seen:
            rep.error(rf, (*where, "servers", j), f"server {url!r} is listed twice (first "
                      f"as servers[{seen[key]}])", "serve-servers")
        seen.setdefault(key, j)
    several = len(seen) > 1
    for field in ("health", "balance_factor"):
        if upstream.get(field) is not None and not several:
            rep.warning(rf, (*where, field), f"`{field}` only matters for several `servers`: "
                        "with one server there is nowhere else to go", "serve-servers")
    if rid is None:
        return
    http = prov.get("http") or {}
    if several and not (http.get("health") or {}).get("path") and \
            not (http.get("models") or {}).get("path"):
        rep.warning(rf, (*where, "servers"), f"provider {rid!r} names no health check "
                    "(http.health) or model list (http.models): a server that went down is "
                    "tried again every health interval, on a real request",
                    "serve-servers")
    if upstream.get("slots") is not None and not (prov.get("request") or {}).get("slot"):
        rep.error(rf, (*where, "slots"), f"provider {rid!r} names no slot field "
                  "(request.slot in its rule): its servers cannot be told which slot to "
                  "use", "serve-servers")


def check_rules(rs: RuleSet, rep: Any, failed: set[tuple[str, str]]) -> None:
    """Every serve configuration of the rule set."""
    for rid, rf in sorted(rs.files.get("serve", {}).items()):
        if ("serve", rid) in failed or not isinstance(rf.data, dict):
            continue
        check_config(rs, rep, rf, rf.data)
