"""Tag-filtered views with unmodified clients: a view created with CreateTopics configs,
consumed by confluent-kafka, kafka-python, kcat and kafkajs (groups with commits and
lag), offsets that are the source's (a consumer moves between source and view by
offset; offsets-for-times agree), produce refused, bad filters refused pointing at the
problem, and the source protected while views use it."""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from client_helpers import (
    CLIENT_TIMEOUT_S,
    admin_client,
    consumer_config,
    produce_and_flush,
    producer_config,
)
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import ConfigResource, NewTopic
from kafka import KafkaConsumer
from readme_blocks import README_ADDRESS, blocks, sluice_shell_environment
from test_kafkajs import KAFKAJS_INSTALLED, NODE, kafkajs

PARTITIONS = 3
COLOURS = ["red", "blue", "green", "red", "blue"]
RECORDS = 60


@pytest.fixture(scope="module")
def broker(fast_groups_broker: BrokerProcess) -> BrokerProcess:
    return fast_groups_broker


@pytest.fixture
def source(broker: BrokerProcess) -> Iterator[tuple[str, dict[int, list[tuple[int, bytes, str]]]]]:
    """A source topic with RECORDS tagged records, and what each partition holds:
    (offset, value, colour)."""
    name = f"orders-{uuid.uuid4().hex[:8]}"
    admin = admin_client(broker.bootstrap)
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(CLIENT_TIMEOUT_S)
    producer = Producer(producer_config(broker.bootstrap, **{"linger.ms": 20}))
    delivered = produce_and_flush(
        producer,
        name,
        [
            {
                "value": b"order-%d" % i,
                "partition": i % PARTITIONS,
                "headers": [("x-sluice-tag", COLOURS[i % len(COLOURS)].encode()), ("n", b"%d" % i)],
            }
            for i in range(RECORDS)
        ],
    )
    held: dict[int, list[tuple[int, bytes, str]]] = {p: [] for p in range(PARTITIONS)}
    for i, d in enumerate(delivered):
        held[d.partition].append((d.offset, d.value or b"", COLOURS[i % len(COLOURS)]))
    yield name, held


def create_view(broker: BrokerProcess, name: str, source: str, text: str) -> None:
    admin = admin_client(broker.bootstrap)
    config = {"sluice.view.source": source, "sluice.view.filter": text}
    admin.create_topics([NewTopic(name, -1, -1, config=config)])[name].result(CLIENT_TIMEOUT_S)


def expected(
    held: dict[int, list[tuple[int, bytes, str]]], colours: set[str]
) -> set[tuple[int, int, bytes]]:
    return {(p, o, v) for p, rows in held.items() for o, v, c in rows if c in colours}


def test_a_view_shows_the_matching_records_at_their_source_offsets_to_a_group(
    broker: BrokerProcess, source: tuple[str, dict[int, list[tuple[int, bytes, str]]]]
) -> None:
    name, held = source
    view = f"red-{name}"
    create_view(broker, view, name, "tag = 'red'")
    metadata = admin_client(broker.bootstrap).list_topics(view, timeout=CLIENT_TIMEOUT_S)
    assert len(metadata.topics[view].partitions) == PARTITIONS
    group = f"view-readers-{uuid.uuid4().hex[:6]}"
    consumer = Consumer(
        consumer_config(broker.bootstrap, **{"group.id": group, "auto.offset.reset": "earliest"})
    )
    consumer.subscribe([view])
    want = expected(held, {"red"})
    got: set[tuple[int, int, bytes]] = set()
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while len(got) < len(want):
            assert time.monotonic() < deadline, f"got {len(got)} of {len(want)}"
            for message in consumer.consume(100, 0.2):
                assert message.error() is None, message.error()
                assert dict(message.headers())["x-sluice-tag"] == b"red"
                got.add((message.partition(), message.offset(), message.value()))
        # Committed where the source ends: no lag on the view.
        ends = [
            consumer.get_watermark_offsets(TopicPartition(view, p), CLIENT_TIMEOUT_S)[1]
            for p in range(PARTITIONS)
        ]
        assert ends == [len(held[p]) for p in range(PARTITIONS)]
        positions = consumer.position([TopicPartition(view, p) for p in range(PARTITIONS)])
        assert [tp.offset for tp in positions] == ends
        consumer.commit(offsets=positions, asynchronous=False)
    finally:
        consumer.close()
    assert got == want
    admin = admin_client(broker.bootstrap)
    (result,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    committed = {tp.partition: tp.offset for tp in result.result(CLIENT_TIMEOUT_S).topic_partitions}
    assert committed == dict(enumerate(ends))


def test_other_clients_read_the_view(
    broker: BrokerProcess, source: tuple[str, dict[int, list[tuple[int, bytes, str]]]]
) -> None:
    name, held = source
    view = f"warm-{name}"
    create_view(broker, view, name, "tag in ('red', 'green') and not header.n = '0'")
    want = expected(held, {"red", "green"}) - {(0, 0, b"order-0")}
    reader = KafkaConsumer(
        view,
        bootstrap_servers=broker.bootstrap,
        group_id=f"kp-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    got = set()
    for message in reader:
        got.add((message.partition, message.offset, message.value))
        if len(got) == len(want):
            break
    reader.close()
    assert got == want
    kcat = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-C", "-t", view, "-e", "-f", "%p %o %s\\n"],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        check=True,
    )
    rows = {tuple(line.split()) for line in kcat.stdout.splitlines()}
    assert rows == {(str(p), str(o), v.decode()) for p, o, v in want}
    if NODE is not None and KAFKAJS_INSTALLED:
        events = kafkajs(
            "consume",
            bootstrap=broker.bootstrap,
            topic=view,
            group=f"js-{uuid.uuid4().hex[:6]}",
            count=len(want),
            timeoutMs=int(CLIENT_TIMEOUT_S * 1000),
        )
        js = {
            (e["partition"], int(e["offset"]), e["value"].encode())
            for e in events
            if e["event"] == "message"
        }
        assert js == want


def test_offsets_mean_the_same_on_source_and_view(
    broker: BrokerProcess, source: tuple[str, dict[int, list[tuple[int, bytes, str]]]]
) -> None:
    name, held = source
    view = f"blue-{name}"
    create_view(broker, view, name, "tag = 'blue'")
    rows = held[1]
    blue_offsets = [o for o, _, c in rows if c == "blue"]
    red_offset = next(o for o, _, c in rows if c == "red")
    consumer = Consumer(consumer_config(broker.bootstrap))
    try:
        # Seek the view to a red record's offset: the next blue one comes.
        consumer.assign([TopicPartition(view, 1, red_offset)])
        first = next_message(consumer)
        assert first.offset() == min(o for o in blue_offsets if o >= red_offset)
        # The same offset in the source is the same record.
        consumer.assign([TopicPartition(name, 1, first.offset())])
        same = next_message(consumer)
        assert (same.offset(), same.value()) == (first.offset(), first.value())
        # Offsets for a time agree.
        source_times = consumer.offsets_for_times([TopicPartition(name, 1, 0)], CLIENT_TIMEOUT_S)
        view_times = consumer.offsets_for_times([TopicPartition(view, 1, 0)], CLIENT_TIMEOUT_S)
        assert source_times[0].offset == view_times[0].offset == 0
    finally:
        consumer.close()


def next_message(consumer: Consumer) -> Any:
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None:
            assert message.error() is None, message.error()
            return message
    raise AssertionError("no message came")


def test_producing_to_a_view_is_refused(
    broker: BrokerProcess, source: tuple[str, dict[int, list[tuple[int, bytes, str]]]]
) -> None:
    name, _ = source
    view = f"ro-{name}"
    create_view(broker, view, name, "tag = 'red'")
    producer = Producer(producer_config(broker.bootstrap, retries=0))
    errors: list[KafkaError] = []
    producer.produce(view, b"x", partition=0, on_delivery=lambda e, m: errors.append(e))
    producer.flush(CLIENT_TIMEOUT_S)
    assert errors[0] is not None and errors[0].code() == KafkaError.TOPIC_EXCEPTION


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"sluice.view.filter": "tag = red"},
            "expected a string in quotes, found 'red' at position 7",
        ),
        ({"sluice.view.filter": "colour = 'red'"}, "unknown field 'colour'"),
        ({}, "needs sluice.view.filter"),
    ],
)
def test_a_bad_view_is_refused_with_a_message_pointing_at_it(
    broker: BrokerProcess,
    source: tuple[str, dict[int, list[tuple[int, bytes, str]]]],
    config: dict[str, str],
    message: str,
) -> None:
    name, _ = source
    admin = admin_client(broker.bootstrap)
    futures = admin.create_topics(
        [NewTopic(f"bad-{name}", -1, -1, config={"sluice.view.source": name, **config})]
    )
    with pytest.raises(KafkaException) as caught:
        futures[f"bad-{name}"].result(CLIENT_TIMEOUT_S)
    error = caught.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert message in error.str()


def test_a_source_with_views_is_kept_and_a_filter_can_change(
    broker: BrokerProcess, source: tuple[str, dict[int, list[tuple[int, bytes, str]]]]
) -> None:
    name, held = source
    view = f"any-{name}"
    create_view(broker, view, name, "tag = 'red'")
    admin = admin_client(broker.bootstrap)
    with pytest.raises(KafkaException) as refused:
        admin.delete_topics([name])[name].result(CLIENT_TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.POLICY_VIOLATION
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        view,
        set_config={"sluice.view.source": name, "sluice.view.filter": "tag = 'green'"},
    )
    admin.alter_configs([resource])[resource].result(CLIENT_TIMEOUT_S)
    consumer = Consumer(consumer_config(broker.bootstrap))
    consumer.assign([TopicPartition(view, p, 0) for p in range(PARTITIONS)])
    want = expected(held, {"green"})
    got = set()
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while len(got) < len(want):
            assert time.monotonic() < deadline
            got.update(
                (m.partition(), m.offset(), m.value())
                for m in consumer.consume(100, 0.2)
                if m.error() is None
            )
    finally:
        consumer.close()
    assert got == want
    admin.delete_topics([view])[view].result(CLIENT_TIMEOUT_S)
    admin.delete_topics([name])[name].result(CLIENT_TIMEOUT_S)


def test_the_readme_example_runs(broker: BrokerProcess, tmp_path: Path) -> None:
    (block,) = blocks("sh", "Tag-filtered views")
    suffix = uuid.uuid4().hex[:6]
    block = block.replace(README_ADDRESS, broker.bootstrap)
    block = re.sub(r"(?<![\w-])(red-purchases|purchases)(?![\w-])", rf"\1-{suffix}", block)
    env = {**os.environ, **sluice_shell_environment(tmp_path, broker.bootstrap)}
    done = subprocess.run(
        ["sh", "-e"], input=block, capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "purchase 1", done.stdout
