"""Registry schemas in Spark: values decoded into typed columns, rows encoded on write,
against the real broker's registry and a local Spark session."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
from typing import Any

import pytest
from conftest import create_topic, produce

from sluice.client.schema_registry import Schema, SchemaRegistryClient
from sluice.schemas.api import SchemaType, format_for
from sluice.schemas.wire import frame

pytestmark = pytest.mark.slow

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {
            "name": "amount",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
ORDER_V2 = {
    **ORDER_V1,
    "fields": [
        *ORDER_V1["fields"],  # type: ignore[list-item]
        {"name": "tier", "type": "string", "default": "basic"},
    ],
}
AT = datetime.datetime(2026, 11, 29, 12, 30, tzinfo=datetime.UTC)


def _register(url: str, subject: str, text: str, schema_type: SchemaType) -> int:
    async def main() -> int:
        async with SchemaRegistryClient(url) as registry:
            return await registry.register(subject, Schema(text, schema_type))

    return asyncio.run(main())


def _framed(schema_id: int, text: str, schema_type: SchemaType, value: object) -> bytes:
    schema_format = format_for(schema_type)
    return frame(schema_id, schema_format.encode(schema_format.parse(text), value))


def _read(spark: Any, broker: Any, topic: str, **options: str) -> Any:
    reader = (
        spark.read.format("sluice")
        .option("bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("valueSchema", "registry")
        .option("schemaRegistryUrl", broker.schema_registry_url)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _order(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "day": datetime.date(2026, 1, 1 + i),
        "amount": decimal.Decimal(f"{i}.25"),
        "at": AT,
        "note": None if i % 2 else f"n{i}",
    }


def test_avro_values_of_two_versions_read_into_the_latest(
    spark: Any, broker: Any, topic: str
) -> None:
    url = broker.schema_registry_url
    v1, v2 = json.dumps(ORDER_V1), json.dumps(ORDER_V2)
    id1 = _register(url, f"{topic}-value", v1, SchemaType.AVRO)
    id2 = _register(url, f"{topic}-value", v2, SchemaType.AVRO)
    create_topic(broker.bootstrap, topic, 1)
    values = [
        _framed(id1, v1, SchemaType.AVRO, _order(0)),
        _framed(id1, v1, SchemaType.AVRO, _order(1)),
        _framed(id2, v2, SchemaType.AVRO, {**_order(2), "tier": "gold"}),
        b"not framed",
        frame(id2, b"\x01"),  # framed, but not an Order
        None,  # a tombstone is no error
    ]
    produce(broker.bootstrap, topic, [(0, None, v, (), 1) for v in values])

    frame_ = _read(spark, broker, topic)
    value_type = dict(frame_.dtypes)["value"]
    assert value_type == (
        "struct<id:bigint,day:date,amount:decimal(9,2),at:timestamp,note:string,tier:string>"
    )
    rows = frame_.orderBy("offset").select("value.*", "_decode_error").collect()
    assert [(r.id, r.note, r.tier) for r in rows[:3]] == [
        (0, "n0", "basic"),
        (1, None, "basic"),
        (2, "n2", "gold"),
    ]
    assert rows[1].day == datetime.date(2026, 1, 2)
    assert rows[1].amount == decimal.Decimal("1.25")
    assert rows[1].at.replace(tzinfo=datetime.UTC) == AT
    assert [r._decode_error for r in rows[:3]] == [None] * 3
    assert rows[3].id is None and "magic byte" in rows[3]._decode_error
    assert rows[4].id is None and "not an Avro value" in rows[4]._decode_error
    assert rows[5].id is None and rows[5]._decode_error is None

    # Planned with version 1: version 2's field is dropped (Avro schema resolution).
    old = _read(spark, broker, topic, schemaVersion="1").orderBy("offset").limit(3)
    assert "tier" not in old.select("value.*").columns
    assert [r.id for r in old.select("value.id").collect()] == [0, 1, 2]

    with pytest.raises(Exception, match="mode is FAILFAST"):
        _read(spark, broker, topic, mode="FAILFAST").collect()


def test_json_and_protobuf_values_read_into_columns(spark: Any, broker: Any, topic: str) -> None:
    url = broker.schema_registry_url
    json_topic, proto_topic = f"{topic}-json", f"{topic}-proto"
    json_text = json.dumps(
        {
            "type": "object",
            "properties": {
                "sku": {"type": "string"},
                "qty": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
        }
    )
    proto_text = (
        'syntax = "proto3"; package shop; '
        "message Item { int64 id = 1; string name = 2; repeated int32 sizes = 3; "
        "Kind kind = 4; enum Kind { PLAIN = 0; FANCY = 1; } }"
    )
    json_id = _register(url, f"{json_topic}-value", json_text, SchemaType.JSON)
    proto_id = _register(url, f"{proto_topic}-value", proto_text, SchemaType.PROTOBUF)
    create_topic(broker.bootstrap, json_topic, 1)
    create_topic(broker.bootstrap, proto_topic, 1)
    json_values = [{"sku": "a", "qty": 2, "tags": ["x"]}, {"sku": "b", "qty": "many"}]
    produce(
        broker.bootstrap,
        json_topic,
        [(0, None, _framed(json_id, json_text, SchemaType.JSON, v), (), 1) for v in json_values[:1]]
        + [(0, None, frame(json_id, json.dumps(json_values[1]).encode()), (), 1)],
    )
    proto_values = [{"id": 7, "name": "hat", "sizes": [1, 2], "kind": "FANCY"}, {"id": 8}]
    produce(
        broker.bootstrap,
        proto_topic,
        [
            (0, None, _framed(proto_id, proto_text, SchemaType.PROTOBUF, v), (), 1)
            for v in proto_values
        ],
    )

    json_frame = _read(spark, broker, json_topic)
    assert dict(json_frame.dtypes)["value"] == "struct<sku:string,qty:bigint,tags:array<string>>"
    json_rows = json_frame.orderBy("offset").select("value.*", "_decode_error").collect()
    assert (json_rows[0].sku, json_rows[0].qty, json_rows[0].tags) == ("a", 2, ["x"])
    assert json_rows[1].sku is None and "is not an integer" in json_rows[1]._decode_error

    proto_frame = _read(spark, broker, proto_topic)
    assert dict(proto_frame.dtypes)["value"] == (
        "struct<id:bigint,name:string,sizes:array<int>,kind:string>"
    )
    proto_rows = proto_frame.orderBy("offset").select("value.*").collect()
    assert [tuple(r) for r in proto_rows] == [(7, "hat", [1, 2], "FANCY"), (8, "", [], "PLAIN")]


def test_rows_written_with_a_registered_schema_read_back(
    spark: Any, broker: Any, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    data = [(f"k{i}", (i, f"name-{i}", datetime.date(2026, 2, 1 + i), None)) for i in range(5)]
    frame_ = spark.createDataFrame(
        data, "key string, value struct<id: bigint, name: string, day: date, note: string>"
    ).coalesce(1)
    (
        frame_.write.format("sluice")
        .option("bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .option("valueSchema", "registry")
        .option("keySchema", "registry")
        .option("schemaRegistryUrl", broker.schema_registry_url)
        .option("autoRegister", "true")
        .mode("append")
        .save()
    )
    back = _read(spark, broker, topic, keySchema="registry").orderBy("offset")
    assert dict(back.dtypes)["key"] == "string"
    assert dict(back.dtypes)["value"] == "struct<id:bigint,name:string,day:date,note:string>"
    rows = back.select("key", "value.*", "_decode_error").collect()
    assert [(r.key, r.id, r.name, r.day, r.note) for r in rows] == [
        (f"k{i}", i, f"name-{i}", datetime.date(2026, 2, 1 + i), None) for i in range(5)
    ]
    assert {r._decode_error for r in rows} == {None}

    # Without autoRegister the subject's latest schema encodes; a row that does not fit
    # fails the write with the subject named.
    bad = spark.createDataFrame([(("x",),)], "value struct<wrong: string>")
    with pytest.raises(Exception, match=f"{topic}-value"):
        (
            bad.write.format("sluice")
            .option("bootstrap.servers", broker.bootstrap)
            .option("topic", topic)
            .option("valueSchema", "registry")
            .option("schemaRegistryUrl", broker.schema_registry_url)
            .mode("append")
            .save()
        )
