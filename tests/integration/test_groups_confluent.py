"""Consumer groups with confluent-kafka (librdkafka): each member is its own OS process
(``group_workers.py``) that commits after processing and reports what it processed, so a
member can be killed with SIGKILL like a crashed application.

The broker runs with ``group.initial.rebalance.delay.ms=0`` so the first rebalance of a
group does not wait the default 3 s.
"""

from __future__ import annotations

import threading
import time

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
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupState,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import ConsumerGroupDescription
from group_workers import (
    ContinuousProducer,
    GroupWorker,
    all_processed,
    assert_each_member_processed_only_its_partitions,
    assert_only_the_victims_uncommitted_records_repeat,
    assert_processed_exactly_once,
    produce_round_robin,
    spawn_members,
    split_evenly,
)

PARTITIONS = 6
SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 1_000
REBALANCE_MARGIN_S = 5.0
"""A rebalance after a member's session expired may take this much longer: the others
notice on their next heartbeat, rejoin and sync."""
GROUP_FORM_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def broker(fast_groups_broker: BrokerProcess) -> BrokerProcess:
    return fast_groups_broker


def describe_group(bootstrap: str, group: str) -> ConsumerGroupDescription:
    admin = admin_client(bootstrap)  # must outlive the future
    (future,) = admin.describe_consumer_groups([group], request_timeout=15).values()
    return future.result(timeout=CLIENT_TIMEOUT_S)


# ── steady state ───────────────────────────────────────────────────────────────────────


def test_three_member_processes_split_six_partitions_two_each_and_process_every_message_once(
    broker, topic, pool
):
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    group = unique_group_id()
    members = spawn_members(pool, 3, broker.bootstrap, topic, group)

    pool.wait_until(split_evenly(members, PARTITIONS), GROUP_FORM_TIMEOUT_S, "a 2/2/2 split")
    assert sorted(len(m.assignment()) for m in members) == [2, 2, 2]

    expected = produce_round_robin(broker.bootstrap, topic, PARTITIONS, 600, "steady")
    pool.wait_until(all_processed(pool, expected), CLIENT_TIMEOUT_S, "all 600 messages processed")

    assert_processed_exactly_once(pool, expected, members)
    assert_each_member_processed_only_its_partitions(members)
    pool.wait_until(
        lambda: all(m.committed().get(p) == 100 for m in members for p in m.assignment()),
        CLIENT_TIMEOUT_S,
        "every member to commit offset 100 on each of its partitions",
    )

    description = describe_group(broker.bootstrap, group)
    assert description.state == ConsumerGroupState.STABLE
    assert description.partition_assignor == "range"
    described = {
        member.client_id: {tp.partition for tp in member.assignment.topic_partitions}
        for member in description.members
    }
    assert described == {m.name: set(m.assignment()) for m in members}, (
        "DescribeGroups must show each member with the assignment it received"
    )
    for member in members:
        member.close()


# ── failures and departures ────────────────────────────────────────────────────────────


def test_partitions_of_a_killed_member_move_to_the_others_and_no_message_is_lost(
    broker, topic, pool
):
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    group = unique_group_id()
    members = spawn_members(
        pool,
        3,
        broker.bootstrap,
        topic,
        group,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
    )
    pool.wait_until(split_evenly(members, PARTITIONS), GROUP_FORM_TIMEOUT_S, "a 2/2/2 split")
    victim, survivors = members[0], members[1:]
    victim_partitions = victim.assignment()

    with ContinuousProducer(broker.bootstrap, topic, PARTITIONS) as producer:
        pool.wait_until(
            lambda: len(victim.processed()) >= 50 and victim.committed(),
            CLIENT_TIMEOUT_S,
            "the victim to process and commit some messages",
        )
        victim.kill()
        killed_s = time.monotonic()
        pool.wait_until(
            split_evenly(survivors, PARTITIONS),
            SESSION_TIMEOUT_MS / 1000 + 30,
            "the survivors to take over every partition",
        )
        takeover_s = time.monotonic() - killed_s
        pool.wait_until(
            lambda: (
                victim_partitions
                <= {p.partition for p in pool.processed(survivors) if p.arrived_s > killed_s}
            ),
            CLIENT_TIMEOUT_S,
            "the survivors to process messages of the victim's partitions",
        )
    delivered = producer.stop()

    assert takeover_s <= SESSION_TIMEOUT_MS / 1000 + REBALANCE_MARGIN_S, (
        f"the victim's partitions moved {takeover_s:.1f}s after SIGKILL; the session "
        f"timeout is {SESSION_TIMEOUT_MS} ms"
    )
    pool.wait_until(
        all_processed(pool, delivered), CLIENT_TIMEOUT_S, "every delivered message processed"
    )
    assert_only_the_victims_uncommitted_records_repeat(pool, delivered, victim)


def test_a_member_that_closes_cleanly_leaves_and_the_others_rebalance_at_once(broker, topic, pool):
    # Long, so that only a LeaveGroup explains a rebalance within a third of it, with room
    # for a busy machine's slow clients.
    session_timeout_ms = 90_000
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    members = spawn_members(
        pool, 3, broker.bootstrap, topic, unique_group_id(), session_timeout_ms=session_timeout_ms
    )
    pool.wait_until(split_evenly(members, PARTITIONS), GROUP_FORM_TIMEOUT_S, "a 2/2/2 split")
    first = produce_round_robin(broker.bootstrap, topic, PARTITIONS, 120, "before")
    pool.wait_until(all_processed(pool, first), CLIENT_TIMEOUT_S, "messages before the leave")

    leaving, staying = members[0], members[1:]
    asked_s = time.monotonic()
    leaving.close()
    pool.wait_until(
        split_evenly(staying, PARTITIONS),
        session_timeout_ms / 1000,
        "the remaining members to take over every partition",
    )
    took_s = time.monotonic() - asked_s

    assert took_s < session_timeout_ms / 1000 / 3, (
        f"rebalance after a clean leave took {took_s:.1f}s; the session timeout is "
        f"{session_timeout_ms} ms, so LeaveGroup was not acted on"
    )
    second = produce_round_robin(broker.bootstrap, topic, PARTITIONS, 120, "after")
    pool.wait_until(all_processed(pool, second, staying), CLIENT_TIMEOUT_S, "messages after")
    assert_processed_exactly_once(pool, {**first, **second}, members)


# ── incremental (cooperative) rebalancing ──────────────────────────────────────────────


def test_cooperative_sticky_members_keep_their_partitions_and_give_up_only_moved_ones(
    broker, topic, pool
):
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    group = unique_group_id()
    old = spawn_members(pool, 2, broker.bootstrap, topic, group, assignor="cooperative-sticky")
    pool.wait_until(split_evenly(old, PARTITIONS), GROUP_FORM_TIMEOUT_S, "a 3/3 split")
    first = produce_round_robin(broker.bootstrap, topic, PARTITIONS, 300, "before-join")
    pool.wait_until(all_processed(pool, first), CLIENT_TIMEOUT_S, "messages before the join")

    before = {m.name: m.assignment() for m in old}
    marks = {m.name: len(m.events) for m in old}
    newcomer = pool.spawn(
        "newcomer",
        bootstrap=broker.bootstrap,
        topic=topic,
        group=group,
        assignor="cooperative-sticky",
    )
    members = [*old, newcomer]
    pool.wait_until(split_evenly(members, PARTITIONS), GROUP_FORM_TIMEOUT_S, "a 2/2/2 split")

    moved: set[int] = set()
    for member in old:
        revoked = [
            set(e.data["partitions"])
            for e in member.of_kind("revoked", "lost", since=marks[member.name])
        ]
        given_up = set().union(*revoked) if revoked else set()
        kept = before[member.name] - given_up
        assert given_up < before[member.name], (
            f"{member.name} had {sorted(before[member.name])} and was revoked "
            f"{[sorted(r) for r in revoked]}: an incremental rebalance revokes only moved "
            "partitions"
        )
        assert kept == member.assignment(), (
            f"{member.name} kept {sorted(kept)} but now owns {sorted(member.assignment())}"
        )
        assert not member.of_kind("lost", since=marks[member.name])
        moved |= given_up
    assert moved == newcomer.assignment(), (
        f"revoked {sorted(moved)} but the newcomer got {sorted(newcomer.assignment())}"
    )

    second = produce_round_robin(broker.bootstrap, topic, PARTITIONS, 300, "after-join")
    pool.wait_until(all_processed(pool, second), CLIENT_TIMEOUT_S, "messages after the join")
    assert_processed_exactly_once(pool, {**first, **second}, members)


# ── commits ────────────────────────────────────────────────────────────────────────────


def group_consumer(bootstrap: str, group: str, **overrides) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "fetch.wait.max.ms": 100,
            "socket.timeout.ms": 10_000,
            **overrides,
        }
    )


def consume_until(consumer: Consumer, count: int, timeout_s: float = CLIENT_TIMEOUT_S):
    messages: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(messages) < count and time.monotonic() < deadline:
        for message in consumer.consume(count - len(messages), 0.2):
            assert message.error() is None, f"consumer error: {message.error()}"
            messages.append(message)
    assert len(messages) >= count, f"consumed {len(messages)} of {count} in {timeout_s}s"
    return messages


def wait_for_committed(
    consumer: Consumer, expected: dict[int, int], topic: str, timeout_s: float = 15.0
) -> None:
    partitions = [TopicPartition(topic, p) for p in sorted(expected)]
    deadline = time.monotonic() + timeout_s
    got: dict[int, int] = {}
    while time.monotonic() < deadline:
        got = {tp.partition: tp.offset for tp in consumer.committed(partitions, timeout=10)}
        if got == expected:
            return
        consumer.poll(0.1)  # serves the auto-commit timer and callbacks
    raise AssertionError(f"committed offsets {got}, expected {expected} within {timeout_s}s")


def test_auto_commit_commits_consumed_offsets_and_a_restarted_group_resumes_there(broker, topic):
    create_topic(broker.bootstrap, topic, num_partitions=3)
    group = unique_group_id()
    producer = Producer(producer_config(broker.bootstrap, acks="all"))
    produce_and_flush(
        producer, topic, [{"partition": i % 3, "value": f"a{i}".encode()} for i in range(90)]
    )

    consumer = group_consumer(
        broker.bootstrap,
        group,
        **{"enable.auto.commit": True, "auto.commit.interval.ms": 200},
    )
    consumer.subscribe([topic])
    try:
        consume_until(consumer, 90)
        wait_for_committed(consumer, {0: 30, 1: 30, 2: 30}, topic)
    finally:
        consumer.close()

    produce_and_flush(
        producer, topic, [{"partition": i % 3, "value": f"b{i}".encode()} for i in range(30)]
    )
    resumed = group_consumer(broker.bootstrap, group, **{"enable.auto.commit": False})
    resumed.subscribe([topic])
    try:
        messages = consume_until(resumed, 30)
        extra = resumed.consume(10, 1.0)
    finally:
        resumed.close()
    assert sorted(m.value() for m in messages) == sorted(f"b{i}".encode() for i in range(30))
    assert {m.offset() for m in messages} == set(range(30, 40))
    assert not extra, "the restarted group re-read messages behind its committed offsets"


def test_committed_returns_offsets_and_metadata_committed_by_a_group_member(broker, topic):
    create_topic(broker.bootstrap, topic, num_partitions=3)
    producer = Producer(producer_config(broker.bootstrap, acks="all"))
    produce_and_flush(producer, topic, [{"partition": i % 3, "value": b"x"} for i in range(30)])
    group = unique_group_id()
    assigned = threading.Event()
    member = group_consumer(broker.bootstrap, group, **{"enable.auto.commit": False})
    member.subscribe([topic], on_assign=lambda _c, _p: assigned.set())
    try:
        deadline = time.monotonic() + GROUP_FORM_TIMEOUT_S
        while not assigned.is_set() and time.monotonic() < deadline:
            member.poll(0.1)
        assert assigned.is_set(), "the member got no assignment"
        member.commit(
            offsets=[TopicPartition(topic, 0, 7, "seven"), TopicPartition(topic, 1, 10, "")],
            asynchronous=False,
        )
        committed = member.committed(
            [TopicPartition(topic, p) for p in range(3)], timeout=CLIENT_TIMEOUT_S
        )
    finally:
        member.close()
    assert [(tp.partition, tp.offset, tp.metadata) for tp in committed] == [
        (0, 7, "seven"),
        (1, 10, ""),
        (2, OFFSET_INVALID, None),
    ]
    assert all(tp.error is None for tp in committed), committed

    outsider = group_consumer(broker.bootstrap, group)  # not a member: fetch only
    try:
        again = outsider.committed(
            [TopicPartition(topic, p) for p in range(3)], timeout=CLIENT_TIMEOUT_S
        )
    finally:
        outsider.close()
    assert [tp.offset for tp in again] == [7, 10, OFFSET_INVALID]


# ── static membership ──────────────────────────────────────────────────────────────────


def test_a_static_member_restarting_within_the_session_timeout_causes_no_rebalance(
    broker, topic, pool
):
    # Long, so that a busy machine's slow restart still falls within it.
    session_timeout_ms = 60_000
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    group = unique_group_id()

    def spawn_static(index: int, name: str) -> GroupWorker:
        return pool.spawn(
            name,
            bootstrap=broker.bootstrap,
            topic=topic,
            group=group,
            instance_id=f"static-{index}",
            session_timeout_ms=session_timeout_ms,
        )

    members = [spawn_static(i, f"member-{i}") for i in range(3)]
    pool.wait_until(split_evenly(members, PARTITIONS), GROUP_FORM_TIMEOUT_S, "a 2/2/2 split")
    first = produce_round_robin(broker.bootstrap, topic, PARTITIONS, 120, "before")
    pool.wait_until(all_processed(pool, first), CLIENT_TIMEOUT_S, "messages before the restart")

    restarting, others = members[0], members[1:]
    owned_before = restarting.assignment()
    marks = {m.name: len(m.events) for m in others}
    restarted_s = time.monotonic()
    restarting.close()  # a static member sends no LeaveGroup
    replacement = spawn_static(0, "member-0-restarted")
    pool.wait_until(
        lambda: bool(replacement.assignment()),
        session_timeout_ms / 1000,
        "the restarted static member to get its partitions back",
    )
    assert time.monotonic() - restarted_s < session_timeout_ms / 1000
    assert replacement.assignment() == owned_before, (
        f"the static member owned {sorted(owned_before)} before its restart and "
        f"{sorted(replacement.assignment())} after"
    )

    second = produce_round_robin(broker.bootstrap, topic, PARTITIONS, 120, "after")
    pool.wait_until(all_processed(pool, second), CLIENT_TIMEOUT_S, "messages after the restart")

    def any_rebalance_seen_by_others() -> bool:
        return any(m.of_kind("assigned", "revoked", "lost", since=marks[m.name]) for m in others)

    quiet = pool.quiet_for(any_rebalance_seen_by_others, 3 * HEARTBEAT_INTERVAL_MS / 1000)
    assert quiet, "the other members were rebalanced although a static member came back:\n" + (
        pool.describe()
    )
    assert_processed_exactly_once(pool, {**first, **second}, [*members, replacement])
