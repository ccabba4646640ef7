"""The package layout reads as the architecture: a small top level, one subpackage per
concern, imports that only go downwards (no cycles), no mixins, and no model, provider or
dialect names in engine code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import toolrules

PKG = Path(toolrules.__file__).parent
MAX_TOP_LEVEL_MODULES = 10


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


def _runtime_imports(tree: ast.AST) -> list[ast.ImportFrom | ast.Import]:
    """Every import the module can execute: top level and inside functions, but not the
    ones under `if TYPE_CHECKING:` (annotations only)."""
    out: list[ast.ImportFrom | ast.Import] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking_block(child):
                for sub in child.orelse:  # type: ignore[attr-defined]
                    walk(sub)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append(child)
            walk(child)

    walk(tree)
    return out


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """The package modules an ImportFrom reaches (`from . import x` may name modules)."""
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        if not is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_pkg = path.name == "__init__.py"
        for node in _runtime_imports(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                targets = _resolve(name, is_pkg, node)
            for t in targets:
                if t in modules and t != name:
                    graph[name].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_import_graph_is_read():
    graph = import_graph()
    assert "toolrules._engine" in graph
    assert "toolrules.rules._loader" in graph["toolrules._engine"]
    assert "toolrules.dialects._scanner" in graph["toolrules.dialects._parser"]


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_top_level_stays_small():
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, (
        f"{len(top)} modules directly under toolrules/ (at most {MAX_TOP_LEVEL_MODULES}): "
        f"{top}; new code belongs in a subpackage by concern")


@pytest.mark.parametrize("concern", ["rules", "models", "dialects", "providers", "emulation",
                                     "calls", "cli", "golden", "bench"])
def test_one_subpackage_per_concern(concern):
    assert (PKG / concern / "__init__.py").is_file()


def test_no_mixins():
    for path in PKG.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"class \w*Mixin\b", text), path
    bases = [b.__name__ for b in toolrules.Engine.__mro__]
    assert bases == ["Engine", "object"]


def test_engine_is_typed():
    assert (PKG / "py.typed").is_file()


_NAMES = re.compile(r"\b(llama|qwen|mistral|claude|anthropic|gemini|deepseek|hermes|ollama|"
                    r"bedrock|kimi|glm|gpt-oss|harmony|openai)\b", re.I)


# Documentation and developer tooling may show examples: schema docs (`meta.example`),
# CLI help, the golden suites and the benchmarks (which measure named fixtures).
_DOC_AND_TOOLING = ("rules/_schema", "cli/", "golden/", "bench/")


def test_engine_code_names_no_model_provider_or_dialect():
    """Knowledge of models, providers and dialects lives in rules/; interpreter code that
    names one is a gap in the rule language. Docstrings and comments may give examples."""
    hits = []
    for path in PKG.rglob("*.py"):
        if path.relative_to(PKG).as_posix().startswith(_DOC_AND_TOOLING):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                        ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr)
                      and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings and _NAMES.search(node.value)):
                hits.append(f"{path.relative_to(PKG)}:{node.lineno}: {node.value[:60]!r}")
            elif isinstance(node, ast.Name) and _NAMES.search(node.id):
                hits.append(f"{path.relative_to(PKG)}:{node.lineno}: {node.id}")
    assert not hits, "\n".join(hits)
