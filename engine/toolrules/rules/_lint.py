"""Validating a rule set: YAML, schemas, then cross-checks between files.

Every problem is a `Problem` (path, 1-based line and column, level, message, check id).
Cross-checks live with the concern that owns a rule kind and are passed in by the
caller (`toolrules._engine.cross_checks()`); each receives a `Reporter` and the `RuleSet`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from difflib import get_close_matches
from typing import Any

from .._errors import Problem
from ._loader import RuleFile, RuleSet, parse_all, yaml_problems
from ._schemas import schema_for
from ._yaml import mark_of

__all__ = ["CrossCheck", "Reporter", "check_regex", "lint", "regex_hazard"]


class Reporter:
    """Collects problems, locating document paths through the YAML marks."""

    def __init__(self, thorough: bool = True) -> None:
        self.problems: list[Problem] = []
        self.thorough = thorough  # also the slow checks (generating template code)

    def add(self, rf: RuleFile | Any, path: Iterable[Any], message: str, check: str,
            level: str = "error") -> None:
        path = tuple(path)
        line, col = mark_of(rf.data, path) if rf.data is not None else (1, 1)
        self.problems.append(Problem(rf.display, line, col, level, message, check))

    def error(self, rf: RuleFile | Any, path: Iterable[Any], message: str, check: str) -> None:
        self.add(rf, path, message, check, "error")

    def warning(self, rf: RuleFile | Any, path: Iterable[Any], message: str, check: str) -> None:
        self.add(rf, path, message, check, "warning")


# ---------------------------------------------------------------- regex safety

# Nested quantifiers such as (a+)+ or (a*)* can backtrack exponentially.
_NESTED_QUANT = re.compile(r"\((?:[^()\\]|\\.)*[+*](?:[^()\\]|\\.)*\)\s*(?:[+*]|\{\d*,\d*\})")
_ALT_QUANT = re.compile(r"\((?:[^()\\]|\\.)*\|(?:[^()\\]|\\.)*\)\s*[+*]")


_DELIMITED = re.compile(r"\((?:\?:)?(\\?[^\\\[\](){}.*+?|^$])(\[[^\]]+\])[+*]\)")


def _delimited(group: str) -> bool:
    """(?:_[a-z0-9]+)* is safe: every repetition starts with a char the class cannot eat."""
    m = _DELIMITED.match(group)
    if not m:
        return False
    lead = m.group(1)[-1]
    try:
        return re.fullmatch(m.group(2), lead) is None
    except re.error:
        return False


def regex_hazard(pattern: str) -> str | None:
    """A reason this regex may backtrack catastrophically, or None."""
    for m in _NESTED_QUANT.finditer(pattern):
        if not _delimited(m.group(0)):
            return ("a quantified group contains a quantifier (like (a+)+): "
                    "exponential backtracking")
    alt = _ALT_QUANT.search(pattern)
    if alt:
        group = alt.group(0)
        body = group[1:group.rindex(")")]
        alts = [a for a in re.split(r"(?<!\\)\|", body.removeprefix("?:"))]
        for i, a in enumerate(alts):
            for b in alts[i + 1:]:
                if a and b and (a.startswith(b) or b.startswith(a)):
                    return ("a repeated alternation has overlapping branches "
                            f"({a!r} / {b!r}): exponential backtracking")
    return None


def check_regex(rep: Reporter, rf: RuleFile, path: Iterable[Any], pattern: Any,
                check: str = "regex") -> re.Pattern[str] | None:
    """Compile `pattern`, reporting a syntax error or a backtracking hazard."""
    path = tuple(path)
    if not isinstance(pattern, str):
        return None
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        rep.error(rf, path, f"regex does not compile: {exc.msg} at position {exc.pos} "
                  f"in {pattern!r}", check)
        return None
    hazard = regex_hazard(pattern)
    if hazard:
        rep.error(rf, path, f"regex {pattern!r} is unsafe: {hazard}; rewrite it without "
                  "nested repetition", "regex-backtracking")
        return None
    return compiled


# ---------------------------------------------------------------- schema errors

def _type_name(value: Any) -> str:
    return {dict: "mapping", list: "list", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def _article(word: str) -> str:
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def _field_schema(schema: dict[str, Any], path: tuple[Any, ...]) -> dict[str, Any] | None:
    node: dict[str, Any] | None = {"type": "dict", "schema": schema}
    for step in path:
        if node is None:
            return None
        inner = node.get("schema")
        if isinstance(step, int):
            node = inner if isinstance(inner, dict) and "type" in inner else None
        elif isinstance(inner, dict):
            node = inner.get(step)
        else:
            return None
    return node


def _leaf_errors(errors: Iterable[Any]) -> Iterable[Any]:
    for e in errors:
        if e.is_group_error and e.child_errors:
            yield from _leaf_errors(e.child_errors)
        else:
            yield e


def _schema_message(schema: dict[str, Any], err: Any) -> tuple[str, str]:
    from cerberus import errors as ce

    path = tuple(err.document_path)
    name = ".".join(str(p) for p in path) or "(document)"
    fs = _field_schema(schema, path) or {}
    meta = fs.get("meta", {}) if isinstance(fs, dict) else {}
    example = f" — for example `{meta['example']}`" if meta.get("example") else ""
    if err.code == ce.UNKNOWN_FIELD.code:
        parent = _field_schema(schema, path[:-1]) or {}
        allowed = sorted((parent.get("schema") or {}).keys()) if path[:-1] else sorted(schema)
        close = get_close_matches(str(path[-1]), allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; allowed: {', '.join(allowed)}"
        return f"unknown field {path[-1]!r}{hint}", "schema-unknown-field"
    if err.code == ce.REQUIRED_FIELD.code:
        doc = f" ({meta['doc']})" if meta.get("doc") else ""
        return f"missing required field {name!r}{doc}{example}", "schema-required"
    if err.code == ce.BAD_TYPE.code:
        types = fs.get("type", "?")
        want = " or ".join(types) if isinstance(types, list) else str(types)
        article = "an" if str(want)[:1] in "aeiou" else "a"
        return (f"{name!r} must be {article} {want}, not {_article(_type_name(err.value))}"
                f"{example}",
                "schema-type")
    if err.code == ce.UNALLOWED_VALUE.code:
        choices = ", ".join(map(str, fs.get("allowed", [])))
        return f"{name!r} is {err.value!r}; allowed: {choices}", "schema-value"
    if err.code == ce.REGEX_MISMATCH.code:
        return (f"{name!r} is {err.value!r}, which does not match {fs.get('regex')!r}{example}",
                "schema-value")
    if err.code in (ce.MIN_VALUE.code, ce.MAX_VALUE.code, ce.MIN_LENGTH.code,
                    ce.MAX_LENGTH.code, ce.EMPTY_NOT_ALLOWED.code, ce.NOT_NULLABLE.code):
        return f"{name!r}: {err.value!r} is not accepted ({err.rule} {err.constraint})", \
            "schema-value"
    return f"{name!r}: {err.rule} {err.constraint!r} failed for {err.value!r}", "schema"


def schema_problems(rs: RuleSet, rep: Reporter) -> set[tuple[str, str]]:
    """Validate every parsed file against its kind's schema; return (kind, id) that failed."""
    from cerberus import Validator

    from ._fastcheck import quick_valid

    failed: set[tuple[str, str]] = set()
    validators: dict[int, Any] = {}
    for rf in rs.all_files():
        if rf.yaml_problem is not None:
            failed.add((rf.kind, rf.id))
            continue
        schema = schema_for(rf.kind, rf.id)
        if schema is None:
            from ._schemas import all_table_schemas

            TABLE_SCHEMAS = all_table_schemas()
            close = get_close_matches(rf.id, list(TABLE_SCHEMAS), n=1)
            hint = f" (did you mean {close[0]}.yaml?)" if close else \
                f"; known tables: {', '.join(sorted(TABLE_SCHEMAS))}"
            rep.error(rf, (), f"{rf.id}.yaml is not a known rule table{hint}", "unknown-table")
            failed.add((rf.kind, rf.id))
            continue
        if not isinstance(rf.data, dict):
            rep.error(rf, (), f"a {rf.kind} rule file must be a mapping, not a "
                      f"{_type_name(rf.data)}", "schema-type")
            failed.add((rf.kind, rf.id))
            continue
        if quick_valid(rf.data, schema):  # valid files skip cerberus (the slow part)
            continue
        v = validators.get(id(schema))
        if v is None:
            v = validators[id(schema)] = Validator(schema, allow_unknown=False)
        if not v.validate(rf.data, normalize=False):
            failed.add((rf.kind, rf.id))
            seen: set[tuple[Any, ...]] = set()
            for err in _leaf_errors(v._errors):
                key = (tuple(err.document_path), err.code)
                if key in seen:
                    continue
                seen.add(key)
                message, check = _schema_message(schema, err)
                rep.error(rf, err.document_path, message, check)
    return failed


# ---------------------------------------------------------------- the driver

CrossCheck = Callable[[RuleSet, Reporter, set[tuple[str, str]]], None]


def lint(rs: RuleSet, thorough: bool = True, checks: Sequence[CrossCheck] = ()) -> list[Problem]:
    """Every problem of the rule set, sorted by file and position: YAML, schemas, then the
    cross-checks of each concern (`checks`, in order; `toolrules.lint_rules` passes them all).
    load() passes thorough=False to skip checks that are slow and only repeat what use would
    find."""
    parse_all(rs)
    rep = Reporter(thorough)
    rep.problems.extend(yaml_problems(rs))
    failed = schema_problems(rs, rep)
    for check in checks:
        check(rs, rep, failed)
    return sorted(rep.problems, key=lambda p: (p.path, p.line, p.col, p.check, p.message))
