"""The advice a refused data directory ends with, for the OS errors that a test cannot
bring about on every machine (a root test process may write anywhere, and no test fills
a disk); the errors it can are met by real starts in
tests/integration/test_serve_start_errors.py."""

from __future__ import annotations

import errno
import os

import pytest

from sluice.broker.data_dir import advice


@pytest.mark.parametrize(
    ("number", "says"),
    [
        (errno.EACCES, "may not write there: give it write access"),
        (errno.EPERM, "may not write there: give it write access"),
        (errno.EROFS, "read-only filesystem: remount it read-write"),
        (errno.ENOSPC, "free space on that filesystem"),
        (errno.EDQUOT, "free space on that filesystem"),
        (errno.ENOENT, "takes no new files"),
        (errno.EIO, "kernel log"),
    ],
)
def test_each_error_gets_its_own_advice(number: int, says: str) -> None:
    text = advice(OSError(number, os.strerror(number), "/data/.lock"))
    assert says in text
    if number != errno.EIO:
        assert "pass --data-dir another directory" in text
