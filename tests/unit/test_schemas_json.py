"""The JSON Schema format: parsing and its errors, drafts, references, canonical and
normalized texts, Confluent's compatibility rules in both directions, values."""

from __future__ import annotations

import json
import random
import re

import pytest
from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
    MockSchemaRegistryClient,
)
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from sluice.schemas.api import (
    InvalidSchema,
    ResolvedReference,
    SchemaFormat,
    SchemaType,
    format_for,
)
from sluice.schemas.json_schema import FORMAT, SCHEMA_NESTING_DEPTH_MAX, JsonSchema, draft_of
from sluice.schemas.json_schema_diff import DIFFERENCES_MAX, RULES
from sluice.schemas.wire import frame, unframe


def parse(schema: object, *references: tuple[str, object]) -> JsonSchema:
    text = schema if isinstance(schema, str) else json.dumps(schema)
    return FORMAT.parse(
        text,
        [ResolvedReference(name, json.dumps(referenced)) for name, referenced in references],
    )


def error_names(reader: object, writer: object) -> list[str]:
    """Confluent's names of the incompatible differences a reader finds in a writer."""
    messages = FORMAT.compatibility_errors(parse(reader), parse(writer))
    return [re.match(r'\{errorType:"([A-Z_]+)"', message)[1] for message in messages]  # type: ignore[index]


def test_the_format_is_found_by_its_type() -> None:
    implements: SchemaFormat = FORMAT  # the type checker holds it to the interface
    assert format_for(SchemaType.JSON) is implements
    assert parse({"type": "string"}).schema_type is SchemaType.JSON


# --- parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{", r"the schema is not valid JSON: Expecting property name"),
        ("", r"the schema is not valid JSON"),
        ("[]", r"must be a JSON object or a boolean, not list"),
        ("42", r"must be a JSON object or a boolean, not int"),
        ("null", r"must be a JSON object or a boolean, not null"),
        ('{"type": "strin"}', r"not a valid draft 7 JSON Schema at type: 'strin'"),
        ('{"properties": {"a": {"minLength": -1}}}', r"at properties/a/minLength"),
        ('{"required": "a"}', r"at required: 'a' is not of type 'array'"),
        ('{"$ref": "#/definitions/missing"}', r"unresolvable \$ref: '#/definitions/missing'"),
        (
            '{"properties": {"a": {"$ref": "https://example.com/a.json"}}}',
            r"unresolvable \$ref: 'https://example.com/a.json'",
        ),
    ],
)
def test_bad_schemas_are_refused_saying_what_is_wrong(text: str, expected: str) -> None:
    with pytest.raises(InvalidSchema, match=expected):
        FORMAT.parse(text)


def test_every_unresolvable_ref_is_named_once() -> None:
    schema = {
        "properties": {
            "a": {"$ref": "#/$defs/x"},
            "b": {"$ref": "other.json"},
            "c": {"$ref": "#/$defs/x"},
        }
    }
    with pytest.raises(InvalidSchema) as refused:
        parse(schema)
    assert "'#/$defs/x', 'other.json'" in str(refused.value)


def test_refs_inside_data_keywords_are_not_references() -> None:
    parse({"enum": [{"$ref": "nowhere"}], "default": {"$ref": "nowhere"}})


def test_nesting_deeper_than_the_limit_is_refused() -> None:
    deep = (
        '{"items":' * (SCHEMA_NESTING_DEPTH_MAX + 1) + "{}" + "}" * (SCHEMA_NESTING_DEPTH_MAX + 1)
    )
    with pytest.raises(InvalidSchema, match=f"deeper than {SCHEMA_NESTING_DEPTH_MAX} levels"):
        FORMAT.parse(deep)


def test_an_id_that_is_not_a_url_is_refused() -> None:
    with pytest.raises(InvalidSchema, match=r"\$id or \$ref that is not a URL"):
        FORMAT.parse('{"$id": "http://[bad", "type": "object"}')
    with pytest.raises(InvalidSchema, match=r"\$id or \$ref that is not a URL"):
        FORMAT.parse('{"properties": {"a": {"$id": "http://[bad"}}}')


def test_a_lone_surrogate_escape_stays_escaped_in_the_canonical_text() -> None:
    """JSON lets a text escape half a UTF-16 pair; the canonical text must still be
    UTF-8 (the registry stores it) and mean the same."""
    text = '{"properties":{"\\ud800":{"const":"\\udfff"}}}'
    canonical = FORMAT.parse(text).canonical()
    assert canonical == text
    assert json.loads(canonical.encode("utf-8")) == json.loads(text)


def test_boolean_schemas_parse() -> None:
    assert parse(True).canonical() == "true"
    assert parse(False).canonical() == "false"


@pytest.mark.parametrize(
    ("dialect", "draft"),
    [
        (None, "7"),
        ("http://json-schema.org/draft-04/schema#", "4"),
        ("https://json-schema.org/draft-04/schema", "4"),
        ("http://json-schema.org/schema#", "4"),
        ("http://json-schema.org/draft-06/schema#", "6"),
        ("http://json-schema.org/draft-07/schema#", "7"),
        ("https://json-schema.org/draft/2019-09/schema", "2019-09"),
        ("https://json-schema.org/draft/2020-12/schema", "2020-12"),
        ("http://example.com/my-own-dialect", "7"),
    ],
)
def test_the_draft_is_the_one_schema_names_else_draft_7(dialect: str | None, draft: str) -> None:
    schema: dict[str, object] = {"type": "object"}
    if dialect is not None:
        schema["$schema"] = dialect
    assert draft_of(schema).name == draft
    assert parse(schema).draft.name == draft


def test_each_draft_is_checked_against_its_own_meta_schema() -> None:
    # Draft 4's exclusiveMaximum is a boolean modifier; from draft 6 on it is a number.
    draft_4 = "http://json-schema.org/draft-04/schema#"
    parse({"$schema": draft_4, "maximum": 5, "exclusiveMaximum": True})
    with pytest.raises(InvalidSchema, match="draft 4"):
        parse({"$schema": draft_4, "exclusiveMaximum": 5})
    parse({"exclusiveMaximum": 5})
    with pytest.raises(InvalidSchema, match="draft 7"):
        parse({"exclusiveMaximum": True})
    parse({"$schema": "https://json-schema.org/draft/2020-12/schema", "prefixItems": [{}]})
    with pytest.raises(InvalidSchema, match="draft 2020-12"):
        parse({"$schema": "https://json-schema.org/draft/2020-12/schema", "prefixItems": {}})


def test_meta_schemas_resolve_without_the_network() -> None:
    parse({"$ref": "http://json-schema.org/draft-07/schema#"})


# --- references ------------------------------------------------------------------------


ADDRESS = {
    "type": "object",
    "properties": {"street": {"type": "string"}, "zip": {"$ref": "#/definitions/zip"}},
    "definitions": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
    "required": ["street"],
}


def test_a_reference_is_found_by_its_name() -> None:
    order = {"type": "object", "properties": {"ship_to": {"$ref": "address.json"}}}
    schema = parse(order, ("address.json", ADDRESS))
    FORMAT.encode(schema, {"ship_to": {"street": "Main", "zip": "12345"}})
    with pytest.raises(ValueError, match="does not match"):
        FORMAT.encode(schema, {"ship_to": {"street": "Main", "zip": "1234"}})


def test_a_reference_is_found_relative_to_the_root_id() -> None:
    order = {
        "$id": "https://example.com/schemas/order.json",
        "properties": {"ship_to": {"$ref": "address.json#/definitions/zip"}},
    }
    schema = parse(order, ("address.json", ADDRESS))
    with pytest.raises(ValueError, match="does not match"):
        FORMAT.encode(schema, {"ship_to": "x"})


def test_references_of_references_resolve_and_must_themselves_resolve() -> None:
    customer = {"properties": {"address": {"$ref": "address.json"}}}
    order = {"properties": {"customer": {"$ref": "customer.json"}}}
    parse(order, ("address.json", ADDRESS), ("customer.json", customer))
    with pytest.raises(InvalidSchema, match=r"'address\.json'"):
        parse(order, ("customer.json", customer))


def test_a_bad_reference_is_refused_naming_it() -> None:
    with pytest.raises(InvalidSchema, match=r"the referenced schema 'a\.json' is not valid JSON"):
        FORMAT.parse('{"$ref": "a.json"}', [ResolvedReference("a.json", "{")])
    with pytest.raises(InvalidSchema, match=r"the referenced schema 'a\.json' is not a valid"):
        FORMAT.parse('{"$ref": "a.json"}', [ResolvedReference("a.json", '{"type": 1}')])


# --- canonical and normalized texts ----------------------------------------------------


def test_canonical_is_compact_json_in_written_order_with_numbers_as_written() -> None:
    text = """{
      "type": "object", "title": "Préférence",
      "properties": {"b": {"type": "number", "maximum": 1e3, "minimum": 0.50},
                     "a": {"type": "string"}}
    }"""
    assert FORMAT.parse(text).canonical() == (
        '{"type":"object","title":"Préférence","properties":'
        '{"b":{"type":"number","maximum":1E+3,"minimum":0.50},"a":{"type":"string"}}}'
    )


def test_normalized_sorts_every_objects_keys() -> None:
    schema = parse({"type": "object", "properties": {"b": {"type": "string"}, "a": {}}})
    normalized = schema.normalized()
    assert normalized.canonical() == (
        '{"properties":{"a":{},"b":{"type":"string"}},"type":"object"}'
    )
    same = parse({"properties": {"a": {}, "b": {"type": "string"}}, "type": "object"})
    assert same.canonical() != schema.canonical()
    assert same.normalized().canonical() == normalized.canonical()
    assert normalized.normalized().canonical() == normalized.canonical()
    assert FORMAT.compatibility_errors(normalized, schema) == []


def test_record_name_is_the_title() -> None:
    assert parse({"title": "Order", "type": "object"}).record_names() == ["Order"]
    assert parse({"type": "object"}).record_names() == []
    assert parse(True).record_names() == []


# --- compatibility ---------------------------------------------------------------------

OBJECT_A = {"type": "object", "properties": {"a": {"type": "string"}}}
CLOSED_A = {**OBJECT_A, "additionalProperties": False}


def with_properties(base: dict[str, object], **properties: object) -> dict[str, object]:
    merged = dict(base["properties"])  # type: ignore[call-overload]
    merged.update(properties)
    return {**base, "properties": merged}


# (name, old, new, names when the new schema reads the old one (BACKWARD),
#  names when the old schema reads the new one (FORWARD))
EVOLUTIONS: list[tuple[str, object, object, list[str], list[str]]] = [
    ("same schema", OBJECT_A, OBJECT_A, [], []),
    ("type changed", {"type": "string"}, {"type": "integer"}, ["TYPE_CHANGED"], ["TYPE_CHANGED"]),
    ("integer widened to number", {"type": "integer"}, {"type": "number"}, [], ["TYPE_NARROWED"]),
    (
        "made nullable",
        {"type": "string"},
        {"type": ["string", "null"]},
        [],
        ["TYPE_CHANGED"],
    ),
    (
        "nullable through oneOf",
        {"type": "string"},
        {"oneOf": [{"type": "null"}, {"type": "string"}]},
        [],
        ["TYPE_CHANGED"],
    ),
    (
        "optional property added to an open content model",
        OBJECT_A,
        with_properties(OBJECT_A, b={"type": "integer"}),
        ["OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"],
        [],
    ),
    (
        "property with an empty schema added to an open content model",
        OBJECT_A,
        with_properties(OBJECT_A, b={}),
        [],
        [],
    ),
    (
        "required property added to an open content model",
        OBJECT_A,
        {**with_properties(OBJECT_A, b={"type": "integer"}), "required": ["b"]},
        ["REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"],
        [],
    ),
    (
        "optional property added to a closed content model",
        CLOSED_A,
        with_properties(CLOSED_A, b={"type": "integer"}),
        [],
        ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"],
    ),
    (
        "required property added to a closed content model",
        CLOSED_A,
        {**with_properties(CLOSED_A, b={"type": "integer"}), "required": ["b"]},
        ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"],
        ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"],
    ),
    (
        "required property with a default added to a closed content model",
        CLOSED_A,
        {**with_properties(CLOSED_A, b={"type": "integer", "default": 0}), "required": ["b"]},
        [],
        ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"],
    ),
    (
        "property made required",
        OBJECT_A,
        {**OBJECT_A, "required": ["a"]},
        ["REQUIRED_ATTRIBUTE_ADDED"],
        [],
    ),
    (
        "property made required with a default",
        OBJECT_A,
        {**with_properties(OBJECT_A, a={"type": "string", "default": ""}), "required": ["a"]},
        [],
        [],
    ),
    (
        "content model closed",
        OBJECT_A,
        CLOSED_A,
        ["ADDITIONAL_PROPERTIES_REMOVED"],
        [],
    ),
    (
        "additional properties given a schema",
        OBJECT_A,
        {**OBJECT_A, "additionalProperties": {"type": "string"}},
        ["ADDITIONAL_PROPERTIES_NARROWED"],
        [],
    ),
    (
        "property added within a partially open content model",
        {**OBJECT_A, "additionalProperties": {"type": "string"}},
        {
            **with_properties(OBJECT_A, b={"type": "string"}),
            "additionalProperties": {"type": "string"},
        },
        [],
        [],
    ),
    (
        "property added outside a partially open content model",
        {**OBJECT_A, "additionalProperties": {"type": "string"}},
        {
            **with_properties(OBJECT_A, b={"type": "integer"}),
            "additionalProperties": {"type": "string"},
        },
        ["TYPE_CHANGED", "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"],
        ["TYPE_CHANGED", "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"],
    ),
    (
        "property added under patternProperties",
        {**CLOSED_A, "patternProperties": {"^x_": {"type": "string"}}},
        {
            **with_properties(CLOSED_A, x_b={"type": "string"}),
            "patternProperties": {"^x_": {"type": "string"}},
        },
        [],
        [],
    ),
    (
        "nested property type changed",
        with_properties(OBJECT_A, n=OBJECT_A),
        with_properties(OBJECT_A, n=with_properties(OBJECT_A, a={"type": "boolean"})),
        ["TYPE_CHANGED"],
        ["TYPE_CHANGED"],
    ),
    (
        "maxLength decreased",
        {"type": "string", "maxLength": 10},
        {"type": "string", "maxLength": 5},
        ["MAX_LENGTH_DECREASED"],
        [],
    ),
    (
        "maxLength added",
        {"type": "string"},
        {"type": "string", "maxLength": 5},
        ["MAX_LENGTH_ADDED"],
        [],
    ),
    (
        "minLength increased",
        {"type": "string", "minLength": 1},
        {"type": "string", "minLength": 2},
        ["MIN_LENGTH_INCREASED"],
        [],
    ),
    (
        "pattern changed",
        {"type": "string", "pattern": "^a"},
        {"type": "string", "pattern": "^b"},
        ["PATTERN_CHANGED"],
        ["PATTERN_CHANGED"],
    ),
    (
        "minimum and maximum tightened",
        {"type": "number", "minimum": 0, "maximum": 100},
        {"type": "number", "minimum": 1, "maximum": 99},
        ["MAXIMUM_DECREASED", "MINIMUM_INCREASED"],
        [],
    ),
    (
        "exclusive bounds added",
        {"type": "number"},
        {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        ["EXCLUSIVE_MAXIMUM_ADDED", "EXCLUSIVE_MINIMUM_ADDED"],
        [],
    ),
    (
        "multipleOf expanded",
        {"type": "number", "multipleOf": 0.5},
        {"type": "number", "multipleOf": 1.5},
        ["MULTIPLE_OF_EXPANDED"],
        [],
    ),
    (
        "multipleOf changed",
        {"type": "number", "multipleOf": 2},
        {"type": "number", "multipleOf": 3},
        ["MULTIPLE_OF_CHANGED"],
        ["MULTIPLE_OF_CHANGED"],
    ),
    ("enum extended", {"enum": ["a", "b"]}, {"enum": ["b", "a", "c"]}, [], ["ENUM_ARRAY_NARROWED"]),
    (
        "enum changed",
        {"enum": ["a", "b"]},
        {"enum": ["a", "c"]},
        ["ENUM_ARRAY_CHANGED"],
        ["ENUM_ARRAY_CHANGED"],
    ),
    (
        "enum keeps true apart from 1",
        {"enum": [1]},
        {"enum": [True]},
        ["ENUM_ARRAY_CHANGED"],
        ["ENUM_ARRAY_CHANGED"],
    ),
    (
        "const changed",
        {"const": "a"},
        {"const": "b"},
        ["ENUM_ARRAY_CHANGED"],
        ["ENUM_ARRAY_CHANGED"],
    ),
    (
        "array items type changed",
        {"type": "array", "items": {"type": "string"}},
        {"type": "array", "items": {"type": "integer"}},
        ["TYPE_CHANGED"],
        ["TYPE_CHANGED"],
    ),
    (
        "array items schema added",
        {"type": "array"},
        {"type": "array", "items": {"type": "string"}},
        ["SCHEMA_ADDED"],
        [],
    ),
    (
        "array bounds and uniqueness added",
        {"type": "array"},
        {"type": "array", "maxItems": 3, "minItems": 1, "uniqueItems": True},
        ["MAX_ITEMS_ADDED", "MIN_ITEMS_ADDED", "UNIQUE_ITEMS_ADDED"],
        [],
    ),
    (
        "tuple item added to a closed tuple (2020-12)",
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "prefixItems": [{"type": "string"}],
            "items": False,
        },
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "prefixItems": [{"type": "string"}, {"type": "integer"}],
            "items": False,
        },
        [],
        ["ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"],
    ),
    (
        "tuple item added to an open tuple (draft 7)",
        {"items": [{"type": "string"}]},
        {"items": [{"type": "string"}, {"type": "integer"}]},
        ["ITEM_ADDED_TO_OPEN_CONTENT_MODEL"],
        [],
    ),
    (
        "anyOf member removed",
        {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        {"anyOf": [{"type": "string"}]},
        ["SUM_TYPE_NARROWED"],
        [],
    ),
    (
        "oneOf member changed",
        {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        {"oneOf": [{"type": "string"}, {"type": "boolean"}]},
        ["COMBINED_TYPE_SUBSCHEMAS_CHANGED"],
        ["COMBINED_TYPE_SUBSCHEMAS_CHANGED"],
    ),
    (
        "oneOf relaxed to anyOf",
        {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        [],
        ["COMBINED_TYPE_CHANGED"],
    ),
    (
        "allOf member added",
        {"allOf": [OBJECT_A]},
        {"allOf": [OBJECT_A, {"required": ["a"]}]},
        ["PRODUCT_TYPE_EXTENDED"],
        [],
    ),
    (
        "$ref into definitions follows the definition",
        {
            "properties": {"a": {"$ref": "#/definitions/s"}},
            "definitions": {"s": {"type": "string", "maxLength": 10}},
        },
        {
            "properties": {"a": {"$ref": "#/definitions/s"}},
            "definitions": {"s": {"type": "string", "maxLength": 5}},
        },
        ["MAX_LENGTH_DECREASED"],
        [],
    ),
    (
        "$ref replaced by its definition inline",
        {
            "properties": {"a": {"$ref": "#/definitions/s"}},
            "definitions": {"s": {"type": "string"}},
        },
        {"properties": {"a": {"type": "string"}}},
        [],
        [],
    ),
    (
        "recursive definition changed",
        {
            "$ref": "#/$defs/node",
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {"next": {"$ref": "#/$defs/node"}, "v": {"type": "integer"}},
                }
            },
        },
        {
            "$ref": "#/$defs/node",
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {"next": {"$ref": "#/$defs/node"}, "v": {"type": "string"}},
                }
            },
        },
        # Found where the walk starts and again where the cycle re-enters it.
        ["TYPE_CHANGED", "TYPE_CHANGED"],
        ["TYPE_CHANGED", "TYPE_CHANGED"],
    ),
    ("anything narrowed to a string", {}, {"type": "string"}, ["TYPE_CHANGED"], []),
    ("true and {} are the same", True, {}, [], []),
    ("nothing is read by anything", False, {"type": "string"}, [], ["TYPE_CHANGED"]),
    (
        "dependency added",
        OBJECT_A,
        {**OBJECT_A, "dependencies": {"a": ["b"]}},
        ["DEPENDENCY_ARRAY_ADDED"],
        [],
    ),
    (
        "not widened",
        {"not": {"type": "string"}},
        {"not": {"type": ["string", "null"]}},
        ["NOT_TYPE_EXTENDED"],
        [],
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "backward", "forward"),
    [
        pytest.param(old, new, backward, forward, id=name)
        for name, old, new, backward, forward in EVOLUTIONS
    ],
)
def test_evolution_in_both_directions(
    old: object, new: object, backward: list[str], forward: list[str]
) -> None:
    assert sorted(error_names(reader=new, writer=old)) == sorted(backward)
    assert sorted(error_names(reader=old, writer=new)) == sorted(forward)


def test_every_name_found_is_one_of_confluents_and_incompatible() -> None:
    for *_, backward, forward in EVOLUTIONS:
        for name in backward + forward:
            assert name in RULES and not RULES[name].compatible, name


def test_messages_name_the_rule_and_the_place() -> None:
    old = with_properties(OBJECT_A, n={"type": "string", "maxLength": 10})
    new = with_properties(OBJECT_A, n={"type": "string", "maxLength": 5})
    assert FORMAT.compatibility_errors(parse(new), parse(old)) == [
        '{errorType:"MAX_LENGTH_DECREASED", description:"at \'#/properties/n/maxLength\': '
        "the reader's maxLength is below the writer's\"}"
    ]


def test_a_cycle_of_definitions_is_compared_in_bounded_time() -> None:
    """Definitions referring to one another in a ring, each through many properties: the
    pairs met again inside themselves must not be compared again along every path."""
    width, ring = 30, 6
    definitions: dict[str, object] = {
        f"d{level}": {
            "type": "object",
            "properties": {
                **{f"p{i}": {"$ref": f"#/$defs/d{(level + 1) % ring}"} for i in range(width)},
                "v": {"type": "string"},
            },
        }
        for level in range(ring)
    }
    schema = {"$ref": "#/$defs/d0", "$defs": definitions}
    assert error_names(reader=schema, writer=schema) == []
    changed = json.loads(json.dumps(schema))
    changed["$defs"]["d3"]["properties"]["v"] = {"type": "integer"}
    assert "TYPE_CHANGED" in error_names(reader=changed, writer=schema)
    assert "TYPE_CHANGED" in error_names(reader=schema, writer=changed)


def test_a_schema_of_another_format_is_incompatible() -> None:
    class Other:
        schema_type = SchemaType.AVRO

    assert FORMAT.compatibility_errors(parse(OBJECT_A), Other()) == [  # type: ignore[arg-type]
        "Incompatible because of different schema type"
    ]


def test_many_references_to_one_definition_are_compared_once() -> None:
    """A definition used by many properties, each holding more of them, is compared once
    per pair of nodes, not once per path to it (there are 40**7 paths), and the
    differences kept are bounded."""
    width = 40
    definitions: dict[str, object] = {"leaf": {"type": "string", "maxLength": 5}}
    for level in range(1, 8):
        definitions[f"level{level}"] = {
            "type": "object",
            "properties": {
                f"p{i}": {"$ref": f"#/$defs/level{level - 1}" if level > 1 else "#/$defs/leaf"}
                for i in range(width)
            },
        }
    schema = {"$ref": "#/$defs/level7", "$defs": definitions}
    assert error_names(reader=schema, writer=schema) == []
    narrower = json.loads(json.dumps(schema).replace('"maxLength": 5', '"maxLength": 4'))
    assert error_names(reader=narrower, writer=schema) == ["MAX_LENGTH_DECREASED"] * DIFFERENCES_MAX


# --- values ----------------------------------------------------------------------------


PERSON = {
    "type": "object",
    "title": "Person",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name"],
}


def test_values_round_trip_as_compact_utf8_json() -> None:
    schema = parse(PERSON)
    value = {"name": "Zoë", "age": 7, "tags": ["a", "b"]}
    payload = FORMAT.encode(schema, value)
    assert payload == '{"name":"Zoë","age":7,"tags":["a","b"]}'.encode()
    assert FORMAT.decode(schema, payload) == value
    assert FORMAT.decode(schema, payload, validate=True) == value


def test_encode_refuses_a_value_the_schema_does_not_allow_saying_where() -> None:
    schema = parse(PERSON)
    with pytest.raises(ValueError, match=r"#/age: -1 is less than the minimum of 0"):
        FORMAT.encode(schema, {"name": "x", "age": -1})
    with pytest.raises(ValueError, match=r"'name' is a required property"):
        FORMAT.encode(schema, {})
    with pytest.raises(ValueError, match="does not match"):
        FORMAT.encode(schema, {"name": b"bytes"})
    with pytest.raises(ValueError, match="cannot be written as JSON"):
        FORMAT.encode(parse(True), {"x": float("nan")})
    with pytest.raises(ValueError, match="cannot be written as JSON"):
        FORMAT.encode(parse(True), {"x": "\ud800"})


def test_decode_validates_only_when_asked() -> None:
    schema = parse(PERSON)
    assert FORMAT.decode(schema, b'{"age":-1}') == {"age": -1}
    with pytest.raises(ValueError, match="does not match"):
        FORMAT.decode(schema, b'{"age":-1}', validate=True)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [(b"\xff\xfe", "not UTF-8"), (b'{"name":', "not JSON"), (b"", "not JSON")],
)
def test_decode_refuses_bytes_that_are_not_json(payload: bytes, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        FORMAT.decode(parse(PERSON), payload)


def test_values_cross_with_confluents_json_serializer_and_deserializer() -> None:
    """Bytes from confluent-kafka's JSONSerializer (registering with the client library's
    own in-memory registry) decode here; bytes encoded here, behind the wire header,
    are read by its JSONDeserializer."""
    schema_text = json.dumps(PERSON)
    context = SerializationContext("people", MessageField.VALUE)
    serializer = JSONSerializer(schema_text, MockSchemaRegistryClient({"url": "mock://registry"}))
    value = {"name": "Zoë", "age": 3, "tags": ["x"]}
    written = serializer(value, context)
    assert written is not None
    framed = unframe(written)
    assert FORMAT.decode(parse(PERSON), bytes(framed.payload), validate=True) == value

    ours = frame(framed.schema_id, FORMAT.encode(parse(PERSON), value))
    assert JSONDeserializer(schema_text)(ours, context) == value


def random_schema(rng: random.Random, depth: int) -> object:
    """A schema from a small grammar of the keywords the rules look at (some invalid:
    those must be refused with InvalidSchema)."""
    if depth <= 0 or rng.random() < 0.2:
        return rng.choice([True, False, {}, {"type": rng.choice(["string", "integer", "null"])}])
    choice = rng.randrange(9)
    if choice == 0:
        keys = rng.sample(["a", "b", "c", "x_d"], rng.randrange(4))
        schema: dict[str, object] = {
            "type": "object",
            "properties": {key: random_schema(rng, depth - 1) for key in keys},
            "required": rng.sample(keys, rng.randrange(len(keys) + 1)),
        }
        schema["additionalProperties"] = rng.choice([True, False, {"type": "string"}, None])
        if rng.random() < 0.3:
            schema["patternProperties"] = {"^x_": random_schema(rng, depth - 1)}
        return {key: value for key, value in schema.items() if value is not None}
    if choice == 1:
        return {
            "type": "array",
            "items": rng.choice([random_schema(rng, depth - 1), [{}, {"type": "string"}]]),
        }
    if choice == 2:
        return {
            rng.choice(["anyOf", "oneOf", "allOf"]): [
                random_schema(rng, depth - 1) for _ in range(rng.randrange(1, 4))
            ]
        }
    if choice == 3:
        return {"enum": rng.sample(["a", "b", 1, True, None], rng.randrange(1, 4))}
    if choice == 4:
        return {"type": "string", rng.choice(["maxLength", "minLength"]): rng.randrange(-1, 4)}
    if choice == 5:
        return {
            "type": rng.choice(["number", "integer"]),
            rng.choice(["maximum", "multipleOf", "exclusiveMinimum"]): rng.choice([0, 1, 2.5]),
        }
    if choice == 6:
        return {"not": random_schema(rng, depth - 1)}
    if choice == 7:
        return {
            "$ref": rng.choice(["#", "#/definitions/d", "#/definitions/missing"]),
            "definitions": {"d": random_schema(rng, depth - 1)},
        }
    return {"type": [rng.choice(["string", "number"]), "null"], "const": rng.choice(["a", 1])}


def test_random_schemas_parse_or_are_refused_and_always_compare() -> None:
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    parsed = []
    for _ in range(150):
        text = json.dumps(random_schema(rng, 4))
        try:
            parsed.append(FORMAT.parse(text))
        except InvalidSchema:
            continue
    assert len(parsed) > 50, f"seed {seed}"
    for reader in parsed[:40]:
        for writer in parsed[:40]:
            errors = FORMAT.compatibility_errors(reader, writer)
            assert all(message.startswith('{errorType:"') for message in errors), f"seed {seed}"
        assert FORMAT.compatibility_errors(reader, reader) == [], (
            f"seed {seed}: {reader.canonical()}"
        )
