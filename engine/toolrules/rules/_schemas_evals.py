"""Schemas of the evaluation rules: scenarios (rules/scenarios/*.yaml, kind "scenario")
and the eval table (rules/eval.yaml: the offline model catalog, live entries, presets,
strategies, sampling profiles). Interpreted by evals/; cross-checks in _eval_rules.py."""

from __future__ import annotations

from typing import Any

from ._schema_kit import _bool, _doc, _str, _str_or_list, _strlist
from ._schemas_models import CAPABILITY_FIELDS

__all__ = ["ANSWER_CHECKS", "FILE_CHECKS", "KIND_SCHEMAS", "MATCH_OPS", "SCENARIO_TIERS",
           "SIGNALS", "TABLE_SCHEMAS"]

SCENARIO_TIERS = ("simple", "medium", "complex", "realistic", "guardrail", "chat")
# Operators an argument matcher may use: a mapping whose keys are all operators is a
# matcher, any other value must equal the argument.
MATCH_OPS = ("equals", "contains", "not_contains", "regex", "one_of", "any", "absent")
FILE_CHECKS = ("equals", "contains", "not_contains", "regex", "absent", "exists")
ANSWER_CHECKS = ("equals", "contains", "not_contains", "regex", "nonempty")
# What a simulated model may need to have been shown before it writes a scripted turn.
SIGNALS = ("feedback",)

_TOOL_NAME = r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$"
_LOOP_INT = {"type": "integer", "min": 0}


def _int(doc: str, example: str | None = None) -> dict[str, Any]:
    return {**_LOOP_INT, **_doc(doc, example)}


def _any(doc: str, example: str | None = None) -> dict[str, Any]:
    return {"nullable": True, **_doc(doc, example)}


_CALL = {"type": "dict", "schema": {
    "name": {**_str("the tool name", "name: read_file"), "required": True, "empty": False},
    "arguments": {"type": "dict", **_doc(
        "the arguments (expected calls: a matcher per argument - a value, or "
        "{contains|regex|one_of|any|absent|not_contains|equals: ...})",
        "arguments: {path: {regex: '^src/'}}")},
    "optional": _bool("an expected call the run may leave out"),
}}

_FAIL = {"type": "dict", **_doc("fail with this envelope code and message",
                                "fail: {code: TIMEOUT, message: the service did not answer}"),
         "schema": {"code": {**_str("an envelope code of rules/validation.yaml",
                                    "code: TIMEOUT"), "required": True},
                    "message": {**_str("what the model is told"), "required": True}}}

_MOCK_RESULT: dict[str, Any] = {
    "output": _any("a canned output (text or any value); text may name arguments as "
                   "{argument}", "output: {ok: true, title: Draft}"),
    "echo": _bool("answer with the call's arguments"),
    "fail": _FAIL,
    "delegate": {"type": "dict", **_doc(
        "run a built-in tool instead (the scenario's workspace), renaming arguments",
        "delegate: {tool: read_file, arguments: {path: file_path}}"), "schema": {
        "tool": {**_str("a built-in tool (rules/tools)", "tool: read_file"), "required": True},
        "arguments": {"type": "dict", "keysrules": {"type": "string"},
                      "valuesrules": {"type": "string"},
                      **_doc("built-in argument <- this tool's argument",
                             "arguments: {path: file_path}")},
        "fixed": {"type": "dict", **_doc("built-in arguments with fixed values",
                                         "fixed: {recursive: true}")},
    }},
}

_MOCK = {"type": "dict", **_doc("what the tool does (one of output, echo, fail, delegate; "
                                "or cases tried in order)", "mock: {echo: true}"),
         "schema": {**_MOCK_RESULT,
                    "cases": {"type": "list", **_doc("first case whose `when` matches decides"),
                              "schema": {"type": "dict", "schema": {
                                  "when": {"type": "dict", "required": True, **_doc(
                                      "argument matchers (as in expected calls)",
                                      "when: {id: {absent: true}}")},
                                  **_MOCK_RESULT}}}}}

_DECLARED = {"type": "dict", "schema": {
    "name": {**_str("the tool name", "name: state_get", regex=_TOOL_NAME), "required": True},
    "description": {**_str("what the model is told"), "required": True, "empty": False},
    "parameters": {"type": "dict", "required": True, **_doc(
        "JSON Schema of the arguments (an object schema)",
        "parameters: {type: object, properties: {id: {type: string}}}")},
    "kind": _str("read (may run in parallel) or write", "kind: read", allowed=["read", "write"]),
    "mock": {**_MOCK, "required": True},
}}

_TEXT_CHECK = {"type": ["string", "list"], "schema": {"type": "string"}}

SCENARIO_SCHEMA: dict[str, Any] = {
    "description": {**_str("what the scenario checks"), "required": True, "empty": False},
    "tier": {**_str("simple (1-2 parameters), medium, complex (10+ parameters), realistic "
                    "(multi-step work), guardrail, chat", "tier: simple",
                    allowed=list(SCENARIO_TIERS)), "required": True},
    "source": _str("where the scenario comes from",
                   "source: tool-loop set on the editor workspace"),
    "tags": _strlist("names a --scenarios list may use", "tags: [smoke]"),
    "task": {**_str("the user's task"), "required": True, "empty": False},
    "system": _str("a system message before the task"),
    "tools": {"type": "dict", "required": True, **_doc("the tools offered"), "schema": {
        "builtin": _strlist("built-in tools (rules/tools)", "builtin: [read_file, write_file]"),
        "declared": {"type": "list", "schema": _DECLARED,
                     **_doc("tools defined here, with mock handlers")},
        "mcp": _strlist("MCP servers whose tools are offered (rules/mcp/NAME.yaml); their "
                        "tools are named NAMESPACE_TOOL", "mcp: [filesystem]"),
    }},
    "workspace": {"type": "dict", **_doc("the workspace before the run"), "schema": {
        "files": {"type": "dict", "keysrules": {"type": "string"},
                  "valuesrules": {"type": "string"},
                  **_doc("relative path -> content", "files: {src/app.py: 'import os'}")},
        "age_days": {"type": "dict", "keysrules": {"type": "string"},
                     "valuesrules": {"type": "integer", "min": 0},
                     **_doc("relative path -> how many days ago it was modified",
                            "age_days: {src/old.py: 40}")},
    }},
    "settings": {"type": "dict", **_doc("tool-loop limits for this scenario"), "schema": {
        "max_rounds": _int("model turns with tools", "max_rounds: 6"),
        "max_tool_calls": _int("calls run in all"),
        "repeat_limit": _int("identical calls before one is refused"),
        "max_nudges": _int("nudges in enforced mode"),
        "tool_use_mode": _str("relaxed, enforced or disabled", "tool_use_mode: enforced",
                              allowed=["relaxed", "enforced", "disabled"]),
        "tool_failure_policy": _str("fatal or tolerated", allowed=["fatal", "tolerated"]),
        "max_tool_args_bytes": _int("larger arguments are refused (ARGUMENTS_TOO_LARGE)",
                                    "max_tool_args_bytes: 2000"),
        "max_tool_output_bytes": _int("larger outputs are replaced"),
        "fix_empty_final": _bool("ask once more after an empty final answer"),
        "trust": _str("the executor's trust level", "trust: shell"),
    }},
    "expect": {"type": "dict", "required": True, **_doc("what a correct run does"), "schema": {
        "calls": {"type": "list", "schema": _CALL,
                  **_doc("calls that must succeed (name + argument matchers)",
                         "calls: [{name: read_file, arguments: {path: input.txt}}]")},
        "order": _str("sequence (in this order) or any", "order: any",
                      allowed=["sequence", "any"]),
        "no_calls": _bool("a correct run calls no tool"),
        "stopped": _str("how the loop must end (default done)", "stopped: done"),
        "answer": {"type": "dict", **_doc("checks on the final answer"), "schema": {
            "equals": _str("the answer, exactly (trimmed)"),
            "contains": {**_TEXT_CHECK, **_doc("text that must appear (case-insensitive)")},
            "not_contains": {**_TEXT_CHECK, **_doc("text that must not appear")},
            "regex": _str("a regex the answer must match (search)"),
            "nonempty": _bool("the answer is not empty"),
        }},
        "files": {"type": "dict", "keysrules": {"type": "string"}, **_doc(
            "checks on the workspace after the run, per relative path",
            "files: {out.txt: {contains: HELLO}}"),
            "valuesrules": {"type": "dict", "schema": {
                "equals": _str("the whole content"),
                "contains": {**_TEXT_CHECK, **_doc("text that must appear")},
                "not_contains": {**_TEXT_CHECK, **_doc("text that must not appear")},
                "regex": _str("a regex the content must match (search)"),
                "absent": _bool("the file must not exist"),
                "exists": _bool("the file must exist"),
            }}},
    }},
    "script": {"type": "list", "required": True, "minlength": 1, **_doc(
        "the offline model: one step per model turn, written in every dialect's format",
        "script: [{calls: [{name: read_file, arguments: {path: a.txt}}]}, {answer: Done.}]"),
        "schema": {"type": "dict", "schema": {
            "say": _str("text before the calls"),
            "calls": {"type": "list", "schema": _CALL, **_doc("the calls of this turn")},
            "answer": _str("a final answer (text, no calls)"),
            "raw": {"type": "dict", "keysrules": {"type": "string"},
                    "valuesrules": {"type": "string"},
                    **_doc("hand-written text per offline entry id or dialect (quirks)",
                           "raw: {hermes: '<tool_call>...'}")},
            "native": {"type": "dict", **_doc(
                "for models without a raw-text dialect: an assistant message dict",
                "native: {content: '<tool_call>...</tool_call>'}")},
            "needs": {"type": "list", "schema": {"type": "string", "allowed": list(SIGNALS)},
                      **_doc("what the model must have been shown to write this turn; "
                             "otherwise it writes its previous turn again",
                             "needs: [feedback]")},
            "note": _str("why this turn"),
        }}},
}

_ENTRY = {"type": "dict", "schema": {
    "id": {**_str("the entry's name (a --models filter matches it)", "id: hermes"),
           "required": True, "regex": r"^[a-z0-9][a-z0-9_.+\-]*$"},
    "model": {**_str("the model id scripted turns are read as", "model: Qwen/Qwen3-8B"),
              "required": True},
    "dialect": {**_str("the dialect the model must resolve to (null: native messages)",
                       "dialect: hermes"), "nullable": True, "required": True},
    "set": {"type": "dict", "schema": CAPABILITY_FIELDS,
            **_doc("capability overrides for this entry", "set: {native_tools: false}")},
    "write": _str("the emulation style or trained format whose `call` macro writes the "
                  "calls (default: the dialect's; for emulated models their prompt's)",
                  "write: llama3-json"),
    "call_format": _str("calls written by this pattern instead: {name}, {arguments} (JSON)",
                        "call_format: '{name}\\n{arguments}'"),
    "answer": _str("how a plain answer is written; {text} is the answer",
                   "answer: '<|channel|>final<|message|>{text}<|return|>'"),
    "prefix": _str("text put before every turn with calls (a quirk: a thinking block, a start token)",
                   "prefix: '<think>\\n</think>\\n\\n'"),
    "say": _str("how text before calls is written; {text} is the text ('' drops it: "
                "formats whose calls must open the turn)", "say: ''"),
    "one_call_per_turn": _bool("the format carries one call per turn: parallel steps "
                               "are written as consecutive turns"),
    "suffix": _str("text put after every turn (an end-of-turn token)", "suffix: '<|eot_id|>'"),
    "tags": _strlist("names a --models filter may use", "tags: [stable]"),
    "note": _str("where the shape comes from"),
}}

_LIVE = {"type": "dict", "schema": {
    "id": {**_str("the entry's name", "id: claude-sonnet"), "required": True},
    "connect": {**_str("a connect() spec: PROVIDER:MODEL or local",
                       "connect: anthropic:claude-sonnet-4-5"), "required": True},
    "base_url": _str("the server address (else the provider rule's)"),
    "options": {"type": "dict", **_doc("request options sent with every turn (a sampling "
                                       "profile's options win over them)",
                                       "options: {max_tokens: 192}")},
    "tags": _strlist("names a --models filter may use", "tags: [stable, anthropic]"),
    "scenarios": _str_or_list("scenarios (ids, tags, presets) run on this entry when "
                              "--scenarios is not given", "scenarios: local"),
    "note": _str("why it is listed"),
}}

_STRATEGY = {"type": "dict", "schema": {
    "description": {**_str("what this layer adds"), "required": True},
    "extends": _str("the strategy this one adds to", "extends: raw"),
    "set": {"type": "dict", "schema": CAPABILITY_FIELDS,
            **_doc("capability overrides", "set: {validate_retry: true}")},
    "client": {"type": "dict", **_doc("options for clients that support them (skipped "
                                      "where the client has none)",
                                      "client: {constrained: true}"),
               "schema": {"constrained": _bool("constrained decoding (a grammar of the "
                                               "dialect's calls)")}},
    "loop": {"type": "dict", **_doc("tool-loop settings this layer adds (on top of the "
                                    "scenario's own)", "loop: {tool_use_mode: enforced}"),
             "schema": {
                 "tool_use_mode": {"type": "string",
                                   "allowed": ["relaxed", "enforced", "disabled"]},
                 "tool_failure_policy": {"type": "string", "allowed": ["fatal", "tolerated"]},
                 "max_nudges": {"type": "integer", "min": 0}}},
    "loop_when": {"type": "string", "allowed": ["always", "calls_expected"],
                  **_doc("which scenarios get `loop`: all, or those whose expect lists "
                         "calls (default: always)", "loop_when: calls_expected")},
    "phase": _str("the rollout phase this layer belongs to (0 raw, 1 simplification and "
                   "guidance, 2 validate-and-retry, 3 text fallback)", "phase: 1"),
}}

_PROFILE = {"type": "dict", "schema": {
    "description": _str("what the profile is for"),
    "options": {"type": "dict", **_doc("sampling options sent with every request",
                                       "options: {temperature: 0.7, top_p: 0.8}")},
    "applies_to": _str_or_list("model filters the profile runs on (default: all)",
                               "applies_to: [qwen*]"),
}}

EVAL_SCHEMA: dict[str, Any] = {
    "description": _str("what this table is for"),
    "offline": {"type": "list", "required": True, "minlength": 1, "schema": _ENTRY,
                **_doc("scripted models: one entry per dialect (and per quirk variant)")},
    "live": {"type": "list", "schema": _LIVE, **_doc("named live models (never run by "
                                                      "default)")},
    "presets": {"type": "dict", "valuesrules": {"type": "list", "schema": {"type": "string"}},
                **_doc("named model filters", "presets: {stable: [hermes, mistral]}")},
    "scenario_presets": {"type": "dict",
                         "valuesrules": {"type": "list", "schema": {"type": "string"}},
                         **_doc("named scenario lists", "scenario_presets: {smoke: [chat_only]}")},
    "strategies": {"type": "dict", "required": True, "valuesrules": _STRATEGY,
                   **_doc("the strategy matrix, in order", "raw: {description: ...}")},
    "default_strategies": _strlist("strategies run when --strategies is not given",
                                   "default_strategies: [raw, retry]"),
    "profiles": {"type": "dict", "valuesrules": _PROFILE,
                 **_doc("sampling profiles", "default: {options: {}}")},
    "signals": {"type": "dict", **_doc("how a simulated model notices what it was shown"),
                "schema": {"feedback": {**_str("regex over a tool result: the validation "
                                               "feedback with a corrected example"),
                                        "required": True}}},
    "chars_per_token": {"type": "number", "min": 1,
                        **_doc("token estimate when a provider reports none",
                               "chars_per_token: 4")},
}

KIND_SCHEMAS: dict[str, dict[str, Any]] = {"scenario": SCENARIO_SCHEMA}
TABLE_SCHEMAS: dict[str, dict[str, Any]] = {"eval": EVAL_SCHEMA}
