"""Delayed delivery as an operator sees it: what waits in each partition of a topic
(asked of each partition's leader with Sluice's own SluiceDescribeDelays API), and
cancelling a scheduled record (an ordinary produce with the cancel headers, which any
Kafka client could send). ``sluice delays`` prints these."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sluice.client.cluster import Cluster, run_all
from sluice.common import errors
from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.protocol.private import DESCRIBE_DELAYS, PrivateRequest

LEADER_RETRIES = 3
"""Leadership may move between the metadata and the question: ask again this often."""


@dataclass(frozen=True)
class WaitingRecord:
    offset: int
    due_ms: int
    schedule_id: str | None


@dataclass(frozen=True)
class PartitionDelays:
    partition: int
    leader: int
    pending: int
    """Records waiting (those of undecided transactions included)."""
    fired: int
    """Records delivered so far."""
    next_due_ms: int | None
    first: tuple[WaitingRecord, ...]
    """The first waiting records by due time (as many as asked)."""


async def describe_delays(
    cluster: Cluster,
    topic: str,
    *,
    partitions: Sequence[int] | None = None,
    limit: int = 10,
) -> list[PartitionDelays]:
    """What waits in each partition of ``topic`` (all, or ``partitions``), by partition.
    Raises UnknownTopicOrPartition for a topic or partition that does not exist."""
    found: dict[int, PartitionDelays] = {}
    metadata = await cluster.metadata([topic])
    wanted = (
        [p.partition for p in metadata.topic(topic).partitions]
        if partitions is None
        else list(partitions)
    )
    for attempt in range(LEADER_RETRIES):
        by_leader: dict[int, list[int]] = defaultdict(list)
        for index in wanted:
            if index not in found:
                by_leader[metadata.leader(TopicPartition(topic, index))].append(index)
        moved: list[int] = []
        await run_all(
            _ask(cluster, leader, topic, indexes, limit, found, moved)
            for leader, indexes in by_leader.items()
        )
        if not moved:
            break
        if attempt + 1 == LEADER_RETRIES:
            raise errors.NotLeaderOrFollower(
                f"the leaders of {topic} partitions {sorted(moved)} kept moving"
            )
        metadata = await cluster.metadata([topic])
    return [found[index] for index in sorted(found)]


async def _ask(
    cluster: Cluster,
    leader: int,
    topic: str,
    indexes: list[int],
    limit: int,
    found: dict[int, PartitionDelays],
    moved: list[int],
) -> None:
    connection = await cluster.connection(leader)
    response: dict[str, Any] = await connection.request(
        PrivateRequest(DESCRIBE_DELAYS, {"topic": topic, "partitions": indexes, "limit": limit})
    )
    if response.get("error_code"):
        raise errors.for_code(int(response["error_code"]))(str(response.get("error_message")))
    for answer in response.get("partitions", []):
        code = int(answer.get("error_code", 0))
        index = int(answer["partition"])
        if code == ErrorCode.not_leader_or_follower:
            moved.append(index)
            continue
        if code:
            raise errors.for_code(code)(str(answer.get("error_message")))
        found[index] = PartitionDelays(
            partition=index,
            leader=int(answer["leader"]),
            pending=int(answer["pending"]),
            fired=int(answer["fired"]),
            next_due_ms=answer.get("next_due_ms"),
            first=tuple(
                WaitingRecord(int(w["offset"]), int(w["due_ms"]), w.get("schedule_id"))
                for w in answer.get("first", [])
            ),
        )
