"""The proxy's JSON (`_jsonutil.loads`, `dumps_compact`): orjson when installed, with the
standard library's results and errors - the same values read, the same JSON written,
and what orjson cannot take handed to the standard library."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolrules import _jsonutil
from toolrules._jsonutil import dumps_compact, loads

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 80), 2 ** 80)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=25)


def test_orjson_is_what_the_serve_extra_brings():
    assert _jsonutil._orjson(), "pip install 'toolrules[serve]' brings orjson"


@settings(max_examples=300, deadline=None)
@given(values)
def test_written_compact_and_read_back_as_the_standard_library_does(value):
    text = dumps_compact(value)
    assert json.loads(text) == value  # the same JSON
    assert loads(text) == value and loads(text.encode()) == value
    if not any(isinstance(v, float) for v in _leaves(value)):  # numbers may be spelled apart
        assert text == json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("text", ['{"a": NaN}', "[Infinity, -Infinity]", "1e400",
                                  '{"n": 123456789012345678901234567890}',
                                  '"\\ud800"', "[1, 2]\n"])
def test_what_orjson_refuses_the_standard_library_reads(text):
    got, want = loads(text), json.loads(text)
    assert json.dumps(got) == json.dumps(want)


@pytest.mark.parametrize("text", ["{bad", "", "[1,", "nul", '{"a":1}x', "\xff"])
def test_what_is_not_json_raises_the_standard_librarys_error(text):
    with pytest.raises(ValueError) as got:
        loads(text)
    with pytest.raises(ValueError) as want:
        json.loads(text)
    assert str(got.value) == str(want.value)


def test_what_orjson_cannot_write_the_standard_library_writes():
    assert dumps_compact({1: "a", 2: [3]}) == '{"1":"a","2":[3]}'
    assert json.loads(dumps_compact({"n": 2 ** 70})) == {"n": 2 ** 70}
    assert dumps_compact("plain") == '"plain"' and dumps_compact(3) == "3"
    # NaN is not JSON: orjson writes null, the standard library NaN
    assert dumps_compact({"x": math.nan}) == ('{"x":null}' if _jsonutil._orjson() else
                                              '{"x":NaN}')


def _leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value
