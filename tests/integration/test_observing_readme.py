"""The README's "Observing Sluice" and "Testing your code against Sluice" sections, run as
written against real brokers: the metrics and readiness commands and ``sluice top`` print
what the README shows for its example group, ``sluice serve``'s HTTP listener serves the
console (read-only or off as the README says), and the pytest example passes with only
the installed plugin."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from metrics_scrape import get
from readme_blocks import blocks, run, sluice_shell_environment

import sluice.sync
from sluice.client.admin import NewTopic
from sluice.client.consumer_api import TopicPartition

OBSERVING = "Observing Sluice"
TESTING = "Testing your code against Sluice"
README_HTTP = "http://127.0.0.1:8080"
RECORDS = 100
COMMITTED = 20
PYTEST_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def http_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with the README's example: ``orders`` (3 partitions) whose 100 records
    are all in partition 2, and the ``billing`` group at offset 20 of it."""
    broker = BrokerProcess(tmp_path_factory.mktemp("observing") / "data", http_port=0)
    broker.start()
    try:
        with sluice.sync.Admin(bootstrap_servers=broker.bootstrap) as admin:
            admin.create_topics([NewTopic("orders", 3, 1)])
        with sluice.sync.Producer(bootstrap_servers=broker.bootstrap) as producer:
            for i in range(RECORDS):
                producer.send("orders", b"record-%d" % i, partition=2)
            producer.flush()
        with sluice.sync.Consumer(bootstrap_servers=broker.bootstrap, group_id="billing") as c:
            c.commit(
                {TopicPartition("orders", p): 0 for p in (0, 1)}
                | {TopicPartition("orders", 2): COMMITTED}
            )
        yield broker
    finally:
        broker.stop()


def _text_blocks_after(section: str) -> list[str]:
    return blocks("text", section)


def test_the_metrics_and_top_commands_print_what_the_readme_shows(
    http_broker: BrokerProcess, tmp_path: Path
) -> None:
    environment = sluice_shell_environment(tmp_path, http_broker.bootstrap)
    metrics_commands, top_command = blocks("sh", OBSERVING)
    metrics_shown, top_shown = _text_blocks_after(OBSERVING)

    printed = run(
        ["sh", "-e"], environment, stdin=metrics_commands.replace(README_HTTP, http_broker.http_url)
    )
    assert printed.splitlines() == metrics_shown.splitlines(), printed

    # A terminal of 100 columns; the header line names the cluster's id and the time,
    # which differ from the README's.
    printed = run(["sh", "-e"], {**environment, "COLUMNS": "100"}, stdin=top_command)
    header, *lines = [line.rstrip() for line in printed.splitlines() if line.strip()]
    shown_header, *shown = [line.rstrip() for line in top_shown.splitlines()]
    assert re.fullmatch(r"cluster \S+ · 1 broker\(s\) · \d\d:\d\d:\d\d", header), printed
    assert re.fullmatch(r"cluster \S+ · 1 broker\(s\) · \d\d:\d\d:\d\d", shown_header)
    assert lines == shown, printed


def test_sluice_serve_serves_the_console_beside_the_metrics(http_broker: BrokerProcess) -> None:
    status, page = get(f"{http_broker.http_url}/topics/orders")
    assert status == 200, page
    assert "Topic orders" in page
    assert 'id="produce-form"' in page
    status, metrics = get(f"{http_broker.http_url}/metrics")
    assert status == 200
    assert "sluice_requests_total" in metrics


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"http.console": "read-only"}, "This console is read-only."),
        ({"http.console": "off"}, '"service": "sluice broker"'),
    ],
    ids=["read-only", "off"],
)
def test_the_console_can_be_read_only_or_off(
    tmp_path: Path, overrides: dict[str, str], expected: str
) -> None:
    broker = BrokerProcess(tmp_path / "data", http_port=0, overrides=overrides)
    broker.start()
    try:
        with sluice.sync.Admin(bootstrap_servers=broker.bootstrap) as admin:
            admin.create_topics([NewTopic("orders", 1, 1)])
        status, page = get(f"{broker.http_url}/topics/orders")
        if expected.startswith('"service"'):
            assert status == 404, page  # no console: only the endpoints are served
            status, page = get(broker.http_url)
        assert status == 200, page
        assert expected in page
        assert 'id="produce-form"' not in page
    finally:
        broker.stop()


def test_the_pytest_example_passes_with_the_installed_plugin(tmp_path: Path) -> None:
    (example,) = blocks("python", TESTING)
    (tmp_path / "test_readme_example.py").write_text(example)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_readme_example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=PYTEST_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout, done.stdout
