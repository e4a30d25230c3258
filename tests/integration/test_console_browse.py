"""The console's newer pages against a real broker, as a user reaches them: the message
browser over every partition of a topic with a filter (substring or regular expression,
bounded pages linked on), a topic's consuming groups (a real confluent-kafka consumer in
a group), each broker's disk use, and the sampled history surviving a restart of the
console (``--history-dir``)."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from client_helpers import consumer_config, unique_group_id, unique_topic_name, wait_until
from confluent_kafka import Consumer as KafkaConsumer
from console_process import ConsoleProcess, console_broker, rows, running_console

from sluice.client.admin import NewTopic
from sluice.console.history_file import FILE_NAME
from sluice.sync import Admin, Producer

pytestmark = pytest.mark.integration

SAMPLE_INTERVAL_S = "0.5"
WAIT_S = 60.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with console_broker(
        tmp_path_factory.mktemp("console-browse-broker"), {"group.initial.rebalance.delay.ms": "0"}
    ) as process:
        yield process


@pytest.fixture(scope="module")
def console(broker: BrokerProcess) -> Iterator[ConsoleProcess]:
    with running_console(broker.bootstrap, "--interval", SAMPLE_INTERVAL_S) as process:
        yield process


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[Admin]:
    with Admin(broker.bootstrap) as opened:
        yield opened


@pytest.fixture(scope="module")
def producer(broker: BrokerProcess) -> Iterator[Producer]:
    with Producer(broker.bootstrap, linger_ms=0) as opened:
        yield opened


def _new_topic(admin: Admin, partitions: int) -> str:
    name = unique_topic_name("browse")
    admin.create_topics([NewTopic(name, partitions=partitions)])
    return name


def _next_link(page: str) -> str | None:
    found = re.search(r'id="next-page" href="([^"]+)"', page)
    return None if found is None else html.unescape(found.group(1))


def test_browser_reads_every_partition_in_time_order_and_filters(
    console: ConsoleProcess, admin: Admin, producer: Producer
) -> None:
    topic = _new_topic(admin, partitions=3)
    base_ms = 1_700_000_000_000
    for index in range(12):  # partition index % 3, times in order across partitions
        value = json.dumps({"n": index, "kind": "refund" if index % 4 == 0 else "sale"})
        producer.send_and_wait(
            topic,
            value.encode(),
            key=f"user-{index}".encode(),
            partition=index % 3,
            timestamp_ms=base_ms + index * 1000,
        )
    newest = rows(console.get(f"/topics/{topic}/messages?limit=5").text, "messages")
    assert [(row[0], row[1]) for row in newest] == [
        ("1", "2"),
        ("2", "2"),
        ("0", "3"),
        ("1", "3"),
        ("2", "3"),
    ]  # the newest five of all partitions, oldest first
    page = console.get(f"/topics/{topic}/messages?partition=all&offset=0&limit=4&q=REFUND")
    assert page.status == 200
    shown = rows(page.text, "messages")
    assert [json.loads(row[5])["n"] for row in shown] == [0, 4, 8]  # case-insensitive
    by_key = console.get(
        f"/topics/{topic}/messages?offset=0&limit=3&q=user-1%5B01%5D%24&match=regex&search=key"
    )
    assert [row[3] for row in rows(by_key.text, "messages")] == ["user-10", "user-11"]
    # Pages of two across all partitions, followed by their links, show each record once.
    seen: list[int] = []
    link: str | None = f"/topics/{topic}/messages?offset=0&limit=2&q=sale"
    for _ in range(10):  # bounded: 9 sales in pages of 2
        if link is None:
            break
        seen += [json.loads(row[5])["n"] for row in rows(console.get(link).text, "messages")]
        link = _next_link(console.get(link).text)
    assert seen == [i for i in range(12) if i % 4 != 0]
    from_time = console.get(f"/topics/{topic}/messages?timestamp={base_ms + 9500}&limit=10")
    assert [row[1] for row in rows(from_time.text, "messages")] == ["3", "3"]  # 10 and 11


def test_a_bad_filter_is_a_400_saying_why(console: ConsoleProcess, admin: Admin) -> None:
    topic = _new_topic(admin, partitions=1)
    bad = console.get(f"/topics/{topic}/messages?q=%28unclosed&match=regex")
    assert bad.status == 400
    assert "is not valid" in bad.text
    too_long = console.get(f"/topics/{topic}/messages?q={'x' * 201}")
    assert too_long.status == 400
    assert "at most 200" in too_long.text
    positions = console.get(f"/topics/{topic}/messages?positions=7:0")
    assert positions.status == 400


def test_topic_page_lists_the_groups_consuming_it(
    console: ConsoleProcess, admin: Admin, broker: BrokerProcess, producer: Producer
) -> None:
    topic = _new_topic(admin, partitions=2)
    for index in range(4):
        producer.send_and_wait(topic, b"x", partition=index % 2)
    group = unique_group_id()
    consumer = KafkaConsumer(
        consumer_config(broker.bootstrap, **{"group.id": group, "auto.offset.reset": "earliest"})
    )
    try:
        consumer.subscribe([topic])
        wait_until(
            lambda: consumer.poll(0.2) is not None or bool(consumer.assignment()),
            "the consumer is assigned",
            WAIT_S,
        )

        def listed() -> bool:
            found = rows(console.get(f"/topics/{topic}").text, "topic-consumers")
            return [group, "classic", "Stable", "1", "1"] in [row[:5] for row in found]

        wait_until(listed, "the topic page lists the group", WAIT_S)
    finally:
        consumer.close()


def test_cluster_page_shows_each_brokers_disk_use(
    console: ConsoleProcess, admin: Admin, producer: Producer, broker: BrokerProcess
) -> None:
    topic = _new_topic(admin, partitions=1)
    producer.send_and_wait(topic, b"v" * 10_000, partition=0)
    brokers = rows(console.get("/").text, "brokers")
    assert brokers[0][1] == broker.bootstrap
    used, free, status = brokers[0][5], brokers[0][6], brokers[0][7]
    assert re.fullmatch(r"\d+\.\d (KiB|MiB|GiB)", used), used
    assert " of " in free
    assert status == "up"


def _chart_has_data(page: str) -> bool:
    return "no data yet" not in page and "<polyline" in page


def test_history_survives_a_console_restart(
    broker: BrokerProcess, admin: Admin, producer: Producer, tmp_path: Path
) -> None:
    topic = _new_topic(admin, partitions=1)
    history = tmp_path / "history"
    with running_console(
        broker.bootstrap, "--interval", SAMPLE_INTERVAL_S, "--history-dir", str(history)
    ) as first:
        for _ in range(3):
            producer.send_and_wait(topic, b"x", partition=0)
        wait_until(
            lambda: _chart_has_data(first.get(f"/topics/{topic}").text),
            "the first console charts the rate",
            WAIT_S,
        )
    saved = json.loads((history / FILE_NAME).read_text())  # written when it stopped
    assert len(saved["topic_rates"][topic]) >= 2
    # A console sampling once an hour has one sample of its own: no rate without history.
    with running_console(
        broker.bootstrap, "--interval", "3600", "--history-dir", str(history)
    ) as second:
        wait_until(
            lambda: "last sample" in second.get("/").text, "the second console samples", WAIT_S
        )
        assert _chart_has_data(second.get(f"/topics/{topic}").text)
