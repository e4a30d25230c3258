"""The ``__consumer_offsets`` record codecs: golden bytes in Kafka's layouts, round trips,
every older version Kafka wrote, and every truncation / trailing byte / bad length
refused with CORRUPT_MESSAGE."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.common.errors import CorruptMessage
from sluice.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)

NO_DEADLINE = settings(deadline=None)
"""Properties check results, not speed: the suite runs on busy workers."""


def s(text: str | None) -> bytes:
    """A non-flexible protocol string."""
    if text is None:
        return struct.pack(">h", -1)
    encoded = text.encode()
    return struct.pack(">h", len(encoded)) + encoded


def b(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


MEMBER = MemberMetadataValue(
    member_id="c-1",
    group_instance_id="i-1",
    client_id="c",
    client_host="/10.0.0.1",
    rebalance_timeout_ms=300_000,
    session_timeout_ms=45_000,
    subscription=b"\x00\x01sub",
    assignment=b"\x00\x02asg",
)
GROUP_VALUE = GroupMetadataValue(
    protocol_type="consumer",
    generation=7,
    protocol="range",
    leader="c-1",
    current_state_timestamp_ms=1_700_000_000_123,
    members=(MEMBER, MemberMetadataValue("c-2", None, "c", "/h", 1, 2, b"", b"")),
)

# Hand-assembled from Kafka's OffsetCommitKey / OffsetCommitValue / GroupMetadataKey /
# GroupMetadataValue message definitions.
GOLDEN_OFFSET_KEY = struct.pack(">h", 1) + s("g") + s("orders") + struct.pack(">i", 3)
GOLDEN_GROUP_KEY = struct.pack(">h", 2) + s("g")
GOLDEN_OFFSET_VALUE_V3 = (
    struct.pack(">hqi", 3, 42, 5) + s("meta") + struct.pack(">q", 1_700_000_000_000)
)
GOLDEN_GROUP_VALUE_V3 = (
    struct.pack(">h", 3)
    + s("consumer")
    + struct.pack(">i", 7)
    + s("range")
    + s("c-1")
    + struct.pack(">q", 1_700_000_000_123)
    + struct.pack(">i", 2)
    + s("c-1")
    + s("i-1")
    + s("c")
    + s("/10.0.0.1")
    + struct.pack(">ii", 300_000, 45_000)
    + b(b"\x00\x01sub")
    + b(b"\x00\x02asg")
    + s("c-2")
    + s(None)
    + s("c")
    + s("/h")
    + struct.pack(">ii", 1, 2)
    + b(b"")
    + b(b"")
)


def test_golden_bytes() -> None:
    assert encode_key(OffsetCommitKey("g", "orders", 3)) == GOLDEN_OFFSET_KEY
    assert encode_key(GroupMetadataKey("g")) == GOLDEN_GROUP_KEY
    value = OffsetCommitValue(42, 5, "meta", 1_700_000_000_000)
    assert encode_offset_commit_value(value) == GOLDEN_OFFSET_VALUE_V3
    assert encode_group_metadata_value(GROUP_VALUE) == GOLDEN_GROUP_VALUE_V3
    assert decode_key(GOLDEN_OFFSET_KEY) == OffsetCommitKey("g", "orders", 3)
    assert decode_key(GOLDEN_GROUP_KEY) == GroupMetadataKey("g")
    assert decode_offset_commit_value(GOLDEN_OFFSET_VALUE_V3) == value
    assert decode_group_metadata_value(GOLDEN_GROUP_VALUE_V3) == GROUP_VALUE


def test_offset_commit_with_expiry_is_written_as_version_1() -> None:
    value = OffsetCommitValue(42, -1, "", 1000, expire_timestamp_ms=5000)
    encoded = encode_offset_commit_value(value)
    assert encoded == struct.pack(">hq", 1, 42) + s("") + struct.pack(">qq", 1000, 5000)
    assert decode_offset_commit_value(encoded) == value


def test_older_versions_are_read() -> None:
    assert decode_key(struct.pack(">h", 0) + s("g") + s("t") + struct.pack(">i", 1)) == (
        OffsetCommitKey("g", "t", 1)
    )
    v0 = struct.pack(">hq", 0, 9) + s("m") + struct.pack(">q", 77)
    assert decode_offset_commit_value(v0) == OffsetCommitValue(9, -1, "m", 77)
    v2 = struct.pack(">hq", 2, 9) + s("m") + struct.pack(">q", 77)
    assert decode_offset_commit_value(v2) == OffsetCommitValue(9, -1, "m", 77)
    member_v0 = s("m1") + s("cid") + s("host") + struct.pack(">i", 6000) + b(b"s") + b(b"a")
    group_v0 = (
        struct.pack(">h", 0)
        + s("consumer")
        + struct.pack(">i", 2)
        + s("range")
        + s("m1")
        + struct.pack(">i", 1)
        + member_v0
    )
    decoded = decode_group_metadata_value(group_v0)
    assert decoded.current_state_timestamp_ms == -1
    assert decoded.members == (
        MemberMetadataValue("m1", None, "cid", "host", 6000, 6000, b"s", b"a"),
    )
    member_v1 = s("m1") + s("cid") + s("host") + struct.pack(">ii", 9000, 6000) + b(b"s") + b(b"")
    group_v2 = (
        struct.pack(">h", 2)
        + s("")
        + struct.pack(">i", 0)
        + s(None)
        + s(None)
        + struct.pack(">q", 55)
        + struct.pack(">i", 1)
        + member_v1
    )
    decoded = decode_group_metadata_value(group_v2)
    assert decoded.protocol is None and decoded.leader is None
    assert decoded.current_state_timestamp_ms == 55
    assert decoded.members[0].rebalance_timeout_ms == 9000


DECODERS: list[tuple[str, Callable[[bytes], Any], bytes]] = [
    ("offset key", decode_key, GOLDEN_OFFSET_KEY),
    ("group key", decode_key, GOLDEN_GROUP_KEY),
    ("offset value", decode_offset_commit_value, GOLDEN_OFFSET_VALUE_V3),
    ("group value", decode_group_metadata_value, GOLDEN_GROUP_VALUE_V3),
]


@pytest.mark.parametrize(
    ("decoder", "data"), [d[1:] for d in DECODERS], ids=[d[0] for d in DECODERS]
)
def test_every_truncation_and_trailing_bytes_are_refused(
    decoder: Callable[[bytes], Any], data: bytes
) -> None:
    decoder(data)
    for length in range(len(data)):
        with pytest.raises(CorruptMessage):
            decoder(data[:length])
    with pytest.raises(CorruptMessage):
        decoder(data + b"\x00")


def test_bad_versions_lengths_and_text_are_refused() -> None:
    bad = [
        (decode_key, struct.pack(">h", 3) + s("g")),
        (decode_key, struct.pack(">h", -1) + s("g")),
        (decode_key, struct.pack(">h", 2) + s(None)),
        (decode_key, struct.pack(">h", 2) + struct.pack(">h", -2)),
        (decode_key, struct.pack(">h", 2) + struct.pack(">h", 2) + b"\xff\xfe"),
        (decode_offset_commit_value, struct.pack(">hq", 4, 1) + s("") + struct.pack(">q", 0)),
        (decode_offset_commit_value, struct.pack(">hq", 0, 1) + s(None) + struct.pack(">q", 0)),
        (
            decode_group_metadata_value,
            GOLDEN_GROUP_VALUE_V3[:2] + s(None) + GOLDEN_GROUP_VALUE_V3[12:],
        ),
    ]
    count_at = 2 + 10 + 4 + 7 + 5 + 8
    huge_count = bytearray(GOLDEN_GROUP_VALUE_V3)
    huge_count[count_at : count_at + 4] = struct.pack(">i", 2**31 - 1)
    negative_count = bytearray(GOLDEN_GROUP_VALUE_V3)
    negative_count[count_at : count_at + 4] = struct.pack(">i", -1)
    bad += [
        (decode_group_metadata_value, bytes(huge_count)),
        (decode_group_metadata_value, bytes(negative_count)),
    ]
    for decoder, data in bad:
        with pytest.raises(CorruptMessage):
            decoder(data)


texts = st.text(max_size=20)
ints32 = st.integers(-(2**31), 2**31 - 1)
ints64 = st.integers(-(2**63), 2**63 - 1)


@NO_DEADLINE
@given(group=texts, topic=texts, partition=ints32)
def test_keys_round_trip(group: str, topic: str, partition: int) -> None:
    assert decode_key(encode_key(OffsetCommitKey(group, topic, partition))) == OffsetCommitKey(
        group, topic, partition
    )
    assert decode_key(encode_key(GroupMetadataKey(group))) == GroupMetadataKey(group)


@NO_DEADLINE
@given(offset=ints64, epoch=ints32, metadata=texts, timestamp=ints64)
def test_offset_values_round_trip(offset: int, epoch: int, metadata: str, timestamp: int) -> None:
    value = OffsetCommitValue(offset, epoch, metadata, timestamp)
    assert decode_offset_commit_value(encode_offset_commit_value(value)) == value


members = st.builds(
    MemberMetadataValue,
    member_id=texts,
    group_instance_id=st.none() | texts,
    client_id=texts,
    client_host=texts,
    rebalance_timeout_ms=ints32,
    session_timeout_ms=ints32,
    subscription=st.binary(max_size=30),
    assignment=st.binary(max_size=30),
)


@NO_DEADLINE
@given(
    st.builds(
        GroupMetadataValue,
        protocol_type=texts,
        generation=ints32,
        protocol=st.none() | texts,
        leader=st.none() | texts,
        current_state_timestamp_ms=ints64,
        members=st.lists(members, max_size=4).map(tuple),
    )
)
def test_group_values_round_trip(value: GroupMetadataValue) -> None:
    assert decode_group_metadata_value(encode_group_metadata_value(value)) == value


@NO_DEADLINE
@given(st.binary(max_size=80))
def test_decoders_either_succeed_or_raise_corrupt_message(data: bytes) -> None:
    for decoder in (decode_key, decode_offset_commit_value, decode_group_metadata_value):
        try:
            decoder(data)
        except CorruptMessage:
            pass
