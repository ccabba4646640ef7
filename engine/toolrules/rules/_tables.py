"""Lint cross-checks for the tables of validation, errors and tool engineering:
regexes compile, {placeholders} are ones the engine fills, names that refer to each
other (ladders, templates, envelope codes) exist."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ._loader import RuleFile, RuleSet

__all__ = ["check_rules"]

_PLACEHOLDER = re.compile(r"\{(\w*)\}")

VALIDATION_PLACEHOLDERS = ("tool", "param", "name", "expected", "received", "received_type",
                           "limit", "allowed", "closest", "format", "pattern", "extra", "example")
ERROR_PLACEHOLDERS = ("tool", "error", "exception", "status")
ENVELOPE_PLACEHOLDERS = ("size", "limit", "tool", "message")
# Envelope codes the dispatcher emits; the table must say what each means.
ENVELOPE_CODES = ("ARGUMENTS_TOO_LARGE", "TOOL_OUTPUT_TOO_LARGE", "UNKNOWN_TOOL",
                  "INVALID_ARGUMENTS")


def _usable(rs: RuleSet, name: str, failed: set[tuple[str, str]]) -> RuleFile | None:
    rf = rs.get("table", name)
    if rf is None or ("table", name) in failed or not isinstance(rf.data, dict):
        return None
    return rf


def check_placeholders(rep: Any, rf: RuleFile, path: tuple[Any, ...], text: Any,
                       allowed: Iterable[str]) -> None:
    if not isinstance(text, str):
        return
    allowed = tuple(allowed)
    for m in _PLACEHOLDER.finditer(text):
        if m.group(1) not in allowed:
            rep.error(rf, path, f"unknown placeholder {{{m.group(1)}}}; this text may use "
                      + ", ".join(f"{{{a}}}" for a in allowed), "placeholder")


def check_rules(rs: RuleSet, rep: Any, failed: set[tuple[str, str]]) -> None:
    _check_errors(rs, rep, failed)
    _check_validation(rs, rep, failed)
    _check_engineering(rs, rep, failed)


def _check_errors(rs: RuleSet, rep: Any, failed: set[tuple[str, str]]) -> None:
    from ._lint import check_regex
    from ._schemas_tables import ERROR_CODES

    rf = _usable(rs, "errors", failed)
    if rf is None:
        return
    data = rf.data
    ladders = set(data.get("ladders") or {})
    codes = data.get("codes") or {}
    for code in ERROR_CODES:
        if code not in codes:
            rep.error(rf, ("codes",), f"code {code!r} has no entry (recoverable, "
                      "retry_strategy, fix)", "errors-code")
    for code, entry in codes.items():
        if entry.get("retry_strategy") not in ladders and not entry.get("ladder"):
            rep.error(rf, ("codes", code, "retry_strategy"), f"no ladder for retry strategy "
                      f"{entry.get('retry_strategy')!r}; add it under `ladders`", "errors-ladder")
        check_placeholders(rep, rf, ("codes", code, "fix"), entry.get("fix"), ERROR_PLACEHOLDERS)
    seen: dict[str, int] = {}
    for j, m in enumerate(data.get("mappings") or []):
        mid = m.get("id")
        if mid in seen:
            rep.error(rf, ("mappings", j, "id"), f"mapping id {mid!r} is also used by "
                      f"mappings[{seen[mid]}]", "errors-duplicate-id")
        seen.setdefault(mid, j)
        if not any(m.get(k) for k in ("exception", "status", "pattern")):
            rep.error(rf, ("mappings", j), "a mapping needs `exception`, `status` or `pattern` "
                      "(the `default` entry covers everything else)", "errors-condition")
        if m.get("pattern"):
            check_regex(rep, rf, ("mappings", j, "pattern"), m["pattern"])
        for k, status in enumerate(m.get("status") or []):
            ok = (isinstance(status, int) and 100 <= status <= 599) or (
                isinstance(status, str) and re.fullmatch(r"[1-5]xx", status))
            if not ok:
                rep.error(rf, ("mappings", j, "status", k), f"status {status!r} is neither an "
                          "HTTP status (100-599) nor a class like '5xx'", "errors-status")
        names = m.get("exception") or []
        for name in [names] if isinstance(names, str) else names:
            if not re.fullmatch(r"[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*", str(name)):
                rep.error(rf, ("mappings", j, "exception"), f"{name!r} is not a class name "
                          "(write TimeoutError or module.ClassName)", "errors-exception")
        strategy = m.get("retry_strategy")
        if strategy is not None and strategy not in ladders:
            rep.error(rf, ("mappings", j, "retry_strategy"), f"no ladder for retry strategy "
                      f"{strategy!r}", "errors-ladder")
        for key in ("fix", "message"):
            check_placeholders(rep, rf, ("mappings", j, key), m.get(key), ERROR_PLACEHOLDERS)
    default = data.get("default") or {}
    for key in ("fix", "message"):
        check_placeholders(rep, rf, ("default", key), default.get(key), ERROR_PLACEHOLDERS)


def _check_validation(rs: RuleSet, rep: Any, failed: set[tuple[str, str]]) -> None:
    from ._lint import check_regex

    rf = _usable(rs, "validation", failed)
    if rf is None:
        return
    data = rf.data
    for key, entry in (data.get("messages") or {}).items():
        for part in ("error", "suggestion", "expected"):
            check_placeholders(rep, rf, ("messages", key, part), entry.get(part),
                               VALIDATION_PLACEHOLDERS)
    check_placeholders(rep, rf, ("did_you_mean",), data.get("did_you_mean"), ("closest",))
    names: set[str] = set()
    for j, c in enumerate(data.get("coercions") or []):
        if c.get("name") in names:
            rep.error(rf, ("coercions", j, "name"), f"coercion {c.get('name')!r} is defined "
                      "twice", "validation-coercion")
        names.add(c.get("name"))
        if c.get("pattern"):
            check_regex(rep, rf, ("coercions", j, "pattern"), c["pattern"])
        if c.get("from") == "string" and c.get("to") != "string" and not (
                c.get("pattern") or c.get("values") is not None or c.get("json")):
            rep.error(rf, ("coercions", j), "a coercion from text needs `pattern`, `values` or "
                      "`json: true` (which texts convert)", "validation-coercion")
    for fmt, pattern in (data.get("formats") or {}).items():
        check_regex(rep, rf, ("formats", fmt), pattern)
    for j, e in enumerate((data.get("examples") or {}).get("by_name") or []):
        check_regex(rep, rf, ("examples", "by_name", j, "pattern"), e.get("pattern"))
    template = data.get("feedback_template")
    if isinstance(template, str) and template not in rs.templates:
        rep.error(rf, ("feedback_template",), f"template {template!r} does not exist under "
                  "templates/", "missing-template")
    envelope = data.get("envelope") or {}
    for code in ENVELOPE_CODES:
        if code not in envelope:
            rep.error(rf, ("envelope",), f"the dispatcher emits {code}; give it a message and a "
                      "ToolError code", "validation-envelope")
    for code, entry in envelope.items():
        check_placeholders(rep, rf, ("envelope", code, "message"), entry.get("message"),
                           ENVELOPE_PLACEHOLDERS)


def _check_engineering(rs: RuleSet, rep: Any, failed: set[tuple[str, str]]) -> None:
    from ._lint import check_regex

    rf = _usable(rs, "tool_selection", failed)
    if rf is not None:
        ns = rf.data.get("namespaces") or {}
        check_placeholders(rep, rf, ("namespaces", "description_prefix"),
                           ns.get("description_prefix"), ("namespace",))
    rf = _usable(rs, "tool_audit", failed)
    if rf is not None:
        for name, spec in (rf.data.get("checks") or {}).items():
            for k, p in enumerate(spec.get("patterns") or []):
                check_regex(rep, rf, ("checks", name, "patterns", k), p)
        check_placeholders(rep, rf, ("ambiguous_advice",), rf.data.get("ambiguous_advice"),
                           ("names",))
        enhance = rf.data.get("enhance") or {}
        check_placeholders(rep, rf, ("enhance", "parameters"), enhance.get("parameters"),
                           ("hints",))
        check_placeholders(rep, rf, ("enhance", "parameter"), enhance.get("parameter"),
                           ("name", "type", "required"))
        for j, b in enumerate(enhance.get("boundaries") or []):
            check_regex(rep, rf, ("enhance", "boundaries", j, "name"), b.get("name"))
    rf = _usable(rs, "tool_classes", failed)
    if rf is not None:
        both = set(rf.data.get("write_words") or ()) & set(rf.data.get("read_words") or ())
        if both:
            rep.error(rf, ("read_words",), f"words in both read_words and write_words: "
                      f"{', '.join(sorted(both))} (write_words are checked first)",
                      "tool-classes-overlap")
    rf = _usable(rs, "response_format", failed)
    if rf is not None:
        for j, h in enumerate(rf.data.get("hints") or []):
            check_regex(rep, rf, ("hints", j, "name"), h.get("name"))
            check_placeholders(rep, rf, ("hints", j, "text"), h.get("text"), ("total",))
        check_placeholders(rep, rf, ("default_hint",), rf.data.get("default_hint"), ("total",))
        template = rf.data.get("list_template")
        if isinstance(template, str) and template not in rs.templates:
            rep.error(rf, ("list_template",), f"template {template!r} does not exist under "
                      "templates/", "missing-template")
