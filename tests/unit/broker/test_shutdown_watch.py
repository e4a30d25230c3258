"""The shutdown's watchdog and second signal (sluice.broker.shutdown), with the
process's end replaced by a recorder; real processes are in
tests/cluster/test_shutdown_cluster.py."""

from __future__ import annotations

import logging
import signal
import threading

import pytest

from sluice.broker.shutdown import OVERDUE_EXIT_CODE, ShutdownWatch, exit_code_of_signal

WAIT_S = 10.0
"""Bound of every wait for the watchdog thread."""


class Exits:
    """Records the exit codes a watch asked for."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self.asked = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.asked.set()


def test_a_shutdown_past_its_bound_ends_the_process_naming_the_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exits = Exits()
    watch = ShutdownWatch(0.3, slow_step_s=0.1, exit=exits)
    watch.begin()
    watch.step("waiting for something that never comes")
    assert exits.asked.wait(WAIT_S)
    assert exits.codes == [OVERDUE_EXIT_CODE]
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("still waiting for something that never comes" in m for m in messages)
    assert any("gave up waiting for something that never comes" in m for m in messages)


def test_a_shutdown_that_wrote_its_marker_ends_with_status_zero() -> None:
    exits = Exits()
    watch = ShutdownWatch(0.2, exit=exits)
    watch.begin()
    watch.marker_written()
    watch.step("waiting for the worker threads to end", say=False)
    assert exits.asked.wait(WAIT_S)
    assert exits.codes == [0]


def test_a_finished_shutdown_ends_nothing() -> None:
    exits = Exits()
    watch = ShutdownWatch(0.2, exit=exits)
    watch.begin()
    watch.finished()
    assert not exits.asked.wait(0.5)  # a while past the bound: nothing is asked for


def test_a_second_signal_ends_the_process_at_once(caplog: pytest.LogCaptureFixture) -> None:
    exits = Exits()
    watch = ShutdownWatch(60.0, exit=exits)
    watch.begin()
    watch.step("flushing and closing 3 partition log(s)")
    watch.second_signal(signal.SIGINT)
    assert exits.codes == [exit_code_of_signal(signal.SIGINT)] == [130]
    assert "SIGINT again while flushing and closing 3 partition log(s)" in caplog.text
    assert "the next start recovers them" in caplog.text
    watch.finished()


def test_without_an_exit_the_watch_only_says_what_is_late(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broker in a test's thread does not own its process."""
    watch = ShutdownWatch(0.2)
    watch.begin()
    watch.step("closing the metadata store", say=False)
    deadline_said = threading.Event()

    class Said(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "did not finish within" in record.getMessage():
                deadline_said.set()

    handler = Said()
    logging.getLogger("sluice.broker.shutdown").addHandler(handler)
    try:
        assert deadline_said.wait(WAIT_S)
    finally:
        logging.getLogger("sluice.broker.shutdown").removeHandler(handler)
        watch.finished()
