"""Cerberus schema for proxy configurations (rules/serve/*.yaml, or `toolrules serve
--config FILE`): which client APIs are served, server limits, and routes from public
model names to upstream models with per-route tool-calling options."""

from __future__ import annotations

from typing import Any

from ._schema_kit import _bool, _doc, _str, _strlist

__all__ = ["KIND_SCHEMAS", "ROUTE_TOOL_MODES", "SERVE_SCHEMA"]

ROUTE_TOOL_MODES = ("auto", "native", "emulate")
BUILTIN_TOOLS = ("omit", "refuse")
_BUILTIN_DOC = ("a tool entry the client's API rule lets the proxy leave out (a built-in "
                "tool the upstream cannot provide, e.g. web search): `omit` leaves it out "
                "of the tools the model is offered and reports it (access log `omitted`, "
                "trace); `refuse` answers 400 naming it")


def _int(doc: str, example: str, minimum: int = 0, **extra: Any) -> dict[str, Any]:
    return {"type": "integer", "min": minimum, **_doc(doc, example), **extra}


def _num(doc: str, example: str, **extra: Any) -> dict[str, Any]:
    return {"type": "number", "min": 0, **_doc(doc, example), **extra}


def _section(doc: str, fields: dict[str, Any], example: str | None = None) -> dict[str, Any]:
    return {"type": "dict", "nullable": True, "schema": fields, **_doc(doc, example)}


_UPSTREAM = _section("where the route's requests go", {
    "provider": _str("the upstream's wire protocol: a rules/providers id with an `http` "
                     "section", "provider: openai-compatible"),
    "model": _str("the model name sent upstream (default: the name the client asked for)",
                  "model: qwen/qwen3-coder-30b", nullable=True),
    "model_id": _str("the model id whose rules apply (capabilities, dialect), when the "
                     "served name says nothing about the model (default: `model`)",
                     "model_id: Qwen/Qwen3-Coder-30B-A3B-Instruct", nullable=True),
    "base_url": _str("the upstream's base URL (default: the provider rule's)",
                     "base_url: http://127.0.0.1:1234/v1", nullable=True),
    "api_key_env": _str("the env var holding the upstream's key (default: the provider "
                        "rule's); the key is only ever sent to this upstream",
                        "api_key_env: LMSTUDIO_API_KEY", nullable=True),
    "timeout": _num("seconds to wait for each read from the upstream", "timeout: 600",
                    nullable=True),
    "connect_timeout": _num("seconds to connect", "connect_timeout: 10", nullable=True),
    "max_retries": _int("retries of transient upstream failures (429, 5xx, lost "
                        "connections) before the client sees an error", "max_retries: 1",
                        nullable=True),
    "servers": {"type": "list", "nullable": True, "minlength": 1,
                "schema": {"type": "string", "empty": False}, **_doc(
        "several servers of the same model (base URLs), instead of `base_url`: each "
        "conversation goes to the server that holds its prefix in its cache (rendezvous "
        "hashing of its leading content), a new one to a server that is not busy, and a "
        "server that is down is skipped before any byte reaches the client "
        "(guides/upstream-fleet)",
        "servers: [http://10.0.0.5:8080/v1, http://10.0.0.6:8080/v1]")},
    "health": _section("checking each of several `servers` (the provider rule's "
                       "http.health path, else its model list): a server that fails is "
                       "skipped until it passes again", {
        "interval": _num("seconds between two checks of each server (at least 0.5)",
                         "interval: 5", min=0.5),
        "timeout": _num("seconds a check may take; longer is a failure (at least 0.1)",
                        "timeout: 2", min=0.1),
    }, "health: {interval: 5, timeout: 2}"),
    "balance_factor": _num("a new conversation goes to the first server of its own order "
                           "that carries at most this many times the fair share of the "
                           "requests in flight (1: never above it; larger: more new "
                           "conversations start where their later turns will go; "
                           "default 1.25)", "balance_factor: 1.5", nullable=True, min=1),
    "slots": _int("pin each conversation to one of this many parallel slots of its server "
                  "(llama-server --parallel N), through the field the provider rule names "
                  "(request.slot: id_slot); default: the server chooses", "slots: 4", 1,
                  nullable=True),
    "chat_template": _str("server (default): where the provider rule says how to ask "
                          "(http.chat_template, e.g. llama-server's GET /props), the server's "
                          "chat template is asked for at start and configures the route (turn "
                          "constraints, dialect, reasoning; logged, shown in the route "
                          "description); rules: the model's rules alone",
                          "chat_template: rules", allowed=["server", "rules"], nullable=True),
}, "upstream: {provider: lmstudio, model: qwen/qwen3-coder-30b}")

_TOOLS = _section("how the route calls tools (default: what the model's rules say)", {
    "mode": _str("native: the upstream's tools field; emulate: the emulation prompt and the "
                 "model's text read back as calls; auto: the model's rules decide",
                 "mode: emulate", allowed=list(ROUTE_TOOL_MODES)),
    "emulation_style": _str("the emulation prompt: a style of rules/emulation.yaml (json, "
                            "compact, xml ...), `dialect` (the model's trained format) or a "
                            "trained format's dialect id", "emulation_style: hermes",
                            nullable=True),
    "schema_strategy": _str("schema simplification for weak models (rules/"
                            "schema_strategies.yaml), or `none`; arguments are restored to "
                            "the original shape before the client sees them",
                            "schema_strategy: weak", nullable=True),
    "prompt_guidance": _bool("add tool-calling guidance with example calls to the prompt"),
    "validation_retries": _int("an invalid call goes back upstream with the feedback "
                               "template up to this many times before the client sees an "
                               "answer (0: off)", "validation_retries: 2", nullable=True),
    "text_fallback": _bool("read a call out of plain prose as a last resort (\"I'll run "
                           "`ls`\"): guesses, so only when asked"),
    "constrained": _bool("constrain the upstream's decoding to the call grammar when its "
                         "rules can carry a grammar or JSON schema"),
})

_ROUTE = {"type": "dict", "schema": {
    "model": _str("the public model name clients ask for", "model: claude-sonnet-4-5"),
    "pattern": _str("a regex over the public name, for a family of names",
                    "pattern: '^claude-'"),
    "upstream": {**_UPSTREAM, "required": True, "nullable": False},
    "tools": _TOOLS,
    "request_overrides": {"type": "dict", "nullable": True, **_doc(
        "merged into every upstream request body; the upstream's reserved "
        "fields (model, messages, tools ...) are protected", "request_overrides: "
        "{temperature: 0.2}")},
    "list": _bool("show the name in GET /v1/models (default: yes for `model`)"),
    "builtin_tools": _str(_BUILTIN_DOC + " (default: the server's)", "builtin_tools: refuse",
                          allowed=list(BUILTIN_TOOLS), nullable=True),
}}

_SERVER = _section("server limits and behaviour", {
    "max_body_bytes": _int("larger request bodies get 413", "max_body_bytes: 33554432", 1),
    "keep_alive": _num("seconds between keep-alive events while a stream waits (0: none)",
                       "keep_alive: 15"),
    "chars_per_token": _num("characters per token in token estimates (count_tokens, usage "
                            "the upstream did not report)", "chars_per_token: 4"),
    "api_keys_env": _str("env var with the client keys the proxy accepts (comma-separated); "
                         "--api-key overrides", "api_keys_env: TOOLRULES_SERVE_API_KEY"),
    "timeout": _num("default seconds to wait for each upstream read", "timeout: 600"),
    "connect_timeout": _num("default seconds to connect upstream", "connect_timeout: 10"),
    "max_retries": _int("default retries of transient upstream failures", "max_retries: 0"),
    "builtin_tools": _str(_BUILTIN_DOC + " - the routes' default", "builtin_tools: omit",
                          allowed=list(BUILTIN_TOOLS)),
    "parse_timeout": _num("seconds one upstream reply may take to read (parsed whole or over "
                          "its stream); past it that request ends with a 502 in the "
                          "client's error shape, the others go on (0: no limit)",
                          "parse_timeout: 5"),
    "models_cache": _num("seconds GET /v1/models keeps the model list an upstream gave (for a "
                         "route that passes model names through)", "models_cache: 30"),
    "models_timeout": _num("seconds to wait for an upstream's model list; past it (or on any "
                           "failure) the configured names are listed and the reason logged",
                           "models_timeout: 5"),
    "prefix_memory": _num("megabytes of text each worker keeps to compare every turn's prompt "
                          "with its conversation's last one (access log `prefix_share`; a "
                          "log line on the turn that breaks it); least recently used "
                          "conversations go first; 0: not measured", "prefix_memory: 64"),
    "metrics": _bool("serve GET /metrics (Prometheus text format) on the proxy's port "
                     "(default: yes)"),
    "ready_cache": _num("seconds GET /ready keeps what it found of the upstream servers "
                        "before it asks them again", "ready_cache: 5"),
    "ready_timeout": _num("seconds GET /ready waits for each upstream server's answer; "
                          "longer counts as down", "ready_timeout: 2"),
})

SERVE_SCHEMA: dict[str, Any] = {
    "description": _str("what this proxy configuration is for"),
    "fronts": _strlist("client APIs served: provider ids whose rule has a `serve:` section",
                       "fronts: [openai, anthropic, openai-responses]"),
    "server": _SERVER,
    "messages": _section("texts the proxy writes to the upstream model", {
        "held_call": _str("the result sent for a valid call while the invalid calls of the "
                          "same answer are fixed", "held_call: 'Not run: fix the other calls.'"),
        "json_output": _str("the instruction added to the prompt when a client asks for a "
                            "JSON answer and the route's upstream API has no way to ask for "
                            "one (its provider rule has no `json_output:`); {schema}: the "
                            "schema's JSON text", "json_output: 'Answer with JSON only, "
                            "valid against: {schema}'"),
        "json_retry": _str("sent back after an answer that is not the JSON the client "
                           "asked for (checked before the client sees it); {error}: what is "
                           "wrong", "json_retry: 'Not valid: {error}. Answer again.'"),
    }),
    "routes": {"type": "list", "schema": _ROUTE, **_doc(
        "public model name (or pattern) -> upstream; the first matching route wins",
        "routes: [{model: claude-sonnet-4-5, upstream: {provider: lmstudio}}]")},
}

KIND_SCHEMAS: dict[str, dict[str, Any]] = {"serve": SERVE_SCHEMA}
