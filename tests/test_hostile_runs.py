"""Hostile inputs cannot hang or slow down a parser, whatever the dialect.

Every dialect reads runs of 255, 256, 257, 1,000 and 200,000 word characters at the start
of a reply, after prose, before a call, as a call's name, inside a payload and a value,
and after each of its markers - plus the other hostile shapes (deep nesting, huge
arguments, marker runs ...) - whole and streamed in 1, 7 and 64-character deltas. They
run in worker subprocesses (one per core) with a time limit: an input that hangs fails
this test and is named, it does not hang the suite. Each input has a budget of
1 s + 25 µs per character (the speed itself is measured by `toolrules bench`, whose
target is 2 µs per character), and every stream must agree with the whole parse.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import toolrules

WORKER = Path(__file__).with_name("hostile_worker.py")
WORKER_TIMEOUT = 1500  # seconds for one worker's share of the dialects


def _budget(chars: int) -> float:
    return 1.0 + 25e-6 * chars


def _run(dialects: list[str], results: list[dict[str, Any]], failures: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, str(WORKER), *dialects], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    started: list[Any] = []
    timer = threading.Timer(WORKER_TIMEOUT, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            rec = json.loads(line)
            if "start" in rec:
                started = rec["start"]
            else:
                results.append(rec)
        proc.wait()
    finally:
        timer.cancel()
    if proc.returncode != 0:
        err = proc.stderr.read() if proc.stderr else ""
        failures.append(f"worker for {dialects[0]}..{dialects[-1]} ended with "
                        f"{proc.returncode} while reading {started}: {err[-2000:]}")


def test_no_hostile_input_hangs_or_runs_slowly_in_any_dialect():
    dialects = sorted(toolrules.load(use_env=False).ruleset.ids("dialect"))
    shares = [dialects[0::2], dialects[1::2]]
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    threads = [threading.Thread(target=_run, args=(share, results, failures))
               for share in shares]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    seen = {r["done"][0] for r in results}
    assert seen == set(dialects)
    slow = [r for r in results if r["s"] > _budget(r["chars"])]
    assert slow == [], slow[:10]
    differ = [r["done"] for r in results if not r["same"]]
    assert differ == [], differ[:10]
    runs = [r for r in results if r["done"][1].startswith("run-200000")]
    assert {r["done"][2] for r in runs} == {"whole", 1, 7, 64}
