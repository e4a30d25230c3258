"""``sluice top`` and the sampler behind it against a real broker, with real
confluent-kafka consumers: a group that consumes and never commits shows an unknown lag
(never 0), a committing group its lag, consume rate and trend, bookkeeping groups stay
hidden unless asked for, rows sort by rate, lag or name, narrow terminals drop columns,
and a topic deleted while ``top`` runs leaves the table without stopping it.

Every wait polls a condition with a deadline; the churn of topics is bounded.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from client_helpers import create_topic, unique_group_id, unique_topic_name, wait_until
from lag_helpers import NeverCommits, topic_with_records
from rich.console import Console
from rich.table import Table

from sluice.cli.console import SortKey, TopView, top_refresh, top_renderables, top_tables
from sluice.client.admin_api import Admin
from sluice.client.groups import OffsetAndMetadata
from sluice.common.bookkeeping_groups import SPARK_GROUP_PREFIX
from sluice.common.ids import TopicPartition
from sluice.console.sampler import Sampler
from sluice.sync import Admin as SyncAdmin

TOPIC_CHURN_CYCLES = 20
"""Topics created and deleted while ``top`` runs (bounded)."""
STOP_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def broker(fast_groups_broker: BrokerProcess) -> BrokerProcess:
    return fast_groups_broker


def _cells(table: Table, name: str) -> dict[str, str]:
    """The row of ``table`` whose first cell starts with ``name``, by column header."""
    columns = table.columns
    for index, first in enumerate(columns[0].cells):
        if str(first).startswith(name):
            return {str(column.header): str(list(column.cells)[index]) for column in columns}
    raise AssertionError(f"no row {name!r} in {table.title}")


def _names(table: Table) -> list[str]:
    return [str(cell) for cell in table.columns[0].cells]


def test_lag_is_unknown_without_commits_and_known_rates_and_trends_with_them(
    broker: BrokerProcess,
) -> None:
    topic = topic_with_records(broker)
    silent_group, committing_group = unique_group_id(), unique_group_id()
    spark_group = f"{SPARK_GROUP_PREFIX}{unique_group_id()}-0"
    silent = NeverCommits(broker, silent_group, topic, 2)
    try:

        async def scenario() -> None:
            async with Admin(broker.bootstrap) as admin:
                await admin.alter_group_offsets(
                    committing_group, {TopicPartition(topic, 0): OffsetAndMetadata(2)}
                )
                await admin.alter_group_offsets(
                    spark_group, {TopicPartition(topic, 0): OffsetAndMetadata(1)}
                )
                times = iter([99.0, 100.0, 102.0, 104.0])  # created, three samples
                sampler = Sampler(admin, clock=lambda: next(times))
                await sampler.sample_once()
                await admin.alter_group_offsets(
                    committing_group, {TopicPartition(topic, 0): OffsetAndMetadata(8)}
                )
                await sampler.sample_once()

                history = sampler.group(silent_group)
                assert history is not None
                assert [lag.lag for lag in history.lag.values()] == [None, None]
                assert (history.total, history.unknown_partitions) == (None, 2)
                assert list(history.total_lag) == []

                topics, groups = top_tables(sampler, width=120)
                assert _cells(groups, silent_group)["lag"] == "–"
                assert _cells(groups, silent_group)["read/s"] == "–"
                assert _cells(groups, silent_group)["worst partition"] == "–"
                committing = _cells(groups, committing_group)
                assert committing["lag"] == "2"  # 10 produced − 8 committed
                assert committing["trend"] == "↓6"  # from 8 to 2
                assert committing["read/s"] == "3.0"  # 6 records past in 2 s
                assert committing["worst partition"] == f"{topic}-0 (2)"
                assert not any(name.startswith(spark_group) for name in _names(groups))
                assert topic in _names(topics)

                _, every = top_tables(sampler, show_all=True)
                assert f"{spark_group} (bookkeeping)" in _names(every)
                assert _cells(every, spark_group)["lag"] == "–"

                _, by_lag = top_tables(sampler, sort=SortKey.LAG)
                names = _names(by_lag)
                assert names.index(committing_group) < names.index(silent_group)

                narrow_topics, narrow_groups = top_tables(sampler, width=60)
                assert [str(c.header) for c in narrow_groups.columns] == [
                    "group",
                    "read/s",
                    "lag",
                    "trend",
                ]
                assert [str(c.header) for c in narrow_topics.columns] == ["topic", "records/s"]
                rendered = Console(width=60, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
                rendered.print(narrow_groups)
                assert max(len(line) for line in rendered.export_text().splitlines()) <= 60

                header = await top_refresh(admin, sampler)
                first_line = top_renderables(header, sampler, TopView(SortKey.NAME, False), 80)[0]
                assert header.error is None and "1 broker(s)" in str(first_line)
                assert str(first_line).startswith("cluster ")

        asyncio.run(scenario())
    finally:
        silent.close()


def test_a_topic_deleted_between_listing_and_end_offsets_leaves_the_sample(
    broker: BrokerProcess,
) -> None:
    kept, deleted = topic_with_records(broker), topic_with_records(broker)

    async def scenario() -> None:
        async with Admin(broker.bootstrap) as admin:
            sampler = Sampler(admin)
            await sampler.sample_once()
            assert deleted in sampler.topics
            await admin.delete_topics([deleted])
            found = await sampler.latest_offsets(
                [TopicPartition(kept, 0), TopicPartition(deleted, 0), TopicPartition(deleted, 1)]
            )
            assert found.keys() == {TopicPartition(kept, 0)}
            assert deleted not in sampler.topics and kept in sampler.topics

    asyncio.run(scenario())


@pytest.fixture
def top_process(
    broker: BrokerProcess, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    output = tmp_path / "top.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sluice",
                "top",
                "--bootstrap",
                broker.bootstrap,
                "--interval",
                "0.1",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "80"},
        )
    try:
        yield process, output
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_TIMEOUT_S)


def test_top_keeps_running_while_topics_are_deleted(
    broker: BrokerProcess, top_process: tuple[subprocess.Popen[bytes], Path]
) -> None:
    process, output = top_process
    wait_until(lambda: output.read_text().count("Topics") >= 1, "top printed a first table")
    deleted = [f"{unique_topic_name('churn')}" for _ in range(TOPIC_CHURN_CYCLES)]
    with SyncAdmin(broker.bootstrap) as admin:
        for name in deleted:
            create_topic(broker.bootstrap, name, num_partitions=4)
            admin.delete_topics([name])
            assert process.poll() is None, output.read_text()[-3000:]
    refreshes = output.read_text().count("Topics")

    def fresh_table_without_them() -> bool:
        text = output.read_text()
        if text.count("Topics") < refreshes + 2:
            return False
        last = text[text.rindex("Topics") :]
        return not any(name[:20] in last for name in deleted)

    wait_until(fresh_table_without_them, "a refresh without the deleted topics")
    assert process.poll() is None, output.read_text()[-3000:]
    last = output.read_text()
    last = last[last.rindex("cluster ") :]
    assert max(len(line) for line in last.splitlines()) <= 80
