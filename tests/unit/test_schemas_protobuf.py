"""The Protobuf format: protoc's errors, references and well-known types, the base64
descriptors confluent-kafka-python's ProtobufSerializer registers, the canonical text's
round trip through the compiler, Confluent's compatibility rules, and message indexes
framed as confluent-kafka frames them."""

from __future__ import annotations

import base64
import concurrent.futures
import importlib
import importlib.resources
import io
import random
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.schema_registry.common.protobuf import _schema_to_str, _str_to_proto
from confluent_kafka.schema_registry.common.serde import SchemaId
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_tools import protoc

from sluice.schemas.api import InvalidSchema, ResolvedReference, SchemaType, format_for
from sluice.schemas.protobuf import (
    FORMAT,
    MESSAGE_INDEXES_MAX,
    ProtobufSchema,
    read_message_indexes,
    write_message_indexes,
)
from sluice.schemas.protobuf_text import default_json_name
from sluice.schemas.wire import frame, unframe

ORDER = """
syntax = "proto3";
package shop.v1;

import "google/protobuf/timestamp.proto";

// An order as the shop writes it.
message Order {
  string id = 1;
  int64 amount_cents = 2;
  google.protobuf.Timestamp placed_at = 3;
  map<string, Line> lines = 4;
  message Line {
    int32 quantity = 1;
    message Note { string text = 1; }
  }
}

message Refund {
  string order_id = 1;
}
"""

# Schemas the renderer must write back so protoc compiles them to the same descriptor.
ROUND_TRIP_CORPUS = {
    "proto3 nested, enums, maps, optional": ORDER
    + """
enum Status {
  STATUS_UNSPECIFIED = 0;
  STATUS_PAID = 1;
}
message WithOptional {
  optional int32 maybe = 1;
  repeated string tags = 2 [packed = false];
  map<int32, Status> by_number = 3;
  Status status = 4 [deprecated = true];
}
""",
    "proto2 required, defaults, extensions, groups": """
syntax = "proto2";
package legacy;
message Old {
  required int32 id = 1;
  optional string name = 2 [default = "a \\"quoted\\" name\\n"];
  optional bytes blob = 3 [default = "\\001\\377"];
  optional double ratio = 4 [default = -inf];
  optional Kind kind = 5 [default = SECOND];
  optional float small = 6 [default = 1.5e-10];
  repeated int32 packed_numbers = 7 [packed = true];
  optional group Result = 8 {
    optional string url = 9;
  }
  extensions 100 to 199;
  extensions 1000 to max;
  enum Kind { FIRST = 1; SECOND = 2; }
}
extend Old {
  optional int32 extra = 100;
}
""",
    "oneofs, reserved ranges and names, json names": """
syntax = "proto3";
message Payment {
  reserved 2, 15, 9 to 11, 40 to max;
  reserved "legacy", "older";
  string id = 1 [json_name = "paymentId"];
  oneof method {
    string card = 3;
    string iban = 4;
  }
  int32 after_oneof = 5;
  oneof other { bool flag = 6; }
}
enum Flags {
  option allow_alias = true;
  reserved 5, 10 to 20;
  reserved "GONE";
  FLAG_NONE = 0;
  FLAG_ZERO = 0;
  FLAG_ONE = 1 [deprecated = true];
}
""",
    "file options, services, no package": """
syntax = "proto3";
option java_package = "com.example.shop";
option java_multiple_files = true;
option optimize_for = SPEED;
option go_package = "example.com/shop;shop";
message Request { string q = 1; }
message Response { repeated string hits = 1; }
service Search {
  option deprecated = true;
  rpc Find (Request) returns (Response);
  rpc Stream (stream Request) returns (stream Response) {
    option idempotency_level = NO_SIDE_EFFECTS;
  }
}
""",
    "custom options and well-known types": """
syntax = "proto3";
package opts;
import "google/protobuf/descriptor.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/any.proto";
message Rule { string expr = 1; int32 level = 2; }
extend google.protobuf.FieldOptions {
  optional Rule rule = 50001;
  optional string label = 50002;
}
extend google.protobuf.MessageOptions {
  repeated int32 tiers = 50003;
}
message Guarded {
  option (tiers) = 1;
  option (tiers) = 2;
  string name = 1 [(label) = "the name", (rule) = { expr: "size > 0" level: 2 }];
  google.protobuf.Struct extra = 2;
  google.protobuf.Any detail = 3;
}
""",
    "empty proto3 file": 'syntax = "proto3";\n',
}


def _compile_pb2(tmp_path: Path, name: str, text: str, module: str) -> object:
    """A generated ``_pb2`` module of ``text``, as an application would import it."""
    (tmp_path / name).write_text(text)
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    status = protoc.main(
        ["protoc", f"-I{tmp_path}", f"-I{well_known}", f"--python_out={tmp_path}", name]
    )
    assert status == 0
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(tmp_path))


# -- parsing ---------------------------------------------------------------------------------


def test_format_for_protobuf_is_this_format() -> None:
    assert format_for(SchemaType.PROTOBUF) is FORMAT
    assert FORMAT.parse(ORDER).schema_type is SchemaType.PROTOBUF


def test_compile_error_carries_protocs_message_line_and_column() -> None:
    with pytest.raises(InvalidSchema) as raised:
        FORMAT.parse('syntax = "proto3";\nmessage A {\n  strin name = 1;\n  int32 id = 1;\n}\n')
    message = str(raised.value)
    assert 'schema:3:3: "strin" is not defined.' in message
    assert "Field number 1 has already been used" in message


def test_syntax_error_is_invalid_schema() -> None:
    with pytest.raises(InvalidSchema, match="schema:1:"):
        FORMAT.parse("this is not protobuf")


def test_references_are_imported_by_their_names() -> None:
    money = (
        'syntax = "proto3";\npackage common;\n'
        "message Money { int64 units = 1; string currency = 2; }\n"
    )
    price = (
        'syntax = "proto3";\npackage catalog;\nimport "common/money.proto";\n'
        "message Price { common.Money amount = 1; }\n"
    )
    schema = FORMAT.parse(price, [ResolvedReference("common/money.proto", money)])
    assert schema.record_names() == ["catalog.Price"]
    assert [file.name for file in schema.files] == ["common/money.proto", "default.proto"]
    assert 'import "common/money.proto";' in schema.canonical()
    assert "  .common.Money amount = 1;" in schema.canonical()
    encoded = FORMAT.encode(schema, {"amount": {"units": "3", "currency": "EUR"}})
    assert FORMAT.decode(schema, encoded) == {"amount": {"units": "3", "currency": "EUR"}}


def test_missing_reference_is_invalid_schema() -> None:
    with pytest.raises(InvalidSchema, match=r"common/money\.proto"):
        FORMAT.parse(
            'syntax = "proto3";\nimport "common/money.proto";\nmessage A { int32 x = 1; }\n'
        )


@pytest.mark.parametrize("name", ["../escape.proto", "/etc/passwd", "a//b.proto", "", "a\\b.proto"])
def test_reference_names_must_be_relative_import_paths(name: str) -> None:
    with pytest.raises(InvalidSchema, match="relative import path"):
        FORMAT.parse(
            'syntax = "proto3";\nmessage A { int32 x = 1; }\n', [ResolvedReference(name, "")]
        )


def test_well_known_types_come_with_the_compiler() -> None:
    text = """
syntax = "proto3";
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
message Event {
  google.protobuf.Timestamp at = 1;
  google.protobuf.Duration took = 2;
  google.protobuf.StringValue note = 3;
  google.protobuf.Struct data = 4;
}
"""
    schema = FORMAT.parse(text)
    value = {
        "at": "2026-01-02T03:04:05Z",
        "took": "1.500s",
        "note": "hi",
        "data": {"k": [1.0, "v"]},
    }
    assert FORMAT.decode(schema, FORMAT.encode(schema, value)) == value


def test_compiler_warnings_stay_off_standard_error(capfd: pytest.CaptureFixture[str]) -> None:
    unused = (
        'syntax = "proto3";\nimport "google/protobuf/timestamp.proto";\n'
        "message A { int32 x = 1; }\n"
    )
    schema = FORMAT.parse(unused)
    assert schema.record_names() == ["A"]
    assert FORMAT.parse("message NoSyntax { optional int32 x = 1; }").record_names() == ["NoSyntax"]
    written = capfd.readouterr()
    assert written.err == ""
    assert "is unused" not in written.out


def test_parses_on_many_threads_at_once_agree() -> None:
    texts = list(ROUND_TRIP_CORPUS.values()) * 4
    expected = {text: FORMAT.parse(text).canonical() for text in ROUND_TRIP_CORPUS.values()}
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        canonical = list(pool.map(lambda text: FORMAT.parse(text).canonical(), texts))
    assert canonical == [expected[text] for text in texts]


def test_a_schema_named_like_a_reference_does_not_clash() -> None:
    reference = 'syntax = "proto3";\npackage other;\nmessage B { int32 y = 1; }\n'
    schema = FORMAT.parse(
        'syntax = "proto3";\nimport "default.proto";\nmessage A { other.B b = 1; }\n',
        [ResolvedReference("default.proto", reference)],
    )
    assert schema.record_names() == ["A"]


# -- base64 descriptors from confluent-kafka-python ------------------------------------------


def test_serializer_descriptor_parses_to_the_same_schema_as_its_text(tmp_path: Path) -> None:
    module = _compile_pb2(tmp_path, "sluice_test_order.proto", ORDER, "sluice_test_order_pb2")
    registered = _schema_to_str(module.DESCRIPTOR)  # type: ignore[attr-defined]
    from_descriptor = FORMAT.parse(registered)
    from_text = FORMAT.parse(ORDER)
    assert from_descriptor.canonical() == from_text.canonical()
    assert from_descriptor.record_names() == ["shop.v1.Order", "shop.v1.Refund"]
    message = module.Order(id="o-1", amount_cents=1250)  # type: ignore[attr-defined]
    message.lines["a"].quantity = 2
    payload = write_message_indexes([0]) + message.SerializeToString()
    assert FORMAT.decode(from_descriptor, payload) == {
        "id": "o-1",
        "amount_cents": "1250",
        "lines": {"a": {"quantity": 2}},
    }


def test_serializer_descriptor_with_a_descriptor_reference(tmp_path: Path) -> None:
    money = 'syntax = "proto3";\npackage sluice_test_ref;\nmessage Money { int64 units = 1; }\n'
    price = (
        'syntax = "proto3";\npackage sluice_test_ref;\nimport "sluice_test_money.proto";\n'
        "message Price { Money amount = 1; }\n"
    )
    _compile_pb2(tmp_path, "sluice_test_money.proto", money, "sluice_test_money_pb2")
    price_module = _compile_pb2(tmp_path, "sluice_test_price.proto", price, "sluice_test_price_pb2")
    dependency = price_module.DESCRIPTOR.dependencies[0]  # type: ignore[attr-defined]
    schema = FORMAT.parse(
        _schema_to_str(price_module.DESCRIPTOR),  # type: ignore[attr-defined]
        [ResolvedReference(dependency.name, _schema_to_str(dependency))],
    )
    assert schema.record_names() == ["sluice_test_ref.Price"]
    assert schema == FORMAT.parse(price, [ResolvedReference("sluice_test_money.proto", money)])


def test_descriptor_proto_itself_round_trips() -> None:
    """descriptor.proto: proto2, defaults, extension ranges, reserved, many options."""
    registered = base64.standard_b64encode(descriptor_pb2.DESCRIPTOR.serialized_pb).decode()
    schema = FORMAT.parse(registered)
    again = FORMAT.parse(schema.canonical())
    assert again.file == schema.file
    assert "google.protobuf.FileDescriptorSet" in schema.record_names()


def test_serialized_is_what_confluents_deserializer_loads() -> None:
    schema = FORMAT.parse(ORDER)
    file = _str_to_proto("order.proto", schema.serialized())
    pool = DescriptorPool()
    for dependency in schema.files[:-1]:
        pool.Add(dependency)
    pool.Add(file)
    assert (
        pool.FindMessageTypeByName("shop.v1.Order.Line.Note").full_name == "shop.v1.Order.Line.Note"
    )
    assert FORMAT.parse(schema.serialized()) == schema


# -- the canonical text ------------------------------------------------------------------------


@pytest.mark.parametrize("text", ROUND_TRIP_CORPUS.values(), ids=ROUND_TRIP_CORPUS.keys())
def test_canonical_text_compiles_back_to_the_same_descriptor(text: str) -> None:
    schema = FORMAT.parse(text)
    again = FORMAT.parse(schema.canonical())
    assert again.file == schema.file, schema.canonical()
    assert again.canonical() == schema.canonical()
    from_descriptor = FORMAT.parse(schema.serialized())
    assert from_descriptor.file == schema.file


def test_canonical_text_drops_comments_and_layout() -> None:
    spaced = ORDER.replace("\n", "\n\n").replace("  ", "\t")
    assert FORMAT.parse(spaced).canonical() == FORMAT.parse(ORDER).canonical()
    assert "//" not in FORMAT.parse(ORDER).canonical()


def test_custom_option_defined_nowhere_is_refused_not_dropped() -> None:
    file = descriptor_pb2.FileDescriptorProto(name="x.proto", syntax="proto3")
    message = file.message_type.add(name="A")
    message.field.add(name="x", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32)
    # An unknown field 50001 (varint 7) in the field's options: a custom option whose
    # definition was not sent.
    message.field[0].options.MergeFromString(b"\x88\xb5\x18\x07")
    registered = base64.standard_b64encode(file.SerializeToString()).decode()
    with pytest.raises(InvalidSchema, match=r"custom options numbered \[50001\]"):
        FORMAT.parse(registered)


@pytest.mark.parametrize(
    ("field_name", "json_name"),
    [("foo_bar", "fooBar"), ("x", "x"), ("a__b_", "aB"), ("_lead", "Lead")],
)
def test_default_json_name_matches_protoc(field_name: str, json_name: str) -> None:
    assert default_json_name(field_name) == json_name
    schema = FORMAT.parse(f'syntax = "proto3";\nmessage A {{ int32 {field_name} = 1; }}\n')
    assert schema.file.message_type[0].field[0].json_name == json_name
    assert "json_name" not in schema.canonical()


def test_normalized_sorts_what_does_not_change_meaning() -> None:
    first = """
syntax = "proto3";
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
message A {
  int32 b = 2;
  oneof choice { string y = 6; string x = 5; }
  int32 a = 1;
  google.protobuf.Timestamp t = 3;
  google.protobuf.Duration d = 4;
  reserved 20, 10;
}
enum E { E_Z = 0; E_B = 2; E_A = 1; }
"""
    second = """
syntax = "proto3";
import "google/protobuf/duration.proto";
import "google/protobuf/timestamp.proto";
message A {
  reserved 10, 20;
  int32 a = 1;
  int32 b = 2;
  google.protobuf.Timestamp t = 3;
  google.protobuf.Duration d = 4;
  oneof choice { string x = 5; string y = 6; }
}
enum E { E_Z = 0; E_A = 1; E_B = 2; }
"""
    assert FORMAT.parse(first).canonical() != FORMAT.parse(second).canonical()
    assert (
        FORMAT.parse(first).normalized().canonical()
        == FORMAT.parse(second).normalized().canonical()
    )
    # Messages keep their order: values' message indexes count on it.
    two = 'syntax = "proto3";\nmessage B { int32 x = 1; }\nmessage A { int32 x = 1; }\n'
    assert FORMAT.parse(two).normalized().record_names() == ["B", "A"]


def test_record_names_are_the_top_level_messages_first_first() -> None:
    assert FORMAT.parse(ORDER).record_names() == ["shop.v1.Order", "shop.v1.Refund"]
    assert FORMAT.parse('syntax = "proto3";\nenum E { A = 0; }\n').record_names() == []


# -- compatibility ------------------------------------------------------------------------------

BASE = """
syntax = "proto3";
package shop;
message Order {
  string id = 1;
  int32 count = 2;
  Line line = 3;
  oneof pay { string card = 4; string iban = 5; }
  message Line { int32 quantity = 1; }
}
message Other { int32 x = 1; }
"""


def _variant(old: str, new: str, base: str = BASE) -> str:
    assert old in base
    return base.replace(old, new)


COMPATIBILITY_TABLE = {
    "identical": (BASE, []),
    "field added": (_variant("int32 count = 2;", "int32 count = 2;\n  string note = 9;"), []),
    "field removed": (_variant("int32 count = 2;", ""), []),
    "field renamed": (_variant("int32 count = 2;", "int32 amount = 2;"), []),
    "int32 to int64 (same wire group)": (_variant("int32 count = 2;", "int64 count = 2;"), []),
    "string to bytes": (_variant("string id = 1;", "bytes id = 1;"), []),
    "message added": (BASE + "message New { int32 y = 1; }\n", []),
    "messages reordered": (
        _variant("message Other { int32 x = 1; }\n", "") + "message Other { int32 x = 1; }\n",
        [],
    ),
    "enum added": (BASE + "enum E { A = 0; }\n", []),
    "oneof field added": (_variant("string iban = 5;", "string iban = 5; string paypal = 6;"), []),
    "whole oneof removed": (_variant("oneof pay { string card = 4; string iban = 5; }", ""), []),
    "oneof field moved to top level": (
        _variant(
            "oneof pay { string card = 4; string iban = 5; }", "string card = 4; string iban = 5;"
        ),
        [],
    ),
    "message removed": (_variant("message Other { int32 x = 1; }\n", ""), ["MESSAGE_REMOVED"]),
    "package changed": (_variant("package shop;", "package store;"), ["PACKAGE_CHANGED"]),
    "scalar kind changed": (
        _variant("int32 count = 2;", "string count = 2;"),
        ["FIELD_SCALAR_KIND_CHANGED"],
    ),
    "int32 to sint32": (
        _variant("int32 count = 2;", "sint32 count = 2;"),
        ["FIELD_SCALAR_KIND_CHANGED"],
    ),
    "scalar to message": (_variant("int32 count = 2;", "Line count = 2;"), ["FIELD_KIND_CHANGED"]),
    "message type renamed": (
        _variant("Line line = 3;", "Other line = 3;"),
        ["FIELD_NAMED_TYPE_CHANGED"],
    ),
    "nested message made incompatible": (
        _variant("message Line { int32 quantity = 1; }", "message Line { string quantity = 1; }"),
        ["FIELD_SCALAR_KIND_CHANGED", "FIELD_NAMED_TYPE_CHANGED"],
    ),
    "plain proto3 field made optional": (
        _variant("int32 count = 2;", "optional int32 count = 2;"),
        [],
    ),
    "oneof field removed": (_variant("string iban = 5;", ""), ["ONEOF_FIELD_REMOVED"]),
    "two fields moved into a oneof": (
        _variant(
            "string id = 1;\n  int32 count = 2;", "oneof both { string id = 1; int32 count = 2; }"
        ),
        ["MULTIPLE_FIELDS_MOVED_TO_ONEOF"],
    ),
    "field moved into an existing oneof": (
        _variant("string iban = 5; }", "string iban = 5; int32 count = 2; }").replace(
            "  int32 count = 2;\n", "", 1
        ),
        ["FIELD_MOVED_TO_EXISTING_ONEOF"],
    ),
    "map value type changed": (
        _variant("Line line = 3;", "Line line = 3;\n  map<string, int32> tags = 7;"),
        None,  # checked below against a map of strings
    ),
}


def _error_types(errors: list[str]) -> list[str]:
    return [error.split('"')[1] for error in errors]


@pytest.mark.parametrize(
    ("reader_text", "expected"),
    [value for value in COMPATIBILITY_TABLE.values() if value[1] is not None],
    ids=[key for key, value in COMPATIBILITY_TABLE.items() if value[1] is not None],
)
def test_backward_compatibility_table(reader_text: str, expected: list[str]) -> None:
    writer = FORMAT.parse(BASE)
    reader = FORMAT.parse(reader_text)
    errors = FORMAT.compatibility_errors(reader, writer)
    assert sorted(_error_types(errors)) == sorted(expected), errors


def test_proto2_required_fields_added_or_removed_are_incompatible() -> None:
    writer = FORMAT.parse('syntax = "proto2";\nmessage A { required int32 a = 1; }\n')
    added = FORMAT.parse(
        'syntax = "proto2";\nmessage A { required int32 a = 1; required int32 b = 2; }\n'
    )
    removed = FORMAT.parse('syntax = "proto2";\nmessage A { optional int32 z = 9; }\n')
    assert _error_types(FORMAT.compatibility_errors(added, writer)) == ["REQUIRED_FIELD_ADDED"]
    assert _error_types(FORMAT.compatibility_errors(removed, writer)) == ["REQUIRED_FIELD_REMOVED"]
    repeated = FORMAT.parse('syntax = "proto2";\nmessage A { repeated int32 a = 1; }\n')
    assert "FIELD_NUMERIC_LABEL_CHANGED" in _error_types(
        FORMAT.compatibility_errors(repeated, writer)
    )


def test_map_value_kind_change_is_incompatible_and_messages_name_path_and_roles() -> None:
    writer = FORMAT.parse('syntax = "proto3";\nmessage A { map<string, int32> m = 1; }\n')
    reader = FORMAT.parse('syntax = "proto3";\nmessage A { map<string, string> m = 1; }\n')
    errors = FORMAT.compatibility_errors(reader, writer)
    assert errors == [
        '{errorType:"FIELD_SCALAR_KIND_CHANGED", description:"The kind of a SCALAR field at path '
        "'#/A/1' in the reader schema does not match its kind in the writer schema\"}"
    ]
    assert FORMAT.compatibility_errors(writer, writer) == []


def test_recursive_messages_compare_without_looping() -> None:
    tree = 'syntax = "proto3";\nmessage Node { repeated Node children = 1; int32 v = 2; }\n'
    changed = 'syntax = "proto3";\nmessage Node { repeated Node children = 1; string v = 2; }\n'
    errors = FORMAT.compatibility_errors(FORMAT.parse(changed), FORMAT.parse(tree))
    assert "FIELD_SCALAR_KIND_CHANGED" in _error_types(errors)


def test_compatibility_direction_is_reader_against_writer() -> None:
    small = FORMAT.parse(_variant("message Other { int32 x = 1; }\n", ""))
    full = FORMAT.parse(BASE)
    assert FORMAT.compatibility_errors(full, small) == []  # the new reader has more messages
    assert _error_types(FORMAT.compatibility_errors(small, full)) == ["MESSAGE_REMOVED"]


# -- message indexes and values --------------------------------------------------------------


@pytest.mark.parametrize("indexes", [[0], [1], [0, 0], [1, 0], [1, 2, 3], [64], [300, 70000]])
def test_message_indexes_are_confluents_bytes(indexes: list[int]) -> None:
    ours = write_message_indexes(indexes)
    framed = SchemaId("PROTOBUF", 42, None, indexes).id_to_bytes()
    assert framed == frame(42, ours)
    parsed = SchemaId("PROTOBUF")
    rest = parsed.from_bytes(io.BytesIO(framed + b"tail"))
    assert parsed.message_indexes == indexes
    assert read_message_indexes(ours + b"tail") == (indexes, len(ours))
    assert rest.read() == b"tail"


def test_single_zero_byte_means_the_first_message() -> None:
    assert write_message_indexes([0]) == b"\x00"
    assert read_message_indexes(b"\x00\x0a") == ([0], 1)


def test_nested_message_value_round_trips_through_confluents_framing() -> None:
    schema = FORMAT.parse(ORDER)
    # Order's nested messages are its map's entry (declared first) and Line, as in the
    # descriptor confluent-kafka counts.
    assert schema.message_descriptor([0, 0]).full_name == "shop.v1.Order.LinesEntry"
    assert schema.message_descriptor([0, 1, 0]).full_name == "shop.v1.Order.Line.Note"
    assert schema.message_descriptor([1]).full_name == "shop.v1.Refund"
    payload = FORMAT.encode_message(schema, {"text": "fragile"}, [0, 1, 0])
    header = SchemaId("PROTOBUF", 7, None, [0, 1, 0]).id_to_bytes()
    note_class = schema.message_class([0, 1, 0])
    wire = header + note_class(text="fragile").SerializeToString()
    assert frame(7, payload) == wire
    framed = unframe(wire)
    assert framed.schema_id == 7
    assert FORMAT.decode(schema, bytes(framed.payload)) == {"text": "fragile"}


def test_encode_writes_the_first_message() -> None:
    schema = FORMAT.parse(ORDER)
    payload = FORMAT.encode(schema, {"id": "x"})
    assert payload[:1] == b"\x00"
    assert FORMAT.decode(schema, payload) == {"id": "x"}


@pytest.mark.parametrize("indexes", [[2], [0, 2], [0, 1, 0, 0], [-1]])
def test_index_out_of_range_is_a_value_error(indexes: list[int]) -> None:
    schema = FORMAT.parse(ORDER)
    with pytest.raises(ValueError, match="message index"):
        FORMAT.decode(schema, write_message_indexes(indexes) + b"")


def test_bad_values_and_bytes_are_value_errors() -> None:
    schema = FORMAT.parse(ORDER)
    with pytest.raises(ValueError, match="no_such_field"):
        FORMAT.encode(schema, {"no_such_field": 1})
    with pytest.raises(ValueError, match="written from a dict"):
        FORMAT.encode(schema, ["not", "a", "dict"])
    with pytest.raises(ValueError, match=r"not a shop\.v1\.Order"):
        FORMAT.decode(schema, b"\x00\x0a\x05ab")  # a string field cut short
    with pytest.raises(ValueError, match="end before"):
        FORMAT.decode(schema, b"")
    with pytest.raises(ValueError, match="outside"):
        read_message_indexes(bytes([0x01]))  # count -1
    too_many = bytearray()
    count = (MESSAGE_INDEXES_MAX + 1) << 1
    while count >= 0x80:
        too_many.append((count & 0x7F) | 0x80)
        count >>= 7
    too_many.append(count)
    with pytest.raises(ValueError, match="outside"):
        read_message_indexes(bytes(too_many))


def _splits(data: bytes) -> Iterator[bytes]:
    for end in range(len(data)):
        yield data[:end]


def test_every_truncation_of_an_index_list_is_a_value_error() -> None:
    encoded = write_message_indexes([300, 70000, 5])
    for prefix in _splits(encoded):
        with pytest.raises(ValueError):
            read_message_indexes(prefix)


def test_random_bytes_read_as_indexes_or_raise_value_error() -> None:
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    generator = random.Random(seed)
    schema = FORMAT.parse(ORDER)
    for _ in range(2000):
        data = bytes(generator.randrange(256) for _ in range(generator.randrange(12)))
        try:
            FORMAT.decode(schema, data)
        except ValueError:
            pass


def test_schemas_compare_by_canonical_text() -> None:
    assert FORMAT.parse(ORDER) == FORMAT.parse(ORDER.replace("// An order", "// Some order"))
    assert isinstance(FORMAT.parse(ORDER), ProtobufSchema)
    assert len({FORMAT.parse(ORDER), FORMAT.parse(ORDER)}) == 1
