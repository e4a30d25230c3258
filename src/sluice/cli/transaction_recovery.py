"""``sluice transactions describe-producers``, ``find-hanging`` and ``abort``: find the
transactions that hold a partition's last stable offset back with no coordinator left to
finish them, and abort them, as ``kafka-transactions.sh`` does
(:mod:`sluice.client.admin_producers` has the rules).

A hanging transaction stops every read_committed consumer of its partition at its first
offset. ``find-hanging`` lists them with the start offset ``abort --start-offset`` takes;
``abort`` writes the abort marker into that one partition (the records of the
transaction there become aborted, and the partition's last stable offset moves on).
"""

from __future__ import annotations

import time
from typing import Any

import click

from sluice.cli.common import (
    bootstrap_option,
    echo_json,
    echo_table,
    format_option,
    open_cluster,
    raise_if_unknown_topic,
    run,
)
from sluice.client.admin import Admin
from sluice.client.admin_producers import (
    NO_TRANSACTION,
    OpenTransaction,
    ProducerState,
    abort_transaction,
    describe_producers,
    find_hanging_transactions,
)
from sluice.common import errors
from sluice.common.ids import TopicPartition

MAX_TRANSACTION_TIMEOUT_MINUTES_DEFAULT = 15
"""Kafka's default transaction.max.timeout.ms (15 minutes): no transaction can
legitimately stay open longer, so an older one is a candidate."""

MS_PER_MINUTE = 60_000


def _producer_json(producer: ProducerState) -> dict[str, Any]:
    return {
        "producer_id": producer.producer_id,
        "producer_epoch": producer.producer_epoch,
        "coordinator_epoch": producer.coordinator_epoch,
        "last_sequence": producer.last_sequence,
        "last_timestamp": producer.last_timestamp_ms,
        "transaction_start_offset": (
            None
            if producer.transaction_start_offset == NO_TRANSACTION
            else producer.transaction_start_offset
        ),
    }


async def _partitions(
    admin: Admin, topic: str | None, partition: int | None, broker: int | None
) -> list[TopicPartition]:
    """The partitions to search: TOPIC's (or its one PARTITION), or every partition
    with a replica on BROKER."""
    if topic is not None:
        try:
            metadata = await admin.describe_topic(topic)
        except errors.KafkaError as e:
            raise_if_unknown_topic(e, topic)
            raise
        listed = [metadata]
    else:
        listed = await admin.list_topics(include_internal=True)
    found = [
        p.topic_partition
        for described in listed
        for p in described.partitions
        if (partition is None or p.partition == partition)
        and (broker is None or broker in p.replica_ids)
    ]
    if topic is not None and partition is not None and not found:
        raise click.ClickException(f"topic {topic!r} has no partition {partition}")
    return found


@click.command(name="describe-producers")
@click.option("--topic", required=True, help="The partition's topic.")
@click.option("--partition", type=click.IntRange(min=0), required=True, help="The partition.")
@format_option
@bootstrap_option
def describe_producers_command(
    *, topic: str, partition: int, output_format: str, bootstrap_server: str
) -> None:
    """Show the active producers of one partition (at its leader): id, epoch, the
    coordinator epoch of their last marker, last sequence and timestamp, and where
    their open transaction starts."""
    topic_partition = TopicPartition(topic, partition)

    async def gather() -> list[ProducerState]:
        async with open_cluster(bootstrap_server) as cluster:
            await _partitions(Admin(cluster), topic, partition, None)
            return (await describe_producers(cluster, [topic_partition]))[topic_partition]

    producers = run(gather)
    if output_format == "json":
        echo_json([_producer_json(p) for p in producers])
        return
    if not producers:
        click.echo(f"Partition {topic_partition} has no active producer.")
        return
    echo_table(
        [
            (
                "PRODUCER ID",
                "EPOCH",
                "COORDINATOR EPOCH",
                "LAST SEQUENCE",
                "LAST TIMESTAMP",
                "OPEN TXN AT",
            )
        ]
        + [
            (
                str(p.producer_id),
                str(p.producer_epoch),
                str(p.coordinator_epoch),
                str(p.last_sequence),
                str(p.last_timestamp_ms),
                "-"
                if p.transaction_start_offset == NO_TRANSACTION
                else str(p.transaction_start_offset),
            )
            for p in producers
        ]
    )


@click.command(name="find-hanging")
@click.option("--topic", help="Search this topic's partitions.")
@click.option("--partition", type=click.IntRange(min=0), help="Only this partition of --topic.")
@click.option(
    "--broker",
    "--broker-id",
    "broker",
    type=click.IntRange(min=0),
    help="Search every partition with a replica on this broker.",
)
@click.option(
    "--max-transaction-timeout",
    "max_timeout_minutes",
    type=click.IntRange(min=0),
    default=MAX_TRANSACTION_TIMEOUT_MINUTES_DEFAULT,
    show_default=True,
    metavar="MINUTES",
    help="Only transactions whose producer last wrote longer ago than this (the longest "
    "transaction timeout the brokers allow).",
)
@format_option
@bootstrap_option
def find_hanging(
    *,
    topic: str | None,
    partition: int | None,
    broker: int | None,
    max_timeout_minutes: int,
    output_format: str,
    bootstrap_server: str,
) -> None:
    """List open transactions no coordinator will finish (hanging), which keep
    read_committed consumers of their partition waiting.

    Give --topic (and maybe --partition) or --broker. Abort one with `sluice
    transactions abort --topic T --partition P --start-offset OFFSET`.
    """
    if topic is None and broker is None:
        raise click.UsageError("give --topic TOPIC or --broker ID to say where to search")
    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")

    async def gather() -> tuple[int, list[OpenTransaction]]:
        async with open_cluster(bootstrap_server) as cluster:
            partitions = await _partitions(Admin(cluster), topic, partition, broker)
            if not partitions:
                return int(time.time() * 1000), []
            now_ms = int(time.time() * 1000)
            hanging = await find_hanging_transactions(
                cluster, partitions, now_ms=now_ms, age_ms=max_timeout_minutes * MS_PER_MINUTE
            )
            return now_ms, hanging

    now_ms, hanging = run(gather)
    if output_format == "json":
        echo_json(
            [
                {"topic": h.topic_partition.topic, "partition": h.topic_partition.partition}
                | _producer_json(h.producer)
                for h in hanging
            ]
        )
        return
    if not hanging:
        click.echo("No hanging transaction found.")
        return
    echo_table(
        [
            (
                "TOPIC",
                "PARTITION",
                "PRODUCER ID",
                "EPOCH",
                "COORDINATOR EPOCH",
                "START OFFSET",
                "LAST TIMESTAMP",
                "DURATION (MIN)",
            )
        ]
        + [
            (
                h.topic_partition.topic,
                str(h.topic_partition.partition),
                str(h.producer.producer_id),
                str(h.producer.producer_epoch),
                str(h.producer.coordinator_epoch),
                str(h.producer.transaction_start_offset),
                str(h.producer.last_timestamp_ms),
                str((now_ms - h.producer.last_timestamp_ms) // MS_PER_MINUTE),
            )
            for h in hanging
        ]
    )
    first = hanging[0]
    click.echo(
        f"Abort one with `sluice transactions abort --topic {first.topic_partition.topic} "
        f"--partition {first.topic_partition.partition} --start-offset "
        f"{first.producer.transaction_start_offset}`.",
        err=True,
    )


@click.command(name="abort")
@click.option("--topic", required=True, help="The partition's topic.")
@click.option("--partition", type=click.IntRange(min=0), required=True, help="The partition.")
@click.option(
    "--start-offset",
    type=click.IntRange(min=0),
    help="The first offset of the transaction to abort (as find-hanging shows it).",
)
@click.option(
    "--producer-id",
    type=click.IntRange(min=0),
    help="With --producer-epoch and --coordinator-epoch, instead of --start-offset: the "
    "transaction's producer.",
)
@click.option("--producer-epoch", type=click.IntRange(0, 32767), help="The producer's epoch.")
@click.option(
    "--coordinator-epoch",
    type=int,
    help="The coordinator epoch of the producer's last marker (-1: none).",
)
@bootstrap_option
def abort(
    *,
    topic: str,
    partition: int,
    start_offset: int | None,
    producer_id: int | None,
    producer_epoch: int | None,
    coordinator_epoch: int | None,
    bootstrap_server: str,
) -> None:
    """Abort an open transaction in one partition (WriteTxnMarkers), e.g. a hanging one.

    Name it by --start-offset (the producer is looked up with DescribeProducers), or by
    --producer-id, --producer-epoch and --coordinator-epoch. Its records in that
    partition become aborted; read_committed consumers move past them.
    """
    by_producer = (producer_id, producer_epoch, coordinator_epoch)
    if start_offset is None and None in by_producer:
        raise click.UsageError(
            "name the transaction with --start-offset, or with all of --producer-id, "
            "--producer-epoch and --coordinator-epoch"
        )
    if start_offset is not None and any(v is not None for v in by_producer):
        raise click.UsageError("give --start-offset or the --producer-* options, not both")
    topic_partition = TopicPartition(topic, partition)

    async def abort_it() -> tuple[int, int]:
        async with open_cluster(bootstrap_server) as cluster:
            await _partitions(Admin(cluster), topic, partition, None)
            if start_offset is None:
                assert producer_id is not None and producer_epoch is not None
                assert coordinator_epoch is not None
                identity = (producer_id, producer_epoch, coordinator_epoch)
            else:
                producers = (await describe_producers(cluster, [topic_partition]))[topic_partition]
                matching = [p for p in producers if p.transaction_start_offset == start_offset]
                if not matching:
                    open_at = sorted(
                        p.transaction_start_offset
                        for p in producers
                        if p.transaction_start_offset != NO_TRANSACTION
                    )
                    raise click.ClickException(
                        f"no open transaction starts at offset {start_offset} in "
                        f"{topic_partition} ("
                        + (
                            "open ones start at " + ", ".join(map(str, open_at))
                            if open_at
                            else "it has none open"
                        )
                        + ")"
                    )
                (found,) = matching
                identity = (found.producer_id, found.producer_epoch, found.coordinator_epoch)
            await abort_transaction(
                cluster,
                topic_partition,
                producer_id=identity[0],
                producer_epoch=identity[1],
                coordinator_epoch=identity[2],
            )
            return identity[0], identity[1]

    aborted_id, aborted_epoch = run(abort_it)
    click.echo(
        f"Aborted the transaction of producer {aborted_id} (epoch {aborted_epoch}) in "
        f"{topic_partition}."
    )
