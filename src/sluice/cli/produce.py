"""``sluice produce TOPIC``: every line of standard input becomes one record.

Input is read in chunks as it arrives, so lines typed at a terminal are sent as soon as
they are complete, and piped files go out in batches. Each chunk is grouped by partition
and sent (one batch per partition, at most :data:`BATCH_BYTES_MAX` each) and
acknowledged before the next chunk is read, which keeps records of one partition in
input order.

At a terminal (standard error), input that is not typed there gets a progress bar: the
bytes read of a file (out of its size) and the records sent (:mod:`sluice.cli.progress`).

Partition of a record: ``--partition`` if given; else murmur2 of the key (the Java
client's rule); records without a key go to one partition per chunk, taking partitions
in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import stat
import sys
import threading
from collections.abc import Sequence
from typing import BinaryIO

import click

from sluice.cli.common import (
    bootstrap_option,
    check_partition,
    open_cluster,
    parse_key_value,
    raise_if_unknown_topic,
    run,
)
from sluice.cli.progress import Bar, progress_bar, progress_enabled, progress_option
from sluice.client.cluster import Cluster, TopicMetadata
from sluice.client.partitioner import partition_for_key
from sluice.client.producer import Acks, produce_batches
from sluice.common import errors
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition
from sluice.protocol.records.batch import Compression
from sluice.protocol.records.builder import RecordInput

READ_CHUNK_BYTES = 256 * 1024
"""Most bytes read from standard input before sending what has been read."""

BATCH_BYTES_MAX = 900 * 1024
"""Uncompressed bytes of records per batch; below the default max.message.bytes
(1 MiB + 12) with room for the batch and record headers."""

RECORD_OVERHEAD_BYTES = 32
"""Upper estimate of one record's framing (length, attributes, deltas, lengths)."""

TOPIC_READY_TIMEOUT_S = 10.0
"""How long to wait for an auto-created topic's leader before giving up."""

_ACKS = {"all": Acks.ALL, "-1": Acks.ALL, "1": Acks.LEADER, "0": Acks.NONE}
_COMPRESSION = {codec.name.lower(): codec for codec in Compression}


class _InputError(click.ClickException):
    pass


def _split_line(
    line: bytes, separator: bytes | None, line_number: int, sent: int
) -> tuple[bytes | None, bytes]:
    if line.endswith(b"\r"):
        line = line[:-1]
    if separator is None:
        return None, line
    key, found, value = line.partition(separator)
    if not found:
        raise _InputError(
            f"line {line_number} has no key separator {separator.decode()!r} "
            f"({sent} record(s) before it were sent); give every line a key, "
            "or leave out --key-separator"
        )
    return key, value


async def _ready_topic(cluster: Cluster, topic: str) -> TopicMetadata:
    """The topic's metadata once it has leaders (auto-creating it if the broker does)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TOPIC_READY_TIMEOUT_S
    retry_wait_s = 0.05
    while True:
        metadata = await cluster.metadata([topic], allow_auto_topic_creation=True)
        try:
            found = metadata.topic(topic)
            if all(p.leader_id >= 0 for p in found.partitions) and found.partitions:
                return found
            problem: KafkaError = errors.for_code(errors.ErrorCode.leader_not_available)(
                f"topic {topic!r} has partitions without a leader"
            )
        except KafkaError as e:
            raise_if_unknown_topic(e, topic)
            if not e.retriable:
                raise
            problem = e
        if loop.time() + retry_wait_s > deadline:
            raise problem
        await asyncio.sleep(retry_wait_s)  # back off before asking again; not a sync
        retry_wait_s = min(retry_wait_s * 2, 1.0)


async def _produce(
    stream: BinaryIO,
    bootstrap_server: str,
    topic: str,
    *,
    separator: bytes | None,
    headers: tuple[tuple[str, bytes | None], ...],
    partition: int | None,
    acks: Acks,
    compression: Compression,
    bar: Bar,
) -> int:
    async with open_cluster(bootstrap_server) as cluster:
        metadata = await _ready_topic(cluster, topic)
        partition_count = len(metadata.partitions)
        check_partition(metadata, partition)
        next_keyless = random.randrange(partition_count)
        line_number = 0
        sent = 0
        rest = b""
        while True:
            chunk = await _read_in_daemon_thread(stream)
            at_end = not chunk
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            if at_end and rest:
                lines.append(rest)
                rest = b""
            batches: dict[TopicPartition, list[list[RecordInput]]] = {}
            sizes: dict[TopicPartition, int] = {}
            keyless_partition = next_keyless
            if lines and partition is None:
                next_keyless = (next_keyless + 1) % partition_count
            for line in lines:
                line_number += 1
                key, value = _split_line(line, separator, line_number, sent)
                if partition is not None:
                    index = partition
                elif key is None:
                    index = keyless_partition
                else:
                    index = partition_for_key(key, partition_count)
                topic_partition = TopicPartition(topic, index)
                size = len(value) + len(key or b"") + RECORD_OVERHEAD_BYTES
                size += sum(len(k) + len(v or b"") for k, v in headers)
                groups = batches.setdefault(topic_partition, [[]])
                if groups[-1] and sizes.get(topic_partition, 0) + size > BATCH_BYTES_MAX:
                    groups.append([])
                    sizes[topic_partition] = 0
                groups[-1].append(RecordInput(key, value, headers))
                sizes[topic_partition] = sizes.get(topic_partition, 0) + size
            # One request per round, each round holding at most one batch per partition.
            rounds = max((len(groups) for groups in batches.values()), default=0)
            for round_index in range(rounds):
                round_batches = {
                    tp: groups[round_index]
                    for tp, groups in batches.items()
                    if round_index < len(groups)
                }
                await produce_batches(cluster, round_batches, acks=acks, compression=compression)
                sent += sum(len(records) for records in round_batches.values())
            bar.advance(len(chunk))
            bar.update(records=sent)
            if at_end:
                return sent


def _input_size(stream: BinaryIO) -> int | None:
    """The bytes left to read in ``stream`` when it is a regular file (``< file``),
    else None (a pipe or a terminal has no size)."""
    try:
        descriptor = stream.fileno()
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            return None
        return max(0, status.st_size - os.lseek(descriptor, 0, os.SEEK_CUR))
    except (OSError, ValueError, AttributeError):
        return None


def _read_in_daemon_thread(stream: BinaryIO) -> asyncio.Future[bytes]:
    """Read a chunk in a daemon thread: a read blocked on a terminal must not keep the
    process alive after Ctrl-C (``asyncio.to_thread`` would wait for it at exit)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[bytes] = loop.create_future()

    def deliver(data: bytes | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            assert data is not None
            future.set_result(data)

    def read() -> None:
        try:
            data = _read_some(stream)
        except Exception as e:
            outcome: tuple[bytes | None, BaseException | None] = (None, e)
        else:
            outcome = (data, None)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(deliver, *outcome)

    threading.Thread(target=read, name="sluice-produce-stdin", daemon=True).start()
    return future


def _read_some(stream: BinaryIO) -> bytes:
    """Whatever is available now (at least one byte unless at end), up to a chunk."""
    read1 = getattr(stream, "read1", None)
    if read1 is not None:
        return bytes(read1(READ_CHUNK_BYTES))
    return stream.read(READ_CHUNK_BYTES)


@click.command()
@click.argument("topic")
@click.option(
    "--key-separator",
    metavar="SEP",
    help="Split each line at the first SEP into key and value (every line needs one).",
)
@click.option(
    "--header",
    "header_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Header added to every record (repeatable).",
)
@click.option(
    "--partition",
    type=click.IntRange(min=0),
    help="Send every record to this partition (default: by key, or spread).",
)
@click.option(
    "--acks",
    type=click.Choice(list(_ACKS)),
    default="all",
    show_default=True,
    help="Replicas that must have a record before it counts as sent (0: no answer).",
)
@click.option(
    "--compression",
    type=click.Choice(list(_COMPRESSION)),
    default="none",
    show_default=True,
    help="Codec for record batches.",
)
@progress_option
@bootstrap_option
def produce(
    *,
    topic: str,
    key_separator: str | None,
    header_options: Sequence[str],
    partition: int | None,
    acks: str,
    compression: str,
    no_progress: bool,
    bootstrap_server: str,
) -> None:
    """Send each line of standard input to TOPIC as one record.

    At a terminal, input from a file or a pipe shows a progress bar on standard error
    (not lines typed at the terminal); --no-progress turns it off."""
    if key_separator == "":
        raise click.UsageError("--key-separator cannot be empty")
    headers = tuple(
        (key, value.encode())
        for key, value in (parse_key_value(text, "--header") for text in header_options)
    )
    separator = key_separator.encode() if key_separator is not None else None

    stdin = sys.stdin.buffer
    # Lines typed at the terminal get no bar: it would be drawn over what is typed.
    show_bar = progress_enabled(no_progress) and not stdin.isatty()

    async def produce_stdin() -> int:
        size = _input_size(stdin) if show_bar else None
        try:
            with progress_bar(
                "producing",
                enabled=show_bar,
                total=size,
                unit="bytes",
                detail="{task.fields[records]} records sent",
                records=0,
            ) as bar:
                return await _produce(
                    stdin,
                    bootstrap_server,
                    topic,
                    separator=separator,
                    headers=headers,
                    partition=partition,
                    acks=_ACKS[acks],
                    compression=_COMPRESSION[compression],
                    bar=bar,
                )
        except KafkaError as e:
            raise_if_unknown_topic(e, topic)
            raise

    run(produce_stdin)
