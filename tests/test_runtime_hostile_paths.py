"""Property test: hostile paths through every file tool never open, create or list
anything outside the workspace.

A few hundred examples by default; 10,000 with TOOLRULES_SLOW=1 (or pytest --slow)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolrules
from runtime_helpers import OUTSIDE_SECRET, make_tree
from toolrules import ToolCall

SLOW = os.environ.get("TOOLRULES_SLOW", "") not in ("", "0")
EXAMPLES = 10_000 if SLOW else 300


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("hostile")
    ws, outside = make_tree(tmp)
    policy = dataclasses.replace(toolrules.runtime.policy_rules("default"), calls_per_minute=None,
                                 writes_per_minute=None, shell_per_minute=None,
                                 bytes_written_per_session=None)
    ex = toolrules.ToolExecutor(toolrules.builtin_tools(ws), workspace=ws, trust="full",
                                policy=policy)
    return tmp, ws, outside, ex


def _snapshot(directory: Path) -> dict[str, bytes]:
    out = {}
    for root, dirs, files in os.walk(directory, followlinks=False):
        for name in files + dirs:
            p = Path(root) / name
            out[str(p.relative_to(directory))] = (p.read_bytes() if p.is_file() and not
                                                  p.is_symlink() else b"")
    return out


_COMPONENTS = st.sampled_from([
    ".", "..", "", "src", "docs", "dir_out", "link_out.txt", "link_in.py", "link_env", ".env",
    ".git", "secret.txt", "outside", "ws", "~", "~root", "a\x00b", "x\u202ey", "z\u200bw",
    "\uff0e\uff0e", "\u2024\u2024", "new", "n\u0301", "..\\..", "secrets", ".ssh", "x.pem",
    "%2e%2e", "....", ". .", "..;", "\u00a0..", "\u0000",
])
_PLAIN = st.sampled_from([".", "..", "src", "docs", "dir_out", "link_out.txt", "link_in.py",
                          "new", "a", "main.py", "README.md", "outside", "ws"])
_WEIRD = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/"), max_size=4)
_NAMEISH = st.text(alphabet=st.characters(categories=["L", "N"], include_characters="._-~ "),
                   min_size=1, max_size=6)
_PARTS = st.one_of(_PLAIN, _PLAIN, _PLAIN, _COMPONENTS, _NAMEISH, _WEIRD)


@st.composite
def hostile_paths(draw: st.DrawFn, tmp: Path, ws: Path, outside: Path) -> str:
    parts = draw(st.lists(_PARTS, min_size=0, max_size=7))
    prefix = draw(st.sampled_from(["", "", "", "", "/", "./", f"{ws}/", f"{ws}/", f"{outside}/",
                                   f"{tmp}/", "~/", "//", f"{ws}/../"]))
    return prefix + "/".join(parts)


def _inside(ws: Path, rel: str) -> bool:
    real = os.path.realpath(ws / rel)
    root = os.path.realpath(ws)
    return real == root or real.startswith(root + os.sep)


def test_hostile_paths_never_reach_outside(world):
    tmp, ws, outside, ex = world
    before_outside = _snapshot(outside)
    before_tmp = sorted(os.listdir(tmp))
    ran: list[str] = []

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=not SLOW,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(path=hostile_paths(tmp, ws, outside),
           op=st.sampled_from(["read", "write", "edit", "list", "list_recursive", "search",
                               "cwd"]))
    def check(path: str, op: str) -> None:
        ran.append(op)
        if op == "read":
            call = ToolCall("h", "read_file", {"path": path})
        elif op == "write":
            call = ToolCall("h", "write_file", {"path": path, "content": "w"})
        elif op == "edit":
            call = ToolCall("h", "edit_file", {"path": path, "old_string": OUTSIDE_SECRET,
                                               "new_string": "x"})
        elif op == "list":
            call = ToolCall("h", "list_files", {"path": path})
        elif op == "list_recursive":
            call = ToolCall("h", "list_files", {"path": path, "recursive": True})
        elif op == "search":
            call = ToolCall("h", "search_files", {"pattern": "SECRET|secret", "path": path})
        else:
            call = ToolCall("h", "run_command", {"command": "ls", "cwd": path})
        result = ex.execute_sync(call)
        text = repr(result)
        assert OUTSIDE_SECRET not in text
        assert "sk-very-secret" not in text
        if result.ok and op in ("list", "list_recursive"):
            for line in result.output.splitlines():
                if not line.startswith("[..."):
                    assert _inside(ws, line.rstrip("/")), line
        if result.ok and op == "search":
            for line in result.output.splitlines():
                if ":" in line and not line.startswith("[..."):
                    assert _inside(ws, line.split(":", 1)[0]), line
        if result.ok and op == "write":
            written = result.output.split(" to ", 1)[1].removesuffix(" (new file)")
            assert _inside(ws, written)
        assert _snapshot(outside) == before_outside
        assert sorted(os.listdir(tmp)) == before_tmp

    check()
    assert len(ran) >= EXAMPLES  # the slow suite really runs 10,000
