"""Round trips under Hypothesis: for every provider, build_request -> parse_request gives the
conversation and the tools back (up to what the provider declares lossy), and schema
transforms never produce a schema the provider rejects."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolrules import Message, SchemaError, Tool, ToolCall
from toolrules.golden._providers import canonical_messages

PROVIDERS = ["openai", "openai-responses", "anthropic", "gemini", "gemini-jsonschema", "bedrock",
             "ollama", "mistral", "cohere", "together", "groq", "fireworks", "openrouter",
             "deepseek", "vllm", "sglang", "llamacpp", "lmstudio"]

names = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True)
texts = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8)
arguments = st.dictionaries(st.text(min_size=1, max_size=10), json_values, max_size=4)

# A canonical schema subset every provider carries unchanged (no strictness applied).
leaf_schema = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "number", "boolean"])},
                          optional={"description": texts}),
    st.fixed_dictionaries({"type": st.just("string"),
                           "enum": st.lists(texts, min_size=1, max_size=4, unique=True)}),
)


def _object(props):
    return st.builds(lambda p, req: {"type": "object", "properties": p,
                                     **({"required": sorted(set(req) & set(p))} if set(req) & set(p) else {})},
                     st.just(props), st.lists(st.sampled_from(sorted(props) or ["_"]), max_size=3))


schema_tree = st.recursive(
    leaf_schema,
    lambda inner: st.one_of(
        st.dictionaries(names, inner, min_size=1, max_size=4).flatmap(_object),
        st.builds(lambda s: {"type": "array", "items": s}, inner)),
    max_leaves=10)
root_schemas = st.dictionaries(names, schema_tree, max_size=5).flatmap(_object)
tools_st = st.lists(st.builds(lambda n, d, p: Tool(n, d, p), names, texts, root_schemas),
                    min_size=1, max_size=4, unique_by=lambda t: t.name)


@st.composite
def conversations(draw):
    msgs = []
    if draw(st.booleans()):
        msgs.append(Message("system", draw(texts)))
    counter = 0
    for _ in range(draw(st.integers(1, 3))):
        msgs.append(Message("user", draw(texts)))
        n_calls = draw(st.integers(0, 3))
        calls = []
        for _ in range(n_calls):
            counter += 1
            call_id = draw(st.one_of(st.just(f"call_{counter}"),
                                     st.from_regex(r"[A-Za-z0-9_]{1,20}", fullmatch=True)))
            if any(c.id == call_id for m in msgs for c in m.tool_calls) or \
                    any(c.id == call_id for c in calls):
                call_id = f"dup_{counter}"
            calls.append(ToolCall(call_id, draw(names), draw(arguments)))
        # turns alternate (providers that merge consecutive same-role turns cannot split
        # them again), so an assistant turn without calls has text
        text = draw(st.one_of(st.none(), texts)) if calls else draw(texts)
        msgs.append(Message("assistant", text, tool_calls=tuple(calls)))
        for c in calls:
            error = draw(st.booleans())
            content = draw(texts) if error else draw(st.one_of(texts, st.just(json.dumps({"ok": 1}))))
            msgs.append(Message("tool", content, tool_call_id=c.id, name=c.name, is_error=error))
        if calls:
            msgs.append(Message("assistant", draw(texts)))
    return msgs


@pytest.mark.parametrize("provider", PROVIDERS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(convo=conversations(), tools=tools_st)
def test_request_round_trip(engine, provider, convo, tools):
    prov = engine.provider_rules(provider)
    body = engine.build_request(provider, "m-1", convo, tools=tools, tool_choice="auto", strict=False)
    body = json.loads(json.dumps(body))  # it is plain JSON
    back, back_tools, choice = engine.parse_request(body, provider)
    assert canonical_messages(back, prov.lossy) == canonical_messages(convo, prov.lossy)
    assert [(t.name, t.description) for t in back_tools] == [(t.name, t.description) for t in tools]
    for sent, got in zip(tools, back_tools):
        if not sent.parameters.get("properties") and provider.startswith("gemini"):
            continue  # sent without parameters at all
        assert got.parameters == sent.parameters, provider
    assert choice in ("auto", None)


def _gemini_ok(schema, path="$"):
    allowed = {"type", "format", "description", "nullable", "enum", "items", "properties",
               "required", "minItems", "maxItems", "minimum", "maximum", "anyOf", "minLength",
               "maxLength", "pattern", "minProperties", "maxProperties", "propertyOrdering"}
    assert isinstance(schema, dict), path
    assert set(schema) <= allowed, (path, set(schema) - allowed)
    if "type" in schema:
        assert schema["type"] in {"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"}, path
    if "enum" in schema:
        assert all(isinstance(v, str) for v in schema["enum"]) and schema.get("type") == "STRING", path
    if schema.get("type") == "OBJECT" and path != "$":
        assert schema.get("properties"), path  # Gemini rejects empty object schemas
    if schema.get("type") == "ARRAY":
        assert "items" in schema, path
    for name in schema.get("required", []):
        assert name in schema.get("properties", {}), path
    for k, sub in (schema.get("properties") or {}).items():
        _gemini_ok(sub, f"{path}.{k}")
    if "items" in schema:
        _gemini_ok(schema["items"], f"{path}[]")
    for i, sub in enumerate(schema.get("anyOf", [])):
        _gemini_ok(sub, f"{path}|{i}")


def _openai_strict_ok(schema, path="$"):
    keep = {"type", "description", "properties", "required", "additionalProperties", "items",
            "anyOf", "enum", "const", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
            "exclusiveMaximum", "multipleOf", "minItems", "maxItems"}
    assert set(schema) <= keep, (path, set(schema) - keep)
    types = schema.get("type")
    types = types if isinstance(types, list) else [types] if types else []
    assert types or "anyOf" in schema or "enum" in schema or "const" in schema, path
    if "object" in types:
        assert schema["additionalProperties"] is False, path
        assert schema["required"] == list(schema["properties"]), path
        for k, sub in schema["properties"].items():
            _openai_strict_ok(sub, f"{path}.{k}")
    if "items" in schema:
        _openai_strict_ok(schema["items"], f"{path}[]")
    for i, sub in enumerate(schema.get("anyOf", [])):
        _openai_strict_ok(sub, f"{path}|{i}")


# Messy real-world schemas: aliases, $refs, type arrays, const, allOf, defaults, titles,
# integer enums, free-form objects, untyped values, formats.
messy_leaf = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "int", "float", "bool", "String",
                                                    "number", "any", "dict", "list"])},
                          optional={"description": texts, "title": texts, "default": json_values,
                                    "format": st.sampled_from(["date", "email", "uuid", "int64"]),
                                    "minLength": st.integers(0, 5), "examples": st.lists(json_values, max_size=2)}),
    st.fixed_dictionaries({"enum": st.lists(st.one_of(st.integers(), texts, st.booleans()), min_size=1,
                                            max_size=4, unique_by=lambda v: json.dumps(v))}),
    st.fixed_dictionaries({"const": st.one_of(st.integers(), texts)}),
    st.fixed_dictionaries({"type": st.just(["string", "null"])}),
    st.just({}),
    st.just({"$ref": "#/$defs/Shared"}),
    st.just({"type": "object"}),
    st.just({"type": "array"}),
)
messy_tree = st.recursive(
    messy_leaf,
    lambda inner: st.one_of(
        st.builds(lambda p, extra: {"type": "object", "properties": p, **extra},
                  st.dictionaries(names, inner, min_size=1, max_size=4),
                  st.fixed_dictionaries({}, optional={"additionalProperties": st.booleans(),
                                                      "required": st.lists(names, max_size=2)})),
        st.builds(lambda s: {"type": "array", "items": s}, inner),
        st.builds(lambda a: {"anyOf": a}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda a: {"oneOf": a}, st.lists(inner, min_size=2, max_size=2)),
        st.builds(lambda a: {"allOf": [a]}, inner)),
    max_leaves=12)
messy_roots = st.builds(
    lambda p, req: {"type": "object", "properties": p, "required": req,
                    "$defs": {"Shared": {"type": "object", "properties": {"v": {"type": "integer", "enum": [1, 2]}}}}},
    st.dictionaries(names, messy_tree, max_size=5), st.lists(names, max_size=3))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=messy_roots)
def test_gemini_never_receives_a_keyword_it_rejects(engine, schema):
    from google.genai import types

    wire = engine.translate_tools([Tool("t", "d", schema)], "gemini")[0]["functionDeclarations"][0]
    if "parameters" in wire:
        _gemini_ok(wire["parameters"])
        types.Schema.model_validate(wire["parameters"])  # and the SDK agrees
    types.FunctionDeclaration.model_validate(wire)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=messy_roots)
def test_openai_strict_is_valid_or_a_clear_error(engine, schema):
    tool = Tool("t", "d", schema)
    try:
        wire = engine.translate_tools([tool], "openai", strict=True)[0]["function"]
    except SchemaError as exc:
        assert str(exc).startswith("tool 't': $")  # says which tool and where
        auto = engine.translate_tools([tool], "openai")[0]["function"]
        assert "strict" not in auto  # auto mode falls back to the plain schema
        return
    assert wire["strict"] is True
    assert wire["parameters"]["type"] == "object"
    _openai_strict_ok(wire["parameters"])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=messy_roots, provider=st.sampled_from(["anthropic", "bedrock", "ollama", "cohere", "mistral",
                                                     "openai-responses", "gemini-jsonschema"]))
def test_every_provider_translates_messy_schemas(engine, schema, provider):
    wire = engine.translate_tools([Tool("t", "d", schema)], provider)
    text = json.dumps(wire)
    assert '"type": "int"' not in text and '"type": "dict"' not in text  # aliases normalized
    if provider == "ollama":
        assert "$ref" not in text  # Ollama cannot resolve references
