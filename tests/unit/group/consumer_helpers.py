"""Helpers of the consumer group (KIP-848) tests: topics, a deterministic id source, a
coordinator whose records are kept as its log (or, for a write made to fail, reverted,
checking that the groups are then exactly as before), and a check that replaying that
log gives the same groups."""

from __future__ import annotations

import copy
import itertools
import uuid

from sluice.group.consumer_group import ConsumerGroup, TopicImage
from sluice.group.consumer_heartbeat import ConsumerGroups
from sluice.group.consumer_heartbeat_api import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupsConfig,
    HeartbeatResult,
    TimerKey,
    TimerResult,
)
from sluice.group.consumer_records import ConsumerGroupRecord, TopicPartitions

GROUP = "g"
REBALANCE_MS = 30_000
CONFIG = ConsumerGroupsConfig(session_timeout_ms=45_000, heartbeat_interval_ms=5_000)


def topic(name: str, partitions: int, racks: tuple[frozenset[str], ...] = ()) -> TopicImage:
    return TopicImage(uuid.uuid5(uuid.NAMESPACE_OID, name), name, partitions, racks)


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_OID, name)


def owned(**topics: list[int]) -> tuple[TopicPartitions, ...]:
    """owned(a=[0, 1]) → the TopicPartitions a heartbeat lists."""
    return tuple(TopicPartitions(topic_id(name), tuple(p)) for name, p in sorted(topics.items()))


def as_dict(entries: tuple[TopicPartitions, ...] | None) -> dict[str, set[int]]:
    """An answer's assignment by topic name (for the topics of ``topic``)."""
    names = {topic_id(n): n for n in "abcdefgh"}
    names.update({topic_id(n): n for n in ("orders", "orders-eu", "payments", "other")})
    return {names[e.topic_id]: set(e.partitions) for e in entries or ()}


class Coordinator:
    """ConsumerGroups with its log: every record it wrote, in order."""

    def __init__(self, config: ConsumerGroupsConfig = CONFIG) -> None:
        counter = itertools.count(1)
        self.groups = ConsumerGroups(config, lambda: f"member-{next(counter)}")
        self.log: list[ConsumerGroupRecord] = []
        self.config = config

    def heartbeat(
        self,
        request: ConsumerGroupHeartbeatRequest,
        topics: dict[str, TopicImage],
        now_ms: int = 0,
        *,
        written: bool = True,
    ) -> HeartbeatResult:
        """One heartbeat; with ``written`` False its records fail to be written and the
        change is reverted (its ``timers`` then include the ones reverting re-arms)."""
        before = self.snapshot()
        result = self.groups.heartbeat(request, topics, now_ms)
        if written or not result.records:
            self.log += result.records
        else:
            assert result.change is not None
            result.timers += self.groups.revert(result.change, now_ms)
            assert self.snapshot() == before, "a reverted heartbeat leaves the groups as before"
        return result

    def expire(self, key: TimerKey, now_ms: int, *, written: bool = True) -> TimerResult:
        before = self.snapshot()
        result = self.groups.expire(key, now_ms)
        if written or not result.records:
            self.log += result.records
        else:
            assert result.change is not None
            result.timers += self.groups.revert(result.change, now_ms)
            assert self.snapshot() == before, "a reverted expiry leaves the groups as before"
        return result

    def snapshot(self) -> dict[str, ConsumerGroup]:
        """A copy of every group's state."""
        return {g.group_id: copy.deepcopy(g) for g in self.groups.groups()}

    def check_replay(self) -> None:
        """A coordinator loaded from the log holds the same groups."""
        loaded = ConsumerGroups(self.config, lambda: "unused")
        for record in self.log:
            loaded.replay(record)
        assert {g.group_id: g for g in loaded.groups()} == {
            g.group_id: g for g in self.groups.groups()
        }


def join(
    member_id: str,
    topics: tuple[str, ...] | None = ("a",),
    *,
    group_id: str = GROUP,
    regex: str | None = None,
    instance_id: str | None = None,
    rack_id: str | None = None,
    assignor: str | None = None,
) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id=group_id,
        member_id=member_id,
        member_epoch=0,
        instance_id=instance_id,
        rack_id=rack_id,
        rebalance_timeout_ms=REBALANCE_MS,
        subscribed_topic_names=topics,
        subscribed_topic_regex=regex,
        server_assignor=assignor,
        owned_partitions=(),
        client_id="client",
        client_host="/127.0.0.1",
    )


def beat(
    member_id: str,
    epoch: int,
    owned_partitions: tuple[TopicPartitions, ...] | None = None,
    *,
    group_id: str = GROUP,
    instance_id: str | None = None,
    topics: tuple[str, ...] | None = None,
    regex: str | None = None,
) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id=group_id,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=instance_id,
        subscribed_topic_names=topics,
        subscribed_topic_regex=regex,
        owned_partitions=owned_partitions,
        client_id="client",
        client_host="/127.0.0.1",
    )
