"""Schemas of model-family rules (rules/models/) and of the ids table (rules/ids.yaml)."""

from __future__ import annotations

from typing import Any

from ._schema_kit import _bool, _doc, _str, _str_or_list, _strlist

__all__ = ["CAPABILITY_FIELDS", "KIND_SCHEMAS", "TABLE_SCHEMAS"]


# ---------------------------------------------------------------- capabilities (models)

CAPABILITY_FIELDS: dict[str, dict[str, Any]] = {
    "native_tools": _bool("structured tool calling through the provider API"),
    "parallel_tools": _bool("several calls in one turn"),
    "tool_streaming": _bool("tool-call arguments stream"),
    "json_mode": _bool("reliable JSON output mode"),
    "reasoning": _bool("extended thinking"),
    "max_output_tokens": {"type": "integer", "nullable": True, "min": 1,
                          **_doc("output token limit", "max_output_tokens: 8192")},
    "context_window": {"type": "integer", "nullable": True, "min": 1,
                       **_doc("context window in tokens", "context_window: 128000")},
    "needs_tool_schema_strict": _bool("tool schemas must be strict"),
    "tool_result_in_user_message": _bool("tool results travel in a user message"),
    "supports_tool_choice_required": _bool('tool_choice "required" is accepted'),
    "emulation_style": _str("prompt style for emulated tools",
                            "emulation_style: json",
                            allowed=["json", "compact", "parallel", "xml", "markdown", "dialect"]),
    "dialect": _str("raw-text tool-call format (a rules/dialects id)", "dialect: hermes",
                    nullable=True),
    "supports_forced_tool_choice": _bool("a specific tool can be forced"),
    "tool_calling_reliable": _bool("reliable enough for enforced tool use"),
    "schema_strategy": _str("schema simplification strategy (rules/schema_strategies.yaml)",
                            "schema_strategy: weak", nullable=True),
    "prompt_guidance": _bool("add tool-calling guidance with examples to prompts"),
    "validate_retry": _bool("validate calls and retry with feedback"),
    "text_fallback": _bool("parse tool intent from plain text as a last resort"),
    "quirks": _strlist("named repairs applied when parsing this model's output",
                       "quirks: [trailing-commas]"),
    "decline_calls": _strlist("tool names this model writes to mean \"no call\": read as no "
                              "call, with a warning (unless a tool of that name is offered)",
                              "decline_calls: [no_function]"),
    "input_media": {"type": "list", "nullable": True,
                    "schema": {"type": "string", "allowed": ["image", "audio", "document"]},
                    **_doc("what the model takes besides text; [] for text only (a request "
                           "carrying other media is refused); unset: unknown",
                           "input_media: [image]")},
    "chat_template": _str("the turn format for raw-text inference: a template under "
                          "templates/chat/ (Hugging Face chat-template variables)",
                          "chat_template: chat/gemma.j2", nullable=True),
    "turn_system": _str("where the model's chat template takes system messages: anywhere; "
                        "leading (any number, before every other message); first (one, as "
                        "the first message); none (no system role)", "turn_system: first",
                        allowed=["anywhere", "leading", "first", "none"]),
    "turn_system_stable": _bool("a system text that arrives after the conversation "
                                "started stays where it arrived (a system message where the "
                                "template takes one there, else a wrapped block in the "
                                "adjacent user turn), so the prompt's start never changes "
                                "(default true); false folds it into the first system "
                                "message"),
    "turn_alternate": _bool("user turns and assistant turns without calls must alternate, "
                            "a user turn first (turns with calls and their results stand "
                            "between them freely)"),
    "turn_roles": {"type": "list", "schema": {"type": "string",
                                              "allowed": ["tool"]},
                   **_doc("roles the chat template renders besides system, user and "
                          "assistant (without tool: tool results, and the calls they answer, "
                          "are written as text); developer messages are always read as "
                          "system", "turn_roles: [tool]")},
    "turn_content_required": _bool("an assistant message with calls must carry a content "
                                   "field (written as \"\")"),
    "turn_text_with_calls": _bool("the chat template renders assistant text beside calls"),
    "turn_history_calls": _bool("the chat template renders the calls of earlier turns"),
    "turn_calls_per_message": {"type": "integer", "nullable": True, "min": 1, **_doc(
        "at most this many calls in one assistant message (a template that refuses or drops "
        "a second call): more are written as several messages, each followed by its results",
        "turn_calls_per_message: 1")},
    "turn_call_ids": _str("the call ids the chat template takes, as a pattern of {name} and "
                          "{index} (from 0, over the conversation): the history's ids are "
                          "rewritten to it", "turn_call_ids: 'functions.{name}:{index}'",
                          nullable=True, regex=r"^(?:[^{}]|\{name\}|\{index\})*\{index\}"
                          r"(?:[^{}]|\{name\}|\{index\})*$"),
    "turn_results_follow_calls": _bool("tool results must directly follow the message "
                                       "that made the calls"),
    "turn_tools": _str("where the tool definitions go where a template renders: template "
                       "(the tools field, where the template writes them) or system (the "
                       "model's trained format in the leading system prompt, for a template "
                       "that moves its tool list between turns)", "turn_tools: system",
                       allowed=["template", "system"]),
    "turn_template_kwargs": {"type": "dict", "keysrules": {"type": "string",
                                                           "regex": r"^[A-Za-z_][A-Za-z0-9_]*$"},
                             "valuesrules": {"type": ["boolean", "integer", "float",
                                                      "string"]},
                             **_doc("variables the chat template reads that keep earlier "
                                    "turns rendered as they were, sent as the server's "
                                    "template arguments (provider request.template_kwargs)",
                                    "turn_template_kwargs: {preserve_thinking: true}")},
    "turn_tool_schema": _strlist("fixes the chat template needs on the tool schemas it "
                                 "renders (names in the template_fixes table of "
                                 "rules/schema_strategies.yaml)",
                                 "turn_tool_schema: [property-types]"),
}

_CAPABILITY_MAP = {"type": "dict", "schema": CAPABILITY_FIELDS,
                   **_doc("capability fields to set", "set: {native_tools: true}")}

_CONDITION = {
    "type": "dict",
    **_doc("conditions on the parsed id; all must hold",
           "when: {version: '>=3.3', size: '<70B'}"),
    "schema": {
        "family": _str_or_list("family name (or list)"),
        "version": _str("version comparison", "version: '>=3.1'"),
        "size": _str("parameter count comparison", "size: '<70B'"),
        "active_size": _str("active parameter count comparison", "active_size: '<=3B'"),
        "date": _str("date stamp comparison (as written in the id)", "date: '>=2506'"),
        "variant": _str_or_list("variant; a list means any of; '~regex' searches",
                                "variant: [sonnet, opus]"),
        "provider": _str_or_list("provider prefix (ollama, bedrock ...)"),
        "org": _str_or_list("organisation part of the id"),
        "custom": _bool("a fine-tune or an id under an unknown organisation"),
        "id": _str_or_list("the id as the user wrote it; '~regex' searches"),
    },
}

MODEL_SCHEMA: dict[str, Any] = {
    "family": _str("the family name: the vendor's own lowercase line name; equals the "
                   "file stem", "family: llama", regex=r"^[a-z0-9][a-z0-9.-]*$"),
    "description": _str("what this family is"),
    "priority": {"type": "integer", **_doc("higher is tried first when patterns overlap",
                                            "priority: 10")},
    "match": {"type": "list", "schema": {"type": "string"},
              **_doc("ordered regexes over the normalized id; named groups family, version, "
                     "size, active, variant, date", "match: ['^llama-?(?P<version>\\d+(?:\\.\\d+)?)']")},
    "assume": {"type": "dict", **_doc("values assumed when the id does not say",
                                        "assume: {size: 8B}"),
               "schema": {"size": _str("assumed size", "size: 8B"),
                          "version": _str("assumed version", "version: '3'")}},
    "defaults": _CAPABILITY_MAP,
    "capabilities": {
        "type": "list",
        **_doc("ordered when -> set clauses; the first that matches is merged over defaults"),
        "schema": {"type": "dict", "schema": {
            "when": {**_CONDITION, "required": True},
            "set": {**_CAPABILITY_MAP, "required": True},
            "note": _str("why this clause exists"),
        }},
    },
    "dialect": _str("the family's raw-text tool-call format (a rules/dialects id)",
                    "dialect: hermes"),
    "quirks": _strlist("named repairs for this family's output", "quirks: [trailing-commas]"),
    "schema": _str("schema simplification strategy for weak models", "schema: weak"),
    "overrides": {
        "type": "list",
        **_doc("capability overrides for exact ids or id patterns; beat every clause"),
        "schema": {"type": "dict", "schema": {
            "id": _str("exact model id (as the user writes it)", "id: mycompany/llama3-ft"),
            "pattern": _str("regex searched in the raw id", "pattern: '^mycompany/'"),
            "set": {**_CAPABILITY_MAP, "required": True},
            "note": _str("why"),
        }},
    },
    "examples": _strlist("representative real ids (the matrix shows them; golden cases add "
                         "more)", "examples: [llama3.3:70b, meta-llama/Llama-3.1-8B-Instruct]"),
    "notes": _str("free text"),
}

# ---------------------------------------------------------------- tables

IDS_SCHEMA: dict[str, Any] = {
    "description": _str("what this table does"),
    "providers": {
        "type": "list", **_doc("provider prefixes: regex at the start of the id -> provider"),
        "schema": {"type": "dict", "schema": {
            "pattern": {**_str("regex matched at the start of the id; may capture org",
                               "pattern: '^ollama/'"), "required": True},
            "provider": {**_str("provider name", "provider: ollama"), "required": True},
        }},
    },
    "vendor_orgs": _strlist("organisations whose ids are not custom (lowercase)",
                            "vendor_orgs: [meta-llama, qwen]"),
    "rewrites": {
        "type": "list", **_doc("regex substitutions applied in order to the lowercased id"),
        "schema": {"type": "dict", "schema": {
            "pattern": {**_str("regex", "pattern: '(?<=\\d)_(?=\\d)'"), "required": True},
            "replace": {**_str("replacement (\\1 style groups)", "replace: '.'"),
                        "required": True},
            "note": _str("why"),
        }},
    },
    "strip": {"type": "list", **_doc("regexes removed from the id (suffixes, tags, "
                                     "quantization); a group `date` is kept as the date, "
                                     "groups `year`/`month`/`day` are kept year first"),
              "schema": {"type": "string"}},
    "size_token": _str("regex for a size token; groups: count (experts), size, unit",
                       "size_token: '^(?:(?P<count>\\d+)x)?(?P<size>\\d+(?:\\.\\d+)?)(?P<unit>[bmk])$'"),
    "active_token": _str("regex for an active-size token; groups size, unit"),
    "ignore_tokens": _strlist("variant tokens dropped (hf, latest ...)"),
    "fallback_family": _str("regex extracting a family name from an unknown id"),
}

TABLE_SCHEMAS: dict[str, dict[str, Any]] = {
    "ids": IDS_SCHEMA,
}

KIND_SCHEMAS: dict[str, dict[str, Any]] = {
    "model": MODEL_SCHEMA,
}
