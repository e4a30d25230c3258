"""Per-batch tag summaries: what a batch's summary holds, kept in step with the log
(appends, truncation, the log start, the cleaner), and a view's fetch deciding from them
exactly as it decides by decoding (a randomized comparison; the seed is printed)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from cleaner_helpers import append_pairs, clean, settle
from conftest import OpenLog

from sluice.broker.extensions.views import filter_records
from sluice.common.clock import ManualClock
from sluice.features.view_filter import parse_filter
from sluice.protocol.fetch_response import RecordBytes
from sluice.protocol.records.batch import Compression, parse_header
from sluice.protocol.records.builder import RecordInput, build_batch
from sluice.storage import PartitionLog
from sluice.storage.tag_summary import COMBINATIONS_MAX, decode, encode, summarize


def tagged_batch(tags: list[list[bytes]], codec: Compression = Compression.NONE) -> bytearray:
    records = [
        RecordInput(b"k", b"v%d" % i, [("x-sluice-tag", t) for t in record_tags])
        for i, record_tags in enumerate(tags)
    ]
    return bytearray(build_batch(records, compression=codec, base_timestamp_ms=1000))


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
def test_a_summary_counts_each_tag_combination(codec: Compression) -> None:
    batch = tagged_batch([[b"red"], [], [b"red"], [b"red", b"blue"]], codec)
    summary = summarize(parse_header(batch), batch)
    assert summary == {
        frozenset({b"red"}): 2,
        frozenset(): 1,
        frozenset({b"red", b"blue"}): 1,
    }
    assert summary is not None and decode(encode(summary)) == summary
    untagged = tagged_batch([[], []])
    assert summarize(parse_header(untagged), untagged) == {frozenset(): 2}
    many = tagged_batch([[b"t%d" % i] for i in range(COMBINATIONS_MAX + 1)])
    assert summarize(parse_header(many), many) is None


def test_summaries_follow_the_log(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    log.append(tagged_batch([[b"red"]]), leader_epoch=0)  # before: never summarized
    summaries = log.enable_tag_summaries()
    for _ in range(4):
        log.append(tagged_batch([[b"red"], [b"blue"]]), leader_epoch=0)
    assert sorted(summaries.get(range(10))) == [1, 3, 5, 7]
    log.truncate_to(5)
    assert sorted(summaries.get(range(10))) == [1, 3]
    log.append(tagged_batch([[b"green"]]), leader_epoch=0)
    assert summaries.get([5]) == {5: {frozenset({b"green"}): 1}}
    settle(log)
    log.delete_records_before(2)
    assert sorted(summaries.get(range(10))) == [3, 5]
    append_pairs(log, Compression.NONE, [(b"k", b"x")])
    settle(log)
    clean(log)  # rewrites the batches it cleaned: their rows go
    assert summaries.get(range(10)) == {}


def test_enabling_again_forgets_what_an_earlier_run_left(open_log: OpenLog, tmp_path: Path) -> None:
    log = open_log()
    log.enable_tag_summaries()
    log.append(tagged_batch([[b"red"]]), leader_epoch=0)
    log.close()
    again = open_log()
    assert again.enable_tag_summaries().get([0]) == {}


def test_decisions_from_summaries_match_decoding(open_log: OpenLog) -> None:
    seed = int(os.environ.get("SLUICE_TEST_SEED", random.randrange(2**32)))
    print(f"seed {seed} (SLUICE_TEST_SEED={seed} reproduces this run)")
    rng = random.Random(seed)
    log: PartitionLog = open_log()
    summaries = log.enable_tag_summaries()
    palette = [b"red", b"blue", b"green"]
    for _ in range(60):
        style = rng.choice(["one", "none", "mixed", "multi"])
        size = rng.randint(1, 6)
        tags = [
            {
                "one": [b"red"],
                "none": [],
                "mixed": rng.sample(palette, 1),
                "multi": rng.sample(palette, rng.randint(0, 3)),
            }[style]
            for _ in range(size)
        ]
        log.append(
            tagged_batch(tags, rng.choice([Compression.NONE, Compression.LZ4])), leader_epoch=0
        )
    filters = [
        "tag = 'red'",
        "tag != 'red'",
        "tag in ('red', 'blue')",
        "not tag exists",
        "tag = 'green' or (tag = 'blue' and not tag = 'red')",
    ]
    for text in filters:
        view_filter = parse_filter(text)
        for start in range(0, log.log_end_offset, 17):
            slices = log.read(start, 1 << 20).slices
            fast = filter_records(slices, view_filter, summaries)
            slow = filter_records(slices, view_filter, None)
            as_bytes = [p.data if isinstance(p, RecordBytes) else p.read() for p in fast]  # type: ignore[union-attr]
            expected = [p.data if isinstance(p, RecordBytes) else p.read() for p in slow]  # type: ignore[union-attr]
            assert b"".join(as_bytes) == b"".join(expected), (seed, text, start)
