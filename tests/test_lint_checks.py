"""The lint check catalogue (rules/_checks.py) lists exactly the check ids the engine
emits, so the reference page generated from it is complete and has no dead entries."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import toolrules
from toolrules.rules._checks import LINT_CHECKS, lint_checks_by_group

PKG = Path(toolrules.__file__).parent
REPO = PKG.parent.parent
CATALOGUE = PKG / "rules" / "_checks.py"
CHECK_ID = re.compile(r"^[a-z]+(?:-[a-z0-9]+)*$")


def _const(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and CHECK_ID.match(node.value):
        return node.value
    return None


def emitted_ids() -> dict[str, str]:
    """check id -> where it is emitted: the 4th argument of a Reporter's error/warning/add,
    a `check=` keyword, the default of a parameter named `check`, the last argument of a
    Problem / YamlProblem / _problem, and the id a `*message` helper returns beside its
    text."""
    out: dict[str, str] = {}
    for path in PKG.rglob("*.py"):
        if path == CATALOGUE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            found: list[str | None] = []
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                found += [_const(kw.value) for kw in node.keywords if kw.arg == "check"]
                if name in ("error", "warning", "add") and len(node.args) >= 4:
                    found.append(_const(node.args[3]))
                if name in ("Problem", "YamlProblem", "_problem") and node.args:
                    found.append(_const(node.args[-1]))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.args + node.args.kwonlyargs
                defaults = ([None] * (len(node.args.args) - len(node.args.defaults))
                            + list(node.args.defaults) + list(node.args.kw_defaults))
                found += [_const(d) for a, d in zip(args, defaults) if a.arg == "check"]
                if node.name.endswith("message"):
                    for ret in ast.walk(node):
                        if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple) \
                                and len(ret.value.elts) == 2:
                            found.append(_const(ret.value.elts[1]))
            for cid in found:
                if cid is not None:
                    out.setdefault(cid, f"{path.relative_to(PKG)}:{node.lineno}")
    return out


def test_the_scan_finds_the_kinds_of_emitters():
    ids = emitted_ids()
    # a reporter call, a schema message helper, a YAML problem default, a check= keyword
    for cid in ("duplicate-family", "schema-unknown-field", "yaml-syntax", "file-read",
                "regex", "template-syntax"):
        assert cid in ids, cid


def test_every_emitted_id_is_in_the_catalogue():
    listed = {c.id for c in LINT_CHECKS}
    missing = {cid: where for cid, where in emitted_ids().items() if cid not in listed}
    assert not missing, f"add these to rules/_checks.py: {missing}"


def test_every_catalogued_id_is_emitted():
    emitted = emitted_ids()
    dead = [c.id for c in LINT_CHECKS if c.id not in emitted]
    assert not dead, f"no code emits {dead}: remove them from rules/_checks.py"


def test_catalogue_ids_are_unique_and_described():
    ids = [c.id for c in LINT_CHECKS]
    assert len(ids) == len(set(ids))
    for c in LINT_CHECKS:
        assert CHECK_ID.match(c.id) and c.text.endswith(".") and c.group
    assert sum(len(v) for v in lint_checks_by_group().values()) == len(ids)


def test_golden_lint_diagnostics_use_catalogued_ids():
    listed = {c.id for c in LINT_CHECKS}
    seen = set()
    for path in (REPO / "golden" / "lint").glob("*.golden.yaml"):
        seen |= set(re.findall(r"\(([a-z0-9-]+)\)'?$", path.read_text(encoding="utf-8"), re.M))
    assert seen, "no lint golden diagnostics found"
    assert seen <= listed, sorted(seen - listed)
