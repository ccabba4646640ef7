"""Emulation prompts and the context budget for small windows (context overflow).

TestOptimizeToolDefinitions and TestBuildEmulationPrompt are table tests of tool-definition
trimming and prompt building.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import toolrules
from toolrules import (
    Capability,
    RuleError,
    Tool,
    ToolCall,
    UnknownRuleError,
    build_emulation_prompt,
    optimize_tool_definitions,
)


class TestOptimizeToolDefinitions:
    """Context overflow handling."""

    @pytest.fixture
    def many_tools(self) -> tuple[Tool, ...]:
        return tuple(
            Tool(
                name=f"tool_{i}",
                description=f"This is tool number {i} with a moderately long description " * 5,
                parameters={"type": "object", "properties": {"arg": {"type": "string"}}},
            )
            for i in range(50)
        )

    def test_no_optimization_large_context(self, many_tools):
        capability = Capability(context_window=128000)
        result = optimize_tool_definitions(many_tools, capability)
        assert len(result) == len(many_tools)

    def test_reduces_tools_small_context(self, many_tools):
        capability = Capability(context_window=4096)
        result = optimize_tool_definitions(many_tools, capability)
        assert len(result) < len(many_tools)

    def test_truncates_descriptions_tiny_context(self, many_tools):
        capability = Capability(context_window=2048)
        result = optimize_tool_definitions(many_tools, capability)
        assert result
        for tool in result:
            assert len(tool.description) <= 210  # 200 + "..."

    def test_prioritizes_by_task_hint(self, many_tools):
        file_tool = Tool(
            name="write_file",
            description="Write content to a file",
            parameters={"type": "object", "properties": {}},
        )
        tools_with_file = (*many_tools, file_tool)
        capability = Capability(context_window=4096)
        result = optimize_tool_definitions(
            tools_with_file, capability, task_hint="write a python file"
        )
        result_names = [t.name for t in result]
        assert "write_file" in result_names
        assert result_names[0] == "write_file"


class TestBuildEmulationPrompt:
    """Adaptive emulation prompt generation."""

    def test_compact_for_small_context(self):
        tools = (Tool(name="test", description="A test tool", parameters={}),)
        capability = Capability(context_window=4096, emulation_style="json")
        prompt = build_emulation_prompt(tools, capability)
        assert len(prompt) < 500

    def test_parallel_prompt(self):
        tools = (Tool(name="test", description="A test tool", parameters={}),)
        capability = Capability(parallel_tools=True)
        prompt = build_emulation_prompt(tools, capability)
        assert "multiple tools" in prompt.lower() or "one per tool" in prompt.lower()

    def test_xml_style(self):
        tools = (Tool(name="test", description="A test tool", parameters={}),)
        capability = Capability(emulation_style="xml")
        prompt = build_emulation_prompt(tools, capability)
        assert "<tool_call>" in prompt


TOOLS = [
    Tool("read_file", "Read a file from the workspace.",
         {"type": "object", "properties": {
             "path": {"type": "string", "description": "Path relative to the workspace"},
             "limit": {"type": "integer", "description": "Max lines"}},
          "required": ["path"]}),
    {"type": "function", "function": {
        "name": "search", "description": "Search the code base.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "mode": {"type": "string", "enum": ["fast", "deep"]}}, "required": ["query"]}}},
]


def trained_dialect(engine):
    return next(s for s in engine.emulation_styles() if s.trained).dialect


# ---------------------------------------------------------------- selection

@pytest.mark.parametrize(("cap", "style"), [
    (Capability(), "json"),
    (Capability(context_window=128000), "json"),
    (Capability(context_window=4096), "compact"),
    (Capability(context_window=8192), "json"),
    (Capability(parallel_tools=True), "parallel"),
    (Capability(parallel_tools=True, context_window=4096), "parallel"),
    (Capability(emulation_style="xml"), "xml"),
    (Capability(emulation_style="xml", parallel_tools=True, context_window=2048), "xml"),
    (Capability(emulation_style="markdown"), "markdown"),
    (Capability(emulation_style="compact"), "compact"),
    (Capability(emulation_style="parallel"), "parallel"),
    (Capability(emulation_style="dialect", dialect="no-such-format"), "json"),
    (Capability(emulation_style="dialect", dialect="no-such-format", context_window=4096),
     "compact"),
])
def test_selection_order_xml_parallel_small_window(engine, cap, style):
    assert engine.select_emulation(capability=cap).name == style


def test_trained_format_when_the_model_has_one(engine):
    dialect = trained_dialect(engine)
    chosen = engine.select_emulation(capability=Capability(emulation_style="dialect",
                                                           dialect=dialect))
    assert chosen.trained and chosen.dialect == dialect
    # a trained format wins over the default style (json): the model is prompted in the
    # format it was trained on, and its answer is read with its own dialect ...
    default = engine.select_emulation(capability=Capability(dialect=dialect))
    assert default.trained and default.dialect == dialect
    # ... unless its rule asks for another style
    xml = engine.select_emulation(capability=Capability(dialect=dialect, emulation_style="xml"))
    assert xml.name == "xml"


def test_every_style_parses_with_a_named_dialect(engine):
    styles = {s.name: s for s in engine.emulation_styles()}
    assert {"json", "compact", "parallel", "xml", "markdown"} <= set(styles)
    assert styles["xml"].dialect != styles["json"].dialect
    assert sum(s.trained for s in styles.values()) >= 6


def test_unknown_style_is_a_clear_error(engine):
    with pytest.raises(UnknownRuleError, match="unknown emulation style 'jsn'; did you mean"):
        engine.render_emulation(TOOLS, style="jsn")


# ---------------------------------------------------------------- rendering

def test_render_lists_every_tool_and_the_format(engine):
    prompt = engine.render_emulation(TOOLS, capability=Capability())
    assert "### read_file" in prompt and "### search" in prompt
    assert "path (string, required): Path relative to the workspace" in prompt
    assert '- mode (string): one of: "fast", "deep"' in prompt
    assert '```json\n{"tool": "tool_name", "arguments": {"arg1": "value1"}}\n```' in prompt
    assert "{{" not in prompt and "{%" not in prompt
    assert prompt == prompt.strip()


def test_compact_descriptions_below_the_window(engine):
    long = Tool("long", "word " * 100, {"type": "object", "properties": {"a": {"type": "string"}}})
    prompt = engine.render_emulation([long], capability=Capability(emulation_style="xml",
                                                                   context_window=4096))
    assert "- long(a): " in prompt and "### long" not in prompt
    line = next(ln for ln in prompt.splitlines() if ln.startswith("- long("))
    assert len(line) < 100 and line.endswith("...")


def test_render_by_model_id_and_dialect_reported(engine):
    prompt = engine.emulation(TOOLS, model="llama3:8b", task_hint="read the config file")
    assert prompt.dialect in engine.ruleset.ids("dialect")
    assert "read_file" in prompt.text


def test_trained_prompt_in_the_models_format(engine):
    dialect = trained_dialect(engine)
    prompt = engine.emulation(TOOLS, capability=Capability(emulation_style="dialect",
                                                           dialect=dialect))
    assert prompt.style.trained and prompt.dialect == dialect
    assert "read_file" in prompt.text and "search" in prompt.text


def test_guidance_follows_the_capability(engine):
    off = engine.render_emulation(TOOLS, capability=Capability())
    on = engine.emulation(TOOLS, capability=Capability(prompt_guidance=True))
    assert "GUIDELINES" not in off and "GUIDELINES" in on.text
    assert [c.name for c in on.examples] == ["read_file", "search"]
    # examples are built from the tools' schemas and are valid calls
    for call in on.examples:
        assert engine.validate_tool_call(call, TOOLS) == []
        assert engine.render_call(call, TOOLS, capability=Capability()) in on.text
    forced_off = engine.render_emulation(TOOLS, capability=Capability(prompt_guidance=True),
                                         examples=False)
    assert "GUIDELINES" not in forced_off


def test_examples_follow_the_task(engine):
    prompt = engine.emulation(TOOLS, capability=Capability(), examples=1,
                              task_hint="search the code for TODO")
    assert [c.name for c in prompt.examples] == ["search"]
    assert prompt.examples[0].arguments == {"query": "search terms"}


def test_explicit_examples(engine):
    calls = [ToolCall(None, "search", {"query": "TODO", "mode": "deep"})]
    prompt = engine.emulation(TOOLS, capability=Capability(), examples=calls)
    assert prompt.examples == tuple(calls)
    assert '{"tool": "search", "arguments": {"query": "TODO", "mode": "deep"}}' in prompt.text


def test_render_applies_the_context_budget(engine):
    tools = [Tool(f"tool_{i}", f"Does thing number {i}. " * 20,
                  {"type": "object", "properties": {"x": {"type": "string"}}}) for i in range(50)]
    small = engine.emulation(tools, capability=Capability(context_window=4096))
    assert 0 < len(small.tools) < 50
    assert all(t.name in small.text for t in small.tools)
    assert "tool_49(" not in small.text
    big = engine.emulation(tools, capability=Capability(context_window=200000))
    assert len(big.tools) == 50


def test_render_call_formats(engine):
    call = ToolCall(None, "read_file", {"path": "a.txt"})
    assert engine.render_call(call, TOOLS, style="compact") == \
        '{"tool": "read_file", "arguments": {"path": "a.txt"}}'
    xml = engine.render_call(call, TOOLS, style="xml")
    assert "<path>a.txt</path>" in xml
    # a value that cannot be tag text falls back to the JSON arguments form
    xml = engine.render_call(ToolCall(None, "read_file", {"path": "a<b"}), TOOLS, style="xml")
    assert '<arguments>{"path": "a<b"}</arguments>' in xml
    with pytest.raises(ValueError, match="one call per answer"):
        engine.render_call([call, call], TOOLS, style="json")


# ---------------------------------------------------------------- templates as data

def test_overlay_template_replaces_the_bundled_one(tmp_path):
    (tmp_path / "templates" / "emulation").mkdir(parents=True)
    (tmp_path / "templates" / "emulation" / "json.j2").write_text(
        '{% macro call(c) %}CALL {{ c.name }}{% endmacro %}'
        'MY PROMPT {{ tools|map(attribute="name")|join(",") }} {{ call(call_view("x")) }}')
    engine = toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    assert engine.render_emulation(TOOLS, capability=Capability()) == \
        "MY PROMPT read_file,search CALL x"


def test_template_runtime_error_names_the_file_and_line(tmp_path):
    (tmp_path / "templates" / "emulation").mkdir(parents=True)
    (tmp_path / "templates" / "emulation" / "json.j2").write_text(
        "{% macro call(c) %}{{ c.name }}{% endmacro %}\nline two\n{{ no_such_variable }}\n")
    engine = toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    with pytest.raises(RuleError) as info:
        engine.render_emulation(TOOLS, capability=Capability())
    problem = info.value.problems[0]
    assert problem.path.endswith("json.j2") and problem.line == 3
    assert "no_such_variable" in problem.message


def test_templates_are_sandboxed(tmp_path):
    (tmp_path / "templates" / "emulation").mkdir(parents=True)
    (tmp_path / "templates" / "emulation" / "json.j2").write_text(
        "{% macro call(c) %}x{% endmacro %}{{ ''.__class__.__mro__[1].__subclasses__() }}")
    engine = toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    with pytest.raises(RuleError, match=r"SecurityError|unsafe|undefined"):
        engine.render_emulation(TOOLS, capability=Capability())


def lint_overlay(tmp_path, table_text: str, templates: dict[str, str] | None = None):
    from toolrules._engine import lint_rules as lint
    from toolrules.rules._loader import discover, layers_for

    (tmp_path / "emulation.yaml").write_text(table_text)
    for name, text in (templates or {}).items():
        path = tmp_path / "templates" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return lint(discover(layers_for([tmp_path], use_env=False)))


def test_lint_a_style_whose_format_no_dialect_parses(tmp_path, engine):
    problems = lint_overlay(tmp_path, """
styles:
  json: {template: emulation/json.j2, dialect: json-fenced}
  odd: {template: emulation/odd.j2, dialect: no-such-dialect}
selection:
  - use: json
""", {"emulation/odd.j2": "{% macro call(c) %}{{ c.name }}{% endmacro %}odd"})
    mine = [p for p in problems if p.check == "emulation-dialect"]
    assert len(mine) == 1 and mine[0].level == "error"
    assert "no-such-dialect" in mine[0].message and mine[0].line == 4


def test_lint_templates(tmp_path):
    problems = lint_overlay(tmp_path, """
styles:
  json: {template: emulation/json.j2, dialect: json-fenced}
  nomacro: {template: emulation/nomacro.j2, dialect: json-fenced}
  gone: {template: emulation/jsn.j2, dialect: json-fenced}
selection:
  - use: jsonn
  - when: {context_window: 'small'}
    use: json
""", {"emulation/nomacro.j2": "no macro here", "emulation/broken.j2": "ok\n{% if %}\n"})
    checks = {p.check: p for p in problems if p.level == "error"}
    assert "template-call-macro" in checks
    assert "did you mean emulation/json.j2?" in checks["missing-template"].message
    assert checks["template-syntax"].path.endswith("broken.j2")
    assert checks["template-syntax"].line == 2
    assert "did you mean 'json'?" in checks["emulation-style"].message
    assert "emulation-condition" in checks and "emulation-fallback" in checks


def test_import_stays_light():
    code = ("import sys, toolrules; "
            "print(sorted(m for m in ('jinja2', 'jsonschema', 'httpx', 'referencing') "
            "if m in sys.modules))")
    out = subprocess.check_output([sys.executable, "-c", code], text=True)
    assert out.strip() == "[]"


def test_emulated_history_is_written_in_the_prompts_format(engine):
    """A model without native tools sees its own earlier calls in the format its prompt
    asks for (so they parse back through its dialect) and tool results as text turns."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    msgs = [{"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                {"id": "c2", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 20}'},
            {"role": "tool", "tool_call_id": "c2", "content": '{"temp": 25}'}]
    out = engine.emulate_history(msgs, tools, model="llama3:8b")
    assert [m.role for m in out] == ["user", "assistant", "user"]
    reparsed = engine.text_parser(model="llama3:8b", tools=tools).parse(out[1].content)
    assert [(c.name, c.arguments) for c in reparsed.tool_calls] == [
        ("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]
    assert reparsed.content == "Checking."
    assert "get_weather (call c1)" in out[2].content and '{"temp": 25}' in out[2].content
    body = engine.build_request("ollama", "llama3:8b", msgs, tools=tools)
    assert "tools" not in body
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
    assert not any("tool_calls" in m for m in body["messages"])
