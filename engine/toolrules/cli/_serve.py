"""CLI: `toolrules serve` - the proxy (toolrules.serve) on a host and port."""

from __future__ import annotations

import os
import sys

import click

from ._common import fail, get_engine, guard

__all__ = ["COMMANDS"]


def _describe(config: object) -> list[str]:
    lines = []
    for r in config.routes:  # type: ignore[attr-defined]
        names = r.name or ""
        if r.pattern is not None:
            names = f"{names} /{r.pattern.pattern}/".strip()
        up = r.upstream
        target = f"{up.provider}:{up.model or '(client model)'}"
        if up.servers:
            target += f" at {len(up.servers)} servers ({', '.join(up.servers)})"
        elif up.base_url:
            target += f" at {up.base_url}"
        engine = r.engine
        model_id = up.model_id or up.model
        if model_id:
            native = engine.sends_native_tools(model_id, up.provider)
            cap = engine.capability(model_id)
            style = cap.emulation_style if cap.emulation_style != "dialect" else \
                f"its own format, {cap.dialect}"
            how = ("native" if native else f"emulated ({style})") + \
                (f", schema {cap.schema_strategy}" if cap.schema_strategy else "") + \
                (", validation+retry" if cap.validate_retry else "")
        else:
            how = "per model (rules decide)"
        lines.append(f"  {names} -> {target}: {how}")
        if r.template is not None:
            lines.append(f"    {r.template.describe()}")
    return lines


@click.command()
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False),
              help="A proxy configuration (a `serve` rule: routes, limits); merged over "
                   "rules/serve/default.yaml.")
@click.option("--upstream", help="PROVIDER[:MODEL]: route every model name there (with no "
              "MODEL the client's model name passes through and its rules decide).")
@click.option("--base-url", help="The upstream's base URL, e.g. http://127.0.0.1:1234/v1.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--api-key", "api_keys", multiple=True,
              help="A key clients must send (repeatable); default: the env var the "
                   "configuration names (TOOLRULES_SERVE_API_KEY, comma-separated).")
@click.option("--trace-dir", type=click.Path(file_okay=False),
              help="Write a redacted JSONL trace per request here (toolrules replay reads "
                   "them).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 256),
              help="Worker processes sharing the port.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--check", is_flag=True, help="Validate the configuration, print the routes, "
              "and exit.")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(exists=True),
              help="Extra rule directories (overlays).")
@guard
def serve(config_path: str | None, upstream: str | None, base_url: str | None, host: str,
          port: int, api_keys: tuple[str, ...], trace_dir: str | None, workers: int,
          log_level: str, check: bool, rule_paths: tuple[str, ...]) -> None:
    """Serve the OpenAI (/v1/chat/completions, /v1/responses), Anthropic (/v1/messages)
    and Gemini (/v1beta/models/MODEL:generateContent) APIs in front of any model server,
    adding tool calling where the model or the server lacks it.

    \b
    toolrules serve --upstream openai-compatible:qwen3-coder --base-url http://127.0.0.1:1234/v1
    ANTHROPIC_BASE_URL=http://127.0.0.1:8080 claude
    """
    from .._errors import RuleError, UnknownRuleError

    try:
        from ..serve import ServeSettings, load_config, run
    except ImportError as exc:  # pragma: no cover - depends on the extra
        fail(f"toolrules serve needs its extra: {exc}", "pip install 'toolrules[serve]'")
    engine = get_engine(rule_paths)
    try:
        config = load_config(engine, config_path, upstream=upstream, base_url=base_url)
    except RuleError as exc:
        click.echo(str(exc), err=True)
        sys.exit(1)
    except UnknownRuleError as exc:
        fail(str(exc).strip('"'), "`toolrules providers` lists the providers", code=2)
    if not config.routes:
        fail("no routes: nothing to serve", "pass --upstream PROVIDER[:MODEL] (and "
             "--base-url), or --config FILE with `routes:`", code=2)
    click.echo(f"toolrules serve: {len(config.routes)} route(s) from {config.source}", err=True)
    for line in _describe(config):
        click.echo(line, err=True)
    if check:
        return
    if api_keys:  # workers read the keys from the environment, like a deployment would
        os.environ[config.server.api_keys_env or "TOOLRULES_SERVE_API_KEY"] = ",".join(api_keys)
    settings = ServeSettings(config=config_path, upstream=upstream, base_url=base_url,
                             trace_dir=trace_dir, rules=tuple(rule_paths))
    run(settings, host=host, port=port, workers=workers, api_keys=list(api_keys) or None,
        log_level=log_level,
        ready=lambda: click.echo(f"listening on http://{host}:{port} ({workers} worker(s))",
                                 err=True))


COMMANDS = [serve]
