"""Property tests for every dialect: splitting never changes the result; nothing crashes.

For every golden input of every dialect, hypothesis picks arbitrary split points and the
stream must give exactly what parse() gives. Arbitrary text (including marker soup) must
never raise anything but ParseError, for every dialect.
"""

from __future__ import annotations

import json
import random

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
        name = path.name.removesuffix(".cases.yaml")
        for case in data.get("cases", []):
            dialect = case.get("dialect", name)  # hostile.cases.yaml: one file, many dialects
            out.append(pytest.param(dialect, data, case, id=f"{name}_{case['name']}"))
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


_FAST = {"used": 0}


@pytest.mark.parametrize("dialect,data,case", _cases())
def test_whole_text_fast_path_gives_what_the_machine_gives(engine, dialect, data, case):
    """parse() reads common texts without the streaming machine (dialects/_whole.py); the
    result is the machine's, field for field (warnings and their order, ids, repairs)."""
    from toolrules.dialects._whole import parse_whole

    parser = _parser(engine, dialect, data, case)
    finish = case.get("finish_reason", "stop")
    got = parser.parse(case["text"], finish_reason=finish)
    fast = parser._whole is not None and \
        parse_whole(parser._whole, case["text"], finish) is not None
    _FAST["used"] += fast
    parser._whole = None  # the machine alone
    assert got == parser.parse(case["text"], finish_reason=finish)


def test_the_fast_path_is_taken_for_plain_calls(engine):
    parser = engine.text_parser(dialect="hermes", ids="sequential")
    text = ('Hi.\n<tool_call>\n{"name": "f", "arguments": {"a": [1, {"b": "</tool_call>"}]}}'
            '\n</tool_call>\n<tool_call>{"name": "g", "arguments": {}}</tool_call> bye')
    from toolrules.dialects._whole import parse_whole

    assert parse_whole(parser._whole, text, "stop") == parser.parse(text)
    assert [c.name for c in parser.parse(text).tool_calls] == ["f", "g"]
    # and gives way where the machine must decide: a repair, a cut call, deep nesting
    for other in ('<tool_call>{"name": "f", "arguments": {"a": 1,}}</tool_call>',
                  '<tool_call>{"name": "f", "arguments": {"a": 1}}',
                  '<tool_call>{"name": "f", "arguments": {"a": ' + "[" * 70 + "]" * 70
                  + "}}</tool_call>"):
        assert parse_whole(parser._whole, other, "stop") is None
    assert _FAST["used"] > 50 or _FAST["used"] == 0  # 0: ran alone, without the cases


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


# ---------------------------------------------------------------- hostile shapes

DIALECTS = sorted(p.name.removesuffix(".yaml") for p in (REPO / "rules" / "dialects").glob("*.yaml"))
CASES = REPO / "golden" / "dialects"


def _hostile(engine, dialect):
    from toolrules.bench._hostile import hostile_shapes

    # arguments of 200 KB, runs of 20,000 spaces/markers/header characters, 5,000 brackets;
    # one-token-per-character values smaller (a grammar payload reads them slowly)
    return hostile_shapes(engine, dialect, CASES, big=200_000, run=20_000, depth=5_000,
                          dense=20_000)


def _random_deltas(text, seed, most):
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        k = rng.randint(1, most)
        out.append(text[i:i + k])
        i += k
    return out


@pytest.mark.parametrize("dialect", DIALECTS)
def test_hostile_shapes_stream_equals_whole(engine, dialect):
    """Long unclosed headers (and headers around the 4096-character limit), runs of
    repeated markers, 200 KB arguments, 20,000 spaces, deep nesting: nothing raises, and
    streams split at random points give exactly what parse() gives, truncated or not."""
    shapes = _hostile(engine, dialect)
    assert len(shapes) >= 5
    for shape in shapes:
        parser = engine.text_parser(dialect=dialect, tools=shape.tools,
                                    generation_prompt=shape.prompt, ids="sequential")
        text = shape.text
        # one character per delta where the limit is decided, random 1..64 elsewhere
        most = 1 if shape.label.startswith("header-") else 64
        for finish in ("stop", "length"):
            whole = summary(parser.parse(text, finish_reason=finish))
            got = stream_parse(parser, _random_deltas(text, f"{dialect}/{shape.label}", most),
                               finish)
            assert got == whole, (dialect, shape.label, finish)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_deep_nesting_is_kept_as_text_with_a_warning(engine, dialect):
    """A call whose value nests 5,000 brackets is malformed input: no RecursionError, the
    call is not returned, its text is content, and the warning says why - unless the
    format writes that value as text the tool's schema keeps as a string."""
    from toolrules.bench._hostile import sample

    s = sample(engine, dialect, CASES)
    if s is None:
        pytest.skip(f"no plain one-call golden case for {dialect}")
    for shape in _hostile(engine, dialect):
        if not shape.label.startswith("nested-") or shape.label == "nested-parens":
            continue
        parser = engine.text_parser(dialect=dialect, tools=shape.tools,
                                    generation_prompt=shape.prompt, ids="sequential")
        result = parser.parse(shape.text)
        if result.tool_calls:  # the value is a string by the format's own type attribute
            assert all(isinstance(v, str) for c in result.tool_calls
                       for v in c.arguments.values()), (dialect, shape.label)
            continue
        assert "nesting-too-deep-kept-as-text" in result.warnings, (dialect, shape.label)
        run = '{"a": ' * 50 if shape.label == "nested-objects" else "[" * 100
        assert run in (result.content or "") + (result.reasoning_content or "")


@pytest.mark.parametrize("dialect", ["hermes", "mistral-v3", "llama3-json", "qwen3-coder",
                                     "pythonic", "gemma4", "glm", "harmony"])
def test_nesting_limit_is_exact(engine, dialect):
    """MAX_DEPTH brackets inside a value are a call; one more is text - whole or streamed."""
    from toolrules.bench._hostile import sample
    from toolrules.dialects._jsonscan import MAX_DEPTH

    s = sample(engine, dialect, CASES)
    assert s is not None
    tools = s.tools if s.quoted else [{"type": "function", "function": {
        "name": s.name, "parameters": {"type": "object",
                                       "properties": {s.key: {"type": "array"}}}}}]
    # the value's own depth: the wrapper of the call (if any) counts too, so find the
    # deepest value that still parses and check that one more bracket does not
    parser = engine.text_parser(dialect=dialect, tools=tools, generation_prompt=s.prompt,
                                ids="sequential")

    def at(depth):
        text = s.text[:s.start] + "[" * depth + "]" * depth + s.text[s.end:]
        whole = parser.parse(text)
        assert stream_parse(parser, list(text), "stop") == summary(whole)
        return whole

    deepest = max(d for d in range(MAX_DEPTH - 4, MAX_DEPTH + 1) if at(d).tool_calls)
    assert deepest > MAX_DEPTH - 4
    over = at(deepest + 1)
    assert not over.tool_calls
    assert "nesting-too-deep-kept-as-text" in over.warnings


@pytest.mark.parametrize("dialect", ["mistral", "gemma4", "glm", "kimi-k2", "qwen3-coder",
                                     "deepseek-dsml"])
def test_header_limit_is_exact(engine, dialect):
    """A call header of up to 4096 characters is read; a longer one makes the call text,
    and the decision does not depend on how the text arrives."""
    from toolrules.bench._hostile import sample

    s = sample(engine, dialect, CASES)
    assert s is not None
    parser = engine.text_parser(dialect=dialect, tools=s.tools, generation_prompt=s.prompt,
                                ids="sequential")
    named = s.text.index(s.name)
    results = {}
    around = 4096 - len(s.name)
    for pad in range(around - 12, around + 12):
        text = s.text[:named] + "h" * pad + s.text[named:]  # the name grows to the limit
        whole = parser.parse(text)
        for deltas in (list(text), [text], _random_deltas(text, pad, 9)):
            assert stream_parse(parser, deltas, "stop") == summary(whole), (dialect, pad)
        results[pad] = len(whole.tool_calls)
        if whole.tool_calls:
            assert whole.tool_calls[0].name == "h" * pad + s.name
        else:  # given back as text, verbatim
            assert "h" * pad + s.name in (whole.content or ""), (dialect, pad)
    counts = [results[p] for p in sorted(results)]
    assert counts == sorted(counts, reverse=True) and counts[0] == 1 and counts[-1] == 0, \
        results  # one exact limit: every header up to it is read, every longer one is not


def test_too_deep_prescan():
    from toolrules.dialects._jsonscan import too_deep

    assert not too_deep("[[1]]", limit=2)
    assert too_deep("[[[1]]]", limit=2)
    assert too_deep('{"a": {"b": [1]}}', limit=2)
    assert not too_deep('["[[[[", "{{{{"]', limit=2)  # brackets inside strings are data
    assert not too_deep("['[[[[']", limit=2)
    assert too_deep('["a\\"[", [[[1]]]]', limit=3)   # an escaped quote does not end it
    assert not too_deep("[1], [2], [3], [4]", limit=2)  # siblings do not add up
    assert not too_deep('"' + "[" * 500, limit=2)       # an unclosed string to the end
    assert too_deep("x" * 10 + "[" * 65)
    assert not too_deep("[" * 64 + "]" * 64)


def test_type_value_keeps_deep_text_raw_and_read_value_refuses_it():
    from toolrules.dialects._jsonscan import NestingTooDeep
    from toolrules.dialects._values import read_value, type_value

    deep = "[" * 5000 + "]" * 5000
    assert type_value(deep, {"type": "array"}) == deep
    with pytest.raises(NestingTooDeep):
        read_value(deep, {"type": "array"})
    assert read_value("[[1]]", {"type": "array"}) == [[1]]
    assert read_value(deep, {"type": "string"}) == deep  # a string is never decoded


# ---------------------------------------------------------------- grammar payloads

def _lark_reading(lark, text):
    """What Lark itself makes of a payload: its parse, then tree_to_value."""
    from lark.exceptions import LarkError

    from toolrules.dialects._grammars import tree_to_value

    try:
        return ("value", tree_to_value(lark.parse(text)))
    except (LarkError, ValueError) as exc:
        return ("error", type(exc).__name__ if not isinstance(exc, LarkError) else "")


def _fast_reading(lark, text):
    from toolrules.dialects._grammars import _reader

    reader = _reader(lark)
    assert reader is not None, "the LALR driver could not read this Lark parser"
    try:
        return ("value", reader.parse(text))
    except ValueError as exc:
        return ("error", type(exc).__name__ if type(exc) is not ValueError else "")


def _grammar_dialects(engine):
    return [(name, g) for name in sorted(engine.ruleset.ids("dialect"))
            for g in sorted(engine.dialect(name).grammars)]


def test_grammar_driver_reads_golden_payloads_like_lark(engine, monkeypatch):
    """The payload reader (an LALR driver over Lark's tables) gives what Lark's own parse
    plus tree_to_value gives, on every grammar payload of every golden case."""
    from toolrules.dialects import _grammars

    seen = []
    original = _grammars.parse_payload

    def spy(dialect, grammar, text, json_values=False):
        seen.append((dialect.grammar_parsers[grammar], text))
        return original(dialect, grammar, text, json_values)

    monkeypatch.setattr(_grammars, "parse_payload", spy)
    for dialect, data, case in (p.values for p in _cases()):
        _parser(engine, dialect, data, case).parse(case["text"],
                                                   finish_reason=case.get("finish_reason", "stop"))
    assert len(seen) > 30
    for lark, text in seen:
        want = _lark_reading(lark, text)
        got = _fast_reading(lark, text)
        if want[0] == "error":
            assert got[0] == "error", (text, got)
        else:
            assert got == want, text


_GRAMMAR_PIECES = ["[", "]", "(", ")", "{", "}", ",", "=", ":", " ", "\n", "f", "get_x", "a",
                   "b_c", "1", "-2.5", "1e3", '"s"', "'t'", '"a\\"b"', "'\\n'", '<|"|>r, {x}<|"|>',
                   "True", "False", "None", "true", "false", "null", "\\_", "'f()'", '"g(a=1)"',
                   "call:", "x y"]


def test_grammar_driver_reads_arbitrary_payloads_like_lark(engine):
    pairs = _grammar_dialects(engine)
    assert pairs

    @settings(max_examples=400, deadline=None)
    @given(st.sampled_from(pairs), st.lists(st.sampled_from(_GRAMMAR_PIECES), max_size=25))
    def check(pair, parts):
        dialect, grammar = pair
        lark = engine.dialect(dialect).grammar_parsers[grammar]
        text = "".join(parts)
        want, got = _lark_reading(lark, text), _fast_reading(lark, text)
        if want[0] == "error":
            assert got[0] == "error", (grammar, text, got)
        else:
            assert got == want, (grammar, text)

    check()


def _py_values():
    scalars = st.one_of(
        st.integers(-10**6, 10**6).map(str), st.floats(allow_nan=False, allow_infinity=False,
                                                        width=32).map(repr),
        st.text(st.characters(blacklist_categories=["Cs"]), max_size=6).map(repr),
        st.sampled_from(["True", "False", "None", "true", "false", "null"]))
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(inner, max_size=3).map(lambda xs: "(" + ", ".join(xs) + ("," if len(xs) == 1
                                                                          else "") + ")"),
        st.lists(st.tuples(inner, inner), max_size=3).map(
            lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}")), max_leaves=12)


def _gemma_values():
    scalars = st.one_of(st.integers(-999, 999).map(str),
                        st.sampled_from(["true", "false", "null"]),
                        st.text(st.characters(blacklist_categories=["Cs"]), max_size=6).map(
                            lambda t: '<|"|>' + t.replace("<|", "") + '<|"|>'))
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.lists(st.tuples(st.from_regex(r"[a-z][a-z_ -]{0,5}", fullmatch=True), inner),
                 max_size=3).map(lambda kv: "{" + ",".join(f"{k}:{v}" for k, v in kv) + "}")),
        max_leaves=12)


_NAMES = st.from_regex(r"[a-z_][a-z0-9_.]{0,8}", fullmatch=True)


def test_grammar_driver_reads_well_formed_payloads_like_lark(engine):
    """Well-formed call lists and object literals (random values, nested): the same values."""
    pairs = _grammar_dialects(engine)
    kwargs = st.lists(st.tuples(_NAMES, _py_values()), max_size=3).map(
        lambda kv: ", ".join(f"{k}={v}" for k, v in kv))
    calls = st.lists(st.tuples(_NAMES, kwargs).map(lambda c: f"{c[0]}({c[1]})"), min_size=1,
                     max_size=3)
    pythonic = calls.map(lambda cs: "[" + ", ".join(cs) + "]")
    gemma = _gemma_values().filter(lambda t: t.startswith("{"))

    @settings(max_examples=300, deadline=None)
    @given(st.sampled_from(pairs), pythonic, gemma)
    def check(pair, py_text, gemma_text):
        dialect, grammar = pair
        lark = engine.dialect(dialect).grammar_parsers[grammar]
        values = 0
        for text in (py_text, gemma_text):
            want, got = _lark_reading(lark, text), _fast_reading(lark, text)
            if want[0] == "error":
                assert got[0] == "error", (grammar, text, got)
            else:
                values += 1
                assert got == want, (grammar, text)
        assert values >= 1 or grammar not in ("pythonic.lark", "gemma4.lark"), (grammar,
                                                                                   py_text)

    check()


def test_json_values_read_like_the_grammar(engine):
    """Payloads `json_values`: plain-JSON lists and dicts read by the C scanner give what
    the grammar gives token by token (or both refuse), trailing commas included."""
    from toolrules.dialects._grammars import _reader

    pairs = sorted({(name, c.payload.grammar) for name in engine.ruleset.ids("dialect")
                    for c in engine.dialect(name).calls
                    if c.payload.json_values and c.payload.grammar})
    assert pairs
    jsonish = st.recursive(
        st.one_of(st.integers(-999, 999).map(str), st.sampled_from(["true", "null", "1.5e3"]),
                  st.text(st.characters(blacklist_categories=["Cs", "Cc"]), max_size=5).map(
                      json.dumps)),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
            st.lists(inner, min_size=1, max_size=3).map(lambda xs: "[" + ",".join(xs) + ",]"),
            st.lists(st.tuples(st.text("abc", max_size=3).map(json.dumps), inner),
                     max_size=3).map(lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv)
                                     + "}")), max_leaves=10)

    @settings(max_examples=200, deadline=None)
    @given(st.sampled_from(pairs), jsonish)
    def check(pair, value):
        dialect, grammar = pair
        reader = _reader(engine.dialect(dialect).grammar_parsers[grammar])
        for text in (f"[f(x={value})]", f"f(x={value}, y=[{value}])"):
            results = []
            for fast in (False, True):
                try:
                    results.append(("value", reader.parse(text, fast)))
                except ValueError as exc:
                    results.append(("error", type(exc).__name__))
            assert results[0] == results[1], (dialect, text, results)

    check()
