"""What walking the records of v2 batches costs where the broker walks many small ones:
decoding a records section, and a log cleaner pass (offset map, then rewrite).

In this process, no broker and no sockets, uncompressed batches of ``--per-batch``
records with short keys (``k<n>``) and ``--value-bytes`` values:

- ``decode``: ``decode_records`` of every batch's records section (what a fetch through
  the client library and every tool decoding a batch pay per record);
- ``clean, overwritten``: one compaction pass (``cleaner.prepare`` and ``build``, then
  ``discard``, so every round cleans the same log) over a log whose keys are each
  written ``--records / --keys`` times, one value in a hundred a tombstone: the offset
  map walks every record once, the rewrite walks every record again and rebuilds the
  batches (timestamps rewritten against the delete horizon where a tombstone stays);
- ``clean, unique``: the same pass over a log whose every key is new: both walks, and
  every batch copied as it is.

Each row is the fastest of ``--rounds`` rounds (a phase stops early after
``--phase-seconds``); records/s count the records of the log (a pass walks each twice),
MB/s the bytes of their batches (10^6 bytes). The log lives in a temporary directory
removed at the end.

    .venv/bin/python bench/record_walk.py
    .venv/bin/python bench/record_walk.py --records 50000 --rounds 3   # a quick run
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sluice.common.config import TopicConfig
from sluice.protocol.records import HEADER_BYTES, RecordInput, build_batch, decode_records
from sluice.storage import PartitionLog, cleaner

TIMESTAMP_MS = 1_700_000_000_000
SEGMENT_BYTES = 1024 * 1024
TOMBSTONE_EVERY_RECORDS = 100


def machine() -> str:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} logical cores, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )


def sample_batches(records: int, per_batch: int, value_bytes: int, keys: int) -> list[bytes]:
    """Batches of ``per_batch`` records; record n has key ``k<n % keys>`` and, but for
    every ``TOMBSTONE_EVERY_RECORDS``-th record, a value of ``value_bytes`` bytes."""
    batches = []
    for first in range(0, records, per_batch):
        inputs = [
            RecordInput(
                b"k%d" % (n % keys),
                None
                if n % TOMBSTONE_EVERY_RECORDS == 99
                else (b"v%d." % n).ljust(value_bytes, b"."),
                timestamp_ms=TIMESTAMP_MS + n,
            )
            for n in range(first, min(first + per_batch, records))
        ]
        batches.append(build_batch(inputs, base_timestamp_ms=TIMESTAMP_MS + first))
    return batches


def fastest_round(run: Callable[[], None], rounds: int, phase_seconds: float) -> float:
    best = float("inf")
    deadline = time.monotonic() + phase_seconds
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
        if time.monotonic() > deadline:
            break
    return best


def row(phase: str, records: int, size_bytes: int, seconds: float) -> str:
    return (
        f"| {phase} | {records:,} | {size_bytes / 1e6:,.1f} | {seconds * 1e3:,.0f} "
        f"| {records / seconds:,.0f} | {size_bytes / seconds / 1e6:,.1f} |"
    )


def clean_row(
    phase: str, directory: Path, batches: list[bytes], arguments: argparse.Namespace
) -> str:
    config = TopicConfig(cleanup_policy="compact", segment_bytes=SEGMENT_BYTES, retention_ms=-1)
    log = PartitionLog.open(directory, config)
    try:
        for batch in batches:
            log.append(bytearray(batch), leader_epoch=0)
        log.roll()
        log.update_high_watermark(log.log_end_offset)

        def one_pass() -> None:
            plan = cleaner.prepare(log, int(time.time() * 1000))
            assert plan is not None
            try:
                plan.build()
            finally:
                plan.discard()

        seconds = fastest_round(one_pass, arguments.rounds, arguments.phase_seconds)
    finally:
        log.close()
    return row(phase, arguments.records, sum(map(len, batches)), seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--per-batch", type=int, default=500)
    parser.add_argument("--value-bytes", type=int, default=20)
    parser.add_argument("--keys", type=int, default=10_000, help="for the overwritten log")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--phase-seconds", type=float, default=20.0)
    arguments = parser.parse_args()
    print(machine())
    print(
        f"{arguments.records:,} records of {arguments.value_bytes} B in batches of "
        f"{arguments.per_batch}, uncompressed"
    )
    print()
    print("| phase | records | MB | ms | records/s | MB/s |")
    print("|---|---:|---:|---:|---:|---:|")
    overwritten = sample_batches(
        arguments.records, arguments.per_batch, arguments.value_bytes, arguments.keys
    )
    sections = [batch[HEADER_BYTES:] for batch in overwritten]

    def decode_all() -> None:
        per_batch = arguments.per_batch
        for index, section in enumerate(sections):
            decode_records(section, min(per_batch, arguments.records - index * per_batch))

    seconds = fastest_round(decode_all, arguments.rounds, arguments.phase_seconds)
    print(row("decode", arguments.records, sum(map(len, sections)), seconds))
    unique = sample_batches(
        arguments.records, arguments.per_batch, arguments.value_bytes, arguments.records
    )
    with tempfile.TemporaryDirectory(prefix="record-walk-") as directory:
        print(clean_row("clean, overwritten", Path(directory) / "a", overwritten, arguments))
        print(clean_row("clean, unique", Path(directory) / "b", unique, arguments))


if __name__ == "__main__":
    main()
