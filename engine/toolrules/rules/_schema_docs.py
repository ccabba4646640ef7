"""Reference pages written from the rule language itself: every field of every rule kind
and table (from the cerberus schemas and their `meta.doc` / `meta.example`), and every
lint check id (from rules/_checks.py). The documentation site builds its reference pages
from these functions, so a field added to a schema appears there with no edit."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["lint_checks_markdown", "schema_fields", "schemas_markdown"]

def _types(rule: Mapping[str, Any]) -> str:
    t = rule.get("type")
    if isinstance(t, list):
        text = " or ".join(map(str, t))
    elif t is not None:
        text = str(t)
    else:
        alts = rule.get("anyof") or rule.get("oneof") or []
        text = " or ".join(dict.fromkeys(_types(a) for a in alts if isinstance(a, Mapping)))
    return text or "any"


def _notes(rule: Mapping[str, Any]) -> str:
    out = []
    if rule.get("required"):
        out.append("required")
    if rule.get("allowed"):
        out.append("one of " + ", ".join(f"`{v}`" for v in rule["allowed"]))
    if rule.get("nullable"):
        out.append("may be null")
    for key, word in (("min", "at least"), ("max", "at most"), ("minlength", "length at least"),
                      ("maxlength", "length at most")):
        if key in rule:
            out.append(f"{word} {rule[key]}")
    if rule.get("regex"):
        out.append(f"matches `{rule['regex']}`")
    return "; ".join(out)


def schema_fields(schema: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(dotted field path, its rule) for every field, depth first in schema order:
    `a.b` for a mapping's field, `a[].b` for the fields of a list's items, `a.*.b` for
    the fields of each value of a free-keyed mapping."""
    for name, rule in schema.items():
        if not isinstance(rule, Mapping):
            continue
        path = f"{prefix}{name}"
        yield path, rule
        yield from _inner(rule, path)


def _inner(rule: Mapping[str, Any], path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    sub = rule.get("schema")
    t = rule.get("type")
    kinds = t if isinstance(t, list) else [t]
    if isinstance(sub, Mapping):
        if "list" in kinds and "type" in sub:  # a list's item rule
            if isinstance(sub.get("schema"), Mapping) and "dict" in _as_list(sub.get("type")):
                yield from schema_fields(sub["schema"], f"{path}[].")
            elif isinstance(sub.get("valuesrules"), Mapping):
                yield from _inner({"type": "dict", "valuesrules": sub["valuesrules"]},
                                  f"{path}[]")
        elif "dict" in kinds or t is None:
            yield from schema_fields(sub, f"{path}.")
    values = rule.get("valuesrules")
    if isinstance(values, Mapping) and isinstance(values.get("schema"), Mapping) \
            and "dict" in _as_list(values.get("type")):
        yield from schema_fields(values["schema"], f"{path}.*.")


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(schema: Mapping[str, Any]) -> list[str]:
    lines = ["| field | type | constraints | what it is |", "|---|---|---|---|"]
    for path, rule in schema_fields(schema):
        meta: Mapping[str, Any] = rule["meta"] if isinstance(rule.get("meta"), Mapping) else {}
        doc = str(meta.get("doc") or "")
        if meta.get("example"):
            doc += f" — e.g. `{meta['example']}`"
        lines.append(f"| `{path}` | {_cell(_types(rule))} | {_cell(_notes(rule))} | "
                     f"{_cell(doc)} |")
    return lines


def schemas_markdown() -> str:
    """The rule-file schema reference: one section per rule kind, then per table."""
    from ._loader import KIND_DIRS
    from ._schemas import KIND_SCHEMAS, TABLE_SCHEMAS

    places = {kind: f"{sub}/*.yaml" for sub, kind in KIND_DIRS.items()}

    out = ["# Rule-file schemas", "",
           "Every rule file is validated against a schema of its kind before anything uses "
           "it (`toolrules lint`, and `toolrules.load()`, which refuses a broken rule set). "
           "This page is generated from those schemas: the fields, their types and "
           "constraints, and the text `lint` shows in its hints.", "",
           "Paths: `a.b` is field `b` of mapping `a`; `a[].b` is field `b` of each item of "
           "list `a`; `a.*.b` is field `b` of each value of a mapping `a` whose keys are "
           "free.", "", "## Rule kinds", ""]
    for kind, schema in KIND_SCHEMAS.items():
        place = places.get(kind, "")
        out += [f"### `{kind}`", "", f"Files: `{place}` in a rules directory.", ""]
        out += _table(schema) + [""]
    out += ["## Tables", "",
            "Cross-cutting tables sit at the top of a rules directory, one file each "
            "(`NAME.yaml`); an overlay's table replaces the bundled one.", ""]
    for name, schema in TABLE_SCHEMAS.items():
        out += [f"### `{name}.yaml`", ""] + _table(schema) + [""]
    return "\n".join(out)


def lint_checks_markdown() -> str:
    """The lint check id reference, from the catalogue."""
    from ._checks import lint_checks_by_group

    out = ["# Lint checks", "",
           "`toolrules lint` reports each problem as `path:line:col: [level] message "
           "(check-id)`; `toolrules.load()` raises one `RuleError` listing them all. "
           "This page is generated from the catalogue of check ids "
           "(`toolrules/rules/_checks.py`), which a test keeps equal to the ids the "
           "engine emits.", ""]
    for group, checks in lint_checks_by_group().items():
        out += [f"## {group[:1].upper()}{group[1:]}", "", "| check | what it catches |",
                "|---|---|"]
        out += [f"| `{c.id}` | {_cell(c.text)} |" for c in checks]
        out.append("")
    return "\n".join(out)
