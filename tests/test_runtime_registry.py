"""ToolRegistry: schemas from type hints (pydantic), descriptions from docstrings, tools
from Tool objects, OpenAI dicts and YAML files, execution metadata, provider-safe names."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal, Optional

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

import toolrules
from toolrules import Tool, ToolCall, ToolExecutor, ToolRegistry
from toolrules.runtime import parse_docstring


class Point(BaseModel):
    x: int
    y: int = 0


@dataclass
class Box:
    w: float
    h: float


class Options(TypedDict):
    verbose: bool


def test_schema_from_type_hints_and_google_docstring():
    reg = ToolRegistry()

    @reg.tool
    def get_weather(city: str, unit: Literal["c", "f"] = "c", days: Optional[int] = None,  # noqa: UP045
                    where: Point | None = None, boxes: list[Box] | None = None,
                    options: Options | None = None, tags: list[str] = []) -> dict:  # noqa: B006
        """Current weather for a city.

        Note: data may be an hour old.

        Args:
            city: City name, e.g. "Paris".
                Not a country.
            unit (str): c for Celsius, f for Fahrenheit.
            days: Forecast days.

        Returns:
            The weather.
        """
        return {"city": city, "unit": unit, "where": where, "boxes": boxes, "options": options}

    [tool] = reg.tools()
    assert tool.name == "get_weather"
    assert tool.description == "Current weather for a city.\n\nNote: data may be an hour old."
    p = tool.parameters
    assert p["type"] == "object" and p["required"] == ["city"]
    assert p["additionalProperties"] is False
    props = p["properties"]
    assert props["city"] == {"type": "string", "description": 'City name, e.g. "Paris". Not a '
                                                            "country."}
    assert props["unit"]["enum"] == ["c", "f"] and props["unit"]["default"] == "c"
    assert {"type": "null"} in props["days"]["anyOf"]
    assert props["days"]["description"] == "Forecast days."
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "default": []}
    assert p["$defs"]["Point"]["required"] == ["x"]
    assert p["$defs"]["Box"]["properties"]["w"] == {"type": "number"}
    assert p["$defs"]["Options"]["properties"]["verbose"] == {"type": "boolean"}
    assert "title" not in str(p)
    ex = ToolExecutor(reg)
    result = ex.execute_sync(ToolCall("1", "get_weather", {
        "city": "Paris", "where": {"x": 1}, "boxes": [{"w": 1, "h": 2}],
        "options": {"verbose": True}}))
    assert result.ok, result.error
    assert result.output["where"] == Point(x=1, y=0)
    assert result.output["boxes"] == [Box(1.0, 2.0)]
    assert result.output["options"] == {"verbose": True}
    bad = ex.execute_sync(ToolCall("2", "get_weather", {"city": "Paris", "unit": "k"}))
    assert (bad.tool_error.details or {})["error"] == "INVALID_ARGUMENTS"


@pytest.mark.parametrize("doc,desc,params", [
    ("""Add numbers.

    :param a: the first
    :param int b: the second,
        continued
    :returns: the sum
    :rtype: int
    """, "Add numbers.", {"a": "the first", "b": "the second, continued"}),
    ("""Scale a value.

    A longer explanation.

    Parameters
    ----------
    x : float
        The value.
    factor, offset : float, optional
        How to scale it.

    Returns
    -------
    float
    """, "Scale a value.\n\nA longer explanation.",
     {"x": "The value.", "factor": "How to scale it.", "offset": "How to scale it."}),
    ("""One line only.""", "One line only.", {}),
    (None, "", {}),
])
def test_docstring_styles(doc, desc, params):
    assert parse_docstring(doc) == (desc, params)


def test_decorator_options_and_async_handlers():
    reg = ToolRegistry()

    @reg.tool(name="sum_numbers", tier="read_only", kind="read", requires_confirmation=False,
              description="Add two integers, e.g. 1 and 2.")
    async def add(a: int, b: int = 2) -> int:
        await asyncio.sleep(0)
        return a + b

    @reg.tool(hidden=True, requires_confirmation=True)
    def facts_commit(fact: str) -> str:
        """Commit a fact."""
        return fact

    entry = reg.get("sum_numbers")
    assert entry is not None and entry.tier == "read_only" and entry.kind == "read"
    assert entry.is_async and entry.handler is add
    assert reg.tools()[0].description == "Add two integers, e.g. 1 and 2."
    assert [t.name for t in reg.tools()] == ["sum_numbers"]
    assert [t.name for t in reg.tools(include_hidden=True)] == ["sum_numbers", "facts_commit"]
    assert reg.get("facts_commit").requires_confirmation
    ex = ToolExecutor(reg, trust="read_only")
    assert ex.execute_sync(ToolCall("1", "sum_numbers", {"a": 40})).output == 42
    assert add.__name__ == "add"  # the decorator returns the function itself


def test_kind_defaults_to_the_rules_classification():
    reg = ToolRegistry()

    @reg.tool
    def search_orders(query: str) -> list:
        """Search orders."""
        return []

    @reg.tool
    def frobnicate(x: int) -> int:
        """Something."""
        return x

    assert reg.get("search_orders").kind == "read"
    assert reg.get("frobnicate").kind == "write"  # unknown runs alone


def test_add_tool_objects_and_openai_dicts():
    reg = ToolRegistry()
    reg.add(Tool("echo_text", "Echo the text.", {"type": "object", "properties": {
        "text": {"type": "string"}}, "required": ["text"]}), lambda text: text)

    async def shout(text: str) -> str:
        return text.upper()

    reg.add({"type": "function", "function": {"name": "shout", "description": "Shout.",
                                              "parameters": {"type": "object", "properties": {
                                                  "text": {"type": "string"}}}}},
            shout, kind="read")
    ex = ToolExecutor(reg)
    assert ex.execute_sync(ToolCall("1", "echo_text", {"text": "hi"})).output == "hi"
    assert ex.execute_sync(ToolCall("2", "shout", {"text": "hi"})).output == "HI"
    with pytest.raises(ValueError, match="already registered"):
        reg.add(Tool("shout"), shout)
    reg.add(Tool("shout"), lambda: "replaced", replace=True)
    with pytest.raises(TypeError, match="not callable"):
        reg.add(Tool("x_tool"), "nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="object schema"):
        reg.add(Tool("y_tool", parameters={"type": "array"}), lambda: 1)


@pytest.mark.parametrize("name", ["facts.commit", "has space", "x" * 65, "emoji_\u2603", ""])
def test_names_must_be_provider_safe(name):
    reg = ToolRegistry()
    with pytest.raises(ValueError, match="is not accepted by provider"):
        reg.add({"name": name or "", "parameters": {"type": "object"}} if name else Tool(""),
                lambda: 1)


def test_signatures_that_cannot_be_tools():
    reg = ToolRegistry()
    with pytest.raises(TypeError, match=r"\*args"):
        @reg.tool
        def f(*args: int) -> None:
            """x"""
    with pytest.raises(TypeError, match="positional-only"):
        @reg.tool
        def g(a: int, /) -> None:
            """x"""


def test_context_parameter_is_injected_not_described(tmp_path):
    reg = ToolRegistry(workspace=tmp_path)
    (tmp_path / "n.txt").write_text("42")

    @reg.tool(kind="read")
    def read_number(name: str, ctx: toolrules.ToolContext) -> int:
        """Read a number from a workspace file."""
        return int(ctx.require_jail().read_bytes(name, 100))

    assert list(reg.tools()[0].parameters["properties"]) == ["name"]
    ex = ToolExecutor(reg)
    assert ex.execute_sync(ToolCall("1", "read_number", {"name": "n.txt"})).output == 42
    refused = ex.execute_sync(ToolCall("2", "read_number", {"name": "../x"}))
    assert refused.tool_error.details["error"] == "PERMISSION_DENIED"


def test_yaml_tools_with_registered_handlers(tmp_path):
    spec = tmp_path / "skills.yaml"
    spec.write_text(
        "tools:\n"
        "  - name: create_api_docs\n"
        "    description: Generate API documentation from a source file.\n"
        "    handler: make_docs\n"
        "    tier: workspace\n"
        "    requires_confirmation: true\n"
        "    parameters:\n"
        "      type: object\n"
        "      properties:\n"
        "        source_file: {type: string}\n"
        "        format: {type: string, enum: [markdown, rst, html], default: markdown}\n"
        "      required: [source_file]\n")
    reg = ToolRegistry()

    @reg.handler("make_docs")
    def make_docs(source_file: str, format: str = "markdown") -> str:
        return f"{source_file}:{format}"

    assert reg.load_yaml(spec) == ["create_api_docs"]
    entry = reg.get("create_api_docs")
    assert entry.requires_confirmation and entry.tier == "workspace"
    ex = ToolExecutor(reg, confirm=lambda c: True)
    assert ex.execute_sync(ToolCall("1", "create_api_docs", {"source_file": "a.py"})).output \
        == "a.py:markdown"


@pytest.mark.parametrize("body,message", [
    ("tools: 3", "list of tool definitions"),
    ("tools:\n  - {description: x}", "needs a `name`"),
    ("tools:\n  - {name: a_tool, handler: missing}", "is not registered"),
    ("tools:\n  - {name: a_tool}", "exactly one of"),
    ("tools:\n  - {name: a_tool, handler: h, command: [ls]}", "exactly one of"),
    ("tools:\n  - {name: a_tool, command: ls}", "list of strings"),
    ("tools:\n  - {name: a_tool, command: [cat, '{nope}']}", "not a parameter"),
    ("tools:\n  - {name: a_tool, handler: h, import: os}", "unknown field"),
    ("tools: [", "cannot read"),
])
def test_yaml_tool_errors(tmp_path, body, message):
    spec = tmp_path / "t.yaml"
    spec.write_text(body)
    with pytest.raises(ValueError, match=message):
        ToolRegistry().load_yaml(spec, handlers={"h": lambda: 1})


def test_include_merges_registries(tmp_path):
    reg = ToolRegistry()

    @reg.tool
    def get_time() -> str:
        """Now."""
        return "now"

    reg.include(toolrules.builtin_tools(tmp_path))
    assert "read_file" in reg and "get_time" in reg
    assert reg.workspace == tmp_path
    assert len(reg) == 7
