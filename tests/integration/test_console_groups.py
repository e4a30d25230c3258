"""The console's groups pages against a real broker and real confluent-kafka consumers:
a group that consumes and never commits shows its lag as unknown (–), never 0, and
bookkeeping groups (Spark's exactly-once progress) are hidden from the list unless
asked for, then marked, and show no lag on their page."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess
from client_helpers import unique_group_id, wait_until
from console_process import ConsoleProcess, console_broker, rows, running_console
from lag_helpers import NeverCommits, topic_with_records

from sluice.client.groups import OffsetAndMetadata
from sluice.common.bookkeeping_groups import BOOKKEEPING_METADATA, SPARK_GROUP_PREFIX
from sluice.common.ids import TopicPartition
from sluice.sync import Admin


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with console_broker(
        tmp_path_factory.mktemp("console-groups"), {"group.initial.rebalance.delay.ms": "0"}
    ) as process:
        yield process


@pytest.fixture(scope="module")
def console(broker: BrokerProcess) -> Iterator[ConsoleProcess]:
    with running_console(broker.bootstrap, "--interval", "0.2") as process:
        yield process


def test_a_group_that_never_commits_shows_an_unknown_lag(
    broker: BrokerProcess, console: ConsoleProcess
) -> None:
    topic = topic_with_records(broker)
    group = unique_group_id()
    consumer = NeverCommits(broker, group, topic, 2)
    try:
        page = console.get(f"/groups/{group}")
        assert page.status == 200
        assert rows(page.text, "lag") == [
            [topic, "0", "–", "10", "–"],
            [topic, "1", "–", "10", "–"],
        ]
        assert re.search(r'<dd id="total-lag">–</dd>', page.text)
        assert 'id="unknown-lag"' in page.text

        def listed_as_unknown() -> bool:
            listed = {row[0]: row for row in rows(console.get("/groups").text, "groups")}
            return group in listed and listed[group][4] == "–"

        wait_until(listed_as_unknown, "the group listed with an unknown lag")

        consumer.commit(topic, {0: 10})
        page = console.get(f"/groups/{group}")
        assert rows(page.text, "lag") == [
            [topic, "0", "10", "10", "0"],
            [topic, "1", "–", "10", "–"],
        ]
        assert re.search(r'<dd id="total-lag">0</dd>', page.text)
    finally:
        consumer.close()


def test_bookkeeping_groups_are_hidden_until_asked_for(
    broker: BrokerProcess, console: ConsoleProcess
) -> None:
    topic = topic_with_records(broker)
    spark_group = f"{SPARK_GROUP_PREFIX}{unique_group_id()}-0"
    marked_group = f"{unique_group_id()}-progress"
    partition = TopicPartition(topic, 0)
    with Admin(broker.bootstrap) as admin:
        admin.alter_group_offsets(spark_group, {partition: OffsetAndMetadata(3)})
        admin.alter_group_offsets(
            marked_group, {partition: OffsetAndMetadata(3, metadata=BOOKKEEPING_METADATA)}
        )

    def hidden() -> bool:
        page = console.get("/groups").text
        names = [row[0] for row in rows(page, "groups")]
        return spark_group not in names and marked_group not in names and "show-all" in page

    wait_until(hidden, "the bookkeeping groups hidden from the list")
    every = {row[0] for row in rows(console.get("/groups?all=1").text, "groups")}
    assert f"{spark_group} (bookkeeping)" in every
    assert f"{marked_group} (bookkeeping)" in every
    for group in (spark_group, marked_group):
        page = console.get(f"/groups/{group}")
        assert 'id="bookkeeping"' in page.text
        assert rows(page.text, "lag") == [["No committed offsets."]]
        assert re.search(r'<dd id="total-lag">–</dd>', page.text)


def test_a_group_with_offsets_in_a_deleted_topic_still_has_its_page(
    broker: BrokerProcess, console: ConsoleProcess
) -> None:
    kept, deleted = topic_with_records(broker), topic_with_records(broker)
    group = unique_group_id()
    with Admin(broker.bootstrap) as admin:
        admin.alter_group_offsets(
            group,
            {
                TopicPartition(kept, 0): OffsetAndMetadata(4),
                TopicPartition(deleted, 0): OffsetAndMetadata(4),
            },
        )
        admin.delete_topics([deleted])
    page = console.get(f"/groups/{group}")
    assert page.status == 200, page.text
    assert rows(page.text, "lag") == [[kept, "0", "4", "10", "6"]]
