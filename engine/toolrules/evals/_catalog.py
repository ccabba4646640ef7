"""rules/eval.yaml as values: the offline catalog (scripted models per dialect), named live
models, model-filter presets, the strategy matrix and sampling profiles; the model filter
(comma-separated ids, providers or tags, `*` wildcards, `!` exclusions)."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EvalCatalog", "Profile", "Strategy", "Target", "catalog"]


@dataclass(frozen=True)
class Target:
    """A model to evaluate: an offline catalog entry (scripted) or a live client spec."""

    id: str
    model: str
    offline: bool
    dialect: str | None = None
    tags: tuple[str, ...] = ()
    entry: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    connect: str | None = None
    base_url: str | None = None

    @property
    def provider(self) -> str:
        if self.offline:
            return "scripted"
        spec = self.connect or ""
        return spec.partition(":")[0] if ":" in spec else spec

    def names(self) -> tuple[str, ...]:
        """What a filter token may match."""
        out = [self.id, self.model, self.provider, *self.tags]
        if self.dialect:
            out.append(self.dialect)
        if self.connect:
            out.append(self.connect)
        return tuple(out)


@dataclass(frozen=True)
class Strategy:
    """One layer of the matrix: capability overrides (flattened over what it extends)."""

    name: str
    description: str
    overrides: dict[str, Any]
    client: dict[str, Any]
    phase: str = ""
    loop: dict[str, Any] = field(default_factory=dict)
    loop_when: str = "always"

    def loop_settings(self, calls_expected: bool) -> dict[str, Any]:
        """The loop settings this strategy adds for a scenario."""
        if self.loop_when == "calls_expected" and not calls_expected:
            return {}
        return dict(self.loop)


@dataclass(frozen=True)
class Profile:
    name: str
    options: dict[str, Any]
    applies_to: tuple[str, ...] = ()

    def applies(self, target: Target) -> bool:
        if not self.applies_to:
            return True
        return any(fnmatch.fnmatchcase(n, p) for p in self.applies_to for n in target.names())


class EvalCatalog:
    """The eval table of a rule set."""

    def __init__(self, table: dict[str, Any]):
        self.table = table
        self.offline = [Target(e["id"], e["model"], True, e.get("dialect"),
                               tuple(e.get("tags") or ()), dict(e))
                        for e in table.get("offline") or ()]
        self.live = [Target(e["id"], _live_model(e["connect"]), False, None,
                            tuple(e.get("tags") or ()), dict(e), e["connect"],
                            e.get("base_url")) for e in table.get("live") or ()]
        self.presets: dict[str, list[str]] = {k: list(v) for k, v in
                                              (table.get("presets") or {}).items()}
        self.chars_per_token = float(table.get("chars_per_token") or 4)
        self.feedback_signal = str((table.get("signals") or {}).get("feedback") or "")

    # ------------------------------------------------------------ strategies and profiles

    def strategy_names(self) -> list[str]:
        return list(self.table.get("strategies") or {})

    def default_strategies(self) -> list[str]:
        return list(self.table.get("default_strategies") or self.strategy_names()[:1])

    def strategy(self, name: str) -> Strategy:
        table = self.table.get("strategies") or {}
        if name not in table:
            raise ValueError(f"no strategy {name!r}; strategies: {', '.join(table)}")
        chain = []
        cur: str | None = name
        while cur is not None and cur not in chain:
            chain.append(cur)
            cur = (table.get(cur) or {}).get("extends")
        overrides: dict[str, Any] = {}
        client: dict[str, Any] = {}
        loop: dict[str, Any] = {}
        when = "always"
        for n in reversed(chain):
            overrides.update(table[n].get("set") or {})
            client.update(table[n].get("client") or {})
            loop.update(table[n].get("loop") or {})
            when = str(table[n].get("loop_when") or when)
        spec = table[name]
        return Strategy(name, str(spec.get("description") or ""), overrides, client,
                        str(spec.get("phase") or ""), loop, when)

    def strategies(self, names: Sequence[str] | None) -> list[Strategy]:
        chosen = list(names) if names else self.default_strategies()
        if chosen == ["all"]:
            chosen = self.strategy_names()
        return [self.strategy(n) for n in chosen]

    def profiles(self, names: Sequence[str] | None) -> list[Profile]:
        table = self.table.get("profiles") or {"default": {"options": {}}}
        chosen = list(names) if names else ["default"]
        if chosen == ["all"]:
            chosen = list(table)
        out = []
        for n in chosen:
            if n not in table:
                raise ValueError(f"no sampling profile {n!r}; profiles: {', '.join(table)}")
            spec = table[n] or {}
            applies = spec.get("applies_to") or ()
            out.append(Profile(n, dict(spec.get("options") or {}),
                               tuple([applies] if isinstance(applies, str) else applies)))
        return out

    # ------------------------------------------------------------ the model filter

    def select(self, spec: str | None, base_url: str | None = None) -> list[Target]:
        """Targets for a --models filter. Empty: every offline entry. Tokens are entry ids,
        model ids, providers, dialects or tags (`*` wildcards), presets (`stable`, `all`),
        `!token` exclusions, or connect() specs for models not in the catalog
        (`openai-compatible:qwen3:8b`, `anthropic:claude-sonnet-4-5`, `local`)."""
        tokens = [t.strip() for t in (spec or "").split(",") if t.strip()]
        include = [t for t in tokens if not t.startswith("!")]
        exclude = [t[1:] for t in tokens if t.startswith("!")]
        chosen: list[Target] = []

        def add(t: Target) -> None:
            if t not in chosen:
                chosen.append(t)

        if not include:
            for t in self.offline:
                add(t)
        for token in include:
            for t in self._expand(token, base_url):
                add(t)
        out = [t for t in chosen if not any(self._hit(t, x) for x in self._flat(exclude))]
        if not out:
            raise ValueError(f"the model filter {spec!r} selects nothing; offline entries: "
                             f"{', '.join(t.id for t in self.offline)}; presets: "
                             f"{', '.join(self.presets)}")
        return out

    def _flat(self, tokens: list[str], depth: int = 0) -> list[str]:
        out: list[str] = []
        for t in tokens:
            if t in self.presets and depth < 8:
                out.extend(self._flat(self.presets[t], depth + 1))
            else:
                out.append(t)
        return out

    @staticmethod
    def _hit(target: Target, token: str) -> bool:
        return any(fnmatch.fnmatchcase(n, token) or n == token for n in target.names())

    def _expand(self, token: str, base_url: str | None) -> list[Target]:
        if token in self.presets:  # a preset's own names are matched, not expanded again
            out: list[Target] = []
            for t in self._flat(self.presets[token], 1):
                for hit in self._match(t, base_url):
                    if hit not in out:
                        out.append(hit)
            return out
        found = self._match(token, base_url)
        if not found:
            raise ValueError(f"the model filter token {token!r} matches no offline entry, "
                             "live entry, tag or dialect, and is not a connect() spec "
                             "(PROVIDER:MODEL or local)")
        return found

    def _match(self, token: str, base_url: str | None) -> list[Target]:
        if token == "*":
            return list(self.offline)
        hits = [t for t in [*self.offline, *self.live] if self._hit(t, token)]
        if hits:
            if base_url:
                hits = [Target(t.id, t.model, t.offline, t.dialect, t.tags, t.entry, t.connect,
                               base_url) if not t.offline else t for t in hits]
            return hits
        if token == "local" or ":" in token:
            return [Target(token, _live_model(token), False, None, ("live",), {}, token,
                           base_url)]
        return []


def _live_model(spec: str) -> str:
    provider, sep, model = spec.partition(":")
    return model if sep else provider


def catalog(engine: Any) -> EvalCatalog:
    table = engine.ruleset.table("eval")
    if not isinstance(table, dict):
        from .._errors import UnknownRuleError

        raise UnknownRuleError("rule table", "eval", ())
    return engine._cached("evals:catalog", lambda: EvalCatalog(table))
