"""The brokers as the cluster page shows them: the listed ones (up) with the partitions
they lead and hold and the disk their replicas take, and the down ones: those the
sampler saw listed and no longer sees (down since the first sample that missed them),
and those partitions name as replicas but the cluster does not list (down since before
the console knew of them).

What is offline or under-replicated is :mod:`sluice.client.cluster_health`'s answer,
the same as ``sluice cluster status``'s. Disk use is the sum of the replica sizes each
broker reports in DescribeLogDirs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sluice.client.admin import Admin, LogDirDescription
from sluice.client.cluster import PartitionMetadata
from sluice.client.cluster_health import ClusterHealth, is_offline, is_under_replicated
from sluice.client.errors import ClientError
from sluice.common.errors import KafkaError
from sluice.common.ids import NodeId
from sluice.console.history_file import BrokerSighting

DISK_TIMEOUT_S = 5.0
"""How long the cluster page waits for a broker's log directories before showing it
without its disk use."""


@dataclass(frozen=True, slots=True)
class BrokerDisk:
    """What a broker's log directories hold and their volumes' room."""

    used_bytes: int
    """The sum of the sizes of the replicas in its log directories."""
    total_bytes: int | None
    usable_bytes: int | None
    offline_dirs: int
    """Log directories the broker could not describe."""


@dataclass(frozen=True, slots=True)
class BrokerRow:
    node_id: NodeId
    address: str | None
    """None for a broker never listed while the console ran."""
    rack: str | None
    up: bool
    is_controller: bool
    leaders: int
    replicas: int
    disk: BrokerDisk | None
    down_since_s: float | None
    """When the console first missed it (None: up, or never seen)."""
    last_seen_s: float | None


def broker_rows(
    health: ClusterHealth,
    sightings: Mapping[NodeId, BrokerSighting],
    disks: Mapping[NodeId, BrokerDisk],
) -> list[BrokerRow]:
    """Every broker listed or known to be down, by node id."""
    leaders = health.leaders()
    replicas = health.replicas()
    controller = health.described.controller_id
    rows = [
        BrokerRow(
            b.node_id,
            b.address,
            b.rack,
            up=True,
            is_controller=b.node_id == controller,
            leaders=leaders.get(b.node_id, 0),
            replicas=replicas.get(b.node_id, 0),
            disk=disks.get(b.node_id),
            down_since_s=None,
            last_seen_s=None,
        )
        for b in health.described.brokers
    ]
    live = health.live
    down = (set(health.down_brokers()) | set(sightings)) - live
    for node_id in down:
        seen = sightings.get(node_id)
        rows.append(
            BrokerRow(
                node_id,
                None if seen is None else seen.address,
                None,
                up=False,
                is_controller=False,
                leaders=0,
                replicas=replicas.get(node_id, 0),
                disk=None,
                down_since_s=None if seen is None else seen.missing_since_s,
                last_seen_s=None if seen is None else seen.last_seen_s,
            )
        )
    return sorted(rows, key=lambda row: row.node_id)


def partition_state(partition: PartitionMetadata, live: frozenset[NodeId]) -> str:
    """``offline``, ``under-replicated`` or ``ok`` (also the row's CSS class)."""
    if is_offline(partition, live):
        return "offline"
    if is_under_replicated(partition, live):
        return "under-replicated"
    return "ok"


def disk_of(log_dirs: Iterable[LogDirDescription]) -> BrokerDisk:
    """One broker's disk from its DescribeLogDirs answer (one volume per directory;
    directories on one volume would count it twice, so totals are of the first)."""
    used = 0
    total: int | None = None
    usable: int | None = None
    offline = 0
    for log_dir in log_dirs:
        if log_dir.error is not None:
            offline += 1
            continue
        used += sum(replica.size_bytes for replica in log_dir.replicas.values())
        if total is None:
            total, usable = log_dir.total_bytes, log_dir.usable_bytes
    return BrokerDisk(used, total, usable, offline)


async def broker_disks(admin: Admin, brokers: Iterable[NodeId]) -> dict[NodeId, BrokerDisk]:
    """Each of ``brokers``' disk use (one DescribeLogDirs per broker, at once); a broker
    that will not say within ``DISK_TIMEOUT_S`` (an old broker, no permission, a broker
    gone meanwhile) is left out, and the others still shown."""

    async def one(node_id: NodeId) -> BrokerDisk | None:
        try:
            async with asyncio.timeout(DISK_TIMEOUT_S):
                described = await admin.describe_log_dirs(None, brokers=[node_id])
        except (KafkaError, ClientError, TimeoutError):
            return None
        return disk_of(described.get(node_id, []))

    node_ids = sorted(brokers)
    found = await asyncio.gather(*(one(node_id) for node_id in node_ids))
    return {n: disk for n, disk in zip(node_ids, found, strict=True) if disk is not None}
