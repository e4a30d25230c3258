"""Spark columns of registry schemas and the registry options: plain data, no Spark
session, no broker."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
import uuid
from typing import Any

import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sluice.client.consumer import ConsumedRecord
from sluice.schemas.api import SchemaType, format_for
from sluice.schemas.wire import frame
from sluice.spark.options import (
    RegistryOptions,
    SluiceOptionError,
    parse_sink_options,
    parse_source_options,
)
from sluice.spark.registry_values import (
    MalformedRecord,
    PlannedSchema,
    RecordDecoder,
    RegistryPlan,
    decoded_schema,
)
from sluice.spark.schema_columns import (
    UnsupportedSchema,
    avro_schema_for,
    column_for,
    format_value,
)
from sluice.spark.source import source_schema

BOOTSTRAP = {"bootstrap.servers": "127.0.0.1:9092"}
LOCAL_MICROS = "local-timestamp-micros"


def _avro(schema: object) -> object:
    return format_for(SchemaType.AVRO).parse(json.dumps(schema))


def test_avro_types_unions_and_logical_types() -> None:
    schema = _avro(
        {
            "type": "record",
            "name": "R",
            "fields": [
                {"name": "maybe", "type": ["null", "long"]},
                {"name": "either", "type": ["int", "string"]},
                {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
                {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
                {
                    "name": "local",
                    "type": {"type": "long", "logicalType": "local-timestamp-micros"},
                },
                {"name": "tags", "type": {"type": "map", "values": "string"}},
                {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
            ],
        }
    )
    plan = column_for(schema)  # type: ignore[arg-type]
    assert plan.data_type.simpleString() == (
        "struct<maybe:bigint,either:struct<member0:int,member1:string>,id:string,t:int,"
        "local:timestamp_ntz,tags:map<string,string>,e:string>"
    )
    nullable = {f.name: f.nullable for f in plan.data_type.fields}  # type: ignore[attr-defined]
    assert nullable["maybe"] and not nullable["id"]
    key = uuid.uuid4()
    value = {
        "maybe": None,
        "either": "x",
        "id": key,
        "t": datetime.time(0, 0, 1, 500_000),
        "local": datetime.datetime(2026, 1, 1),
        "tags": {"a": "b"},
        "e": "B",
    }
    assert plan.value_of(value) == {
        "maybe": None,
        "either": {"member1": "x"},
        "id": str(key),
        "t": 1500,
        "local": datetime.datetime(2026, 1, 1),
        "tags": [("a", "b")],
        "e": "B",
    }


def test_recursive_avro_records_are_refused() -> None:
    node = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"]}],
    }
    with pytest.raises(UnsupportedSchema, match="Node contains itself"):
        column_for(_avro(node))  # type: ignore[arg-type]
    with pytest.raises(UnsupportedSchema, match="Node contains itself"):
        column_for(_avro(["null", node]))  # type: ignore[arg-type]


def test_avro_schemas_that_are_not_records() -> None:
    assert column_for(_avro("string")).data_type == StringType()  # type: ignore[arg-type]
    items = {"type": "record", "name": "X", "fields": [{"name": "a", "type": "int"}]}
    both = _avro({"type": "array", "items": ["null", items, {"type": "map", "values": "X"}]})
    plan = column_for(both)  # type: ignore[arg-type]
    assert plan.data_type.simpleString() == (
        "array<struct<member0:struct<a:int>,member1:map<string,struct<a:int>>>>"
    )


def test_json_schema_columns_check_value_types() -> None:
    schema = format_for(SchemaType.JSON).parse(
        json.dumps(
            {
                "type": "object",
                "properties": {
                    "n": {"type": ["integer", "null"]},
                    "any": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                    "point": {"$ref": "#/definitions/Point"},
                },
                "definitions": {"Point": {"properties": {"x": {"type": "number"}}}},
            }
        )
    )
    plan = column_for(schema)
    assert plan.data_type.simpleString() == "struct<n:bigint,any:string,point:struct<x:double>>"
    assert plan.value_of({"n": 1, "any": [1], "point": {"x": 2}}) == {
        "n": 1,
        "any": "[1]",
        "point": {"x": 2.0},
    }
    with pytest.raises(ValueError, match="is not an integer"):
        plan.value_of({"n": 1.5})
    with pytest.raises(ValueError, match="is not an integer"):
        plan.value_of({"n": float("inf")})
    with pytest.raises(ValueError, match="beyond a long"):
        plan.value_of({"n": 2**63})


def test_protobuf_absent_fields_read_as_their_defaults() -> None:
    schema = format_for(SchemaType.PROTOBUF).parse(
        'syntax = "proto3"; import "google/protobuf/timestamp.proto"; '
        "message M { uint64 big = 1; optional string o = 2; bytes b = 3; "
        "map<string, int32> m = 4; google.protobuf.Timestamp at = 5; }"
    )
    plan = column_for(schema)
    assert plan.data_type.simpleString() == (
        "struct<big:decimal(20,0),o:string,b:binary,m:map<string,int>,at:timestamp>"
    )
    decoded = {"big": "18446744073709551615", "at": "2026-01-01T00:00:00Z"}
    assert plan.value_of(decoded) == {
        "big": decimal.Decimal(2**64 - 1),
        "o": None,
        "b": b"",
        "m": [],
        "at": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    }


def test_auto_registered_avro_schema_round_trips_a_row() -> None:
    spark_type = StructType(
        [
            StructField("id", LongType(), nullable=False),
            StructField("name", StringType(), nullable=True),
        ]
    )
    avro_schema = avro_schema_for(spark_type)
    assert avro_schema == {
        "type": "record",
        "name": "topLevelRecord",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["null", "string"], "default": None},
        ],
    }
    parsed = _avro(avro_schema)
    avro_format = format_for(SchemaType.AVRO)
    row = format_value(spark_type, {"id": 3, "name": None}, SchemaType.AVRO)
    decoded = avro_format.decode(parsed, avro_format.encode(parsed, row))  # type: ignore[arg-type]
    assert column_for(parsed).value_of(decoded) == {"id": 3, "name": None}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "a,b", "valueSchema": "registry"}, "option subject is required"),
        ({"subscribe": "a", "valueSchema": "avro"}, "valueSchema must be registry"),
        ({"subscribe": "a", "subject": "a-value"}, "subject needs valueSchema=registry"),
        ({"subscribe": "a", "valueSchema": "registry", "mode": "LAX"}, "mode must be"),
        ({"subscribe": "a", "valueSchema": "registry", "schemaVersion": "0"}, "schemaVersion"),
        ({"subscribe": "a", "valueSchema": "registry", "autoRegister": "true"}, "for writing"),
    ],
)
def test_bad_registry_options_are_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(SluiceOptionError, match=message):
        parse_source_options({**BOOTSTRAP, **options}, streaming=False)


def test_registry_options_default_to_the_topic_subjects() -> None:
    source = parse_source_options(
        {**BOOTSTRAP, "subscribe": "a", "valueSchema": "registry", "keySchema": "registry"},
        streaming=False,
    )
    assert source.registry is not None
    assert (source.registry.value_subject, source.registry.key_subject) == ("a-value", "a-key")
    assert source.registry.url == "http://127.0.0.1:8081"
    assert not source.registry.fail_fast
    sink = parse_sink_options({**BOOTSTRAP, "topic": "t", "keySchema": "registry"})
    assert sink.registry is not None
    assert (sink.registry.value_subject, sink.registry.key_subject) == (None, "t-key")
    with pytest.raises(SluiceOptionError, match="option subject is required"):
        parse_sink_options({**BOOTSTRAP, "valueSchema": "registry"})


def test_a_value_that_does_not_fit_its_column_is_a_decode_error_not_a_crash() -> None:
    """A decimal wider than the reader schema's precision (the wire does not carry the
    precision) cannot be an Arrow decimal(3, 1): that record gets a reason, the others
    read. Nothing here asks the registry: every value carries the planned schema's id."""
    narrow = {"type": "bytes", "logicalType": "decimal", "precision": 3, "scale": 1}
    wide = {**narrow, "precision": 9}
    avro_format = format_for(SchemaType.AVRO)
    planned = PlannedSchema("t-value", 7, 1, json.dumps(narrow), SchemaType.AVRO, ())
    wide_schema = _avro(wide)
    values = [decimal.Decimal("12.5"), decimal.Decimal("12345.6")]
    records = [
        ConsumedRecord("t", 0, offset, 0, None, frame(7, avro_format.encode(wide_schema, value)))  # type: ignore[arg-type]
        for offset, value in enumerate(values)
    ]
    options = RegistryOptions("http://127.0.0.1:9", None, "t-value", None)
    arrow_schema = to_arrow_schema(
        decoded_schema(source_schema(False), RegistryPlan(options, planned, None)), timezone="UTC"
    )

    async def decode(plan: RegistryPlan) -> dict[str, Any]:
        decoder = RecordDecoder(plan)
        try:
            return await decoder.columns(records, arrow_schema)
        finally:
            await decoder.close()

    columns = asyncio.run(decode(RegistryPlan(options, planned, None)))
    assert columns["value"].to_pylist() == [decimal.Decimal("12.5"), None]
    errors = columns["_decode_error"].to_pylist()
    assert errors[0] is None and "does not fit its column" in errors[1]
    fail_fast = RegistryOptions("http://127.0.0.1:9", None, "t-value", None, fail_fast=True)
    with pytest.raises(MalformedRecord, match="t-0 offset 1 cannot be decoded"):
        asyncio.run(decode(RegistryPlan(fail_fast, planned, None)))
