"""The schema transform vocabulary: each op, the restore steps that put
returned arguments back into the original shape, and parameter validation."""

from __future__ import annotations

import pytest

from toolrules import SchemaError
from toolrules.providers._transforms import OPS, compile_pipeline, validate_step


def run(ops, schema, description="d", name="t"):
    return compile_pipeline(ops).run(name, description, schema)


def obj(props, required=None, **extra):
    out = {"type": "object", "properties": props, **extra}
    if required is not None:
        out["required"] = required
    return out


# ---------------------------------------------------------------- type aliases

@pytest.mark.parametrize("alias,want", [
    ("dict", "object"), ("float", "number"), ("tuple", "array"), ("String", "string"),
    ("int", "integer"), ("bool", "boolean"), ("list", "array"), ("str", "string"),
    ("Number", "number"), ("NoneType", "null"),
])
def test_type_aliases(alias, want):
    out = run(["type_aliases"], obj({"x": {"type": alias}})).parameters
    assert out["properties"]["x"]["type"] == want


def test_type_alias_any_removes_type_and_generics_get_items():
    out = run(["type_aliases"], obj({"a": {"type": "any"}, "b": {"type": "List[str]"},
                                     "c": {"type": ["int", "None"]}})).parameters
    assert out["properties"]["a"] == {}
    assert out["properties"]["b"] == {"type": "array", "items": {"type": "string"}}
    assert out["properties"]["c"]["type"] == ["integer", "null"]


def test_unknown_type_is_a_clear_error():
    with pytest.raises(SchemaError, match=r"tool 't': \$.properties.x: unknown type 'frob'"):
        run(["type_aliases"], obj({"x": {"type": "frob"}}))
    out = run([{"op": "type_aliases", "aliases": {"frob": "string"}}], obj({"x": {"type": "frob"}}))
    assert out.parameters["properties"]["x"]["type"] == "string"


# ---------------------------------------------------------------- root, refs

def test_ensure_object_root_adds_type_and_properties():
    assert run(["ensure_object_root"], {}).parameters == {"type": "object", "properties": {}}
    assert run(["ensure_object_root"], {"properties": {"a": {"type": "string"}}}).parameters["type"] == "object"


def test_ensure_object_root_wraps_a_non_object_root():
    t = run([{"op": "ensure_object_root", "wrap_key": "text"}], {"type": "string"})
    assert t.parameters == {"type": "object", "properties": {"text": {"type": "string"}},
                            "required": ["text"]}
    assert t.restore({"text": "hi"}) == {"text": "hi"}  # arguments are always an object


def test_inline_refs_merges_siblings_and_drops_defs():
    schema = obj({"a": {"$ref": "#/$defs/A", "description": "the a"}},
                 **{"$defs": {"A": obj({"x": {"type": "integer"}})}})
    out = run(["inline_refs"], schema).parameters
    assert "$defs" not in out
    assert out["properties"]["a"] == {"type": "object", "properties": {"x": {"type": "integer"}},
                                      "description": "the a"}


def test_inline_refs_detects_cycles():
    schema = obj({"node": {"$ref": "#/$defs/Node"}}, **{"$defs": {"Node": obj(
        {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}})}})
    with pytest.raises(SchemaError, match="recursive"):
        run(["inline_refs"], schema)
    out = run([{"op": "inline_refs", "on_cycle": "object"}], schema).parameters
    inner = out["properties"]["node"]["properties"]["children"]["items"]
    assert inner["type"] == "object" and "recursive" in inner["description"]


def test_inline_refs_unresolvable_is_an_error():
    with pytest.raises(SchemaError, match="does not resolve"):
        run(["inline_refs"], obj({"a": {"$ref": "#/$defs/Missing"}}))


# ---------------------------------------------------------------- keywords

def test_drop_keywords_never_touches_property_names():
    schema = obj({"title": {"type": "string", "title": "T"}, "default": {"type": "integer", "default": 3}})
    out = run([{"op": "drop_keywords", "keywords": ["title", "default"], "describe": ["default"]}],
              schema).parameters
    assert set(out["properties"]) == {"title", "default"}
    assert out["properties"]["title"] == {"type": "string"}
    assert out["properties"]["default"] == {"type": "integer", "description": "(default: 3)"}


def test_keep_keywords_uses_title_when_there_is_no_description():
    schema = obj({"a": {"type": "string", "title": "Alpha", "minLength": 2},
                  "b": {"type": "string", "title": "B", "description": "bee"}})
    out = run([{"op": "keep_keywords", "keywords": ["type", "description", "properties"],
                "describe": ["title", "minLength"]}], schema).parameters
    assert out["properties"]["a"] == {"type": "string", "description": "Alpha (minLength: 2)"}
    assert out["properties"]["b"] == {"type": "string", "description": "bee"}


def test_drop_additional_properties_everywhere():
    schema = obj({"a": obj({}, additionalProperties=False)}, additionalProperties=False)
    out = run(["drop_additional_properties"], schema).parameters
    assert "additionalProperties" not in out and "additionalProperties" not in out["properties"]["a"]


# ---------------------------------------------------------------- nullability and unions

def test_nullable_openapi_from_type_array_anyof_and_enum():
    schema = obj({"a": {"type": ["string", "null"]},
                  "b": {"anyOf": [{"type": "integer"}, {"type": "null"}], "description": "b"},
                  "c": {"type": "string", "enum": ["x", None]}})
    out = run([{"op": "nullable", "style": "openapi"}], schema).parameters["properties"]
    assert out["a"] == {"type": "string", "nullable": True}
    assert out["b"] == {"type": "integer", "nullable": True, "description": "b"}
    assert out["c"] == {"type": "string", "enum": ["x"], "nullable": True}


@pytest.mark.parametrize("style,want", [
    ("anyof", {"anyOf": [{"type": "string"}, {"type": "null"}]}),
    ("type_array", {"type": ["string", "null"]}),
])
def test_nullable_from_openapi(style, want):
    out = run([{"op": "nullable", "style": style}], obj({"a": {"type": "string", "nullable": True}}))
    assert out.parameters["properties"]["a"] == want


def test_type_arrays_to_anyof_and_const_to_enum():
    out = run(["type_arrays_to_anyof", "const_to_enum"],
              obj({"a": {"type": ["string", "integer"]}, "b": {"type": ["string"]},
                   "c": {"const": 3}})).parameters["properties"]
    assert out["a"] == {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    assert out["b"] == {"type": "string"}
    assert out["c"] == {"enum": [3], "type": "integer"}


def test_oneof_and_allof():
    schema = obj({"a": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                  "b": {"allOf": [obj({"x": {"type": "string"}}, ["x"]), obj({"y": {"type": "integer"}})]}})
    out = run(["oneof_to_anyof", "merge_allof"], schema).parameters["properties"]
    assert out["a"] == {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    assert set(out["b"]["properties"]) == {"x", "y"} and out["b"]["required"] == ["x"]


# ---------------------------------------------------------------- enums

def test_enum_to_strings_restores_original_values():
    t = run(["enum_to_strings"], obj({"level": {"type": "integer", "enum": [1, 2, 3]},
                                      "flag": {"enum": [True, False]},
                                      "items": {"type": "array", "items": {"enum": [1.5, 2.5]}}}))
    props = t.parameters["properties"]
    assert props["level"] == {"type": "string", "enum": ["1", "2", "3"]}
    assert props["flag"]["enum"] == ["true", "false"]
    assert t.restore({"level": "2", "flag": "false", "items": ["2.5"]}) == \
        {"level": 2, "flag": False, "items": [2.5]}


def test_enum_to_description():
    out = run(["enum_to_description"], obj({"m": {"type": "string", "enum": ["a", "b"],
                                                 "description": "Mode."}})).parameters
    assert out["properties"]["m"] == {"type": "string", "description": "Mode. (one of: a, b)"}


# ---------------------------------------------------------------- fill, truncate, formats

def test_fill_missing():
    out = run([{"op": "fill_missing", "items": {"type": "string"}, "type": "string"}],
              obj({"a": {"type": "array"}, "b": {"enum": [1, 2]}, "c": {}, "d": {"properties": {}}}))
    props = out.parameters["properties"]
    assert props["a"] == {"type": "array", "items": {"type": "string"}}
    assert props["b"]["type"] == "integer" and props["c"] == {"type": "string"}
    assert props["d"]["type"] == "object"


def test_truncate_descriptions_tool_and_properties():
    t = run([{"op": "truncate_descriptions", "max": 20}],
            obj({"a": {"type": "string", "description": "word " * 20}}), description="x" * 50)
    assert len(t.description) <= 20 and t.description.endswith("...")
    assert len(t.parameters["properties"]["a"]["description"]) <= 20


def test_keep_formats_and_fix_required():
    out = run([{"op": "keep_formats", "formats": ["date-time"]}, "fix_required"],
              obj({"a": {"type": "string", "format": "email"}, "b": {"type": "string", "format": "date-time"}},
                  ["a", "a", "ghost"])).parameters
    assert out["properties"]["a"] == {"type": "string", "description": "(format: email)"}
    assert out["properties"]["b"]["format"] == "date-time"
    assert out["required"] == ["a"]


def test_type_case():
    out = run([{"op": "type_case", "case": "upper"}], obj({"a": {"type": ["string", "null"]}})).parameters
    assert out["type"] == "OBJECT" and out["properties"]["a"]["type"] == ["STRING", "NULL"]


# ---------------------------------------------------------------- schema-simplification ops

def test_remove_optional():
    out = run(["remove_optional"], obj({"a": {"type": "string"}, "b": {"type": "string"},
                                        "n": obj({"x": {"type": "string"}, "y": {"type": "string"}}, ["x"])},
                                       ["a", "n"])).parameters
    assert set(out["properties"]) == {"a", "n"}
    assert set(out["properties"]["n"]["properties"]) == {"x"}


def test_flatten_nested_and_unflatten_arguments():
    schema = obj({"query": {"type": "string"},
                  "range": obj({"start": {"type": "string"}, "end": {"type": "string"}}, ["start"]),
                  "opts": obj({"deep": obj({"on": {"type": "boolean"}}, ["on"])}),
                  "free": {"type": "object", "additionalProperties": True}},
                 ["query", "range"])
    t = run(["flatten_nested"], schema)
    props = t.parameters["properties"]
    assert set(props) == {"query", "range.start", "range.end", "opts.deep.on", "free"}
    assert t.parameters["required"] == ["query", "range.start"]
    args = {"query": "q", "range.start": "a", "range.end": "b", "opts.deep.on": True, "free": {"k": 1}}
    assert t.restore(args) == {"query": "q", "range": {"start": "a", "end": "b"},
                               "opts": {"deep": {"on": True}}, "free": {"k": 1}}


def test_free_form_objects_round_trip_as_json_text():
    t = run(["free_form_objects"], obj({"meta": {"type": "object", "description": "Extra."}}))
    assert t.parameters["properties"]["meta"]["type"] == "string"
    assert t.restore({"meta": '{"a": 1}'}) == {"meta": {"a": 1}}
    assert t.restore({"meta": "not json"}) == {"meta": "not json"}


def test_omit_empty_parameters():
    assert run(["omit_empty_parameters"], obj({})).parameters is None


# ---------------------------------------------------------------- strict mode

def test_strict_mode_rules():
    schema = obj({"city": {"type": "string", "minLength": 2, "title": "City"},
                  "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
                  "days": {"type": ["integer", "null"]},
                  "when": obj({"date": {"type": "string", "format": "date"}}, ["date"])},
                 ["city"])
    t = run(["strict"], schema)
    p = t.parameters
    assert p["additionalProperties"] is False and p["required"] == ["city", "unit", "days", "when"]
    assert p["properties"]["city"] == {"type": "string", "description": "City (minLength: 2)"}
    assert p["properties"]["unit"]["type"] == ["string", "null"]
    assert p["properties"]["unit"]["enum"] == ["c", "f", None]
    assert p["properties"]["days"]["type"] == ["integer", "null"]  # already nullable
    assert p["properties"]["when"]["additionalProperties"] is False
    assert p["properties"]["when"]["type"] == ["object", "null"]
    # optional ones the model sends as null disappear; a null for a nullable one stays
    assert t.restore({"city": "P", "unit": None, "days": None, "when": None}) == \
        {"city": "P", "days": None}


def test_strict_refuses_free_form_objects_and_untyped_schemas():
    with pytest.raises(SchemaError, match="free-form object"):
        run(["strict"], obj({"meta": {"type": "object"}}))
    with pytest.raises(SchemaError, match="without a type"):
        run(["strict"], obj({"x": {}}))
    with pytest.raises(SchemaError, match="object root"):
        run(["strict"], {"type": "string"})


def test_strict_limits_are_clear_errors():
    deep = {"type": "string"}
    for i in range(12):
        deep = obj({f"l{i}": deep}, [f"l{i}"])
    with pytest.raises(SchemaError, match="nest deeper than 10 levels"):
        run([{"op": "strict", "max_depth": 10}], deep)
    many = obj({f"p{i}": {"type": "string"} for i in range(30)})
    with pytest.raises(SchemaError, match="30 properties; strict mode allows 20"):
        run([{"op": "strict", "max_properties": 20}], many)
    enums = obj({"e": {"type": "string", "enum": [f"v{i}" for i in range(40)]}})
    with pytest.raises(SchemaError, match="enum values"):
        run([{"op": "strict", "max_enum_values": 30}], enums)


# ---------------------------------------------------------------- vocabulary and validation

def test_every_op_is_documented_with_valid_param_schemas():
    from cerberus import Validator

    for name, spec in OPS.items():
        assert spec.doc and len(spec.doc) > 20, name
        Validator(spec.params)  # the param schema itself is valid
        for key, field in spec.params.items():
            assert field.get("meta", {}).get("doc"), f"{name}.{key} needs meta.doc"


def test_validate_step_messages():
    assert validate_step("strict") == []
    assert "did you mean 'inline_refs'" in validate_step("inline_ref")[0][1]
    problems = validate_step({"op": "truncate_descriptions", "max": "ten"})
    assert problems and problems[0][0] == ("max",) and "max" in problems[0][1]
    problems = validate_step({"op": "truncate_descriptions", "max": 3, "bogus": 1})
    assert problems[0][0] == ("bogus",)
    assert validate_step({"op": "nullable", "style": "weird"})


def test_pipeline_does_not_mutate_the_input():
    import copy

    schema = obj({"a": {"type": "int", "enum": [1]}}, ["a"])
    before = copy.deepcopy(schema)
    run(["type_aliases", "enum_to_strings", "strict"], schema)
    assert schema == before


def test_non_json_parameters_are_a_schema_error():
    with pytest.raises(SchemaError, match="not JSON"):
        run(["strict"], {"type": "object", "properties": {"a": {"default": object()}}})
