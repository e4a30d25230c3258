"""A shutdown that ends on time and says what it waits for.

The first SIGTERM or SIGINT starts the broker's clean shutdown (listeners closed, the
cluster left, every log closed, then the ``.clean-shutdown`` marker). The broker names
each step as it begins (:meth:`ShutdownWatch.step`), and a watchdog thread, which runs
even when the event loop is stuck::

    signal ─▶ begin() ─▶ step("closing the listeners") ─▶ step(...) ─▶ ... ─▶ finished()
               │
               └─ watchdog thread: a step running longer than SLOW_STEP_S is said once
                  ("still waiting for ZooKeeper to close the session after 2 s"); at
                  sluice.shutdown.timeout.ms after the signal the process ends at
                  once, saying which step it gave up on

A second SIGTERM or SIGINT during the shutdown ends the process at once
(:meth:`ShutdownWatch.second_signal`). Either way the logs stay consistent: the marker is
written only after every log was closed, so a process that ends before it has no
marker, and the next start recovers its logs from their recovery points. A shutdown
whose marker is written and that still hangs (a worker thread that does not end) ends
with status 0 at the bound: nothing is left to lose.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 25.0
"""From the first signal to the process's end, at most (``sluice.shutdown.timeout.ms``'s
default). Below Kubernetes' default grace period (terminationGracePeriodSeconds, 30 s)
and systemd's (TimeoutStopSec, 90 s), so the broker's own account of what it waited for
reaches the log before their SIGKILL; far above a clean shutdown's usual second or two
(flushing thousands of logs included)."""
SLOW_STEP_S = 2.0
"""A shutdown step running longer than this is said in the log, once."""
WATCH_INTERVAL_S = 0.25
"""How often the watchdog thread looks at the running step."""
OVERDUE_EXIT_CODE = 1
"""The status of a process whose shutdown was cut short before its marker."""


def exit_code_of_signal(signum: int) -> int:
    """A shell's status for a process ended by ``signum`` (128 + its number)."""
    return 128 + signum


class ShutdownWatch:
    """The running shutdown step, a watchdog that ends the process at the bound, and
    the second signal's way out. ``exit`` ends the process (``os._exit`` for the
    process of ``sluice serve``: no cleanup, which is what hangs); None, for a broker
    that does not own its process (one in a test's thread), only says what is slow and
    when the bound has passed. ``timeout_s`` is the bound."""

    def __init__(
        self,
        timeout_s: float = SHUTDOWN_TIMEOUT_S,
        *,
        slow_step_s: float = SLOW_STEP_S,
        exit: Callable[[int], object] | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self._slow_step_s = slow_step_s
        self._exit = exit
        self._lock = threading.Lock()
        self._began: float | None = None
        self._step = "stopping"
        self._step_began = 0.0
        self._step_said = False
        self._marker_written = False
        self._ended = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def begun(self) -> bool:
        return self._began is not None

    def begin(self) -> None:
        """The shutdown starts now: start the watchdog (once)."""
        with self._lock:
            if self._began is not None:
                return
            self._began = self._step_began = time.monotonic()
        self._thread = threading.Thread(target=self._watch, name="shutdown watchdog", daemon=True)
        self._thread.start()

    def step(self, what: str, *, say: bool = True) -> None:
        """The shutdown now waits for ``what`` ("flushing 53 logs"), said at INFO unless
        ``say`` is False (then only if it turns out slow)."""
        with self._lock:
            self._step, self._step_began, self._step_said = what, time.monotonic(), False
        if say:
            log.info("shutting down: %s", what)

    def marker_written(self) -> None:
        """Every log is closed and the clean-shutdown marker written."""
        self._marker_written = True

    def finished(self) -> None:
        """The watchdog ends: nothing is left to bound."""
        self._ended.set()

    def broker_stopped(self) -> None:
        """The broker's shutdown returned (cleanly or not). A watch that ends the process
        keeps watching its way out (the worker threads end after); one that does not
        is done."""
        if self._exit is None:
            self.finished()

    def second_signal(self, signum: int) -> None:
        """A second SIGTERM or SIGINT: end the process now."""
        name = signal.Signals(signum).name
        with self._lock:
            step = self._step
        if self._marker_written:
            log.warning("%s again while %s: exiting now (the logs were closed)", name, step)
        else:
            log.warning(
                "%s again while %s: exiting now, without closing the logs; the next start "
                "recovers them",
                name,
                step,
            )
        self._end_process(exit_code_of_signal(signum))

    def _end_process(self, code: int) -> None:
        if self._exit is not None:
            self._exit(code)

    def _watch(self) -> None:
        began = self._began
        assert began is not None
        deadline = began + self.timeout_s
        while not self._ended.wait(WATCH_INTERVAL_S):
            now = time.monotonic()
            with self._lock:
                step, step_began, said = self._step, self._step_began, self._step_said
                slow = not said and now - step_began >= self._slow_step_s
                if slow:
                    self._step_said = True
            if now >= deadline:
                self._overdue(step)
                return
            if slow:
                log.warning(
                    "shutting down: still %s after %.0f s (the broker exits at the latest "
                    "%.0f s after the signal)",
                    step,
                    now - step_began,
                    self.timeout_s,
                )

    def _overdue(self, step: str) -> None:
        if self._marker_written:
            log.warning(
                "stopped cleanly, but still %s %.0f s after the signal: exiting now",
                step,
                self.timeout_s,
            )
            self._end_process(0)
            return
        if self._exit is None:
            log.error("shutdown did not finish within %.0f s: still %s", self.timeout_s, step)
            return
        log.error(
            "shutdown did not finish within %.0f s: gave up %s; exiting without closing "
            "the logs (no clean-shutdown marker: the next start recovers them)",
            self.timeout_s,
            step,
        )
        self._end_process(OVERDUE_EXIT_CODE)
