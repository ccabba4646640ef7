"""CLI: `toolrules inspect --template FILE | --gguf FILE | --server URL` - what a model's own
chat template enforces, drops and writes (Engine.inspect_template), as text or JSON, and
a model-rule stub holding it (--write-rule DIR)."""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from ..chat_template._inspect import TemplateSource
from ._common import echo_json, fail

__all__ = ["TemplateSource", "inspect_source", "load_source"]

_HINT_TEMPLATE = ("pass a Jinja chat template (a model's chat_template.jinja, or its "
                  "tokenizer_config.json)")


def _token(value: Any) -> str:
    if isinstance(value, dict):  # tokenizer_config.json writes added tokens as objects
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _from_file(path: str, bos: str | None, eos: str | None) -> TemplateSource:
    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"no such template file: {path}", _HINT_TEMPLATE)
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read template file {path}: {getattr(exc, 'strerror', None) or exc}",
             _HINT_TEMPLATE)
    note = None
    text = raw
    if p.suffix == ".json":
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            fail(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})", _HINT_TEMPLATE)
        chat = data.get("chat_template") if isinstance(data, dict) else None
        if isinstance(chat, list):  # [{name, template}]: the tool_use one serves tools
            named = {str(e.get("name")): e.get("template") for e in chat if isinstance(e, dict)}
            pick = "tool_use" if isinstance(named.get("tool_use"), str) else "default"
            chat = named.get(pick)
            note = f"the {pick!r} template of {len(named)} in the file"
        if not isinstance(chat, str):
            fail(f"{path} holds no chat_template", _HINT_TEMPLATE)
        text = chat
        bos = bos if bos is not None else _token(data.get("bos_token"))
        eos = eos if eos is not None else _token(data.get("eos_token"))
    return TemplateSource(text, path, bos or "", eos or "", p.stem.split(".")[0], note)


def _from_gguf(path: str, bos: str | None, eos: str | None) -> TemplateSource:
    from .._errors import ParseError
    from ..chat_template._gguf import read_gguf_template

    try:
        g = read_gguf_template(path)
    except FileNotFoundError:
        fail(f"no such GGUF file: {path}", "pass the path of a .gguf weights file")
    except ParseError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot read GGUF file {path}: {exc.strerror}", "pass a readable .gguf file")
    text, note = g.template, None
    tool_use = g.named_template("tool_use")
    if tool_use is not None:  # servers render it for requests with tools
        text, note = tool_use, "tokenizer.chat_template.tool_use (used for requests with tools)"
    if text is None:
        others = f" (it has named ones: {', '.join(n for n, _ in g.named)})" if g.named else ""
        fail(f"{path} carries no chat template (no tokenizer.chat_template in its "
             f"metadata){others}: it is likely a base model, or its template ships beside it",
             "pass the model's template with --template FILE (chat_template.jinja or "
             "tokenizer_config.json)")
    return TemplateSource(text, path, bos if bos is not None else g.bos_token,
                          eos if eos is not None else g.eos_token,
                          g.name or Path(path).stem, note)


def _from_server(engine: Any, url: str, provider: str, bos: str | None,
                 eos: str | None) -> TemplateSource:
    from .._errors import CapabilityError, UnknownRuleError
    from ..clients._template import TemplateUnavailable, fetch_server_template

    try:
        served = fetch_server_template(engine, provider, url)
    except TemplateUnavailable as exc:
        fail(str(exc), "pass the template with --template FILE or --gguf FILE instead")
    except UnknownRuleError as exc:
        fail(str(exc).strip('"'), "`toolrules providers` lists the providers", code=2)
    except CapabilityError as exc:
        fail(str(exc), "pass the server's address, e.g. http://127.0.0.1:8080")
    return replace(served, bos_token=bos if bos is not None else served.bos_token,
                   eos_token=eos if eos is not None else served.eos_token)


def load_source(engine: Any, template: str | None, gguf: str | None, server: str | None,
                provider: str, bos: str | None, eos: str | None) -> TemplateSource:
    if template is not None:
        return _from_file(template, bos, eos)
    if gguf is not None:
        return _from_gguf(gguf, bos, eos)
    assert server is not None
    return _from_server(engine, server, provider, bos, eos)


def _q(text: str | None) -> str:
    return "-" if text is None else json.dumps(text, ensure_ascii=False)


def _family_name(src: TemplateSource, name: str | None) -> str:
    """The name given (checked as it is), else one made from the source's."""
    if name is not None:
        return name
    raw = src.name or "model"
    raw = raw.rsplit("/", 1)[-1]
    raw = re.sub(r"\.gguf$", "", raw, flags=re.I)
    # a weights file's quantization and packaging say nothing about the family
    raw = re.sub(r"(?:[-._](?:i?q\d\w*|b?f16|f32|fp\d+|gguf))+$", "", raw, flags=re.I)
    slug = re.sub(r"[^a-z0-9.-]+", "-", raw.lower()).strip("-.")
    return slug or "model"


def inspect_source(engine: Any, src: TemplateSource, as_json: bool, write_rule: str | None,
                   name: str | None) -> None:
    from .._errors import ParseError
    from ..chat_template._render import TemplateRaised

    try:
        report = engine.inspect_template(src.text, bos_token=src.bos_token,
                                         eos_token=src.eos_token, origin=src.origin)
    except TemplateRaised as exc:
        what = "does not compile" if "SyntaxError" in exc.message else "does not render"
        fail(f"{src.origin}: the chat template {what}: {exc.message}",
             "fix the template, or pass the model's own (chat_template.jinja)")
    except ParseError as exc:
        fail(str(exc))
    written = None
    if write_rule is not None:
        from ..chat_template._inspect import rule_stub

        family = _family_name(src, name)
        when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
        try:
            text = rule_stub(report, family, when)
        except ParseError as exc:
            fail(str(exc), "pass --name with a lowercase family name")
        target = Path(write_rule) / "models" / f"{family}.yaml"
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        except OSError as exc:
            fail(f"cannot write {target}: {exc.strerror}", "pass a writable directory")
        written = str(target)
    if as_json:
        out = report.as_dict()
        if src.note:
            out["note"] = src.note
        if written:
            out["rule"] = written
        echo_json(out)
        return
    _print(report, src)
    if written:
        click.echo(f"\nwrote {written} (check it with `toolrules lint {write_rule}`)")


def _print(report: Any, src: TemplateSource) -> None:
    echo = click.echo
    echo(f"template           {report.origin}" + (f" ({src.note})" if src.note else ""))
    echo(f"sha256             {report.sha256}")
    echo(f"variables          {', '.join(report.variables) or '-'}")
    echo(f"bos / eos          {_q(report.bos_token)} / {_q(report.eos_token)}")
    echo(f"generation prompt  {_q(report.generation_prompt)}")
    echo(f"tool definitions   {'written into the prompt' if report.renders_tools else 'not written (tools must be offered by an emulation prompt)'}")
    echo("\nprobes (what the template enforces or drops)")
    for p in report.probes:
        mark = {"rendered": "ok", "raised": "RAISES", "failed": "FAILS", "dropped": "DROPS",
                "skipped": "skipped"}[p.outcome]
        echo(f"  {mark:8} {p.question}")
        if p.message:
            echo(f"           {p.message}")
        if p.missing:
            echo(f"           missing: {', '.join(p.missing)}")
    c = report.call
    echo("\ntool calls")
    if c.dialect is None:
        echo(f"  dialect      none ({c.note})")
    else:
        also = f"; also read by {', '.join(c.also)}" if c.also else ""
        echo(f"  dialect      {c.dialect} (reads the probe call back exactly{also})")
        if c.repairs:
            echo(f"  repairs      {', '.join(c.repairs)} (beyond the dialect's own: quirks)")
        echo(f"  arguments    {'a JSON string' if c.arguments == 'json-text' else 'an object'}"
             f"; tricky strings {'read back' if c.tricky_strings else 'do not read back'}"
             f"; two calls in a turn {'read back' if c.two_calls else 'do not read back'}")
        echo("  written as")
        for line in c.text.splitlines() or [""]:
            echo(f"    {line}")
        if c.note:
            echo(f"  note         {c.note}")
    echo("\ntool results")
    if report.tool_result is None:
        echo("  cannot be rendered as a tool message (they travel as user text)")
    else:
        echo(f"  rendered as  {_q(report.tool_result)}")
    r = report.reasoning
    echo("\nreasoning")
    if r.field is None and not r.switches:
        echo("  none rendered, no switch")
    if r.field is not None:
        known = "" if r.dialect_markers is None else (
            "; the dialect reads these markers" if r.dialect_markers else
            "; the dialect does NOT read these markers")
        echo(f"  markers      {_q(r.open)} ... {_q(r.close)} (from {r.field}){known}")
        echo(f"  history      {'kept' if r.history else 'earlier turns dropped'}")
    echo(f"  prompt       {'opens reasoning' if r.opened_by_prompt else 'does not open reasoning'}")
    for var, on, off in r.switches:
        echo(f"  switch       {var}: true -> {_q(on)}, false -> {_q(off)}")
    echo("\nprompt prefix (does each next turn's prompt extend the last, as a server's "
         "cache needs)")
    for c in report.prefix:
        if c.kept is None:
            echo(f"  n/a      {c.question}: does not render ({c.message})")
        elif c.stable:
            echo(f"  extends  {c.question}")
        else:
            echo(f"  BREAKS   {c.question}: {100 * c.kept:.1f} % of the previous prompt kept")
            echo(f"           at char {c.at}: previous {_q(c.previous)}")
            echo(f"                         new      {_q(c.new)}")
            echo(f"           moved: {c.moved}")
            echo(f"           fix: {c.fix or 'none found'}")
    for fix, without in report.schema_fixes:
        echo(f"  schema   a tool schema shape it cannot render ({without}): "
             f"turn_tool_schema {fix}")
    echo("\ncapability (what a rule or a served route sets)")
    for k, v in report.capability.items():
        echo(f"  {k}: {json.dumps(v)}")
    if report.notes:
        echo("\nnotes")
        for n in report.notes:
            echo(f"  - {n}")
