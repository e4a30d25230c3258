"""Batch reads and writes against a real broker and a local Spark session."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from conftest import create_topic, produce

pytestmark = pytest.mark.slow

BASE_TIMESTAMP_MS = 1_700_000_000_000


def _rows(count: int, partitions: int) -> list[Any]:
    return [
        (
            i % partitions,
            None if i % 7 == 0 else f"key-{i}".encode(),
            f"value-{i}".encode(),
            (("n", str(i).encode()), ("empty", None)) if i % 2 else (),
            BASE_TIMESTAMP_MS + i,
        )
        for i in range(count)
    ]


def _reader(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("sluice").option("bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader


def test_batch_read_returns_exactly_what_was_produced(spark: Any, broker: Any, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 3)
    rows = _rows(900, 3)
    delivered = produce(broker.bootstrap, topic, rows)
    frame = _reader(spark, broker.bootstrap, subscribe=topic, includeHeaders="true").load()
    assert frame.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    got = {(r.partition, r.offset): r for r in frame.collect()}
    assert len(got) == len(rows)
    for (partition, key, value, headers, timestamp_ms), metadata in zip(
        rows, delivered, strict=True
    ):
        row = got[(metadata.partition, metadata.offset)]
        assert row.partition == partition
        assert row.topic == topic
        assert (None if row.key is None else bytes(row.key)) == key
        assert bytes(row.value) == value
        assert [(h.key, None if h.value is None else bytes(h.value)) for h in row.headers] == list(
            headers
        )
        expected_time = datetime.datetime.fromtimestamp(timestamp_ms / 1000, datetime.UTC)
        assert row.timestamp.replace(tzinfo=datetime.UTC) == expected_time
        assert row.timestampType == 0


def test_log_append_time_topics_read_with_timestamp_type_1(
    spark: Any, broker: Any, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    before_ms = int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)
    produce(broker.bootstrap, topic, _rows(20, 1))
    rows = _reader(spark, broker.bootstrap, subscribe=topic).load().collect()
    assert len(rows) == 20
    assert {row.timestampType for row in rows} == {1}
    for row in rows:
        stamped_ms = row.timestamp.replace(tzinfo=datetime.UTC).timestamp() * 1000
        assert stamped_ms >= before_ms - 1, "the broker's append time, not the producer's"


def test_offset_ranges_and_min_partitions(spark: Any, broker: Any, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, _rows(200, 2))
    frame = _reader(
        spark,
        broker.bootstrap,
        subscribe=topic,
        startingOffsets=f'{{"{topic}": {{"0": 10, "1": -2}}}}',
        endingOffsets=f'{{"{topic}": {{"0": 60, "1": -1}}}}',
        minPartitions="6",
    ).load()
    assert frame.rdd.getNumPartitions() == 6
    offsets = sorted((r.partition, r.offset) for r in frame.select("partition", "offset").collect())
    assert offsets == [(0, o) for o in range(10, 60)] + [(1, o) for o in range(100)]
    assign = _reader(spark, broker.bootstrap, assign=f'{{"{topic}": [1]}}').load()
    assert assign.count() == 100
    pattern = _reader(spark, broker.bootstrap, subscribePattern=f"{topic}|nothing-.*").load()
    assert pattern.count() == 200


def test_batch_write_then_read_back(spark: Any, broker: Any, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 2)
    data = [
        (f"k{i}".encode(), f"v{i}".encode(), [("h", f"{i}".encode())], i % 2) for i in range(300)
    ]
    frame = spark.createDataFrame(
        data,
        "key binary, value binary, headers array<struct<key string, value binary>>, partition int",
    ).coalesce(1)
    (
        frame.write.format("sluice")
        .option("bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .mode("append")
        .save()
    )
    back = _reader(spark, broker.bootstrap, subscribe=topic, includeHeaders="true").load()
    rows = back.orderBy("partition", "offset").collect()
    assert len(rows) == 300
    for partition in (0, 1):
        values = [bytes(r.value) for r in rows if r.partition == partition]
        assert values == [f"v{i}".encode() for i in range(partition, 300, 2)]
    assert all(bytes(r.headers[0].value) == bytes(r.value)[1:] for r in rows)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "x"}, "bootstrap.servers is required"),
        ({"subscribe": "x", "assign": '{"x": [0]}', "bootstrap.servers": "B"}, "exactly one of"),
        ({"assign": "[oops", "bootstrap.servers": "B"}, "not valid JSON"),
        ({"subscribe": "no-such-topic-anywhere", "bootstrap.servers": "B"}, "does not exist"),
    ],
)
def test_bad_options_fail_with_a_clear_message(
    spark: Any, broker: Any, options: dict[str, str], message: str
) -> None:
    reader = spark.read.format("sluice")
    for name, value in options.items():
        reader = reader.option(name, broker.bootstrap if value == "B" else value)
    with pytest.raises(Exception, match=message):
        reader.load().collect()


def test_writer_needs_a_topic(spark: Any, broker: Any) -> None:
    frame = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="topic option or give the DataFrame a topic column"):
        frame.write.format("sluice").option("bootstrap.servers", broker.bootstrap).mode(
            "append"
        ).save()
