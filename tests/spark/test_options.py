"""Option parsing and offset planning: plain data, no Spark session, no broker."""

from __future__ import annotations

import pytest

from sluice.common.ids import TopicPartition
from sluice.spark.options import (
    EARLIEST,
    LATEST,
    SluiceOptionError,
    parse_sink_options,
    parse_source_options,
)
from sluice.spark.planning import (
    OffsetRange,
    from_stream_offset,
    rate_limited_end,
    split_for_min_partitions,
    to_stream_offset,
)

BOOTSTRAP = {"bootstrap.servers": "127.0.0.1:9092"}


def test_defaults_follow_sparks_kafka_source() -> None:
    batch = parse_source_options({**BOOTSTRAP, "subscribe": "a, b"}, streaming=False)
    assert batch.subscription.topics == ("a", "b")
    assert batch.starting.default == EARLIEST
    assert batch.ending.default == LATEST
    assert batch.fail_on_data_loss is True
    stream = parse_source_options({**BOOTSTRAP, "subscribe": "a"}, streaming=True)
    assert stream.starting.default == LATEST


def test_offset_json_per_partition() -> None:
    options = parse_source_options(
        {
            **BOOTSTRAP,
            "assign": '{"a": [0, 1]}',
            "startingOffsets": '{"a": {"0": 5, "1": -2}}',
            "endingOffsets": '{"a": {"0": -1}}',
        },
        streaming=False,
    )
    assert options.subscription.assigned == (TopicPartition("a", 0), TopicPartition("a", 1))
    assert options.starting.for_partition(TopicPartition("a", 0)) == 5
    assert options.starting.for_partition(TopicPartition("a", 1)) == EARLIEST
    assert options.ending.for_partition(TopicPartition("a", 1)) == LATEST


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "a"}, "bootstrap.servers is required"),
        ({**BOOTSTRAP, "subscribe": "a", "bootstrap.servers": "nohost"}, "host:port"),
        ({**BOOTSTRAP}, "exactly one of the options subscribe"),
        ({**BOOTSTRAP, "subscribe": "a", "assign": '{"a": [0]}'}, "got subscribe, assign"),
        ({**BOOTSTRAP, "assign": "{not json"}, "assign is not valid JSON"),
        ({**BOOTSTRAP, "assign": '{"a": "0"}'}, "list of partition numbers"),
        ({**BOOTSTRAP, "subscribePattern": "("}, "subscribePattern"),
        ({**BOOTSTRAP, "subscribe": "a", "startingOffsets": "soon"}, "startingOffsets is not"),
        ({**BOOTSTRAP, "subscribe": "a", "startingOffsets": '{"a": {"x": 1}}'}, "not a number"),
        ({**BOOTSTRAP, "subscribe": "a", "endingOffsets": "earliest"}, "cannot be earliest"),
        ({**BOOTSTRAP, "subscribe": "a", "minPartitions": "0"}, "minPartitions must be positive"),
        ({**BOOTSTRAP, "subscribe": "a", "failOnDataLoss": "maybe"}, "true or false"),
        ({**BOOTSTRAP, "subscribe": "a", "maxOffsetsPerTrigger": "9"}, "streaming queries only"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(SluiceOptionError, match=message):
        parse_source_options(options, streaming=False)


def test_sink_options() -> None:
    assert parse_sink_options({**BOOTSTRAP, "topic": "t"}).topic == "t"
    with pytest.raises(SluiceOptionError, match="exactly-once"):
        parse_sink_options({**BOOTSTRAP, "deliveryGuarantee": "exactly-once"})
    with pytest.raises(SluiceOptionError, match="acks"):
        parse_sink_options({**BOOTSTRAP, "acks": "2"})


def test_min_partitions_halves_the_largest_range_first() -> None:
    ranges = [OffsetRange("a", 0, 0, 100), OffsetRange("a", 1, 0, 10), OffsetRange("a", 2, 5, 5)]
    split = split_for_min_partitions(ranges, 4)
    assert split == [
        OffsetRange("a", 0, 0, 25),
        OffsetRange("a", 0, 25, 50),
        OffsetRange("a", 0, 50, 100),
        OffsetRange("a", 1, 0, 10),
    ]
    assert split_for_min_partitions([OffsetRange("a", 0, 0, 1)], 8) == [OffsetRange("a", 0, 0, 1)]


def test_rate_limit_shares_the_cap_by_backlog() -> None:
    a, b, c = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
    end = rate_limited_end({a: 0, b: 0, c: 10}, {a: 300, b: 100, c: 10}, 100)
    assert end == {a: 75, b: 25, c: 10}
    end = rate_limited_end({a: 0, b: 0}, {a: 5, b: 5}, 3)
    assert sum(end.values()) == 3
    assert rate_limited_end({a: 0}, {a: 5}, None) == {a: 5}


def test_stream_offsets_round_trip_through_json_shape() -> None:
    offsets = {TopicPartition("t", 1): 7, TopicPartition("t", 0): 3}
    assert to_stream_offset(offsets) == {"t": {"0": 3, "1": 7}}
    assert from_stream_offset(to_stream_offset(offsets)) == offsets
