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
