"""Running the evaluation: targets x scenarios x strategies x profiles x trials, each run
a real ToolLoop against a fresh fixture workspace and the scenario's tools.

A strategy is capability overrides (rules/eval.yaml): the run's engine is the rule set
plus one generated model-override file (`<eval>`), applied after every family rule, so
the loop, the clients, the schema pipeline and the prompts all see the strategy's
capability. Engines are built once per (entry, strategy) and reused.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._types import Message, Tool
from ._catalog import Profile, Strategy, Target, catalog
from ._metrics import RunRecord, events_for
from ._scenarios import Scenario, load_scenarios
from ._scripted import ScriptedPersona

__all__ = ["EvalPlan", "Unit", "auto_jobs", "derived_engine", "plan", "run_plan", "run_unit"]


@dataclass(frozen=True)
class Unit:
    """One model under one strategy and profile: the scenarios it runs, trials each."""

    target: Target
    strategy: Strategy
    profile: Profile
    scenarios: tuple[str, ...]
    trials: int


@dataclass
class EvalPlan:
    units: list[Unit]
    scenarios: list[Scenario]
    rule_paths: tuple[str, ...] = ()
    trace_dir: str | None = None
    runs: int = field(init=False)

    def __post_init__(self) -> None:
        self.runs = sum(len(u.scenarios) * u.trials for u in self.units)


def plan(engine: Any, models: str | None = None, scenarios: Sequence[str] | None = None,
         strategies: Sequence[str] | None = None, profiles: Sequence[str] | None = None,
         trials: int = 1, base_url: str | None = None, rule_paths: Sequence[str] = (),
         trace_dir: str | None = None) -> EvalPlan:
    """What `toolrules eval` will run (raises ValueError naming a bad filter)."""
    cat = catalog(engine)
    targets = cat.select(models, base_url)
    chosen = load_scenarios(engine, scenarios)
    strats = cat.strategies(strategies)
    profs = cat.profiles(profiles)
    units = []
    every: dict[str, Scenario] = {}
    for t in targets:
        mine = chosen
        if not scenarios and t.entry.get("scenarios"):  # the entry's own default set
            own = t.entry["scenarios"]
            mine = load_scenarios(engine, [own] if isinstance(own, str) else list(own))
        for sc in mine:
            every.setdefault(sc.id, sc)
        for s in strats:
            for p in profs:
                if p.applies(t):
                    units.append(Unit(t, s, p, tuple(sc.id for sc in mine), max(1, trials)))
    return EvalPlan(units, list(every.values()) if targets else chosen, tuple(rule_paths),
                    trace_dir)


# ---------------------------------------------------------------- engines per strategy

def derived_engine(engine: Any, overrides: Sequence[dict[str, Any]]) -> Any:
    """`engine`'s rule set plus model overrides (`[{id|pattern, set}]`) applied last."""
    from .._engine import Engine
    from ..rules._loader import RuleFile, RuleSet

    rs = engine.ruleset
    files = {k: dict(v) for k, v in rs.files.items()}
    data = {"overrides": [dict(o) for o in overrides]}
    text = json.dumps(data, sort_keys=True, default=str)
    rf = RuleFile(kind="model", id="~eval", path=Path("<eval>"), display="<eval strategy>",
                  layer=len(rs.layers), text=text, data=data)
    files.setdefault("model", {})["~eval"] = rf
    return Engine(RuleSet(rs.layers, files, rs.templates, rs.grammars, list(rs.replaced),
                          rs.digest + ":" + text))


_ENGINES: dict[tuple[str, str, str], Any] = {}


def _engine_for(base: Any, target: Target, strategy: Strategy) -> Any:
    key = (base.ruleset.digest, target.id + "\0" + target.model, strategy.name)
    hit = _ENGINES.get(key)
    if hit is None:
        overrides = []
        if target.entry.get("set"):
            overrides.append({"id": target.model, "set": dict(target.entry["set"])})
        if strategy.overrides:
            overrides.append({"id": target.model, "set": dict(strategy.overrides)})
        hit = derived_engine(base, overrides) if overrides else base
        if len(_ENGINES) > 256:
            _ENGINES.clear()
        _ENGINES[key] = hit
    return hit


# ---------------------------------------------------------------- clients

class _Recording:
    """Wraps a model client to keep what each turn was sent (for token estimates)."""

    def __init__(self, inner: Any):
        self._inner = inner
        self.model = inner.model
        self.sent: list[tuple[tuple[Message, ...], tuple[Tool, ...], Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def generate(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None,
                       tool_choice: Any = "auto", **kw: Any) -> Any:
        self.sent.append((tuple(messages), tuple(tools or ()), tool_choice))
        return await self._inner.generate(messages, tools, tool_choice, **kw)

    def stream(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None,
               tool_choice: Any = "auto", **kw: Any) -> Any:
        self.sent.append((tuple(messages), tuple(tools or ()), tool_choice))
        return self._inner.stream(messages, tools, tool_choice, **kw)


def _client(engine: Any, target: Target, scenario: Scenario, strategy: Strategy,
            signal: str) -> tuple[Any, str | None]:
    """The model client for a run, or (None, why it is skipped)."""
    from ..clients._scripted import ScriptedModel

    if target.offline:
        if strategy.client.get("constrained"):
            return None, "constrained decoding needs a client that samples (local)"
        cap = engine.capability(target.model)
        if cap.dialect != target.dialect and target.dialect is not None:
            raise ValueError(f"offline entry {target.id}: {target.model} resolves to dialect "
                             f"{cap.dialect!r}, not {target.dialect!r} (rules/eval.yaml)")
        persona = ScriptedPersona(engine, target, scenario, signal)
        return ScriptedModel(persona.turns(), model=target.model, engine=engine), None
    from ..clients._connect import connect

    spec = target.connect or target.id
    constrained = bool(strategy.client.get("constrained"))
    if spec == "local":
        # explicit both ways: the local client decodes under the grammar by default
        return connect("local", engine=engine, constrained=constrained), None
    if constrained:
        return None, "constrained decoding needs the local client"
    provider, _, model = spec.partition(":")
    return connect(provider, model=model, base_url=target.base_url, engine=engine), None


def preflight(engine: Any, p: EvalPlan) -> list[str]:
    """What would fail every run of a live target (a missing key, runtime or weights),
    found once before any run: one line per target."""
    problems: list[str] = []
    seen: set[str] = set()
    for u in p.units:
        t = u.target
        if t.offline or t.id in seen:
            continue
        seen.add(t.id)
        try:
            client, _ = _client(_engine_for(engine, t, u.strategy), t, p.scenarios[0],
                                u.strategy, "")
            check = getattr(client, "preflight", None)
            if callable(check):
                check()
        except Exception as exc:  # reported, not raised: every target is checked
            problems.append(f"{t.id}: {exc}")
    return problems


# ---------------------------------------------------------------- one run

async def _run_async(base: Any, target: Target, scenario: Scenario, strategy: Strategy,
                     profile: Profile, trial: int, trace_dir: str | None) -> RunRecord:

    cat = catalog(base)
    engine = _engine_for(base, target, strategy)
    failed: Exception | None = None
    try:
        client, skipped = _client(engine, target, scenario, strategy, cat.feedback_signal)
        served = getattr(client, "model", None)
        if isinstance(served, str) and served != target.model:
            # a spec that names no model (`local`): the client knows which id its rules
            # are, and the strategy's overrides must be keyed on that id
            target = replace(target, model=served)
            engine = _engine_for(base, target, strategy)
            client, skipped = _client(engine, target, scenario, strategy, cat.feedback_signal)
    except Exception as exc:  # a client that cannot be built fails this run, not the eval
        client, skipped, failed = None, None, exc
    cap = engine.capability(target.model)
    reads = None if cap.native_tools and cap.dialect is None else \
        engine.dialect_for(target.model)
    common: dict[str, Any] = dict(scenario=scenario.id, tier=scenario.tier, model=target.model,
                  target=target.id, dialect=reads,
                  strategy=strategy.name, profile=profile.name, trial=trial)
    if failed is not None:
        return RunRecord(**common, success=False, reasons=(f"error: {failed}",),
                         stopped="error", rounds=0, events=(), tokens=0, repairs=0,
                         latency_ms=0.0, error=f"{type(failed).__name__}: {failed}")
    if client is None:
        return RunRecord(**common, success=False, reasons=(), stopped="skipped", rounds=0,
                         events=(), tokens=0, repairs=0, latency_ms=0.0, skipped=skipped)
    model = _Recording(client)
    ws = Path(tempfile.mkdtemp(prefix="toolrules-eval-"))
    try:
        scenario.make_workspace(ws)
        try:
            registry = scenario.registry(engine, ws)
        except ValueError as exc:  # e.g. an overlaid built-in tool set lacks a tool
            return RunRecord(**common, success=False, reasons=(f"error: {exc}",),
                             stopped="error", rounds=0, events=(), tokens=0, repairs=0,
                             latency_ms=0.0, error=f"ValueError: {exc}")
        try:
            return await _run_with(engine, model, target, scenario, strategy, profile, trial,
                                   trace_dir, registry, ws, cat, common)
        finally:
            registry.close()
    finally:
        shutil.rmtree(ws, ignore_errors=True)


async def _run_with(engine: Any, model: Any, target: Target, scenario: Scenario,
                    strategy: Strategy, profile: Profile, trial: int, trace_dir: str | None,
                    registry: Any, ws: Path, cat: Any, common: dict[str, Any]) -> RunRecord:
    from ..runtime import ToolExecutor
    from ..runtime._loop import ToolLoop

    executor = ToolExecutor(registry, workspace=ws, trust=scenario.trust, engine=engine)
    trace_path = None
    if trace_dir:
        name = f"{target.id}.{strategy.name}.{profile.name}.{scenario.id}.{trial}.jsonl"
        trace_path = str(Path(trace_dir) / name.replace("/", "_").replace(":", "_"))
    settings = {**scenario.loop_settings(),
                **strategy.loop_settings(bool(scenario.expected_calls()))}
    loop = ToolLoop(model, executor, engine=engine, system=scenario.data.get("system"),
                    **settings, **{**(target.entry.get("options") or {}),
                                   **profile.options})
    started = time.perf_counter()
    error = None
    try:
        outcome = await loop.run(scenario.task)
    except Exception as exc:  # a provider failure ends this run, not the eval
        latency = (time.perf_counter() - started) * 1000.0
        return RunRecord(**common, success=False, reasons=(f"error: {exc}",),
                         stopped="error", rounds=0, events=(), tokens=0, repairs=0,
                         latency_ms=latency, error=f"{type(exc).__name__}: {exc}")
    latency = (time.perf_counter() - started) * 1000.0
    ok, reasons = scenario.judge(outcome, ws)
    per_turn = _turn_costs(engine, model, outcome, cat.chars_per_token)
    calls = []
    for rec in outcome.trace.of_type("call"):
        rnd = int(rec.get("round") or 0)
        turn_tokens, turn_repairs = per_turn.get(rnd, (0, ()))
        calls.append((rec["call"], rec["result"], turn_tokens, turn_repairs))
    events, hits, total = events_for(scenario.id, scenario.expected_calls(), calls)
    tokens = sum(t for t, _ in per_turn.values())
    repairs = sum(len(r) for _, r in per_turn.values())
    if trace_path:
        outcome.trace.add({"type": "eval", "scenario": scenario.id, "target": target.id,
                           "model": target.model,
                           "strategy": strategy.name, "profile": profile.name,
                           "overrides": {**(target.entry.get("set") or {}),
                                         **strategy.overrides},
                           "success": ok, "reasons": reasons,
                           "events": [e.to_dict() for e in events]})
        outcome.save_trace(trace_path)
    return RunRecord(**common, success=ok, reasons=tuple(reasons), stopped=outcome.stopped,
                     rounds=outcome.rounds, events=tuple(events), tokens=tokens,
                     repairs=repairs, latency_ms=latency, error=error, trace=trace_path,
                     param_hits=hits, param_total=total)


def _turn_costs(engine: Any, model: _Recording, outcome: Any, chars_per_token: float
                ) -> dict[int, tuple[int, tuple[str, ...]]]:
    """Per model turn: estimated tokens (the request as the provider would get it, plus
    the response) and the repairs its parse applied."""
    provider = engine.ruleset.table("loop")["message_provider"]
    out: dict[int, tuple[int, tuple[str, ...]]] = {}
    turns = outcome.trace.of_type("turn")
    for i, rec in enumerate(turns):
        rnd = int(rec.get("round") or i + 1)
        chars = 0
        if i < len(model.sent):
            msgs, tools, choice = model.sent[i]
            try:
                body = engine.build_request(provider, model.model, list(msgs),
                                            list(tools) or None, choice if tools else None)
                chars += len(json.dumps(body, ensure_ascii=False, default=str))
            except Exception:  # an estimate only: fall back to the message text
                chars += sum(len(str(m.content or "")) for m in msgs)
        resp = rec.get("response")
        raw = getattr(resp, "raw", None)
        chars += len(raw if isinstance(raw, str) else json.dumps(raw, default=str)) \
            if raw is not None else len(getattr(resp, "content", "") or "")
        repairs = tuple(getattr(resp, "repairs", ()) or ())
        out[rnd] = (round(chars / chars_per_token), repairs)
    return out


_BASES: dict[tuple[str, ...], Any] = {}


def _base_engine(rule_paths: tuple[str, ...]) -> Any:
    """One engine per rule set in this process (its compiled parts are reused)."""
    from .._engine import load

    hit = _BASES.get(rule_paths)
    if hit is None:
        hit = _BASES[rule_paths] = load(paths=list(rule_paths))
    return hit


def run_unit(unit: Unit, rule_paths: Sequence[str] = (), trace_dir: str | None = None,
             on_run: Callable[[RunRecord], Any] | None = None) -> list[RunRecord]:
    """Every run of one unit (in this process)."""
    base = _base_engine(tuple(rule_paths))
    scenarios = {s.id: s for s in load_scenarios(base, list(unit.scenarios))}
    out: list[RunRecord] = []
    with asyncio.Runner() as runner:  # one event loop for the unit's runs, not one each
        for sid in unit.scenarios:
            for trial in range(1, unit.trials + 1):
                rec = runner.run(_run_async(base, unit.target, scenarios[sid], unit.strategy,
                                            unit.profile, trial, trace_dir))
                out.append(rec)
                if on_run is not None:
                    on_run(rec)
    return out


# `--jobs` left to toolrules: parallel only where it pays and cannot disturb a model
AUTO_MIN_UNITS = 20
AUTO_MAX_JOBS = 4


def auto_jobs(p: EvalPlan) -> int:
    """Worker processes for a plan when the caller leaves it to us: one per CPU this
    process may use (at most AUTO_MAX_JOBS) for an offline plan of AUTO_MIN_UNITS units or
    more - scripted runs are CPU-bound and independent, and results come back in plan
    order whatever the scheduling - else 1 (a small plan does not repay starting workers;
    a live model is not to be queried from several processes at once)."""
    import os

    if len(p.units) < AUTO_MIN_UNITS or not all(u.target.offline for u in p.units):
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, AUTO_MAX_JOBS))


def run_plan(p: EvalPlan, jobs: int = 1,
             on_run: Callable[[RunRecord], Any] | None = None) -> list[RunRecord]:
    """All runs of the plan; `jobs` > 1 runs units in worker processes. Results come back
    in plan order whatever the scheduling (the report is deterministic)."""
    if p.trace_dir:
        Path(p.trace_dir).mkdir(parents=True, exist_ok=True)
    if jobs <= 1 or len(p.units) <= 1:
        out: list[RunRecord] = []
        for u in p.units:
            out.extend(run_unit(u, p.rule_paths, p.trace_dir, on_run))
        return out
    from concurrent.futures import ProcessPoolExecutor, as_completed

    results: dict[int, list[RunRecord]] = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_unit, u, p.rule_paths, p.trace_dir): i
                   for i, u in enumerate(p.units)}
        for fut in as_completed(futures):
            recs = fut.result()
            results[futures[fut]] = recs
            if on_run is not None:
                for r in recs:
                    on_run(r)
    return [r for i in range(len(p.units)) for r in results.get(i, [])]
