"""An empty ``cleanup.policy`` (allowed since Kafka 4.2) keeps every segment: neither
retention by time or size nor compaction touches the log."""

from __future__ import annotations

from conftest import OpenLog
from storage_helpers import make_batch, values_of

from sluice.protocol.records.batch import Compression
from sluice.storage import cleaner


def test_empty_cleanup_policy_deletes_and_compacts_nothing(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=1024, retention_ms=0, retention_bytes=0, cleanup_policy="")
    for i in range(12):
        log.append(make_batch(Compression.NONE, values_of(200, 2, seed=i)), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    segments = len(log.segments)
    assert segments > 3
    assert log.apply_retention(now_ms=2_000_000_000_000) == 0
    assert not cleaner.needs_cleaning(log, 2_000_000_000_000, min_cleanable_dirty_ratio=0.0)
    assert len(log.segments) == segments


def test_delete_policy_in_any_order_still_deletes(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=1024, retention_bytes=0, cleanup_policy="delete,compact")
    for i in range(12):
        log.append(make_batch(Compression.NONE, values_of(200, 2, seed=i)), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    assert log.apply_retention(now_ms=2_000_000_000_000) > 0
