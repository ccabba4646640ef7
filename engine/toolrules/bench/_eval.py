"""Bench section `eval`: the main job, `toolrules eval` offline with its defaults and the
reports on, in a fresh process - wall and CPU (user + sys) time, beside the budget of 60 s.
CPU time is the figure to compare across runs on a shared machine; wall time is what a
user waits."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["bench"]

BUDGET_S = 60.0


def bench(engine: Any, quick: bool) -> list[tuple[str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report"
        env = dict(os.environ, TOOLRULES_CACHE_DIR=str(Path(tmp) / "cache"))
        env.pop("TOOLRULES_PATH", None)
        # the rule cache is warm for a user's second command: fill it first
        subprocess.run([sys.executable, "-c", "import toolrules; toolrules.load()"], env=env,
                       check=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "toolrules", "eval", "--report", str(report),
                        "-q"], env=env, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        summary = json.loads((report / "report.json").read_text(encoding="utf-8"))["summary"]
    user = after.ru_utime - before.ru_utime
    system = after.ru_stime - before.ru_stime
    runs = summary.get("total_tasks", "?")
    verdict = "within" if wall <= BUDGET_S else "OVER"
    return [
        (f"`toolrules eval --report DIR` (defaults), wall (budget {BUDGET_S:.0f} s)",
         f"{wall:.1f} s ({verdict} budget)"),
        ("  CPU time, user + sys", f"{user + system:.1f} s ({user:.1f} + {system:.1f})"),
        ("  runs (scenario x entry x strategy), succeeded, skipped",
         f"{runs}, {summary.get('successful_tasks', '?')}, {summary.get('skipped', 0)}"),
        ("  CPU per run", f"{(user + system) / runs * 1e3:.1f} ms" if isinstance(runs, int)
         and runs else "-"),
    ]
