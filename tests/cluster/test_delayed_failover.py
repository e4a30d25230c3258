"""Delayed delivery on a three-broker cluster: the leader of a partition holding
pending delayed records is killed with SIGKILL while it fires them. A follower takes
over with the delay index it kept while following (no rescan) and fires the rest: every
record is delivered once, none early, none lost; when the killed broker returns and
catches up, nothing fires a second time."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from client_helpers import consumer_config, produce_and_flush, producer_config
from cluster_processes import Cluster, running_cluster
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import NewTopic

from sluice.cli.local_zookeeper import LocalZooKeeper

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TIMEOUT_S = 60.0
RECORDS = 200


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), zookeeper.connect, 3) as started:
        yield started


def read_all(consumer: Consumer, seen: dict[bytes, float], until: int) -> None:
    """Poll into ``seen`` (value → when first seen) until it holds ``until`` values."""
    deadline = time.monotonic() + TIMEOUT_S
    while len(seen) < until:
        assert time.monotonic() < deadline, f"only {len(seen)} of {until} records appeared"
        for message in consumer.consume(100, 0.1):
            if message.error() is not None:
                continue  # leadership moving: librdkafka reports and retries
            value = message.value()
            assert value not in seen, f"{value!r} delivered twice"
            seen[value] = time.time()


def read_to_end(bootstrap: str, topic: str, end: int) -> list[bytes]:
    """Every record value below offset ``end``, read by a new consumer (parked copies
    are control batches: the client skips them)."""
    consumer = Consumer(consumer_config(bootstrap))
    consumer.assign([ConfluentTopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not values or consumer.position([ConfluentTopicPartition(topic, 0)])[0].offset < end:
            assert time.monotonic() < deadline, f"did not reach offset {end}"
            values.extend(m.value() for m in consumer.consume(100, 0.1) if m.error() is None)
    finally:
        consumer.close()
    return values


def test_the_new_leader_fires_what_the_killed_one_had_not(cluster: Cluster) -> None:
    topic = f"delayed-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin(cluster.running()[0])
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(
        TIMEOUT_S
    )
    status = cluster.wait_for(lambda s: topic in s["topics"])
    leader = status["topics"][topic][0]["leader"]
    producer = Producer(
        producer_config(cluster.bootstrap, **{"enable.idempotence": True, "acks": "all"})
    )
    sent = time.time()
    delays_ms = {b"%d" % i: 1000 + 20 * i for i in range(RECORDS)}  # 1 s to 5 s
    produce_and_flush(
        producer,
        topic,
        [
            {"value": value, "partition": 0, "headers": [("x-sluice-delay-ms", b"%d" % delay)]}
            for value, delay in delays_ms.items()
        ],
    )
    consumer = Consumer(consumer_config(cluster.bootstrap))
    consumer.assign([ConfluentTopicPartition(topic, 0, 0)])
    seen: dict[bytes, float] = {}
    try:
        read_all(consumer, seen, RECORDS // 4)
        cluster.broker(leader).kill()
        read_all(consumer, seen, RECORDS)
        for value, delay_ms in delays_ms.items():
            assert seen[value] >= sent + delay_ms / 1000, f"{value!r} was early"
        # The killed broker returns and catches up: it fires nothing again.
        cluster.broker(leader).start()
        cluster.wait_for(
            lambda s: len(s["topics"][topic][0]["isr"]) == 3 and len(s["brokers"]) == 3
        )
        end = consumer.get_watermark_offsets(ConfluentTopicPartition(topic, 0), TIMEOUT_S)[1]
        values = read_to_end(cluster.bootstrap, topic, end)
        assert sorted(values) == sorted(delays_ms)  # each once, and nothing more
    finally:
        consumer.close()
