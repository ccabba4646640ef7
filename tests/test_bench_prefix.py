"""`toolrules bench prefix`: recorded agent sessions replayed through the proxy into an
upstream that renders a chat template as llama-server does; how much of each turn's
previous prompt the next one keeps as its prefix.

The figures are checked by what they must show, not by fixed answers: a template that
renders every message where it stands keeps 100 % on every turn; one that moves the tool
list before the last user message keeps less after a new user prompt and all of it after
a tool result; a template that reads a property's `type` fails on Claude Code's tools and
the failures are counted; every text the client sent appears in the rendered prompt (and
a template that drops tool results is caught by that check). The bench templates
(templates/bench/) are tested on their own first, so the bench's verdicts rest on
templates that behave as their descriptions say.
"""

from __future__ import annotations

import itertools
import json
import lzma
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from npm_packages import PINNED
from toolrules.bench import _prefix
from toolrules.bench._prefix import (
    TemplateRaised,
    bench_sessions,
    bench_templates,
    common_prefix,
    load_session,
    measure,
    render_like_server,
)
from toolrules.bench._prefix_local import client_usage
from toolrules.cli import main

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "templates" / "bench"
SESSIONS = BENCH / "sessions"


def _template(name: str) -> str:
    return (BENCH / f"{name}.jinja").read_text(encoding="utf-8")


# ---------------------------------------------------------------- the fixtures

def test_the_recorded_sessions_are_what_the_pinned_agents_sent():
    names = {p.name for p in bench_sessions()}
    assert names == {"claude-code-session.jsonl.xz", "claude-code-new.jsonl.xz",
                     "codex-session.jsonl.xz", "codex-new.jsonl.xz"}
    assert sum(p.stat().st_size for p in bench_sessions()) < 3 << 20
    pinned = {"claude-code": PINNED["claude"][0], "codex": PINNED["codex"][0]}
    for path in bench_sessions():
        s = load_session(path)
        assert s.header["package"] == pinned[s.header["agent"]], path
        assert s.header["commands"], path
        version = s.header["package"].rsplit("@", 1)[1]
        for r in s.requests:  # the agent's own identity travels in its headers
            assert version in r.headers.get("user-agent", ""), (path, r.seq)
        if s.name.endswith("-session"):
            # one conversation: a prompt and a follow-up (`--continue` / `resume`), each
            # with four tool turns before the answer
            assert s.conversations == ["main"]
            runs = [sum(1 for r in s.requests if r.main and r.body is not None
                        and _run(path, r.seq) == run) for run in (0, 1)]
            assert runs == [5, 5], (path, runs)
        else:
            assert s.conversations == ["new-1", "new-2"], path


def _run(path: Path, seq: int) -> int:
    lines = lzma.decompress(path.read_bytes()).decode().splitlines()[1:]
    return int(json.loads(lines[seq])["run"])


def test_a_session_file_without_its_header_is_refused(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"seq": 0, "path": "/v1/messages", "body": {}}) + "\n")
    with pytest.raises(ValueError, match="header"):
        load_session(bad)


# ---------------------------------------------------------------- the templates on their own

CALL = {"id": "c1", "type": "function",
        "function": {"name": "run", "arguments": json.dumps({"cmd": "ls -la"})}}
TOOLS = [{"type": "function", "function": {
    "name": "run", "description": "Run a shell command (zz-tool-doc).",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                   "required": ["cmd"]}}}]
FIRST = [{"role": "system", "content": "zz-system"}, {"role": "user", "content": "zz-user-1"}]
TOOL_TURN = [{"role": "assistant", "content": "zz-beside", "tool_calls": [CALL]},
             {"role": "tool", "tool_call_id": "c1", "content": "zz-result"}]
NEW_PROMPT = [{"role": "assistant", "content": "zz-answer"},
              {"role": "user", "content": "zz-user-2"}]


def _prompts(name: str, **kwargs: Any) -> tuple[str, str, str]:
    """The prompt of a conversation, extended by a tool turn, then by a new prompt."""
    src = _template(name)
    out = []
    msgs = list(FIRST)
    for more in ([], TOOL_TURN, NEW_PROMPT):
        msgs += more
        out.append(render_like_server(src, {"messages": msgs, "tools": TOOLS, **kwargs}))
    return out[0], out[1], out[2]


@pytest.mark.parametrize("name", [p.stem for p in bench_templates()])
def test_every_bench_template_renders_every_text(name):
    prompts = _prompts(name)
    for word in ("zz-system", "zz-user-1", "zz-beside", "ls -la", "zz-result", "zz-answer",
                 "zz-user-2", "zz-tool-doc"):
        assert word in prompts[2], (name, word)


@pytest.mark.parametrize("name", ["chatml-tools", "header-turns", "property-type"])
def test_the_well_behaved_templates_only_grow(name):
    a, b, c = _prompts(name)
    assert b.startswith(a) and c.startswith(b)


def test_tools_before_last_user_moves_the_tool_list_on_a_new_prompt():
    a, b, c = _prompts("tools-before-last-user")
    assert b.startswith(a)  # a tool turn: the last user message stays where it was
    assert not c.startswith(b)
    assert c.index("zz-tool-doc") > c.index("zz-user-1")
    assert b.index("zz-tool-doc") < b.index("zz-user-1")


def test_drop_thinking_drops_earlier_thinking_unless_preserve_thinking():
    a, b, c = _prompts("drop-thinking")
    assert b.startswith(a) and "<think>" in b
    assert not c.startswith(b) and c.count("<think>") == 0
    # a server passes chat_template_kwargs through as template variables
    a, b, c = _prompts("drop-thinking", chat_template_kwargs={"preserve_thinking": True})
    assert b.startswith(a) and c.startswith(b)
    with pytest.raises(TemplateRaised, match="System message must be at the beginning"):
        render_like_server(_template("drop-thinking"), {"messages": [
            *FIRST, {"role": "system", "content": "late"}]})


def test_property_type_fails_on_a_property_without_a_type():
    untyped = json.loads(json.dumps(TOOLS))
    untyped[0]["function"]["parameters"]["properties"]["extra"] = {"description": "any"}
    with pytest.raises(TemplateRaised, match="type"):
        render_like_server(_template("property-type"), {"messages": FIRST, "tools": untyped})
    untyped[0]["function"]["parameters"]["properties"]["extra"]["type"] = "integer"
    assert "extra: int" in render_like_server(_template("property-type"),
                                              {"messages": FIRST, "tools": untyped})


def test_common_prefix_of_strings_and_token_lists():
    assert common_prefix("abcdef", "abcxef") == 3
    assert common_prefix("abc", "abc") == 3
    assert common_prefix("", "abc") == 0
    assert common_prefix("ab" * 5000 + "x", "ab" * 5000 + "y") == 10000
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2


# ---------------------------------------------------------------- the bench, as users run it

def _bench(*args: str) -> dict[str, tuple[str, str | None]]:
    """`toolrules bench prefix --quick ARGS`: its rows {label: (figure, verdict)}, as the
    command prints them (each row's label, figure and [verdict] appear on its line)."""
    result = CliRunner().invoke(main, ["bench", "prefix", "--quick", *args])
    assert result.exit_code == 0, result.output
    import toolrules

    templates = [a for flag, a in itertools.pairwise(args) if flag == "--template"]
    sessions = [a for flag, a in itertools.pairwise(args) if flag == "--session"]
    rows = {}
    lines = result.output.splitlines()
    assert lines[0] == "[prefix]"
    for row in _prefix.bench(toolrules.load(use_env=False), True, templates=templates,
                             sessions=sessions, unfitted="--unfitted" in args):
        label, figure, *verdict = row
        rows[label] = (figure, verdict[0] if verdict else None)
        assert any(line.startswith(f"  {label}") and figure in line for line in lines), row
    return rows


def _turns(rows: dict[str, tuple[str, str | None]], tag: str) -> list[tuple[str, float]]:
    out = []
    for label, (figure, _v) in rows.items():
        m = re.match(re.escape(tag) + r": #\d+ after (tool result|user prompt)", label)
        if m:
            out.append((m[1], float(figure.split(" %")[0])))
    return out


@pytest.fixture(scope="module")
def codex_rows():
    return _bench("--template", str(BENCH / "chatml-tools.jinja"),
                  "--template", str(BENCH / "tools-before-last-user.jinja"),
                  "--session", str(SESSIONS / "codex-session.jsonl.xz"))


def test_a_stable_template_keeps_every_previous_prompt(codex_rows):
    tag = "codex-session x chatml-tools"
    turns = _turns(codex_rows, tag)
    assert len(turns) == 9 and {kind for kind, _ in turns} == {"tool result", "user prompt"}
    assert all(share == 100.0 for _k, share in turns)
    assert codex_rows[f"{tag}: keep-share"][1] == "ok"
    assert codex_rows[f"{tag}: template errors"] == ("0 of 10", "ok")
    assert codex_rows[f"{tag}: every client text in the prompt"][1] == "ok"


@pytest.fixture(scope="module")
def unfitted_rows():
    return _bench("--unfitted", "--template", str(BENCH / "tools-before-last-user.jinja"),
                  "--template", str(BENCH / "property-type.jinja"),
                  "--session", str(SESSIONS / "codex-session.jsonl.xz"),
                  "--session", str(SESSIONS / "claude-code-session.jsonl.xz"))


def test_a_template_that_moves_the_tools_shows_the_break_and_where(unfitted_rows):
    """The route left to the rules (--unfitted): the template moves its tool list on
    every new user prompt, and the bench says so, and where."""
    tag = "codex-session x tools-before-last-user"
    turns = _turns(unfitted_rows, tag)
    assert all(share == 100.0 for kind, share in turns if kind == "tool result")
    broken = [share for kind, share in turns if kind == "user prompt"]
    assert broken and all(share < 100.0 for share in broken)
    assert unfitted_rows[f"{tag}: keep-share"][1] != "ok"
    where = next(f for label, (f, _v) in unfitted_rows.items()
                 if label.startswith(f"{tag}: #") and "user prompt" in label)
    assert "first difference at char" in where and "[AVAILABLE_TOOLS]" in where


def test_the_proxy_fitted_to_the_template_keeps_every_prompt(codex_rows):
    """As `toolrules serve` runs it - the route configured from the template's own
    inspection (the tool list moves: tools in the leading system prompt) - every turn,
    the follow-up prompt included, extends the previous prompt."""
    tag = "codex-session x tools-before-last-user"
    turns = _turns(codex_rows, tag)
    assert len(turns) == 9 and {kind for kind, _ in turns} == {"tool result", "user prompt"}
    assert all(share == 100.0 for _k, share in turns)
    assert codex_rows[f"{tag}: keep-share"][1] == "ok"
    assert codex_rows[f"{tag}: every client text in the prompt"][1] == "ok"


def test_template_errors_are_counted_per_request(unfitted_rows):
    claude = unfitted_rows["claude-code-session x property-type: template errors"]
    assert claude[0].startswith("10 of 10") and "'type'" in claude[0]
    assert claude[1] != "ok"
    assert unfitted_rows["codex-session x property-type: template errors"] == ("0 of 10", "ok")


def test_a_template_that_reads_every_property_type_gets_typed_schemas():
    """Fitted, the route sends Claude Code's untyped property with a type (the template
    fix its inspection found), and every request renders."""
    rows = _bench("--template", str(BENCH / "property-type.jinja"),
                  "--session", str(SESSIONS / "claude-code-session.jsonl.xz"))
    assert rows["claude-code-session x property-type: template errors"] == ("0 of 10", "ok")
    assert rows["claude-code-session x property-type: keep-share"][1] == "ok"


def test_options_need_the_prefix_section():
    result = CliRunner().invoke(main, ["bench", "serve", "--template",
                                       str(BENCH / "chatml-tools.jinja")])
    assert result.exit_code != 0 and "prefix" in result.output


# ---------------------------------------------------------------- the properties

@pytest.fixture(scope="module")
def engine_():
    import toolrules

    return toolrules.load(use_env=False)


@pytest.mark.parametrize("template", [p.stem for p in bench_templates()])
def test_every_client_text_reaches_every_rendered_prompt(engine_, template):
    for path in bench_sessions():
        report = measure(engine_, load_session(path), BENCH / f"{template}.jinja")
        rendered = [p for _r, p in report.prompts if p is not None]
        assert len(rendered) + report.errors == report.requests
        assert report.missing == [], (path.name, template, report.missing[:2])
        if rendered:
            assert report.texts >= 3 * len(rendered)


def test_the_text_check_catches_a_template_that_drops_long_texts(engine_, tmp_path):
    """A template that silently leaves out every text over 3000 characters (short probe
    texts pass, so the proxy cannot know): the check finds the agent's long texts gone."""
    dropping = tmp_path / "short-texts-only.jinja"
    dropping.write_text(_template("chatml-tools").replace(
        "{%- if content is string -%}{{- content -}}",
        "{%- if content is string -%}{{- content if content | length < 3000 else '' -}}"),
        encoding="utf-8")
    report = measure(engine_, load_session(SESSIONS / "codex-session.jsonl.xz"), dropping)
    assert report.errors == 0 and report.missing
    assert all(len(t) >= 3000 for t in report.missing)


def test_new_conversations_share_the_system_prompt_and_tools_unless_it_changes(
        engine_, tmp_path):
    session = load_session(SESSIONS / "codex-new.jsonl.xz")
    same = measure(engine_, session, BENCH / "chatml-tools.jinja")
    assert same.new_conversations is not None and same.new_conversations.startswith("yes")
    # the second conversation's system prompt differs in its first line: not shared
    lines = lzma.decompress((SESSIONS / "codex-new.jsonl.xz").read_bytes()).decode()
    records = [json.loads(x) for x in lines.splitlines()]
    for rec in records[1:]:
        if rec.get("conversation") == "new-2":
            part = rec["body"]["input"][0]["content"][0]
            part["text"] = "volatile-line-42\n" + part["text"]
    changed = tmp_path / "changed.jsonl"
    changed.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    report = measure(engine_, load_session(changed), BENCH / "chatml-tools.jinja")
    assert report.new_conversations is not None
    assert report.new_conversations.startswith("no") and "volatile-line-42" in \
        report.new_conversations


def test_the_client_usage_is_read_from_each_api_streamed_and_not():
    """What the local run compares with the model's figures: the prompt and cached tokens
    the client is told (Anthropic counts cache reads apart from input_tokens)."""
    def sse(*events: dict) -> bytes:
        return "".join(f"event: x\ndata: {json.dumps(e)}\n\n" for e in events).encode()

    anthropic_stream = sse(
        {"type": "message_start", "message": {"usage": {"input_tokens": 0,
                                                        "output_tokens": 0}}},
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "message_delta", "usage": {"input_tokens": 40, "output_tokens": 8,
                                            "cache_read_input_tokens": 5000}})
    assert client_usage(anthropic_stream, True) == (5040, 5000)
    responses_stream = sse(
        {"type": "response.created", "response": {"usage": None}},
        {"type": "response.completed", "response": {"usage": {
            "input_tokens": 5651, "input_tokens_details": {"cached_tokens": 5380},
            "output_tokens": 8}}})
    assert client_usage(responses_stream, True) == (5651, 5380)
    chat = json.dumps({"usage": {"prompt_tokens": 900, "completion_tokens": 8,
                                 "prompt_tokens_details": {"cached_tokens": 850}}}).encode()
    assert client_usage(chat, False) == (900, 850)
    assert client_usage(json.dumps({"usage": {"prompt_tokens": 900}}).encode(), False) == \
        (900, None)
    assert client_usage(b"data: [DONE]\n\n", True) == (None, None)


# ---------------------------------------------------------------- the real cache

@pytest.mark.local
def test_the_embedded_model_evaluates_only_the_new_tokens_of_a_stable_turn(engine_):
    """The recorded Codex session's first turns, as Codex sent them (streamed), through the
    proxy into the embedded model behind the llama-server stand-in: the first request
    evaluates its whole prompt (llama.cpp's own counters), each later one (a tool result
    appended) reuses the previous prompt and evaluates a small part; the cached tokens
    Codex is told in its usage are the tokens the model did not evaluate; every system
    and developer text reaches the model's prompt."""
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("needs llama-cpp-python (the local extra)")
    try:
        from toolrules.clients import default_gguf

        default_gguf()
    except Exception as exc:
        pytest.skip(f"local weights not available: {exc}")
    from toolrules.bench._prefix_local import serve_session

    turns, template = serve_session(engine_, load_session(SESSIONS / "codex-session.jsonl.xz"),
                                    limit=3)
    assert "gemma.j2" in template
    assert [t.note for t in turns] == ["", "", ""]
    first, *later = turns
    assert first.prompt_tokens and first.prompt_tokens > 1000
    assert first.evaluated == first.prompt_tokens and first.reused == 0
    assert first.client_cached == 0
    previous = first.prompt_tokens
    for t in later:
        assert t.prompt_tokens and t.prompt_tokens > previous
        assert t.reused is not None and t.reused >= previous, t
        assert t.evaluated is not None and t.evaluated < t.prompt_tokens // 4, t
        previous = t.prompt_tokens
    for t in turns:
        assert t.agrees, t  # evaluated + client-cached == prompt tokens, on both sides
        assert t.missing_system == () and t.texts > 0, t
