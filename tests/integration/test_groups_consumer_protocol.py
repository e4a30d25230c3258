"""Consumer groups of the new protocol (KIP-848) with confluent-kafka
(``group.protocol=consumer``): each member is its own OS process (``group_workers.py``)
that commits after processing and reports what it did with its own clock, so a member
can be killed with SIGKILL like a crashed application and the test can check that no
partition was ever owned by two members at once.

The broker enables the protocol (``group.coordinator.rebalance.protocols``) and answers
heartbeats every 500 ms, so members converge quickly; the session stays Kafka's 45 s
except where a test starts a broker of its own with a short one.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Callable

import pytest
from broker_process import BrokerProcess
from client_helpers import (
    CLIENT_TIMEOUT_S,
    admin_client,
    create_topic,
    produce_and_flush,
    producer_config,
    unique_group_id,
)
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, Producer
from confluent_kafka.admin import ConsumerGroupDescription
from consumer_group_wire import FAST_HEARTBEATS
from group_workers import (
    ContinuousProducer,
    GroupWorker,
    WorkerPool,
    all_processed,
    assert_each_member_processed_only_its_partitions,
    assert_only_the_victims_uncommitted_records_repeat,
    assert_processed_exactly_once,
    duplicates,
    owned_twice,
    produce_round_robin,
    split_evenly,
)

PARTITIONS = 6
SHORT_SESSION = {
    **FAST_HEARTBEATS,
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": "6000",
}
SHORT_SESSION_S = 6.0
GROUP_FORM_TIMEOUT_S = 30.0
REBALANCE_MARGIN_S = 10.0
"""How much longer than the session a takeover after SIGKILL may take on a busy machine:
the coordinator notices the expired session on its timer and the others move on their
next heartbeats."""


@pytest.fixture(scope="module")
def broker(consumer_protocol_broker: BrokerProcess) -> BrokerProcess:
    return consumer_protocol_broker


def spawn(pool: WorkerPool, name: str, broker: BrokerProcess, topic: str, group: str, **kw):
    return pool.spawn(
        name, bootstrap=broker.bootstrap, topic=topic, group=group, group_protocol="consumer", **kw
    )


def spawn_members(pool: WorkerPool, count: int, broker: BrokerProcess, topic: str, group: str):
    return [spawn(pool, f"member-{i}", broker, topic, group) for i in range(count)]


def describe_group(bootstrap: str, group: str) -> ConsumerGroupDescription:
    admin = admin_client(bootstrap)  # must outlive the future
    (future,) = admin.describe_consumer_groups([group], request_timeout=15).values()
    return future.result(timeout=CLIENT_TIMEOUT_S)


def assert_never_owned_twice(workers: list[GroupWorker]) -> None:
    overlaps = owned_twice(workers)
    assert not overlaps, "a partition was owned by two members at once:\n" + "\n".join(overlaps)


def test_three_members_split_six_partitions_and_process_every_record_once(broker, topic, pool):
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    group = unique_group_id()
    members = spawn_members(pool, 3, broker, topic, group)
    pool.wait_until(split_evenly(members, PARTITIONS), GROUP_FORM_TIMEOUT_S, "a 2/2/2 split")

    expected = produce_round_robin(broker.bootstrap, topic, PARTITIONS, 600, "steady")
    pool.wait_until(all_processed(pool, expected), CLIENT_TIMEOUT_S, "all 600 records processed")
    assert_processed_exactly_once(pool, expected, members)
    assert_each_member_processed_only_its_partitions(members)
    assert_never_owned_twice(members)
    pool.wait_until(
        lambda: all(m.committed().get(p) == 100 for m in members for p in m.assignment()),
        CLIENT_TIMEOUT_S,
        "every member to commit offset 100 on each of its partitions",
    )

    description = describe_group(broker.bootstrap, group)
    assert description.type == ConsumerGroupType.CONSUMER
    assert description.state == ConsumerGroupState.STABLE
    assert description.partition_assignor == "uniform"
    described = {
        member.client_id: {tp.partition for tp in member.assignment.topic_partitions}
        for member in description.members
    }
    assert described == {m.name: set(m.assignment()) for m in members}
    for member in members:
        member.close()


def test_a_joining_member_takes_partitions_only_after_their_owner_gave_them_up(broker, topic, pool):
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    group = unique_group_id()
    old = spawn_members(pool, 3, broker, topic, group)
    pool.wait_until(split_evenly(old, PARTITIONS), GROUP_FORM_TIMEOUT_S, "a 2/2/2 split")
    before = {m.name: m.assignment() for m in old}

    with ContinuousProducer(broker.bootstrap, topic, PARTITIONS) as producer:
        pool.wait_until(
            lambda: all(m.committed() for m in old), CLIENT_TIMEOUT_S, "every member to commit"
        )
        newcomer = spawn(pool, "newcomer", broker, topic, group)
        members = [*old, newcomer]
        pool.wait_until(split_evenly(members, PARTITIONS), GROUP_FORM_TIMEOUT_S, "a 2/2/1/1 split")
    delivered = producer.stop()

    pool.wait_until(all_processed(pool, delivered), CLIENT_TIMEOUT_S, "every record processed")
    assert_processed_exactly_once(pool, delivered, members)
    assert_never_owned_twice(members)
    for member in old:
        assert member.assignment() <= before[member.name], (
            f"{member.name} owned {sorted(before[member.name])} and now "
            f"{sorted(member.assignment())}: a join must only take partitions away"
        )
        assert not member.of_kind("lost"), f"{member.name} lost partitions on a join"


def test_a_member_that_closes_leaves_at_once(broker, topic, pool):
    # The broker's session is Kafka's 45 s: only the leave heartbeat explains a takeover
    # within a third of it.
    session_s = 45.0
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    members = spawn_members(pool, 3, broker, topic, unique_group_id())
    pool.wait_until(split_evenly(members, PARTITIONS), GROUP_FORM_TIMEOUT_S, "a 2/2/2 split")
    first = produce_round_robin(broker.bootstrap, topic, PARTITIONS, 120, "before")
    pool.wait_until(all_processed(pool, first), CLIENT_TIMEOUT_S, "records before the leave")

    leaving, staying = members[0], members[1:]
    leaving.close()
    took_s = pool.wait_until(
        split_evenly(staying, PARTITIONS), session_s, "the others to take every partition"
    )
    assert took_s < session_s / 3, f"the takeover took {took_s:.1f}s: the leave was not acted on"
    second = produce_round_robin(broker.bootstrap, topic, PARTITIONS, 120, "after")
    pool.wait_until(all_processed(pool, second, staying), CLIENT_TIMEOUT_S, "records after")
    assert_processed_exactly_once(pool, {**first, **second}, members)
    assert_never_owned_twice(members)


def test_the_partitions_of_a_killed_member_move_after_its_session_and_nothing_is_lost(
    broker_factory: Callable[..., BrokerProcess], topic: str, pool: WorkerPool
) -> None:
    broker = broker_factory(SHORT_SESSION)
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    members = spawn_members(pool, 3, broker, topic, unique_group_id())
    pool.wait_until(split_evenly(members, PARTITIONS), GROUP_FORM_TIMEOUT_S, "a 2/2/2 split")
    victim, survivors = members[0], members[1:]
    victim_partitions = victim.assignment()

    with ContinuousProducer(broker.bootstrap, topic, PARTITIONS) as producer:
        pool.wait_until(
            lambda: len(victim.processed()) >= 50 and bool(victim.committed()),
            CLIENT_TIMEOUT_S,
            "the victim to process and commit some records",
        )
        victim.kill()
        killed_s = time.monotonic()
        took_s = pool.wait_until(
            split_evenly(survivors, PARTITIONS),
            SHORT_SESSION_S + 60,
            "the survivors to take over every partition",
        )
        pool.wait_until(
            lambda: (
                victim_partitions
                <= {p.partition for p in pool.processed(survivors) if p.arrived_s > killed_s}
            ),
            CLIENT_TIMEOUT_S,
            "the survivors to process records of the victim's partitions",
        )
    delivered = producer.stop()

    assert took_s >= SHORT_SESSION_S * 0.5, (
        f"the victim's partitions moved {took_s:.1f}s after SIGKILL, before its session "
        f"of {SHORT_SESSION_S}s could have ended"
    )
    assert took_s <= SHORT_SESSION_S + REBALANCE_MARGIN_S, f"takeover took {took_s:.1f}s"
    pool.wait_until(all_processed(pool, delivered), CLIENT_TIMEOUT_S, "every record processed")
    assert_never_owned_twice(members)
    assert_only_the_victims_uncommitted_records_repeat(pool, delivered, victim)


def test_a_static_member_that_restarts_gets_its_partitions_back_and_nobody_else_moves(
    broker, topic, pool
):
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    group = unique_group_id()

    def spawn_static(index: int, name: str) -> GroupWorker:
        return spawn(pool, name, broker, topic, group, instance_id=f"static-{index}")

    members = [spawn_static(i, f"member-{i}") for i in range(3)]
    pool.wait_until(split_evenly(members, PARTITIONS), GROUP_FORM_TIMEOUT_S, "a 2/2/2 split")
    first = produce_round_robin(broker.bootstrap, topic, PARTITIONS, 120, "before")
    pool.wait_until(all_processed(pool, first), CLIENT_TIMEOUT_S, "records before the restart")

    restarting, others = members[0], members[1:]
    owned_before = restarting.assignment()
    marks = {m.name: len(m.events) for m in others}
    restarting.close()  # a static member leaves with epoch -2: its partitions wait for it
    replacement = spawn_static(0, "member-0-restarted")
    pool.wait_until(
        lambda: replacement.assignment() == owned_before,
        GROUP_FORM_TIMEOUT_S,
        f"the restarted static member to get {sorted(owned_before)} back",
    )
    second = produce_round_robin(broker.bootstrap, topic, PARTITIONS, 120, "after")
    everyone = [*members, replacement]
    pool.wait_until(all_processed(pool, second), CLIENT_TIMEOUT_S, "records after the restart")
    for other in others:
        moved = other.of_kind("assigned", "revoked", "lost", since=marks[other.name])
        assert not moved, f"{other.name}'s partitions moved during a static restart: {moved}"
    assert_processed_exactly_once(pool, {**first, **second}, everyone)
    assert_never_owned_twice(everyone)


def test_a_regular_expression_subscription_picks_up_a_topic_created_later(broker):
    prefix = f"regex-{uuid.uuid4().hex[:8]}"
    first, later = f"{prefix}-first", f"{prefix}-later"
    create_topic(broker.bootstrap, first, num_partitions=2)
    producer = Producer(producer_config(broker.bootstrap, acks="all"))
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": unique_group_id(),
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "topic.metadata.refresh.interval.ms": 1000,
            "fetch.wait.max.ms": 100,
        }
    )
    seen: dict[str, set[bytes]] = {first: set(), later: set()}

    def consume_until(topic: str, values: set[bytes]) -> None:
        deadline = time.monotonic() + GROUP_FORM_TIMEOUT_S * 2
        while not values <= seen[topic] and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.2):
                assert message.error() is None, message.error()
                seen[message.topic()].add(message.value())
        assert values <= seen[topic], f"{topic}: consumed {sorted(seen[topic])}"

    consumer.subscribe([f"^{prefix}-.*"])
    try:
        produce_and_flush(producer, first, [{"value": b"one"}, {"value": b"two"}])
        consume_until(first, {b"one", b"two"})
        create_topic(broker.bootstrap, later, num_partitions=1)
        produce_and_flush(producer, later, [{"value": b"three"}])
        consume_until(later, {b"three"})
        assignment = {(tp.topic, tp.partition) for tp in consumer.assignment()}
    finally:
        consumer.close()
    assert assignment == {(first, 0), (first, 1), (later, 0)}


def test_random_joins_leaves_and_kills_never_lose_a_record_or_share_a_partition(
    broker_factory: Callable[..., BrokerProcess], topic: str, pool: WorkerPool
) -> None:
    seed = int(os.environ.get("SLUICE_TEST_SEED", random.randrange(2**32)))
    print(f"seed {seed} (SLUICE_TEST_SEED={seed} replays it)")
    rng = random.Random(seed)
    broker = broker_factory(SHORT_SESSION)
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    group = unique_group_id()
    running = spawn_members(pool, 2, broker, topic, group)
    everyone = list(running)
    pool.wait_until(split_evenly(running, PARTITIONS), GROUP_FORM_TIMEOUT_S, "a 3/3 split")
    steps: list[str] = []
    with ContinuousProducer(broker.bootstrap, topic, PARTITIONS) as producer:
        for step in range(5):
            choices = ["join"] if len(running) < 2 else ["join", "close", "kill"]
            if len(running) >= 4:
                choices = ["close", "kill"]
            action = rng.choice(choices)
            if action == "join":
                member = spawn(pool, f"member-{len(everyone)}", broker, topic, group)
                running.append(member)
                everyone.append(member)
                steps.append(f"{member.name} joins")
            else:
                member = running.pop(rng.randrange(len(running)))
                steps.append(f"{member.name} {'closes' if action == 'close' else 'is killed'}")
                if action == "close":
                    member.close()
                else:
                    member.kill()
            pool.wait_until(
                split_evenly(running, PARTITIONS),
                SHORT_SESSION_S + 60,
                f"step {step} ({steps[-1]}): the {len(running)} members to share every partition",
            )
    delivered = producer.stop()
    pool.wait_until(
        all_processed(pool, delivered),
        CLIENT_TIMEOUT_S,
        f"every record processed (seed {seed}: {'; '.join(steps)})",
    )
    overlaps = owned_twice(everyone)
    assert not overlaps, f"seed {seed} ({'; '.join(steps)}): " + "\n".join(overlaps)
    processed = [p for p in pool.processed() if (p.partition, p.offset) in delivered]
    assert all(p.value == delivered[(p.partition, p.offset)] for p in processed)
    killed = {m.name for m in everyone if m.died_at_s is not None}
    for position, items in duplicates(processed).items():
        assert killed & {item.worker for item in items}, (
            f"seed {seed} ({'; '.join(steps)}): {position} processed twice with no member "
            f"killed among {[item.worker for item in items]}"
        )
