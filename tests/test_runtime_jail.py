"""The workspace jail (path security): traversal, absolute paths, ~, NUL bytes,
invisible and look-alike characters, symlinks out (and swapped in during a read),
blocked patterns for reads, writes and listings."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import pytest

import toolrules
from runtime_helpers import OUTSIDE_SECRET, code, executor, make_tree, rule, run
from toolrules.runtime import Jail, PolicyRefusal, policy_rules


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    return make_tree(tmp_path)


@pytest.mark.parametrize("path,rule_name", [
    ("../../../etc/passwd", "path.escape"),
    ("src/../../outside/secret.txt", "path.escape"),
    ("/etc/passwd", "path.absolute"),
    ("~/.bashrc", "path.home"),
    ("~root/.ssh/id_rsa", "path.home"),
    ("a\x00b", "path.nul"),
    ("docs/\u202etxt.exe", "paths.refuse_categories"),     # right-to-left override
    ("docs/a\u200bb.md", "paths.refuse_categories"),        # zero-width space
    ("docs/\u2066x\u2069.md", "paths.refuse_categories"),   # bidi isolate
    ("\uff0e\uff0e/outside/secret.txt", "paths.refuse_compatibility_forms"),  # fullwidth dots
    ("src\u2215main.py", None),                              # division slash: a plain name
])
def test_hostile_path_texts_are_refused_with_the_rule(tree, path, rule_name):
    ws, _ = tree
    result = run(executor(ws, "full"), "read_file", path=path)
    if rule_name is None:
        assert code(result) in ("NOT_FOUND", None)
        return
    assert not result.ok
    assert code(result) == "PERMISSION_DENIED"
    assert rule(result) == rule_name
    assert OUTSIDE_SECRET not in str(result)


def test_absolute_path_inside_the_workspace_is_fine(tree):
    ws, _ = tree
    result = run(executor(ws, "read_only"), "read_file", path=str(ws / "src" / "main.py"))
    assert result.ok, result.error
    assert "def main" in result.output


def test_dot_dot_that_stays_inside_is_fine(tree):
    ws, _ = tree
    result = run(executor(ws, "read_only"), "read_file", path="src/../README.md")
    assert result.ok and result.output.startswith("# Project")


@pytest.mark.parametrize("path", [".env", ".ENV", ".env.local", "config/.env.production",
                                  ".git/config", "server.pem", "deploy/id.key",
                                  "secrets/db.txt", ".ssh/id_rsa", "node_modules/x/i.js",
                                  "src/__pycache__/m.pyc"])
def test_blocked_patterns_refuse_reads(tree, path):
    ws, _ = tree
    result = run(executor(ws, "full"), "read_file", path=path)
    assert code(result) == "PERMISSION_DENIED"
    assert rule(result).startswith("paths.blocked: ")
    assert "sk-very-secret" not in str(result)


@pytest.mark.parametrize("path", [".env", "sub/.git/hooks/x", "a.pem", "secrets/new.txt"])
def test_blocked_patterns_refuse_writes(tree, path):
    ws, _ = tree
    before = (ws / ".env").read_text()
    result = run(executor(ws), "write_file", path=path, content="X=1")
    assert code(result) == "PERMISSION_DENIED"
    assert (ws / ".env").read_text() == before
    assert not (ws / "sub").exists()
    assert not (ws / "a.pem").exists()
    assert not (ws / "secrets" / "new.txt").exists()


def test_listings_skip_blocked_entries_silently(tree):
    ws, _ = tree
    result = run(executor(ws, "discovery"), "list_files", path=".", recursive=True)
    assert result.ok
    names = result.output.splitlines()
    assert "README.md" in names and "src/" in names and "src/main.py" in names
    for hidden in (".env", ".git/", ".git/config", "server.pem", "secrets/", "secrets/db.txt",
                   "link_env"):
        assert hidden not in names
    # symlinks: shown only when they point inside (and not to a blocked file)
    assert "link_in.py" in names
    assert "link_out.txt" not in names and "dir_out/" not in names
    assert "secret.txt" not in result.output


def test_listing_a_blocked_directory_is_refused(tree):
    ws, _ = tree
    result = run(executor(ws, "discovery"), "list_files", path=".git")
    assert code(result) == "PERMISSION_DENIED"


def test_symlink_pointing_outside_is_refused(tree):
    ws, _ = tree
    ex = executor(ws, "full")
    for path in ("link_out.txt", "dir_out/secret.txt"):
        result = run(ex, "read_file", path=path)
        assert code(result) == "PERMISSION_DENIED", path
        assert rule(result) == "jail.symlink"
        assert OUTSIDE_SECRET not in str(result)


def test_symlink_to_a_blocked_file_is_refused(tree):
    ws, _ = tree
    result = run(executor(ws, "full"), "read_file", path="link_env")
    assert code(result) == "PERMISSION_DENIED"
    assert rule(result) == "paths.blocked: .env"


def test_symlink_inside_the_workspace_is_followed(tree):
    ws, _ = tree
    result = run(executor(ws, "read_only"), "read_file", path="link_in.py")
    assert result.ok and "def main" in result.output


def test_writes_never_follow_a_symlinked_directory_out(tree):
    ws, outside = tree
    before = sorted(os.listdir(outside))
    result = run(executor(ws), "write_file", path="dir_out/new.txt", content="x")
    assert code(result) == "PERMISSION_DENIED"
    result = run(executor(ws), "write_file", path="link_out.txt", content="overwritten")
    assert code(result) == "PERMISSION_DENIED"
    assert sorted(os.listdir(outside)) == before
    assert (outside / "secret.txt").read_text() == OUTSIDE_SECRET


def test_parents_are_created_inside_the_jail_only(tree):
    ws, _outside = tree
    result = run(executor(ws), "write_file", path="a/b/c/new.txt", content="deep")
    assert result.ok, result.error
    assert (ws / "a" / "b" / "c" / "new.txt").read_text() == "deep"
    result = run(executor(ws), "write_file", path="../x/new.txt", content="no")
    assert code(result) == "PERMISSION_DENIED"
    assert not (ws.parent / "x").exists()


def test_symlink_swapped_in_during_reads_never_leaks(tree):
    """A racing thread flips `flip.txt` between a regular file and a symlink to the
    secret outside. Every read either returns the inside content, is refused, or finds
    no file - never the outside secret (the open is O_NOFOLLOW from a directory fd)."""
    ws, outside = tree
    target = ws / "flip.txt"
    target.write_text("inside")
    stop = threading.Event()

    def flipper() -> None:
        tmp_file = ws / ".flip_file"
        tmp_link = ws / ".flip_link"
        while not stop.is_set():
            tmp_file.write_text("inside")
            os.replace(tmp_file, target)
            with contextlib.suppress(FileExistsError):
                os.symlink(outside / "secret.txt", tmp_link)
            os.replace(tmp_link, target)

    jail = Jail(ws, policy_rules("default"))
    t = threading.Thread(target=flipper)
    t.start()
    outcomes = {"inside": 0, "refused": 0, "missing": 0}
    try:
        for _ in range(3000):
            try:
                data = jail.read_bytes("flip.txt", 1000)
            except PolicyRefusal:
                outcomes["refused"] += 1
                continue
            except FileNotFoundError:
                outcomes["missing"] += 1
                continue
            assert data == b"inside", data
            outcomes["inside"] += 1
    finally:
        stop.set()
        t.join()
    assert outcomes["inside"] > 0
    assert outcomes["refused"] > 0, outcomes  # the race was really exercised


def test_directory_swapped_for_a_symlink_during_writes_never_escapes(tree):
    ws, outside = tree
    (ws / "d").mkdir()
    stop = threading.Event()

    def flipper() -> None:
        while not stop.is_set():
            try:
                os.rename(ws / "d", ws / "d_real")
                os.symlink(outside, ws / "d")
                os.unlink(ws / "d")
                os.rename(ws / "d_real", ws / "d")
            except OSError:
                pass

    jail = Jail(ws, policy_rules("default"))
    t = threading.Thread(target=flipper)
    t.start()
    try:
        for i in range(1500):
            with contextlib.suppress(PolicyRefusal, OSError):
                jail.write_bytes(f"d/f{i % 7}.txt", b"data")
    finally:
        stop.set()
        t.join()
    assert sorted(os.listdir(outside)) == ["secret.txt"]


def test_jail_refuses_workspace_files_that_are_not_regular(tree):
    ws, _ = tree
    os.mkfifo(ws / "pipe")
    result = run(executor(ws, "read_only"), "read_file", path="pipe")
    assert code(result) == "PERMISSION_DENIED"
    assert rule(result) == "jail.file_type"


def test_read_size_limit(tree):
    ws, _ = tree
    (ws / "big.txt").write_bytes(b"x" * 1_000_001)
    result = run(executor(ws, "read_only"), "read_file", path="big.txt")
    assert code(result) == "FILE_TOO_LARGE"
    assert "search_files" in result.error
    (ws / "ok.txt").write_bytes(b"x" * 1_000_000)
    assert len(Jail(ws, policy_rules("default")).read_bytes("ok.txt", 1_000_000)) == 1_000_000
    # read, but more than the output cap: replaced, recoverable
    result = run(executor(ws, "read_only"), "read_file", path="ok.txt")
    assert code(result) == "TOOL_OUTPUT_TOO_LARGE"
    assert result.tool_error.recoverable
    # a slice of it fits
    result = run(executor(ws, "read_only"), "read_file", path="ok.txt", max_lines=1)
    assert code(result) == "TOOL_OUTPUT_TOO_LARGE"
    (ws / "lines.txt").write_text("".join(f"line {i}\n" for i in range(1, 50_001)))
    result = run(executor(ws, "read_only"), "read_file", path="lines.txt", start_line=5,
                 max_lines=2)
    assert result.ok and result.output == "line 5\nline 6\n"


def test_every_refusal_is_a_permission_class_tool_error(tree):
    ws, _ = tree
    result = run(executor(ws, "full"), "read_file", path="../x")
    err = result.tool_error
    assert isinstance(err, toolrules.ToolError)
    assert err.code == toolrules.ToolErrorCode.PERMISSION
    assert err.recoverable is False
    assert "leaves the workspace" in result.error
