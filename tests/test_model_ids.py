"""Id normalization details and robustness of parse_model_id."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize("model_id,family,version,extra", [
    ("Meta-Llama-3_1-70B", "llama", (3, 1), {"size": 70 * 10**9}),
    ("meta.llama3-1-70b-instruct-v1:0", "llama", (3, 1), {"provider": "bedrock"}),
    ("us.anthropic.claude-3-5-sonnet-20241022-v2:0", "claude", (3, 5),
     {"provider": "bedrock", "date": "20241022", "variant": "sonnet"}),
    ("gpt-4o-2024-08-06", "gpt", (4,), {"date": "20240806", "variant": "o"}),
    ("Qwen/Qwen3-30B-A3B", "qwen", (3,), {"size": 30 * 10**9, "active_size": 3 * 10**9}),
    ("llama3.2:3b-instruct-q4_K_M", "llama", (3, 2), {"size": 3 * 10**9}),
    ("openrouter/meta-llama/llama-3.3-70b-instruct:free", "llama", (3, 3),
     {"provider": "openrouter", "org": "meta-llama", "custom": False}),
    ("accounts/fireworks/models/llama-v3p1-70b-instruct", "llama", (3, 1),
     {"provider": "fireworks"}),
    ("claude-3-5-sonnet@20240620", "claude", (3, 5), {"date": "20240620"}),
])
def test_normalization(engine, model_id, family, version, extra):
    spec = engine.parse_model_id(model_id)
    assert (spec.family, spec.version) == (family, version)
    for key, value in extra.items():
        assert getattr(spec, key) == value, key


def test_moe_size(engine):
    from toolrules._models import parse_size

    assert parse_size("8x7b") == 56 * 10**9
    assert parse_size("1.5b") == 1_500_000_000
    assert parse_size("135m") == 135_000_000


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_parse_never_raises(engine, text):
    spec = engine.parse_model_id(text)
    assert isinstance(spec.family, str) and spec.family


def test_long_garbage_is_bounded(engine):
    from toolrules._models import MAX_ID_CHARS

    garbage = ("llama-" * 2000) + "x" * 10_000
    spec = engine.parse_model_id(garbage)
    assert spec.model_id == garbage  # the raw id is kept whole ...
    assert MAX_ID_CHARS <= 1024       # ... but only a bounded prefix is ever matched
    assert engine.parse_model_id("\x00" * 10_000).known is False
