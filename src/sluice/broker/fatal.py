"""Fatal storage errors: the one-line message that tells an operator what failed and
what to do, and the broker's way out when its disk can no longer be trusted.

::

    storage error ─▶ FatalStorageStop.fail(message) ─▶ first message kept as ``error``
                                                    ─▶ the broker is asked to stop
                     (later failures change nothing)

The broker then stops without closing (fsyncing, checkpointing) its logs and without
the clean-shutdown marker, so the next start recovers every log.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path


class BrokerFatalError(Exception):
    """The broker cannot go on, or cannot start, because of its storage. The message is
    one line: what failed, on which file or directory, and what to do. The broker
    leaves no clean-shutdown marker behind it."""


def os_error_of(error: BaseException) -> OSError | None:
    """The OSError behind ``error`` (itself, or down its chain of causes)."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__
    return cause


def describe_os_error(error: BaseException) -> str:
    """``error`` as one line: the OS's words, and the file when the error names one."""
    cause = os_error_of(error)
    if cause is not None and cause.strerror:
        where = f" ({cause.filename})" if cause.filename else ""
        return f"{cause.strerror}{where}"
    return str(error).removeprefix("KAFKA_STORAGE_ERROR: ")


def what_to_do(error: BaseException) -> str:
    """The advice that ends a fatal storage message, chosen by the OS error number."""
    cause = os_error_of(error)
    number = cause.errno if cause is not None else None
    if number in (errno.ENOSPC, errno.EDQUOT):
        return "free space on that filesystem, then start the broker again"
    if number == errno.EROFS:
        return (
            "make the filesystem writable (it may have been remounted read-only after "
            "a disk error: check the kernel log), then start the broker again"
        )
    if number in (errno.EACCES, errno.EPERM):
        return "give the broker's user write access to the data directory"
    return "check the disk and the kernel log (dmesg) before starting the broker again"


class FatalStorageStop:
    """Remembers the first fatal storage error of the broker whose data directory is
    ``data_dir`` and asks that broker to stop (``request_stop``)."""

    def __init__(self, data_dir: Path, request_stop: Callable[[], None]) -> None:
        self._data_dir = data_dir
        self._request_stop = request_stop
        self.error: BrokerFatalError | None = None
        """Set by :meth:`fail`: the broker is stopping without the clean-shutdown marker."""

    def fail(self, message: str) -> None:
        """Stop because of a fatal storage error: no more fsyncs, no checkpoints, no
        clean-shutdown marker. The first failure is the one reported."""
        if self.error is None:
            self.error = BrokerFatalError(message)
        self._request_stop()

    def check_storage_error(self, error: BaseException, topic_partition: object) -> None:
        """A request met a storage error: an I/O error (EIO, from a write or an fsync
        before an acknowledgement) means the disk may have lost written data, so the
        broker stops (:meth:`fail`); other errors (full, read-only) are the request's."""
        cause = os_error_of(error)
        if cause is not None and cause.errno == errno.EIO:
            self.fail(
                f"writing partition {topic_partition} in {self._data_dir} failed: "
                f"{describe_os_error(error)}; the broker stops without the clean-shutdown "
                f"marker and the next start recovers the logs; {what_to_do(error)}"
            )
