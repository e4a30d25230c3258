"""kafkajs (Node.js, npm ``kafkajs`` 2.2.4) as a fifth real client: producer, group
consumer and admin, each a ``node`` process (``tests/js/kafkajs_client.js``) that reports
one JSON object per line. Interop in both directions with confluent-kafka.

kafkajs implements the protocol itself (no librdkafka), only in non-flexible versions,
and its consumers read ``read_committed`` by default. ``make install`` puts Node.js and
the pinned kafkajs (``tests/js/package-lock.json``) on the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from client_helpers import (
    CLIENT_TIMEOUT_S,
    admin_client,
    consume_exactly,
    create_topic,
    produce_and_flush,
    producer_config,
    unique_group_id,
)
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_wire import KafkaConnection, decode_batches, fetch_request, only_partition

NODE = shutil.which("node")
JS_DIRECTORY = Path(__file__).parents[1] / "js"
CLIENT_SCRIPT = JS_DIRECTORY / "kafkajs_client.js"
KAFKAJS_INSTALLED = (JS_DIRECTORY / "node_modules" / "kafkajs" / "package.json").is_file()
pytestmark = pytest.mark.skipif(
    NODE is None or not KAFKAJS_INSTALLED,
    reason="Node.js or kafkajs is missing: run `make install` (npm ci in tests/js)",
)

NODE_RUN_TIMEOUT_S = 90.0
"""A kafkajs run retries for a few seconds at most; this bounds a hung one."""
GZIP_CODEC = 1


@pytest.fixture(scope="module")
def broker(fast_groups_broker: BrokerProcess) -> BrokerProcess:
    return fast_groups_broker


class KafkajsFailedError(AssertionError):
    pass


def kafkajs(command: str, **arguments: Any) -> list[dict[str, Any]]:
    """Run one kafkajs command to its end; its events, in order. Raises with the
    client's error event and stderr if the run failed."""
    assert NODE is not None
    completed = subprocess.run(
        [NODE, str(CLIENT_SCRIPT), command, json.dumps(arguments)],
        capture_output=True,
        text=True,
        timeout=NODE_RUN_TIMEOUT_S,
        check=False,
        env={**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"},
    )
    events = [json.loads(line) for line in completed.stdout.splitlines() if line.strip()]
    if completed.returncode != 0:
        raise KafkajsFailedError(
            f"kafkajs {command} exited {completed.returncode}: {events[-1:]}\n"
            f"{completed.stderr[-4000:]}"
        )
    return events


def admin_results(bootstrap: str, *operations: tuple[str, Any]) -> list[Any]:
    events = kafkajs(
        "admin",
        bootstrap=bootstrap,
        operations=[{"op": op, "args": args} for op, args in operations],
    )
    assert [e["op"] for e in events] == [op for op, _ in operations]
    return [e["result"] for e in events]


def of_kind(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == kind]


def confluent_committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=CLIENT_TIMEOUT_S
        )
    finally:
        consumer.close()
    return [tp.offset for tp in committed]


# ── kafkajs produces, confluent-kafka consumes ─────────────────────────────────────────


@pytest.mark.parametrize("acks", [-1, 1, 0])
def test_keys_values_and_headers_produced_by_kafkajs_reach_confluent_kafka(broker, topic, acks):
    messages = [
        {"key": f"key-{i}", "value": f"value-{i}", "partition": 0, "headers": {"n": str(i)}}
        for i in range(20)
    ]
    (sent,) = of_kind(
        kafkajs("produce", bootstrap=broker.bootstrap, topic=topic, acks=acks, messages=messages),
        "sent",
    )
    if acks != 0:  # acks=0 gets no response, so no offsets
        assert sent["results"] == [{"partition": 0, "baseOffset": 0, "errorCode": 0}]

    received = consume_exactly(broker.bootstrap, [(topic, 0)], 20, extra_wait_s=0.5)
    assert [(m.offset(), m.key(), m.value(), m.headers()) for m in received] == [
        (i, f"key-{i}".encode(), f"value-{i}".encode(), [("n", str(i).encode())]) for i in range(20)
    ]


def test_a_gzip_batch_from_kafkajs_is_stored_compressed_and_read_back_whole(broker, topic):
    values = [f"gzip message {i} " + "x" * 100 for i in range(200)]
    kafkajs(
        "produce",
        bootstrap=broker.bootstrap,
        topic=topic,
        compression="gzip",
        messages=[{"value": v, "partition": 0} for v in values],
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        stored = only_partition(connection.request(fetch_request(topic, 0, 0)))
    batches = decode_batches(stored.records)
    assert [(b.compression, b.records_count, b.crc_ok) for b in batches] == [
        (GZIP_CODEC, 200, True)
    ], "kafkajs sends one gzip batch; the broker stores it as sent"
    received = consume_exactly(broker.bootstrap, [(topic, 0)], 200)
    assert [m.value().decode() for m in received] == values


def test_keyed_messages_from_kafkajs_land_where_the_java_partitioner_puts_them(broker, topic):
    """kafkajs's default partitioner is Kafka's murmur2; librdkafka's murmur2_random is
    the same function, so both clients agree on a key's partition through Sluice's
    metadata."""
    create_topic(broker.bootstrap, topic, num_partitions=4)
    keys = [f"customer-{i}" for i in range(40)]
    kafkajs(
        "produce",
        bootstrap=broker.bootstrap,
        topic=topic,
        messages=[{"key": k, "value": "from-kafkajs"} for k in keys],
    )
    producer = Producer(producer_config(broker.bootstrap, partitioner="murmur2_random"))
    delivered = produce_and_flush(
        producer, topic, [{"key": k, "value": b"from-confluent"} for k in keys]
    )

    received = consume_exactly(broker.bootstrap, [(topic, p) for p in range(4)], 80)
    by_origin: dict[bytes, dict[bytes, int]] = {}
    for message in received:
        by_origin.setdefault(message.value(), {})[message.key()] = message.partition()
    assert by_origin[b"from-kafkajs"] == {d.key: d.partition for d in delivered}
    assert len(set(by_origin[b"from-kafkajs"].values())) > 1, "all keys on one partition"


# ── confluent-kafka produces, a kafkajs group consumes ─────────────────────────────────


@pytest.mark.parametrize(
    "read_uncommitted", [False, True], ids=["read_committed", "read_uncommitted"]
)
def test_a_kafkajs_group_reads_confluent_kafka_messages_commits_and_resumes_there(
    broker, topic, read_uncommitted
):
    """kafkajs consumers default to read_committed: without transactions Sluice's last
    stable offset is the high watermark, so both isolation levels see every message."""
    partitions = 3
    create_topic(broker.bootstrap, topic, num_partitions=partitions)
    producer = Producer(producer_config(broker.bootstrap, acks="all"))

    def produce(tag: str, count: int) -> dict[tuple[int, int], tuple[str, str, dict]]:
        delivered = produce_and_flush(
            producer,
            topic,
            [
                {
                    "partition": i % partitions,
                    "key": f"{tag}-key-{i}",
                    "value": f"{tag}-{i}",
                    "headers": [("origin", b"confluent")],
                }
                for i in range(count)
            ],
        )
        return {
            (d.partition, d.offset): (d.key.decode(), d.value.decode(), {"origin": "confluent"})
            for d in delivered
            if d.key is not None and d.value is not None
        }

    def consume_in_group(count: int) -> list[dict[str, Any]]:
        return kafkajs(
            "consume",
            bootstrap=broker.bootstrap,
            topic=topic,
            group=group,
            count=count,
            readUncommitted=read_uncommitted,
        )

    group = unique_group_id()
    first = produce("first", 60)
    events = consume_in_group(60)
    (joined,) = of_kind(events, "joined")
    assert joined["isLeader"] and sorted(joined["assignment"][topic]) == list(range(partitions))
    got = {
        (m["partition"], m["offset"]): (m["key"], m["value"], m["headers"])
        for m in of_kind(events, "message")
    }
    assert got == first
    (committed,) = of_kind(events, "committed")
    assert committed["offsets"] == {str(p): 20 for p in range(partitions)}
    assert confluent_committed(broker.bootstrap, group, topic, partitions) == [20] * partitions

    second = produce("second", 30)
    events = consume_in_group(30)
    got = {
        (m["partition"], m["offset"]): (m["key"], m["value"], m["headers"])
        for m in of_kind(events, "message")
    }
    assert got == second, "a new member of the group must resume at the committed offsets"
    assert confluent_committed(broker.bootstrap, group, topic, partitions) == [30] * partitions


# ── admin ──────────────────────────────────────────────────────────────────────────────


def test_kafkajs_admin_creates_grows_describes_lists_offsets_of_and_deletes_a_topic(broker, topic):
    created, already, _grown = admin_results(
        broker.bootstrap,
        (
            "createTopics",
            {
                "topics": [
                    {
                        "topic": topic,
                        "numPartitions": 2,
                        "configEntries": [{"name": "retention.ms", "value": "3600000"}],
                    }
                ],
                "waitForLeaders": True,
            },
        ),
        ("createTopics", {"topics": [{"topic": topic, "numPartitions": 2}]}),
        ("createPartitions", {"topicPartitions": [{"topic": topic, "count": 4}]}),
    )
    assert (created, already) == (True, False), "createTopics says whether it created"
    metadata = admin_client(broker.bootstrap).list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2, 3]

    producer = Producer(producer_config(broker.bootstrap, acks="all"))
    produce_and_flush(producer, topic, [{"partition": p, "value": b"v"} for p in (0, 3, 3)])
    offsets, described, listed = admin_results(
        broker.bootstrap,
        ("fetchTopicOffsets", topic),
        (
            "describeConfigs",
            {
                "resources": [{"type": 2, "name": topic, "configNames": ["retention.ms"]}],
                "includeSynonyms": False,
            },
        ),
        ("listTopics", None),
    )
    assert sorted((o["partition"], o["low"], o["high"]) for o in offsets) == [
        (0, "0", "1"),
        (1, "0", "0"),
        (2, "0", "0"),
        (3, "0", "2"),
    ]
    (resource,) = described["resources"]
    assert resource["errorCode"] == 0
    assert [
        (c["configName"], c["configValue"], c["isDefault"]) for c in resource["configEntries"]
    ] == [("retention.ms", "3600000", False)]
    assert topic in listed

    (_deleted, remaining) = admin_results(
        broker.bootstrap, ("deleteTopics", {"topics": [topic]}), ("listTopics", None)
    )
    assert topic not in remaining
    metadata = admin_client(broker.bootstrap).list_topics(timeout=CLIENT_TIMEOUT_S)
    assert topic not in metadata.topics


def test_kafkajs_admin_fetches_offsets_a_confluent_kafka_member_committed(broker, topic):
    """(kafkajs shows Kafka's empty metadata as null.)"""
    create_topic(broker.bootstrap, topic, num_partitions=2)
    group = unique_group_id()
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committer.commit(
            offsets=[TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 11)],
            asynchronous=False,
        )
    finally:
        committer.close()
    (fetched,) = admin_results(
        broker.bootstrap, ("fetchOffsets", {"groupId": group, "topics": [topic]})
    )
    assert fetched == [
        {
            "topic": topic,
            "partitions": [
                {"partition": 0, "offset": "7", "metadata": None},
                {"partition": 1, "offset": "11", "metadata": None},
            ],
        }
    ]


def test_kafkajs_transactions_commit_and_abort_for_read_committed_readers(broker, topic):
    """A kafkajs transactional producer (AddPartitionsToTxn, EndTxn at its versions): a
    kafkajs consumer (read_committed by default) and confluent-kafka see the committed
    transactions only, in order."""
    create_topic(broker.bootstrap, topic, num_partitions=2)

    def planned(tag: str, commit: bool) -> dict[str, Any]:
        return {
            "commit": commit,
            "messages": [{"value": f"{tag}-{i}", "partition": i % 2} for i in range(4)],
        }

    events = kafkajs(
        "transaction",
        bootstrap=broker.bootstrap,
        topic=topic,
        transactionalId=f"kafkajs-{topic}",
        transactions=[planned("c1", True), planned("a1", False), planned("c2", True)],
    )
    assert [e["event"] for e in events] == ["committed", "aborted", "committed"]
    want = sorted(f"{tag}-{i}" for tag in ("c1", "c2") for i in range(4))
    read = kafkajs(
        "consume", bootstrap=broker.bootstrap, topic=topic, group=unique_group_id(), count=8
    )
    assert sorted(e["value"] for e in of_kind(read, "message")) == want
    messages = consume_exactly(broker.bootstrap, [(topic, 0), (topic, 1)], 8, extra_wait_s=0.5)
    assert sorted(m.value().decode() for m in messages) == want
