"""Cerberus schemas for provider rules (rules/providers/*.yaml) and schema strategies
(rules/schema_strategies.yaml).

Fields whose value is a JMESPath expression carry `meta.expr: True` (lint compiles
them); maps whose values are expressions carry `meta.exprs: True`. Every field is
optional in a file that `extends:` another; the merged rule is checked by lint for the
sections a provider needs.
"""

from __future__ import annotations

from typing import Any

from ._schema_kit import _bool, _doc, _str, _str_or_list, _strlist

__all__ = ["KIND_SCHEMAS", "PROVIDER_SCHEMA", "STRATEGIES_SCHEMA", "TABLE_SCHEMAS"]


def _expr(doc: str, example: str | None = None, **extra: Any) -> dict[str, Any]:
    out = {"type": "string", **_doc(doc, example), **extra}
    out["meta"]["expr"] = True
    return out


def _exprs(doc: str, example: str | None = None, **extra: Any) -> dict[str, Any]:
    out = {"type": "dict", "keysrules": {"type": "string"},
           "valuesrules": {"type": "string", "nullable": True}, **_doc(doc, example), **extra}
    out["meta"]["exprs"] = True
    return out


def _section(doc: str, fields: dict[str, Any], example: str | None = None) -> dict[str, Any]:
    return {"type": "dict", "nullable": True, "schema": fields, **_doc(doc, example)}


_PIPELINE = {"type": "list", "nullable": True, "schema": {"type": ["string", "dict"]},
             **_doc("schema transform ops in order: an op name or {op: name, ...params} "
                    "(`toolrules transforms` lists the vocabulary)",
                    "pipeline: [type_aliases, {op: truncate_descriptions, max: 1024}]")}

_CHOICE_ENTRY = {
    "type": ["string", "dict"], "nullable": True,
    **_doc("a JMESPath expression building the wire value over {name, names}, or a mapping "
           "{send, tools, unsupported}; null: send no tool_choice",
           "required: \"{type: 'any'}\""),
    "schema": {
        "send": _expr("the wire value (JMESPath over {name, names}); omit to send none",
                      "send: \"'REQUIRED'\"", nullable=True),
        "tools": _str("which tools go out with this choice: all (default), omit (none at "
                      "all), only-named (just the named tool)", "tools: omit",
                      allowed=["all", "omit", "only-named"]),
        "unsupported": _str("this provider cannot express the choice: the reason, raised "
                            "as CapabilityError", "unsupported: no way to force a call"),
    },
}

_READER = _section("how to read one wire message (request history or response) as a "
                   "Message", {
    "role": _expr("the wire role", "role: role"),
    "roles": {"type": "dict", "keysrules": {"type": "string"},
              "valuesrules": {"type": "string",
                              "allowed": ["system", "user", "assistant", "tool"]},
              **_doc("wire role -> Message role when they differ", "roles: {model: assistant}")},
    "text": _expr("the text: a string or a list of strings (joined)",
                  "text: \"content[?type=='text'].text\""),
    "reasoning": _expr("reasoning/thinking text: a string or a list of strings",
                       "reasoning: reasoning_content"),
    "calls": _expr("the list of tool calls in this message", "calls: tool_calls"),
    "call": _exprs("fields of one call: id, name, arguments (JSON text or object), and "
                   "signature - an opaque token the provider issued with the call that must "
                   "go back with it (ToolCall.signature; writers see it as `signature`)",
                   "call: {id: id, name: function.name, arguments: function.arguments}"),
    "results": _expr("the list of tool results in this message",
                     "results: \"[@][?role=='tool']\""),
    "result": _exprs("fields of one result: call_id, name, content, is_error",
                     "result: {call_id: tool_call_id, content: content}"),
    "string_as": _str("reading a request body: the role of a message list given as a bare "
                      "string", "string_as: user", allowed=["user", "system"]),
    "refuse": _expr("over one wire message: why it cannot be carried (a reason, refused "
                    "with a 400 by a proxy), or null", "refuse: \"!role && 'an item the "
                    "proxy cannot relay'\""),
    "blocks": _expr("the content blocks of one wire message (a list; null: text only). "
                    "Every block must match a `parts` rule: nothing is dropped unseen",
                    "blocks: \"type(content) == 'array' && content || null\""),
    "parts": {"type": "list", "nullable": True, **_doc(
        "rules for content blocks (of `blocks`, and of a result's `result.blocks`), tried "
        "in order; the first whose `when` holds decides: `part` reads the block as a "
        "ContentPart, `skip` says which other field reads it (or why it is not carried), "
        "`refuse` refuses the request with that reason. A block no rule matches is "
        "refused", "parts: [{when: \"type == 'text'\", part: \"{type: 'text', text: "
        "text}\"}]"),
        "schema": {"type": "dict", "schema": {
            "when": _expr("the rule applies when this holds over the block", required=True),
            "part": _expr("the ContentPart: {type: text|image|audio|document, text, "
                          "media_type, data (base64), url (a data: URL is split into "
                          "media_type and data), file_id, name}",
                          "part: \"{type: 'image', url: image_url.url}\""),
            "skip": _str("the block is read by another field, or deliberately not carried "
                         "(a declared loss): say which and why", "skip: a tool call (calls)"),
            "refuse": _str("the block cannot be carried: the reason and what to do instead",
                           "refuse: server tools run on the provider's side"),
        }}},
})

_WRITER = _section("how to write Messages as wire messages", {
    "path": _str("body path of the message list", "path: messages"),
    "system": _expr("a system message (when system placement is `message`)",
                    "system: \"{role: 'system', content: text}\""),
    "user": _expr("a user message; view: {role, text, parts, media} (parts/media: see "
                  "`media`; null for a text-only message)",
                  "user: \"{role: 'user', content: parts || text}\""),
    "assistant": _expr("an assistant message; view: {text, reasoning, tool_calls: [{id, name, "
                       "arguments, arguments_json}]} (a list result adds several items)"),
    "tool": _expr("a tool result; view: {tool_call_id, name, text, output, output_json, "
                  "is_error, error, parts, media}"),
    "media": _section("content parts beyond text (images, audio, documents): how each is "
                      "written. A message holding a part whose type has no entry here, or "
                      "whose entry gives null, is refused (UnsupportedContentError), never "
                      "sent without it. The writers of `roles` see `parts` (every part in "
                      "order, text included, as written here) and `media` (the non-text "
                      "ones); both are null for a text-only message", {
        "roles": {"type": "list", "schema": {"type": "string", "allowed": ["user", "tool"]},
                  **_doc("roles whose messages may carry media (their writers must use "
                         "`parts` or `media`)", "roles: [user, tool]")},
        "text": _expr("a text part; view: the part", "text: \"{type: 'text', text: text}\""),
        "image": _expr("an image part; view: the part {type, text, media_type, data, url, "
                       "file_id, name} plus source (data, url, file_id or text), data_url "
                       "(data: URL of data) and subtype (of media_type: png, wav, pdf ...)",
                       "image: \"{type: 'image_url', image_url: {url: url || data_url}}\""),
        "audio": _expr("an audio part; view: as for image"),
        "document": _expr("a document part (a PDF, a plain-text document ...); view: as for "
                          "image"),
        "move_results": _section(
            "tool results whose media the API's tool messages cannot carry: the text stays "
            "in the tool message, the media follow in a message of this role right after "
            "the run of results (so nothing is lost)", {
                "to": _str("the role that carries them (one of `roles`)", "to: user",
                           allowed=["user"], required=True),
                "note": _str("text added to the tool message; {types} and {call_id} are "
                             "filled in", "note: '[the {types} follow in the next message]'"),
                "lead": _str("text opening the carrying message, one per result; {types} "
                             "and {call_id} are filled in",
                             "lead: '[{types} of the result of call {call_id}]'"),
            }),
        "notes": _str("free text"),
    }),
    "merge": _str("consecutive wire messages with the same role are merged by concatenating "
                  "this list field", "merge: content"),
    "text_block": _expr("when merging, a string value of the merge field becomes this block",
                        "text_block: \"{type: 'text', text: @}\""),
    "transforms": _strlist("named outbound message transforms, applied in order",
                           "transforms: [content_null_if_blank]"),
    "call_ids": _section("tool call ids this provider accepts; others are remapped "
                         "consistently for calls and results", {
                             "pattern": _str("regex an id must match", "pattern: '^[a-zA-Z0-9]{9}$'"),
                             "length": {"type": "integer", "min": 1,
                                        **_doc("length of generated ids", "length: 9")},
                             "prefix": _str("prefix of generated ids", "prefix: call_"),
                             "required": _bool("every call needs an id (generated when missing)"),
                         }),
    "read": _READER,
})

_STREAM_EVENT = {"type": "dict", "schema": {
    "when": _expr("this rule applies when the expression is truthy (first match wins)",
                  "when: \"type == 'content_block_delta'\""),
    "text": _expr("text delta (string or list of strings)", "text: delta.text"),
    "reasoning": _expr("reasoning delta", "reasoning: delta.thinking"),
    "calls": {"type": "dict", **_doc("tool-call data in this event"), "schema": {
        "each": _expr("the list of call fragments (default: the event itself)",
                      "each: choices[0].delta.tool_calls"),
        "key": _expr("which call a fragment belongs to (default: a new call each)", "key: index"),
        "id": _expr("call id", "id: id"),
        "name": _expr("tool name", "name: function.name"),
        "args": _expr("arguments: a JSON text fragment, or a whole object",
                      "args: function.arguments"),
        "signature": _expr("the provider's opaque token for the call (ToolCall.signature)",
                           "signature: thoughtSignature"),
        "complete": _bool("the call arrives whole in this event"),
    }},
    "end": _expr("the key of a call that is now complete", "end: index"),
    "finish_reason": _expr("the wire finish reason", "finish_reason: delta.stop_reason"),
}}

_STRMAP = {"type": "dict", "keysrules": {"type": "string"},
           "valuesrules": {"type": "string"}}

_HTTP = _section("how a client reaches the provider over HTTP (toolrules.connect)", {
    "base_url": _str("the default base URL ({region} is filled in); null: the caller must "
                     "give one (base_url= or the env var)", "base_url: https://api.example.com/v1",
                     nullable=True),
    "base_url_env": _str_or_list("env var(s) that override the default base URL (first set "
                                 "wins)", "base_url_env: EXAMPLE_BASE_URL"),
    "path": _str("appended to the base URL; {model} (URL-encoded) and {region} are filled in",
                 "path: /models/{model}:generateContent"),
    "query": {**_STRMAP, **_doc("fixed query parameters", "query: {api-version: '2024-10-21'}")},
    "omit": _strlist("body fields build_request writes that this API takes elsewhere (the "
                     "path): left out of the HTTP body", "omit: [modelId]"),
    "headers": {**_STRMAP, **_doc("fixed headers sent with every request",
                                  "headers: {anthropic-version: '2023-06-01'}")},
    "region": _section("the {region} placeholder", {
        "env": _str_or_list("env var(s) naming the region", "env: [AWS_REGION, AWS_DEFAULT_REGION]"),
        "default": _str("region when no env var is set", "default: us-east-1"),
    }),
    "auth": _section("where the API key goes", {
        "kind": _str("header: in a header (scheme + key); query: a query parameter; "
                     "aws-sigv4: the key (when one is given) as a header, otherwise the "
                     "request is signed with AWS credentials; none: no key",
                     "kind: header", allowed=["header", "query", "aws-sigv4", "none"]),
        "header": _str("the header that carries the key", "header: x-api-key"),
        "scheme": _str("written before the key in the header, with a space", "scheme: Bearer"),
        "param": _str("the query parameter that carries the key (kind query)", "param: key"),
        "env": _str_or_list("env var(s) holding the key, first set wins", "env: EXAMPLE_API_KEY"),
        "optional": _bool("a missing key is fine (local servers): the request goes without one"),
        "service": _str("the AWS signing service name (kind aws-sigv4)", "service: example"),
        "extra": _str("the toolrules extra that installs the signer (named in the error "
                      "when it is missing)", "extra: aws"),
    }),
    "chat_template": _section(
        "where the server says which chat template it renders (`toolrules serve` asks at "
        "start and configures the route from the template; `toolrules inspect --server`)", {
            "path": _str("a GET path from the server root: the base URL without a trailing "
                         "API version (/v1)", "path: /props"),
            "template": _expr("over the reply: the template's source",
                              "template: chat_template"),
            "bos_token": _expr("over the reply: the BOS token the server passes to the "
                               "template", "bos_token: bos_token"),
            "eos_token": _expr("over the reply: the EOS token", "eos_token: eos_token"),
            "name": _expr("over the reply: the served model's name or file",
                          "name: model_alias"),
        }, "chat_template: {path: /props, template: chat_template}"),
    "health": _section(
        "a cheap GET that says whether the server can take requests (2xx: yes) - a proxy "
        "route with several `servers` checks each one this way; without it, the model "
        "list (http.models) is asked instead", {
            "path": _str("a GET path from the server root: the base URL without a trailing "
                         "API version (/v1)", "path: /health", required=True),
        }, "health: {path: /health}"),
    "stream": _section("asking for a stream and reading its frames", {
        "body": {"type": "dict", **_doc("merged into the request body to ask for a stream",
                                        "body: {stream: true}")},
        "path": _str("the path when streaming (default: http.path)",
                     "path: /models/{model}:streamGenerateContent"),
        "query": {**_STRMAP, **_doc("query parameters added when streaming", "query: {alt: sse}")},
        "framing": _str("how events are framed: sse (server-sent events), ndjson (one JSON "
                        "object a line), aws-eventstream (binary event-stream messages; an "
                        "event becomes {EVENT_TYPE: payload})", "framing: sse",
                        allowed=["sse", "ndjson", "aws-eventstream"]),
        "error": _expr("over one event: the provider's message when the event reports a "
                       "failure inside the stream", "error: \"type == 'error' && error.message\""),
    }),
    "models": _section("listing the provider's models (GET; toolrules serve's /v1/models "
                       "for a route that passes model names through)", {
        "path": _str("appended to the base URL", "path: /models"),
        "list": _expr("over the answer: the models as a list of {id, created (Unix seconds), "
                      "created_at (RFC 3339), display_name}; only id is needed",
                      "list: \"data[].{id: id, created: created}\""),
    }),
    "errors": _section("reading a failed response", {
        "message": _expr("over the error body: the provider's message",
                         "message: \"error.message || message\""),
        "type": _expr("over the error body: the provider's error type or status",
                      "type: \"error.type || error.status\""),
        "retry_after": _strlist("headers saying how long to wait, first present wins; a name "
                                "ending in -ms counts milliseconds",
                                "retry_after: [retry-after-ms, retry-after]"),
        "retry_delay": _expr("over the error body: a wait the provider asks for ('46s' or "
                             "seconds), when no header says it",
                             "retry_delay: \"error.details[?retryDelay].retryDelay | [0]\""),
    }),
})

def _events(doc: str, example: str | None = None) -> dict[str, Any]:
    """A list of JMESPath expressions, each building one event (null results are skipped)."""
    out = {"type": "list", "schema": {"type": "string"}, **_doc(doc, example)}
    out["meta"]["exprs"] = True
    return out


_BLOCK = {"type": "dict", "nullable": True, **_doc(
    "the events of one content block: start, delta (one per fragment), stop; view: the "
    "stream view plus {index, call_index, delta, text, call: {id, name, arguments, "
    "arguments_json}}"), "schema": {
        "start": _events("events opening the block", "start: [\"{type: 'block_start'}\"]"),
        "delta": _events("events carrying one fragment (`delta`)",
                         "delta: [\"{type: 'delta', text: delta}\"]"),
        "stop": _events("events closing the block (`text`: the whole block)",
                        "stop: [\"{type: 'block_stop'}\"]"),
    }}

_SERVE = _section("how a proxy serves this API to its clients (toolrules serve): the "
                  "endpoint, reading the client's request, error bodies and the stream's "
                  "event grammar", {
    "path": _str("the endpoint path; `{name}` is a path parameter (one segment; "
                 "`{name:path}` may hold slashes), see `model_param`",
                 "path: /v1/chat/completions"),
    "stream_path": _str("a second endpoint that streams every answer (the API says \"stream\" "
                        "by its path, not by a body field)",
                        "stream_path: /v1beta/models/{model}:streamGenerateContent"),
    "stream_query": {"type": "dict", "nullable": True, "keysrules": {"type": "string"},
                     "valuesrules": {"type": "string"}, **_doc(
                         "query parameters a request to `stream_path` must carry (another "
                         "value asks for a framing the proxy does not write: a 400 says so)",
                         "stream_query: {alt: sse}")},
    "versions": _strlist("other API versions the same endpoints answer under: every path "
                         "of this section also with its first segment replaced by each",
                         "versions: [v1]"),
    "model_param": _str("the path parameter naming the model the client asks for (default: "
                        "the body field `request.model` names)", "model_param: model"),
    "keys": _strlist("request headers that may carry the client's API key, first present "
                     "wins; a `Bearer ` prefix is dropped", "keys: [authorization, x-api-key]"),
    "signature_in_id": _bool("this API has no field for a call's signature (the opaque token a "
                             "provider issues with a call and wants back with it: Gemini's "
                             "thoughtSignature), so it travels in the call's id - the id, "
                             "`__sig_`, the signature in URL-safe base64 - and is read back "
                             "from the ids of the call and its result in later requests"),
    "key_query": _strlist("query parameters that may carry the client's API key, when no "
                          "header of `keys` does", "key_query: [key]"),
    "stream": _expr("over the client's body: does it ask for a stream", "stream: stream"),
    "json_output": _expr("over the client's body: {schema, name} when the client asks for an "
                         "answer that is one JSON value (schema: a JSON Schema, read like tool "
                         "parameters with `tools.read.pipeline`, or null), else null. The "
                         "upstream is asked in its own terms (its rule's `json_output:`), or "
                         "by the prompt, and the answer is validated before the client sees "
                         "it", "json_output: \"response_format.type == 'json_schema' && "
                         "{schema: response_format.json_schema.schema} || null\""),
    "options": _exprs("build_request option -> expression reading it from the client's body",
                      "options: {max_tokens: \"max_completion_tokens || max_tokens\"}"),
    "parallel": _expr("over the client's body: parallel tool calls allowed (true/false/null)",
                      "parallel: parallel_tool_calls"),
    "fields": {"type": "dict", "nullable": True, "keysrules": {"type": "string"},
               # a value is `read`, one case or a list of cases: checked (with plain
               # messages) by lint's provider-fields check
               "valuesrules": {"type": ["string", "dict", "list"]},
               **_doc("every top-level field of a client's request -> how it is accounted "
                      "for: `read` (the proxy reads it: messages, tools, options it carries "
                      "to the upstream), {ignore: reason} (no effect on the answer) or "
                      "{refuse: reason} (a 400 naming the field, why and what to do), each "
                      "optionally `when` an expression over the body holds; a list is tried "
                      "in order. A case {fields: {...}} reads an object whose own fields are "
                      "accounted for the same way (`generationConfig.topK`). A field not "
                      "listed - or listed with no case that holds - is refused: nothing is "
                      "dropped unseen. Null values pass",
                      "fields: {model: read, metadata: {ignore: labels only}, n: [{when: "
                      "\"n == `1`\", ignore: one answer}, {refuse: one answer only}]}")},
    "volatile": {"type": "list", "nullable": True, **_doc(
        "client metadata that rides in the conversation's text but is not conversation "
        "(a billing line, a per-request checksum ...): each entry is taken out of the "
        "messages of the listed roles before the conversation goes upstream - dropped, or "
        "carried after the conversation - so that the prompt's start stays the same from "
        "turn to turn and from one conversation to the next (a server reuses its cache "
        "only for an unchanged prefix). Each use is a recorded rewrite. Never for text "
        "the user or the agent wrote",
        "volatile: [{id: billing-line, match: '^x-billing: [^\\n]*\\n?', action: drop, "
        "why: per-conversation billing metadata}]"),
        "schema": {"type": "dict", "schema": {
            "id": {**_str("a name for the rewrite log", "id: billing-line"),
                   "required": True, "regex": r"^[a-z0-9][a-z0-9-]*$"},
            "match": {**_str("a regular expression (multiline: ^ and $ match at line "
                             "ends) over each message text of the roles; every match is "
                             "taken out", "match: '^x-billing: [^\\n]*\\n?'"),
                      "required": True},
            "roles": {"type": "list", "schema": {"type": "string",
                                                 "allowed": ["system", "user"]},
                      **_doc("the roles whose texts are searched (default [system]; "
                             "developer messages are read as system)", "roles: [system]")},
            "action": _str("drop (it has no meaning for the model) or after (it is carried "
                           "as a system text after the conversation)", "action: drop",
                           allowed=["drop", "after"]),
            "why": {**_str("what it is and why it is not conversation (the rewrite log "
                           "says it)"), "required": True},
        }}},
    "count_tokens": _section("a token-count endpoint (an estimate)", {
        "path": _str("its path", "path: /v1/messages/count_tokens"),
        "request": _expr("over the count body: the request whose prompt is counted "
                         "(default: the body itself)",
                         "request: \"generateContentRequest || @\""),
        "body": _expr("the answer; view: {tokens}", "body: \"{input_tokens: tokens}\""),
    }),
    "models": _section("the model list (GET /v1/models)", {
        "path": _str("its path", "path: /v1/models"),
        "header": _str("a request header that marks a client of this API when several "
                       "APIs share the path", "header: anthropic-version"),
        "body": _expr("the answer; view: {models: [{id, created, created_at}]}",
                      "body: \"{object: 'list', data: models[].{id: id, object: 'model'}}\""),
    }),
    "error": _section("error bodies in this API's own shape", {
        "body": _expr("view: {status, type, code, message}",
                      "body: \"{error: {message: message, type: type}}\""),
        "types": {"type": "dict", "keysrules": {"type": ["integer", "string"]},
                  "valuesrules": {"type": "string"},
                  **_doc("HTTP status (or 4xx/5xx) -> the API's error type",
                         "types: {401: authentication_error, 5xx: api_error}")},
        "codes": {"type": "dict", "keysrules": {"type": ["integer", "string"]},
                  "valuesrules": {"type": "string"},
                  **_doc("HTTP status (or 4xx/5xx) -> the API's error code, when it has codes",
                         "codes: {401: invalid_api_key}")},
    }),
    "events": _section("the stream's event grammar (server-sent events); every expression "
                       "sees the stream view {id, model, created, created_at, usage (as "
                       "in response.build: an estimate at the start, the upstream's own "
                       "figures by the finish when it reported them)} and what the event is "
                       "about", {
        "name": _expr("over an event: its `event:` line (omit: data lines only)",
                      "name: type"),
        "sequence": _str("a field numbering every event from 0", "sequence: sequence_number"),
        "done": _str("a last data line after the events", "done: '[DONE]'"),
        "start": _events("events opening the stream"),
        "text": _BLOCK,
        "reasoning": _BLOCK,
        "tool": _BLOCK,
        "finish": _events("events closing the stream; view adds {finish_reason (wire), "
                          "response (the whole body build_response writes)}"),
        "ping": _expr("a keep-alive event", "ping: \"{type: 'ping'}\""),
        "error": _expr("a failure after the stream started; view: {status, type, code, "
                       "message}", "error: \"{type: 'error', error: {type: type}}\""),
    }),
})

PROVIDER_SCHEMA: dict[str, Any] = {
    "id": _str("the provider id; equals the file stem"),
    "extends": _str("a provider whose rules this one starts from (deep merge: mappings merge, "
                    "lists and values replace, null removes)", "extends: base-server"),
    "description": _str("what API this is"),
    "aliases": _strlist("other names users may type for this provider (lowercase)",
                        "aliases: [my-server, my-server-v2]"),
    "docs": _str("link to the provider's API reference"),
    "lossy": _strlist("message details this wire format cannot carry (round-trip tests skip "
                      "them): tool_error, call_ids, result_names, reasoning, system_position, "
                      "blank_call_text",
                      "lossy: [tool_error]"),
    "renders_template": _bool("the server renders the model's own chat template (llama-server "
                              "--jinja, vLLM, LM Studio, Ollama ...): requests are normalized "
                              "to the model's turn constraints (capability turn_*)"),
    "request": _section("the request body", {
        "model": _str("body path of the model id; omit when the model is not in the body",
                      "model: model", nullable=True),
        "defaults": {"type": "dict", "nullable": True,
                     **_doc("fields always sent (options override them)",
                            "defaults: {max_tokens: 4096}")},
        "options": {"type": "dict", "nullable": True, "keysrules": {"type": "string"},
                    "valuesrules": {"type": "string", "nullable": True},
                    **_doc("build_request(**options) name -> body path",
                           "options: {max_tokens: generationConfig.maxOutputTokens}")},
        "reserved": _strlist("body fields request_overrides may not replace",
                             "reserved: [model, messages, tools, tool_choice]"),
        "template_kwargs": _str("body path of the chat-template variables a server that "
                                "renders the model's template passes to it (capability "
                                "turn_template_kwargs is written there)",
                                "template_kwargs: chat_template_kwargs"),
        "slot": _str("the body field that pins a request to one of the server's parallel "
                     "slots, each with its own KV cache (llama-server's id_slot): a proxy "
                     "route with `slots: N` sends each conversation to one slot, chosen "
                     "from its leading content", "slot: id_slot"),
    }),
    "system": _section("where system prompts go", {
        "placement": _str("message (in the message list) or field (a body field)",
                          "placement: field", allowed=["message", "field"]),
        "path": _str("body path for placement: field", "path: system"),
        "shape": _expr("value written at path; view: {text}", "shape: \"[{text: text}]\""),
        "read": _expr("reading a body: the system text (string or list of strings)",
                      "read: \"system[].text\""),
    }),
    "tools": _section("tool definitions", {
        "path": _str("body path of the tool list", "path: tools"),
        "pipeline": _PIPELINE,
        "strict": _section("strict schema mode", {
            "default": _str("on, off, or auto (strict when the schema allows, else plain)",
                            "default: auto", allowed=["on", "off", "auto"]),
            "pipeline": _PIPELINE,
        }),
        "shape": _expr("one tool; view: {name, description, parameters, strict}",
                       "shape: \"{name: name, description: description, input_schema: parameters}\""),
        "wrap": _expr("the tool list as sent (default: the list itself)",
                      "wrap: \"[{functionDeclarations: @}]\""),
        "names": _section("tool name rules", {
            "pattern": _str("regex a name must match", "pattern: '^[a-zA-Z0-9_-]{1,64}$'"),
            "sanitize": _bool("rewrite invalid names (and map calls back) instead of failing"),
        }),
        "description_max": {"type": "integer", "min": 1, "nullable": True,
                            **_doc("longest tool description accepted (longer ones are cut)",
                                   "description_max: 1024")},
        "max_tools": {"type": "integer", "min": 1, "nullable": True,
                      **_doc("most tools one request may carry", "max_tools: 128")},
        "keep_for_history": _bool("send tools whenever the history holds calls or results, "
                                  "even when the tool choice omits them"),
        "read": _section("reading tools out of a request body", {
            "each": _expr("the list of wire tools", "each: \"tools[?type=='function']\""),
            "name": _expr("tool name", "name: function.name"),
            "description": _expr("tool description", "description: function.description"),
            "parameters": _expr("tool schema", "parameters: function.parameters"),
            "pipeline": _PIPELINE,
            "refuse": {"type": "list", "nullable": True, **_doc(
                "rules over each entry of the request's tool list (at `tools.path`), tried "
                "in order before reading: the first whose `when` holds refuses the request "
                "(a 400 from a proxy) with its reason, or omits the entry: it is left out "
                "of the tools the model is offered and reported with its reason (access "
                "log, trace; a caller that keeps no record gets the refusal instead). "
                "Entries `each` does not read (server tools, built-in tools, tool types "
                "with a schema defined by the provider) must be refused or omitted here: "
                "nothing is dropped unseen",
                "refuse: [{when: \"type == 'web_search'\", omit: the upstream cannot "
                "search}, {when: \"type != 'function'\", refuse: only function tools can "
                "be relayed}]"),
                "schema": {"type": "dict", "schema": {
                    "when": _expr("the rule applies when this holds over the entry",
                                  required=True),
                    "refuse": _str("why the entry cannot be carried, and what to do instead",
                                   "refuse: a server tool runs on the provider's side",
                                   required=True, excludes="omit"),
                    "omit": _str("why leaving the entry out is safe (an optional capability "
                                 "the upstream cannot provide: the client never gets a call "
                                 "to it), and what to do to have it",
                                 "omit: web search runs on the provider's servers",
                                 required=True, excludes="refuse"),
                }}},
        }),
    }),
    "tool_choice": _section("the tool_choice table: auto, none, required, named", {
        "path": _str("body path of the tool choice", "path: tool_choice"),
        "auto": _CHOICE_ENTRY, "none": _CHOICE_ENTRY, "required": _CHOICE_ENTRY,
        "named": _CHOICE_ENTRY,
    }),
    "parallel_calls": _section("switching parallel tool calls on or off", {
        "path": _str("body path", "path: parallel_tool_calls"),
        "enabled": _expr("value for parallel calls allowed (null: write nothing)",
                         "enabled: \"`true`\"", nullable=True),
        "disabled": _expr("value for one call per turn", "disabled: \"`false`\""),
        "needs_choice": _str("tool choice written first when the value lives inside it",
                             "needs_choice: auto", allowed=["auto", "required"]),
    }),
    "messages": _WRITER,
    "response": _section("reading (and writing) a response body", {
        "messages": _expr("the wire message(s) holding the answer (one, or a list of items)",
                          "messages: choices[0].message"),
        "finish_reason": _expr("the wire finish reason", "finish_reason: choices[0].finish_reason"),
        "finish_map": {"type": "dict", "keysrules": {"type": "string"},
                       "valuesrules": {"type": "string", "allowed": [
                           "stop", "length", "tool_calls", "content_filter", "error", "pause"]},
                       **_doc("wire finish reason -> ParsedResponse.finish_reason (stop, length, "
                              "tool_calls, content_filter, error, pause)",
                              "finish_map: {end_turn: stop}")},
        "stop_with_calls": _bool("report tool_calls when the wire says stop but calls came back"),
        "transforms": _strlist("named inbound transforms applied to the wire message(s)",
                               "transforms: [function_call_to_tool_calls]"),
        "call_transforms": _strlist("named transforms applied to each extracted call",
                                    "call_transforms: [blank_arguments_to_empty_object]"),
        "text_fallback": _str("read calls out of the text too: capability (when the model "
                              "has no native tools or its text_fallback is set), dialect (also "
                              "whenever tools were offered and the model has a trained format: "
                              "servers that may run without a tool-call parser and return the "
                              "calls as text), always, never. Native calls come first; a call "
                              "read from the text that equals a native one is dropped",
                              "text_fallback: dialect",
                              allowed=["capability", "dialect", "always", "never"]),
        "unknown_dialect": _str("the dialect that reads the content for a model id no family "
                                "rule knows (its trained format is unknown) when tools were "
                                "offered and text_fallback is dialect or always: a server "
                                "without a tool parser hands such a model's calls back as raw "
                                "text of some common shape. Omitted: that content is text",
                                "unknown_dialect: auto"),
        "build": _expr("build_response: the body; view: {id, model, created, message, messages, "
                       "text, reasoning, tool_calls, finish_reason, usage: {input_tokens "
                       "(every prompt token, cached ones included), cached_tokens (of "
                       "those, read from the server's prompt cache; only when the upstream "
                       "said), uncached_input_tokens (input_tokens less cached_tokens), "
                       "output_tokens} or null}"),
        "usage": _expr("over a response body: the token counts it reports, as "
                       "{input_tokens (every prompt token, cached ones included), "
                       "cached_tokens (of those, read from the server's prompt cache), "
                       "output_tokens}; a field the body lacks is null. A proxy returns "
                       "these real figures instead of its estimates",
                       "usage: \"usage && {input_tokens: usage.prompt_tokens, cached_tokens: "
                       "usage.prompt_tokens_details.cached_tokens}\""),
        "message": _expr("build_response: the assistant message(s), when they differ from "
                         "messages.assistant"),
        "id_prefix": _str("prefix of generated response ids", "id_prefix: chatcmpl-"),
        "max_bytes": {"type": "integer", "min": 1024,
                      **_doc("size limit of a body given as text", "max_bytes: 16777216")},
    }),
    "stream": _section("the provider's streaming events", {
        "events": {"type": "list", "schema": _STREAM_EVENT,
                   **_doc("event rules, tried in order; the first whose `when` holds applies")},
        "sequential_calls": _bool("a call is complete when the next one starts (the stream "
                                  "has no end-of-call event)"),
        "usage": _expr("over one stream event: the token counts it reports, in the shape "
                       "of `response.usage` (default: `response.usage` itself); a later "
                       "event's counts replace an earlier one's, field by field (a last "
                       "usage chunk, a closing event's totals)",
                       "usage: \"message.usage || usage\""),
    }),
    "http": _HTTP,
    "serve": _SERVE,
    "constrained": _section(
        "constrained decoding (build_request(..., constrained=True)): how this provider "
        "takes the constraint derived from the offered tools (Engine.call_grammar)", {
            "format": _str("what the server takes for an emulated model: gbnf (a llama.cpp "
                           "grammar, which can also allow free text for tool_choice auto) or "
                           "json_schema (the call's JSON object; required and named choices "
                           "only); omit: none", "format: gbnf",
                           allowed=["gbnf", "json_schema"]),
            "path": _str("body path of the constraint", "path: grammar"),
            "value": _expr("the wire value, over {grammar: the GBNF text or the JSON schema, "
                           "name: 'tool_call'} (default: the grammar itself)",
                           "value: \"{type: 'json_schema', json_schema: {name: name, "
                           "schema: grammar}}\"", nullable=True),
            "native": _str("what `constrained` means for a model with native tools: strict "
                           "(the tools' strict schema mode); omit: unsupported",
                           "native: strict", allowed=["strict"]),
        }),
    "json_output": {**_exprs(
        "build_request(..., json_output={schema, name}): asking for an answer that is one "
        "JSON value, held to `schema` (a JSON Schema, or null: any JSON) - body path -> "
        "expression over {schema, name}; a null value is not written. Without this "
        "section toolrules serve asks in the prompt",
        "json_output: {response_format: \"schema && {type: 'json_schema', json_schema: "
        "{name: name || 'answer', schema: schema}} || {type: 'json_object'}\"}"),
        "nullable": True},
    "notes": _str("free text"),
}

STRATEGIES_SCHEMA: dict[str, Any] = {
    "description": _str("what this table does"),
    "strategies": {
        "type": "dict", "keysrules": {"type": "string", "regex": r"^[a-z0-9][a-z0-9_-]*$"},
        **_doc("strategy name -> {description, pipeline}; a model selects one with its "
               "capability `schema_strategy`", "strategies: {weak: {pipeline: [remove_optional]}}"),
        "valuesrules": {"type": "dict", "schema": {
            "description": _str("what the strategy is for"),
            "pipeline": {**_PIPELINE, "required": True},
        }},
    },
    "template_fixes": {
        "type": "dict", "keysrules": {"type": "string", "regex": r"^[a-z0-9][a-z0-9_-]*$"},
        **_doc("fix name -> {description, probe, pipeline}: what a chat template needs on the "
               "tool schemas it renders; a model (or a served route, from `toolrules inspect`) "
               "names the fixes in its capability `turn_tool_schema`, and they run at the "
               "`strategy` slot of a template-rendering provider's pipeline",
               "template_fixes: {property-types: {probe: {...}, pipeline: [fill_missing]}}"),
        "valuesrules": {"type": "dict", "schema": {
            "description": _str("what the template needs, and why"),
            "probe": {"type": "dict", "required": True,
                      **_doc("a tool's parameters schema showing the shape: inspect renders "
                             "a tool with it, and a template that fails on it but renders "
                             "it after the pipeline needs the fix",
                             "probe: {type: object, properties: {value: {description: any}}}")},
            "pipeline": {**_PIPELINE, "required": True},
        }},
    },
}

KIND_SCHEMAS: dict[str, dict[str, Any]] = {"provider": PROVIDER_SCHEMA}
TABLE_SCHEMAS: dict[str, dict[str, Any]] = {"schema_strategies": STRATEGIES_SCHEMA}
