"""Model ids seen in outside catalogues: community fine-tune naming,
families added from provider catalogues, non-chat ids under chat families, and tool support
that depends on the host. All of it is rule data; these tests pin the outcomes."""

from __future__ import annotations

import pytest

# id -> (family, version, native_tools)
FINE_TUNES = [
    ("Sao10K/L3-8B-Stheno-v3.2", "llama", (3,), False),          # Llama 3.0 8B: no tools
    ("sao10k/l3-lunaris-8b", "llama", (3,), False),
    ("Sao10K/L3.1-70B-Hanami-x1", "llama", (3, 1), True),
    ("sao10k/l3.3-euryale-70b", "llama", (3, 3), True),
    ("gryphe/mythomax-l2-13b", "llama", (2,), False),             # found inside the name
    ("TheDrummer/MS3.2-24B-Magnum-Diamond", "mistral", (3, 2), True),
    ("Gryphe/MN-12B-Mag-Mell-R1", "mistral", (), True),
    ("Salesforce/Llama-xLAM-2-70b-fc-r", "xlam", (2,), True),
    ("mradermacher/Llama-xLAM-2-70b-fc-r-GGUF", "xlam", (2,), True),
]


@pytest.mark.parametrize("model_id,family,version,native", FINE_TUNES,
                         ids=[c[0] for c in FINE_TUNES])
def test_community_fine_tunes_resolve_to_their_base(engine, model_id, family, version, native):
    spec = engine.parse_model_id(model_id)
    assert (spec.family, spec.version, spec.known) == (family, version, True)
    assert engine.capability(model_id).native_tools is native


def test_fine_tune_shorthand_keeps_the_base_variant(engine):
    assert "small" in engine.parse_model_id("TheDrummer/MS3.2-24B-Magnum-Diamond").variant
    assert "nemo" in engine.parse_model_id("Gryphe/MN-12B-Mag-Mell-R1").variant
    # a bare L3 with no size in the name is not enough to claim Llama
    assert engine.parse_model_id("acme/l3-widget").known is False


NEW_FAMILIES = [
    ("moonshot-v1-8k", "moonshot", True, 8192),
    ("moonshot-v1-128k-vision-preview", "moonshot", True, 131072),
    ("doubao-seed-1.6", "doubao", True, 262144),
    ("doubao-1-5-pro-32k-250115", "doubao", True, 32768),
    ("bytedance-seed/seed-1.6-flash", "doubao", True, 262144),
    ("doubao-lite-4k", "doubao", False, 4096),
    ("hunyuan-turbos-latest", "hunyuan", True, 32000),
    ("hunyuan-t1-latest", "hunyuan", False, 92000),
    ("tencent/Hunyuan-A13B-Instruct", "hunyuan", True, 262144),
    ("hy3", "hunyuan", True, 262144),
    ("step-3.5-flash", "step", True, 262144),
    ("stepfun-ai/step3", "step", True, 65536),
    ("step-2-16k", "step", True, 16000),
    ("thinkingmachines/Inkling", "inkling", True, 524288),
    ("meta/muse-spark-1.3", "muse", True, 1048576),
    ("v0-1.5-md", "v0", True, 128000),
    ("v0-1.5-lg", "v0", True, 512000),
]


@pytest.mark.parametrize("model_id,family,native,window", NEW_FAMILIES,
                         ids=[c[0] for c in NEW_FAMILIES])
def test_new_families(engine, model_id, family, native, window):
    spec = engine.parse_model_id(model_id)
    assert (spec.family, spec.known) == (family, True)
    cap = engine.capability(model_id)
    assert (cap.native_tools, cap.context_window) == (native, window)


def test_seed_oss_is_not_doubao(engine):
    assert engine.parse_model_id("ByteDance-Seed/Seed-OSS-36B-Instruct").family == "seed-oss"


def test_step_checkpoint_numbers_are_not_stepfun(engine):
    assert engine.parse_model_id("mymodel-step-2000").family != "step"


NON_CHAT = [
    ("gpt-image-1", "gpt"), ("gpt-image-1-mini", "gpt"), ("gpt-4o-transcribe", "gpt"),
    ("gpt-4o-mini-transcribe", "gpt"), ("gpt-4o-mini-tts", "gpt"), ("tts-1", "tts"),
    ("tts-1-hd", "tts"), ("whisper-1", "whisper"), ("openai/whisper-large-v3", "whisper"),
    ("voxtral-mini-latest", "voxtral"), ("mistralai/Voxtral-Small-24B-2507", "voxtral"),
    ("text-embedding-3-small", "text-embedding"), ("text-embedding-ada-002", "text-embedding"),
    ("mistral-embed", "mistral"), ("codestral-embed", "codestral"),
    ("omni-moderation-latest", "moderation"), ("mistral-moderation-latest", "mistral"),
    ("doubao-embedding", "doubao"), ("step-tts-mini", "step"),
]


@pytest.mark.parametrize("model_id,family", NON_CHAT, ids=[c[0] for c in NON_CHAT])
def test_non_chat_ids_claim_no_tools(engine, model_id, family):
    spec = engine.parse_model_id(model_id)
    assert (spec.family, spec.known) == (family, True)
    cap = engine.capability(model_id)
    assert cap.native_tools is False
    assert cap.parallel_tools is False
    assert cap.tool_calling_reliable is False
    assert cap.dialect is None


def test_chat_siblings_of_non_chat_ids_keep_their_tools(engine):
    for model_id in ("gpt-4o", "gpt-4o-mini", "gpt-4o-realtime-preview", "mistral-small-latest",
                     "codestral-2501"):
        assert engine.capability(model_id).native_tools is True, model_id


# (on this host, elsewhere): the same model, tool support decided by the provider
BY_PROVIDER = [
    ("groq/llama3-8b-8192", "llama3:8b"),
    ("groq/gemma2-9b-it", "google/gemma-2-9b-it"),
    ("groq/deepseek-r1-distill-llama-70b", "deepseek-ai/DeepSeek-R1-Distill-Llama-70B"),
    ("mistral/voxtral-small-latest", "openrouter/mistralai/voxtral-small-24b-2507"),
]


@pytest.mark.parametrize("hosted,elsewhere", BY_PROVIDER, ids=[c[0] for c in BY_PROVIDER])
def test_tool_support_that_depends_on_the_provider(engine, hosted, elsewhere):
    assert engine.parse_model_id(hosted).family == engine.parse_model_id(elsewhere).family
    assert engine.capability(hosted).native_tools is True
    assert engine.capability(elsewhere).native_tools is False
    trace = "\n".join(engine.resolve_model(hosted).trace)
    assert "'provider'" in trace


def test_provider_clauses_do_not_leak_to_other_versions(engine):
    assert engine.capability("groq/llama-3.3-70b-versatile").native_tools is True
    assert engine.capability("groq/gemma-7b-it").native_tools is False   # Gemma 1: not listed
    assert engine.capability("mistral/voxtral-mini-transcribe-2507").native_tools is False
    assert engine.capability("groq/meta-models/muse-spark-open").context_window == 131072
    assert engine.capability("meta/muse-spark-open").context_window == 1048576
