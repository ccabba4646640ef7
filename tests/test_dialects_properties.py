"""Property tests for every dialect: splitting never changes the result; nothing crashes.

For every golden input of every dialect, hypothesis picks arbitrary split points and the
stream must give exactly what parse() gives. Arbitrary text (including marker soup) must
never raise anything but ParseError, for every dialect.
"""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO
from toolrules.golden._dialects import dialect_markers, stream_parse, summary


def _cases():
    out = []
    for path in sorted((REPO / "golden" / "dialects").glob("*.cases.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        dialect = path.name.removesuffix(".cases.yaml")
        for case in data.get("cases", []):
            out.append(pytest.param(dialect, data, case, id=f"{dialect}_{case['name']}"))
    return out


def _parser(engine, dialect, data, case):
    return engine.text_parser(dialect=dialect, tools=case.get("tools", data.get("tools")),
                              generation_prompt=case.get("generation_prompt",
                                                         data.get("generation_prompt")),
                              ids="sequential", repairs=case.get("repairs"))


def _cut(text, points):
    cuts = sorted({p % (len(text) + 1) for p in points})
    pieces, last = [], 0
    for c in cuts:
        pieces.append(text[last:c])
        last = c
    pieces.append(text[last:])
    return pieces


@pytest.mark.parametrize("dialect,data,case", _cases())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(points=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40))
def test_any_split_equals_whole(engine, dialect, data, case, points):
    parser = _parser(engine, dialect, data, case)
    finish = case.get("finish_reason", "stop")
    whole = summary(parser.parse(case["text"], finish_reason=finish))
    assert stream_parse(parser, _cut(case["text"], points), finish) == whole


def _marker_soup(engine):
    names = engine.ruleset.ids("dialect")
    alphabet = set()
    for n in names:
        alphabet |= dialect_markers(engine.dialect(n))
    pieces = sorted(alphabet) + ['{"name": "f", "arguments": {', "}", "]", "[", '"', "\\", "'",
                                 "name=\"x\"", ">", "<", "\n", " ", "a", "1", ":", ","]
    return names, pieces


def test_arbitrary_text_never_crashes(engine):
    names, pieces = _marker_soup(engine)

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.sampled_from(pieces), max_size=60), st.sampled_from(names),
           st.sampled_from(["stop", "length"]))
    def check(parts, dialect, finish):
        text = "".join(parts)
        parser = engine.text_parser(dialect=dialect, ids="sequential")
        result = parser.parse(text, finish_reason=finish)
        for call in result.tool_calls:
            assert isinstance(call.arguments, dict)
            json.dumps(call.arguments)
        assert stream_parse(parser, list(text), finish) == summary(result)

    check()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300))
def test_random_unicode_never_crashes(engine, text):
    for dialect in ("hermes", "harmony", "qwen3-coder", "gemma4", "auto", "kimi-k3"):
        parser = engine.text_parser(dialect=dialect)
        parser.parse(text)
        parser.parse(text, finish_reason="length")


def _bound(dialect) -> int:
    longest = max((len(m) for m in dialect_markers(dialect)), default=1)
    return longest + 24


ADVERSARIAL = [
    " " * 3000 + "x",
    "\n" * 2000 + "<tool_call>" + " " * 2000 + "{" + '"a": "' + "y" * 3000 + '"}',
    "[" * 500 + "]" * 500,
    "{" * 800,
    '{"name": "f", "arguments": {"s": "' + "\\\\" * 1500 + '"}}',
    "<" * 2000,
    "<tool_ca" * 300,
    "<parameter=x>" + "v" * 2000 + "</parameter>" + " " * 2000 + "z",
    "<|close|>argument<|sep|>" * 200,
]


@pytest.mark.parametrize("dialect", sorted(
    p.name.removesuffix(".yaml") for p in (REPO / "rules" / "dialects").glob("*.yaml")))
def test_streaming_holds_back_only_a_possible_marker(engine, dialect):
    """Linear time, structurally: after every 1-character delta the scanner keeps at most a
    possible marker prefix unconsumed, so no delta ever re-scans the accumulated text."""
    d = engine.dialect(dialect)
    bound = _bound(d)
    parser = engine.text_parser(dialect=dialect)
    for text in ADVERSARIAL:
        st = parser.stream()
        worst = 0
        for ch in text:
            st.feed(ch)
            worst = max(worst, len(st._m.buf))
        st.close()
        assert worst <= bound, (dialect, text[:40], worst, bound)
