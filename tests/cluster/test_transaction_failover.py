"""Transactions on a three-broker cluster: the transaction coordinator's broker killed
with SIGKILL in the middle of a run of transactions, then restarted.

A librdkafka transactional producer runs transactions of three records per partition
over three partitions (RF 3, min.insync.replicas 2), committing most and aborting some
(seeded); the markers of each go to partition leaders on other brokers
(WriteTxnMarkers). Meanwhile its coordinator (the leader of its ``__transaction_state``
partition) is killed: the transaction in flight is completed or aborted by the new
coordinator (which loads the replicated state, and writes the markers of a decided
transaction again), and the producer goes on (a fatal error makes it start a new
instance, which fences the old). A read_committed consumer records what it reads. The
history checker then finds no aborted read, torn transaction, lost write or duplicate.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from cluster_processes import Cluster, running_cluster
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import NewTopic
from history import History, TopicPartition, check

from sluice.cli.local_zookeeper import LocalZooKeeper
from sluice.coordinator.placement import partition_for

pytestmark = pytest.mark.integration

PARTITIONS = 3
TRANSACTIONS = 30
KILL_AFTER = 10
RESTART_AFTER = 20
TRANSACTION_STATE_PARTITIONS = 50
TIMEOUT_S = 60.0
END = "END"


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), zookeeper.connect, 3) as started:
        yield started


def coordinator_of(cluster: Cluster, transactional_id: str) -> int:
    partition = partition_for(transactional_id, TRANSACTION_STATE_PARTITIONS)
    admin = cluster.admin(cluster.running()[0])
    metadata = admin.list_topics("__transaction_state", timeout=TIMEOUT_S)
    return int(metadata.topics["__transaction_state"].partitions[partition].leader)


class TransactionalWriter:
    """Runs the transactions and records sends and outcomes in the history."""

    def __init__(self, cluster: Cluster, topic: str, history: History, seed: int) -> None:
        self.cluster = cluster
        self.topic = topic
        self.history = history
        self.random = random.Random(seed)
        self.transactional_id = f"writer-{topic}"
        self.producer = self._new_producer()
        self.instances = 1

    def _new_producer(self) -> Producer:
        producer = Producer(
            {
                "bootstrap.servers": self.cluster.bootstrap,
                "transactional.id": self.transactional_id,
                "transaction.timeout.ms": 20_000,
                "linger.ms": 2,
            }
        )
        producer.init_transactions(TIMEOUT_S)
        return producer

    def run_one(self, number: int, *, commit: bool) -> None:
        values = [f"{number}-{p}-{i}" for p in range(PARTITIONS) for i in range(3)]

        def delivered(value: str, partition: int):  # type: ignore[no-untyped-def]
            def report(error, message) -> None:  # type: ignore[no-untyped-def]
                tp = TopicPartition(self.topic, partition)
                if error is None:
                    self.history.send(1, "ok", tp, value, message.offset())
                else:
                    self.history.send(1, "info", tp, value)

            return report

        try:
            self.producer.begin_transaction()
            for value in values:
                partition = int(value.split("-")[1])
                self.producer.produce(
                    self.topic,
                    value=value.encode(),
                    partition=partition,
                    on_delivery=delivered(value, partition),
                )
            if commit:
                self.producer.commit_transaction(TIMEOUT_S)
            else:
                self.producer.flush(TIMEOUT_S)
                self.producer.abort_transaction(TIMEOUT_S)
        except KafkaException as e:
            self.history.transaction(1, "info", values)
            error = e.args[0]
            if error.txn_requires_abort():
                try:
                    self.producer.abort_transaction(TIMEOUT_S)
                except KafkaException:
                    self._replace_producer()
            else:
                self._replace_producer()
            return
        self.history.transaction(1, "ok" if commit else "fail", values)

    def _replace_producer(self) -> None:
        self.producer.flush(1)
        self.producer = self._new_producer()  # fences the old instance
        self.instances += 1

    def finish(self) -> None:
        self.producer.begin_transaction()
        for partition in range(PARTITIONS):
            self.producer.produce(self.topic, value=END.encode(), partition=partition)
        self.producer.commit_transaction(TIMEOUT_S)


def read_committed(cluster: Cluster, topic: str, history: History, done: threading.Event) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        consumer.assign([ConfluentTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        ends = 0
        deadline = time.monotonic() + 10 * TIMEOUT_S
        while ends < PARTITIONS and time.monotonic() < deadline:
            polled = []
            for message in consumer.consume(200, 0.2):
                if message.error() is not None:
                    continue  # a broker going away; librdkafka carries on
                value = message.value().decode()
                if value == END:
                    ends += 1
                    continue
                polled.append((TopicPartition(topic, message.partition()), message.offset(), value))
            if polled:
                history.poll(2, polled, read_committed=True)
    finally:
        consumer.close()
        done.set()


@pytest.mark.slow
def test_transactions_survive_the_kill_of_their_coordinator(cluster: Cluster) -> None:
    seed = int(os.environ.get("SLUICE_TXN_SEED", random.randrange(2**32)))
    print(f"seed {seed} (SLUICE_TXN_SEED={seed} reproduces the commit/abort schedule)")
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin(cluster.broker(0))
    admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[
        topic
    ].result(TIMEOUT_S)
    history = History()
    writer = TransactionalWriter(cluster, topic, history, seed)
    coordinator = coordinator_of(cluster, writer.transactional_id)
    done = threading.Event()
    reader = threading.Thread(target=read_committed, args=(cluster, topic, history, done))
    reader.start()
    killed = None
    try:
        for number in range(TRANSACTIONS):
            if number == KILL_AFTER:
                killed = cluster.broker(coordinator)
                killed.kill()
            if number == RESTART_AFTER and killed is not None:
                killed.start()
            writer.run_one(number, commit=writer.random.random() < 0.75)
        writer.finish()
    finally:
        if killed is not None and not killed.is_running:
            killed.start()
        assert done.wait(10 * TIMEOUT_S), "the reader did not finish"
        reader.join()
    result = check(history)
    assert result.valid, f"seed {seed}\n{result.summary()}\n{cluster.log_tails()}"
    committed = [
        op for op in history.operations if getattr(op, "values", None) and op.outcome == "ok"
    ]
    assert len(committed) >= TRANSACTIONS // 2, f"seed {seed}: only {len(committed)} committed"
    assert result.values_read >= 9 * len(committed)
