"""The pure half of the share consumer: acquired ranges over record batches (what the
application gets, what the client acknowledges as GAP), acknowledgement batches from
per-record decisions, and the share session's epochs."""

from __future__ import annotations

import random

import pytest

from sluice.client.consumer_api import ConsumerRecord
from sluice.client.share_records import (
    EPOCH_MAX,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    AcknowledgementBatch,
    AcknowledgeType,
    AcquiredRange,
    acknowledgement_batches,
    acquired_partition,
    has_renew,
    next_epoch,
)
from sluice.protocol.records.builder import (
    ControlRecordType,
    RecordInput,
    build_batch,
    build_control_batch,
)

ACCEPT = AcknowledgeType.ACCEPT
RELEASE = AcknowledgeType.RELEASE
REJECT = AcknowledgeType.REJECT
GAP = AcknowledgeType.GAP
RENEW = AcknowledgeType.RENEW


def _batch(base_offset: int, count: int) -> bytes:
    return build_batch(
        [RecordInput(None, f"v{base_offset + i}".encode()) for i in range(count)],
        base_offset=base_offset,
        base_timestamp_ms=1_000,
    )


def _marker(offset: int) -> bytes:
    return build_control_batch(
        ControlRecordType.COMMIT,
        producer_id=7,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp_ms=1_000,
        base_offset=offset,
    )


# ── acquired ranges over batches ─────────────────────────────────────────────────────────


def test_only_records_inside_acquired_ranges_are_handed_out_with_their_delivery_count() -> None:
    data = _batch(0, 4) + _batch(4, 4) + _marker(8) + _batch(9, 3)
    acquired = acquired_partition("jobs", 2, data, [AcquiredRange(2, 5, 1), AcquiredRange(7, 9, 3)])

    assert [(r.offset, r.delivery_count) for r in acquired.records] == [
        (2, 1),
        (3, 1),
        (4, 1),
        (5, 1),
        (7, 3),
        (9, 3),
    ]
    assert acquired.gaps == (8,)  # the marker: acquired, but no record for the application
    first = acquired.records[0]
    assert isinstance(first, ConsumerRecord)  # the Consumer's record type, plus a count
    assert (first.topic, first.partition, first.value, first.timestamp) == ("jobs", 2, b"v2", 1000)


def test_records_outside_every_range_are_not_handed_out() -> None:
    data = _batch(0, 10)
    acquired = acquired_partition("jobs", 0, data, [AcquiredRange(3, 3, 2)])
    assert [r.offset for r in acquired.records] == [3]
    assert acquired.gaps == ()


def test_compaction_gaps_inside_a_range_are_acknowledged_as_gap() -> None:
    compacted = build_batch(
        [RecordInput(b"a", b"1"), RecordInput(b"b", b"2")],
        base_offset=10,
        offset_deltas=[0, 3],
        last_offset_delta=4,
    )
    acquired = acquired_partition("jobs", 0, compacted, [AcquiredRange(10, 14, 1)])
    assert [r.offset for r in acquired.records] == [10, 13]
    assert acquired.gaps == (11, 12, 14)


def test_acquired_offsets_beyond_the_returned_batches_are_gaps() -> None:
    acquired = acquired_partition("jobs", 0, _batch(0, 2), [AcquiredRange(0, 3, 1)])
    assert [r.offset for r in acquired.records] == [0, 1]
    assert acquired.gaps == (2, 3)


def test_nothing_acquired_means_nothing_handed_out() -> None:
    assert acquired_partition("jobs", 0, _batch(0, 5), []).records == ()
    assert acquired_partition("jobs", 0, b"", [AcquiredRange(0, 1, 1)]).gaps == (0, 1)


def test_every_acquired_offset_is_either_a_record_or_a_gap() -> None:
    rng = random.Random(932)
    for _ in range(50):
        data = b""
        offset = 0
        for _batch_index in range(rng.randint(1, 6)):
            if rng.random() < 0.2:
                data += _marker(offset)
                offset += 1
            else:
                count = rng.randint(1, 5)
                data += _batch(offset, count)
                offset += count
        ranges, start = [], 0
        while start < offset:
            first = start + rng.randint(0, 3)
            last = min(offset - 1, first + rng.randint(0, 4))
            if first <= last:
                ranges.append(AcquiredRange(first, last, rng.randint(1, 5)))
            start = last + 2
        acquired = acquired_partition("t", 0, data, ranges)
        expected = {o for r in ranges for o in range(r.first_offset, r.last_offset + 1)}
        handed = [r.offset for r in acquired.records]
        assert sorted(handed + list(acquired.gaps)) == sorted(expected)
        assert len(set(handed)) == len(handed)


# ── acknowledgement batches ──────────────────────────────────────────────────────────────


def test_contiguous_decisions_of_one_type_make_one_batch_with_one_type() -> None:
    assert acknowledgement_batches({5: ACCEPT, 6: ACCEPT, 7: ACCEPT}) == [
        AcknowledgementBatch(5, 7, (ACCEPT,))
    ]


def test_mixed_types_are_listed_per_offset_and_holes_split_batches() -> None:
    decisions = {3: ACCEPT, 1: ACCEPT, 2: RELEASE, 9: REJECT, 10: GAP, 12: ACCEPT}
    assert acknowledgement_batches(decisions) == [
        AcknowledgementBatch(1, 3, (ACCEPT, RELEASE, ACCEPT)),
        AcknowledgementBatch(9, 10, (REJECT, GAP)),
        AcknowledgementBatch(12, 12, (ACCEPT,)),
    ]


def test_no_decisions_no_batches() -> None:
    assert acknowledgement_batches({}) == []


def test_batches_cover_exactly_the_decisions() -> None:
    rng = random.Random(79)
    kinds = list(AcknowledgeType)
    for _ in range(100):
        decisions = {o: rng.choice(kinds) for o in rng.sample(range(60), rng.randint(1, 40))}
        rebuilt: dict[int, AcknowledgeType] = {}
        for batch in acknowledgement_batches(decisions):
            size = batch.last_offset - batch.first_offset + 1
            assert len(batch.types) in (1, size)
            for index, offset in enumerate(range(batch.first_offset, batch.last_offset + 1)):
                rebuilt[offset] = batch.types[0 if len(batch.types) == 1 else index]
        assert rebuilt == decisions


def test_a_batch_as_request_fields_and_renew_detection() -> None:
    batch = AcknowledgementBatch(4, 5, (ACCEPT, RENEW))
    assert batch.as_fields() == {"first_offset": 4, "last_offset": 5, "acknowledge_types": [1, 4]}
    assert has_renew([AcknowledgementBatch(0, 0, (ACCEPT,)), batch])
    assert not has_renew([AcknowledgementBatch(0, 3, (ACCEPT,))])


# ── session epochs ───────────────────────────────────────────────────────────────────────


def test_epochs_count_up_from_the_opening_zero() -> None:
    epochs = [INITIAL_EPOCH]
    for _ in range(4):
        epochs.append(next_epoch(epochs[-1]))
    assert epochs == [0, 1, 2, 3, 4]


def test_epochs_wrap_to_one_never_back_to_zero() -> None:
    assert next_epoch(EPOCH_MAX - 1) == EPOCH_MAX
    assert next_epoch(EPOCH_MAX) == 1


@pytest.mark.parametrize("epoch", [FINAL_EPOCH, -5])
def test_after_the_final_epoch_comes_the_final_epoch(epoch: int) -> None:
    assert next_epoch(epoch) == FINAL_EPOCH
