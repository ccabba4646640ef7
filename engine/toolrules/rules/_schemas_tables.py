"""Cerberus schemas for the cross-cutting tables of emulation, validation, errors and
tool engineering (rules/emulation.yaml, validation.yaml, errors.yaml, tool_selection.yaml,
tool_audit.yaml, tool_classes.yaml, response_format.yaml)."""

from __future__ import annotations

from typing import Any

from ._schema_kit import _bool, _doc, _str, _str_or_list, _strlist
from ._schemas_models import CAPABILITY_FIELDS

__all__ = ["ERROR_CODES", "LADDER_STEPS", "TABLE_SCHEMAS"]

ERROR_CODES = ("validation", "permission", "not_found", "timeout", "rate_limit",
               "model_refusal", "execution", "network", "auth")
RETRY_STRATEGIES = ("same", "rephrase", "escalate", "abort")
LADDER_STEPS = ("same", "rephrase", "interference", "vortex", "escalate", "abort")
JSON_TYPES = ("string", "integer", "number", "boolean", "null", "array", "object")


def _int(doc: str, example: str, **extra: Any) -> dict[str, Any]:
    return {"type": "integer", **_doc(doc, example), **extra}


def _num(doc: str, example: str, **extra: Any) -> dict[str, Any]:
    return {"type": "number", **_doc(doc, example), **extra}


def _dict(doc: str, example: str | None, schema: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "dict", "schema": schema, **_doc(doc, example), **extra}


def _list_of(doc: str, example: str | None, item: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "list", "schema": item, **_doc(doc, example), **extra}


def _any(doc: str, example: str | None = None) -> dict[str, Any]:
    return {"nullable": True, **_doc(doc, example)}


_DESCRIPTION = _str("what this table is for")

# ---------------------------------------------------------------- emulation.yaml

_TEMPLATE = {**_str("a template under templates/", "template: emulation/json.j2"),
             "required": True}

_CONDITION_FIELDS: dict[str, Any] = {
    name: _any(f"the capability's {name} ({spec['meta']['doc']}); equal, or a "
               "comparison like '<8192' for numbers")
    for name, spec in CAPABILITY_FIELDS.items()
}
_CONDITION_FIELDS["trained_template"] = _bool("the capability's dialect has a trained "
                                              "prompt (see `trained`)")

EMULATION_SCHEMA: dict[str, Any] = {
    "description": _DESCRIPTION,
    "styles": {
        "type": "dict", "required": True, "keysrules": {"type": "string", "regex": r"^[a-z0-9-]+$"},
        **_doc("style name -> prompt template and the dialect that reads the answer",
               "styles: {json: {template: emulation/json.j2, dialect: json-fenced}}"),
        "valuesrules": {"type": "dict", "schema": {
            "template": _TEMPLATE,
            "dialect": {**_str("dialect id (rules/dialects/) that parses the answer",
                               "dialect: json-fenced"), "required": True},
            "description": _str("what the prompt asks for"),
        }},
    },
    "trained": {
        "type": "dict", "keysrules": {"type": "string"},
        **_doc("dialect id -> prompt in the model's own trained format",
               "trained: {my-format: {template: emulation/my-format.j2}}"),
        "valuesrules": {"type": "dict", "schema": {
            "template": _TEMPLATE,
            "description": _str("what the prompt asks for"),
        }},
    },
    "selection": _list_of(
        "ordered: the first entry whose `when` holds picks the style", None,
        {"type": "dict", "schema": {
            "when": _dict("capability conditions (all must hold); omit for a fallback",
                          "when: {context_window: '<8192'}", _CONDITION_FIELDS),
            "use": {**_str("a style name, or `trained` (the dialect's trained prompt)",
                           "use: compact"), "required": True},
            "note": _str("why"),
        }}, required=True),
    "descriptions": _dict("how tools are described inside prompts", None, {
        "compact_below": _int("windows under this many tokens list tools compactly",
                              "compact_below: 8192", min=1),
        "compact_chars": _int("description characters in the compact list", "compact_chars: 80",
                              min=1),
        "param_chars": _int("parameter description characters", "param_chars: 60", min=1),
        "ellipsis": _str("appended to cut text", "ellipsis: '...'"),
    }),
    "history": _dict("how an emulated conversation is written back to the model: earlier "
                     "calls in the prompt's own format, tool results as text", None, {
        "result_template": _str("template for one tool result (name, call_id, output, "
                                "error)", "result_template: emulation/result.j2"),
        "result_role": _str("the role tool results travel in", "result_role: user",
                            allowed=["user", "tool", "system"]),
    }),
    "turns": _dict("fitting a conversation to the turn constraints of a model's chat "
                   "template (capability turn_*)", None, {
        "join": _str("between texts joined into one turn", "join: \"\\n\\n\""),
        "system_block": _str("template wrapping a system text carried in a user turn "
                             "(variable: text)", "system_block: turns/system_block.j2"),
    }),
    "guidance": _dict("tool-calling guidance with example calls in the prompt", None, {
        "max_examples": _int("examples shown (one per tool, most relevant first)",
                             "max_examples: 2", min=0),
        "required_only": _bool("examples fill only required parameters"),
    }),
}

# ---------------------------------------------------------------- validation.yaml

_MESSAGE = {"type": "dict", "schema": {
    "error": {**_str("what is wrong", "error: 'Missing required parameter: {param}'"),
              "required": True},
    "suggestion": _str("how to fix it", "suggestion: \"Add '{param}' to the arguments\""),
    "expected": _str("what was expected (default: derived from the schema)",
                     "expected: '>= {limit}'"),
}}

_JSON_VALUE = _any("any JSON value")

VALIDATION_SCHEMA: dict[str, Any] = {
    "description": _DESCRIPTION,
    "messages": {
        "type": "dict", "required": True, "keysrules": {"type": "string"},
        "valuesrules": _MESSAGE,
        **_doc("jsonschema keyword (or unknown_tool, required_misspelled, ...) -> texts",
               "messages: {required: {error: 'Missing required parameter: {param}'}}"),
    },
    "type_names": _dict("how each JSON type reads in `expected`",
                        "type_names: {integer: an integer}",
                        {t: _str(f"how {t} reads", f"{t}: {t}") for t in JSON_TYPES}),
    "received_chars": _int("received values are cut to this many characters", "received_chars: 80",
                           min=8),
    "closest_names": _int("how many close names an unknown tool or parameter suggests",
                          "closest_names: 3", min=0),
    "did_you_mean": _str("{closest} of an unknown-parameter suggestion ({closest}: close names)",
                         "did_you_mean: '; did you mean {closest}?'"),
    "coercions": _list_of(
        "safe coercions, applied only when the caller opts in and the schema asks for `to`",
        None, {"type": "dict", "schema": {
            "name": {**_str("coercion name (what callers opt into)", "name: string-to-integer",
                            regex=r"^[a-z0-9-]+$"), "required": True},
            "from": {**_str("JSON type of the received value", "from: string",
                            allowed=list(JSON_TYPES)), "required": True},
            "to": {**_str("JSON type the schema asks for", "to: integer",
                          allowed=list(JSON_TYPES)), "required": True},
            "pattern": _str("regex the whole text must match", "pattern: '^[-+]?\\d+$'"),
            "values": {"type": "dict", **_doc("text -> value table",
                                              "values: {'true': true, 'false': false}")},
            "json": _bool("the text is parsed as JSON"),
        }}),
    "formats": {"type": "dict", "keysrules": {"type": "string"}, "valuesrules": {"type": "string"},
                **_doc("format name -> regex over the whole text (formats jsonschema lacks)",
                       "formats: {time: '^\\d{2}:\\d{2}:\\d{2}$'}")},
    "examples": _dict("example values for corrected calls and guidance examples", None, {
        "by_name": _list_of("regex over the parameter name -> value (used when it fits)",
                            "by_name: [{pattern: '(?i)path$', value: /path/to/file.txt}]",
                            {"type": "dict", "schema": {
                                "pattern": {**_str("regex over the parameter name"),
                                            "required": True},
                                "value": {**_JSON_VALUE, "required": True},
                            }}),
        "by_format": {"type": "dict", "keysrules": {"type": "string"},
                      **_doc("string format -> example", "by_format: {date: '2024-01-31'}")},
        "by_type": {"type": "dict", "keysrules": {"type": "string", "allowed": list(JSON_TYPES)},
                    **_doc("JSON type -> example ({param} in strings: the parameter name)",
                           "by_type: {string: 'example {param}'}")},
    }),
    "limits": _dict("the dispatcher's size guards on tool arguments and outputs", None, {
        "max_tool_args_bytes": _int("arguments larger than this are refused",
                                    "max_tool_args_bytes: 200000", min=1),
        "max_tool_output_bytes": _int("outputs larger than this are replaced",
                                      "max_tool_output_bytes: 200000", min=1),
    }),
    "envelope": {
        "type": "dict", "keysrules": {"type": "string", "regex": r"^[A-Z][A-Z0-9_]*$"},
        **_doc("envelope error code -> message and ToolError code",
               "envelope: {ARGUMENTS_TOO_LARGE: {message: '...', code: validation}}"),
        "valuesrules": {"type": "dict", "schema": {
            "message": {**_str("message ({size} {limit} {tool} {message})"), "required": True},
            "code": {**_str("ToolError code", "code: validation", allowed=list(ERROR_CODES)),
                     "required": True},
        }},
    },
    "feedback_template": _str("template of the retry feedback message",
                              "feedback_template: feedback/validation.j2"),
    "retry": _dict("validate-and-retry helper", None, {
        "max_attempts": _int("attempts including the first", "max_attempts: 3", min=1),
    }),
}

# ---------------------------------------------------------------- errors.yaml

_TEXT_FIELDS = {
    "recoverable": _bool("whether a retry may succeed"),
    "retry_strategy": _str("same | rephrase | escalate | abort", "retry_strategy: rephrase",
                           allowed=list(RETRY_STRATEGIES)),
    "fix": _str("suggested fix for the model ({tool} {error} {exception} {status})"),
}

_CODE_ENTRY = {
    **_TEXT_FIELDS,
    "recoverable": {**_TEXT_FIELDS["recoverable"], "required": True},
    "retry_strategy": {**_TEXT_FIELDS["retry_strategy"], "required": True},
    "ladder": {"type": "list", "schema": {"type": "string", "allowed": list(LADDER_STEPS)},
               **_doc("this code's own ladder", "ladder: [same, same, escalate]")},
}

ERRORS_SCHEMA: dict[str, Any] = {
    "description": _DESCRIPTION,
    "codes": _dict("per code: defaults of a ToolError with that code",
                   "codes: {timeout: {recoverable: true, retry_strategy: same}}",
                   {code: _dict(f"defaults for {code} errors", None, _CODE_ENTRY)
                    for code in ERROR_CODES}, required=True),
    "ladders": _dict("retry_strategy -> strategy per attempt (the last repeats)",
                     "ladders: {rephrase: [rephrase, interference, vortex]}",
                     {name: {"type": "list", "empty": False,
                             "schema": {"type": "string", "allowed": list(LADDER_STEPS)},
                             **_doc(f"steps for the {name} strategy",
                                    f"{name}: [same, interference, vortex]")}
                      for name in RETRY_STRATEGIES}, required=True),
    "unrecoverable": _str("strategy for an unrecoverable error", "unrecoverable: abort",
                          allowed=list(LADDER_STEPS)),
    "max_attempts": _int("default attempts for should_retry", "max_attempts: 3", min=1),
    "status_attributes": _strlist("dotted attribute paths holding an HTTP status",
                                  "status_attributes: [response.status_code, status_code]"),
    "mappings": _list_of(
        "ordered: the first mapping whose conditions all hold decides", None,
        {"type": "dict", "schema": {
            "id": {**_str("mapping name (golden cases cover each)", "id: http-rate-limit",
                          regex=r"^[a-z0-9-]+$"), "required": True},
            "exception": _str_or_list("exception class names along the MRO",
                                      "exception: [TimeoutError, TimeoutException]"),
            "status": {"type": "list", "schema": {"type": ["integer", "string"]},
                       **_doc("HTTP statuses or classes like '5xx'", "status: [429]")},
            "pattern": _str("regex searched in the exception text",
                            "pattern: '(?i)rate.?limit'"),
            "message": _str("the ToolError message ({tool} {error} {exception} {status}); "
                            "default: the exception text", "message: 'Tool {tool} timed out'"),
            "code": {**_str("ToolError code", "code: rate_limit", allowed=list(ERROR_CODES)),
                     "required": True},
            **_TEXT_FIELDS,
            "note": _str("why"),
        }}, required=True),
    "default": _dict("when nothing matches", "default: {code: execution}", {
        "code": {**_str("ToolError code", "code: execution", allowed=list(ERROR_CODES)),
                 "required": True},
        **_TEXT_FIELDS,
        "message": _str("the ToolError message ({tool} {error} {exception} {status}); "
                        "default: the exception text"),
    }, required=True),
    "clients": _dict("model clients (toolrules.connect): which failed calls to a model are "
                     "tried again, how long to wait, and what a provider's HTTP status means",
                     None, {
        "max_retries": _int("retries after the first attempt (connect(max_retries=...) "
                            "overrides)", "max_retries: 2", min=0, max=20),
        "backoff": _dict("exponential backoff between retries", None, {
            "initial": _num("seconds before the first retry", "initial: 0.5", min=0),
            "factor": _num("each wait is this many times the last", "factor: 2", min=1),
            "max": _num("no wait is longer (seconds)", "max: 8", min=0),
            "jitter": _num("a random share of the wait added or taken away (0-1)",
                           "jitter: 0.25", min=0, max=1),
        }),
        "retry_after_max": _num("longest wait a provider's Retry-After may ask for (seconds); "
                                "a longer one is not waited for: the error is raised with it",
                                "retry_after_max: 60", min=0),
        "retry_statuses": {"type": "list", "schema": {"type": ["integer", "string"]},
                           **_doc("HTTP statuses (or classes like '5xx') that are retried",
                                  "retry_statuses: [408, 429, '5xx']")},
        "retry_network": _bool("retry connection failures before any answer arrived"),
        "retry_timeouts": _bool("retry timeouts (connect, or a read before any answer)"),
        "statuses": _list_of(
            "HTTP status -> code for model calls, tried before `mappings`", None,
            {"type": "dict", "schema": {
                "status": {"type": "list", "required": True, "schema": {"type": ["integer", "string"]},
                           **_doc("HTTP statuses or classes like '5xx'", "status: [401, 403]")},
                "code": {**_str("ToolError code", "code: auth", allowed=list(ERROR_CODES)),
                         "required": True},
                **_TEXT_FIELDS,
                "note": _str("why"),
            }}),
    }),
}

# ---------------------------------------------------------------- tool_selection.yaml

TOOL_SELECTION_SCHEMA: dict[str, Any] = {
    "description": _DESCRIPTION,
    "budget": _dict("the context budget for small windows (optimize_tool_definitions)", None, {
        "no_limit_from": _int("windows this large (or unknown) keep every tool",
                              "no_limit_from: 32000", min=1),
        "share": _num("share of the window for tool definitions", "share: 0.2", min=0.01, max=1),
        "chars_per_token": _num("characters per token for estimates", "chars_per_token: 4",
                                min=1),
        "truncate_below": _int("windows under this cut descriptions", "truncate_below: 8192",
                               min=1),
        "description_chars": _int("description length after cutting", "description_chars: 200",
                                  min=1),
        "ellipsis": _str("appended to a cut description", "ellipsis: '...'"),
        "drop_optional_below": _int("windows under this drop optional parameters when over "
                                    "budget", "drop_optional_below: 8192", min=1),
        "max_tools": _int("tool-count limit when the budget applies", "max_tools: 32", min=1),
    }, required=True),
    "relevance": _dict("scores against a task hint", None, {
        "name_in_task": _num("the tool name appears in the task", "name_in_task: 10"),
        "name_word": _num("per word of the name in the task", "name_word: 3"),
        "description_word": _num("per description word in the task", "description_word: 0.5"),
        "min_word_chars": _int("shorter words are ignored", "min_word_chars: 3", min=1),
        "stop_words": _strlist("words ignored", "stop_words: [the, a]"),
    }, required=True),
    "namespaces": _dict("namespacing helpers (github_search vs jira_search)", None, {
        "separator": _str("between namespace and name", "separator: _", empty=False),
        "description_prefix": _str("prefixed to descriptions ({namespace})",
                                   "description_prefix: '[{namespace}] '"),
        "max_namespaces": _int("namespaces kept by the task filter", "max_namespaces: 3", min=1),
        "namespace_in_task": _num("the namespace appears in the task", "namespace_in_task: 10"),
        "tool_name_in_task": _num("a tool's base name appears in the task",
                                  "tool_name_in_task: 5"),
        "description_word": _num("per description word in the task", "description_word: 0.5"),
    }, required=True),
}

# ---------------------------------------------------------------- tool_audit.yaml

AUDIT_CHECKS = ("has_example_usage", "has_edge_cases", "has_input_format", "has_clear_boundaries")

_CHECK = {
    "markers": _strlist("plain text searched in the lowercased description",
                        "markers: ['note:']"),
    "patterns": _strlist("regexes searched in the lowercased description",
                         "patterns: ['\\buse \\S+ instead\\b']"),
    "advice": _str("what to add when the check fails"),
}

TOOL_AUDIT_SCHEMA: dict[str, Any] = {
    "description": _DESCRIPTION,
    "checks": _dict("check -> markers in the description",
                    "checks: {has_example_usage: {markers: [example, e.g.]}}",
                    {name: _dict(f"markers for {name}", None, _CHECK) for name in AUDIT_CHECKS},
                    required=True),
    "ambiguous_parameter_names": _strlist("parameter names that say too little",
                                          "ambiguous_parameter_names: [user, id]"),
    "ambiguous_advice": _str("advice when a parameter name is ambiguous ({names})"),
    "enhance": _dict("enhance_tool_description", None, {
        "good_score": _num("tools scoring at least this are left alone", "good_score: 0.8",
                           min=0, max=1),
        "parameters": _str("parameter hint line ({hints})", "parameters: 'Parameters: {hints}'"),
        "parameter": _str("one parameter ({name} {type} {required})",
                          "parameter: '{name}: {type}{required}'"),
        "required_mark": _str("{required} for required parameters", "required_mark: ' (required)'"),
        "boundaries": _list_of("first rule whose regex matches the tool name adds its note",
                               None, {"type": "dict", "schema": {
                                   "name": {**_str("regex over the tool name"), "required": True},
                                   "text": {**_str("the note"), "required": True},
                               }}),
    }),
}

# ---------------------------------------------------------------- tool_classes.yaml

_CLASS = {"type": "string", "allowed": ["read", "write"]}

TOOL_CLASSES_SCHEMA: dict[str, Any] = {
    "description": _DESCRIPTION,
    "tools": {"type": "dict", "keysrules": {"type": "string"}, "valuesrules": _CLASS,
              **_doc("exact tool name -> read | write", "tools: {bash: write}")},
    "write_words": _strlist("name words of state-changing tools", "write_words: [write, delete]"),
    "read_words": _strlist("name words of read-only tools", "read_words: [get, list]"),
    "write_description": _strlist("description phrases of state-changing tools",
                                  "write_description: [modifies]"),
    "read_description": _strlist("description phrases of read-only tools",
                                 "read_description: [returns]"),
    "unknown_as": {**_CLASS, **_doc("how unclassified tools are planned", "unknown_as: write")},
}

# ---------------------------------------------------------------- response_format.yaml

RESPONSE_FORMAT_SCHEMA: dict[str, Any] = {
    "description": _DESCRIPTION,
    "defaults": _dict("ToolResultConfig fields left unset", None, {
        "format": {**_str("concise | detailed", "format: concise",
                          allowed=["concise", "detailed"]), "required": True},
        "max_items": _int("items shown", "max_items: 10", min=1, required=True),
        "include_ids": {**_bool("show item ids"), "required": True},
        "truncate_at": _int("tokens before truncation", "truncate_at: 25000", min=1,
                            required=True),
        "include_metadata": {**_bool("show other item fields"), "required": True},
    }, required=True),
    "chars_per_token": _num("characters per token", "chars_per_token: 4", min=1),
    "clean_break": _num("cut at a newline when it keeps this share", "clean_break: 0.8",
                        min=0, max=1),
    "truncation_marker": _str("appended to truncated text"),
    "list_template": _str("template for format_list_result", "list_template: results/list.j2"),
    "max_extras": _int("other fields shown per item with include_metadata", "max_extras: 3",
                       min=0),
    "hints": _list_of("first rule whose regex matches the tool name gives the hint", None,
                      {"type": "dict", "schema": {
                          "name": {**_str("regex over the tool name"), "required": True},
                          "text": {**_str("the hint ({total})"), "required": True},
                      }}),
    "default_hint": _str("hint when no rule matches ({total})"),
}

TABLE_SCHEMAS: dict[str, dict[str, Any]] = {
    "emulation": EMULATION_SCHEMA,
    "validation": VALIDATION_SCHEMA,
    "errors": ERRORS_SCHEMA,
    "tool_selection": TOOL_SELECTION_SCHEMA,
    "tool_audit": TOOL_AUDIT_SCHEMA,
    "tool_classes": TOOL_CLASSES_SCHEMA,
    "response_format": RESPONSE_FORMAT_SCHEMA,
}
