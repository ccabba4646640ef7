"""Atomic writes: a process killed in the middle of write_file leaves the old or the new
content, never a torn file."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(os.name != "posix", reason="SIGKILL")

WRITER = textwrap.dedent("""
    import sys
    from toolrules.runtime import Jail, policy_rules
    jail = Jail(sys.argv[1], policy_rules("default"))
    size = int(sys.argv[2])
    blocks = [b"A" * size, b"B" * size]
    i = 0
    print("ready", flush=True)
    while True:
        jail.write_bytes("data/file.bin", blocks[i % 2])
        i += 1
""")


def test_killed_writer_never_leaves_a_torn_file(tmp_path):
    size = 4 << 20
    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "file.bin"
    target.write_bytes(b"A" * size)
    rng = random.Random(7)
    kills = 0
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(size)],
                                stdout=subprocess.PIPE)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.02, 0.3))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
        data = target.read_bytes()
        assert len(data) == size, "torn: wrong size"
        assert data in (b"A" * size, b"B" * size), "torn: mixed content"
    assert kills == 8
    # leftovers are temporary files only, never the target in a half state
    for p in (tmp_path / "data").iterdir():
        assert p.name == "file.bin" or (p.name.startswith(".file.bin.") and
                                        p.name.endswith(".tmp"))
