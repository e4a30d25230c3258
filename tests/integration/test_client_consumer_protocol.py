"""sluice.Consumer with group_protocol="consumer" (KIP-848) against a real broker.

The members are Sluice's own consumers in one process; who owns which partition is
followed from their rebalance callbacks, and a partition assigned to one member while
another still holds it fails the test.
"""

from __future__ import annotations

import asyncio
import gc
import re
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable

import pytest
from broker_process import BrokerProcess
from client_helpers import create_topic, unique_group_id
from consumer_group_wire import CLASSIC_ONLY, describe, heartbeat, heartbeat_request
from test_client_consumer import TIMEOUT_S, consume_count, produce, run

import sluice
from sluice.client.consumer_api import ConsumerRebalanceListener, TopicPartition
from sluice.client.consumer_membership import ConsumerProtocolUnsupportedError

WAIT_STEP_MS = 100
"""How long one round of polling the consumers waits for records."""


@pytest.fixture(scope="module")
def broker(consumer_protocol_broker: BrokerProcess) -> BrokerProcess:
    return consumer_protocol_broker


class Ownership:
    """Who owns each partition, from every member's callbacks; records double owners."""

    def __init__(self) -> None:
        self.owner: dict[TopicPartition, str] = {}
        self.violations: list[str] = []
        self.lost: list[set[TopicPartition]] = []

    def listener(self, name: str) -> ConsumerRebalanceListener:
        ownership = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                for tp in assigned:
                    holder = ownership.owner.get(tp)
                    if holder is not None and holder != name:
                        ownership.violations.append(f"{tp} given to {name} while {holder} owns it")
                    ownership.owner[tp] = name

            def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                for tp in revoked:
                    if ownership.owner.get(tp) == name:
                        del ownership.owner[tp]

            def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
                ownership.lost.append(set(lost))
                self.on_partitions_revoked(lost)

        return Listener()

    def held_by(self, name: str) -> set[TopicPartition]:
        return {tp for tp, owner in self.owner.items() if owner == name}


def consumer(broker: BrokerProcess, group: str, **options: object) -> sluice.Consumer:
    settings: dict[str, object] = {
        "bootstrap_servers": broker.bootstrap,
        "group_id": group,
        "group_protocol": "consumer",
        "auto_offset_reset": "earliest",
        "fetch_max_wait_ms": 100,
        "auto_commit_interval_ms": 100,
    }
    settings.update(options)
    return sluice.Consumer(**settings)  # type: ignore[arg-type]


async def poll_until(
    consumers: list[sluice.Consumer], condition: Callable[[], bool], what: str
) -> None:
    """Keep every consumer polling (which raises their errors) until ``condition()``."""
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}: {[c.assignment() for c in consumers]}")
        await asyncio.gather(*(c.getmany(timeout_ms=WAIT_STEP_MS) for c in consumers))


def split_evenly(consumers: list[sluice.Consumer], partitions: int) -> Callable[[], bool]:
    def condition() -> bool:
        held = [c.assignment() for c in consumers]
        sizes = sorted(len(h) for h in held)
        everything = set().union(*held)
        return (
            len(everything) == partitions and sum(sizes) == partitions and sizes[-1] - sizes[0] <= 1
        )

    return condition


def test_members_split_partitions_never_sharing_one_and_take_over_on_close(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 6)
    group = unique_group_id()
    ownership = Ownership()
    total = 600

    async def scenario() -> Counter[tuple[int, int]]:
        members = [
            consumer(broker, group, rebalance_listener=ownership.listener(f"m{i}"))
            for i in range(3)
        ]
        first, second, third = members
        await first.start()
        try:
            first.subscribe([topic])
            await poll_until([first], split_evenly([first], 6), "the first member holds all")
            await second.start()
            second.subscribe([topic])
            await poll_until(members[:2], split_evenly(members[:2], 6), "two members split")
            await third.start()
            third.subscribe([topic])
            await poll_until(members, split_evenly(members, 6), "three members split")
            assert {len(c.assignment()) for c in members} == {2}
            for index, member in enumerate(members):
                assert member.assignment() == ownership.held_by(f"m{index}")
            (described,) = await asyncio.to_thread(describe, broker.host, broker.port, group)
            assert described.error_code == 0, "a consumer group of the new protocol"
            assert {m.member_id for m in described.members} == {c.member_id for c in members}

            await asyncio.to_thread(
                produce,
                broker.bootstrap,
                topic,
                [{"partition": i % 6, "value": b"%d" % i} for i in range(total)],
            )
            seen: Counter[tuple[int, int]] = Counter()
            deadline = time.monotonic() + TIMEOUT_S
            while sum(seen.values()) < total and time.monotonic() < deadline:
                batches = await asyncio.gather(
                    *(c.getmany(timeout_ms=WAIT_STEP_MS) for c in members)
                )
                for member, batch in zip(members, batches, strict=True):
                    for tp, records in batch.items():
                        assert tp in member.assignment()
                        seen.update((r.partition, r.offset) for r in records)

            # The third member leaves: the other two take its partitions.
            theirs = third.assignment()
            await third.close()
            await poll_until(members[:2], split_evenly(members[:2], 6), "two members again")
            assert theirs <= first.assignment() | second.assignment()
            assert not ownership.held_by("m2")
            return seen
        finally:
            for member in members:
                await member.close()

    seen = run(scenario())
    assert len(seen) == total and set(seen.values()) == {1}, "each record exactly once"
    assert not ownership.violations, ownership.violations
    assert not ownership.lost, "no member was fenced"


def test_regex_subscription_picks_up_a_topic_created_later(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, f"{topic}-a", 1)
    produce(broker.bootstrap, f"{topic}-a", [{"partition": 0, "value": b"a"}])

    async def scenario() -> None:
        async with consumer(broker, unique_group_id()) as member:
            member.subscribe(pattern=f"{topic}-[a-z]")
            first = await consume_count(member, 1)
            assert [(r.topic, r.value) for r in first] == [(f"{topic}-a", b"a")]
            await asyncio.to_thread(create_topic, broker.bootstrap, f"{topic}-b", 2)
            await asyncio.to_thread(
                produce, broker.bootstrap, f"{topic}-b", [{"partition": 1, "value": b"b"}]
            )
            later = await consume_count(member, 1)
            assert [(r.topic, r.value) for r in later] == [(f"{topic}-b", b"b")]
            assert member.assignment() == {
                TopicPartition(f"{topic}-a", 0),
                TopicPartition(f"{topic}-b", 0),
                TopicPartition(f"{topic}-b", 1),
            }

    run(scenario())


def test_a_static_member_that_restarts_gets_its_partitions_back(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 4)
    group = unique_group_id()
    ownership = Ownership()

    def static(name: str) -> sluice.Consumer:
        return consumer(
            broker, group, group_instance_id=name, rebalance_listener=ownership.listener(name)
        )

    async def scenario() -> None:
        steady = static("steady")
        await steady.start()
        try:
            steady.subscribe([topic])
            restarting = static("restarting")
            await restarting.start()
            restarting.subscribe([topic])
            await poll_until([steady, restarting], split_evenly([steady, restarting], 4), "split")
            before = restarting.assignment()
            steady_before = steady.assignment()
            await restarting.close()
            again = static("restarting")
            await again.start()
            try:
                again.subscribe([topic])
                await poll_until(
                    [steady, again], lambda: again.assignment() == before, "the same partitions"
                )
                assert steady.assignment() == steady_before, "the other member kept its own"
            finally:
                await again.close()
        finally:
            await steady.close()

    run(scenario())
    assert not ownership.violations, ownership.violations


def test_commits_survive_a_new_member(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [{"partition": 0, "value": b"%d" % i} for i in range(20)])
    group = unique_group_id()
    tp = TopicPartition(topic, 0)

    async def scenario() -> None:
        async with consumer(broker, group, enable_auto_commit=False, max_poll_records=5) as first:
            first.subscribe([topic])
            records = await consume_count(first, 5)
            await first.commit({tp: records[4].offset + 1})
            assert await first.committed(tp) == 5
        async with consumer(broker, group, enable_auto_commit=False) as second:
            second.subscribe([topic])
            rest = await consume_count(second, 15)
            assert [r.offset for r in rest] == list(range(5, 20))
            assert await second.committed(tp) == 5

    run(scenario())


def test_a_member_the_group_dropped_loses_its_partitions_and_rejoins_from_the_commits(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, [{"partition": i % 2, "value": b"%d" % i} for i in range(20)])
    group = unique_group_id()
    ownership = Ownership()

    async def scenario() -> None:
        async with consumer(
            broker,
            group,
            enable_auto_commit=False,
            rebalance_listener=ownership.listener("member"),
        ) as member:
            member.subscribe([topic])
            first = await consume_count(member, 20)
            assert len(first) == 20
            await member.commit()
            committed = {tp: await member.committed(tp) for tp in member.assignment()}
            assert committed == {TopicPartition(topic, 0): 10, TopicPartition(topic, 1): 10}
            # The group drops the member (as when its session ends): its next heartbeat
            # is answered UNKNOWN_MEMBER_ID.
            left = await asyncio.to_thread(
                heartbeat,
                broker.host,
                broker.port,
                heartbeat_request(group, str(member.member_id), -1),
            )
            assert left.error_code == 0
            await poll_until([member], lambda: bool(ownership.lost), "the partitions are lost")
            assert ownership.lost == [{TopicPartition(topic, 0), TopicPartition(topic, 1)}]
            await poll_until([member], lambda: len(member.assignment()) == 2, "it rejoined")
            await asyncio.to_thread(
                produce, broker.bootstrap, topic, [{"partition": 0, "value": b"after"}]
            )
            after = await consume_count(member, 1)
            assert [(r.partition, r.offset, r.value) for r in after] == [(0, 10, b"after")]
            assert await member.committed(TopicPartition(topic, 0)) == 10

    run(scenario())


def test_a_broker_without_the_protocol_is_a_clear_error(
    broker_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    classic_only = broker_factory(CLASSIC_ONLY)
    create_topic(classic_only.bootstrap, topic, 1)

    async def scenario() -> None:
        async with consumer(classic_only, unique_group_id()) as member:
            member.subscribe([topic])
            with pytest.raises(ConsumerProtocolUnsupportedError) as raised:
                await member.wait_for_assignment(TIMEOUT_S)
            message = str(raised.value)
            assert "group.coordinator.rebalance.protocols=classic,consumer" in message
            assert 'group_protocol="classic"' in message

    run(scenario())


def test_settings_of_the_other_protocol_are_refused() -> None:
    with pytest.raises(ValueError, match="group_protocol 'next' is not one of"):
        sluice.Consumer(group_id="g", group_protocol="next")  # type: ignore[arg-type]
    for name in ("session_timeout_ms", "heartbeat_interval_ms"):
        refused = f'{name} cannot be set with group_protocol="consumer"'
        with pytest.raises(ValueError, match=refused):
            sluice.Consumer(group_id="g", group_protocol="consumer", **{name: 5000})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="partition_assignment_strategy cannot be set"):
        sluice.Consumer(
            group_id="g", group_protocol="consumer", partition_assignment_strategy=["range"]
        )
    with pytest.raises(ValueError, match='group_remote_assignor needs group_protocol="consumer"'):
        sluice.Consumer(group_id="g", group_remote_assignor="uniform")


def test_patterns_the_broker_cannot_take_are_refused_at_subscribe(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        async with consumer(broker, unique_group_id()) as member:
            with pytest.raises(ValueError, match="not valid RE2 syntax"):
                member.subscribe(pattern=r"(a)\1")
            with pytest.raises(ValueError, match="compiled with flags"):
                member.subscribe(pattern=re.compile("orders-.*", re.IGNORECASE))

    run(scenario())


def test_a_consumer_closed_at_once_leaves_no_coroutine_unawaited(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        member = consumer(broker, unique_group_id())
        await member.start()
        member.subscribe(["never-read"])
        await member.close()  # before its tasks ever ran

    unraisable: list[str] = []

    def hook(report: sys.UnraisableHookArgs) -> None:
        unraisable.append(str(report.exc_value))

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        previous, sys.unraisablehook = sys.unraisablehook, hook
        try:
            run(scenario())
            gc.collect()
        finally:
            sys.unraisablehook = previous
    assert not unraisable, unraisable
