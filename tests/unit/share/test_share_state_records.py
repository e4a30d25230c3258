"""``__share_group_state`` records: the version-0 layouts, round trips, and bytes that are
not a snapshot of ours refused with CorruptMessage."""

from __future__ import annotations

import struct
import uuid

import pytest

from sluice.common import errors
from sluice.share.state import DeliveryState, ShareState, ShareStateKey, StateBatch
from sluice.share.state_records import decode_key, decode_value, encode_key, encode_value

TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
KEY = ShareStateKey("queue-a", TOPIC_ID, 3)
STATE = ShareState(
    state_epoch=2,
    start_offset=100,
    batches=(
        StateBatch(100, 104, DeliveryState.ACKNOWLEDGED, 1),
        StateBatch(105, 105, DeliveryState.AVAILABLE, 3),
        StateBatch(110, 119, DeliveryState.ARCHIVED, 5),
    ),
    leader_epoch=7,
)


def test_key_and_value_round_trip_in_the_documented_layout() -> None:
    key_bytes = encode_key(KEY)
    assert key_bytes == b"\x00\x00\x00\x07queue-a" + TOPIC_ID.bytes + b"\x00\x00\x00\x03"
    assert decode_key(key_bytes) == KEY
    data = encode_value(STATE)
    assert struct.unpack_from(">hiiqi", data) == (0, 2, 7, 100, 3)
    assert struct.unpack_from(">qqbh", data, 22) == (100, 104, 2, 1)
    assert len(data) == 22 + 3 * 19
    assert decode_value(data) == STATE
    fresh = ShareState(0, 0)
    assert decode_value(encode_value(fresh)) == fresh


def test_a_group_id_outside_ascii_round_trips() -> None:
    key = ShareStateKey("file d'attente é", uuid.uuid4(), 0)
    assert decode_key(encode_key(key)) == key


def _value(*batches: tuple[int, int, int, int], start: int = 100) -> bytes:
    head = struct.pack(">hiiqi", 0, 1, 1, start, len(batches))
    return head + b"".join(struct.pack(">qqbh", *batch) for batch in batches)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (encode_value(STATE)[:10], "ends early"),
        (encode_value(STATE) + b"\x00", "trailing"),
        (b"\x00\x01" + encode_value(STATE)[2:], "version 1"),
        (struct.pack(">hiiqi", 0, 1, 1, 100, 1_000_000), "cannot fit"),
        (struct.pack(">hiiqi", 0, 1, 1, 100, -1), "cannot fit"),
        (_value((100, 101, 3, 1)), "delivery state 3"),
        (_value((100, 101, 1, 1)), "ACQUIRED"),
        (_value((105, 101, 0, 1)), "ends before it starts"),
        (_value((90, 101, 0, 1)), "below the start offset"),
        (_value((100, 110, 0, 1), (105, 120, 0, 1)), "overlaps"),
        (_value((100, 101, 0, -1)), "negative count"),
        (_value(start=-1), "start offset -1"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_values_that_are_not_ours_are_corrupt(data: bytes, problem: str) -> None:
    with pytest.raises(errors.CorruptMessage, match=problem):
        decode_value(data)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (encode_key(KEY)[:-1], "ends early"),
        (encode_key(KEY) + b"\x00", "trailing"),
        (b"\x00\x01" + encode_key(KEY)[2:], "version 1"),
        (b"\x00\x00\x00\x09queue-a", "runs past the end"),
        (b"\x00\x00\x00\x02\xff\xfe" + TOPIC_ID.bytes + b"\x00\x00\x00\x00", "not UTF-8"),
        (b"\x00\x00\x00\x01q" + TOPIC_ID.bytes + b"\xff\xff\xff\xff", "partition -1"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_keys_that_are_not_ours_are_corrupt(data: bytes, problem: str) -> None:
    with pytest.raises(errors.CorruptMessage, match=problem):
        decode_key(data)


def test_the_coordinator_key_is_kafkas_and_reads_back() -> None:
    assert KEY.coordinator_key() == "queue-a:ABEiM0RVZneImaq7zN3u_w:3"
    assert ShareStateKey.from_coordinator_key(KEY.coordinator_key()) == KEY
    with_colons = ShareStateKey("a:b", TOPIC_ID, 12)
    assert ShareStateKey.from_coordinator_key(with_colons.coordinator_key()) == with_colons
    for text in ("g:x:0", "g", ":ABEiM0RVZneImaq7zN3u_w:3", "g:ABEiM0RVZneImaq7zN3u_w:-1"):
        with pytest.raises(ValueError):
            ShareStateKey.from_coordinator_key(text)
