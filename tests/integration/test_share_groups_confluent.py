"""Share groups with confluent-kafka's ShareConsumer (librdkafka's KIP-932 client) on a
real broker: more consumers than partitions all get work, each record accepted once; a
consumer killed with SIGKILL loses its records to another after the lock duration;
release, reject and the delivery-count limit, with a dead-letter topic; a checker that
no record is held by two members at once; and a topic created again, read afresh."""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from client_helpers import create_topic, produce_and_flush, producer_config, recreate_topic
from confluent_kafka import AcknowledgeType, Consumer, Message, Producer, ShareConsumer
from kafka_wire import KafkaConnection
from share_wire import set_group_configs

LOCK_MS = 2_000
"""The broker's lock duration: short, so that a killed member's records come back soon."""
CLOCK_GRANULARITY_MS = 10
"""The broker keeps lock deadlines in whole milliseconds of its own clock: a deadline may
fall this much before the same instant on the test's clock."""
REDELIVERY_TIMEOUT_S = 60.0
"""How long a new member may take to join and be given the expired records (a bound
for a stuck test, not a measurement)."""
LONG_LOCK_MS = 15_000
"""A group's lock duration (the least a group may set) where no lock may expire."""
DELIVERY_LIMIT = 3
POLL_S = 0.2
THREAD_TIMEOUT_S = 30.0
APP = Path(__file__).with_name("share_consumer_app.py")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("share-confluent") / "data",
        overrides={
            "group.share.min.record.lock.duration.ms": "1000",
            "group.share.record.lock.duration.ms": str(LOCK_MS),
            "group.share.delivery.count.limit": str(DELIVERY_LIMIT),
        },
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def new_group(broker: BrokerProcess, **configs: str) -> str:
    """A share group reading from the log start, with ``configs`` set."""
    group = f"share-{uuid.uuid4().hex[:8]}"
    with KafkaConnection(broker.host, broker.port) as connection:
        set_group_configs(connection, group, {"share.auto.offset.reset": "earliest", **configs})
    return group


def share_consumer(broker: BrokerProcess, group: str, **overrides: object) -> ShareConsumer:
    return ShareConsumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "socket.timeout.ms": 10_000,
            **overrides,
        }
    )


def commit(consumer: ShareConsumer) -> None:
    """Send the acknowledgements made so far; every partition must take them."""
    results = consumer.commit_sync(10.0)
    assert all(error is None for error in results.values()), results


def polled(consumer: ShareConsumer) -> list[Message]:
    messages = list(consumer.poll(POLL_S))
    errors = [m.error() for m in messages if m.error() is not None]
    assert not errors, errors
    return messages


def nothing_left(broker: BrokerProcess, group: str, topic: str, seconds: float) -> None:
    """A fresh member polling for ``seconds`` gets nothing (accepting whatever it gets,
    so that a failure shows every leftover)."""
    consumer = share_consumer(broker, group)
    consumer.subscribe([topic])
    leftovers: list[tuple[int, int]] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            for message in polled(consumer):
                leftovers.append((message.offset(), message.delivery_count()))
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            if leftovers:
                commit(consumer)
    finally:
        consumer.close()
    assert leftovers == []


def run_threads(targets: list[threading.Thread]) -> None:
    for thread in targets:
        thread.start()
    for thread in targets:
        thread.join(THREAD_TIMEOUT_S + 15)
    assert not any(t.is_alive() for t in targets), "a consumer thread did not finish"


class ThreadFailures:
    """Exceptions raised in worker threads, re-raised in the test."""

    def __init__(self) -> None:
        self.found: list[BaseException] = []

    @contextlib.contextmanager
    def kept(self) -> Iterator[None]:
        try:
            yield
        except BaseException as e:
            self.found.append(e)

    def check(self) -> None:
        if self.found:
            raise self.found[0]


# ── a. more consumers than partitions ──────────────────────────────────────────────────


def test_more_consumers_than_partitions_all_get_work_and_each_record_is_accepted_once(
    broker: BrokerProcess, topic: str
) -> None:
    consumers, total = 4, 400
    create_topic(broker.bootstrap, topic)  # one partition
    group = new_group(broker, **{"share.record.lock.duration.ms": str(LONG_LOCK_MS)})
    accepted: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()
    done = threading.Event()
    failures = ThreadFailures()

    def consume(name: str) -> None:
        with failures.kept():
            consumer = share_consumer(broker, group, **{"max.poll.records": 5})
            consumer.subscribe([topic])
            deadline = time.monotonic() + THREAD_TIMEOUT_S
            try:
                while not done.is_set() and time.monotonic() < deadline:
                    messages = polled(consumer)
                    for message in messages:
                        time.sleep(0.003)  # the record's "processing"
                        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                    if not messages:
                        continue
                    commit(consumer)
                    with lock:
                        accepted[name] += [m.offset() for m in messages]
                        if sum(len(o) for o in accepted.values()) >= total:
                            done.set()
            finally:
                consumer.close()

    def produce() -> None:
        with failures.kept():
            producer = Producer(producer_config(broker.bootstrap, **{"linger.ms": 0}))
            for start in range(0, total, 4):  # many small batches, while they consume
                produce_and_flush(
                    producer, topic, ({"value": f"r{i}".encode()} for i in range(start, start + 4))
                )

    names = [f"c{i}" for i in range(consumers)]
    run_threads(
        [threading.Thread(target=consume, args=(n,)) for n in names]
        + [threading.Thread(target=produce)]
    )
    failures.check()
    per_consumer = {name: len(accepted[name]) for name in names}
    print("records accepted per consumer:", per_consumer)
    assert all(count > 0 for count in per_consumer.values()), per_consumer
    counts = Counter(o for offsets in accepted.values() for o in offsets)
    assert sorted(counts) == list(range(total))
    assert set(counts.values()) == {1}, {o: c for o, c in counts.items() if c != 1}
    nothing_left(broker, group, topic, seconds=2.0)


# ── b. a consumer killed with SIGKILL ──────────────────────────────────────────────────


def test_a_killed_consumers_records_go_to_another_after_the_lock_duration(
    broker: BrokerProcess, topic: str
) -> None:
    records = 5
    create_topic(broker.bootstrap, topic)
    group = new_group(broker)
    produce_and_flush(
        Producer(producer_config(broker.bootstrap)),
        topic,
        ({"value": f"k{i}".encode()} for i in range(records)),
    )
    # Read before the child exists: its locks start after this, so records seen again
    # less than a lock duration after it were freed early, however slow the machine
    # (a bound that holds one way only: no window for a busy machine to miss).
    before_acquiring = time.monotonic()
    child = subprocess.Popen(
        [
            sys.executable,
            str(APP),
            *("--bootstrap", broker.bootstrap, "--topic", topic, "--group", group),
            *("--records", str(records)),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # the child holds them from before this line
        report = json.loads(line)
        assert report["offsets"] == list(range(records)), report
        assert report["delivery_counts"] == [1] * records
        child.kill()  # SIGKILL: no acknowledgement, no leaving the group
        child.wait(10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        child.wait(10)

    consumer = share_consumer(broker, group)
    consumer.subscribe([topic])
    got: dict[int, int] = {}
    received_at: float | None = None
    try:
        deadline = time.monotonic() + REDELIVERY_TIMEOUT_S
        while len(got) < records and time.monotonic() < deadline:
            for message in polled(consumer):
                got[message.offset()] = message.delivery_count()
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                received_at = received_at or time.monotonic()
            if got:
                commit(consumer)
    finally:
        consumer.close()
    assert got == dict.fromkeys(range(records), 2)  # the same records, delivered again
    assert received_at is not None
    waited_ms = (received_at - before_acquiring) * 1000
    print(f"the killed member's records came back {waited_ms:.0f} ms after its start")
    # Not before the lock ended: the broker's expiry, not the killed connection, freed
    # them (delivered again, count 2, above).
    assert waited_ms >= LOCK_MS - CLOCK_GRANULARITY_MS


# ── c. release, reject, the delivery-count limit, the dead-letter topic ────────────────


def test_release_redelivers_reject_does_not_and_both_reach_the_dead_letter_topic(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic)
    dead_letters = f"dlq.{topic}"
    create_topic(broker.bootstrap, dead_letters)
    group = new_group(
        broker,
        **{
            "errors.deadletterqueue.topic.name": dead_letters,
            "errors.deadletterqueue.copy.record.enable": "true",
        },
    )
    # offset 0: released once, then accepted; 1: rejected; 2: released every time.
    produce_and_flush(
        Producer(producer_config(broker.bootstrap)),
        topic,
        ({"value": v} for v in (b"again", b"poison", b"hot-potato")),
    )
    consumer = share_consumer(broker, group)
    consumer.subscribe([topic])
    deliveries: list[tuple[int, int]] = []
    try:
        deadline = time.monotonic() + 20
        # Bounded: 1 + 2 + 3 deliveries are expected, then a quiet poll ends it.
        while time.monotonic() < deadline:
            messages = polled(consumer)
            if not messages and len(deliveries) >= 6:
                break
            for message in messages:
                offset, count = message.offset(), message.delivery_count()
                deliveries.append((offset, count))
                decision = {0: AcknowledgeType.RELEASE if count == 1 else AcknowledgeType.ACCEPT}
                decision |= {1: AcknowledgeType.REJECT, 2: AcknowledgeType.RELEASE}
                consumer.acknowledge(message, decision[offset])
            if messages:
                commit(consumer)
    finally:
        consumer.close()
    assert sorted(deliveries) == [(0, 1), (0, 2), (1, 1), (2, 1), (2, 2), (2, 3)]
    nothing_left(broker, group, topic, seconds=1.0)

    letters = read_all(broker, dead_letters, 2)
    by_reason = {dict(m.headers())["__dlq.errors.reason"]: m for m in letters}
    assert set(by_reason) == {b"rejected", b"delivery-count-limit"}
    rejected, exhausted = by_reason[b"rejected"], by_reason[b"delivery-count-limit"]
    assert rejected.value() == b"poison" and exhausted.value() == b"hot-potato"
    for letter, offset, count in ((rejected, 1, 1), (exhausted, 2, DELIVERY_LIMIT)):
        headers = dict(letter.headers())
        assert headers["__dlq.errors.topic"] == topic.encode()
        assert headers["__dlq.errors.partition"] == b"0"
        assert headers["__dlq.errors.offset"] == str(offset).encode()
        assert headers["__dlq.errors.group.id"] == group.encode()
        assert headers["__dlq.errors.delivery.count"] == str(count).encode()


def read_all(broker: BrokerProcess, topic: str, count: int) -> list[Message]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    found: list[Message] = []
    deadline = time.monotonic() + 20
    try:
        while len(found) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found.append(message)
    finally:
        consumer.close()
    assert len(found) == count, found
    return found


# ── d. no record held by two members at once ───────────────────────────────────────────


@dataclass(frozen=True)
class Hold:
    member: str
    offset: int
    delivery_count: int
    received: float
    """When poll() returned it: after the broker acquired it for the member."""
    acked: float
    """When the member handed its acknowledgement to the client, before sending it: the
    broker ends the hold after this."""
    accepted: bool


def overlapping(holds: list[Hold]) -> list[tuple[Hold, Hold]]:
    """Pairs of holds of one offset by two members whose [received, acked] intervals
    overlap. Each interval lies inside the broker's real hold, so an overlap here is
    certainly one there (a sound check: it can miss races narrower than a round trip,
    never report one that did not happen)."""
    by_offset: dict[int, list[Hold]] = defaultdict(list)
    for hold in holds:
        by_offset[hold.offset].append(hold)
    found = []
    for same in by_offset.values():
        same.sort(key=lambda h: h.received)
        for i, first in enumerate(same):
            for second in same[i + 1 :]:
                if first.member != second.member and second.received < first.acked:
                    found.append((first, second))
    return found


def test_no_record_is_held_by_two_members_at_once(broker: BrokerProcess, topic: str) -> None:
    members, total, release_share = 4, 300, 0.3
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    create_topic(broker.bootstrap, topic)
    group = new_group(
        broker,
        **{"share.record.lock.duration.ms": str(LONG_LOCK_MS), "share.delivery.count.limit": "10"},
    )
    # Batches of 10 records: a fetch takes whole batches (Kafka's batch_optimized acquire
    # mode), so a few large batches would be one or two members' work.
    produce_and_flush(
        Producer(producer_config(broker.bootstrap, **{"linger.ms": 0, "batch.num.messages": 10})),
        topic,
        ({"value": f"d{i}".encode()} for i in range(total)),
    )
    holds: list[Hold] = []
    lock = threading.Lock()
    done = threading.Event()
    failures = ThreadFailures()

    def release(offset: int, count: int) -> bool:
        # Decided by (seed, offset, delivery) whoever holds it; at most 3 releases each.
        return count <= 3 and random.Random(f"{seed}:{offset}:{count}").random() < release_share

    def consume(name: str) -> None:
        with failures.kept():
            consumer = share_consumer(broker, group, **{"max.poll.records": 10})
            consumer.subscribe([topic])
            deadline = time.monotonic() + THREAD_TIMEOUT_S
            try:
                while not done.is_set() and time.monotonic() < deadline:
                    messages = polled(consumer)
                    received = time.monotonic()
                    mine = []
                    for message in messages:
                        time.sleep(0.002)  # the record's "processing"
                        offset, count = message.offset(), message.delivery_count()
                        accept = not release(offset, count)
                        consumer.acknowledge(
                            message, AcknowledgeType.ACCEPT if accept else AcknowledgeType.RELEASE
                        )
                        mine.append(Hold(name, offset, count, received, time.monotonic(), accept))
                    if not messages:
                        continue
                    commit(consumer)
                    with lock:
                        holds.extend(mine)
                        if sum(h.accepted for h in holds) >= total:
                            done.set()
            finally:
                consumer.close()

    run_threads([threading.Thread(target=consume, args=(f"m{i}",)) for i in range(members)])
    failures.check()
    released = sum(not h.accepted for h in holds)
    print(
        f"{len(holds)} deliveries, {released} released, members:", Counter(h.member for h in holds)
    )
    assert released > 0
    assert len({h.member for h in holds}) == members
    assert overlapping(holds) == [], f"seed {seed}"
    # Each delivery of an offset is one member's, numbered 1, 2, ... with no gap, and
    # every offset is accepted exactly once, by its last delivery.
    by_offset: dict[int, list[Hold]] = defaultdict(list)
    for hold in holds:
        by_offset[hold.offset].append(hold)
    assert sorted(by_offset) == list(range(total))
    for offset, same in by_offset.items():
        same.sort(key=lambda h: h.delivery_count)
        assert [h.delivery_count for h in same] == list(range(1, len(same) + 1)), (offset, same)
        assert [h.accepted for h in same] == [False] * (len(same) - 1) + [True], (offset, same)
        later_than_release = all(b.received > a.acked for a, b in itertools.pairwise(same))
        assert later_than_release, (offset, same)
    nothing_left(broker, group, topic, seconds=1.0)


def test_the_checker_sees_an_overlap() -> None:
    a = Hold("m0", 7, 1, received=1.0, acked=2.0, accepted=False)
    assert overlapping([a, Hold("m1", 7, 2, received=1.5, acked=3.0, accepted=True)]) != []
    assert overlapping([a, Hold("m1", 7, 2, received=2.5, acked=3.0, accepted=True)]) == []
    assert overlapping([a, Hold("m0", 7, 2, received=1.5, acked=3.0, accepted=True)]) == []


# ── e. a topic deleted and created again is another topic ──────────────────────────────


def test_topic_recreate_resumes_with_fresh_delivery(broker: BrokerProcess, topic: str) -> None:
    """After the topic is deleted and created again (a new topic id), the same consumer
    gets the new topic's records, each with delivery count 1: nothing of the old topic's
    share-partition (its start offset, its delivery counts) carries over."""
    create_topic(broker.bootstrap, topic)
    group = new_group(broker)
    produce_and_flush(
        Producer(producer_config(broker.bootstrap)),
        topic,
        ({"value": f"old{i}".encode()} for i in range(3)),
    )
    consumer = share_consumer(broker, group)
    consumer.subscribe([topic])
    try:
        assert _accept_until(consumer, 3) == {0: (b"old0", 1), 1: (b"old1", 1), 2: (b"old2", 1)}
        recreate_topic(broker.bootstrap, topic)
        produce_and_flush(
            Producer(producer_config(broker.bootstrap)),
            topic,
            ({"value": f"new{i}".encode()} for i in range(3)),
        )
        got = _accept_until(consumer, 3)
    finally:
        consumer.close()
    assert got == {0: (b"new0", 1), 1: (b"new1", 1), 2: (b"new2", 1)}


def _accept_until(consumer: ShareConsumer, count: int) -> dict[int, tuple[bytes | None, int]]:
    """Poll, accepting everything, until ``count`` records came (bounded)."""
    got: dict[int, tuple[bytes | None, int]] = {}
    deadline = time.monotonic() + THREAD_TIMEOUT_S
    while len(got) < count and time.monotonic() < deadline:
        messages = [m for m in consumer.poll(POLL_S) if m.error() is None]
        for message in messages:
            got[message.offset()] = (message.value(), message.delivery_count())
            consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        if messages:
            commit(consumer)
    return got
