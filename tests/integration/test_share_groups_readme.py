"""The README's share-group section, taken from README.md and run in order against a
fresh broker: the commands that make the queue, three confluent-kafka workers sharing its
one partition, the sluice.ShareConsumer example and the CLI, which prints what the README
shows."""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from pathlib import Path

from broker_process import BrokerProcess
from readme_blocks import (
    README_ADDRESS,
    assert_shows,
    blocks,
    run,
    shown_after,
    sluice_shell_environment,
)

import sluice.sync

SECTION = "Queues on a topic: share groups"
JOBS = 30
PENDING_JOBS = 5


def test_the_share_group_section_runs(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    broker = broker_factory()
    environment = sluice_shell_environment(tmp_path, broker.bootstrap)
    setup, cli = blocks("sh", SECTION)
    workers, sluice_example = blocks("python", SECTION)
    run(["sh", "-e"], environment, stdin=setup)

    output = run(
        [sys.executable, "-c", workers.replace(README_ADDRESS, broker.bootstrap)], environment
    )
    per_worker_line, total_line = output.strip().splitlines()[-2:]
    per_worker = ast.literal_eval(per_worker_line)
    assert sum(per_worker.values()) == JOBS, output  # every job done once, none twice
    assert total_line == "30 jobs, each done once", output

    # Every job was accepted: the sluice example finds nothing left to release.
    output = run(
        [sys.executable, "-c", sluice_example.replace(README_ADDRESS, broker.bootstrap)],
        environment,
    )
    assert output.strip() == "{}", output

    # The CLI's scenario: work waiting for the group, five new jobs.
    with sluice.sync.Producer(bootstrap_servers=broker.bootstrap) as producer:
        for n in range(JOBS, JOBS + PENDING_JOBS):
            producer.send("jobs", f"job {n}".encode())
        producer.flush()
    listed = run(["sh", "-e"], environment, stdin=cli, with_errors=True)
    # The group epoch counts the workers' joins and leaves, which vary.
    assert_shows(listed, shown_after(cli), varying=[r"(?<=group epoch: )\d+"])
