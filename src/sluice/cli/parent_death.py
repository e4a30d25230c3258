"""Child processes that die with the process that started them.

``sluice dev-cluster`` starts ZooKeeper and brokers in sessions of their own, so that
Ctrl-C in a terminal reaches only the parent, which then stops them in order. Whatever
ends the parent otherwise (SIGKILL, a crash, a closed terminal it did not survive) must
not leave them running: on Linux each child asks the kernel, between fork and exec, for
a signal when its parent dies (``prctl(PR_SET_PDEATHSIG)``), and kills itself at once if
the parent already died before it asked. The request survives exec (not that of a
set-user-ID program).

The kernel sends the signal when the *thread* that forked the child ends, not only the
process: start such children from a thread that outlives them (the main thread).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
"""prctl's option: the signal a process gets when its parent dies (linux/prctl.h)."""


def die_with_parent(signum: signal.Signals = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen`` that makes the child get ``signum`` when
    this process (the thread calling this) dies; None where the kernel has no such
    request (not Linux): then children outlive a parent that dies without stopping
    them."""
    if not sys.platform.startswith("linux"):
        return None
    # Looked up here, before the fork: the child only makes the call.
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent_pid = os.getpid()
    signal_number = int(signum)

    def in_child() -> None:
        if prctl(PR_SET_PDEATHSIG, signal_number, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent_pid:  # the parent died before the request was made
            os.kill(os.getpid(), signal_number)

    return in_child
