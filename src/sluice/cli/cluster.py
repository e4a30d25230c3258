"""``sluice cluster``: the brokers, the controller, where partitions lead, and leader
elections."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from sluice.cli.broker_configs import configs
from sluice.cli.common import (
    bootstrap_option,
    echo_json,
    echo_table,
    format_option,
    open_cluster,
    raise_if_unknown_topic,
    run,
)
from sluice.cli.reassign import decommission
from sluice.client.admin import Admin, ClusterDescription, ElectionType
from sluice.client.cluster_health import ClusterHealth
from sluice.common import errors
from sluice.common.ids import TopicPartition, topic_name_problem


@click.group()
def cluster() -> None:
    """See the brokers, their configs and where partitions lead; elect partition leaders."""


@cluster.command()
@bootstrap_option
def describe(*, bootstrap_server: str) -> None:
    """Show the cluster id, the controller and every broker."""

    async def gather() -> ClusterDescription:
        async with open_cluster(bootstrap_server) as connected:
            return await Admin(connected).describe_cluster()

    described = run(gather)
    click.echo(f"Cluster id: {described.cluster_id or '(none)'}")
    controller = described.controller
    click.echo(
        f"Controller: {controller.node_id} ({controller.address})"
        if controller is not None
        else "Controller: (none)"
    )
    click.echo(f"Brokers: {len(described.brokers)}")
    for broker in described.brokers:
        rack = f"  rack {broker.rack}" if broker.rack else ""
        role = "  (controller)" if broker.node_id == described.controller_id else ""
        click.echo(f"  {broker.node_id}  {broker.address}{rack}{role}")


class _Status(ClusterHealth):
    """The cluster's health (shared with the web console) as this command shows it."""

    def to_json(self) -> dict[str, Any]:
        partitions = self.partitions
        return {
            "cluster_id": self.described.cluster_id,
            "controller_id": self.described.controller_id,
            "brokers": [
                {
                    "node_id": b.node_id,
                    "host": b.host,
                    "port": b.port,
                    "rack": b.rack,
                    "leader_partitions": sum(p.leader_id == b.node_id for p in partitions),
                    "replica_partitions": sum(b.node_id in p.replica_ids for p in partitions),
                }
                for b in self.described.brokers
            ],
            "partition_count": len(partitions),
            "offline_partitions": [
                {"topic": p.topic, "partition": p.partition, "replicas": list(p.replica_ids)}
                for p in self.offline()
            ],
            "under_replicated_partitions": [
                {
                    "topic": p.topic,
                    "partition": p.partition,
                    "replicas": list(p.replica_ids),
                    "isr": list(p.isr_ids),
                }
                for p in self.under_replicated()
            ],
            "topics": {
                topic.name: [
                    {
                        "partition": p.partition,
                        "leader": p.leader_id,
                        "leader_epoch": p.leader_epoch,
                        "replicas": list(p.replica_ids),
                        "isr": list(p.isr_ids),
                    }
                    for p in topic.partitions
                ]
                for topic in self.topics
            },
        }


@cluster.command()
@format_option
@bootstrap_option
def status(*, output_format: str, bootstrap_server: str) -> None:
    """Show the brokers, the controller, how many partitions each broker leads and holds,
    the partitions that have no live leader (offline) and those with a replica out of
    sync (under-replicated).

    Exits with status 2 when a partition is offline.
    """

    async def gather() -> _Status:
        async with open_cluster(bootstrap_server) as connected:
            admin = Admin(connected)
            described = await admin.describe_cluster()
            return _Status(described, await admin.list_topics(include_internal=True))

    found = run(gather)
    document = found.to_json()
    if output_format == "json":
        echo_json(document)
    else:
        controller = found.described.controller_id
        click.echo(f"Cluster {found.described.cluster_id or '(no id)'}")
        click.echo(f"Controller: broker {controller}" if controller >= 0 else "Controller: none")
        click.echo(f"Brokers: {len(document['brokers'])}")
        rows = [["ID", "ADDRESS", "RACK", "LEADS", "REPLICAS"]]
        for broker in document["brokers"]:
            marker = "*" if broker["node_id"] == controller else ""
            rows.append(
                [
                    f"{broker['node_id']}{marker}",
                    f"{broker['host']}:{broker['port']}",
                    broker["rack"] or "-",
                    str(broker["leader_partitions"]),
                    str(broker["replica_partitions"]),
                ]
            )
        echo_table(rows)
        offline = document["offline_partitions"]
        under_replicated = document["under_replicated_partitions"]
        click.echo(
            f"Partitions: {document['partition_count']} in {len(found.topics)} topic(s), "
            f"{len(offline)} offline, {len(under_replicated)} under-replicated"
        )
        for entry in offline:
            replicas = ",".join(str(r) for r in entry["replicas"])
            click.echo(f"  offline: {entry['topic']}:{entry['partition']} (replicas {replicas})")
        for entry in under_replicated:
            replicas = ",".join(str(r) for r in entry["replicas"])
            isr = ",".join(str(r) for r in entry["isr"])
            click.echo(
                f"  under-replicated: {entry['topic']}:{entry['partition']} "
                f"(replicas {replicas}, in sync {isr})"
            )
    if document["offline_partitions"]:
        raise click.exceptions.Exit(2)


def _parse_partition(text: str) -> tuple[str, int | None]:
    """``TOPIC`` or ``TOPIC:PARTITION`` (topic names cannot contain ':')."""
    topic, separator, index = text.partition(":")
    problem = topic_name_problem(topic)
    if problem is not None:
        raise click.BadParameter(problem, param_hint="PARTITIONS")
    if not separator:
        return topic, None
    if not index.isdigit():
        raise click.BadParameter(
            f"{text!r}: the partition after ':' must be a number (e.g. orders:0)",
            param_hint="PARTITIONS",
        )
    return topic, int(index)


@cluster.command(name="elect-leaders")
@click.argument("partitions", nargs=-1, metavar="[TOPIC[:PARTITION]]...")
@click.option(
    "--unclean",
    is_flag=True,
    help="Elect any live replica for partitions without a leader, even one that is not "
    "in sync (may lose records). Default: elect the preferred replica.",
)
@bootstrap_option
def elect_leaders(*, partitions: Sequence[str], unclean: bool, bootstrap_server: str) -> None:
    """Move leadership to each partition's preferred replica (its first one).

    Names partitions as TOPIC (all of its partitions) or TOPIC:PARTITION; with none, every
    partition of the cluster. Prints what happened to each partition that needed an
    election, and exits with status 1 if any election failed.
    """
    wanted = [_parse_partition(text) for text in partitions]
    kind = ElectionType.UNCLEAN if unclean else ElectionType.PREFERRED

    async def elect() -> dict[TopicPartition, errors.KafkaError | None]:
        async with open_cluster(bootstrap_server) as connected:
            admin = Admin(connected)
            if not wanted:
                return await admin.elect_leaders(kind, None)
            named: list[TopicPartition] = []
            for topic, index in wanted:
                if index is not None:
                    named.append(TopicPartition(topic, index))
                    continue
                try:
                    described = await admin.describe_topic(topic)
                except errors.UnknownTopicOrPartition as e:
                    raise_if_unknown_topic(e, topic)
                    raise
                named.extend(p.topic_partition for p in described.partitions)
            return await admin.elect_leaders(kind, named)

    outcomes = run(elect)
    if not outcomes:
        click.echo("No partition needed an election.")
        return
    failed = False
    for topic_partition, outcome in sorted(outcomes.items()):
        if outcome is None:
            click.echo(f"{topic_partition}: elected a new leader")
        elif isinstance(outcome, errors.for_code(errors.ErrorCode.election_not_needed)):
            click.echo(f"{topic_partition}: not needed (the right replica already leads)")
        else:
            failed = True
            click.echo(f"{topic_partition}: failed: {outcome}")
    if failed:
        raise click.exceptions.Exit(1)


cluster.add_command(decommission)
cluster.add_command(configs)
