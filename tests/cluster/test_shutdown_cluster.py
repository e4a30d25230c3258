"""A broker of a cluster stops on time whatever its ZooKeeper does, says what it waits
for, and ends at once on a second signal; the logs stay consistent either way (the
clean-shutdown marker only after every log closed).

Each test runs its own ZooKeeper (the module's shared one must not be stopped or
paused) and stops or pauses it (SIGSTOP: the TCP connection stays up and nothing
answers, as with a ZooKeeper whose machine hangs)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from broker_process import STOP_TIMEOUT_S, BrokerProcess

from sluice.broker.shutdown import OVERDUE_EXIT_CODE, exit_code_of_signal
from sluice.cli.local_zookeeper import LocalZooKeeper
from sluice.cluster.store import MetadataStoreError
from sluice.cluster.zookeeper import ZooKeeperMetadataStore
from sluice.storage import clean_shutdown_marker_exists

SESSION_TIMEOUT_MS = 10_000
"""The longest session this ZooKeeper grants (20 ticks): with ZooKeeper paused, kazoo
notices after about two thirds of it, so closing the session takes seconds."""
LOG_WAIT_S = 20.0
POLL_INTERVAL_S = 0.05
ZOOKEEPER_STEP = "leaving the cluster: waiting for ZooKeeper to close the session"


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[LocalZooKeeper]:
    with LocalZooKeeper(tmp_path / "zookeeper") as server:
        yield server


@pytest.fixture
def broker(tmp_path: Path, zookeeper: LocalZooKeeper) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path / "broker",
        extra_arguments=["--zookeeper", f"{zookeeper.connect}/shutdown"],
        overrides={"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS)},
    )
    try:
        yield process
    finally:
        process.kill()


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = LOG_WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(POLL_INTERVAL_S)  # polling a condition, bounded by the deadline


def test_a_broker_whose_zookeeper_is_gone_stops_cleanly_and_says_so(
    broker: BrokerProcess, zookeeper: LocalZooKeeper
) -> None:
    """It waited for ZooKeeper's session forever (the refresher thread, blocked on a
    request kazoo kept queued, was joined before the client was stopped)."""
    broker.start()
    zookeeper.stop()
    started = time.monotonic()
    assert broker.stop() == 0, broker.log_tail()
    elapsed_s = time.monotonic() - started
    assert elapsed_s < STOP_TIMEOUT_S
    log_text = broker.log_text()
    assert ZOOKEEPER_STEP in log_text, log_text
    assert "stopped cleanly" in log_text, log_text
    assert clean_shutdown_marker_exists(broker.data_dir)


def test_a_second_signal_ends_a_slow_shutdown_at_once(
    broker: BrokerProcess, zookeeper: LocalZooKeeper
) -> None:
    broker.start()
    os.kill(zookeeper.pid, signal.SIGSTOP)
    try:
        os.kill(broker.pid, signal.SIGTERM)
        wait_until(lambda: f"still {ZOOKEEPER_STEP}" in broker.log_text(), "the slow step said")
        os.kill(broker.pid, signal.SIGTERM)
        exit_code = broker.stop()
    finally:
        os.kill(zookeeper.pid, signal.SIGCONT)
    # 0 would be a shutdown that finished; this is the second signal's own way out.
    assert exit_code == exit_code_of_signal(signal.SIGTERM), broker.log_tail()
    log_text = broker.log_text()
    assert f"SIGTERM again while {ZOOKEEPER_STEP}: exiting now" in log_text, log_text
    assert not clean_shutdown_marker_exists(broker.data_dir)
    broker.start()
    assert "no clean-shutdown marker: recovering" in broker.log_text()
    assert broker.stop() == 0


def test_a_shutdown_past_its_bound_ends_without_the_marker(
    broker: BrokerProcess, zookeeper: LocalZooKeeper
) -> None:
    broker.overrides["sluice.shutdown.timeout.ms"] = "3000"  # closing the session takes longer
    broker.start()
    os.kill(zookeeper.pid, signal.SIGSTOP)
    try:
        exit_code = broker.stop()
    finally:
        os.kill(zookeeper.pid, signal.SIGCONT)
    assert exit_code == OVERDUE_EXIT_CODE, broker.log_tail()
    log_text = broker.log_text()
    assert f"did not finish within 3 s: gave up {ZOOKEEPER_STEP}" in log_text, log_text
    assert not clean_shutdown_marker_exists(broker.data_dir)


def test_an_election_whose_zookeeper_stops_answering_is_a_store_error(
    zookeeper: LocalZooKeeper,
) -> None:
    """The controller retries a MetadataStoreError; kazoo's own ConnectionLoss, which the
    election let through, ended the controller's task and with it the broker."""

    async def elect_while_paused() -> None:
        store = ZooKeeperMetadataStore(
            f"{zookeeper.connect}/election", session_timeout_s=SESSION_TIMEOUT_MS / 1000
        )
        await store.start()
        try:
            os.kill(zookeeper.pid, signal.SIGSTOP)
            try:
                with pytest.raises(MetadataStoreError):
                    await store.elect_controller(0)
            finally:
                os.kill(zookeeper.pid, signal.SIGCONT)
        finally:
            await store.close()

    asyncio.run(elect_while_paused())
