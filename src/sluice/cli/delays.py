"""``sluice delays``: the delayed records waiting in a topic, and cancelling one by its
schedule id."""

from __future__ import annotations

import datetime

import click

from sluice.cli.common import (
    bootstrap_option,
    check_partition,
    echo_json,
    echo_table,
    format_option,
    open_cluster,
    raise_if_unknown_topic,
    run,
)
from sluice.client.admin_delays import PartitionDelays, describe_delays
from sluice.client.producer import Acks, produce_batches
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition
from sluice.protocol.records.builder import RecordInput
from sluice.protocol.records.delayed import CANCEL_HEADER, SCHEDULE_ID_HEADER


@click.group()
def delays() -> None:
    """Inspect and cancel delayed and scheduled records (x-sluice-* headers)."""


def _when(due_ms: int | None) -> str:
    if due_ms is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(due_ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@delays.command(name="list")
@click.argument("topic")
@click.option("--partition", "partitions", type=int, multiple=True, help="Only this partition.")
@click.option(
    "--limit",
    type=click.IntRange(0, 1000),
    default=5,
    show_default=True,
    help="How many of the next waiting records to show per partition.",
)
@format_option
@bootstrap_option
def list_command(
    *,
    topic: str,
    partitions: tuple[int, ...],
    limit: int,
    output_format: str,
    bootstrap_server: str,
) -> None:
    """How many records wait and were delivered in each partition of TOPIC, and the
    next ones due."""

    async def described() -> list[PartitionDelays]:
        async with open_cluster(bootstrap_server) as cluster:
            try:
                return await describe_delays(
                    cluster, topic, partitions=partitions or None, limit=limit
                )
            except KafkaError as e:
                raise_if_unknown_topic(e, topic)
                raise

    found = run(described)
    if output_format == "json":
        echo_json(
            [
                {
                    "partition": p.partition,
                    "leader": p.leader,
                    "pending": p.pending,
                    "fired": p.fired,
                    "next_due_ms": p.next_due_ms,
                    "next": [
                        {"offset": w.offset, "due_ms": w.due_ms, "schedule_id": w.schedule_id}
                        for w in p.first
                    ],
                }
                for p in found
            ]
        )
        return
    echo_table(
        [("PARTITION", "PENDING", "DELIVERED", "NEXT DUE (UTC)")]
        + [(str(p.partition), str(p.pending), str(p.fired), _when(p.next_due_ms)) for p in found]
    )
    waiting = [(p.partition, w) for p in found for w in p.first]
    if waiting:
        click.echo()
        echo_table(
            [("PARTITION", "OFFSET", "DUE (UTC)", "SCHEDULE ID")]
            + [
                (str(partition), str(w.offset), _when(w.due_ms), w.schedule_id or "-")
                for partition, w in sorted(waiting, key=lambda item: item[1].due_ms)
            ]
        )


@delays.command(name="cancel")
@click.argument("topic")
@click.argument("schedule_id")
@click.option(
    "--partition", type=int, default=None, help="Only in this partition (default: every one)."
)
@bootstrap_option
def cancel_command(
    *, topic: str, schedule_id: str, partition: int | None, bootstrap_server: str
) -> None:
    """Cancel the record waiting in TOPIC under SCHEDULE_ID. A schedule id names a
    record within its partition, and producers place keys by partitioners of their own,
    so the cancel goes to every partition (a partition with nothing of that id is
    unaffected), or only to --partition."""

    async def cancel() -> list[int]:
        async with open_cluster(bootstrap_server) as cluster:
            try:
                metadata = (await cluster.metadata([topic])).topic(topic)
            except KafkaError as e:
                raise_if_unknown_topic(e, topic)
                raise
            check_partition(metadata, partition)
            indexes = (
                [p.partition for p in metadata.partitions] if partition is None else [partition]
            )
            record = RecordInput(
                None, None, [(SCHEDULE_ID_HEADER, schedule_id.encode()), (CANCEL_HEADER, b"cli")]
            )
            await produce_batches(
                cluster, {TopicPartition(topic, i): [record] for i in indexes}, acks=Acks.ALL
            )
            return indexes

    indexes = run(cancel)
    where = f"partition {indexes[0]}" if len(indexes) == 1 else f"its {len(indexes)} partitions"
    click.echo(f"cancelled {schedule_id!r} in {topic} ({where}), if it was waiting")
