"""``sluice topics``: create, list, describe, delete topics and change their configs, and
move their replicas (``reassign``, in :mod:`sluice.cli.reassign`)."""

from __future__ import annotations

from collections.abc import Sequence

import click

from sluice.cli.common import (
    bootstrap_option,
    check_topic_config_names,
    check_topic_configs,
    echo_json,
    format_option,
    open_cluster,
    parse_key_value,
    parse_key_values,
    raise_if_unknown_topic,
    run,
)
from sluice.cli.reassign import reassign
from sluice.cli.topic_documents import topic_description_document, topic_listing_document
from sluice.client.admin import (
    Admin,
    AlterConfigOp,
    ConfigEntry,
    ConfigSource,
    NewTopic,
    OffsetSpec,
)
from sluice.client.cluster import NO_LEADER, TopicMetadata
from sluice.common import errors
from sluice.common.ids import TopicPartition, topic_name_problem
from sluice.common.limits import PARTITIONS_PER_TOPIC_MAX, REPLICATION_FACTOR_MAX

_SOURCE_LABELS = {
    ConfigSource.TOPIC: "set on the topic",
    ConfigSource.STATIC_BROKER: "broker setting",
    ConfigSource.DYNAMIC_BROKER: "broker setting",
    ConfigSource.DYNAMIC_DEFAULT_BROKER: "cluster default",
    ConfigSource.DEFAULT: "default",
}


def _check_topic_name(_context: click.Context, _parameter: click.Parameter, name: str) -> str:
    problem = topic_name_problem(name)
    if problem is not None:
        raise click.BadParameter(problem)
    return name


_topic_argument = click.argument("name", metavar="TOPIC", callback=_check_topic_name)


@click.group()
def topics() -> None:
    """Create, list, describe, delete topics and change their configs."""


@topics.command()
@_topic_argument
@click.option(
    "--partitions",
    type=click.IntRange(1, PARTITIONS_PER_TOPIC_MAX),
    default=None,
    help="Number of partitions.  [default: 1; a view has its source's]",
)
@click.option(
    "--replication-factor",
    type=click.IntRange(1, REPLICATION_FACTOR_MAX),
    default=None,
    help="Copies of each partition (at most the number of brokers).  [default: 1]",
)
@click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Topic config override, e.g. retention.ms=86400000 (repeatable).",
)
@click.option("--if-not-exists", is_flag=True, help="Succeed quietly if the topic exists.")
@bootstrap_option
def create(
    *,
    name: str,
    partitions: int | None,
    replication_factor: int | None,
    configs: Sequence[str],
    if_not_exists: bool,
    bootstrap_server: str,
) -> None:
    """Create topic TOPIC. With --config sluice.view.source=SOURCE and --config
    "sluice.view.filter=EXPRESSION" it is a read-only view of SOURCE."""
    overrides = parse_key_values(configs, "--config")
    check_topic_configs(overrides)
    view = bool(overrides.get("sluice.view.source"))
    if partitions is None:
        partitions = -1 if view else 1
    if replication_factor is None:
        replication_factor = -1 if view else 1

    async def create_topic() -> bool:
        async with open_cluster(bootstrap_server) as cluster:
            try:
                await Admin(cluster).create_topics(
                    [NewTopic(name, partitions, replication_factor, overrides)]
                )
            except errors.TopicAlreadyExists:
                if if_not_exists:
                    return False
                raise click.ClickException(
                    f"topic {name!r} already exists (see it with `sluice topics describe {name}`)"
                ) from None
            return True

    if run(create_topic):
        if view:
            click.echo(f"Created view {name} of {overrides['sluice.view.source']}.")
        else:
            click.echo(f"Created topic {name} with {partitions} partition(s).")


@topics.command(name="list")
@click.option("--include-internal", is_flag=True, help="Also list internal topics.")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: names, one per line; json: an array of {name, partitions, "
    "replication_factor, internal}.",
)
@bootstrap_option
def list_topics(*, include_internal: bool, output_format: str, bootstrap_server: str) -> None:
    """List topic names, one per line."""

    async def listed() -> list[TopicMetadata]:
        async with open_cluster(bootstrap_server) as cluster:
            return await Admin(cluster).list_topics(include_internal=include_internal)

    found = run(listed)
    if output_format == "json":
        echo_json([topic_listing_document(topic) for topic in found])
        return
    for topic in found:
        click.echo(topic.name)


@topics.command()
@_topic_argument
@format_option
@bootstrap_option
def describe(*, name: str, output_format: str, bootstrap_server: str) -> None:
    """Show partitions, leaders, ISR, offsets and configs of TOPIC.

    Per partition: leader, leader epoch, replicas, in-sync replicas, log start and end
    offsets. Then every config with its value and where the value comes from. With
    --format json, one object whose keys docs/cli.md lists.
    """

    async def gather() -> tuple[
        TopicMetadata, dict[TopicPartition, tuple[int, int]], dict[str, ConfigEntry]
    ]:
        async with open_cluster(bootstrap_server) as cluster:
            admin = Admin(cluster)
            try:
                metadata = await admin.describe_topic(name)
            except errors.KafkaError as e:
                raise_if_unknown_topic(e, name)
                raise
            partitions = [p.topic_partition for p in metadata.partitions]
            starts = await admin.list_offsets(partitions, OffsetSpec.EARLIEST)
            ends = await admin.list_offsets(partitions, OffsetSpec.LATEST)
            offsets: dict[TopicPartition, tuple[int, int]] = {
                tp: (starts[tp].offset, ends[tp].offset) for tp in partitions
            }
            configs = await admin.describe_topic_configs(name)
            return metadata, offsets, configs

    metadata, offsets, configs = run(gather)
    if output_format == "json":
        echo_json(topic_description_document(metadata, offsets, configs))
        return
    click.echo(f"Topic: {metadata.name}")
    click.echo(
        f"  partitions: {len(metadata.partitions)}   "
        f"replication factor: {metadata.replication_factor}"
        + ("   internal: yes" if metadata.is_internal else "")
    )
    header = ("PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "LOG START", "LOG END")
    rows = [header]
    for partition in metadata.partitions:
        start, end = offsets[partition.topic_partition]
        rows.append(
            (
                str(partition.partition),
                "none" if partition.leader_id == NO_LEADER else str(partition.leader_id),
                str(partition.leader_epoch),
                ",".join(map(str, partition.replica_ids)) or "-",
                ",".join(map(str, partition.isr_ids)) or "-",
                str(start),
                str(end),
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    for row in rows:
        click.echo(
            "  "
            + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    click.echo("Configs:")
    name_width = max((len(entry_name) for entry_name in configs), default=0)
    for entry_name in sorted(configs):
        entry = configs[entry_name]
        value = "(sensitive)" if entry.is_sensitive else entry.value
        label = _SOURCE_LABELS.get(entry.source, "unknown source")
        click.echo(f"  {entry_name.ljust(name_width)} = {value}  ({label})")


@topics.command()
@_topic_argument
@bootstrap_option
def delete(*, name: str, bootstrap_server: str) -> None:
    """Delete topic TOPIC and all its records."""

    async def delete_topic() -> None:
        async with open_cluster(bootstrap_server) as cluster:
            try:
                await Admin(cluster).delete_topics([name])
            except errors.KafkaError as e:
                raise_if_unknown_topic(e, name)
                raise

    run(delete_topic)
    click.echo(f"Deleted topic {name}.")


@topics.command()
@_topic_argument
@click.option(
    "--partitions",
    type=click.IntRange(1, PARTITIONS_PER_TOPIC_MAX),
    required=True,
    help="The new number of partitions, larger than the topic has (counts only grow).",
)
@bootstrap_option
def alter(*, name: str, partitions: int, bootstrap_server: str) -> None:
    """Add partitions to TOPIC, up to --partitions in all (CreatePartitions).

    Records keep their partitions: keyed records produced later may go to a new one, so
    per-key order holds only from then on, as in Kafka.
    """

    async def grow() -> int:
        async with open_cluster(bootstrap_server) as cluster:
            admin = Admin(cluster)
            try:
                metadata = await admin.describe_topic(name)
            except errors.KafkaError as e:
                raise_if_unknown_topic(e, name)
                raise
            count = len(metadata.partitions)
            if partitions <= count:
                raise click.ClickException(
                    f"topic {name!r} already has {count} partition(s); --partitions must be "
                    f"larger (partitions can be added, never removed)"
                )
            await admin.create_partitions({name: partitions})
            return count

    before = run(grow)
    click.echo(f"Topic {name} now has {partitions} partition(s) (was {before}).")


@topics.command(name="alter-config")
@_topic_argument
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a config override, e.g. retention.ms=60000 (repeatable).",
)
@click.option(
    "--delete",
    "deletes",
    multiple=True,
    metavar="KEY",
    help="Remove an override so the default applies again (repeatable).",
)
@bootstrap_option
def alter_config(
    *, name: str, sets: Sequence[str], deletes: Sequence[str], bootstrap_server: str
) -> None:
    """Change config overrides of TOPIC.

    Configs not named keep their values; --delete puts the default back.
    """
    if not sets and not deletes:
        raise click.UsageError("nothing to change: give --set KEY=VALUE and/or --delete KEY")
    to_set = dict(parse_key_value(text, "--set") for text in sets)
    check_topic_configs(to_set)
    check_topic_config_names(deletes)
    both = sorted(set(to_set) & set(deletes))
    if both:
        raise click.UsageError(f"{', '.join(both)}: both --set and --delete; choose one")
    operations = [AlterConfigOp.set(key, value) for key, value in to_set.items()]
    operations += [AlterConfigOp.delete(key) for key in deletes]

    async def alter() -> None:
        async with open_cluster(bootstrap_server) as cluster:
            admin = Admin(cluster)
            try:
                await admin.alter_topic_configs(name, operations)
            except errors.KafkaError as e:
                raise_if_unknown_topic(e, name)
                raise

    run(alter)
    changes = [f"{key}={value}" for key, value in to_set.items()]
    changes += [f"{key} (back to default)" for key in deletes]
    click.echo(f"Updated topic {name}: {', '.join(changes)}.")


__all__ = ["topics"]


topics.add_command(reassign)
