from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"

os.environ.setdefault("TOOLRULES_CACHE", "0")


@pytest.fixture(scope="session")
def engine():
    import toolrules

    return toolrules.load(use_env=False, cache=False)
