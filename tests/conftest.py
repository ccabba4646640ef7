from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"

os.environ.setdefault("TOOLRULES_CACHE", "0")


@pytest.fixture(scope="session")
def engine():
    import toolrules

    return toolrules.load(use_env=False, cache=False)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", default=False,
                     help="long property runs (same as TOOLRULES_SLOW=1)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--slow", default=False):
        os.environ["TOOLRULES_SLOW"] = "1"


@pytest.fixture(scope="module")
def upstream():
    """One scripted model server on 127.0.0.1 for a test module (tests/wire_server.py);
    modules that need a fresh one per test define their own."""
    from wire_server import WireServer

    with WireServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """A trace directory shared by a module's proxies."""
    return tmp_path_factory.mktemp("traces")


@pytest.fixture
def access(caplog):
    """The proxy's access-log records so far (JSON objects), as a function."""
    import json
    import logging

    caplog.set_level(logging.INFO, logger="toolrules.serve.access")

    def records() -> list[dict]:
        from toolrules.serve._app import logged

        # a line is written just after its answer went out: the answered ones first
        assert logged(10.0), "an answered request did not write its access-log line"
        return [json.loads(r.getMessage()) for r in caplog.records
                if r.name == "toolrules.serve.access"]
    return records


def children() -> set[int]:
    """Live (not zombie) child processes of this process."""
    me = os.getpid()
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me and fields[0] != "Z":
            out.add(int(entry))
    return out


@pytest.fixture
def no_orphans():
    """Fails the test when it leaves a child process (an MCP server) running: whatever
    it started must be gone within 15 s of its end."""
    before = children()
    yield
    deadline = time.monotonic() + 15.0
    left = children() - before
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = children() - before
    assert not left, f"processes left running: {sorted(left)}"
