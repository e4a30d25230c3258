"""The README's share-group section, taken from README.md and run in order against a
fresh broker: the commands that make the queue, three confluent-kafka workers sharing its
one partition, the sluice.ShareConsumer example and the CLI."""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from pathlib import Path

from broker_process import BrokerProcess
from readme_blocks import README_ADDRESS, blocks, run, sluice_shell_environment

SECTION = "Queues on a topic: share groups"


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
    assert sum(per_worker.values()) == 30, output  # every job done once, none twice
    assert total_line == "30 jobs, each done once", output

    # Every job was accepted: the sluice example finds nothing left to release.
    output = run(
        [sys.executable, "-c", sluice_example.replace(README_ADDRESS, broker.bootstrap)],
        environment,
    )
    assert output.strip() == "{}", output

    listed = run(["sh", "-e"], environment, stdin=cli)
    assert "workers" in listed, listed
