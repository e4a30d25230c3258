"""What the produce-time records check costs per batch, beside what the broker paid before
it and beside decoding the same records.

For each batch shape and codec it times, in this process (no broker, no sockets):

- ``header``: ``validate_produced``, the header checks and the CRC-32C of the whole
  batch, which is all the broker did per batch before the records check;
- ``records``: ``ProducedRecordsCheck`` run to its end (the walk over the record lengths;
  for a compressed batch, bounded decompression and the walk over the chunks);
- ``decode``: ``decode_batch``, a full decode into record objects, for scale.

Each figure is the fastest of ``--repeat`` timings of ``--number`` calls, per batch and
per record. The batch shapes are the ingest benchmark's (``produce_consume.py``: ~450
records of 100 B per 5 ms batch at 4 partitions) and larger ones.

    .venv/bin/python bench/records_check.py
    .venv/bin/python bench/records_check.py --keys-required   # a compacted topic's check
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import timeit
from collections.abc import Callable

from sluice.protocol.records import (
    Compression,
    RecordInput,
    build_batch,
    decode_batch,
    validate_produced,
)
from sluice.protocol.records.produced import ProducedRecordsCheck

MAX_MESSAGE_BYTES = 1 << 30
SHAPES = [(450, 100, False), (450, 100, True), (1000, 1024, False), (10_000, 100, False)]
SHAPES += [(10_000, 100, True), (100_000, 10, False)]
"""(records, value bytes, varied) per batch: with ``varied``, each value's size is drawn
between half and one and a half times the given one, so no two neighbours need be the
same size (the walk's slowest case)."""


def sample_batch(records: int, value_bytes: int, varied: bool, codec: Compression) -> bytes:
    """Keyed records of random bytes (a quarter of each value, the rest a repeated
    pattern, so that codecs have something to compress), timestamps 1 ms apart."""
    generator = random.Random(records)
    inputs = []
    for index in range(records):
        size = generator.randint(value_bytes // 2, value_bytes * 3 // 2) if varied else value_bytes
        random_part = size // 4
        value = os.urandom(random_part) + b"abcdefgh"[: size - random_part] * (size // 8 + 1)
        inputs.append(
            RecordInput(b"key-%d" % index, value[:size], timestamp_ms=1_700_000_000_000 + index)
        )
    return build_batch(inputs, compression=codec)


def fastest(function: Callable[[], object], number: int, repeat: int) -> float:
    return min(timeit.repeat(function, number=number, repeat=repeat)) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keys-required", action="store_true")
    parser.add_argument("--codecs", default=",".join(codec.name for codec in Compression))
    arguments = parser.parse_args()
    keys_required: bool = arguments.keys_required
    print(f"python {platform.python_version()}, keys required: {keys_required}")
    print()
    print(
        "| records × value | codec | batch bytes | header µs | records µs | decode µs "
        "| records ns/record | decode ns/record |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for records, value_bytes, varied in SHAPES:
        for name in arguments.codecs.split(","):
            codec = Compression[name]
            batch = sample_batch(records, value_bytes, varied, codec)

            def header(batch: bytes = batch) -> object:
                return validate_produced(batch, MAX_MESSAGE_BYTES)

            def records_check(batch: bytes = batch) -> object:
                check = ProducedRecordsCheck(
                    batch,
                    validate_produced(batch, MAX_MESSAGE_BYTES),
                    max_message_bytes=MAX_MESSAGE_BYTES,
                    keys_required=keys_required,
                )
                return check.advance()

            def decode(batch: bytes = batch) -> object:
                return decode_batch(batch)

            number = max(1, 20_000 // records)
            header_s = fastest(header, number, arguments.repeat)
            check_s = fastest(records_check, number, arguments.repeat) - header_s
            decode_s = fastest(decode, max(1, number // 4), arguments.repeat)
            print(
                f"| {records:,} × {'~' if varied else ''}{value_bytes} B | {codec.name.lower()} "
                f"| {len(batch):,} "
                f"| {header_s * 1e6:,.0f} | {check_s * 1e6:,.0f} | {decode_s * 1e6:,.0f} "
                f"| {check_s * 1e9 / records:,.0f} | {decode_s * 1e9 / records:,.0f} |"
            )


if __name__ == "__main__":
    main()
