"""Call validation, retry feedback with a corrected example call
(validate-and-retry), size guards and the dispatcher envelope {ok, data, warnings,
errors}."""

from __future__ import annotations

import json

import pytest

from toolrules import (
    Capability,
    ParsedResponse,
    SchemaError,
    Tool,
    ToolCall,
    UnknownRuleError,
    dispatch_tool_call,
    format_validation_errors_for_retry,
    validate_tool_call,
    validate_tool_calls,
)

EVENT = Tool("create_event", "Create a calendar event.", {
    "type": "object",
    "$defs": {"attendee": {
        "type": "object",
        "properties": {"email": {"type": "string", "format": "email"},
                       "optional": {"type": "boolean"}},
        "required": ["email"], "additionalProperties": False}},
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "start": {"type": "string", "format": "date-time"},
        "duration_minutes": {"type": "integer", "minimum": 5, "maximum": 480},
        "priority": {"type": "string", "enum": ["low", "normal", "high"]},
        "attendees": {"type": "array", "items": {"$ref": "#/$defs/attendee"}},
        "location": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "reminder": {"anyOf": [{"type": "integer"},
                               {"type": "object", "properties": {"minutes": {"type": "integer"}},
                                "required": ["minutes"]}]},
    },
    "required": ["title", "start"],
    "additionalProperties": False,
})
READ = Tool("read_file", "Read a file.", {"type": "object", "properties": {
    "path": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["path"]})
TOOLS = [EVENT, READ]
GOOD = {"title": "Standup", "start": "2024-05-01T09:00:00Z"}


def by_param(errors):
    return {e.parameter: e for e in errors}


def test_valid_call_has_no_errors():
    assert validate_tool_call(ToolCall("1", "create_event", GOOD), TOOLS) == []
    full = {**GOOD, "duration_minutes": 30, "priority": "high", "location": None,
            "attendees": [{"email": "a@b.co"}], "reminder": {"minutes": 5}}
    assert validate_tool_call({"name": "create_event", "arguments": full}, TOOLS) == []


def test_structured_errors_through_ref_anyof_and_formats():
    args = {**GOOD, "start": "tomorrow 9am", "duration_minutes": 500, "priority": "urgent",
            "attendees": [{"email": "not-an-email"}], "location": 3, "reminder": {"mins": 5}}
    errors = by_param(validate_tool_call({"name": "create_event", "arguments": args}, TOOLS))
    assert set(errors) == {"start", "duration_minutes", "priority", "attendees[0].email",
                           "location", "reminder.minutes"}
    e = errors["start"]
    assert (e.tool_name, e.code, e.expected, e.received) == \
        ("create_event", "format", "string in format date-time", '"tomorrow 9am"')
    assert "2024-01-31T12:00:00Z" in e.suggestion
    assert errors["duration_minutes"].expected == "<= 480"
    assert errors["priority"].suggestion == 'Use one of: "low", "normal", "high"'
    assert errors["attendees[0].email"].path == ("attendees", 0, "email")
    assert errors["attendees[0].email"].code == "format"
    assert errors["location"].expected == "a string or null"
    assert errors["reminder.minutes"].code == "required_misspelled"
    assert errors["reminder.minutes"].suggestion == "Rename 'mins' to 'minutes'"


def test_missing_and_unknown_parameters():
    errors = by_param(validate_tool_call(
        {"name": "create_event", "arguments": {"titel": "x", "colour": "red"}}, TOOLS))
    assert errors["title"].code == "required_misspelled"  # one error, not also "unknown titel"
    assert "titel" not in errors
    assert errors["start"].error == "Missing required parameter: start"
    assert errors["start"].expected == "a string (date-time)"
    assert errors["colour"].error == "Unknown parameter: colour"
    # extra parameters are fine when the schema allows them
    assert validate_tool_call({"name": "read_file", "arguments": {"path": "a", "x": 1}},
                              TOOLS) == []


def test_unknown_tool_gets_the_closest_offered_names():
    [e] = validate_tool_call({"name": "read_fiel", "arguments": {}}, TOOLS)
    assert e.code == "unknown_tool" and e.suggestion == "Use one of the offered tools: read_file"
    [e] = validate_tool_call({"name": "fs_read_file", "arguments": {}}, TOOLS)
    assert "read_file" in e.suggestion
    [e] = validate_tool_call({"name": "zzz", "arguments": {}}, TOOLS)
    assert "create_event, read_file" in e.suggestion


def test_argument_shapes():
    [e] = validate_tool_call({"name": "read_file", "arguments": "[1, 2]"}, TOOLS)
    assert e.code == "arguments_not_object"
    [e] = validate_tool_call({"name": "read_file", "arguments": "{not json"}, TOOLS)
    assert e.code == "arguments_not_object" and e.received == '"{not json"'
    openai_shape = {"id": "c1", "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "x"}'}}
    assert validate_tool_call(openai_shape, TOOLS) == []
    assert validate_tool_call({"name": "read_file", "input": {"path": "x"}}, READ) == []


def test_coercion_is_opt_in_and_schema_driven(engine):
    call = {"name": "create_event", "arguments": {**GOOD, "duration_minutes": "30"}}
    [e] = engine.validate_tool_call(call, TOOLS)
    assert (e.code, e.expected, e.received) == ("type", "an integer", '"30"')
    result = engine.check_tool_call(call, TOOLS, coerce=True)
    assert result.ok and result.call.arguments["duration_minutes"] == 30
    assert result.coercions == ('duration_minutes: "30" -> 30 (string-to-integer)',)
    assert call["arguments"]["duration_minutes"] == "30"  # the input is not mutated
    only = engine.check_tool_call(call, TOOLS, coerce=["string-to-boolean"])
    assert not only.ok
    # "3" stays a string where the schema says string; text that is no integer stays
    result = engine.check_tool_call({"name": "create_event", "arguments": {
        **GOOD, "title": "3", "duration_minutes": "thirty"}}, TOOLS, coerce=True)
    assert result.call.arguments["title"] == "3"
    assert [e.parameter for e in result.errors] == ["duration_minutes"]
    # inside anyOf and $ref'd items
    result = engine.check_tool_call({"name": "create_event", "arguments": {
        **GOOD, "reminder": "15", "attendees": [{"email": "a@b.co", "optional": "true"}]}},
        TOOLS, coerce=True)
    assert result.ok, result.errors
    assert result.call.arguments["reminder"] == 15
    assert result.call.arguments["attendees"][0]["optional"] is True
    with pytest.raises(UnknownRuleError, match="unknown coercion 'str-to-int'"):
        engine.check_tool_call(call, TOOLS, coerce=["str-to-int"])


def test_schema_problems():
    bad = Tool("bad", "", {"type": "object", "properties": {"a": {"type": "strin"}}})
    with pytest.raises(SchemaError, match=r"invalid tool schema at properties\.a\.type"):
        validate_tool_call({"name": "bad", "arguments": {"a": 1}}, [bad])
    dangling = Tool("dangling", "", {"type": "object", "properties": {
        "a": {"$ref": "#/$defs/missing"}}})
    [e] = validate_tool_call({"name": "dangling", "arguments": {"a": 1}}, [dangling])
    assert e.code == "unresolvable_ref"


def test_validate_tool_calls_splits_valid_and_invalid():
    valid, errors = validate_tool_calls([ToolCall("1", "read_file", {"path": "a"}),
                                         ToolCall("2", "read_file", {})], TOOLS)
    assert [c.id for c in valid] == ["1"] and [e.parameter for e in errors] == ["path"]


# ---------------------------------------------------------------- retry feedback

def feedback_example(text: str) -> dict:
    line = text.split("Try this instead:\n", 1)[1].splitlines()[0]
    return json.loads(line)


def test_feedback_lists_errors_and_a_valid_corrected_call():
    call = {"name": "create_event", "arguments": {
        "titel": "Standup", "start": "tomorrow", "duration_minutes": "30", "priority": "urgent",
        "attendees": [{"email": "bob@example.com"}]}}
    errors = validate_tool_call(call, TOOLS)
    text = format_validation_errors_for_retry(errors, call, TOOLS)
    assert text.startswith("Tool call validation failed. Please fix these issues:")
    assert "• create_event.priority: Value \"urgent\" is not one of the allowed values" in text
    assert "  → Use one of: \"low\", \"normal\", \"high\"" in text
    assert "(expected: an integer, got: \"30\")" in text
    example = feedback_example(text)
    assert example["name"] == "create_event"
    fixed = example["arguments"]
    assert validate_tool_call({"name": "create_event", "arguments": fixed}, TOOLS) == []
    # what was right is kept; what was wrong is replaced or coerced
    assert fixed["title"] == "Standup" and fixed["duration_minutes"] == 30
    assert fixed["attendees"] == [{"email": "bob@example.com"}]
    assert fixed["priority"] == "low" and fixed["start"] == "2024-01-31T12:00:00Z"
    assert text.endswith("Please try the tool call again with corrected arguments.")


def test_feedback_for_an_unknown_tool_suggests_the_close_one():
    call = {"name": "read_fil", "arguments": {"path": "a.txt"}}
    text = format_validation_errors_for_retry(validate_tool_call(call, TOOLS), call, TOOLS)
    assert feedback_example(text) == {"name": "read_file", "arguments": {"path": "a.txt"}}


def test_feedback_example_in_the_models_emulation_format(engine):
    call = {"name": "read_file", "arguments": {"limit": 5}}
    errors = engine.validate_tool_call(call, TOOLS)
    xml = engine.format_validation_errors_for_retry(
        errors, call, TOOLS, capability=Capability(emulation_style="xml"))
    assert "<tool_call>\n<name>read_file</name>\n<arguments>\n<limit>5</limit>\n" \
           "<path>/path/to/file.txt</path>\n</arguments>\n</tool_call>" in xml
    native = engine.format_validation_errors_for_retry(
        errors, call, TOOLS, capability=Capability(native_tools=True))
    assert feedback_example(native)["arguments"] == {"limit": 5, "path": "/path/to/file.txt"}
    assert engine.format_validation_errors_for_retry([], call, TOOLS) == ""


def test_check_tool_calls_honours_validate_retry(engine):
    response = ParsedResponse(tool_calls=(ToolCall("1", "read_file", {"path": "a"}),
                                          ToolCall("2", "read_file", {"path": 3})))
    check = engine.check_tool_calls(response, TOOLS, capability=Capability(validate_retry=True))
    assert [c.id for c in check.calls] == ["1"] and check.retry
    assert "read_file.path: Expected a string, got an integer" in check.feedback
    off = engine.check_tool_calls(response, TOOLS, capability=Capability())
    assert not off.retry and off.feedback is None and len(off.errors) == 1
    last = engine.check_tool_calls(response, TOOLS, capability=Capability(validate_retry=True),
                                   attempt=3)
    assert not last.retry


def test_validate_with_retry_loop(engine):
    answers = iter([[ToolCall("1", "read_file", {"path": 3})],
                    [ToolCall("2", "read_file", {"path": "ok.txt"})]])
    seen = []

    def generate(feedback):
        seen.append(feedback)
        return next(answers)

    check = engine.validate_with_retry(generate, TOOLS,
                                       capability=Capability(validate_retry=True))
    assert check.ok and check.attempt == 2 and [c.id for c in check.calls] == ["2"]
    assert seen[0] is None and "Expected a string" in seen[1]
    once = engine.validate_with_retry(lambda fb: [ToolCall("1", "read_file", {})], TOOLS,
                                      capability=Capability())
    assert not once.ok and once.attempt == 1


# ---------------------------------------------------------------- dispatcher envelope

def test_dispatch_ok_and_errors(engine):
    funcs = {"read_file": lambda path, limit=None: f"contents of {path}"}
    env = dispatch_tool_call({"name": "read_file", "arguments": '{"path": "a.txt"}'}, TOOLS, funcs)
    assert env.to_dict() == {"ok": True, "data": "contents of a.txt", "warnings": [], "errors": []}
    env = engine.dispatch_tool_call({"name": "read_fil", "arguments": {}}, TOOLS, funcs)
    assert not env.ok and env.errors[0]["code"] == "UNKNOWN_TOOL"
    assert env.errors[0]["details"]["closest"] == ["read_file"]
    env = engine.dispatch_tool_call({"name": "read_file", "arguments": {"path": 1}}, TOOLS, funcs)
    err = env.errors[0]
    assert err["code"] == "INVALID_ARGUMENTS" and err["category"] == "validation"
    assert err["details"]["errors"][0]["parameter"] == "path"
    assert "Try this instead:" in err["suggested_fix"]
    env = engine.dispatch_tool_call({"name": "read_file", "arguments": {"path": "1"}}, TOOLS,
                                    lambda name, args: open("/no/such/file"))  # noqa: SIM115
    assert env.errors[0]["code"] == "NOT_FOUND" and env.errors[0]["retry_strategy"] == "rephrase"
    env = engine.dispatch_tool_call({"name": "read_file", "arguments": {"path": "a",
                                                                        "limit": "7"}},
                                    TOOLS, lambda name, args: args["limit"] * 2, coerce=True)
    assert env.ok and env.data == 14 and env.warnings == ('limit: "7" -> 7 (string-to-integer)',)


def test_size_guards(engine):
    funcs = {"read_file": lambda path, limit=None: "x" * 300_000}
    big = {"name": "read_file", "arguments": {"path": "p" * 250_000}}
    env = engine.dispatch_tool_call(big, TOOLS, funcs)
    assert env.to_dict()["ok"] is False and env.data is None
    err = env.errors[0]
    assert err["code"] == "ARGUMENTS_TOO_LARGE" and err["details"]["limit"] == 200_000
    assert "Retry with a shorter payload" in err["message"]
    env = engine.dispatch_tool_call({"name": "read_file", "arguments": {"path": "a"}}, TOOLS, funcs)
    assert env.errors[0]["code"] == "TOOL_OUTPUT_TOO_LARGE" and env.data is None
    env = engine.dispatch_tool_call({"name": "read_file", "arguments": {"path": "a"}}, TOOLS,
                                    funcs, max_tool_output_bytes=1_000_000)
    assert env.ok
    env = engine.dispatch_tool_call({"name": "read_file", "arguments": {"path": "abc"}}, TOOLS,
                                    funcs, max_tool_args_bytes=10)
    assert env.errors[0]["code"] == "ARGUMENTS_TOO_LARGE"
    assert json.loads(env.to_json())["errors"][0]["details"]["bytes"] == len('{"path": "abc"}')
    assert engine.guard_tool_output({"rows": [1] * 10}).ok
