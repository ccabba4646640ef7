"""CLI: provider wire formats - translate, request, response, providers, transforms."""

from __future__ import annotations

import json
from typing import Any

import click

from ._common import echo_json, fail, get_engine, guard, read_json_arg, read_text_arg

__all__ = ["COMMANDS"]

_RULES = click.option("--rules", "rule_paths", multiple=True, type=click.Path(exists=True),
                      help="Extra rule directories (overlays).")
_PROVIDER = click.option("--provider", "-p", required=True,
                         help="Provider id (rules/providers/<id>.yaml); `toolrules providers` lists them.")


def _tools_arg(value: str | None) -> Any:
    if value is None:
        return None
    data = read_json_arg(value, "tools file")
    if isinstance(data, dict) and "tools" in data:
        data = data["tools"]
    if not isinstance(data, list):
        fail(f"tools file {value!r} must hold a JSON list of tools",
             "write [{\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}]")
    return data


def _option_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _parsed_dict(parsed: Any) -> dict[str, Any]:
    from ..golden._providers import parsed_dict

    return parsed_dict(parsed)


@click.command()
@click.argument("tools_file", metavar="TOOLS.json")
@_PROVIDER
@click.option("--model", "-m", help="Model id: its schema strategy and strictness apply.")
@click.option("--strict/--no-strict", default=None, help="Force strict schemas on or off "
              "(default: the provider's rule, usually strict when the schema allows).")
@_RULES
@guard
def translate(tools_file: str, provider: str, model: str | None, strict: bool | None,
              rule_paths: tuple[str, ...]) -> None:
    """Translate a tool list (chat-completions format, or bare {name, parameters}) into
    PROVIDER's tools field, through its schema pipeline."""
    engine = get_engine(rule_paths)
    tools = _tools_arg(tools_file)
    try:
        echo_json(engine.translate_tools(tools, provider, model=model, strict=strict))
    except (TypeError, ValueError) as exc:
        fail(f"cannot translate {tools_file!r}: {exc}")


@click.command()
@click.argument("input_file", metavar="INPUT.json")
@_PROVIDER
@click.option("--model", "-m", help="Model id (default: the input body's model).")
@click.option("--from", "source", default=None,
              help="INPUT.json is a request body in this provider's format (default: a "
                   "chat-completions body or a bare message list).")
@click.option("--tools", "tools_file", help="Tools file (replaces the input's tools).")
@click.option("--tool-choice", help="auto, none, required, or a tool name.")
@click.option("--option", "-o", "opts", multiple=True, metavar="KEY=VALUE",
              help="Request option (max_tokens=512, temperature=0.2, stream=true ...).")
@click.option("--overrides", help="JSON object merged into the body (request_overrides).")
@click.option("--explain", is_flag=True,
              help="Also say (on stderr) what was rewritten to fit the model's chat template "
                   "(turn constraints) and why.")
@_RULES
@guard
def request(input_file: str, provider: str, model: str | None, source: str | None,
            tools_file: str | None, tool_choice: str | None, opts: tuple[str, ...],
            overrides: str | None, explain: bool, rule_paths: tuple[str, ...]) -> None:
    """Build PROVIDER's request body from a conversation.

    INPUT.json is a list of messages, or a request body (chat-completions format unless
    --from names another provider) - so `--from A --provider B` converts provider A's
    request into provider B's. Where PROVIDER's server renders the model's own chat
    template, the conversation is fitted to the model's turn constraints; --explain lists
    each rewrite.
    """
    engine = get_engine(rule_paths)
    data = read_json_arg(input_file, "input")
    tools: Any = None
    choice: Any = None
    if isinstance(data, list):
        messages = data
    elif isinstance(data, dict) and source:
        messages, tools, choice = engine.parse_request(data, source)
        model = model or data.get("model") or data.get("modelId")
    elif isinstance(data, dict):  # a chat-completions body: the UTP's own input format
        if not isinstance(data.get("messages"), list):
            fail(f"input {input_file!r} has no `messages` list",
                 "pass a message list, a chat-completions body, or --from PROVIDER")
        messages, tools, choice = data["messages"], data.get("tools"), data.get("tool_choice")
        model = model or data.get("model")
    else:
        fail(f"input {input_file!r} must be a message list or a request body")
    if tools_file:
        tools = _tools_arg(tools_file)
    if tool_choice:
        choice = tool_choice
    options: dict[str, Any] = {}
    for item in opts:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"option {item!r} is not KEY=VALUE", "for example -o max_tokens=512")
        options[key.strip()] = _option_value(value)
    if overrides:
        options["request_overrides"] = _option_value(overrides)
    rewrites: list[Any] = []
    taken: list[dict[str, Any]] = []
    if source and engine.provider_rules(provider).renders_template and \
            isinstance(engine.provider_rules(source).data.get("serve"), dict):
        # as toolrules serve does: client metadata out of the conversation's text
        messages, taken = engine.front(source).take_volatile(list(messages))
    try:
        echo_json(engine.build_request(provider, model, messages, tools=tools or None,
                                       tool_choice=choice, rewrites=rewrites, **options))
    except (TypeError, ValueError) as exc:
        fail(f"cannot build the request: {exc}")
    if explain:
        if not engine.provider_rules(provider).renders_template:
            click.echo(f"no rewrite: {provider} does not render the model's chat template "
                       "(provider rule renders_template)", err=True)
        elif not rewrites and not taken:
            click.echo(f"no rewrite: the conversation fits the turn constraints of "
                       f"{model or 'the model'}'s chat template", err=True)
        for t in taken:
            where = ", ".join(f"messages[{i}]" for i in t["messages"])
            click.echo(f"rewrite: {t['action']} ({where}): {t['why']}", err=True)
        for r in rewrites:
            click.echo(f"rewrite: {r.describe()}", err=True)


@click.command()
@click.argument("body_file", metavar="BODY.json")
@_PROVIDER
@click.option("--tools", "tools_file", help="Tools file: restores names and argument shapes.")
@click.option("--model", "-m", help="Model id (text fallback, schema strategy).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--stream", "streamed", is_flag=True,
              help="BODY.json holds the provider's stream events (JSON list, NDJSON or SSE "
                   "lines): print the chunks and the result.")
@click.option("--to", "target", help="Write the parsed response as this provider's body.")
@_RULES
@guard
def response(body_file: str, provider: str, tools_file: str | None, model: str | None,
             as_json: bool, streamed: bool, target: str | None,
             rule_paths: tuple[str, ...]) -> None:
    """Parse a PROVIDER response body (or stream) into text, reasoning and tool calls."""
    engine = get_engine(rule_paths)
    tools = _tools_arg(tools_file)
    chunks: list[Any] = []
    if streamed:
        text = read_text_arg(body_file, "stream file")
        try:
            loaded = json.loads(text)
            events = loaded if isinstance(loaded, list) else [loaded]
        except ValueError:
            events = [line for line in text.splitlines() if line.strip()]
        stream = engine.response_stream(provider, tools=tools, model=model)
        for event in events:
            chunks.extend(stream.feed(event))
        chunks.extend(stream.close())
        parsed = stream.result
    else:
        parsed = engine.parse_response(read_json_arg(body_file, "response body"), provider,
                                       tools=tools, model=model)
    if target:
        echo_json(engine.build_response(parsed, target, model=model))
        return
    out = _parsed_dict(parsed)
    if as_json:
        if streamed:
            from ..golden._providers import _chunk

            out = {"chunks": [_chunk(c) for c in chunks], "result": out}
        echo_json(out)
        return
    if streamed:
        for c in chunks:
            detail = c.content if c.content is not None else c.args_delta
            click.echo(f"  {c.type.value:13} {c.index if c.index is not None else '':>2} "
                       f"{c.tool_name or '':16} {json.dumps(detail, ensure_ascii=False) if detail is not None else ''}")
    click.echo(f"finish     {out['finish_reason']}")
    if out["reasoning_content"]:
        click.echo(f"reasoning  {out['reasoning_content']}")
    if out["content"]:
        click.echo(f"content    {out['content']}")
    for i, call in enumerate(out["tool_calls"]):
        click.echo(f"call {i}     {call['name']}({json.dumps(call['arguments'], ensure_ascii=False)})"
                   f"  id={call['id']}")
    for w in out.get("warnings", []):
        click.echo(f"warning    {w}")


def _http_row(engine: Any, rid: str) -> dict[str, Any] | None:
    """What `toolrules.connect` uses to reach `rid`: address, key, stream framing."""
    from ..providers._transport import compile_http

    h = compile_http(engine.provider_rules(rid).data, rid)
    if h is None:
        return None
    if h.auth_kind == "query":
        auth = f"?{h.auth_param}="
    elif h.auth_kind == "none":
        auth = "none"
    else:
        auth = f"{h.auth_header}: {h.auth_scheme + ' ' if h.auth_scheme else ''}KEY"
        if h.auth_kind == "aws-sigv4":
            auth += f" or SigV4 ({h.auth_service})"
    return {"base_url": h.base_url, "base_url_env": list(h.base_url_env), "path": h.path,
            "stream_path": h.stream_path, "auth": auth, "key_env": list(h.auth_env),
            "key_optional": h.auth_optional or h.auth_kind == "none",
            "headers": dict(h.headers), "framing": h.framing}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--http", "http", is_flag=True,
              help="How toolrules.connect reaches each one: base URL, its env var, the key's "
                   "env var and place, stream framing.")
@click.option("--markdown", is_flag=True, help="With --http: a Markdown table (for docs).")
@_RULES
def providers(as_json: bool, http: bool, markdown: bool, rule_paths: tuple[str, ...]) -> None:
    """List the providers: id, what it extends, and what it is."""
    engine = get_engine(rule_paths)
    rows = []
    for rid in engine.providers():
        data = engine.ruleset.get("provider", rid).data or {}
        rows.append({"id": rid, "extends": data.get("extends"),
                     "aliases": list(data.get("aliases") or []),
                     "description": " ".join(str(data.get("description", "")).split()),
                     "http": _http_row(engine, rid)})
    if as_json:
        echo_json(rows)
        return
    if http or markdown:
        _http_table(rows, markdown)
        return
    width = max(len(r["id"]) for r in rows) if rows else 10
    for r in rows:
        ext = f" (extends {r['extends']})" if r["extends"] else ""
        click.echo(f"{r['id']:{width}}  {r['description'][:90]}{ext}")


def _http_table(rows: list[dict[str, Any]], markdown: bool) -> None:
    head = ("provider", "base URL", "base URL env", "key env", "key goes in", "stream")
    table = []
    for r in rows:
        h = r["http"]
        if h is None:
            table.append((r["id"], "-", "-", "-", "-", "-"))
            continue
        key = " / ".join(h["key_env"]) or "-"
        if h["key_optional"] and h["key_env"]:
            key += " (optional)"
        table.append((r["id"], (h["base_url"] or "(base_url= required)") + h["path"],
                      " / ".join(h["base_url_env"]) or "-", key, h["auth"],
                      h["framing"] or "-"))
    if markdown:
        click.echo("| " + " | ".join(head) + " |")
        click.echo("|" + "---|" * len(head))
        for row in table:
            click.echo("| " + " | ".join(f"`{c}`" if c != "-" and i in (0, 2, 3) else c
                                         for i, c in enumerate(row)) + " |")
        return
    widths = [max(len(str(x[i])) for x in [head, *table]) for i in range(len(head))]
    for row in [head, *table]:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def transforms(as_json: bool) -> None:
    """The schema transform op vocabulary and the named message transforms."""
    from ..providers._rules import MESSAGE_TRANSFORMS
    from ..providers._transforms import OPS

    ops: list[dict[str, Any]] = [{"op": s.name, "doc": s.doc,
            "params": {k: v.get("meta", {}).get("doc", "") for k, v in s.params.items()},
            "example": s.example} for s in OPS.values()]
    named = [{"name": t.name, "applies_to": t.where, "doc": t.doc} for t in MESSAGE_TRANSFORMS.values()]
    if as_json:
        echo_json({"schema_ops": ops, "message_transforms": named})
        return
    click.echo("Schema ops (tools.pipeline, tools.strict.pipeline, schema_strategies.yaml):")
    for o in ops:
        click.echo(f"  {o['op']}")
        click.echo(f"      {o['doc']}")
        for k, doc in o["params"].items():
            click.echo(f"      - {k}: {doc}")
    click.echo("\nNamed transforms (messages.transforms, response.transforms, "
               "response.call_transforms):")
    for t in named:
        click.echo(f"  {t['name']:32} [{t['applies_to']}] {t['doc']}")


COMMANDS = [translate, request, response, providers, transforms]
