"""Overlays: a user's rule directory replaces or adds rules; broken sets are refused whole."""

from __future__ import annotations

import textwrap

import pytest

import toolrules


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_new_family_is_a_rules_only_change(tmp_path):
    """Adding a model family needs one YAML file - no code."""
    write(tmp_path / "models" / "acme.yaml", """\
        family: acme
        match: ['^acme-(?P<version>\\d+(?:\\.\\d+)?)']
        defaults: {native_tools: true, context_window: 32768}
        capabilities:
          - when: {version: '>=2'}
            set: {parallel_tools: true}
        """)
    engine = toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    spec = engine.parse_model_id("acme-2.1-7b")
    assert (spec.family, spec.version, spec.size) == ("acme", (2, 1), 7 * 10**9)
    cap = engine.capability("acme-2.1-7b")
    assert cap.native_tools and cap.parallel_tools and cap.context_window == 32768
    assert not engine.capability("acme-1").parallel_tools
    # the bundled rules are still there
    assert engine.capability("gpt-4o").native_tools


def test_same_id_replaces_bundled(tmp_path):
    write(tmp_path / "models" / "gpt.yaml", """\
        family: gpt
        match: ['^gpt-?(?P<version>\\d+(?:\\.\\d+)?)']
        defaults: {native_tools: false, emulation_style: xml}
        """)
    engine = toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    cap = engine.capability("gpt-4o")
    assert cap.native_tools is False and cap.emulation_style == "xml"


def test_override_by_exact_id(tmp_path):
    write(tmp_path / "models" / "site-overrides.yaml", """\
        overrides:
          - id: mycompany/llama3-ft
            set: {native_tools: false, emulation_style: xml}
          - pattern: '^ollama/'
            set: {tool_streaming: false}
        """)
    engine = toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    assert engine.capability("mycompany/llama3-ft").emulation_style == "xml"
    assert engine.capability("mycompany/llama3.3-ft").native_tools is True  # untouched


def test_toolrules_path_env(tmp_path, monkeypatch):
    write(tmp_path / "models" / "zeta.yaml", """\
        family: zeta
        match: ['^zeta']
        defaults: {native_tools: true}
        """)
    monkeypatch.setenv("TOOLRULES_PATH", str(tmp_path))
    engine = toolrules.load(cache=False)
    assert engine.parse_model_id("zeta-1").family == "zeta"


def test_broken_overlay_is_refused_with_every_problem(tmp_path):
    write(tmp_path / "models" / "bad.yaml", """\
        family: bad
        match: ['^bad-(']
        defaults: {native_tols: true}
        """)
    write(tmp_path / "models" / "worse.yaml", "family: [\n")
    with pytest.raises(toolrules.RuleError) as info:
        toolrules.load(paths=[tmp_path], use_env=False, cache=False)
    text = str(info.value)
    assert "bad.yaml:2:" in text and "regex does not compile" in text
    assert "bad.yaml:3:" in text and "did you mean 'native_tools'" in text
    assert "worse.yaml:" in text and "yaml-syntax" in text
    assert len([p for p in info.value.problems if p.level == "error"]) == 3


def test_disk_cache_roundtrip(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLRULES_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TOOLRULES_CACHE", "1")
    first = toolrules.load(use_env=False)
    assert list((tmp_path / "cache").glob("rules-*.marshal"))
    second = toolrules.load(use_env=False)
    assert first.capability("gpt-4o") == second.capability("gpt-4o")
    assert first.ruleset.digest == second.ruleset.digest
