"""sluice.testing.Broker: the embedded broker users start from their own tests, in a
thread of the test process and as a child process, used by real clients."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from client_helpers import (
    consume_exactly,
    produce_and_flush,
    producer_config,
    unique_topic_name,
)
from confluent_kafka import Producer

import sluice.sync
from sluice.client.consumer_api import TopicPartition
from sluice.testing import TEST_DEFAULTS, Broker, BrokerStartError

REPOSITORY = Path(__file__).resolve().parents[2]
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def thread_broker() -> Iterator[Broker]:
    with Broker({"num.partitions": "2"}) as broker:
        yield broker


@pytest.fixture(scope="module")
def process_broker() -> Iterator[Broker]:
    # `sluice serve` reads options from SLUICE_* variables; the test broker ignores them.
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("SLUICE_CONFIG", "/nonexistent/server.properties")
        environment.setenv("SLUICE_PORT", "1")
        broker = Broker(mode="process").start()
    try:
        yield broker
    finally:
        broker.stop()


def confluent_round_trip(broker: Broker, partitions: int = 1) -> None:
    topic = unique_topic_name("testing")
    metadata = broker.create_topic(topic, partitions=partitions)
    assert len(metadata.partitions) == partitions
    values = [f"value-{i}".encode() for i in range(10)]
    producer = Producer(producer_config(broker.bootstrap))
    delivered = produce_and_flush(producer, topic, [{"value": v, "partition": 0} for v in values])
    assert [d.offset for d in delivered] == list(range(10))
    messages = consume_exactly(broker.bootstrap, [(topic, 0)], len(values))
    assert [m.value() for m in messages] == values


def test_thread_mode_serves_confluent_kafka(thread_broker: Broker) -> None:
    assert thread_broker.is_running
    assert thread_broker.bootstrap == f"127.0.0.1:{thread_broker.port}"
    confluent_round_trip(thread_broker, partitions=3)


def test_thread_mode_applies_settings_over_the_test_defaults(thread_broker: Broker) -> None:
    assert thread_broker.settings == {**TEST_DEFAULTS, "num.partitions": "2"}
    assert thread_broker.settings["http.port"] == "0"
    topic = unique_topic_name("auto-created")
    producer = Producer(producer_config(thread_broker.bootstrap))
    produce_and_flush(producer, topic, [{"value": b"x"}])
    with sluice.sync.Admin(thread_broker.bootstrap) as admin:
        assert len(admin.describe_topic(topic).partitions) == 2


def test_thread_mode_serves_the_sluice_client(thread_broker: Broker) -> None:
    topic = unique_topic_name("sluice-client")
    thread_broker.create_topic(topic)
    with sluice.sync.Producer(thread_broker.bootstrap) as producer:
        for i in range(5):
            producer.send(topic, f"record-{i}".encode(), partition=0).result()
    with sluice.sync.Consumer(
        bootstrap_servers=thread_broker.bootstrap, auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning(TopicPartition(topic, 0))
        records: list[bytes | None] = []
        while len(records) < 5:
            polled = consumer.poll(TIMEOUT_S)
            assert polled, "no records within the timeout"
            records.extend(record.value for record in polled)
    assert records == [f"record-{i}".encode() for i in range(5)]


def test_thread_mode_inside_a_running_asyncio_loop(thread_broker: Broker) -> None:
    """An asyncio test (aiokafka) on its own loop while the broker runs on another."""
    topic = unique_topic_name("aiokafka")

    async def round_trip() -> list[bytes]:
        await asyncio.to_thread(thread_broker.create_topic, topic)
        producer = AIOKafkaProducer(bootstrap_servers=thread_broker.bootstrap)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, f"async-{i}".encode(), partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=thread_broker.bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition(topic, 0)])
            records: list[bytes] = []
            while len(records) < 3:
                batch = await consumer.getmany(timeout_ms=int(TIMEOUT_S * 1000))
                assert batch, "no records within the timeout"
                records.extend(r.value for rs in batch.values() for r in rs)
            return records
        finally:
            await consumer.stop()

    values = asyncio.run(asyncio.wait_for(round_trip(), TIMEOUT_S * 2))
    assert values == [b"async-0", b"async-1", b"async-2"]


def test_process_mode_serves_confluent_kafka(process_broker: Broker) -> None:
    assert process_broker.mode == "process"
    confluent_round_trip(process_broker)
    assert "ready on" in process_broker.log_text()


def test_two_brokers_at_once_are_separate(thread_broker: Broker, process_broker: Broker) -> None:
    with Broker() as second:
        assert len({thread_broker.port, process_broker.port, second.port}) == 3
        topic = unique_topic_name("only-on-second")
        second.create_topic(topic)
        confluent_round_trip(second)
        with sluice.sync.Admin(thread_broker.bootstrap) as admin:
            assert topic not in {t.name for t in admin.list_topics()}


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_temporary_data_dir_is_removed_after_stop(mode: str) -> None:
    broker = Broker(mode=mode)  # type: ignore[arg-type]
    broker.start()
    data_dir = broker.data_dir
    assert (data_dir / "meta.properties").exists()
    broker.stop()
    assert not broker.is_running
    assert not data_dir.exists()


def test_keep_data_and_a_given_data_dir_outlive_stop(tmp_path: Path) -> None:
    with Broker(keep_data=True) as kept:
        kept_dir = kept.data_dir
    assert (kept_dir / "meta.properties").exists()
    shutil.rmtree(kept_dir.parent)
    given = tmp_path / "given"
    topic = unique_topic_name("durable")
    with Broker(data_dir=given) as first:
        first.create_topic(topic)
        produce_and_flush(Producer(producer_config(first.bootstrap)), topic, [{"value": b"kept"}])
    # stopped cleanly: the marker that lets the next start skip recovery
    assert (given / ".clean-shutdown").exists()
    with Broker(data_dir=given) as second:
        (message,) = consume_exactly(second.bootstrap, [(topic, 0)], 1)
        assert message.value() == b"kept"
    assert given.exists()


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_data_dir_in_use_fails_the_start_clearly(thread_broker: Broker, mode: str) -> None:
    with pytest.raises(BrokerStartError, match="used by another running broker"):
        Broker(data_dir=thread_broker.data_dir, mode=mode).start()  # type: ignore[arg-type]
    assert thread_broker.is_running
    confluent_round_trip(thread_broker)


def test_a_bad_setting_fails_the_start_clearly() -> None:
    broker = Broker({"num.partitions": "many"})
    with pytest.raises(BrokerStartError, match=r"bad broker setting: num\.partitions"):
        broker.start()
    assert not broker.is_running


def test_http_is_off_unless_asked_for(thread_broker: Broker) -> None:
    with pytest.raises(RuntimeError, match="http=True"):
        _ = thread_broker.http_url
    http = Broker(http=True)
    # Only the setting is checked here: the listener's own tests check what it serves.
    port = int(http.settings["http.port"])
    assert port > 0
    assert http.settings["http.host"] == "127.0.0.1"
    assert http.http_url == f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_an_http_port_taken_before_the_start_is_picked_again(mode: str) -> None:
    """The HTTP port is picked before the start (port 0 turns the listener off); when
    another process takes it first, the broker starts on another."""
    broker = Broker(mode=mode, http=True)  # type: ignore[arg-type]
    picked = int(broker.settings["http.port"])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", picked))
        taken.listen()
        broker.start()
    try:
        assert broker.http_url != f"http://127.0.0.1:{picked}"
        with urllib.request.urlopen(f"{broker.http_url}/health", timeout=TIMEOUT_S) as reply:
            assert reply.status == 200
    finally:
        broker.stop()


def test_a_process_broker_listens_where_its_ready_line_says(process_broker: Broker) -> None:
    assert f"127.0.0.1:{process_broker.port} (PLAINTEXT)" in process_broker.log_text()
    assert "--port 0" in process_broker.log_text()


SAMPLE_USER_TEST = """
import sluice.sync


def test_round_trip(sluice_broker):
    assert sluice_broker.settings["num.partitions"] == "3"
    sluice_broker.create_topic("events")
    with sluice.sync.Producer(sluice_broker.bootstrap) as producer:
        metadata = producer.send("events", b"hello", partition=0).result()
    assert metadata.offset == 0


def test_factory(sluice_broker_factory, sluice_broker):
    other = sluice_broker_factory({"num.partitions": "5"})
    assert other.port != sluice_broker.port
    assert other.settings["num.partitions"] == "5"
"""


USER_CONFTEST = textwrap.dedent(
    """
    # The plugin, for an installed sluice whose metadata predates its entry point.
    from sluice.testing import pytest_plugin

    def pytest_configure(config):
        if not config.pluginmanager.has_plugin("sluice"):
            config.pluginmanager.register(pytest_plugin, "sluice")
    """
)


def _entry_points_site(tmp_path: Path) -> Path:
    """A directory holding the entry points ``pip install sluice`` writes from
    pyproject.toml (a development install may predate them), as a distribution's
    metadata that importlib.metadata, and so pytest, finds on the path."""
    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
    plugins = project["entry-points"]["pytest11"]
    dist_info = tmp_path / "site" / "sluice_entry_points-0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sluice-entry-points\nVersion: 0\n"
    )
    lines = "".join(f"{name} = {target}\n" for name, target in plugins.items())
    (dist_info / "entry_points.txt").write_text(f"[pytest11]\n{lines}")
    return dist_info.parent


def test_the_pytest_plugin_loads_from_the_entry_point_alone(tmp_path: Path) -> None:
    """A user's test directory with no conftest: the fixtures come from the entry point
    (and the ini options work); with the plugin turned off they are missing."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_sample.py").write_text(textwrap.dedent(SAMPLE_USER_TEST))
    (project / "pytest.ini").write_text("[pytest]\nsluice_broker_settings = num.partitions=3\n")
    site = _entry_points_site(tmp_path)
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPOSITORY / "src"), str(site)]),
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_sample.py"]

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *extra],
            cwd=project,
            env=environment,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    result = run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
    disabled = run("-p", "no:sluice")
    assert disabled.returncode != 0
    assert "fixture 'sluice_broker' not found" in disabled.stdout


def test_a_failed_test_reports_the_process_brokers_log(tmp_path: Path) -> None:
    (tmp_path / "test_failing.py").write_text(
        "def test_fails(sluice_broker):\n    assert sluice_broker.mode == 'thread'\n"
    )
    (tmp_path / "conftest.py").write_text(USER_CONFTEST)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    result = subprocess.run(
        [*command, "-o", "sluice_broker_mode=process", "test_failing.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPOSITORY / "src")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed" in result.stdout
    assert "sluice broker log 127.0.0.1:" in result.stdout
    assert "ready on" in result.stdout


def test_the_examples_of_docs_testing_md_pass(tmp_path: Path) -> None:
    """Every test in docs/testing.md, run by pytest as a user's test file."""
    document = (REPOSITORY / "docs" / "testing.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", document, re.DOTALL | re.MULTILINE)
    tests = [block for block in blocks if "def test_" in block]
    assert len(tests) >= 5
    (tmp_path / "test_examples.py").write_text("import confluent_kafka\n\n" + "\n\n".join(tests))
    (tmp_path / "conftest.py").write_text(USER_CONFTEST)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_examples.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPOSITORY / "src")},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert f"{len(tests)} passed" in result.stdout
