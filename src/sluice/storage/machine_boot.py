"""Whether the machine went down since the data directory's previous run.

An append reaches the page cache before it returns (``pwrite``, no user-space buffer:
:meth:`~sluice.storage.segment.LogSegment.append`), so a broker process that dies
without a clean shutdown (kill -9, an out-of-memory kill, a crash) loses nothing it
appended: the kernel still holds those pages and writes them back. Only a machine that
goes down (power loss, kernel panic, reset) loses the unsynced tail. Linux names each
boot (``/proc/sys/kernel/random/boot_id``); the broker keeps the one it started under in
the data directory, and the next start compares it with the current one::

    same boot id           the machine stayed up: every appended record is on the files
    another, or no record  it may have gone down: the unsynced tails may be lost
    no boot id (not Linux) unknown: counted as gone down

Kafka counts every start without its clean-shutdown file as one that may have lost its
tail; Sluice keeps that only where the machine may have gone down, so a broker that was
kill -9'd stays an in-sync replica the controller can elect (the simulator found a
partition whose one intact replica was passed over for one whose machine crashed).
"""

from __future__ import annotations

import os
from pathlib import Path

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
"""Where Linux names the current boot (a random UUID, new at each boot)."""

BOOT_RECORD_NAME = ".machine-boot"
"""Written in the data directory at each start: the boot id the broker started under."""


def current_boot_id(source: Path = BOOT_ID_PATH) -> str | None:
    """The current boot's id, or None where the system does not say."""
    try:
        boot_id = source.read_text().strip()
    except OSError:
        return None
    return boot_id or None


def same_boot_as_previous_run(data_directory: Path, source: Path = BOOT_ID_PATH) -> bool:
    """Whether the data directory's previous run started under the current boot (so
    the machine did not go down since, whatever became of the process)."""
    boot_id = current_boot_id(source)
    if boot_id is None:
        return False
    try:
        recorded = (data_directory / BOOT_RECORD_NAME).read_text().strip()
    except OSError:
        return False
    return recorded == boot_id


def record_boot(data_directory: Path, source: Path = BOOT_ID_PATH) -> None:
    """Note the current boot in the data directory (call once the logs are open). Not
    synced: a machine that goes down before it reaches the disk boots under another id,
    which no record, lost or torn, can match."""
    boot_id = current_boot_id(source)
    record = data_directory / BOOT_RECORD_NAME
    if boot_id is None:
        record.unlink(missing_ok=True)
        return
    temporary = record.with_name(record.name + ".tmp")
    temporary.write_text(boot_id + "\n")
    os.replace(temporary, record)
