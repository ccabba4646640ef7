"""Meta-tests over the rule set: ids, uniqueness, fixtures, lint cleanliness."""

from __future__ import annotations

import re

from conftest import REPO
from toolrules._engine import lint_rules as lint
from toolrules.rules._loader import discover, layers_for, parse_all


def _ruleset():
    rs = discover(layers_for(use_env=False))
    parse_all(rs)
    return rs


def test_bundled_rules_lint_clean():
    problems = lint(_ruleset())
    assert [p.format() for p in problems if p.level == "error"] == []


def test_rule_ids_are_file_stems_and_well_formed():
    rs = _ruleset()
    for rf in rs.all_files():
        assert re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", rf.id), rf.display
        if rf.kind == "model" and rf.data.get("family"):
            assert rf.data["family"] == rf.id
        if rf.kind in ("provider", "dialect") and "id" in (rf.data or {}):
            assert rf.data["id"] == rf.id


def test_every_family_has_golden_cases():
    rs = _ruleset()
    for rid, rf in rs.files.get("model", {}).items():
        if not rf.data.get("match"):
            continue
        cases = REPO / "golden" / "models" / f"{rid}.cases.yaml"
        golden = REPO / "golden" / "models" / f"{rid}.golden.yaml"
        assert cases.exists(), f"add {cases.relative_to(REPO)} with real ids for {rid}"
        assert golden.exists(), f"run toolrules golden regen --filter 'models/{rid}*'"
        import yaml

        ids = yaml.safe_load(cases.read_text())["ids"]
        assert len(ids) >= 2, f"{cases.name}: list at least two real ids"


def test_lint_cases_have_goldens():
    for case in (REPO / "tests" / "lint_cases").iterdir():
        assert (REPO / "golden" / "lint" / f"{case.name}.golden.yaml").exists(), case.name
