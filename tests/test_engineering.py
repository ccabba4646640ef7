"""Tool engineering tables: description audit, parallel planning, response format control
and namespacing."""

from __future__ import annotations

import pytest

from toolrules import (
    ExecutionPlan,
    ResponseFormat,
    Tool,
    ToolCall,
    ToolClassification,
    ToolResultConfig,
    audit_tool_description,
    audit_tool_set,
    classify_tool,
    enhance_tool_description,
    extract_namespace,
    filter_tools_by_task_namespaces,
    format_list_result,
    group_tools_by_namespace,
    namespace_tools,
    plan_parallel_execution,
    truncate_result,
)

# ---------------------------------------------------------------- audit

WEAK = Tool("write_file", "Writes a file.", {"type": "object", "properties": {
    "path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path"]})
GOOD = Tool("search_code", (
    "Search the repository for a regex, e.g. `def main`. The pattern must be a Python regex. "
    "Note: binary files are skipped. Do not use for reading a known file; use read_file "
    "instead."), {"type": "object", "properties": {"regex_pattern": {"type": "string"}}})


def test_audit_scores_the_markers():
    weak = audit_tool_description(WEAK)
    assert weak.score == 0.0 and weak.params_unambiguous is False
    assert weak.missing == ("has_example_usage", "has_edge_cases", "has_input_format",
                            "has_clear_boundaries", "params_unambiguous")
    assert any("path" in line for line in weak.advice)
    good = audit_tool_description(GOOD)
    assert good.score == 1.0 and good.advice == ()
    assert set(audit_tool_set([WEAK, GOOD])) == {"write_file", "search_code"}


def test_enhance_adds_format_and_boundary_notes():
    better = enhance_tool_description(WEAK)
    assert better.name == WEAK.name and better.parameters == WEAK.parameters
    assert better.description.startswith("Writes a file.\n\n")
    assert "Parameters: path: string (required), content: string" in better.description
    assert "overwrites it if it does" in better.description
    assert audit_tool_description(better).score > audit_tool_description(WEAK).score
    assert enhance_tool_description(GOOD) == GOOD


# ---------------------------------------------------------------- planning

TOOLS = {t.name: t for t in [
    Tool("read_a", "Reads a."), Tool("read_b", "Reads b."), Tool("write_c", "Writes c."),
    Tool("read_d", "Reads d."), Tool("read_e", "Reads e."), Tool("frobnicate", "Does it."),
    Tool("getUserSettings", "Gets settings."), Tool("weather", "Returns the forecast."),
]}


@pytest.mark.parametrize(("name", "kind"), [
    ("read_a", ToolClassification.READ),
    ("write_c", ToolClassification.WRITE),
    ("getUserSettings", ToolClassification.READ),   # words, not substrings ("settings")
    ("weather", ToolClassification.READ),           # from the description
    ("frobnicate", ToolClassification.UNKNOWN),
])
def test_classify(name, kind):
    assert classify_tool(TOOLS[name]) is kind


def calls(*names):
    return [ToolCall(f"id_{n}", n, {}) for n in names]


def test_plan_batches_reads_and_keeps_writes_ordered():
    plan = plan_parallel_execution(calls("read_a", "read_b", "write_c", "read_d", "read_e"), TOOLS)
    assert [[c.name for c in b] for b in plan.batches] == \
        [["read_a", "read_b"], ["write_c"], ["read_d", "read_e"]]
    assert plan.total_calls == 5 and plan.parallelism_ratio == 0.8


def test_plan_unknown_and_missing_tools_run_alone():
    plan = plan_parallel_execution(calls("read_a", "frobnicate", "nope", "read_b"),
                                   list(TOOLS.values()))
    assert [len(b) for b in plan.batches] == [1, 1, 1, 1]


def test_plan_edge_cases():
    assert plan_parallel_execution([], TOOLS) == ExecutionPlan(batches=())
    assert ExecutionPlan(batches=()).parallelism_ratio == 0.0
    seq = plan_parallel_execution(calls("read_a", "read_b"), TOOLS, allow_parallel=False)
    assert [len(b) for b in seq.batches] == [1, 1] and seq.parallelism_ratio == 0.0
    plan = plan_parallel_execution([{"name": "read_a", "arguments": "{}"}], TOOLS)
    assert plan.batches[0][0].name == "read_a"


# ---------------------------------------------------------------- namespacing

BASE = (Tool("search", "Search issues."), Tool("create_issue", "Create an issue."))


def test_namespace_tools():
    github = namespace_tools(BASE, "github")
    assert [t.name for t in github] == ["github_search", "github_create_issue"]
    assert github[0].description == "[github] Search issues."
    assert namespace_tools(github, "github") == github  # idempotent
    assert [t.name for t in namespace_tools(BASE, "jira", separator=".")] == \
        ["jira.search", "jira.create_issue"]


def test_extract_and_group():
    assert extract_namespace("github_search") == "github"
    assert extract_namespace("search") is None
    assert extract_namespace("_private") is None
    tools = (*namespace_tools(BASE, "github"), *namespace_tools(BASE, "jira"), Tool("help", ""))
    groups = group_tools_by_namespace(tools)
    assert list(groups) == ["github", "jira", None]
    assert [t.name for t in groups["jira"]] == ["jira_search", "jira_create_issue"]


def test_filter_by_task_namespaces():
    tools = (*namespace_tools(BASE, "github"), *namespace_tools(BASE, "jira"),
             *namespace_tools((Tool("post", "Post a message to a channel."),), "slack"),
             Tool("help", "Show help."))
    kept = filter_tools_by_task_namespaces(tools, "find the jira issue about login",
                                           max_namespaces=1)
    assert [t.name for t in kept] == ["jira_search", "jira_create_issue", "help"]
    kept = filter_tools_by_task_namespaces(tools, "post a message to the team channel",
                                           max_namespaces=1)
    assert [t.name for t in kept] == ["slack_post", "help"]


# ---------------------------------------------------------------- response format

def test_truncate_with_hints():
    small = truncate_result("short")
    assert small.truncated is False and small.content == "short" and small.hint is None
    text = "\n".join(f"line {i:05d}" for i in range(20000))
    cut = truncate_result(text, ToolResultConfig(truncate_at=1000), total_available=20000,
                          tool_name="search_files")
    assert cut.truncated and len(cut.content) <= 4000 + 30
    assert cut.content.endswith("\n\n[... truncated ...]")
    assert cut.content.split("\n\n[...")[0].endswith(("0", "1", "2", "3", "4", "5", "6", "7",
                                                      "8", "9"))  # a clean line break
    assert "20000 available" in cut.hint and "search terms" in cut.hint
    other = truncate_result(text, ToolResultConfig(truncate_at=10), tool_name="read_file")
    assert "specific range" in other.hint and "many available" in other.hint


def test_format_list_result_concise_and_detailed():
    items = [{"name": f"file{i}.py", "id": f"f{i}", "size": i * 10, "kind": "py"}
             for i in range(12)]
    concise = format_list_result(items)
    assert concise.splitlines()[0] == "• file0.py"
    assert "id:" not in concise and concise.endswith("[Showing 10 of 12 items]")
    detailed = format_list_result(items[:2], ToolResultConfig(
        format=ResponseFormat.DETAILED, include_ids=True, include_metadata=True))
    assert detailed == "• file0.py (id: f0) [size=0, kind=py]\n• file1.py (id: f1) [size=10, kind=py]"
    assert format_list_result([]) == "No items found."
    assert ToolResultConfig().format is None  # None = rules/response_format.yaml defaults
