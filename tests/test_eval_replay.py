"""`toolrules replay` of the traces `toolrules eval` writes: the scenario's declared (mock)
tools, a fresh workspace fixture, the scenario's trust and the strategy's capability
overrides are rebuilt, so every offline run replays without a divergence; a tampered
trace diverges; an overlay scenario needs the eval's --rules."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import toolrules
from toolrules.cli import main
from toolrules.evals import EvalTraceError, eval_run, replay_eval
from toolrules.runtime import Trace

ROOT = Path(__file__).resolve().parent.parent
# declared mock tools (happy_path, type_error_recovery), a fixture workspace with a mock
# delegating to a built-in under shell trust (tier1_bash), built-ins on a fixture
# (tier2_read_write), calls written in content (calls_in_content: the fallback strategy)
SCENARIOS = "happy_path,type_error_recovery,tier1_bash,tier2_read_write,calls_in_content"
# hermes names three entries; anthropic-xml and xml-tags carry entry `set:` overrides
MODELS = "hermes,openai-native,qwen3-coder,anthropic-xml,xml-tags"


def _eval(report: Path, *extra: str) -> list[Path]:
    result = CliRunner().invoke(main, ["eval", "--report", str(report), "-q", *extra])
    assert result.exit_code == 0, result.output
    return sorted((report / "traces").glob("*.jsonl"))


def _replay(trace: Path, *extra: str) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["replay", str(trace), "--json", *extra])
    try:
        return result.exit_code, json.loads(result.output)
    except json.JSONDecodeError:
        return result.exit_code, {"output": result.output}


def _records(trace: Path) -> list[dict]:
    return [json.loads(line) for line in trace.read_text().splitlines()]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    out = _eval(tmp_path_factory.mktemp("eval"), "--models", MODELS, "--scenarios", SCENARIOS,
                "--strategies", "raw,fallback")
    assert len(out) == 7 * 5 * 2
    return out


def _one(traces: list[Path], target: str, strategy: str, scenario: str) -> Path:
    return next(t for t in traces if t.name == f"{target}.{strategy}.default.{scenario}.1.jsonl")


def test_every_eval_trace_replays_without_divergence(traces):
    failed = {}
    for trace in traces:
        code, report = _replay(trace)
        if code != 0 or not report.get("ok") or report.get("divergences"):
            failed[trace.name] = report
    assert not failed, failed


def test_the_replay_says_which_eval_run_it_rebuilt(traces, tmp_path):
    trace = _one(traces, "anthropic-xml", "fallback", "tier1_bash")
    run = eval_run(Trace.load(trace))
    assert run is not None and run.scenario == "tier1_bash" and run.target == "anthropic-xml"
    assert run.overrides["dialect"] == "anthropic-xml" and run.overrides["text_fallback"]
    r = CliRunner().invoke(main, ["replay", str(trace)])
    assert r.exit_code == 0, r.output
    assert "no divergence" in r.output and "scenario tier1_bash, anthropic-xml/fallback" in r.output
    # the same records without the eval record: only built-ins, the recorded (gone)
    # workspace - the declared Bash tool does not exist there
    plain = [r for r in _records(trace) if r["type"] != "eval"]
    bare = _write(tmp_path / "bare.jsonl", plain)
    code, _ = _replay(bare, "--workspace", str(tmp_path))
    assert code == 1


def test_the_fixture_workspace_is_what_the_replay_runs_on(traces, tmp_path):
    trace = _one(traces, "hermes", "raw", "tier1_bash")
    empty = tmp_path / "empty"
    empty.mkdir()
    code, report = _replay(trace, "--workspace", str(empty))
    assert code == 1
    first = report["divergences"][0]
    assert first["what"] == "result output" and "3 notes.md" in first["recorded"]["stdout"]
    assert first["replayed"]["exit_code"] != 0


def test_the_overrides_are_rebuilt(traces):
    # without the entry's `set:`, acme/claude-xml-emulated is not read as anthropic-xml
    trace = Trace.load(_one(traces, "anthropic-xml", "raw", "happy_path"))
    trace.records[-1]["overrides"] = {}
    report = asyncio.run(replay_eval(trace, toolrules.load(use_env=False)))
    assert not report.ok


def test_a_tampered_mock_output_is_a_divergence(traces, tmp_path):
    records = _records(_one(traces, "hermes", "fallback", "happy_path"))
    call = next(r for r in records if r["type"] == "call" and r["call"]["name"] == "state_get")
    assert call["result"]["output"]["draft"]["title"] == "Untitled"
    call["result"]["output"]["draft"]["title"] = "Tampered"
    code, report = _replay(_write(tmp_path / "t.jsonl", records))
    assert code == 1 and report["ok"] is False
    d = report["divergences"][0]
    assert d["what"] == "result output" and "(state_get)" in d["where"]
    assert d["recorded"]["draft"]["title"] == "Tampered"
    assert d["replayed"]["draft"]["title"] == "Untitled"


def test_tampered_call_arguments_are_a_divergence(traces, tmp_path):
    records = _records(_one(traces, "qwen3-coder", "raw", "happy_path"))
    turn = next(r for r in records if r["type"] == "turn" and any(
        c["name"] == "state_patch" for c in r["response"]["calls"]))
    raw = turn["response"]["raw"]
    assert isinstance(raw, str) and "Hello" in raw
    turn["response"]["raw"] = raw.replace("Hello", "Goodbye")
    r = CliRunner().invoke(main, ["replay", str(_write(tmp_path / "t.jsonl", records))])
    assert r.exit_code == 1
    assert "divergence: round 2 call 0 (state_patch): call differs" in r.output
    assert "Goodbye" in r.output and "1 divergence(s)" in r.output


def test_an_overlay_scenario_needs_the_rules_it_was_run_with(tmp_path):
    overlay = tmp_path / "overlay"
    (overlay / "scenarios").mkdir(parents=True)
    shutil.copy(ROOT / "rules" / "scenarios" / "happy_path.yaml",
                overlay / "scenarios" / "overlay_patch.yaml")
    traces = _eval(tmp_path / "report", "--rules", str(overlay), "--models", "openai-native",
                   "--scenarios", "overlay_patch", "--strategies", "retry")
    assert [t.name for t in traces] == ["openai-native.retry.default.overlay_patch.1.jsonl"]
    r = CliRunner().invoke(main, ["replay", str(traces[0])])
    assert r.exit_code == 1
    assert "scenario 'overlay_patch'" in r.output and "--rules DIR" in r.output
    assert "Traceback" not in r.output
    r = CliRunner().invoke(main, ["replay", str(traces[0]), "--rules", str(overlay)])
    assert r.exit_code == 0 and "no divergence" in r.output, r.output
    with pytest.raises(EvalTraceError, match="overlay_patch"):
        asyncio.run(replay_eval(traces[0], toolrules.load(use_env=False)))
    # the overlay's mock answers differently now: the replay notices
    text = (overlay / "scenarios" / "overlay_patch.yaml").read_text()
    (overlay / "scenarios" / "overlay_patch.yaml").write_text(
        text.replace("title: Untitled", "title: Changed"))
    code, report = _replay(traces[0], "--rules", str(overlay))
    assert code == 1 and report["divergences"][0]["replayed"]["draft"]["title"] == "Changed"


def test_the_committed_local_model_results_replay():
    """results/eval-local (the README's Gemma 3 270M matrix) is what the model wrote: every
    committed trace re-runs through today's parser, loop and mock tools to the same calls,
    handling and final answers. Only a command's output may differ (a directory listing of
    a fresh workspace carries its times)."""
    root = Path(__file__).resolve().parent.parent / "results" / "eval-local"
    report = json.loads((root / "report.json").read_text())
    traces = sorted((root / "traces").glob("*.jsonl"))
    assert len(traces) == report["config"]["runs"] == len(report["runs"])
    engine = toolrules.load(use_env=False)
    stopped = {Path(r["trace"]).name: r["stopped"] for r in report["runs"]}
    for path in traces:
        trace = Trace.load(path)
        result = asyncio.run(replay_eval(trace, engine))
        for d in result.divergences:
            assert d.what == "result output" and "exit_code" in str(d.recorded), (path.name, str(d))
        assert result.outcome.stopped == stopped[path.name]
