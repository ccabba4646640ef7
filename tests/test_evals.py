"""toolrules eval: scenarios as rules, offline scripted models per dialect, metrics computed
from runs, reports (JSON, Markdown, HTML rendered in headless Chromium), determinism, and
a broken dialect or validator making the offline suite fail."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import toolrules
from toolrules._types import ToolCall, ToolResult
from toolrules.evals import (
    RunRecord,
    aggregate,
    build_report,
    catalog,
    events_for,
    load_scenarios,
    percentile,
    plan,
    run_plan,
    write_reports,
)
from toolrules.golden._evals import offline_summary

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def engine():
    return toolrules.load(use_env=False)


@pytest.fixture(scope="module")
def offline_runs(engine):
    """The whole default offline evaluation, once for this module."""
    return run_plan(plan(engine))


# ---------------------------------------------------------------- metrics from known runs

def _ok(name, **args):
    return ToolCall("c", name, args), ToolResult("c", name, output="fine")


def _bad(name, **args):
    return ToolCall("c", name, args), ToolResult("c", name, error="nope")


def _run(events, success, *, hits, total, tokens=100, repairs=0, latency=10.0, **kw):
    return RunRecord(scenario="s", tier="simple", model="m", target="t", dialect="d",
                     strategy="raw", profile="default", trial=1, success=success, reasons=(),
                     stopped="done", rounds=2, events=tuple(events), tokens=tokens,
                     repairs=repairs, latency_ms=latency, param_hits=hits, param_total=total,
                     **kw)


def test_events_line_calls_up_with_expected_calls():
    expected = [{"name": "read", "arguments": {"path": "a.txt"}},
                {"name": "write", "arguments": {"path": "b.txt", "content": {"contains": "X"}}}]
    calls = [(*_bad("write", path="b.txt", content="no"), 7, ()),      # wrong order, fails
             (*_ok("reed", path="a.txt"), 5, ("trailing-commas",)),   # hallucinated name
             (*_ok("read", path="a.txt"), 5, ()),
             (*_ok("write", path="b.txt", content="X!"), 9, ())]
    events, hits, total = events_for("s", expected, calls)
    assert [(e.tool_name, e.expected_tool, e.attempt, e.success) for e in events] == [
        ("write", "write", 1, False), ("reed", "read", 1, False), ("read", "read", 2, True),
        ("write", "write", 2, True)]
    assert events[1].repairs == ("trailing-commas",) and events[0].tokens_used == 7
    assert events[0].error == "nope" and events[2].error is None
    # matchers checked on calls of the right tool: write#1 1/2, read 1/1, write#2 2/2
    assert (hits, total) == (4, 5)


def test_an_expected_call_never_made_is_a_missed_event():
    events, hits, total = events_for("s", [{"name": "read"}, {"name": "x", "optional": True}],
                                     [])
    assert [(e.tool_name, e.expected_tool, e.success) for e in events] == [("", "read", False)]
    assert (hits, total) == (0, 0)


def test_each_metric_from_known_runs():
    e1, _, _ = events_for("s", [{"name": "read", "arguments": {"p": 1}}],
                          [(*_ok("read", p=1), 10, ())])
    e2, _, _ = events_for("s", [{"name": "read", "arguments": {"p": 1}}],
                          [(*_ok("list"), 10, ()), (*_ok("read", p=2), 10, ()),
                           (*_ok("read", p=1), 10, ())])
    runs = [_run(e1, True, hits=1, total=1, tokens=100, repairs=1, latency=10.0),
            _run(e2, True, hits=1, total=2, tokens=300, repairs=2, latency=30.0),
            _run((), False, hits=0, total=0, tokens=200, latency=20.0),
            _run((), False, hits=0, total=0, latency=99.0, skipped="no client")]
    m = aggregate(runs)
    assert m.total_tasks == 3 and m.successful_tasks == 2           # skipped left out
    assert m.overall_success_rate == pytest.approx(2 / 3)
    # events: read ok | list (expected read), read p=2, read p=1 -> right tool 3 of 4
    assert m.tool_selection_accuracy == pytest.approx(3 / 4)
    assert m.parameter_accuracy == pytest.approx(2 / 3)
    assert m.first_attempt_success == pytest.approx(1 / 3)          # only run 1
    assert m.avg_retries_per_task == pytest.approx((0 + 3 + 0) / 3)  # attempts 2, 3: 1 + 2
    assert m.repairs_applied == 3
    assert m.avg_tokens_per_task == pytest.approx(200)
    assert (m.latency_p50_ms, m.latency_p95_ms) == (20.0, 30.0)
    assert percentile([5, 1, 3, 2, 4], 50) == 3 and percentile([], 95) == 0.0
    d = m.to_dict()
    for name in ("overall_success_rate", "tool_selection_accuracy", "parameter_accuracy",
                 "first_attempt_success", "avg_retries_per_task", "repairs_applied",
                 "latency_p50_ms", "latency_p95_ms"):
        assert name in d


# ---------------------------------------------------------------- scenarios and the catalog

def test_bundled_scenarios_cover_the_loop_set_and_the_tiers(engine):
    ids = {s.id for s in load_scenarios(engine)}
    editor = {"happy_path", "happy_path_parallel", "missing_workspace_id", "type_error_recovery",
              "long_arguments_guard", "chat_only"}
    assert editor <= ids
    assert {s.id for s in load_scenarios(engine, ["editor"])} == editor
    tiers = {s.tier for s in load_scenarios(engine)}
    assert {"simple", "medium", "complex", "realistic", "guardrail", "chat"} <= tiers
    complex_ = next(s for s in load_scenarios(engine) if s.tier == "complex")
    grep = next(t for t in complex_.data["tools"]["declared"] if t["name"] == "Grep")
    assert len(grep["parameters"]["properties"]) >= 10
    assert [s.id for s in load_scenarios(engine, ["smoke"])] == ["happy_path", "chat_only"]
    with pytest.raises(ValueError, match="no scenario"):
        load_scenarios(engine, ["nope"])


def test_every_dialect_has_an_offline_entry(engine):
    from toolrules.evals import derived_engine

    cat = catalog(engine)
    covered = set()
    for t in cat.offline:
        eng = derived_engine(engine, [{"id": t.model, "set": t.entry["set"]}]) \
            if t.entry.get("set") else engine
        covered.add(eng.dialect_for(t.model) if t.dialect is None else t.dialect)
    assert set(engine.ruleset.ids("dialect")) <= covered | {None}


def test_model_filter(engine):
    cat = catalog(engine)
    ids = lambda spec: [t.id for t in cat.select(spec)]  # noqa: E731
    assert ids("hermes") == ["hermes", "hermes-think", "hermes-2-pro"]   # id, dialect
    assert ids("hermes,!hermes-*") == ["hermes"]
    assert set(ids("stable")) == {t.id for t in cat.offline if "stable" in t.tags} | \
        {t.id for t in cat.live if "stable" in t.tags}
    assert ids("qwen3-c*") == ["qwen3-coder"]
    assert ids("all") == [t.id for t in cat.offline]
    live = cat.select("openai-compatible:qwen3:8b", base_url="http://127.0.0.1:9/v1")
    assert live[0].connect == "openai-compatible:qwen3:8b" and not live[0].offline
    assert cat.select("local")[0].connect == "local"
    with pytest.raises(ValueError, match="matches no offline entry"):
        cat.select("no-such-model")
    with pytest.raises(ValueError, match="selects nothing"):
        cat.select("hermes,!hermes*")


# ---------------------------------------------------------------- the offline suite

def test_offline_eval_matches_its_golden_file(offline_runs):
    """Deterministic: the numbers equal the reviewed golden file every run."""
    want = yaml.safe_load((ROOT / "golden" / "evals" / "offline.golden.yaml").read_text())
    assert offline_summary(offline_runs) == want


def test_offline_eval_runs_every_dialect_through_the_loop(engine, offline_runs):
    assert not [r for r in offline_runs if r.error]
    ran = {r.target for r in offline_runs if not r.skipped}
    assert ran == {t.id for t in catalog(engine).offline}
    best = [r for r in offline_runs if r.strategy == "fallback"]
    assert sum(r.success for r in best) / len(best) > 0.95
    # the validation-retry layer is what fixes type_error_recovery
    by = {(r.target, r.strategy): r.success for r in offline_runs
          if r.scenario == "type_error_recovery"}
    assert not by[("hermes", "raw")] and by[("hermes", "retry")]
    # the text fallback is what reads <tool_call> text from a native model's content
    by = {(r.target, r.strategy): r.success for r in offline_runs
          if r.scenario == "calls_in_content"}
    assert not by[("openai-native", "retry")] and by[("openai-native", "fallback")]


def test_broken_dialect_overlay_makes_the_suite_fail(engine, tmp_path):
    """An overlay that breaks Hermes' close marker: Hermes runs stop succeeding."""
    src = yaml.safe_load((ROOT / "rules" / "dialects" / "hermes.yaml").read_text())
    text = (ROOT / "rules" / "dialects" / "hermes.yaml").read_text()
    assert "</tool_call>" in text and src
    (tmp_path / "dialects").mkdir()
    (tmp_path / "dialects" / "hermes.yaml").write_text(
        text.replace("</tool_call>", "</tool_calls>"))
    broken = toolrules.load(paths=[tmp_path], use_env=False)
    p = plan(broken, models="hermes", scenarios=["happy_path", "tier2_read_write"],
             strategies=["retry"], rule_paths=[str(tmp_path)])
    good = run_plan(plan(engine, models="hermes", scenarios=["happy_path", "tier2_read_write"],
                         strategies=["retry"]))
    bad = run_plan(p)
    assert all(r.success for r in good)
    assert not any(r.success for r in bad)


def test_broken_validator_overlay_makes_the_suite_fail(engine, tmp_path):
    """A validator that allows no retry: type_error_recovery no longer gets its feedback."""
    text = (ROOT / "rules" / "validation.yaml").read_text()
    assert "  max_attempts: 3\n" in text
    (tmp_path / "validation.yaml").write_text(
        text.replace("  max_attempts: 3\n", "  max_attempts: 1\n"))
    scen = ["type_error_recovery"]
    good = run_plan(plan(engine, models="hermes", scenarios=scen, strategies=["retry"]))
    bad = run_plan(plan(toolrules.load(paths=[tmp_path], use_env=False), models="hermes",
                        scenarios=scen, strategies=["retry"], rule_paths=[str(tmp_path)]))
    assert good and all(r.success for r in good)
    assert bad and not any(r.success for r in bad)


# ---------------------------------------------------------------- strategy loop settings

def test_the_required_layer_enforces_tool_use_only_where_calls_are_expected(engine):
    cat = catalog(engine)
    req = cat.strategy("required")
    assert req.client.get("constrained")          # inherited from the constrained layer
    assert req.loop_settings(True)["tool_use_mode"] == "enforced"
    assert req.loop_settings(False) == {}
    assert cat.strategy("retry").loop_settings(True) == {}
    # offline scripts do not sample: the layer is skipped there, with the reason
    recs = run_plan(plan(engine, models="hermes", scenarios=["happy_path"],
                         strategies=["required"]))
    assert recs and all(r.skipped and "constrained" in r.skipped for r in recs)


def test_strategy_loop_settings_reach_the_loop(engine, tmp_path):
    """An overlay layer with loop settings and no client option runs offline: the loop of
    a scenario that expects calls runs enforced, chat_only keeps its relaxed mode."""
    text = (ROOT / "rules" / "eval.yaml").read_text()
    anchor = "  rules:\n    description:"
    assert anchor in text
    layer = ("  enforce:\n    description: tool use enforced\n    extends: retry\n"
             "    loop: {tool_use_mode: enforced, tool_failure_policy: tolerated}\n"
             "    loop_when: calls_expected\n")
    (tmp_path / "eval.yaml").write_text(text.replace(anchor, layer + anchor))
    over = toolrules.load(paths=[tmp_path], use_env=False)
    traces = tmp_path / "traces"
    recs = run_plan(plan(over, models="hermes", scenarios=["happy_path", "chat_only"],
                         strategies=["enforce"], rule_paths=[str(tmp_path)],
                         trace_dir=str(traces)))
    assert recs and all(r.success for r in recs), [r.reasons for r in recs]
    modes = {}
    for tr in traces.glob("*.jsonl"):
        start = json.loads(tr.read_text().splitlines()[0])
        modes.setdefault(tr.name.split(".")[-3], set()).add(start["settings"]["tool_use_mode"])
    assert modes == {"happy_path": {"enforced"}, "chat_only": {"relaxed"}}


def test_the_local_client_is_asked_for_constrained_decoding_exactly_when_a_layer_says(
        engine, monkeypatch):
    from toolrules.clients import _connect
    from toolrules.evals import _runner

    seen = []
    monkeypatch.setattr(_connect, "connect", lambda spec, **kw: seen.append((spec, kw)) or
                        object())
    cat = catalog(engine)
    local = next(t for t in cat.live if t.connect == "local")
    scen = load_scenarios(engine, ["happy_path"])[0]
    for name in ("raw", "constrained", "required"):
        client, why = _runner._client(engine, local, scen, cat.strategy(name), "")
        assert client is not None and why is None
    assert [kw["constrained"] for _, kw in seen] == [False, True, True]


def test_a_spec_without_a_model_gets_the_overrides_on_the_clients_model_id(
        engine, monkeypatch, tmp_path):
    """`--models local` names no model id: the strategy's capability overrides must land on
    the id the client's rules use, or every layer would run the same capability."""
    from toolrules import ScriptedModel
    from toolrules.clients import _connect

    call = '```json\n{"tool": "get_weather", "arguments": {"city": "Paris"}}\n```'

    def fake(spec, *, engine, **kw):
        return ScriptedModel([call, "It is sunny, 18 C."], model="gemma-3-270m", engine=engine)

    monkeypatch.setattr(_connect, "connect", fake)
    traces = tmp_path / "traces"
    recs = run_plan(plan(engine, models="local", scenarios=["weather_lookup"],
                         strategies=["raw", "retry"], trace_dir=str(traces)))
    assert [r.model for r in recs] == ["gemma-3-270m"] * 2
    assert all(r.success for r in recs), [r.reasons for r in recs]
    validate = {}
    for tr in traces.glob("*.jsonl"):
        lines = [json.loads(x) for x in tr.read_text().splitlines()]
        validate[tr.name.split(".")[1]] = lines[0]["settings"]["validate"]
        assert lines[-1]["model"] == "gemma-3-270m"
    assert validate == {"raw": False, "retry": True}


def test_a_live_entry_runs_its_own_scenarios_unless_told(engine):
    local = plan(engine, models="local", strategies=["raw"])
    assert [u.scenarios for u in local.units] == \
        [tuple(s.id for s in load_scenarios(engine, ["local"]))]
    told = plan(engine, models="local", scenarios=["chat_only"], strategies=["raw"])
    assert [u.scenarios for u in told.units] == [("chat_only",)]


def test_lint_names_a_live_entrys_unknown_scenarios(tmp_path):
    from toolrules.cli import main

    text = (ROOT / "rules" / "eval.yaml").read_text()
    assert "scenarios: local," in text
    (tmp_path / "eval.yaml").write_text(text.replace("scenarios: local,", "scenarios: locl,"))
    result = CliRunner().invoke(main, ["lint", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "eval.yaml:" in result.output and "'locl' (eval-entry)" in result.output


# ---------------------------------------------------------------- reports and the CLI

def test_report_json_names_runs_and_metrics(offline_runs, tmp_path):
    report = build_report(offline_runs[:60], {"models": None, "trials": 1})
    out = write_reports(report, tmp_path)
    data = json.loads(out["json"].read_text())
    group = data["groups"][0]
    for key in ("scenario", "model", "dialect", "strategy", "overall_success_rate",
                "tool_selection_accuracy", "parameter_accuracy", "first_attempt_success",
                "avg_retries_per_task", "repairs_applied", "latency_p50_ms",
                "latency_p95_ms"):
        assert key in group
    assert data["runs"][0]["events"] is not None
    assert "| strategy |" in out["markdown"].read_text()


def test_cli_eval_writes_reports_and_replayable_traces(tmp_path):
    from toolrules.cli import main

    result = CliRunner().invoke(main, ["eval", "--models", "hermes,openai-native",
                                       "--scenarios", "happy_path,tier2_read_write",
                                       "--strategies", "raw,retry", "--report", str(tmp_path),
                                       "-q"])
    assert result.exit_code == 0, result.output
    assert "Success by model and strategy" in result.output
    assert (tmp_path / "report.json").is_file() and (tmp_path / "summary.md").is_file()
    traces = sorted((tmp_path / "traces").glob("*.jsonl"))
    assert len(traces) == 16    # hermes names 3 entries, + openai-native; x 2 x 2
    tr = next(t for t in traces if "hermes.raw" in t.name and "tier2" in t.name)
    records = [json.loads(line) for line in tr.read_text().splitlines()]
    assert records[0]["type"] == "start" and records[-1]["type"] == "eval"
    assert records[-1]["events"][0]["tool_name"] == "Read"


def test_cli_eval_checks_live_models_before_any_run(monkeypatch, tmp_path):
    from toolrules.cli import main
    from toolrules.clients import _local

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)

    def missing(rules):
        raise ImportError("the local model's runtime is not installed: pip install x")

    monkeypatch.setattr(_local, "_import_runtime", missing)
    result = CliRunner().invoke(main, ["eval", "--models", "claude-sonnet,local,hermes",
                                       "--report", str(tmp_path), "-q"])
    assert result.exit_code == 2, result.output
    assert "claude-sonnet: [AUTH]" in result.output and "ANTHROPIC_API_KEY" in result.output
    assert "local: the local model's runtime is not installed" in result.output
    assert not (tmp_path / "report.json").exists()     # nothing ran


def test_cli_eval_bad_filter_is_a_clear_error():
    from toolrules.cli import main

    result = CliRunner().invoke(main, ["eval", "--models", "nope-model", "-q"])
    assert result.exit_code == 2 and "matches no offline entry" in result.output


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_report_html_renders_charts_in_headless_chromium(offline_runs, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (CI: apt-get install -y chromium)")
    report = build_report(offline_runs, {"models": None, "trials": 1})
    page = write_reports(report, tmp_path)["html"]
    text = page.read_text()
    assert "<script" in text and '<script src="http' not in text   # self-contained
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000"]
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    # plotly draws each chart as SVG inside its div once its script ran
    for chart in ("chart-success", "chart-latency", "chart-matrix"):
        start = dom.find(f'id="{chart}"')
        assert start >= 0, chart
        assert "main-svg" in dom[start:start + 20000], f"{chart} was not drawn"
    shot = tmp_path / "report.png"
    subprocess.run([browser, *flags, f"--screenshot={shot}", "--window-size=1200,1600",
                    page.as_uri()], capture_output=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 10_000


# ---------------------------------------------------------------- a live model over HTTP

def test_cli_eval_runs_a_live_openai_compatible_server(tmp_path):
    """`--models openai-compatible:MODEL --base-url URL`: the same loop against a server
    on 127.0.0.1 that answers as a model would (a tool call, then an answer from the
    result); the scores come from what it answered."""
    from toolrules.cli import main
    from wire_server import WireServer, json_reply

    def model(seen):
        body = seen.json()
        last = body["messages"][-1]
        if last["role"] == "tool":
            message = {"role": "assistant", "content": "It is sunny in Paris, 18 C."}
        elif "7 times 6" in str(last.get("content")):
            message = {"role": "assistant", "content": "42"}
        else:
            assert [t["function"]["name"] for t in body["tools"]] == ["get_weather"]
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
        return json_reply({"id": "x", "object": "chat.completion", "model": body["model"],
                           "choices": [{"index": 0, "message": message,
                                        "finish_reason": "stop"}]})

    with WireServer(model) as srv:
        result = CliRunner().invoke(main, [
            "eval", "--models", "openai-compatible:qwen3:8b", "--base-url", srv.url + "/v1",
            "--scenarios", "weather_lookup,chat_only", "--strategies", "raw,retry",
            "--report", str(tmp_path), "-q"])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "report.json").read_text())
    assert len(data["runs"]) == 4 and all(r["success"] for r in data["runs"]), data["runs"]
    assert {r["model"] for r in data["runs"]} == {"qwen3:8b"}
    assert all(s.path == "/v1/chat/completions" for s in srv.requests)
    assert len(srv.requests) == 2 * (2 + 1)     # per strategy: call + answer, and chat_only
