"""The Avro format: schemas refused with Avro's reasons, the canonical and normalized texts
Confluent's registry keeps, Avro's compatibility rules with their places, references,
and values read and written as Confluent's serializers read and write them.

The expected canonical texts and incompatibilities are what Avro's Java library (1.12,
the one Confluent's registry runs) answers for the same schemas.
"""

from __future__ import annotations

import datetime
import decimal
import json
import subprocess
import sys
import uuid
from typing import cast

import pytest
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from sluice.schemas.api import InvalidSchema, ResolvedReference, SchemaType, format_for
from sluice.schemas.avro import FORMAT, AvroSchema
from sluice.schemas.avro_bounds import VALUE_DEPTH_MAX, ZERO_WIDTH_ITEMS_MAX
from sluice.schemas.avro_text import java_double
from sluice.schemas.wire import frame, unframe

ORDER = """{
  "type": "record", "namespace": "com.example", "name": "Order", "doc": "An order.",
  "aliases": ["OldOrder", "legacy.Order"], "connect.name": "com.example.Order",
  "fields": [
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}, "doc": "the id"},
    {"doc": "when", "name": "at", "type": {"logicalType": "timestamp-millis", "type": "long"}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10,
     "scale": 2}, "default": "\\u0000"},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"],
     "default": "NEW", "doc": "s"}, "default": "NEW"},
    {"name": "hash", "type": {"type": "fixed", "name": "Hash", "namespace": "com.other",
     "size": 16}},
    {"name": "hash2", "type": "com.other.Hash", "order": "descending", "aliases": ["h2", "h2"]},
    {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
        {"name": "street", "type": "string", "default": "x\\ty\\u0001\\"q\\u00e9"},
        {"name": "zip", "type": ["null", "int"], "default": null}]}},
    {"name": "previous", "type": ["null", "Address"], "default": null},
    {"name": "tags", "type": {"type": "array", "items": "string",
     "custom": [1, {"b": 2.5, "a": true}]}, "default": []},
    {"name": "attrs", "type": {"type": "map", "values": ["long", "double"]}, "default": {"k": 1}},
    {"name": "ratio", "type": "double", "default": 1e10},
    {"name": "small", "type": "float", "default": 0.0001},
    {"name": "half", "type": "double", "default": "0.5"},
    {"name": "plain", "type": {"type": "int"}, "default": 0, "field.prop": "v"},
    {"name": "noNs", "type": {"type": "record", "name": "Bare", "namespace": "", "fields": [
        {"name": "self", "type": ["null", "com.example.Address"], "default": null}]}}
  ]
}"""

ORDER_CANONICAL = (
    '{"type":"record","name":"Order","namespace":"com.example","doc":"An order.","fields":['
    '{"name":"id","type":{"type":"string","logicalType":"uuid"},"doc":"the id"},'
    '{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"},"doc":"when"},'
    '{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2},'
    '"default":"\\u0000"},'
    '{"name":"status","type":{"type":"enum","name":"Status","doc":"s","symbols":["NEW","PAID"],'
    '"default":"NEW"},"default":"NEW"},'
    '{"name":"hash","type":{"type":"fixed","name":"Hash","namespace":"com.other","size":16}},'
    '{"name":"hash2","type":"com.other.Hash","order":"descending","aliases":["h2"]},'
    '{"name":"address","type":{"type":"record","name":"Address","fields":['
    '{"name":"street","type":"string","default":"x\\ty\\u0001\\"q\u00e9"},'
    '{"name":"zip","type":["null","int"],"default":null}]}},'
    '{"name":"previous","type":["null","Address"],"default":null},'
    '{"name":"tags","type":{"type":"array","items":"string","custom":[1,{"b":2.5,"a":true}]},'
    '"default":[]},'
    '{"name":"attrs","type":{"type":"map","values":["long","double"]},"default":{"k":1}},'
    '{"name":"ratio","type":"double","default":1.0E10},'
    '{"name":"small","type":"float","default":1.0E-4},'
    '{"name":"half","type":"double","default":0.5},'
    '{"name":"plain","type":"int","default":0,"field.prop":"v"},'
    '{"name":"noNs","type":{"type":"record","name":"Bare","namespace":"","fields":['
    '{"name":"self","type":["null","com.example.Address"],"default":null}]}}],'
    '"connect.name":"com.example.Order","aliases":["OldOrder","legacy.Order"]}'
)

ADDRESS = """{"type": "record", "name": "Address", "namespace": "com.shop", "fields": [
  {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["HOME", "WORK"]}}]}"""
CUSTOMER = """{"type": "record", "name": "Customer", "namespace": "com.shop", "fields": [
  {"name": "home", "type": "Address"}, {"name": "kind", "type": "com.shop.Kind"},
  {"name": "other", "type": "com.shop.Address"}]}"""
CUSTOMER_CANONICAL = (
    '{"type":"record","name":"Customer","namespace":"com.shop","fields":['
    '{"name":"home","type":"Address"},'
    '{"name":"kind","type":{"type":"enum","name":"Kind","symbols":["HOME","WORK"]}},'
    '{"name":"other","type":"Address"}]}'
)
ADDRESS_REFERENCE = ResolvedReference("com.shop.Address", ADDRESS)


def _record(fields: str, name: str = "R", extra: str = "") -> str:
    return f'{{"type":"record","name":"{name}"{extra},"fields":[{fields}]}}'


def test_the_format_is_found_by_its_type() -> None:
    assert format_for(SchemaType.AVRO) is FORMAT
    assert FORMAT.schema_type is SchemaType.AVRO
    assert FORMAT.parse('"int"').schema_type is SchemaType.AVRO


# --- parse errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"type": "record", "name": "R", "fields": [', "the schema is not JSON: Expecting"),
        ('{"type": "double", "default": NaN}', "the schema: NaN is not JSON"),
        ("42", "the schema: 42 is not a schema"),
        (_record('{"name":"a","type":"Foo"}'), "the schema: unknown type 'Foo'"),
        (
            _record('{"name":"a","type":"int","default":"x"}'),
            "the schema: the default of the field at /fields/0 ('a'): "
            "Default value <x> must match schema type: int",
        ),
        (
            _record(
                '{"name":"a","type":"int","default":1},'
                '{"name":"n","type":["null",{"type":"record","name":"N","fields":['
                '{"name":"ok","type":"string","default":""},'
                '{"name":"b","type":["null","int"],"default":"x"}]}]}'
            ),
            "the schema: the default of the field at /fields/1/type/1/fields/1 ('b'): "
            "Default value <x> must match a schema in union",
        ),
        (
            _record('{"name":"a","type":"int"},{"name":"a","type":"long"}'),
            "the schema: Field name a already in use",
        ),
        (
            _record('{"name":"a","type":{"type":"enum","name":"R","symbols":["A"]}}'),
            "the schema: can't redefine R differently",
        ),
        (
            _record(
                '{"name":"a","type":{"type":"enum","name":"E","symbols":["A"]}},'
                '{"name":"b","type":{"type":"enum","name":"E","symbols":["B"]}}'
            ),
            "the schema: can't redefine E differently",
        ),
        (_record("", name="1R"), "the schema: 1R is not a valid Avro name"),
        (
            '{"type":"enum","name":"E","symbols":["A","A"]}',
            "the schema: All symbols in an enum must be unique",
        ),
        (
            '{"type":"enum","name":"E","symbols":["A"],"default":"B"}',
            "the schema: Default value for enum must be in symbols list",
        ),
        (
            '{"type":"fixed","name":"F"}',
            "the schema: an attribute Avro requires is missing: 'size'",
        ),
        ('["int","int"]', "the schema: int type already in Union"),
        (
            '{"type":"record","name":"R"}',
            "the schema: Record schema requires a non-empty fields property",
        ),
    ],
)
def test_a_schema_avro_refuses_is_invalid_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(InvalidSchema) as refused:
        FORMAT.parse(text)
    assert str(refused.value).startswith("Invalid Avro schema: ")
    assert message in str(refused.value)


def test_a_bad_reference_is_named_in_the_error() -> None:
    with pytest.raises(InvalidSchema, match=r"reference 'com\.shop\.Address' is not JSON"):
        FORMAT.parse(CUSTOMER, [ResolvedReference("com.shop.Address", "{")])
    with pytest.raises(InvalidSchema, match=r"the schema: unknown type 'com\.shop\.Address'"):
        FORMAT.parse(CUSTOMER)


def test_a_schema_nested_beyond_the_parsers_is_refused() -> None:
    with pytest.raises(InvalidSchema, match="nested too deeply"):
        FORMAT.parse("[" * 100_000 + "]" * 100_000)


# --- canonical ---------------------------------------------------------------------


def test_canonical_is_avro_javas_compact_text_keeping_every_attribute() -> None:
    assert FORMAT.parse(ORDER).canonical() == ORDER_CANONICAL


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ('"string"', '"string"'),
        ('{"type": "string"}', '"string"'),
        (
            '{"type": "long", "logicalType": "timestamp-micros", "extra": 1}',
            '{"type":"long","logicalType":"timestamp-micros","extra":1}',
        ),
        (
            '["null", {"type": "record", "name": "a.b.A", "fields": [{"name": "f",'
            ' "type": "int"}]}, {"type": "record", "name": "a.b.B", "fields": [{"name": "a",'
            ' "type": "A"}]}]',
            '["null",{"type":"record","name":"A","namespace":"a.b","fields":['
            '{"name":"f","type":"int"}]},{"type":"record","name":"B","namespace":"a.b","fields":['
            '{"name":"a","type":"A"}]}]',
        ),
        (
            '{"type": "error", "name": "Oops", "fields": []}',
            '{"type":"error","name":"Oops","fields":[]}',
        ),
        (
            '{"type": "record", "name": "x.y.R", "namespace": "ignored", "fields": [{"name": "e",'
            ' "type": {"type": "enum", "name": "E", "symbols": ["A"],'
            ' "aliases": ["q.Old", "New"]}}]}',
            '{"type":"record","name":"R","namespace":"x.y","fields":[{"name":"e","type":'
            '{"type":"enum","name":"E","symbols":["A"],"aliases":["q.Old","New"]}}]}',
        ),
        (
            '{"type": "record", "name": "n.record", "fields": [{"name": "s", "type":'
            ' {"type": "record", "name": "string", "namespace": "n", "fields": []}}]}',
            '{"type":"record","name":"record","namespace":"n","fields":[{"name":"s","type":'
            '{"type":"record","name":"string","fields":[]}}]}',
        ),
        (
            '{"type": "record", "name": "R", "fields": [{"name": "l", "type": "long", "default":'
            ' 9223372036854775807}, {"name": "d", "type": "double", "default": -1.5e-7},'
            ' {"name": "z", "type": "double", "default": 123456789.0}]}',
            '{"type":"record","name":"R","fields":[{"name":"l","type":"long","default":'
            '9223372036854775807},{"name":"d","type":"double","default":-1.5E-7},'
            '{"name":"z","type":"double","default":1.23456789E8}]}',
        ),
        (
            '{"type": "record", "name": "Node", "namespace": "l", "fields": [{"name": "value",'
            ' "type": "int"}, {"name": "next", "type": ["null", "Node"], "default": null},'
            ' {"name": "children", "type": {"type": "array", "items": "l.Node"}}]}',
            '{"type":"record","name":"Node","namespace":"l","fields":[{"name":"value","type":"int"},'
            '{"name":"next","type":["null","Node"],"default":null},'
            '{"name":"children","type":{"type":"array","items":"Node"}}]}',
        ),
        (
            '{"type": "record", "name": "Outer", "namespace": "a", "fields": [{"name": "in",'
            ' "type": {"type": "record", "name": "Inner", "namespace": "b", "fields": ['
            '{"name": "back", "type": ["null", "a.Outer"]}, {"name": "e", "type": {"type": "enum",'
            ' "name": "E", "symbols": ["X"]}}]}}, {"name": "e2", "type": "b.E"}]}',
            '{"type":"record","name":"Outer","namespace":"a","fields":[{"name":"in","type":'
            '{"type":"record","name":"Inner","namespace":"b","fields":[{"name":"back","type":'
            '["null","a.Outer"]},{"name":"e","type":{"type":"enum","name":"E","symbols":["X"]}}]}},'
            '{"name":"e2","type":"b.E"}]}',
        ),
        (
            _record(
                '{"name":"a","type":{"type":"enum","name":"E","symbols":["A"]}},'
                '{"name":"b","type":{"type":"enum","name":"E","symbols":["A"]}}'
            ),
            '{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"enum","name":"E",'
            '"symbols":["A"]}},{"name":"b","type":"E"}]}',
        ),
    ],
)
def test_canonical_texts(text: str, canonical: str) -> None:
    assert FORMAT.parse(text).canonical() == canonical


def test_whitespace_and_key_order_do_not_change_the_canonical_text() -> None:
    compact = json.dumps(json.loads(ORDER), separators=(",", ":"))
    spread = json.dumps(json.loads(ORDER), indent=7)
    reordered = json.dumps(_type_last(json.loads(ORDER)))
    for text in (compact, spread, reordered):
        assert FORMAT.parse(text).canonical() == ORDER_CANONICAL


def _type_last(node: object) -> object:
    # custom properties keep their order among themselves (Java keeps them as written)
    if isinstance(node, dict):
        keys = sorted(node, key=lambda key: key == "type")
        return {key: _type_last(node[key]) for key in keys}
    if isinstance(node, list):
        return [_type_last(item) for item in node]
    return node


def test_the_canonical_text_parses_to_itself() -> None:
    canonical = FORMAT.parse(ORDER).canonical()
    assert FORMAT.parse(canonical).canonical() == canonical


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.0, "1.0"),
        (2.5, "2.5"),
        (100.0, "100.0"),
        (0.001, "0.001"),
        (0.0001, "1.0E-4"),
        (9999999.0, "9999999.0"),
        (1e7, "1.0E7"),
        (-1.5e-7, "-1.5E-7"),
        (123456789.0, "1.23456789E8"),
        (1e300, "1.0E300"),
        (0.1 + 0.2, "0.30000000000000004"),
    ],
)
def test_numbers_are_written_as_java_writes_doubles(value: float, written: str) -> None:
    assert java_double(value) == written


# --- references --------------------------------------------------------------------


def test_a_record_uses_the_types_of_its_references_by_name() -> None:
    schema = FORMAT.parse(CUSTOMER, [ADDRESS_REFERENCE])
    # the reference's own type by name; a type defined inside it in full, as Java does
    assert schema.canonical() == CUSTOMER_CANONICAL
    assert schema.record_names() == ["com.shop.Customer"]
    value = {"home": {"kind": "WORK"}, "kind": "HOME", "other": {"kind": "HOME"}}
    assert FORMAT.decode(schema, FORMAT.encode(schema, value)) == value


def test_references_come_dependencies_first_and_a_repeated_one_is_read_once() -> None:
    street = ResolvedReference(
        "com.shop.Street", '{"type":"fixed","name":"com.shop.Street","size":2}'
    )
    house = ResolvedReference(
        "com.shop.House",
        '{"type":"record","name":"com.shop.House","fields":[{"name":"s","type":"Street"}]}',
    )
    text = _record('{"name":"h","type":"com.shop.House"},{"name":"s","type":"com.shop.Street"}')
    schema = FORMAT.parse(text, [street, house, street])
    assert schema.canonical() == (
        '{"type":"record","name":"R","fields":[{"name":"h","type":"com.shop.House"},'
        '{"name":"s","type":"com.shop.Street"}]}'
    )
    value = {"h": {"s": b"ab"}, "s": b"cd"}
    assert FORMAT.decode(schema, FORMAT.encode(schema, value)) == value


def test_a_union_of_referenced_records_names_each_record() -> None:
    first = ResolvedReference("a.First", _record('{"name":"x","type":"int"}', name="a.First"))
    second = ResolvedReference("a.Second", _record('{"name":"y","type":"string"}', name="a.Second"))
    schema = FORMAT.parse('["a.First", "a.Second"]', [first, second])
    assert schema.canonical() == '["a.First","a.Second"]'
    assert schema.record_names() == ["a.First", "a.Second"]
    assert FORMAT.parse('"string"').record_names() == []
    assert FORMAT.parse('{"type":"enum","name":"E","symbols":["A"]}').record_names() == []


# --- normalize ---------------------------------------------------------------------


def test_normalize_sorts_aliases_and_properties_and_keeps_attributes() -> None:
    text = (
        '{"type":"record","name":"R","namespace":"n","aliases":["Z","A"],"zeta":1,"alpha":2,'
        '"fields":[{"name":"f","aliases":["y","x"],"doc":"d","type":{"type":"bytes",'
        '"scale":2,"zz":true,"precision":5,"logicalType":"decimal"},"p2":1,"p1":2}]}'
    )
    normalized = FORMAT.parse(text).normalized()
    assert normalized.canonical() == (
        '{"type":"record","name":"R","namespace":"n","fields":[{"name":"f","type":{"type":"bytes",'
        '"logicalType":"decimal","precision":5,"scale":2,"zz":true},"doc":"d","aliases":["x","y"],'
        '"p1":2,"p2":1}],"alpha":2,"zeta":1,"aliases":["A","Z"]}'
    )
    assert normalized.normalized().canonical() == normalized.canonical()


def test_schemas_that_differ_in_form_only_normalize_to_the_same_text() -> None:
    one = FORMAT.parse(
        '{"type":"record","name":"a.R","aliases":["b.Q","P"],"x":1,"y":2,'
        '"fields":[{"name":"e","type":{"type":"enum","name":"E","symbols":["A"]}},'
        '{"name":"f","type":"a.E"}]}'
    )
    other = FORMAT.parse(
        '{"namespace":"a","name":"R","type":"record","y":2,"x":1,"aliases":["P","b.Q"],'
        '"fields":[{"name":"e","type":{"name":"a.E","symbols":["A"],"type":"enum"}},'
        '{"type":"E","name":"f"}]}'
    )
    assert one.canonical() != other.canonical()
    assert one.normalized().canonical() == other.normalized().canonical()


def test_normalize_writes_the_types_of_references_by_full_name() -> None:
    schema = FORMAT.parse(CUSTOMER, [ADDRESS_REFERENCE])
    normalized = schema.normalized()
    assert normalized.canonical() == CUSTOMER_CANONICAL
    assert isinstance(normalized, AvroSchema)
    assert normalized.references == (ADDRESS_REFERENCE,)


def test_normalize_of_the_order_keeps_its_canonical_text() -> None:
    # already in Java's form: only the namespace of "Bare" changes, as in Confluent's
    # normal form (a full name without a dot inside a namespace takes that namespace)
    normalized = FORMAT.parse(ORDER).normalized().canonical()
    assert normalized == ORDER_CANONICAL.replace(',"namespace":""', "").replace(
        '["null","com.example.Address"]', '["null","Address"]'
    )


# --- compatibility -----------------------------------------------------------------

V1 = _record('{"name":"a","type":"int"}')
EVOLUTIONS = [
    # (case, reader, writer, [(type, location, detail)]) as Avro Java answers them
    ("same schema", V1, V1, []),
    (
        "field added with a default (backward)",
        _record('{"name":"a","type":"int"},{"name":"b","type":"string","default":""}'),
        V1,
        [],
    ),
    (
        "field added without a default (backward)",
        _record('{"name":"a","type":"int"},{"name":"b","type":"string"}'),
        V1,
        [("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/1", "b")],
    ),
    (
        "field removed (forward: the old schema reads the new data)",
        _record('{"name":"b","type":"string"}'),
        _record('{"name":"a","type":"int"},{"name":"b","type":"string"}'),
        [],
    ),
    ("int promoted to long", _record('{"name":"a","type":"long"}'), V1, []),
    (
        "long read as int",
        V1,
        _record('{"name":"a","type":"long"}'),
        [
            (
                "TYPE_MISMATCH",
                "/fields/0/type",
                "reader type: INT not compatible with writer type: LONG",
            )
        ],
    ),
    (
        "string read as bytes",
        _record('{"name":"a","type":"bytes"}'),
        _record('{"name":"a","type":"string"}'),
        [],
    ),
    (
        "float read as double in a map",
        '{"type":"map","values":"double"}',
        '{"type":"map","values":"float"}',
        [],
    ),
    (
        "enum symbols added",
        '{"type":"enum","name":"E","symbols":["A","B","C"]}',
        '{"type":"enum","name":"E","symbols":["A","B"]}',
        [],
    ),
    (
        "enum symbols removed",
        '{"type":"enum","name":"E","symbols":["A"]}',
        '{"type":"enum","name":"E","symbols":["A","D","C"]}',
        [("MISSING_ENUM_SYMBOLS", "/symbols", "[C, D]")],
    ),
    (
        "enum symbols removed with a reader default",
        '{"type":"enum","name":"E","symbols":["A","Z"],"default":"Z"}',
        '{"type":"enum","name":"E","symbols":["A","D"]}',
        [],
    ),
    (
        "union widened",
        _record('{"name":"a","type":["null","int","string"]}'),
        _record('{"name":"a","type":["null","int"]}'),
        [],
    ),
    (
        "union narrowed",
        _record('{"name":"a","type":["null","int"]}'),
        _record('{"name":"a","type":["null","int","string"]}'),
        [("MISSING_UNION_BRANCH", "/fields/0/type/2", "reader union lacking writer type: STRING")],
    ),
    ("field made optional", _record('{"name":"a","type":["null","long"]}'), V1, []),
    (
        "optional field made required",
        V1,
        _record('{"name":"a","type":["null","int"]}'),
        [
            (
                "TYPE_MISMATCH",
                "/fields/0/type/0",
                "reader type: INT not compatible with writer type: NULL",
            )
        ],
    ),
    (
        "nested record changed",
        _record(
            '{"name":"n","type":{"type":"record","name":"N","fields":['
            '{"name":"x","type":"int"},{"name":"y","type":"int"}]}}'
        ),
        _record(
            '{"name":"n","type":{"type":"record","name":"N","fields":[{"name":"x","type":"string"}]}}'
        ),
        [
            (
                "TYPE_MISMATCH",
                "/fields/0/type/fields/0/type",
                "reader type: INT not compatible with writer type: STRING",
            ),
            ("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/0/type/fields/1", "y"),
        ],
    ),
    (
        "record renamed",
        _record('{"name":"a","type":"int"}', name="S"),
        V1,
        [("NAME_MISMATCH", "/name", "expected: R")],
    ),
    (
        "record renamed with an alias",
        _record('{"name":"a","type":"int"}', name="S", extra=',"aliases":["R"]'),
        V1,
        [],
    ),
    ("field renamed with an alias", _record('{"name":"c","type":"int","aliases":["a"]}'), V1, []),
    (
        "fixed resized",
        '{"type":"fixed","name":"F","size":4}',
        '{"type":"fixed","name":"F","size":8}',
        [("FIXED_SIZE_MISMATCH", "/size", "expected: 8, found: 4")],
    ),
    (
        "array items changed",
        '{"type":"array","items":"int"}',
        '{"type":"array","items":"string"}',
        [("TYPE_MISMATCH", "/items", "reader type: INT not compatible with writer type: STRING")],
    ),
    (
        "recursive record promoted",
        '{"type":"record","name":"L","fields":[{"name":"v","type":"long"},'
        '{"name":"next","type":["null","L"]}]}',
        '{"type":"record","name":"L","fields":[{"name":"v","type":"int"},'
        '{"name":"next","type":["null","L"]}]}',
        [],
    ),
    (
        "recursive record changed",
        '{"type":"record","name":"L","fields":[{"name":"v","type":"int"},'
        '{"name":"next","type":["null","L"]}]}',
        '{"type":"record","name":"L","fields":[{"name":"v","type":"string"},'
        '{"name":"next","type":["null","L"]}]}',
        [
            (
                "TYPE_MISMATCH",
                "/fields/0/type",
                "reader type: INT not compatible with writer type: STRING",
            )
        ],
    ),
    (
        "several changes at once",
        _record(
            '{"name":"a","type":"string"},{"name":"b","type":"int"},'
            '{"name":"c","type":{"type":"enum","name":"E","symbols":["X"]}}'
        ),
        _record(
            '{"name":"a","type":"int"},{"name":"c","type":{"type":"enum","name":"E","symbols":["X","Y"]}}'
        ),
        [
            (
                "TYPE_MISMATCH",
                "/fields/0/type",
                "reader type: STRING not compatible with writer type: INT",
            ),
            ("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/1", "b"),
            ("MISSING_ENUM_SYMBOLS", "/fields/2/type/symbols", "[Y]"),
        ],
    ),
    (
        "a missing enum field with an enum default (Java compares it with the record)",
        _record(
            '{"name":"a","type":"int"},'
            '{"name":"e","type":{"type":"enum","name":"E","symbols":["X"],"default":"X"}}'
        ),
        V1,
        [
            (
                "TYPE_MISMATCH",
                "/fields/1/type",
                "reader type: ENUM not compatible with writer type: RECORD",
            )
        ],
    ),
    (
        "union branch renamed",
        '["null",{"type":"record","name":"A","fields":[]}]',
        '["null",{"type":"record","name":"B","fields":[]}]',
        [("MISSING_UNION_BRANCH", "/1", "reader union lacking writer type: RECORD")],
    ),
]


@pytest.mark.parametrize(
    ("reader", "writer", "expected"),
    [
        pytest.param(reader, writer, expected, id=case)
        for case, reader, writer, expected in EVOLUTIONS
    ],
)
def test_compatibility_follows_avro_with_each_place_and_rule(
    reader: str, writer: str, expected: list[tuple[str, str, str]]
) -> None:
    reader_schema, writer_schema = FORMAT.parse(reader), FORMAT.parse(writer)
    messages = FORMAT.compatibility_errors(reader_schema, writer_schema)
    assert messages == [_message(*incompatibility) for incompatibility in expected]
    # the apache avro package's own checker gives the same verdict
    verdict = ReaderWriterCompatibilityChecker().get_compatibility(
        reader_schema.model, writer_schema.model
    )
    assert (verdict.compatibility is SchemaCompatibilityType.compatible) == (not expected)


def _message(kind: str, location: str, detail: str) -> str:
    descriptions = {
        "READER_FIELD_MISSING_DEFAULT_VALUE": f"The field '{detail}' at path '{location}' in the "
        "reader schema has no default value and is missing in the writer schema",
        "TYPE_MISMATCH": f"The type (path '{location}') of a field in the reader schema does not "
        "match with the writer schema",
        "MISSING_ENUM_SYMBOLS": f"The reader schema is missing enum symbols '{detail}' at path "
        f"'{location}' in the writer schema",
        "MISSING_UNION_BRANCH": "The reader schema is missing a type inside a union field at path "
        f"'{location}' in the writer schema",
        "NAME_MISMATCH": f"The name of the schema has changed (path '{location}')",
        "FIXED_SIZE_MISMATCH": f"The size of FIXED type field at path '{location}' in the reader "
        "schema does not match with the writer schema",
    }
    return f"{{errorType:'{kind}', description:'{descriptions[kind]}', additionalInfo:'{detail}'}}"


def test_a_message_reads_as_confluents() -> None:
    [message] = FORMAT.compatibility_errors(
        FORMAT.parse(_record('{"name":"a","type":"int"},{"name":"b","type":"string"}')),
        FORMAT.parse(V1),
    )
    assert message == (
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'b' at path "
        "'/fields/1' in the reader schema has no default value and is missing in the writer "
        "schema', additionalInfo:'b'}"
    )


def test_a_reader_field_matching_two_writer_fields_is_reported() -> None:
    reader = FORMAT.parse(_record('{"name":"a","type":"int","aliases":["b"]}'))
    writer = FORMAT.parse(_record('{"name":"a","type":"int"},{"name":"b","type":"int"}'))
    assert FORMAT.compatibility_errors(reader, writer) == [
        "Unexpected exception during compatibility check: "
        "Reader field a matches multiple fields in writer: a, b"
    ]


def test_compatibility_reaches_into_referenced_types() -> None:
    widened = ADDRESS.replace('["HOME", "WORK"]', '["HOME", "WORK", "OTHER"]')
    old = FORMAT.parse(CUSTOMER, [ADDRESS_REFERENCE])
    new = FORMAT.parse(CUSTOMER, [ResolvedReference("com.shop.Address", widened)])
    assert FORMAT.compatibility_errors(new, old) == []
    # the enum is met three times (in each Address and as itself); Java reports the first
    # place each time, as here
    messages = FORMAT.compatibility_errors(old, new)
    assert messages == 3 * [
        _message("MISSING_ENUM_SYMBOLS", "/fields/0/type/fields/0/type/symbols", "[OTHER]")
    ]


# --- values ------------------------------------------------------------------------

EVENT = """{"type": "record", "name": "Event", "namespace": "e", "fields": [
  {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
  {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "day", "type": {"type": "int", "logicalType": "date"}},
  {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
   "scale": 2}},
  {"name": "raw", "type": "bytes"},
  {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
  {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
  {"name": "tags", "type": {"type": "array", "items": "string"}},
  {"name": "counts", "type": {"type": "map", "values": "long"}},
  {"name": "note", "type": ["null", "string"], "default": null},
  {"name": "ratio", "type": "double"},
  {"name": "ok", "type": "boolean"}
]}"""
EVENT_VALUE = {
    "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "at": datetime.datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=datetime.UTC),
    "day": datetime.date(2026, 1, 2),
    "price": decimal.Decimal("12.34"),
    "raw": b"\x00\xff",
    "digest": b"abcd",
    "kind": "B",
    "tags": ["x", "y"],
    "counts": {"a": 1, "b": -(2**40)},
    "note": None,
    "ratio": 0.5,
    "ok": True,
}


def test_values_round_trip() -> None:
    schema = FORMAT.parse(EVENT)
    assert FORMAT.decode(schema, FORMAT.encode(schema, EVENT_VALUE)) == EVENT_VALUE


def test_values_are_written_as_confluents_serializer_writes_them() -> None:
    """Confluent's AvroSerializer (with its in-process registry) frames a value; the
    bytes after the header decode here to the same value, and a value written here
    decodes with Confluent's AvroDeserializer."""
    client = SchemaRegistryClient.new_client({"url": "mock://sluice-avro-tests"})
    context = SerializationContext("events", MessageField.VALUE)
    serializer = AvroSerializer(client, EVENT, conf={"auto.register.schemas": True})
    deserializer = AvroDeserializer(client)
    schema = FORMAT.parse(EVENT)
    framed = serializer(EVENT_VALUE, context)
    assert framed is not None
    unframed = unframe(framed)
    assert FORMAT.decode(schema, bytes(unframed.payload)) == EVENT_VALUE
    ours = frame(unframed.schema_id, FORMAT.encode(schema, EVENT_VALUE))
    assert ours == framed
    assert deserializer(ours, context) == EVENT_VALUE


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "the bytes end inside it"),
        (b"\x02", "the bytes end inside it"),
        (b"\x02\x00\x00", "bytes left after the value"),
    ],
)
def test_bytes_that_are_not_a_value_are_refused(payload: bytes, reason: str) -> None:
    schema = FORMAT.parse('{"type":"record","name":"R","fields":[{"name":"s","type":"string"}]}')
    with pytest.raises(ValueError, match="not an Avro value of this schema") as refused:
        FORMAT.decode(schema, payload)
    assert reason in str(refused.value)


def test_a_value_that_does_not_fit_is_refused() -> None:
    schema = FORMAT.parse(V1)
    with pytest.raises(ValueError, match="the value does not fit the schema"):
        FORMAT.encode(schema, {"a": "not a number"})
    with pytest.raises(ValueError, match="the value does not fit the schema"):
        FORMAT.encode(schema, ["not", "a", "record"])


# --- bounds on values --------------------------------------------------------------

LINKED = (
    '{"type":"record","name":"Link","fields":[{"name":"v","type":"int"},'
    '{"name":"next","type":["null","Link"]}]}'
)
CHILD_TIMEOUT_S = 120.0
"""Bounds one child decode on a loaded machine; a crash or hang fails the test."""


def _linked_payload(depth: int) -> bytes:
    # each level: v = 0, then the union's branch 1 (Link); the last: branch 0 (null)
    return b"\x00\x02" * (depth - 1) + b"\x00\x00"


def _decode_in_child(schema_text: str, payload: bytes) -> subprocess.CompletedProcess[str]:
    """Decode in a child process, so that native code overflowing its stack fails this
    test instead of ending the test run."""
    program = (
        "import sys\n"
        "from sluice.schemas.avro import FORMAT\n"
        "schema = FORMAT.parse(sys.argv[1])\n"
        "try:\n"
        "    FORMAT.decode(schema, bytes.fromhex(sys.argv[2]))\n"
        "    print('decoded')\n"
        "except ValueError as error:\n"
        "    print('refused', error)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", program, schema_text, payload.hex()],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )


def test_a_value_nested_deeper_than_the_bound_is_refused_not_a_crash() -> None:
    # fastavro's compiled reader overflowed the stack at a few thousand levels
    done = _decode_in_child(LINKED, _linked_payload(10_000))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(
        f"refused not an Avro value this reader accepts: it nests deeper than {VALUE_DEPTH_MAX}"
    )


def test_a_value_nested_up_to_the_bound_is_read() -> None:
    schema = FORMAT.parse(LINKED)
    value = FORMAT.decode(schema, _linked_payload(VALUE_DEPTH_MAX))
    depth = 0
    while isinstance(value, dict):
        depth += 1
        value = value["next"]
    assert depth == VALUE_DEPTH_MAX
    with pytest.raises(ValueError, match="nests deeper than"):
        FORMAT.decode(schema, _linked_payload(VALUE_DEPTH_MAX + 1))


def test_a_value_to_write_nested_deeper_than_the_bound_is_refused() -> None:
    schema = FORMAT.parse(LINKED)
    value: dict[str, object] = {"v": 0, "next": None}
    for _ in range(VALUE_DEPTH_MAX):
        value = {"v": 0, "next": value}
    with pytest.raises(ValueError, match=f"nests deeper than {VALUE_DEPTH_MAX} levels"):
        FORMAT.encode(schema, value)


@pytest.mark.parametrize(
    "items",
    [
        '"null"',
        '{"type":"record","name":"Empty","fields":[]}',
        '{"type":"fixed","name":"Nothing","size":0}',
    ],
)
def test_arrays_of_items_of_no_bytes_are_bounded(items: str) -> None:
    schema = FORMAT.parse(f'{{"type":"array","items":{items}}}')
    # 2^40 items in a few bytes: fastavro would build them one by one
    huge = bytes.fromhex("808080808040") + b"\x00"
    with pytest.raises(ValueError, match=f"more than {ZERO_WIDTH_ITEMS_MAX} items of no bytes"):
        FORMAT.decode(schema, huge)
    assert len(cast("list[object]", FORMAT.decode(schema, b"\xd0\x0f\x00"))) == 1000


def test_a_schema_that_nests_without_end_refuses_every_payload() -> None:
    # fastavro's reader recursed until the stack overflowed, reading no bytes
    endless = '{"type":"record","name":"Z","fields":[{"name":"z","type":"Z"}]}'
    done = _decode_in_child(endless, b"")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("refused not an Avro value this reader accepts: it nests")


def test_values_of_schemas_without_such_risks_are_not_walked_twice() -> None:
    assert not FORMAT.parse(EVENT).checks_values
    assert FORMAT.parse(LINKED).checks_values
    assert FORMAT.parse('{"type":"array","items":"null"}').checks_values
