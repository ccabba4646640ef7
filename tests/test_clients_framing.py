"""Stream framings decoded incrementally (any split of the bytes gives the same events),
transport facts from the rules, and a light core install (httpx only on first use)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from toolrules.clients._framing import (
    AwsEventStreamDecoder,
    FramingError,
    NdjsonDecoder,
    SseDecoder,
    StreamFailure,
    encode_aws_event,
)
from toolrules.clients._retry import parse_retry_after, retry_policy
from toolrules.providers._transport import http_rules, parse_seconds

EVENTS = [{"a": 1}, {"text": "line\nbreak é"}, {"b": [1, 2]}]


def _splits(data: bytes, decoder_type):
    """Every two-cut split of `data` (and byte by byte) decodes to the same events."""
    results = []
    for size in (1, 2, 3, 7, len(data)):
        dec = decoder_type()
        out = []
        for i in range(0, len(data), size):
            out.extend(dec.feed(data[i:i + size]))
        out.extend(dec.close())
        results.append(out)
    return results


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_sse_any_split(newline):
    text = "".join(f": comment{newline}event: x{newline}data: {json.dumps(e)}{newline}{newline}"
                   for e in EVENTS) + f"data: [DONE]{newline}{newline}"
    for out in _splits(text.encode(), SseDecoder):
        assert out == EVENTS


def test_sse_multiline_data_and_no_final_blank_line():
    dec = SseDecoder()
    assert dec.feed(b'data: {"a":\ndata: 1}\n\ndata: {"b": 2}') == [{"a": 1}]
    assert dec.close() == [{"b": 2}]
    with pytest.raises(FramingError):
        SseDecoder().feed(b"data: not json\n\n")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=4), st.text(max_size=12), max_size=3),
                min_size=1, max_size=5),
       st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=1, max_size=4),
       st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_sse_any_cut_of_any_line_endings(events, endings, cuts):
    """Events whose lines end in any mix of \\n, \\r\\n and \\r, cut anywhere - inside
    a UTF-8 character, between \\r and \\n - give the events of the whole."""
    lines: list[str] = []
    for e in events:
        lines += [": note", "event: x", f"data: {json.dumps(e, ensure_ascii=False)}", ""]
    text, before = "", ""
    for i, line in enumerate(lines):
        end = endings[i % len(endings)]
        if before == "\r" and not line and end[0] == "\n":
            end = "\r"  # \r then \n is one line end: the blank line would be lost
        text, before = text + line + end, end
    data = text.encode()
    points = sorted({min(c, len(data)) for c in cuts})
    dec = SseDecoder()
    out = []
    for a, b in zip([0, *points], [*points, len(data)], strict=True):
        out.extend(dec.feed(data[a:b]))
    out.extend(dec.close())
    assert out == events


def test_sse_a_line_past_the_limit_is_refused(monkeypatch):
    import toolrules.clients._framing as framing

    monkeypatch.setattr(framing, "MAX_PENDING", 64)
    dec = SseDecoder()
    dec.feed(b"data: " + b"x" * 40)  # an unfinished line, in pieces
    with pytest.raises(FramingError, match="larger than"):
        dec.feed(b"y" * 40)
    assert SseDecoder().feed(b'data: {"a": 1}\n\n' * 2) == [{"a": 1}] * 2


def test_ndjson_any_split():
    data = "".join(json.dumps(e) + "\n" for e in EVENTS).encode()
    for out in _splits(data, NdjsonDecoder):
        assert out == EVENTS


def test_aws_event_stream_any_split():
    data = b"".join(encode_aws_event({":event-type": f"e{i}", ":message-type": "event"},
                                     json.dumps(e).encode()) for i, e in enumerate(EVENTS))
    data += encode_aws_event({":message-type": "exception", ":exception-type": "validationException"},
                             b'{"message": "bad input"}')
    for out in _splits(data, AwsEventStreamDecoder):
        assert out[:3] == [{f"e{i}": e} for i, e in enumerate(EVENTS)]
        assert out[3] == StreamFailure("validationException", "bad input")
    broken = bytearray(data)
    broken[20] ^= 0xFF
    with pytest.raises(FramingError, match="checksum"):
        AwsEventStreamDecoder().feed(bytes(broken))
    with pytest.raises(FramingError, match="ended inside"):
        dec = AwsEventStreamDecoder()
        dec.feed(data[:30])
        dec.close()


def test_retry_after_forms():
    assert parse_retry_after("retry-after", "2") == 2.0
    assert parse_retry_after("retry-after-ms", "250") == 0.25
    assert parse_retry_after("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert parse_retry_after("retry-after", "soon") is None
    assert parse_seconds("46s") == 46.0 and parse_seconds("1.5s") == 1.5
    assert parse_seconds("250ms") == 0.25 and parse_seconds(True) is None


def test_backoff_grows_and_is_bounded(engine):
    policy = retry_policy(engine)
    import random

    rng = random.Random(1)
    waits = [policy.backoff(n, rng) for n in range(1, 10)]
    assert all(w <= policy.max_wait * (1 + policy.jitter) for w in waits)
    assert waits[0] < waits[2] < waits[4]
    assert policy.wait(1, policy.retry_after_max + 1) is None
    assert policy.wait(1, 3.0) == 3.0


def test_every_bundled_provider_can_be_reached(engine):
    for rid in engine.providers():
        h = http_rules(engine, rid)
        base = h.resolve_base("http://127.0.0.1:1/x")
        assert h.url(base, "m").startswith("http://127.0.0.1:1/x/")
        if h.framing is None:
            assert not engine.provider_rules(rid).stream_rules


def test_lint_checks_http_sections(tmp_path):
    import toolrules

    (tmp_path / "providers").mkdir()
    (tmp_path / "providers" / "bad.yaml").write_text(
        "extends: openai-compatible\n"
        "http:\n"
        "  base_url: ftp://example\n"
        "  path: /v1/{deployment}/chat\n"
        "  auth: {kind: query}\n")
    with pytest.raises(toolrules.RuleError) as info:
        toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    text = str(info.value)
    assert "unknown placeholder {deployment}" in text
    assert "is not an http(s) URL" in text
    assert "needs `http.auth.param`" in text


def test_providers_cli_shows_transport():
    from toolrules.cli import main

    r = CliRunner().invoke(main, ["providers", "--json"])
    rows = {row["id"]: row for row in json.loads(r.output)}
    assert rows["anthropic"]["http"]["key_env"] == ["ANTHROPIC_API_KEY"]
    assert rows["openai-compatible"]["http"]["base_url"] is None
    assert rows["ollama"]["http"]["framing"] == "ndjson"
    r = CliRunner().invoke(main, ["providers", "--markdown"])
    assert "| `gemini` |" in r.output and "?key=" in r.output


def test_core_import_stays_light():
    out = subprocess.run([sys.executable, "-c", "import sys, toolrules; "
                          "print('httpx' in sys.modules, 'botocore' in sys.modules)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
