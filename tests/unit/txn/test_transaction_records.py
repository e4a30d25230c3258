"""``__transaction_state`` records: Kafka's version-0 layouts, round trips, and bytes
that are not ours refused with CorruptMessage."""

from __future__ import annotations

import struct

import pytest

from sluice.common import errors
from sluice.common.ids import TopicPartition
from sluice.txn.records import (
    TransactionState,
    TransactionValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

VALUE = TransactionValue(
    producer_id=4242,
    producer_epoch=7,
    timeout_ms=60_000,
    state=TransactionState.ONGOING,
    partitions=frozenset(
        {TopicPartition("orders", 0), TopicPartition("orders", 3), TopicPartition("b", 1)}
    ),
    last_update_ms=1_700_000_000_123,
    start_ms=1_700_000_000_000,
)


def test_key_and_value_round_trip_in_kafkas_layout() -> None:
    assert encode_key("app-1") == b"\x00\x00\x00\x05app-1"
    assert decode_key(encode_key("app-1")) == "app-1"
    data = encode_value(VALUE)
    assert data[:2] == b"\x00\x00", "value version 0"
    assert struct.unpack_from(">qhib", data, 2) == (4242, 7, 60_000, 1)
    assert decode_value(data) == VALUE
    empty = TransactionValue(1, 0, 1000, TransactionState.EMPTY, frozenset(), 5, -1)
    assert decode_value(encode_value(empty)) == empty


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (encode_value(VALUE)[:-3], "ends early"),
        (encode_value(VALUE) + b"\x00", "trailing"),
        (b"\x00\x01" + encode_value(VALUE)[2:], "version 1"),
        (encode_value(VALUE)[:16] + b"\x09" + encode_value(VALUE)[17:], "state 9"),
    ],
)
def test_bytes_that_are_not_a_value_of_ours_are_refused(data: bytes, problem: str) -> None:
    with pytest.raises(errors.CorruptMessage, match=problem):
        decode_value(data)


def test_a_key_of_another_version_is_refused() -> None:
    with pytest.raises(errors.CorruptMessage, match="version"):
        decode_key(b"\x00\x01\x00\x01a")


# Kafka's TransactionLogKey and TransactionLogValue, version 0, written out field by field
# (not by the encoder under test): what Kafka's own tools read in __transaction_state.
# fmt: off
KEY_BYTES = bytes.fromhex(
    "0000"  # key version 0
    "0006" "74786e2dc3a9"  # transactional id "txn-é": length in UTF-8 bytes, then bytes
)
VALUE_BYTES = bytes.fromhex(
    "0000"  # value version 0
    "0000000000001092"  # ProducerId 4242
    "0007"  # ProducerEpoch 7
    "0000ea60"  # TransactionTimeoutMs 60000
    "01"  # TransactionStatus: Ongoing
    "00000002"  # TransactionPartitions: 2 topics
    "0001" "62" "00000001" "00000001"  # "b": [1]
    "0006" "6f7264657273" "00000002" "00000000" "00000003"  # "orders": [0, 3]
    "0000018bcfe5687b"  # TransactionLastUpdateTimestampMs 1700000000123
    "0000018bcfe56800"  # TransactionStartTimestampMs 1700000000000
)
# fmt: on


def test_key_and_value_bytes_are_kafkas_version_0_layout() -> None:
    assert encode_key("txn-é") == KEY_BYTES
    assert decode_key(KEY_BYTES) == "txn-é"
    assert encode_value(VALUE) == VALUE_BYTES
    assert decode_value(VALUE_BYTES) == VALUE


def test_values_as_kafka_may_write_them_are_read() -> None:
    """Kafka writes topics and partition ids in no particular order, and Empty's
    partitions as a null array (count -1)."""
    unordered = bytes.fromhex(
        "0000" "0000000000001092" "0007" "0000ea60" "01"
        "00000002"
        "0006" "6f7264657273" "00000002" "00000003" "00000000"  # "orders": [3, 0]
        "0001" "62" "00000001" "00000001"  # "b": [1]
        "0000018bcfe5687b" "0000018bcfe56800"
    )  # fmt: skip
    assert decode_value(unordered) == VALUE
    empty_with_null_partitions = bytes.fromhex(
        "0000" "0000000000001092" "0008" "0000ea60" "00"
        "ffffffff"  # null array
        "0000018bcfe5687b" "ffffffffffffffff"  # no transaction started: -1
    )  # fmt: skip
    assert decode_value(empty_with_null_partitions) == TransactionValue(
        4242, 8, 60_000, TransactionState.EMPTY, frozenset(), 1_700_000_000_123, -1
    )


@pytest.mark.parametrize(
    ("state_byte", "state", "name"),
    [
        (0, TransactionState.EMPTY, "Empty"),
        (1, TransactionState.ONGOING, "Ongoing"),
        (2, TransactionState.PREPARE_COMMIT, "PrepareCommit"),
        (3, TransactionState.PREPARE_ABORT, "PrepareAbort"),
        (4, TransactionState.COMPLETE_COMMIT, "CompleteCommit"),
        (5, TransactionState.COMPLETE_ABORT, "CompleteAbort"),
        (6, TransactionState.DEAD, "Dead"),
        (7, TransactionState.PREPARE_EPOCH_FENCE, "PrepareEpochFence"),
    ],
)
def test_every_state_byte_is_kafkas(state_byte: int, state: TransactionState, name: str) -> None:
    value = TransactionValue(1, 0, 1000, state, frozenset(), 5, -1)
    data = encode_value(value)
    assert data[16] == state_byte
    assert decode_value(data) == value
    assert state.display_name == name


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (KEY_BYTES[:-1], "runs past the end"),
        (KEY_BYTES + b"\x00", "trailing"),
        (b"\x00\x00\x00\x02\xc3\x28", "not UTF-8"),
        (b"\x00", "ends early"),
    ],
)
def test_bytes_that_are_not_a_key_of_ours_are_refused(data: bytes, problem: str) -> None:
    with pytest.raises(errors.CorruptMessage, match=problem):
        decode_key(data)


def test_a_partition_count_that_cannot_fit_is_refused_before_reading_on() -> None:
    data = VALUE_BYTES[:17] + b"\x7f\xff\xff\xff" + VALUE_BYTES[21:]
    with pytest.raises(errors.CorruptMessage, match="cannot fit"):
        decode_value(data)
