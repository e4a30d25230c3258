"""docs/client.md's example app, taken from the page itself and run as a newcomer runs
it, against a fresh broker (its address put in place of ``127.0.0.1:9092``, as the
README's examples are run), and the public names the page lists, importable from
``sluice`` and ``sluice.sync``."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from broker_process import BrokerProcess
from readme_blocks import README, README_ADDRESS, blocks, run

import sluice
import sluice.sync

CLIENT_PAGE = README.parent / "docs" / "client.md"


def test_the_example_app_runs_and_reads_back_what_it_wrote(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    broker = broker_factory({"group.initial.rebalance.delay.ms": "0"})
    (app,) = blocks("python", "An example app", CLIENT_PAGE)
    assert README_ADDRESS in app
    assert len(app.splitlines()) <= 40, "the example app is meant to stay short"
    output = run([sys.executable, "-c", app.replace(README_ADDRESS, broker.bootstrap)], {})
    assert "dispatched 10 orders" in output, output
    assert "{'order': 9, 'city': 'Oslo'}" in output, output
    # Run twice: the topic exists now, and the group's committed offsets hold.
    output = run([sys.executable, "-c", app.replace(README_ADDRESS, broker.bootstrap)], {})
    assert "dispatched 10 orders" in output, output


def listed_public_names() -> list[str]:
    section = CLIENT_PAGE.read_text().split("## Public names", 1)[1]
    return sorted(set(re.findall(r"`([A-Za-z_]+)`", section)) - {"sluice", "sync"})


def test_every_name_the_page_lists_comes_from_sluice_and_sluice_sync() -> None:
    names = listed_public_names()
    assert {"TopicPartition", "NewTopic", "RecordMetadata", "KafkaError"} <= set(names)
    assert set(names) <= set(sluice.__all__)
    for name in names:
        assert getattr(sluice, name) is not None, name
        if name not in ("RetryPolicy", "Output", "run_exactly_once"):
            assert getattr(sluice.sync, name) is not None, name
    errors_table = CLIENT_PAGE.read_text().split("## Errors", 1)[1].split("\n## ", 1)[0]
    for error in re.findall(r"`([A-Za-z]+Error)`", errors_table):
        if error not in ("TypeError", "ValueError"):
            assert issubclass(getattr(sluice, error), Exception), error


def test_importing_sluice_loads_no_client_module() -> None:
    probe = (
        "import sys, sluice; print(sorted(m for m in sys.modules if m.startswith('sluice.client')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout
