"""Provider-rule expressions evaluate as compiled closures (providers/_rules.py `Expr`):
on every expression of every provider rule, and on random data, the result is exactly
what JMESPath's own interpreter gives - or both fail."""

from __future__ import annotations

import json
from typing import Any

import jmespath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolrules._errors import ParseError
from toolrules.providers._rules import Expr, _walk_exprs
from toolrules.rules._schemas_providers import PROVIDER_SCHEMA

KEYS = ["a", "b", "type", "content", "text", "id", "name", "usage", "choices", "delta",
        "tool_calls", "function", "arguments", "message", "error", "role", "index", "call"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.floats(allow_nan=False, width=16)
    | st.sampled_from(["", "x", "string", "text", "tool_use", "error", "stop"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner,
                                                                max_size=5),
    max_leaves=20)


def _rule_expressions(engine: Any) -> list[str]:
    out: set[str] = set()
    for rid in engine.providers():
        data = engine.ruleset.get("provider", rid).data
        for _path, src in _walk_exprs(PROVIDER_SCHEMA, data, ()):
            out.add(src)
    return sorted(out)


HAND = ["a", "a.b", "a[0]", "a[-1].b", "a || b", "a && b", "!a", "a == b", "a != `1`",
        "{x: a, y: `[]`}", "[a, b]", "@", "a | b", "a[].b", "a[?b]", "length(a)",
        "type(a) == 'string' && a || b", "!`0`", "`0` == `false`", "`1` == `true`",
        "a[*].b", "a[]", "a[][]", "a[?b == `1`].b", "a[?b].b[0]", "*.b", "a.*",
        "join(', ', a)", "length(a[?b])", "sort_by(a, &b)", "not_null(a, b)",
        "starts_with(a, 'x')", "sum(a[].b)", "a[0:2]", "a > b",
        # fused paths (fields and indexes in one function) and merge's dict fast path
        "a.b.c", "a.b[0]", "a[0].b[1].c", "a.b[-1]", "merge(a, b)", "merge(a, `{\"x\": 1}`)",
        "merge(`{}`, a, b)"]


def _same(src: str, data: Any) -> None:
    try:
        want: Any = ("ok", jmespath.search(src, data))
    except jmespath.exceptions.JMESPathError:
        want = ("error",)
    except (TypeError, ValueError):  # JMESPath's merge() checks only its first argument:
        assert src.startswith("merge(")  # a later non-object fails in Python: an error
        want = ("error",)
    try:
        got: Any = ("ok", Expr(src, "test")(data))
    except ParseError:
        got = ("error",)
    assert json.dumps(got, sort_keys=True, default=repr) == \
        json.dumps(want, sort_keys=True, default=repr), src


def test_every_rule_expression_is_covered(engine):
    assert len(_rule_expressions(engine)) > 150


@settings(max_examples=60, deadline=None)
@given(json_values)
def test_closures_match_jmespath_on_random_data(engine, data):
    for src in [*HAND, *_rule_expressions(engine)]:
        _same(src, data)


@pytest.mark.parametrize("src", HAND)
def test_closures_match_jmespath_on_hand_picked_data(src):
    for data in (None, {}, {"a": 0}, {"a": False, "b": 1}, {"a": [], "b": ""},
                 {"a": [{"b": 1}, {"b": None}], "b": "x"}, {"a": "s"}, {"a": 1, "b": True},
                 {"a": {"b": [1]}}, [1, 2], {"a": {"b": {"c": 2}}, "b": {"d": 1}},
                 {"a": [{"b": [0, {"c": 3}]}], "b": {}}, {"a": {"x": 0}, "b": [1]}):
        _same(src, data)
