"""Bench section: loading the rule set and model lookups."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Any

from ._timing import timeit

__all__ = ["bench"]


def bench(engine: Any, quick: bool) -> list[tuple[str, str]]:
    import os
    import tempfile

    from .._engine import load

    out = []
    env = dict(os.environ, TOOLRULES_CACHE="0")
    code = ("import time; t=time.perf_counter(); import toolrules; "
            "e=toolrules.load(use_env=False); print(time.perf_counter()-t)")
    code_load = ("import time, toolrules; t=time.perf_counter(); "
                 "e=toolrules.load(use_env=False); print(time.perf_counter()-t)")
    runs = 3 if quick else 7
    t_nocache = statistics.median(float(subprocess.check_output(
        [sys.executable, "-c", code], env=env, text=True)) for _ in range(runs))
    with tempfile.TemporaryDirectory() as d:
        env_c = dict(os.environ, TOOLRULES_CACHE="1", TOOLRULES_CACHE_DIR=d)
        subprocess.check_output([sys.executable, "-c", code], env=env_c, text=True)
        t_cache = statistics.median(float(subprocess.check_output(
            [sys.executable, "-c", code], env=env_c, text=True)) for _ in range(runs))
        t_load_fresh = statistics.median(float(subprocess.check_output(
            [sys.executable, "-c", code_load], env=env_c, text=True)) for _ in range(runs))
        t_load_cold = statistics.median(float(subprocess.check_output(
            [sys.executable, "-c", code_load], env=env, text=True)) for _ in range(runs))
        wall = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.check_call([sys.executable, "-c", "import toolrules; toolrules.load()"],
                                  env=env_c)
            wall.append(time.perf_counter() - t0)
    out.append(("import + load(), no disk cache (validate all rules)", f"{t_nocache * 1e3:.0f} ms"))
    out.append(("import + load(), disk cache warm", f"{t_cache * 1e3:.0f} ms"))
    out.append(("load() alone, fresh process, disk cache warm (target <= 150 ms)",
                f"{t_load_fresh * 1e3:.0f} ms"))
    out.append(("load() alone, fresh process, no disk cache (validates every rule)",
                f"{t_load_cold * 1e3:.0f} ms"))
    out.append(("`python -c 'import toolrules; toolrules.load()'` wall", f"{statistics.median(wall) * 1e3:.0f} ms"))
    t_load = timeit(lambda: load(use_env=False, cache=False), repeat=3 if quick else 5)
    out.append(("load() in-process, validating (cold, no cache)", f"{t_load * 1e3:.0f} ms"))
    ids: list[str] = []
    for rid in engine.ruleset.ids("model"):
        ids.extend((engine.ruleset.get("model", rid).data or {}).get("examples", []) or [])
    ids = ids or ["gpt-4o"]
    n = 2000 if quick else 20000
    rules = engine._models._model_rules()
    t0 = time.perf_counter()
    for i in range(n):
        rules.resolve(ids[i % len(ids)])
    uncached = n / (time.perf_counter() - t0)
    for m in ids:
        engine.capability(m)
    t0 = time.perf_counter()
    for i in range(n * 10):
        engine.capability(ids[i % len(ids)])
    cached = n * 10 / (time.perf_counter() - t0)
    out.append((f"capability() uncached ({len(ids)} example ids)", f"{uncached:,.0f} lookups/s"))
    out.append(("capability() cached", f"{cached:,.0f} lookups/s"))
    return out
