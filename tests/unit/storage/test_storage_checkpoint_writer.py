"""The serial checkpoint writer: jobs land in the order they were queued, whichever
thread runs them, one write at a time; a write in flight holds back the owner's own
write until it landed; a failed write raises in the thread that ran it. Every write is a
real atomic file replacement; the observing wrapper only records it, or holds it on a
threading.Event the test controls."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sluice.storage.checkpoint import read_offsets_checkpoint, write_file_atomically
from sluice.storage.checkpoint_writer import CheckpointWriter

DEADLINE_S = 30.0
"""Longest wait for another thread to reach a point (a bound, never a pause)."""


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.001)  # polling a condition with a deadline


class ObservedWrites:
    """Wraps the real atomic write: records ("start"/"end", contents) of each, and
    holds a write whose contents are in :attr:`hold` until :attr:`release` is set."""

    def __init__(self) -> None:
        self.events: list[tuple[str, bytes]] = []
        self.hold: set[bytes] = set()
        self.held = threading.Event()
        self.release = threading.Event()
        self.fail: set[bytes] = set()

    def __call__(self, path: Path, data: bytes) -> None:
        self.events.append(("start", data))
        if data in self.hold:
            self.held.set()
            assert self.release.wait(DEADLINE_S), "the test never released the write"
        if data in self.fail:
            raise OSError(errno.EIO, "Input/output error")
        write_file_atomically(path, data)
        self.events.append(("end", data))

    @property
    def written(self) -> list[bytes]:
        return [data for kind, data in self.events if kind == "end"]


def test_a_job_runs_every_job_queued_before_it_in_order(tmp_path: Path) -> None:
    writes = ObservedWrites()
    writer = CheckpointWriter(writes)
    first = writer.submit([(tmp_path / "a", b"a1"), (tmp_path / "b", b"b1")])
    writer.submit([(tmp_path / "a", b"a2")])
    third = writer.submit([(tmp_path / "b", b"b2")])
    assert writer.pending == 3
    assert not (tmp_path / "a").exists(), "nothing is written before a job runs"

    third.run()
    assert writes.written == [b"a1", b"b1", b"a2", b"b2"]
    assert writer.pending == 0
    first.run()  # already landed with the third: not written again
    assert writes.written == [b"a1", b"b1", b"a2", b"b2"]
    assert (tmp_path / "a").read_bytes() == b"a2"
    assert (tmp_path / "b").read_bytes() == b"b2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"], "no temp file left"


def test_an_earlier_job_run_late_never_overwrites_a_later_one(tmp_path: Path) -> None:
    """The flusher's job, taken before a truncation's checkpoint written at once, must
    not land after it with its stale values."""
    path = tmp_path / "partition.checkpoint"
    writer = CheckpointWriter()
    stale = writer.submit([(path, b"0\nrecovery_point 10\n")])
    writer.write_now([(path, b"0\nrecovery_point 4\n")])
    stale.run()
    assert read_offsets_checkpoint(path) == {"recovery_point": 4}


def test_the_owners_write_waits_for_a_write_in_flight_and_lands_after_it(
    tmp_path: Path,
) -> None:
    """A worker thread is held in the middle of a write (inside the lock); the owner's
    write_now (a close, a truncation) must not start its own until that one landed."""
    path = tmp_path / "partition.checkpoint"
    writes = ObservedWrites()
    writes.hold.add(b"old")
    writer = CheckpointWriter(writes)
    job = writer.submit([(path, b"old")])
    worker = threading.Thread(target=job.run)
    worker.start()
    owner = threading.Thread(target=writer.write_now, args=([(path, b"new")],))
    try:
        assert writes.held.wait(DEADLINE_S), "the worker's write never started"
        owner.start()
        wait_for(lambda: writer.pending == 1, "the owner's write to be queued")
        assert writes.events == [("start", b"old")], "the owner wrote during the worker's write"
    finally:
        writes.release.set()
        worker.join(DEADLINE_S)
        if owner.ident is not None:  # started
            owner.join(DEADLINE_S)
    assert not worker.is_alive() and not owner.is_alive()
    assert writes.events == [("start", b"old"), ("end", b"old"), ("start", b"new"), ("end", b"new")]
    assert path.read_bytes() == b"new"


def test_a_failed_write_raises_where_it_ran_and_the_jobs_after_it_still_land(
    tmp_path: Path,
) -> None:
    path = tmp_path / "partition.checkpoint"
    writes = ObservedWrites()
    writes.fail.add(b"lost")
    writer = CheckpointWriter(writes)
    failing = writer.submit([(path, b"lost")])
    later = writer.submit([(path, b"later")])
    errors: list[BaseException] = []

    def run_on_worker() -> None:
        try:
            failing.run()
        except OSError as e:
            errors.append(e)

    worker = threading.Thread(target=run_on_worker)
    worker.start()
    worker.join(DEADLINE_S)
    assert [getattr(e, "errno", None) for e in errors] == [errno.EIO]
    assert not path.exists()
    assert writer.pending == 1, "the failed job was dropped, the later one kept"
    later.run()
    assert path.read_bytes() == b"later"


def test_a_write_now_behind_a_failing_job_raises_and_its_own_job_lands_on_the_next_run(
    tmp_path: Path,
) -> None:
    path = tmp_path / "partition.checkpoint"
    writes = ObservedWrites()
    writes.fail.add(b"lost")
    writer = CheckpointWriter(writes)
    writer.submit([(path, b"lost")])
    with pytest.raises(OSError, match="Input/output error"):
        writer.write_now([(path, b"mine")])
    writer.write_now([(path, b"next")])
    assert writes.written == [b"mine", b"next"]
    assert path.read_bytes() == b"next"
