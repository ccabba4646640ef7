"""Model id parsing and capabilities of well-known models, as table tests."""

from __future__ import annotations

import pytest

from toolrules import ModelSpec


@pytest.mark.parametrize("model_id,expected", [
    # OpenAI
    ("gpt-4o", ModelSpec(family="gpt", version=(4,), variant="o")),
    ("gpt-4-turbo", ModelSpec(family="gpt", version=(4,), variant="turbo")),
    ("gpt-3.5-turbo", ModelSpec(family="gpt", version=(3, 5), variant="turbo")),
    ("o1-preview", ModelSpec(family="o1", variant="preview")),
    # Anthropic
    ("claude-3.5-sonnet", ModelSpec(family="claude", version=(3, 5), variant="sonnet")),
    ("claude-3-opus", ModelSpec(family="claude", version=(3,), variant="opus")),
    ("claude-sonnet-4-20250514", ModelSpec(family="claude", version=(4,), variant="sonnet")),
    # Llama
    ("llama3.3:70b", ModelSpec(family="llama", version=(3, 3), size=70_000_000_000)),
    ("meta-llama/Llama-3.3-70B-Instruct", ModelSpec(
        family="llama", version=(3, 3), size=70_000_000_000, variant="instruct"
    )),
    # Qwen
    ("qwen2.5:32b", ModelSpec(family="qwen", version=(2, 5), size=32_000_000_000)),
    ("qwen3", ModelSpec(family="qwen", version=(3,))),
    # With provider
    ("ollama/llama3.3:70b", ModelSpec(
        family="llama", version=(3, 3), size=70_000_000_000, provider="ollama"
    )),
    # Custom
    ("mycompany/llama3-ft", ModelSpec(
        family="llama", version=(3,), org="mycompany", custom=True
    )),
])
def test_parse_model_id(engine, model_id, expected):
    result = engine.parse_model_id(model_id)
    assert result.family == expected.family
    assert result.version == expected.version
    if expected.size:
        assert result.size == expected.size
    # beyond the table's three assertions: the other fields it lists
    if expected.variant:
        assert result.variant == expected.variant
    if expected.provider:
        assert result.provider == expected.provider
    if expected.org:
        assert result.org == expected.org
        assert result.custom is expected.custom


def test_gpt4o_capabilities(engine):
    cap = engine.capability("gpt-4o")
    assert cap.native_tools is True
    assert cap.parallel_tools is True
    assert cap.tool_streaming is True


def test_claude_35_capabilities(engine):
    cap = engine.capability("claude-3.5-sonnet")
    assert cap.native_tools is True
    assert cap.needs_tool_schema_strict is True
    assert cap.tool_result_in_user_message is True


def test_small_llama_emulation(engine):
    cap = engine.capability("llama3:7b")
    assert cap.native_tools is False
    assert cap.emulation_style == "json"


def test_unknown_model_defaults(engine):
    cap = engine.capability("totally-unknown-model")
    assert cap.native_tools is False
    assert cap.emulation_style == "json"
    assert engine.parse_model_id("totally-unknown-model").known is False


def test_custom_model_inheritance(engine):
    cap = engine.capability("mycompany/llama3.3-ft")
    assert cap.native_tools is True


def test_model_switch_journey(engine):
    """Capabilities are re-routed when the user switches model."""
    cap1 = engine.capability("gpt-4o")
    assert cap1.native_tools is True
    cap2 = engine.capability("ollama/llama3:7b")
    assert cap2.native_tools is False
    assert cap1 != cap2


def test_custom_model_journey(engine):
    """A fine-tune inherits its base family."""
    spec = engine.parse_model_id("mycompany/llama3.3-code-ft")
    assert spec.custom is True
    assert spec.family == "llama"
    assert spec.version >= (3, 3)
    assert engine.capability("mycompany/llama3.3-code-ft").native_tools is True


def test_version_aware_claude(engine):
    c3 = engine.capability("claude-3-opus")
    c35 = engine.capability("claude-3-5-sonnet-20241022")
    c4 = engine.capability("claude-sonnet-4-20250514")
    assert (c3.tool_streaming, c35.tool_streaming) == (False, True)
    assert c4.reasoning and not c35.reasoning


def test_size_aware_llama(engine):
    assert engine.capability("llama3:70b").native_tools is True
    assert engine.capability("llama3:8b").native_tools is False


def test_reasoning_models_refuse_required(engine):
    """O-series reasoning models do not take tool_choice=required."""
    assert engine.capability("o1").supports_tool_choice_required is False
    assert engine.capability("o3-mini").reasoning is True


def test_parallel_flags(engine):
    """A model without parallel support is marked so."""
    assert engine.capability("llama3.3:70b").parallel_tools is False
    assert engine.capability("gpt-4o").parallel_tools is True
