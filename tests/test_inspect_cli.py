"""`toolrules inspect --template FILE | --gguf FILE | --server URL [--json] [--write-rule DIR]`
as a user runs it, and the GGUF metadata reader behind --gguf: GGUF files written here
(and the real Gemma 3 270M weights the local extra ships, which carry no template), a
loopback server that answers /props as llama-server does, and every kind of bad input."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from toolrules._errors import ParseError
from toolrules.chat_template._gguf import read_gguf_template
from toolrules.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from props_server import PropsServer

TEMPLATE = textwrap.dedent("""
    {{- bos_token }}
    {%- if tools %}<|im_start|>system
    {% for t in tools %}{{ t | tojson }}
    {% endfor %}<|im_end|>
    {% endif %}
    {%- for m in messages %}
    {%- if m.role == 'system' and not loop.first %}{{ raise_exception('System message must be at the beginning.') }}{% endif %}
    <|im_start|>{{ 'user' if m.role == 'tool' else m.role }}
    {% if m.role == 'tool' %}<tool_response>
    {{ m.content }}
    </tool_response>{% else %}{{ m.content or '' }}{% endif %}
    {%- for c in m.tool_calls or [] %}
    <tool_call>
    {"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
    </tool_call>
    {%- endfor %}<|im_end|>
    {% endfor %}
    {%- if add_generation_prompt %}<|im_start|>assistant
    {% endif %}
""").strip("\n")


# ---------------------------------------------------------------- writing GGUF files

def _gstr(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def _value(value: Any) -> tuple[int, bytes]:
    if isinstance(value, bool):
        return 7, struct.pack("<?", value)
    if isinstance(value, int):
        return 4, struct.pack("<I", value)
    if isinstance(value, float):
        return 6, struct.pack("<f", value)
    if isinstance(value, str):
        return 8, _gstr(value)
    if isinstance(value, list):
        kind = 8 if value and isinstance(value[0], str) else 5
        items = b"".join(_gstr(v) if kind == 8 else struct.pack("<i", v) for v in value)
        return 9, struct.pack("<IQ", kind, len(value)) + items
    raise TypeError(value)


def write_gguf(path: Path, meta: dict[str, Any], version: int = 3) -> Path:
    """A GGUF header with `meta` as its key/value pairs and no tensors."""
    out = b"GGUF" + struct.pack("<IQQ", version, 0, len(meta))
    for key, value in meta.items():
        kind, data = _value(value)
        out += _gstr(key) + struct.pack("<I", kind) + data
    path.write_bytes(out + b"\0" * 32)  # tensor data would follow
    return path


def gguf_with_template(tmp_path: Path, template: str | None = TEMPLATE, **extra: Any) -> Path:
    meta: dict[str, Any] = {"general.architecture": "testarch", "general.name": "Test Model 1B",
                            "testarch.context_length": 4096, "testarch.rope.freq_base": 1e4,
                            "tokenizer.ggml.tokens": ["<unk>", "<s>", "</s>", "hi"],
                            "tokenizer.ggml.token_type": [2, 3, 3, 1],
                            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
                            "tokenizer.ggml.add_bos_token": True, **extra}
    if template is not None:
        meta["tokenizer.chat_template"] = template
    return write_gguf(tmp_path / "test-model.gguf", meta)


def run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


# ---------------------------------------------------------------- the GGUF reader

def test_gguf_reader_finds_template_and_special_tokens(tmp_path):
    g = read_gguf_template(gguf_with_template(tmp_path))
    assert g.template == TEMPLATE
    assert (g.bos_token, g.eos_token) == ("<s>", "</s>")
    assert g.name == "Test Model 1B" and g.architecture == "testarch"
    assert g.metadata["testarch.context_length"] == 4096
    assert "tokenizer.ggml.tokens" not in g.metadata  # arrays are skipped


def test_gguf_reader_named_templates_and_version_2(tmp_path):
    p = write_gguf(tmp_path / "v2.gguf", {"tokenizer.chat_template": "A",
                                          "tokenizer.chat_template.tool_use": "B"}, version=2)
    g = read_gguf_template(p)
    assert g.template == "A" and g.named_template("tool_use") == "B"
    assert g.bos_token == "" and g.eos_token == ""


@pytest.mark.parametrize("data, words", [
    (b"PK\x03\x04" + b"\0" * 40, "not a GGUF file"),
    (b"GGUF" + struct.pack("<IQQ", 9, 0, 0) + b"\0" * 8, "version 9"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + _gstr("general.name") + struct.pack("<I", 8)
     + struct.pack("<Q", 1 << 40), "limit"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 3) + _gstr("a") + struct.pack("<I", 4) + b"\1\0",
     "not a complete GGUF"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _gstr("a") + struct.pack("<I", 99) + b"\0" * 16,
     "unknown value type 99"),
])
def test_gguf_reader_refuses_bad_files(tmp_path, data, words):
    p = tmp_path / "bad.gguf"
    p.write_bytes(data)
    with pytest.raises(ParseError, match=words) as err:
        read_gguf_template(p)
    assert str(p) in str(err.value)


def _gemma_gguf() -> str:
    try:
        from toolrules.clients import default_gguf

        return default_gguf()
    except ImportError as exc:
        pytest.skip(f"the local extra's weights are not installed: {exc}")
    raise AssertionError


def test_real_gemma_gguf_has_tokens_but_no_template():
    g = read_gguf_template(_gemma_gguf())
    assert g.template is None
    assert (g.bos_token, g.eos_token) == ("<bos>", "<eos>")
    assert g.architecture == "gemma3"


# ---------------------------------------------------------------- the CLI

def test_cli_template_human_output(tmp_path):
    src = tmp_path / "chat_template.jinja"
    src.write_text(TEMPLATE, encoding="utf-8")
    res = run("inspect", "--template", str(src))
    assert res.exit_code == 0, res.output
    out = res.output
    assert f"template           {src}" in out
    assert "RAISES   a system message after the conversation started" in out
    assert "System message must be at the beginning." in out
    assert "dialect      hermes (reads the probe call back exactly" in out
    assert '  turn_system: "first"' in out
    assert 'rendered as  "<|im_start|>user\\n<tool_response>\\n{result}\\n</tool_response>' in out


def test_cli_template_json_and_tokenizer_config(tmp_path):
    cfg = tmp_path / "tokenizer_config.json"
    cfg.write_text(json.dumps({"chat_template": TEMPLATE, "bos_token": {"content": "<s>"},
                               "eos_token": "</s>"}), encoding="utf-8")
    res = run("inspect", "--template", str(cfg), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["bos_token"] == "<s>" and data["eos_token"] == "</s>"
    assert data["capability"]["turn_system"] == "first"
    assert data["call"]["dialect"] == "hermes"
    assert {p["name"]: p["outcome"] for p in data["probes"]}["system-later"] == "raised"


def test_cli_gguf(tmp_path):
    res = run("inspect", "--gguf", str(gguf_with_template(tmp_path)), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["bos_token"] == "<s>"
    assert data["capability"]["dialect"] == "hermes"
    assert data["origin"].endswith("test-model.gguf")


def test_cli_gguf_prefers_the_tool_use_template(tmp_path):
    p = gguf_with_template(tmp_path, template="{{ messages[0].content }}",
                           **{"tokenizer.chat_template.tool_use": TEMPLATE})
    res = run("inspect", "--gguf", str(p))
    assert res.exit_code == 0, res.output
    assert "tokenizer.chat_template.tool_use (used for requests with tools)" in res.output


def test_cli_gguf_without_template(tmp_path):
    res = run("inspect", "--gguf", str(gguf_with_template(tmp_path, template=None)))
    assert res.exit_code == 1
    assert "carries no chat template (no tokenizer.chat_template" in res.output
    assert "--template FILE" in res.output


def test_cli_real_gemma_gguf_says_it_has_no_template():
    path = _gemma_gguf()
    res = run("inspect", "--gguf", path)
    assert res.exit_code == 1
    assert f"error: {path} carries no chat template" in res.output


def test_cli_server(tmp_path):
    with PropsServer(TEMPLATE, bos="<s>", eos="</s>", alias="served.gguf") as up:
        res = run("inspect", "--server", up.url, "--json")
        assert up.props_asked == 1
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["origin"] == f"{up.url}/props"
    assert data["bos_token"] == "<s>"
    assert data["capability"]["turn_system"] == "first"


def test_cli_server_base_url_with_v1_asks_the_root(tmp_path):
    with PropsServer(TEMPLATE) as up:
        res = run("inspect", "--server", up.url + "/v1")
    assert res.exit_code == 0, res.output
    assert f"template           {up.url}/props" in res.output


def test_cli_write_rule_lints(tmp_path):
    src = tmp_path / "My_Model-7B.jinja"
    src.write_text(TEMPLATE, encoding="utf-8")
    rules = tmp_path / "rules"
    res = run("inspect", "--template", str(src), "--write-rule", str(rules))
    assert res.exit_code == 0, res.output
    written = rules / "models" / "my-model-7b.yaml"
    assert f"wrote {written}" in res.output
    text = written.read_text(encoding="utf-8")
    assert text.startswith(f"# Derived by `toolrules inspect` from {src}")
    assert "turn_system: first" in text and "dialect: hermes" in text
    lint = subprocess.run([sys.executable, "-m", "toolrules", "lint", str(rules)],
                          capture_output=True, text=True, timeout=300)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "0 error(s)" in lint.stderr


def test_cli_write_rule_with_name_and_json(tmp_path):
    with PropsServer(TEMPLATE, alias="org/Some-Model.Q4_K_M.gguf") as up:
        res = run("inspect", "--server", up.url, "--write-rule", str(tmp_path), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["rule"] == str(tmp_path / "models" / "some-model.yaml")
    res = run("inspect", "--template", str(_write(tmp_path)), "--write-rule", str(tmp_path),
              "--name", "Not Valid")
    assert res.exit_code == 1
    assert "pass --name with a lowercase family name" in res.output


def _write(tmp_path: Path, text: str = TEMPLATE, name: str = "t.jinja") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# ---------------------------------------------------------------- bad input

def test_cli_missing_template_file(tmp_path):
    res = run("inspect", "--template", str(tmp_path / "nope.jinja"))
    assert res.exit_code == 1
    assert f"error: no such template file: {tmp_path / 'nope.jinja'}" in res.output
    assert "hint: pass a Jinja chat template" in res.output


def test_cli_template_with_syntax_error(tmp_path):
    p = _write(tmp_path, "{% for m in messages %}\n{{ m.content }\n{% endfor %}")
    res = run("inspect", "--template", str(p))
    assert res.exit_code == 1
    assert f"error: {p}: the chat template does not compile: TemplateSyntaxError at line 2" \
        in res.output
    assert "hint: fix the template" in res.output


def test_cli_template_that_refuses_everything(tmp_path):
    p = _write(tmp_path, "{{ raise_exception('Use the other model.') }}")
    res = run("inspect", "--template", str(p))
    assert res.exit_code == 1
    assert "the chat template does not render" in res.output
    assert "Use the other model." in res.output


def test_cli_not_a_gguf(tmp_path):
    p = _write(tmp_path, TEMPLATE, "model.gguf")
    res = run("inspect", "--gguf", str(p))
    assert res.exit_code == 1
    assert f"error: {p}: not a GGUF file" in res.output
    res = run("inspect", "--gguf", str(tmp_path / "missing.gguf"))
    assert res.exit_code == 1
    assert "no such GGUF file" in res.output


def test_cli_server_without_props(tmp_path):
    with PropsServer(TEMPLATE, props=False) as up:
        res = run("inspect", "--server", up.url)
    assert res.exit_code == 1
    assert f"error: GET {up.url}/props: HTTP 404" in res.output
    assert "hint: pass the template with --template FILE" in res.output


def test_cli_server_not_listening():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    res = run("inspect", "--server", f"http://127.0.0.1:{port}")
    assert res.exit_code == 1
    assert f"GET http://127.0.0.1:{port}/props: no answer" in res.output


def test_cli_server_reply_without_template():
    with PropsServer(None) as up:
        res = run("inspect", "--server", up.url)
    assert res.exit_code == 1
    assert "the reply names no chat template" in res.output


def test_cli_sources_are_exclusive_and_model_inspect_still_works(tmp_path):
    res = run("inspect", "Qwen/Qwen3-8B", "--template", str(_write(tmp_path)))
    assert res.exit_code == 2 and "exactly one of MODEL" in res.output
    res = run("inspect")
    assert res.exit_code == 2
    res = run("inspect", "Qwen/Qwen3-8B", "--write-rule", str(tmp_path))
    assert res.exit_code == 2 and "--write-rule" in res.output
    res = run("inspect", "Qwen/Qwen3.6-27B", "--json")
    assert res.exit_code == 0
    data = json.loads(res.output)
    assert data["capability"]["turn_system"] == "first"


def test_cli_token_overrides_and_provider(tmp_path):
    res = run("inspect", "--gguf", str(gguf_with_template(tmp_path)), "--bos-token", "<B>",
              "--eos-token", "<E>", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert (data["bos_token"], data["eos_token"]) == ("<B>", "<E>")
    with PropsServer(TEMPLATE) as up:
        res = run("inspect", "--server", up.url, "--provider", "groq")
        assert up.props_asked == 0
    assert res.exit_code == 1
    assert "provider 'groq' says no place to ask a server for its chat template" in res.output
    res = run("inspect", "--server", "http://127.0.0.1:9", "--provider", "no-such-provider")
    assert res.exit_code == 2
