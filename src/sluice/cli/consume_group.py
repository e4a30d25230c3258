"""``sluice consume TOPIC --group G``: print records as a member of consumer group G, as
``kafka-console-consumer --group`` and ``kcat -G`` do.

The command joins G for TOPIC and reads the partitions the group assigns it, each from
the group's committed offset, or where none is committed from the log start (the
default, or ``--from-beginning``) or, with ``--follow``, the log end. After each batch
of records is written to standard output it commits the offsets after them: what was
printed is committed, and a record is never committed before it was printed (at least
once; a rebalance between the two makes the batch's next owner print it again).

Without ``--follow`` it stops once every partition it was assigned has been read up to
the end it had when the command started (or once ``--max-messages`` records are
printed); a member given no partition (the group's other members hold them all) stops at
once, saying so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import BinaryIO

import click

from sluice.cli.common import (
    CLIENT_ID,
    open_cluster,
    raise_if_unknown_topic,
    security_options_from_environment,
)
from sluice.client.admin import Admin, OffsetSpec
from sluice.client.consumer import ConsumedRecord
from sluice.client.consumer_api import Consumer, ConsumerRebalanceListener, ConsumerRecord
from sluice.client.membership import RebalanceError
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition

POLL_WAIT_MS = 1000
"""How long each poll waits for records."""

RECORDS_PER_POLL_MAX = 500
"""Records printed and committed together at most."""


class _Assignments(ConsumerRebalanceListener):
    """Notes that the group has assigned this member its partitions (possibly none)."""

    def __init__(self) -> None:
        self.assigned = asyncio.Event()

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned.set()


def _consumed(record: ConsumerRecord) -> ConsumedRecord:
    return ConsumedRecord(
        record.topic,
        record.partition,
        record.offset,
        record.timestamp,
        record.key,
        record.value,
        tuple(record.headers),
        record.timestamp_type,
    )


async def _ends_now(bootstrap_server: str, topic: str) -> dict[TopicPartition, int]:
    """Each partition's log end offset; a click error when the topic does not exist."""
    async with open_cluster(bootstrap_server) as cluster:
        admin = Admin(cluster)
        try:
            metadata = await admin.describe_topic(topic)
        except KafkaError as e:
            raise_if_unknown_topic(e, topic)
            raise
        partitions = [p.topic_partition for p in metadata.partitions]
        latest = await admin.list_offsets(partitions, OffsetSpec.LATEST)
        return {tp: latest[tp].offset for tp in partitions}


async def _caught_up(consumer: Consumer, ends: dict[TopicPartition, int]) -> bool:
    """Whether every partition assigned has been read up to its end at the start."""
    for tp in consumer.assignment():
        if await consumer.position(tp) < ends.get(tp, 0):
            return False
    return True


async def consume_in_group(
    out: BinaryIO,
    bootstrap_server: str,
    topic: str,
    group_id: str,
    *,
    from_beginning: bool,
    follow: bool,
    max_messages: int | None,
    write: Callable[[ConsumedRecord], bytes],
    prepare: Callable[[Sequence[ConsumedRecord]], Awaitable[None]] | None = None,
) -> None:
    """Print TOPIC's records as a member of ``group_id`` (see the module docstring)."""
    ends = await _ends_now(bootstrap_server, topic)
    assignments = _Assignments()
    consumer = Consumer(
        topic,
        bootstrap_servers=bootstrap_server,
        client_id=CLIENT_ID,
        group_id=group_id,
        auto_offset_reset="latest" if follow and not from_beginning else "earliest",
        enable_auto_commit=False,
        rebalance_listener=assignments,
        **security_options_from_environment(),
    )
    printed = 0
    async with consumer:
        while max_messages is None or printed < max_messages:
            if not follow and assignments.assigned.is_set():
                if not consumer.assignment():
                    click.echo(
                        f"Group {group_id!r} gave this member no partition of {topic!r} "
                        "(its other members hold them all).",
                        err=True,
                    )
                    return
                if await _caught_up(consumer, ends):
                    return
            limit = RECORDS_PER_POLL_MAX
            if max_messages is not None:
                limit = min(limit, max_messages - printed)
            batch = await consumer.getmany(timeout_ms=POLL_WAIT_MS, max_records=limit)
            lines: list[bytes] = []
            commits: dict[TopicPartition, int] = {}
            consumed = {tp: [_consumed(record) for record in batch[tp]] for tp in batch}
            if prepare is not None:
                await prepare([record for records in consumed.values() for record in records])
            for tp in sorted(consumed):
                for record in consumed[tp]:
                    if not follow and record.offset >= ends.get(tp, 0):
                        break
                    lines.append(write(record))
                    commits[tp] = record.offset + 1
            if not lines:
                continue
            out.write(b"".join(lines))
            out.flush()
            printed += len(lines)
            try:
                await consumer.commit(commits)
            except RebalanceError:
                continue  # the partitions moved: their next owner reads these again
