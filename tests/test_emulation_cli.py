"""CLI: `toolrules render`, `toolrules audit`, `toolrules validate-call`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from toolrules.cli import main

TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["path"]}}},
    {"name": "search", "description": "Search code, e.g. `def main`.",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                    "required": ["query"]}},
]


def run(*args):
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def files(tmp_path):
    (tmp_path / "tools.json").write_text(json.dumps(TOOLS))
    (tmp_path / "bad_call.json").write_text(json.dumps(
        {"name": "read_file", "arguments": {"path": 3, "limit": "5"}}))
    (tmp_path / "calls.json").write_text(json.dumps(
        [{"name": "read_file", "arguments": {"path": "a"}},
         {"name": "search", "arguments": '{"query": "x"}'}]))
    return tmp_path


def test_render(files):
    r = run("render", "--tools", str(files / "tools.json"), "--style", "xml")
    assert r.exit_code == 0, r.output
    assert "<tool_call>" in r.stdout and "### read_file" in r.stdout
    assert "answers parse with dialect xml-tags" in r.stderr
    r = run("render", "--tools", str(files / "tools.json"), "--model", "llama3:8b",
            "--task", "read the config", "--json")
    data = json.loads(r.stdout)
    assert data["tools"] == ["read_file", "search"] and data["dialect"]
    assert "read_file" in data["prompt"] and data["dropped"] == []


def test_render_errors_are_one_line(files):
    r = run("render", "--tools", str(files / "nope.json"))
    assert r.exit_code == 1 and "cannot read tools file" in r.output
    assert "Traceback" not in r.output
    r = run("render", "--tools", str(files / "tools.json"), "--style", "jsn")
    assert r.exit_code == 1 and "did you mean json?" in r.output
    (files / "t.json").write_text('[{"nam": 1}]')
    r = run("render", "--tools", str(files / "t.json"))
    assert r.exit_code == 1 and "tool has no name" in r.output and "hint:" in r.output


def test_audit(files):
    r = run("audit", str(files / "tools.json"))
    assert r.exit_code == 0 and "0.00  read_file" in r.stdout and "0.40  search" in r.stdout
    r = run("audit", str(files / "tools.json"), "--min-score", "0.3")
    assert r.exit_code == 1 and "1 tool(s) below 0.3: read_file" in r.output
    r = run("audit", str(files / "tools.json"), "--json")
    assert json.loads(r.stdout)["search"]["score"] == 0.4
    r = run("audit", str(files / "tools.json"), "--enhance")
    enhanced = json.loads(r.stdout)
    assert "Parameters: path: string (required)" in enhanced[0]["function"]["description"]


def test_validate_call(files):
    r = run("validate-call", str(files / "bad_call.json"), "--tools", str(files / "tools.json"))
    assert r.exit_code == 1
    assert "read_file.path: Expected a string, got an integer" in r.stdout
    assert '{"name": "read_file", "arguments": {"path": "3", "limit": 5}}' in r.stdout
    r = run("validate-call", str(files / "bad_call.json"), "--tools", str(files / "tools.json"),
            "--coerce")
    assert r.exit_code == 0 and 'coerced limit: "5" -> 5 (string-to-integer)' in r.stdout
    r = run("validate-call", str(files / "calls.json"), "--tools", str(files / "tools.json"),
            "--json")
    assert r.exit_code == 0 and [c["ok"] for c in json.loads(r.stdout)] == [True, True]
    r = run("validate-call", str(files / "bad_call.json"), "--tools", str(files / "tools.json"),
            "--style", "hermes")
    assert '<tool_call>\n{"name": "read_file"' in r.stdout
    (files / "x.json").write_text('"x"')
    r = run("validate-call", str(files / "x.json"), "--tools", str(files / "tools.json"))
    assert r.exit_code == 1 and "a tool call must be" in r.output and "Traceback" not in r.output
