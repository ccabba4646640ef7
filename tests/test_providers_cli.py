"""The wire-format CLI commands: translate, request, response, providers, transforms."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from conftest import REPO
from toolrules.cli import main

CASES = REPO / "golden" / "providers"
CONV = yaml.safe_load((CASES / "conversation.cases.yaml").read_text())


def run(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def files(tmp_path):
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(CONV["tools"]))
    msgs = tmp_path / "msgs.json"
    msgs.write_text(json.dumps(CONV["messages"]))
    return tools, msgs


def test_translate(tmp_path):
    tools, _ = files(tmp_path)
    r = run("translate", tools, "--provider", "anthropic")
    assert r.exit_code == 0, r.output
    assert [t["name"] for t in json.loads(r.output)] == ["get_weather", "search_docs", "get_time"]
    r = run("translate", tools, "-p", "openai", "--no-strict")
    assert "strict" not in json.loads(r.output)[0]["function"]
    r = run("translate", "-", "-p", "gemini", input=json.dumps(CONV["tools"]))
    assert json.loads(r.output)[0]["functionDeclarations"][0]["name"] == "get_weather"


def test_request_from_messages_and_converting_bodies(tmp_path):
    tools, msgs = files(tmp_path)
    r = run("request", msgs, "-p", "bedrock", "-m", "anthropic.claude-3-haiku", "--tools", tools,
            "--tool-choice", "required", "-o", "max_tokens=100")
    assert r.exit_code == 0, r.output
    body = json.loads(r.output)
    assert body["toolConfig"]["toolChoice"] == {"any": {}} and body["inferenceConfig"]["maxTokens"] == 100
    # an Anthropic request converted into a Gemini one
    anthropic_body = tmp_path / "anthropic.json"
    r = run("request", msgs, "-p", "anthropic", "-m", "claude-sonnet-4-5", "--tools", tools)
    anthropic_body.write_text(r.output)
    r = run("request", anthropic_body, "--from", "anthropic", "-p", "gemini",
            "--overrides", '{"safetySettings": []}')
    assert r.exit_code == 0, r.output
    gem = json.loads(r.output)
    assert gem["systemInstruction"]["parts"][0]["text"] == "You are a concise assistant."
    assert gem["safetySettings"] == [] and "model" not in gem


def test_response_pretty_json_stream_and_convert(tmp_path):
    cases = yaml.safe_load((CASES / "anthropic.cases.yaml").read_text())
    body = tmp_path / "body.json"
    body.write_text(json.dumps(cases["responses"]["tool_use"]))
    r = run("response", body, "-p", "anthropic")
    assert r.exit_code == 0 and "call 0     search_docs(" in r.output and "finish     tool_calls" in r.output
    r = run("response", body, "-p", "anthropic", "--json")
    assert json.loads(r.output)["tool_calls"][1]["name"] == "get_time"
    r = run("response", body, "-p", "anthropic", "--to", "openai")
    assert json.loads(r.output)["choices"][0]["finish_reason"] == "tool_calls"
    events = tmp_path / "events.ndjson"
    events.write_text("\n".join(json.dumps(e) for e in cases["streams"]["tool_use"]["events"]))
    r = run("response", events, "-p", "anthropic", "--stream", "--json")
    out = json.loads(r.output)
    assert out["result"]["finish_reason"] == "tool_calls"
    assert [c["type"] for c in out["chunks"]].count("tool_end") == 2


def test_providers_and_transforms_lists():
    r = run("providers")
    assert r.exit_code == 0 and "together" in r.output and "extends openai-compatible" in r.output
    r = run("transforms", "--json")
    data = json.loads(r.output)
    ops = {o["op"] for o in data["schema_ops"]}
    assert {"strict", "inline_refs", "flatten_nested", "type_aliases", "nullable"} <= ops
    assert {t["name"] for t in data["message_transforms"]} >= {"function_call_to_tool_calls",
                                                             "reasoning_content_if_missing"}


def test_errors_are_one_line_with_hints(tmp_path):
    tools, msgs = files(tmp_path)
    for args, needle in [
        (("translate", tmp_path / "missing.json", "-p", "openai"), "cannot read tools file"),
        (("translate", tools, "-p", "opneai"), "did you mean openai"),
        (("request", msgs, "-p", "ollama", "--tools", tools, "--tool-choice", "required"), "cannot express"),
        (("request", msgs, "-p", "openai", "-o", "nonsense"), "KEY=VALUE"),
        (("request", msgs, "-p", "openai", "-o", "foo=1"), "request_overrides"),
        (("response", tools, "-p", "openai"), "not a response body"),
    ]:
        r = run(*args)
        assert r.exit_code != 0, args
        assert needle in r.output, (args, r.output)
        assert "Traceback" not in r.output
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = run("response", bad, "-p", "openai")
    assert r.exit_code == 1 and "not valid JSON" in r.output
    notlist = tmp_path / "obj.json"
    notlist.write_text('{"a": 1}')
    r = run("translate", notlist, "-p", "openai")
    assert r.exit_code == 1 and "JSON list of tools" in r.output
