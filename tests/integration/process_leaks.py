"""A pytest plugin that fails a test session (each xdist worker's) if a process it started
is still running at its end.

Every fixture that starts a broker, ZooKeeper, a console or a client process stops it on
every path; this is the check that they did. At the end of the session (after every
fixture was torn down) the processes descending from the test process are listed from
``/proc``; any still running (not a zombie) that did not exist at the start is killed
and named in an error on the session's last test, with its command line, so the fixture
that leaked it can be found.

Registered by the conftests of the suites that start processes (under
:data:`PLUGIN_NAME`, so that ``-p no:sluice-process-leaks`` turns it off).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PLUGIN_NAME = "sluice-process-leaks"
KILL_TIMEOUT_S = 10.0
"""How long a leftover process may take to vanish after SIGKILL."""
POLL_INTERVAL_S = 0.05
KEPT_UNTIL_EXIT = ("org.apache.spark.deploy.SparkSubmit",)
"""Command-line marks of processes that live until the interpreter exits by design:
pyspark keeps its gateway JVM after the Spark session stops (and with it the Python
worker daemons it started, which it reuses; they are its children)."""


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    parent_pid: int
    state: str
    command: str


def _read_process(pid: int) -> ProcessInfo | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone meanwhile
        return None
    # The command name (2nd field) is in parentheses and may hold spaces.
    state, parent_pid = stat[stat.rindex(")") + 2 :].split()[:2]
    text = command.replace(b"\0", b" ").decode(errors="replace").strip()
    return ProcessInfo(pid, int(parent_pid), state, text)


def descendants(pid: int) -> list[ProcessInfo]:
    """The processes below ``pid`` (children, their children...), as ``/proc`` lists
    them now."""
    processes = [
        info
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and (info := _read_process(int(entry.name))) is not None
    ]
    children: dict[int, list[ProcessInfo]] = {}
    for info in processes:
        children.setdefault(info.parent_pid, []).append(info)
    found: list[ProcessInfo] = []
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child.pid)
    return found


def running_leftovers(pid: int, existing: set[int]) -> list[ProcessInfo]:
    """Descendants of ``pid`` still running that are not in ``existing`` (nor kept
    until exit by design)."""
    found = descendants(pid)
    by_pid = {info.pid: info for info in found}
    kept = {info.pid for info in found if any(mark in info.command for mark in KEPT_UNTIL_EXIT)}

    def under_kept(info: ProcessInfo) -> bool:
        """The process or one of its ancestors lives until exit by design (the gateway
        JVM's own Python workers, which Spark reuses and stops with it)."""
        current: ProcessInfo | None = info
        while current is not None:
            if current.pid in kept:
                return True
            current = by_pid.get(current.parent_pid)
        return False

    return [
        info
        for info in found
        if info.pid not in existing and info.state != "Z" and not under_kept(info)
    ]


def kill(processes: list[ProcessInfo]) -> None:
    """SIGKILL each (SIGCONT first, in case a test paused it) and wait, bounded, until it
    is gone (reaped when it is our child)."""
    for info in processes:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            with contextlib.suppress(ProcessLookupError):
                os.kill(info.pid, sig)
    deadline = time.monotonic() + KILL_TIMEOUT_S
    for info in processes:
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(info.pid, os.WNOHANG)
            current = _read_process(info.pid)
            if current is None or current.state == "Z":
                break
            time.sleep(POLL_INTERVAL_S)  # polling interval until the kernel removed it


@pytest.fixture(scope="session", autouse=True)
def no_process_outlives_the_session() -> Iterator[None]:
    existing = {info.pid for info in descendants(os.getpid())}
    yield
    leftovers = running_leftovers(os.getpid(), existing)
    if not leftovers:
        return
    kill(leftovers)
    named = "\n".join(f"  pid {p.pid} (parent {p.parent_pid}): {p.command}" for p in leftovers)
    pytest.fail(
        f"{len(leftovers)} process(es) started by this test session were still running at "
        f"its end (a fixture did not stop them); killed now:\n{named}",
        pytrace=False,
    )


def register(config: pytest.Config) -> None:
    """Register this plugin once (a conftest calls it from ``pytest_configure``)."""
    manager = config.pluginmanager
    if not manager.has_plugin(PLUGIN_NAME) and not manager.is_blocked(PLUGIN_NAME):
        manager.register(sys.modules[__name__], PLUGIN_NAME)
