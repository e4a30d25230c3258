"""Progress bars of the CLI's long operations: drawn on standard error when it is a
terminal (a pseudo-terminal here), never when it is a pipe, never on standard output,
and not at all with --no-progress or SLUICE_NO_PROGRESS=1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from client_helpers import unique_group_id, unique_topic_name
from terminal import PROGRESS_MARK, run_at_terminal, run_piped

import sluice.sync
from sluice.client.consumer_api import TopicPartition

LINES = 20_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("progress") / "data", overrides={"http.port": "0"}
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def end_offset(broker: BrokerProcess, topic: str, partitions: int = 1) -> int:
    with sluice.sync.Consumer(bootstrap_servers=broker.bootstrap) as consumer:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    return sum(ends.values())


def create_topic(broker: BrokerProcess, topic: str, partitions: int) -> None:
    result = run_piped(broker.bootstrap, "topics", "create", topic, "--partitions", str(partitions))
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def input_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("input") / "records.txt"
    path.write_text("".join(f"record number {i}\n" for i in range(LINES)))
    return path


def test_produce_from_a_file_shows_bytes_and_records_at_a_terminal(
    broker: BrokerProcess, input_file: Path
) -> None:
    topic = unique_topic_name("progress-file")
    run = run_at_terminal(broker.bootstrap, "produce", topic, stdin=input_file)
    assert run.returncode == 0, run.terminal
    assert PROGRESS_MARK in run.terminal
    assert "producing" in run.terminal
    assert f"{LINES} records sent" in run.terminal
    size_kb = input_file.stat().st_size / 1000
    assert f"{size_kb:.1f}/{size_kb:.1f} kB" in run.terminal  # bytes read of the file's size
    assert run.stdout == ""
    assert end_offset(broker, topic) == LINES


def test_produce_from_a_pipe_shows_records_sent(broker: BrokerProcess) -> None:
    topic = unique_topic_name("progress-pipe")
    run = run_at_terminal(broker.bootstrap, "produce", topic, stdin_bytes=b"a\nb\nc\n")
    assert run.returncode == 0, run.terminal
    assert PROGRESS_MARK in run.terminal
    assert "3 records sent" in run.terminal
    assert end_offset(broker, topic) == 3


@pytest.mark.parametrize(
    ("arguments", "environment"),
    [(["--no-progress"], {}), ([], {"SLUICE_NO_PROGRESS": "1"})],
    ids=["option", "environment"],
)
def test_progress_can_be_turned_off_at_a_terminal(
    broker: BrokerProcess, input_file: Path, arguments: list[str], environment: dict[str, str]
) -> None:
    topic = unique_topic_name("no-progress")
    run = run_at_terminal(
        broker.bootstrap, "produce", topic, *arguments, stdin=input_file, environment=environment
    )
    assert run.returncode == 0, run.terminal
    assert run.terminal == ""
    assert end_offset(broker, topic) == LINES


def test_piped_produce_prints_nothing(broker: BrokerProcess, input_file: Path) -> None:
    topic = unique_topic_name("piped")
    result = run_piped(broker.bootstrap, "produce", topic, stdin=input_file.read_bytes())
    assert result.returncode == 0, result.stderr
    assert (result.stdout, result.stderr) == ("", "")


def test_reset_offsets_shows_its_steps_and_prints_the_same_plan(broker: BrokerProcess) -> None:
    topic = unique_topic_name("reset-progress")
    create_topic(broker, topic, 24)
    produced = run_piped(broker.bootstrap, "produce", topic, stdin=b"x\n" * 100)
    assert produced.returncode == 0, produced.stderr
    arguments = ["--topic", topic, "--to-latest", "--execute"]

    piped_group = unique_group_id()
    piped = run_piped(broker.bootstrap, "groups", "reset-offsets", piped_group, *arguments)
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == ""

    group = unique_group_id()
    run = run_at_terminal(broker.bootstrap, "groups", "reset-offsets", group, *arguments)
    assert run.returncode == 0, run.terminal
    assert PROGRESS_MARK in run.terminal
    assert f"resetting offsets of {group}" in run.terminal
    assert "4/4" in run.terminal  # every step, the commit included
    assert "\x1b" not in run.stdout
    assert run.stdout == piped.stdout.replace(piped_group, group)
    assert "24 partition(s)" in run.stdout


def test_reassign_wait_shows_partitions_moved(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = unique_topic_name("reassign-progress")
    create_topic(broker, topic, 2)
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [{"topic": topic, "partition": p, "replicas": [0]} for p in range(2)],
            }
        )
    )
    run = run_at_terminal(
        broker.bootstrap, "topics", "reassign", "--execute", "--wait", "--plan", str(plan)
    )
    assert run.returncode == 0, run.terminal
    assert PROGRESS_MARK in run.terminal
    assert "moving partitions" in run.terminal
    assert "2/2" in run.terminal
    assert "Started moving 2 of 2 partition(s)." in run.stdout
    assert "2 of 2 partition(s) complete." in run.stdout

    piped = run_piped(broker.bootstrap, "topics", "reassign", "--verify", "--plan", str(plan))
    waited = run_piped(
        broker.bootstrap, "topics", "reassign", "--verify", "--wait", "--plan", str(plan)
    )
    assert piped.returncode == waited.returncode == 0, piped.stderr + waited.stderr
    assert (waited.stdout, waited.stderr) == (piped.stdout, piped.stderr)
