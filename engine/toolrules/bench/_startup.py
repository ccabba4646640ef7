"""Bench section `import`: what `python -c "import toolrules; toolrules.load()"` costs, beside
a bare `python -c pass` measured in the same loop (alternating, so both see the same
machine), with the rule cache and the bytecode cache warm as after a first run (the
section drops PYTHONDONTWRITEBYTECODE for the programs it measures). Budget: 150 ms wall."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

__all__ = ["bench"]

BUDGET_MS = 150.0
_PROGRAMS = {
    "pass": "pass",
    "import": "import toolrules",
    "import+load": "import toolrules; toolrules.load()",
}
_COUNT = "import sys, toolrules; toolrules.load(); print(len(sys.modules))"


def _run(code: str, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + sys) seconds of one fresh interpreter running `code`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def bench(engine: Any, quick: bool) -> list[tuple[str, str]]:
    rounds = 5 if quick else 15
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TOOLRULES_CACHE="1", TOOLRULES_CACHE_DIR=cache)
        env.pop("TOOLRULES_PATH", None)
        # as Python runs by default: modules compiled once, then read from __pycache__
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        _run(_PROGRAMS["import+load"], env)  # validates once and writes the rule cache
        walls: dict[str, list[float]] = {k: [] for k in _PROGRAMS}
        cpus: dict[str, list[float]] = {k: [] for k in _PROGRAMS}
        for _ in range(rounds):
            for name, code in _PROGRAMS.items():
                seconds, cpu_seconds = _run(code, env)
                walls[name].append(seconds)
                cpus[name].append(cpu_seconds)
        modules = int(subprocess.run([sys.executable, "-c", _COUNT], env=env, check=True,
                                     capture_output=True, text=True).stdout.strip())
        bare = int(subprocess.run([sys.executable, "-c", "import sys; print(len(sys.modules))"],
                                  env=env, check=True, capture_output=True,
                                  text=True).stdout.strip())
        slowest = _importtime(env)
    wall = {k: statistics.median(v) * 1e3 for k, v in walls.items()}
    cpu = {k: statistics.median(v) * 1e3 for k, v in cpus.items()}
    verdict = "within" if wall["import+load"] <= BUDGET_MS else "OVER"
    return [
        ("`python -c pass` (the interpreter alone), wall / CPU",
         f"{wall['pass']:.0f} ms / {cpu['pass']:.0f} ms"),
        ("`import toolrules`, wall / CPU", f"{wall['import']:.0f} ms / {cpu['import']:.0f} ms"),
        (f"`import toolrules; toolrules.load()`, wall / CPU (budget {BUDGET_MS:.0f} ms)",
         f"{wall['import+load']:.0f} ms / {cpu['import+load']:.0f} ms ({verdict} budget)"),
        ("import + load() / bare interpreter (wall)",
         f"{wall['import+load'] / max(wall['pass'], 1e-6):.1f}x"),
        ("modules in sys.modules after import + load() (bare interpreter)",
         f"{modules} ({bare})"),
        ("rounds (median; the three programs alternate)", str(rounds)),
        ("slowest imports by own time (-X importtime, one run)", slowest),
    ]


def _importtime(env: dict[str, str]) -> str:
    """The three modules with the most import time of their own under `-X importtime`."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", _PROGRAMS["import+load"]],
                          env=env, check=True, capture_output=True, text=True)
    rows = []
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[0].startswith("import time:") and parts[1].strip().isdigit():
            rows.append((int(parts[1].strip()), parts[2].strip()))
    rows.sort(reverse=True)
    return ", ".join(f"{name} {us / 1e3:.1f} ms" for us, name in rows[:3]) or "-"
