"""Children started with :func:`sluice.cli.parent_death.die_with_parent` end when the
process that started them is killed, which cannot stop them itself; without it they
would run on (the reason ``sluice dev-cluster`` uses it)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import psutil
import pytest
from client_helpers import wait_until

pytestmark = pytest.mark.integration

CHILD_LIFETIME_S = 300
"""How long the child would sleep on its own: far longer than the test waits."""
PARENT_TIMEOUT_S = 30.0

_PARENT = textwrap.dedent(
    """
    import subprocess, sys
    from sluice.cli.parent_death import die_with_parent

    child = subprocess.Popen(
        ["sleep", sys.argv[1]],
        start_new_session=True,
        preexec_fn=die_with_parent() if sys.argv[2] == "yes" else None,
    )
    print(child.pid, flush=True)
    sys.stdin.read()  # until killed
    """
)


def _child_of_killed_parent(die_with_parent: bool) -> int:
    """The pid of a child whose parent was just killed with SIGKILL."""
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(CHILD_LIFETIME_S), "yes" if die_with_parent else "no"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None and parent.stdin is not None
    try:
        child_pid = int(parent.stdout.readline())
        assert psutil.Process(child_pid).status() != psutil.STATUS_ZOMBIE
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait(PARENT_TIMEOUT_S)
        parent.stdout.close()
        parent.stdin.close()
    return child_pid


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_child_dies_with_its_killed_parent() -> None:
    child_pid = _child_of_killed_parent(die_with_parent=True)
    wait_until(lambda: _gone(child_pid), "the child of a killed parent ends")


def test_without_it_the_child_outlives_its_parent() -> None:
    child_pid = _child_of_killed_parent(die_with_parent=False)
    try:
        assert not _gone(child_pid), "the sleep ended with its parent on its own"
    finally:
        child = psutil.Process(child_pid)
        child.kill()
        child.wait(PARENT_TIMEOUT_S)
