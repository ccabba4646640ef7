"""The CLI: exit codes, formats, and errors without tracebacks."""

from __future__ import annotations

import json

from click.testing import CliRunner

from toolrules.cli import main


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_version():
    r = run("--version")
    assert r.exit_code == 0 and "toolrules" in r.output


def test_lint_bundled_ok():
    r = run("lint")
    assert r.exit_code == 0, r.output


def test_lint_broken_overlay_exits_1(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "x.yaml").write_text("family: x\nmatch: ['^x(']\n")
    r = run("lint", str(tmp_path))
    assert r.exit_code == 1
    assert "x.yaml:2:" in r.output and "[error]" in r.output and "(regex)" in r.output
    r = run("lint", "--format", "json", str(tmp_path))
    problems = json.loads(r.stdout)
    assert problems[0]["check"] == "regex" and problems[0]["line"] == 2
    r = run("lint", "--format", "github", str(tmp_path))
    assert r.output.startswith("::error file=")


def test_lint_missing_path():
    r = run("lint", "/no/such/dir")
    assert r.exit_code == 1 and "no such file" in r.output and "Traceback" not in r.output


def test_inspect_json_and_text():
    r = run("inspect", "--json", "claude-3.5-sonnet")
    data = json.loads(r.output)
    assert data["spec"] == {"family": "claude", "version": "3.5", "variant": "sonnet"}
    assert data["capability"]["needs_tool_schema_strict"] is True
    assert any("claude.yaml" in line for line in data["decided_by"])
    r = run("inspect", "llama3:7b")
    assert r.exit_code == 0 and "native_tools" in r.output and "False" in r.output
