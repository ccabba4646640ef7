"""The public API is exactly `toolrules.__all__`, sorted; private modules stay private."""

from __future__ import annotations

import toolrules


def test_all_is_sorted_and_unique():
    assert list(toolrules.__all__) == sorted(set(toolrules.__all__))


def test_all_names_exist():
    for name in toolrules.__all__:
        assert hasattr(toolrules, name), name


def test_no_other_public_names():
    public = {n for n in dir(toolrules) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(toolrules, n)).__name__ == "module"}
    assert public - modules == set(toolrules.__all__) - {"__version__"}


def test_design_contract_names():
    for name in ("load", "Tool", "ToolCall", "ToolResult", "Message", "ParsedResponse",
                 "StreamChunk", "ModelSpec", "Capability", "RuleError", "ParseError"):
        assert name in toolrules.__all__


def test_error_tree():
    assert issubclass(toolrules.RuleError, toolrules.ToolrulesError)
    assert issubclass(toolrules.ParseError, ValueError)
    assert issubclass(toolrules.UnknownRuleError, KeyError)


def test_lazy_map_and_type_checking_imports_agree():
    # the package names each public name twice: for type checkers (imports under
    # TYPE_CHECKING) and for the first use at run time (_LAZY); they must not drift apart
    import ast
    from pathlib import Path

    tree = ast.parse(Path(toolrules.__file__).read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                for alias in imp.names:
                    typed[alias.asname or alias.name] = "." * imp.level + (imp.module or "")
    assert typed == toolrules._LAZY
