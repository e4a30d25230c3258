"""The coordinator's reading of a consumer's assignment bytes (for the lag metrics of
partitions assigned without a committed offset): every version the client writes, and
``None`` (nothing known), never an exception, for any truncation or garbage."""

from __future__ import annotations

import pytest

from sluice.client.groups import ASSIGNMENT_VERSION_MAX, encode_consumer_assignment
from sluice.common.ids import TopicPartition
from sluice.group.state import consumer_assignment_partitions


@pytest.mark.parametrize("version", range(ASSIGNMENT_VERSION_MAX + 1))
def test_every_version_is_read(version: int) -> None:
    data = encode_consumer_assignment(
        {"orders": [0, 2], "payments": [1]}, version=version, user_data=b"opaque"
    )
    assert consumer_assignment_partitions(data) == {
        TopicPartition("orders", 0),
        TopicPartition("orders", 2),
        TopicPartition("payments", 1),
    }
    assert consumer_assignment_partitions(encode_consumer_assignment({}, version=version)) == (
        frozenset()
    )


def test_every_truncation_and_garbage_is_unknown_not_an_error() -> None:
    data = encode_consumer_assignment({"orders": [0, 1, 2]})
    for end in range(len(data)):
        found = consumer_assignment_partitions(data[:end])
        assert found is None or found <= {TopicPartition("orders", p) for p in range(3)}
    assert consumer_assignment_partitions(b"") is None
    assert consumer_assignment_partitions(b"\xff\xff\x00\x00\x00\x00") is None
    assert consumer_assignment_partitions(b"\x00\x00\x7f\xff\xff\xff") is None
    assert (
        consumer_assignment_partitions(b"\x00\x00\x00\x00\x00\x01\x00\x01\xff\x00\x00\x00\x00")
        is None
    )
