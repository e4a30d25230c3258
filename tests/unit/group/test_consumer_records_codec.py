"""The bytes of the consumer-group records (KIP-848): every record round-trips, the
layouts are Kafka's (bytes built by hand from Kafka's schemas), and malformed bytes
raise CorruptMessage."""

from __future__ import annotations

import struct
import uuid

import pytest

from sluice.common.errors import CorruptMessage
from sluice.group.consumer_group import MemberState
from sluice.group.consumer_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicMetadataEntry,
    TopicPartitions,
)
from sluice.group.consumer_records_codec import (
    decode_record,
    encode_record,
    is_consumer_group_key,
)

TOPIC_A = uuid.UUID("0123456789abcdef0123456789abcdef")
TOPIC_B = uuid.UUID("fedcba9876543210fedcba9876543210")

RECORDS = [
    ConsumerGroupRecord(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(7)),
    ConsumerGroupRecord(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(7, -12345)),
    ConsumerGroupRecord(
        ConsumerGroupPartitionMetadataKey("g"),
        ConsumerGroupPartitionMetadataValue(
            (
                TopicMetadataEntry(TOPIC_A, "orders", 3),
                TopicMetadataEntry(TOPIC_B, "pay", 2, (("r1", "r2"), ("r2",))),
            )
        ),
    ),
    ConsumerGroupRecord(
        ConsumerGroupMemberMetadataKey("g", "m1"),
        ConsumerGroupMemberMetadataValue(
            instance_id="i1",
            rack_id=None,
            client_id="c",
            client_host="/127.0.0.1",
            subscribed_topic_names=("orders", "pay"),
            subscribed_topic_regex="or.*",
            rebalance_timeout_ms=30_000,
            server_assignor="uniform",
        ),
    ),
    ConsumerGroupRecord(
        ConsumerGroupMemberMetadataKey("g", "m2"),
        ConsumerGroupMemberMetadataValue(None, "rack", "", "", (), None, -1, None),
    ),
    ConsumerGroupRecord(
        ConsumerGroupTargetAssignmentMetadataKey("g"),
        ConsumerGroupTargetAssignmentMetadataValue(7),
    ),
    ConsumerGroupRecord(
        ConsumerGroupTargetAssignmentMemberKey("g", "m1"),
        ConsumerGroupTargetAssignmentMemberValue(
            (TopicPartitions(TOPIC_A, (0, 2)), TopicPartitions(TOPIC_B, (1,)))
        ),
    ),
    ConsumerGroupRecord(
        ConsumerGroupCurrentMemberAssignmentKey("g", "m1"),
        ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=7,
            previous_member_epoch=6,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned_partitions=(TopicPartitions(TOPIC_A, (0,)),),
            partitions_pending_revocation=(TopicPartitions(TOPIC_A, (1,)),),
        ),
    ),
]
TOMBSTONES = [ConsumerGroupRecord(record.key, None) for record in RECORDS]


@pytest.mark.parametrize("record", RECORDS + TOMBSTONES, ids=repr)
def test_every_record_round_trips(record: ConsumerGroupRecord) -> None:
    key, value = encode_record(record)
    assert is_consumer_group_key(key)
    assert decode_record(key, value) == record


def _string(value: str) -> bytes:
    return struct.pack(">h", len(value)) + value.encode()


def _compact(value: str) -> bytes:
    return bytes([len(value) + 1]) + value.encode()


def test_current_member_assignment_is_laid_out_as_kafka_does() -> None:
    """Kafka's ConsumerGroupCurrentMemberAssignmentKey (type 8, fixed layout) and value
    v0 (flexible: compact arrays, a tag buffer after every struct)."""
    key, value = encode_record(RECORDS[-1])
    assert key == b"\x00\x08" + _string("g") + _string("m1")

    def topic_partitions(partition: int) -> bytes:
        return (
            b"\x02"  # one entry (count + 1)
            + TOPIC_A.bytes
            + b"\x02"  # one partition
            + struct.pack(">i", partition)
            + b"\x00"  # the entry's tagged fields
        )

    expected = (
        b"\x00\x00"  # value version 0
        + b"\x00\x00\x00\x07"  # member epoch
        + b"\x00\x00\x00\x06"  # previous member epoch
        + b"\x01"  # state: UNREVOKED_PARTITIONS
        + topic_partitions(0)  # assigned
        + topic_partitions(1)  # pending revocation
        + b"\x00"  # the value's tagged fields
    )
    assert value == expected


def test_member_metadata_is_laid_out_as_kafka_does() -> None:
    key, value = encode_record(RECORDS[3])
    assert key == b"\x00\x05" + _string("g") + _string("m1")
    assert value == (
        b"\x00\x00"
        + _compact("i1")
        + b"\x00"  # rack id: null
        + _compact("c")
        + _compact("/127.0.0.1")
        + b"\x03"
        + _compact("orders")
        + _compact("pay")
        + _compact("or.*")
        + struct.pack(">i", 30_000)
        + _compact("uniform")
        + b"\x00"
    )


def test_group_metadata_hash_is_tag_zero_and_other_tags_are_skipped() -> None:
    key, value = encode_record(RECORDS[0])
    assert value == b"\x00\x00" + b"\x00\x00\x00\x07" + b"\x00"  # hash 0 is left out
    with_tags = (
        b"\x00\x00\x00\x00\x00\x07"
        + b"\x02"  # two tagged fields
        + b"\x00\x08"
        + struct.pack(">q", 99)  # tag 0: metadata hash
        + b"\x01\x08"
        + struct.pack(">q", 1_700_000_000_000)  # tag 1: creation time, skipped
    )
    assert decode_record(key, with_tags).value == ConsumerGroupMetadataValue(7, 99)


def test_other_keys_are_not_consumer_group_keys() -> None:
    assert not is_consumer_group_key(b"\x00\x02" + _string("g"))
    assert not is_consumer_group_key(b"\x00\x0b" + _string("g"))
    assert not is_consumer_group_key(b"\x00")


@pytest.mark.parametrize("record", RECORDS, ids=repr)
def test_truncated_or_padded_bytes_are_refused(record: ConsumerGroupRecord) -> None:
    key, value = encode_record(record)
    assert value is not None
    for end in range(len(key)):
        with pytest.raises(CorruptMessage):
            decode_record(key[:end], value)
    for end in range(len(value)):
        with pytest.raises(CorruptMessage):
            decode_record(key, value[:end])
    with pytest.raises(CorruptMessage):
        decode_record(key + b"\x00", value)
    with pytest.raises(CorruptMessage):
        decode_record(key, value + b"\x00")


def test_unknown_value_version_and_huge_counts_are_refused() -> None:
    key, value = encode_record(RECORDS[6])
    assert value is not None
    with pytest.raises(CorruptMessage, match="unknown version 1"):
        decode_record(key, b"\x00\x01" + value[2:])
    with pytest.raises(CorruptMessage, match="array of"):
        decode_record(key, b"\x00\x00\xff\xff\xff\x7f")
