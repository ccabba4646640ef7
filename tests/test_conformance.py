"""The shared conformance corpus (../shared/conformance) through our parsers, when present.

run.py replays every fixture without streaming and with five chunkings and applies its
own checks; this wrapper fails with the first failing cases' summary.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from conftest import SHARED

CONFORMANCE = Path(os.environ.get("TOOLRULES_CONFORMANCE_DIR", SHARED / "conformance"))

pytestmark = pytest.mark.conformance


@pytest.mark.skipif(not (CONFORMANCE / "run.py").exists(),
                    reason="conformance corpus not present (set TOOLRULES_CONFORMANCE_DIR)")
def test_conformance_corpus(engine):
    spec = importlib.util.spec_from_file_location("conformance_run", CONFORMANCE / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    results = run.run(engine)
    failed = [(fx["id"], sorted({f"{r[0]}@{r[1]}" for r in rows if r[2] == "fail"})[:4])
              for fx, status, rows in results if status == "fail"]
    assert results, "no fixtures found"
    assert not failed, f"{len(failed)}/{len(results)} fixtures fail: {failed[:10]}"
