"""Cerberus schema for rules/dialects/*.yaml (raw-text tool-call formats)."""

from __future__ import annotations

from typing import Any

from ._schema_kit import _bool, _doc, _str, _str_or_list, _strlist

__all__ = ["KIND_SCHEMAS", "REPAIRS"]

REPAIRS = ("trailing-commas", "single-quotes", "unquoted-keys", "python-literals",
           "missing-final-brace", "function-key", "args-key", "parameters-key",
           "double-wrapped-arguments", "arguments-json-string", "markdown-escapes",
           "arguments-parameter", "missing-final-bracket", "unbalanced-quotes")

_MARKERS = {"type": ["string", "list"], "schema": {"type": "string", "empty": False},
            "empty": False}


def _markers(doc: str, example: str) -> dict[str, Any]:
    return {**_MARKERS, **_doc(doc, example)}


_FIELDS = {
    "type": "dict", **_doc("where a JSON call object keeps its parts (first key present wins; "
                           "dotted paths descend)",
                           "fields: {name: [name], arguments: [arguments, parameters]}"),
    "schema": {
        "name": _strlist("keys holding the tool name", "name: [name, function]"),
        "arguments": _strlist("keys holding the arguments", "arguments: [arguments, parameters]"),
        "id": _strlist("keys holding a call id", "id: [id, tool_call_id]"),
        "calls": _strlist("keys holding a list of call objects (the value is a wrapper "
                          "around the calls)", "calls: [tool_calls]"),
    },
}

_PARAM = {
    "type": "dict",
    **_doc("tagged key/value parameters whose values are text",
           "param: {open: '<parameter=', key_until: '>', close: '</parameter>'}"),
    "schema": {
        "open": {**_markers("marker that starts a parameter", "open: '<parameter='"),
                 "required": True},
        "key_until": {**_markers("marker ending the key part", "key_until: '>'"),
                      "required": True},
        "key_pattern": _str("regex over the key part; groups key (required) and type",
                            "key_pattern: 'name=\"(?P<key>[^\"]*)\"'"),
        "nest": {"type": "dict",
                 **_doc("a whole call written inside a value (a file whose content shows "
                        "the format): `open`, a name up to `until`, then blanks and one of "
                        "`then` begin it; up to its `close` (counted when they nest) every "
                        "marker is text of the value",
                        "nest: {open: '<function=', until: '>', then: ['<parameter='], "
                        "close: '</function>'}"),
                 "schema": {"open": {**_str("marker that begins the call inside the value"),
                                     "required": True},
                            "until": {**_str("marker that ends its name"), "required": True},
                            "then": {**_strlist("what may follow the name (after blanks)"),
                                     "required": True},
                            "close": {**_str("marker that ends it"), "required": True}}},
        "value_open": _markers("marker before the value (after the key)",
                               "value_open: '<arg_value>'"),
        "close": {**_markers("marker ending the value; {key} stands for the key",
                             "close: '</parameter>'"), "required": True},
        "close_optional": {"type": ["boolean", "string"], "allowed": [True, False, "call", "param"],
                           **_doc("a value may lack its close marker: true = the next parameter "
                                  "or the call's end ends it; call / param = only that one",
                                  "close_optional: call")},
        "confirm": _strlist("a close marker only counts when one of these follows it "
                            "(otherwise it is text inside the value)",
                            "confirm: ['<|open|>argument']"),
        "confirm_end": _strlist("with close_optional: the call's close marker inside a value "
                                "ends the value only when one of these (or the end of the "
                                "output) follows it; otherwise it is text inside the value",
                                "confirm_end: ['</tool_call>', '<function=']"),
        "trim": _str("whitespace removed around a value", "trim: newline",
                     allowed=["none", "newline", "strip"]),
        "types": {"type": "dict", "keysrules": {"type": "string"},
                  "valuesrules": {"type": "string", "allowed": ["string", "json"]},
                  **_doc("type attribute value -> how to read the text",
                         "types: {'true': string, 'false': json}")},
        "unescape": _str("decode entities in keys", "unescape: xml", allowed=["xml"]),
    },
}

_PAYLOAD = {
    "type": "dict",
    **_doc("how the call's content is read", "payload: {kind: json}"),
    "schema": {
        "kind": {**_str("json, params, grammar or none", "kind: json",
                        allowed=["json", "params", "grammar", "none"]), "required": True},
        "fields": _FIELDS,
        "name_as_key": _bool("each call object is {NAME: arguments}"),
        "array": _bool("a JSON array holds several calls"),
        "separator": {"type": ["string", "list"], "schema": {"type": "string", "empty": False},
                      **_doc("text between several values (whitespace around it is skipped); "
                             "a separator that is whitespace ('\\n') means values may follow "
                             "one another on new lines", "separator: [',', '\\n']")},
        "head": _str("regex: a value may begin with this text before its opening bracket "
                     "(a grammar payload's function name)", "head: '[A-Za-z_][\\w.]*'"),
        "rest": _str("what follows the last complete value when it is not another value "
                     "(calls without a close marker): malformed (default: the call is text) "
                     "or text (the complete values are calls, the rest is text)",
                     "rest: text", allowed=["malformed", "text"]),
        "restart": _str("adjacent: an opening bracket right after a closed value inside a "
                        "JSON payload, with no comma or colon between ('{\"a\": {...} {'), "
                        "breaks the payload there: the broken value is text (with a "
                        "warning) and what begins at the bracket is read again, so a call "
                        "object after a broken one missing its closing brace is read",
                        "restart: adjacent", allowed=["adjacent"]),
        "fence": _bool("accept a ```json fence around the payload"),
        "suffix": _str("literal skipped after the payload", "suffix: '```'"),
        "param": _PARAM,
        "json": _bool("a params payload may be a JSON object instead (arguments, or a whole "
                      "call when the header is skipped)"),
        "grammar": _str("a Lark grammar in grammars/", "grammar: pythonic.lark"),
        "strings": {"type": "list", **_doc("string delimiters: [open, close, backslash-escapes]",
                                           "strings: [['\"', '\"', true]]"),
                    "schema": {"type": "list", "minlength": 3, "maxlength": 3}},
        "brackets": _str("bracket characters that nest", "brackets: '()[]{}'"),
        "starts": _str("characters a payload may start with", "starts: '['"),
        "until_close": _bool("a grammar payload runs to the call's close marker (not bracketed)"),
        "json_values": {"type": ["boolean", "string"], "allowed": [True, False, "lists"],
                        **_doc("true: the grammar reads JSON lists and dicts as JSON does, "
                               "so values written as plain JSON are read by the JSON decoder "
                               "(the same values, much faster); lists: only lists of "
                               "numbers, booleans and nulls (a grammar with its own string "
                               "and object syntax)", "json_values: true")},
        "search": _str("offered: when the payload does not read as calls (a block of code), "
                       "call lists inside it whose calls all name offered tools are read",
                       "search: offered", allowed=["offered"]),
    },
}

_CALL = {
    "type": "dict",
    "schema": {
        "name": _str("a label used in diagnostics"),
        "open": {**_markers("marker(s) that start a call; omit for calls recognized at the "
                            "start of the content", "open: '<tool_call>'"), "nullable": True},
        "at": _str("where a call without an open marker may begin", "at: start",
                   allowed=["start", "anywhere"]),
        "names": _str("offered: a lenient shape whose calls count only when every one names "
                      "an offered tool; otherwise its text stays text, silently",
                      "names: offered", allowed=["offered"]),
        "in": _str_or_list("regions where the open marker is active: content and/or section "
                           "names", "in: [calls]"),
        "close": {**_markers("marker(s) that end a call", "close: '</tool_call>'"),
                  "nullable": True},
        "header": {
            "type": "dict",
            **_doc("text between the open marker and the payload, naming the tool",
                   "header: {until: '[ARGS]', pattern: '^(?P<name>.+)$'}"),
            "schema": {
                "until": {**_markers("marker(s) ending the header", "until: '[ARGS]'"),
                          "required": True},
                "keep": {"type": ["boolean", "string", "list"],
                         "schema": {"type": "string", "empty": False},
                         **_doc("the until marker is not consumed (it starts the payload): "
                                "true for every until marker, or the markers that are kept",
                                "keep: ['{']")},
                "pattern": _str("regex over the header; groups name, id, self_close",
                                "pattern: '^\\s*(?P<name>[\\w.-]+)\\s*$'"),
                "optional": _bool("no header when the payload starts at once"),
                "text": _bool("the header is prose written before the payload, not a name "
                              "(the payload names the tool): content when the call is read, "
                              "text of the call otherwise"),
                "in_payload": _bool("the header, from the open marker on, is also the start "
                                    "of the payload (a call list's first name, checked "
                                    "before the list is read); its name is not the tool's"),
                "breaks": _strlist("markers that cannot stand in a header before its end "
                                   "marker: the call is not a call; it is dropped, with a "
                                   "warning, through its close marker or up to the next "
                                   "call (given back as text if neither comes)",
                                   "breaks: ['\n', '<']"),
                "unescape": _str("decode entities in captured values", "unescape: xml",
                                 allowed=["xml"]),
                "chars": _str("regex class body: the characters a header may hold; any other "
                              "character means this is no call (a call `at: start` begins "
                              "only with one of them)", "chars: '\\w.\\-'"),
            },
        },
        "payload": {**_PAYLOAD, "required": True},
    },
}

_ROUTE = {
    "type": "dict",
    "schema": {
        "match": {**_str("regex searched in the header text", "match: 'to=functions\\.'"),
                  "required": True},
        "to": {**_str("what the message body is", "to: reasoning",
                      allowed=["content", "reasoning", "drop", "call"]), "required": True},
        "end": _markers("markers ending this body (default: the messages' end markers)",
                        "end: ['<|end|>']"),
        "payload": _PAYLOAD,
    },
}

DIALECT_SCHEMA: dict[str, Any] = {
    "id": {**_str("the dialect id; equals the file stem", "id: hermes"), "required": True},
    "description": _str("what format this is and which models write it"),
    "default_prompt": _str("generation prompt assumed when the caller gives none",
                           "default_prompt: \"<|im_start|>assistant\\n\""),
    "strip": _bool("strip whitespace at the edges of content and reasoning (default true)"),
    "reasoning": {
        "type": "list", **_doc("reasoning blocks"),
        "schema": {"type": "dict", "schema": {
            "open": {**_markers("opening marker(s)", "open: '<think>'"), "required": True},
            "close": {**_markers("closing marker(s)", "close: '</think>'"), "required": True},
            "calls": _str("whether calls inside reasoning count", "calls: unclosed",
                          allowed=["never", "unclosed", "always"]),
            "implicit": _bool("text before a closing marker with no opening one is reasoning "
                              "(also when the generation prompt opened it): without a "
                              "closing marker the reply is content"),
            "cut_off": _str("with implicit: what text without a closing marker is when the "
                            "output was cut off (finish_reason length)", "cut_off: reasoning",
                            allowed=["content", "reasoning"]),
        }},
    },
    "drop": _strlist("markers removed from text (stop tokens, wrappers)",
                     "drop: ['<|im_end|>']"),
    "sections": {
        "type": "list", **_doc("containers that hold calls"),
        "schema": {"type": "dict", "schema": {
            "name": {**_str("section name (for calls' `in`)", "name: calls"), "required": True},
            "open": {**_markers("opening marker(s)", "open: '<｜tool▁calls▁begin｜>'"),
                     "required": True},
            "close": _markers("closing marker(s)", "close: '<｜tool▁calls▁end｜>'"),
            "text": _str("what text inside the section outside calls is: content (kept, "
                         "with a warning) or drop (template noise)", "text: drop",
                         allowed=["content", "drop"]),
        }},
    },
    "calls": {"type": "list", "schema": _CALL, **_doc("the call shapes of this format")},
    "messages": {
        "type": "dict",
        **_doc("header-routed messages (a header names a channel or recipient)"),
        "schema": {
            "start": {**_markers("marker starting a message header", "start: '<|start|>'"),
                      "required": True},
            "header_end": {**_markers("marker ending the header", "header_end: '<|message|>'"),
                           "required": True},
            "end": _markers("markers ending a message body", "end: ['<|end|>']"),
            "outside": _str("what text outside any message is", "outside: content",
                            allowed=["content", "drop"]),
            "routes": {"type": "list", "schema": _ROUTE, "required": True,
                       **_doc("ordered header routes; the first match decides")},
        },
    },
    "repairs": {"type": "list", "schema": {"type": "string", "allowed": list(REPAIRS)},
                **_doc("repairs allowed for this format", "repairs: [trailing-commas]")},
    "dedupe": {"type": ["boolean", "string"], "allowed": [True, False, "repeats", "first"],
               **_doc("true: drop a call identical to an earlier one; repeats: a call list "
                      "that repeats an earlier one call for call is text (a model restating "
                      "its calls), not more calls; first: only the first complete call list "
                      "is read, every later one is text (a model restating its calls or "
                      "rambling on with more lists), with a warning", "dedupe: repeats")},
    "decline": _strlist("tool names that mean \"no call\" (a decline idiom): such a call "
                        "is dropped with a warning unless a tool of that name is offered",
                        "decline: [no_function]"),
    "template": _str("emulation template that asks for this format", "template: emulation/hermes.j2"),
    "notes": _str("free text"),
}

KIND_SCHEMAS = {"dialect": DIALECT_SCHEMA}

HEURISTICS_SCHEMA: dict[str, Any] = {
    "description": _str("what these patterns are for"),
    "patterns": {
        "type": "list", **_doc("regexes over prose; group `name` must be an offered tool"),
        "schema": {"type": "dict", "schema": {
            "pattern": {**_str("regex with a (?P<name>...) group",
                               "pattern: 'use the (?P<name>\\w+) tool'"), "required": True},
            "arguments": {"type": "dict", "keysrules": {"type": "string"},
                          "valuesrules": {"type": "string"},
                          **_doc("regex group -> parameter name", "arguments: {path: path}")},
            "note": _str("why"),
        }},
    },
}

TABLE_SCHEMAS = {"heuristics": HEURISTICS_SCHEMA}
