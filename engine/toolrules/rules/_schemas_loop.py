"""The schema of rules/loop.yaml (the tool loop's guardrail texts, retry hints, defaults
and trace redaction), interpreted by runtime/_loop.py; cross-checks in _loop_rules.py."""

from __future__ import annotations

from typing import Any

from ._schema_kit import _doc, _str
from ._schemas_tables import ERROR_CODES, LADDER_STEPS

__all__ = ["LOOP_DEFAULTS", "LOOP_MESSAGES", "LOOP_PLACEHOLDERS", "TABLE_SCHEMAS"]

# Every text the loop sends; the table must define each one.
LOOP_MESSAGES = ("nudge", "finalize", "round_limit", "call_limit", "call_not_run",
                 "repeated_call", "repeated_stop")
LOOP_PLACEHOLDERS = ("tool", "tools", "limit", "count", "attempt", "code")
LOOP_DEFAULTS = ("max_rounds", "max_tool_calls", "repeat_limit", "max_nudges", "auto_retries")


def _text(doc: str) -> dict[str, Any]:
    return {**_str(doc), "required": True, "empty": False}


LOOP_SCHEMA: dict[str, Any] = {
    "description": _str("what this table is for"),
    "message_provider": {**_str("the provider whose response shape reads assistant messages "
                                "written as dicts (scripted turns, traces)",
                                "message_provider: openai"), "required": True},
    "defaults": {
        "type": "dict", "required": True,
        **_doc("the loop's limits when the caller gives none", "max_rounds: 10"),
        "schema": {**{name: {"type": "integer", "min": 0, "required": True,
                             **_doc(f"default {name}")} for name in LOOP_DEFAULTS},
                   "parse_timeout": {"type": "number", "min": 0, **_doc(
                       "seconds reading one answer may take (default 5; 0: no limit)",
                       "parse_timeout: 5")}},
    },
    "messages": {
        "type": "dict", "required": True,
        **_doc("what the loop tells the model when a guardrail acts",
               "nudge: 'Call one of the offered tools ({tools}) now.'"),
        "schema": {name: _text(f"the {name} message") for name in LOOP_MESSAGES},
    },
    "auto_retry_codes": {
        "type": "list", "schema": {"type": "string", "allowed": list(ERROR_CODES)},
        **_doc("error codes the loop retries itself (ladder step `same`, read-only tools)",
               "auto_retry_codes: [timeout, network]"),
    },
    "retry_hints": {
        "type": "dict", "required": True,
        **_doc("the hint sent with a failed tool result, per step of the errors.yaml ladder",
               "rephrase: 'Fix the arguments, then call {tool} again.'"),
        "schema": {step: _text(f"the hint for ladder step {step}") for step in LADDER_STEPS},
    },
    "redact": {
        "type": "dict", "required": True,
        **_doc("what a trace never holds", "mask: '[redacted]'"),
        "schema": {
            "mask": _text("what a redacted value becomes"),
            "keys": _text("regex over dict keys whose values are replaced"),
            "patterns": {"type": "list", "schema": {"type": "string", "empty": False},
                         **_doc("regexes over text; each match is replaced")},
        },
    },
}

TABLE_SCHEMAS: dict[str, dict[str, Any]] = {"loop": LOOP_SCHEMA}
