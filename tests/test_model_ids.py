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
    # month-year stamps are kept as YYYYMM
    ("command-r-plus-08-2024", "command", (), {"date": "202408", "variant": "r-plus"}),
    ("gemini-2.5-flash-preview-09-2025", "gemini", (2, 5), {"date": "202509"}),
    ("gemini-2.5-pro-preview-06-05", "gemini", (2, 5), {"date": "0605"}),
    # groq's context-length suffix is neither a date nor a variant
    ("groq/llama3-70b-8192", "llama", (3,), {"date": None, "variant": None,
                                             "size": 70 * 10**9}),
    # Llama 4: 17B active of 109B / 400B total
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "llama", (4,),
     {"size": 400 * 10**9, "active_size": 17 * 10**9}),
    ("meta.llama4-scout-17b-instruct-v1:0", "llama", (4,),
     {"size": 109 * 10**9, "active_size": 17 * 10**9, "provider": "bedrock"}),
    ("allenai/OLMoE-1B-7B-0924-Instruct", "olmo", (),
     {"size": 7 * 10**9, "active_size": 10**9, "date": "0924"}),
    # context lengths (4k, 128k, 1m) are not sizes; 350m is
    ("microsoft/Phi-3-mini-4k-instruct", "phi", (3,), {"size": None,
                                                       "variant": "mini-4k-instruct"}),
    ("Qwen/Qwen2.5-7B-Instruct-1M", "qwen", (2, 5), {"size": 7 * 10**9}),
    ("LiquidAI/LFM2-350M", "lfm2", (2,), {"size": 350 * 10**6}),
    ("ibm-granite/granite-3.0-3b-a800m-instruct", "granite", (3, 0),
     {"size": 3 * 10**9, "active_size": 800 * 10**6}),
    # HF repo under openai/ is not the OpenAI API
    ("openai/gpt-oss-20b", "gpt-oss", (), {"provider": None, "org": "openai", "custom": False}),
    ("openai/gpt-4o", "gpt", (4,), {"provider": "openai", "org": "openai"}),
    # bedrock DeepSeek and OpenAI ids
    ("us.deepseek.r1-v1:0", "deepseek", (1,), {"provider": "bedrock", "org": "deepseek",
                                               "variant": "r1"}),
    ("openai.gpt-oss-120b-1:0", "gpt-oss", (), {"provider": "bedrock", "size": 120 * 10**9}),
    ("us.amazon.nova-pro-v1:0", "nova", (), {"provider": "bedrock", "variant": "pro"}),
    # separators and prefixes
    ("glm-4p7", "glm", (4, 7), {}),
    ("accounts/fireworks/models/deepseek-v3p1", "deepseek", (3, 1), {"provider": "fireworks"}),
    ("open-mistral-nemo", "mistral", (), {"variant": "nemo"}),
    ("internlm/internlm2_5-1_8b-chat", "internlm", (2, 5), {"size": 1_800_000_000}),
    ("nvidia/Llama-3_3-Nemotron-Super-49B-v1_5", "nemotron", (1, 5),
     {"size": 49 * 10**9, "variant": "super"}),
    ("CohereForAI/c4ai-command-r7b-12-2024", "command", (),
     {"variant": "r7b", "size": 7 * 10**9, "date": "202412", "custom": False}),
    ("kimi-k2:1t-cloud", "kimi", (2,), {"size": 10**12, "variant": None}),
    ("google/gemma-3n-E4B-it", "gemma", (3,), {"variant": "3n-e4b-it"}),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "deepseek", (1,),
     {"variant": "r1-distill-qwen", "size": 32 * 10**9}),
])
def test_normalization(engine, model_id, family, version, extra):
    spec = engine.parse_model_id(model_id)
    assert (spec.family, spec.version) == (family, version)
    for key, value in extra.items():
        assert getattr(spec, key) == value, key


def test_moe_size(engine):
    from toolrules.models._rules import parse_size

    assert parse_size("8x7b") == 56 * 10**9
    assert parse_size("1.5b") == 1_500_000_000
    assert parse_size("135m") == 135_000_000


def test_strip_date_parts_are_reordered(tmp_path):
    """A strip pattern may name `year`/`month`/`day`; the date is kept as year+month+day."""
    import textwrap

    import toolrules

    (tmp_path / "models").mkdir()
    (tmp_path / "ids.yaml").write_text(textwrap.dedent("""\
        description: test table
        strip:
          - '-(?P<day>\\d{2})\\.(?P<month>\\d{2})\\.(?P<year>\\d{4})$'
          - '-(?P<month>\\d{2})-(?P<year>20\\d{2})$'
          - '-(?P<date>\\d{4}-\\d{2})$'
        """), encoding="utf-8")
    (tmp_path / "models" / "acme.yaml").write_text(textwrap.dedent("""\
        family: acme
        examples: [acme-2, acme-3]
        match: ['^acme-(?P<version>\\d+)']
        defaults: {native_tools: true}
        capabilities:
          - when: {date: '>=202406'}
            set: {parallel_tools: true}
        """), encoding="utf-8")
    engine = toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    assert engine.parse_model_id("acme-2-31.12.2024").date == "20241231"
    assert engine.parse_model_id("acme-2-08-2024").date == "202408"
    assert engine.parse_model_id("acme-2-2024-08").date == "202408"
    assert engine.parse_model_id("acme-2").date is None
    # dates compare correctly once they are year-first
    assert engine.capability("acme-2-08-2024").parallel_tools is True
    assert engine.capability("acme-2-03-2024").parallel_tools is False


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_parse_never_raises(engine, text):
    spec = engine.parse_model_id(text)
    assert isinstance(spec.family, str) and spec.family


def test_long_garbage_is_bounded(engine):
    from toolrules.models._rules import MAX_ID_CHARS

    garbage = ("llama-" * 2000) + "x" * 10_000
    spec = engine.parse_model_id(garbage)
    assert spec.model_id == garbage  # the raw id is kept whole ...
    assert MAX_ID_CHARS <= 1024       # ... but only a bounded prefix is ever matched
    assert engine.parse_model_id("\x00" * 10_000).known is False
