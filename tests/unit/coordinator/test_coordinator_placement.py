"""Group → ``__consumer_offsets`` partition (Kafka's rule; expected values computed with
Java's ``String.hashCode`` in jshell), and reading consumers' subscriptions."""

from __future__ import annotations

import io

import pytest
from kio.schema.consumer_protocol_subscription.v3 import ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v3.data import TopicPartition as OwnedPartitions
from kio.serial import entity_writer
from kio.static.primitive import i32

from sluice.coordinator.placement import java_string_hashcode, partition_for
from sluice.group.state import consumer_subscription_topics

JAVA = [
    ("", 0, 0),
    ("a", 97, 47),
    ("group", 98629247, 47),
    ("test-group", 627841412, 12),
    ("my-consumer-group", 1513705513, 13),
    ("héllo", 103094734, 34),
    ("日本語グループ", -305235731, 17),
    ("emoji-\U0001f600", 1164511306, 6),
    ("polygenelubricants", -(2**31), 0),
    ("console-consumer-12345", 158455506, 6),
]


@pytest.mark.parametrize(("group_id", "hashcode", "partition"), JAVA)
def test_matches_java(group_id: str, hashcode: int, partition: int) -> None:
    assert java_string_hashcode(group_id) == hashcode
    assert partition_for(group_id, 50) == partition


def test_one_partition_takes_everything() -> None:
    assert {partition_for(str(i), 1) for i in range(100)} == {0}


def _v3_subscription(topics: tuple[str, ...]) -> bytes:
    buffer = io.BytesIO()
    buffer.write((3).to_bytes(2, "big"))
    entity_writer(ConsumerProtocolSubscription)(
        buffer,
        ConsumerProtocolSubscription(
            topics=topics,
            user_data=b"user",
            owned_partitions=(OwnedPartitions(topic="x", partitions=(i32(1),)),),
            generation_id=i32(4),
            rack_id="r",
        ),
    )
    return buffer.getvalue()


def test_consumer_subscription_topics() -> None:
    assert consumer_subscription_topics(_v3_subscription(("a", "b"))) == frozenset({"a", "b"})
    assert consumer_subscription_topics(_v3_subscription(())) == frozenset()
    assert consumer_subscription_topics(b"") is None
    assert consumer_subscription_topics(b"\x00\x00\x00\x00\x00\x01\x00\x05ab") is None
    assert consumer_subscription_topics(b"\xff\xff\x00\x00\x00\x00") is None
    assert consumer_subscription_topics(b"\x00\x00\x7f\xff\xff\xff") is None
    assert consumer_subscription_topics(b"\x00\x00\x00\x00\x00\x01\x00\x01\xff") is None
