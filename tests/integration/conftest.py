"""Fixtures that run a real broker process and name fresh topics.

- ``broker``: one broker per test module (starting a process costs ~1 s), on a free
  loopback port with its own data directory. Tests isolate themselves with ``topic``.
- ``broker_factory``: more brokers with their own settings (``-o key=value``), stopped at
  the end of the test.
- ``topic``: a topic name no other test uses.
- ``disk_faults_shim``: the LD_PRELOAD library that makes a broker's disk fail or wait
  (``disk_faults``).

Every broker is stopped on every path; the ``process_leaks`` plugin registered here
fails the session if any process a test started outlives it.

When a test fails, the tail of every broker log it touched is added to its report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import process_leaks
import pytest
from broker_process import BrokerProcess
from client_helpers import round_trip_one_message, unique_topic_name
from consumer_group_wire import FAST_HEARTBEATS
from disk_faults import build_shim
from group_workers import WorkerPool, worker_pool
from kafka_wire import KafkaConnection

from sluice.testing import pytest_plugin

_THIS_DIRECTORY = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    # sluice.testing's fixtures (sluice_broker...) come from the pytest11 entry point of
    # an installed sluice; a development install made before the entry point existed
    # lacks it, so register the plugin here then (under the entry point's name, so
    # `-p no:sluice` still turns it off).
    if not config.pluginmanager.has_plugin("sluice") and not config.pluginmanager.is_blocked(
        "sluice"
    ):
        config.pluginmanager.register(pytest_plugin, "sluice")
    process_leaks.register(config)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _THIS_DIRECTORY in item.path.parents:
            item.add_marker(pytest.mark.integration)


class BrokerFactory:
    def __init__(self, base_dir: Path) -> None:
        self._base_dir = base_dir
        self.brokers: list[BrokerProcess] = []

    def __call__(
        self,
        overrides: dict[str, str] | None = None,
        *,
        extra_arguments: list[str] | None = None,
        start: bool = True,
        http: bool = False,
    ) -> BrokerProcess:
        """A broker with ``overrides`` (``-o``); with ``http``, its HTTP listener (metrics)
        on a free port."""
        data_dir = self._base_dir / f"broker-{len(self.brokers)}"
        broker = BrokerProcess(
            data_dir,
            overrides=overrides,
            extra_arguments=extra_arguments,
            http_port=0 if http else None,
        )
        self.brokers.append(broker)
        if start:
            broker.start()
        return broker

    def stop_all(self) -> None:
        for broker in self.brokers:
            broker.stop()


def _brokers_used_by(item: pytest.Item) -> list[BrokerProcess]:
    found: list[BrokerProcess] = []
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, BrokerProcess):
            found.append(value)
        elif isinstance(value, BrokerFactory):
            found.extend(value.brokers)
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed:
        for broker in _brokers_used_by(item):
            report.sections.append(
                (f"broker log {broker.host}:{broker.port} ({broker.log_path})", broker.log_tail())
            )
    return report


def _running_broker(
    tmp_path_factory: pytest.TempPathFactory, name: str, overrides: dict[str, str] | None = None
) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp(name) / "data", overrides=overrides)
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from _running_broker(tmp_path_factory, "broker")


@pytest.fixture
def connection(broker: BrokerProcess) -> Iterator[KafkaConnection]:
    """A raw Kafka-protocol connection to the module's broker."""
    with KafkaConnection(broker.host, broker.port) as opened:
        yield opened


@pytest.fixture
def broker_still_serves_afterwards(broker: BrokerProcess) -> Iterator[None]:
    """After the test, the module's broker is the same process and still serves a
    client: for modules that throw bad input at it
    (``pytestmark = pytest.mark.usefixtures("broker_still_serves_afterwards")``)."""
    pid = broker.pid
    yield
    assert broker.is_running, "the broker process died"
    assert broker.pid == pid, "the broker was restarted"
    round_trip_one_message(broker.bootstrap)


@pytest.fixture(scope="module")
def fast_groups_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A module's broker whose first rebalance of a group does not wait
    group.initial.rebalance.delay.ms (3 s by default), so group tests form groups fast.
    A module uses it by defining ``broker`` as returning this fixture."""
    yield from _running_broker(
        tmp_path_factory, "groups-broker", {"group.initial.rebalance.delay.ms": "0"}
    )


@pytest.fixture(scope="module")
def consumer_protocol_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A module's broker with the consumer group protocol (KIP-848) enabled and members
    told to heartbeat every 500 ms. A module uses it by defining ``broker`` as returning
    this fixture."""
    yield from _running_broker(tmp_path_factory, "consumer-protocol-broker", FAST_HEARTBEATS)


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    """Group members as worker processes (``group_workers``), every one stopped at the
    end of the test."""
    with worker_pool() as workers:
        yield workers


@pytest.fixture(autouse=True)
def _module_broker_survives_each_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """If a test leaves the module's broker dead, fail that test and start the broker
    again, so that the rest of the module reports its own results, not the crash."""
    yield
    if "broker" not in request.fixturenames:
        return
    process: BrokerProcess = request.getfixturevalue("broker")
    if process.is_running:
        return
    exit_code = process.stop()
    log_tail = process.log_tail()
    process.start()
    pytest.fail(f"the broker died during this test (exit code {exit_code}):\n{log_tail}")


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    factory = BrokerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture(scope="session")
def disk_faults_shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The disk-fault shim, built once (``disk_faults``)."""
    return build_shim(tmp_path_factory.mktemp("shim"))


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A fresh topic name (not created: tests create it or let auto-creation do it)."""
    return unique_topic_name(request.node.name.removeprefix("test_"))
