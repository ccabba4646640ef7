"""`toolrules eval --models local` on the real embedded model (Gemma 3 270M through
llama-cpp-python): the issue's command, run as a user runs it, in the slow suite
(`--slow` or TOOLRULES_SLOW=1; about 5 minutes on 2 cores).

What is asserted is what the engine guarantees, not what a 270M base model manages: every
run ends (no errors), the report holds every run of the matrix, and under the `required`
layer the first turn of a scenario that needs a tool is a call to an offered tool (the
call grammar admits nothing else), while a scenario that needs none is never forced.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.local, pytest.mark.slow]

if importlib.util.find_spec("llama_cpp") is None:
    pytest.skip("llama_cpp is not installed: pip install 'toolrules[local]'",
                allow_module_level=True)
if os.environ.get("TOOLRULES_SLOW") != "1":
    pytest.skip("the local eval takes minutes: run with --slow or TOOLRULES_SLOW=1",
                allow_module_level=True)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from toolrules.clients import default_gguf

    try:
        default_gguf()
    except (ImportError, OSError) as exc:
        pytest.skip(f"the bundled weights are not installed: {exc}")
    out = tmp_path_factory.mktemp("local-eval")
    cmd = [sys.executable, "-m", "toolrules", "eval", "--models", "local",
           "--scenarios", "happy_path,chat_only", "--trials", "2", "--report", str(out), "-q"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout


def test_every_run_of_the_matrix_is_reported(report):
    out, stdout = report
    data = json.loads((out / "report.json").read_text())
    runs = data["runs"]
    strategies = {r["strategy"] for r in runs}
    assert {"raw", "retry", "constrained", "required"} <= strategies
    # 2 scenarios x 2 trials per strategy, nothing skipped or failed with an error
    assert len(runs) == 4 * len(strategies)
    assert all(r["stopped"] not in ("error", "skipped") for r in runs), \
        [(r["strategy"], r.get("error")) for r in runs if r["stopped"] in ("error", "skipped")]
    assert all(r["latency_ms"] > 0 for r in runs)
    assert "Success by model and strategy" in stdout and "local" in stdout
    assert (out / "report.html").is_file() and (out / "summary.md").is_file()


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_required_layer_forces_a_well_formed_first_call(report):
    out, _ = report
    offered = {"state_get", "state_patch"}
    for trace in sorted((out / "traces").glob("local.required.*.happy_path.*.jsonl")):
        recs = _records(trace)
        assert recs[0]["settings"]["tool_use_mode"] == "enforced"
        first = next(r for r in recs if r["type"] == "turn")
        assert first["request"]["tool_choice"] == "required"
        calls = first["response"]["calls"]
        assert calls and all(c["name"] in offered for c in calls), first["response"]


def test_a_scenario_without_tools_is_never_forced(report):
    out, _ = report
    traces = sorted((out / "traces").glob("local.*.chat_only.*.jsonl"))
    assert traces
    for trace in traces:
        recs = _records(trace)
        assert recs[0]["settings"]["tool_use_mode"] == "relaxed"
        assert all(r["request"]["tool_choice"] != "required"
                   for r in recs if r["type"] == "turn")


def test_eval_traces_of_the_local_model_replay(report):
    """A recorded local run re-runs offline from its trace (no model needed)."""
    out, _ = report
    trace = next(iter(sorted((out / "traces").glob("local.required.*.happy_path.1.jsonl"))))
    proc = subprocess.run([sys.executable, "-m", "toolrules", "replay", str(trace)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no divergence" in proc.stdout
