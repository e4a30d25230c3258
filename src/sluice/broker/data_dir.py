"""The data directory made ready before a broker starts, or refused in one line.

A data directory that cannot be used (a file where the directory should be, a parent
that cannot hold it, a read-only filesystem, a directory the broker's user may not
write, a pseudo-filesystem such as ``/proc`` that takes no files) stops the start with
a :class:`~sluice.broker.fatal.BrokerFatalError` saying what was wrong and what to do,
never a traceback. Nothing is written before the directory is known to be usable.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import IO

from sluice.broker.fatal import BrokerFatalError, os_error_of, what_to_do

ANOTHER_DIRECTORY = "pass --data-dir another directory"
"""The way out of every data-directory problem, ended by what the other one needs."""


def advice(error: BaseException) -> str:
    """What to do about ``error``, met while creating or first writing a data
    directory, chosen by its OS error number."""
    cause = os_error_of(error)
    number = cause.errno if cause is not None else None
    if number == errno.EROFS:
        return (
            "it is on a read-only filesystem: remount it read-write or "
            f"{ANOTHER_DIRECTORY}, on a writable filesystem"
        )
    if number in (errno.EACCES, errno.EPERM):
        return (
            f"the broker's user (uid {os.geteuid()}) may not write there: give it write "
            f"access or {ANOTHER_DIRECTORY}, one it may write"
        )
    if number == errno.ENOENT:
        return (
            "that filesystem takes no new files (a pseudo-filesystem such as /proc or "
            f"/sys): {ANOTHER_DIRECTORY}, on a disk's filesystem"
        )
    if number in (errno.ENOSPC, errno.EDQUOT):
        return f"free space on that filesystem or {ANOTHER_DIRECTORY}, on another filesystem"
    if number in (errno.ENOTDIR, errno.EEXIST):
        return f"a file is in its path: {ANOTHER_DIRECTORY}"
    return what_to_do(error)


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def create_data_dir(data_dir: Path) -> None:
    """Make ``data_dir`` (with its parents) unless it is a directory already."""
    try:
        if data_dir.is_dir():
            return
        if data_dir.exists():
            raise BrokerFatalError(
                f"the data directory {data_dir} is a file, not a directory: pass --data-dir "
                "a directory (it is created if missing)"
            )
        data_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise BrokerFatalError(
            f"cannot create the data directory {data_dir}: a file is in its path; pass "
            "--data-dir a directory (it is created if missing)"
        ) from None
    except OSError as e:
        raise BrokerFatalError(
            f"cannot create the data directory {data_dir}: {_reason(e)}; {advice(e)}"
        ) from None


def open_in_data_dir(data_dir: Path, name: str) -> IO[bytes]:
    """Open (creating or truncating) the file ``name`` of ``data_dir``: the first write
    of a start, which shows whether the directory takes files at all."""
    try:
        return open(data_dir / name, "wb")
    except OSError as e:
        where = f" ({e.filename})" if e.filename else ""
        raise BrokerFatalError(
            f"cannot write in the data directory {data_dir}: {_reason(e)}{where}; {advice(e)}"
        ) from None
