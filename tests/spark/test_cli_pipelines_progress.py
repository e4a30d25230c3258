"""``sluice archive`` and ``sluice replay`` at a terminal: their progress (phase and rows,
out of a total known before Spark starts) is drawn on standard error with none of
Spark's own output through it, each ends with a summary line, and nothing of it reaches
standard output. Replay creates its missing target with the archived partitions."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from client_helpers import unique_topic_name
from conftest import create_topic, produce
from terminal import PROGRESS_MARK, run_at_terminal

import sluice.sync
from sluice.client.consumer_api import TopicPartition

pytestmark = pytest.mark.slow

RECORDS = 300
COMMAND_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def progress_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("pipelines-progress") / "data", overrides={"http.port": "0"}
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_archive_and_replay_show_their_rows_at_a_terminal(
    progress_broker: BrokerProcess, tmp_path: Path
) -> None:
    pytest.importorskip("pyspark")
    bootstrap = progress_broker.bootstrap
    source, target = unique_topic_name("archived"), unique_topic_name("replayed")
    create_topic(bootstrap, source, 2)
    rows: list[Any] = [(i % 2, b"k", f"v{i}".encode(), (), None) for i in range(RECORDS)]
    produce(bootstrap, source, rows)
    spark_environment = {"PYSPARK_PYTHON": sys.executable, **os.environ}
    archive = tmp_path / "archive"

    archived = run_at_terminal(
        bootstrap,
        "archive",
        "--topic",
        source,
        "--output",
        str(archive),
        "--max-offsets-per-trigger",
        "100",
        "--until-end",
        "--master",
        "local[1]",
        environment=spark_environment,
        timeout_s=COMMAND_TIMEOUT_S,
    )
    assert archived.returncode == 0, archived.terminal[-3000:]
    assert PROGRESS_MARK in archived.terminal
    assert "archive: starting Spark" in archived.terminal
    assert f"{RECORDS} rows in" in archived.terminal
    assert f"{RECORDS}/{RECORDS}" in archived.terminal, "the total, known before Spark starts"
    assert f"archived {RECORDS} rows of 1 topic(s) into {archive} in " in archived.terminal
    _assert_no_spark_output(archived.terminal)
    assert archived.stdout == ""

    replayed = run_at_terminal(
        bootstrap,
        "replay",
        "--archive",
        str(archive),
        "--topic",
        target,
        "--master",
        "local[1]",
        environment=spark_environment,
        timeout_s=COMMAND_TIMEOUT_S,
    )
    assert replayed.returncode == 0, replayed.terminal[-3000:]
    assert PROGRESS_MARK in replayed.terminal
    assert f"created topic {target} with 2 partition(s)" in replayed.terminal
    assert f"replay: writing into {target}" in replayed.terminal
    assert f"{RECORDS}/{RECORDS}" in replayed.terminal
    assert f"replayed {RECORDS} rows into {target} in " in replayed.terminal
    _assert_no_spark_output(replayed.terminal)
    assert replayed.stdout == ""
    with sluice.sync.Consumer(bootstrap_servers=bootstrap) as consumer:
        ends = consumer.end_offsets([TopicPartition(target, p) for p in range(2)])
    assert ends == {TopicPartition(target, p): RECORDS // 2 for p in range(2)}, "partitions kept"


def _assert_no_spark_output(terminal: str) -> None:
    for noise in (" WARN ", "log4j", "[Stage "):
        assert noise not in terminal, f"Spark's output {noise!r} reached the terminal"
