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


def _imports(tree: ast.AST) -> list[ast.ImportFrom | ast.Import]:
    """Every import in the module: top level, inside functions, and under
    `if TYPE_CHECKING:` too - a type annotation that names a higher layer is a dependency
    on it as much as a call is (a lower layer names a higher one through a Protocol of its
    own)."""
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


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


def graph_of(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module name -> the modules it imports, from {name: (source, is_package)}."""
    graph: dict[str, set[str]] = {m: set() for m in sources}
    for name, (text, is_pkg) in sources.items():
        for node in _imports(ast.parse(text)):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                targets = _resolve(name, is_pkg, node)
            for t in targets:
                if t in sources and t != name:
                    graph[name].add(t)
    return graph


def import_graph() -> dict[str, set[str]]:
    return graph_of({_module_name(p): (p.read_text(encoding="utf-8"), p.name == "__init__.py")
                     for p in PKG.rglob("*.py")})


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle: the strongly connected components of more than one module
    (Tarjan's algorithm, iterative), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def _describe(graph: dict[str, set[str]], cycle: list[str]) -> str:
    members = set(cycle)
    edges = [f"{a} -> {b}" for a in cycle for b in sorted(graph[a]) if b in members]
    return f"{len(cycle)} modules: " + "; ".join(edges)


def test_the_import_graph_is_read():
    graph = import_graph()
    assert "toolrules._engine" in graph
    assert "toolrules.rules._loader" in graph["toolrules._engine"]
    assert "toolrules.dialects._scanner" in graph["toolrules.dialects._parser"]
    # imported only under `if TYPE_CHECKING:` and inside functions: both count
    assert "toolrules.dialects._compile" in graph["toolrules._engine"]
    assert "toolrules.models._part" in graph["toolrules._engine"]


def test_no_import_cycles():
    graph = import_graph()
    cycles = find_cycles(graph)
    assert len(cycles) == 0, f"{len(cycles)} import cycle(s), TYPE_CHECKING imports counted:\n" + \
        "\n".join(_describe(graph, c) for c in cycles)


def test_cycle_finder_finds_planted_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": set()}
    assert find_cycles(graph) == [["a", "b", "c"], ["d", "e"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_a_type_checking_import_closes_a_cycle():
    sources = {
        "pkg": ("", True),
        "pkg.low": ("from typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n    from .high import Engine\n", False),
        "pkg.high": ("from .low import Part\n", False),
        "pkg.lazy": ("def f():\n    from . import high\n", False),
    }
    graph = graph_of(sources)
    assert graph["pkg.low"] == {"pkg.high"} and "pkg.high" in graph["pkg.lazy"]
    assert find_cycles(graph) == [["pkg.high", "pkg.low"]]


def test_top_level_stays_small():
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, (
        f"{len(top)} modules directly under toolrules/ (at most {MAX_TOP_LEVEL_MODULES}): "
        f"{top}; new code belongs in a subpackage by concern")


@pytest.mark.parametrize("concern", ["rules", "models", "dialects", "providers", "chat_template",
                                     "emulation", "calls", "cli", "golden", "bench"])
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


def test_chat_template_code_sits_below_its_users():
    """The model's own chat template (rendering, GGUF reading, probing, turn fitting) is
    used by the proxy, the clients, the loop and emulation: it imports none of them."""
    users = ("toolrules.emulation", "toolrules.clients", "toolrules.serve",
             "toolrules.runtime", "toolrules.evals", "toolrules.mcp", "toolrules.cli")
    graph = import_graph()
    found = sorted(f"{m} -> {t}" for m, targets in graph.items()
                   if m.startswith("toolrules.chat_template") for t in targets
                   if t.startswith(users))
    assert "toolrules.chat_template._turns" in graph
    assert not found, "\n".join(found)
