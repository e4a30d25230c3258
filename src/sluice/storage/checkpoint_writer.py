"""Ordered writes of one partition's checkpoint files, from any thread.

The thread that owns the log (the event loop) decides what to write: it snapshots the
values, encodes them and queues the bytes as a :class:`CheckpointJob`. The files are
written (temp file, fsync, rename, fsync of the directory: ``checkpoint``) by whoever
runs a job, usually a worker thread, so the two fsyncs of each file never stall the
loop. Running a job writes every job queued before it first, in order, one thread at a
time::

    queue:  [j1 j2 j3]      run(j2) ─► writes j1, then j2     (queue: [j3])
                            run(j1) ─► nothing left to write  (j1 landed with j2)
                            run(j3) ─► writes j3

    owner (loop)            worker thread                     owner, a rare write
    ─────────────────────   ───────────────────────────────   ────────────────────
    job = submit(files)  ─► run(job) under the lock           write_now(files): queue,
    (values snapshotted     temp, fsync, rename, fsync(dir)   then run; waits for a
     here, never later)                                       run in flight to end

So two writes of the same file never overlap and never land out of order: a later
write is never overtaken by an earlier one, and files queued together land in the order
given (the leader-epoch checkpoint before the partition checkpoint whose recovery point
relies on it). Each file is replaced atomically, so a crash at any instant leaves the
old or the new one whole. A job not yet run when the process dies is simply lost: a
checkpoint may lag (recovery then rescans a little more), never run ahead.

A write that fails raises OSError in the thread that ran it, exactly as the write did
when it ran on the loop (the flusher stops the broker on it; a rare write answers the
request with a storage error); its job is dropped, the jobs queued after it stay queued,
and the log writes the files again on its next checkpoint.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sluice.storage.checkpoint import write_file_atomically


@dataclass(frozen=True, slots=True)
class CheckpointJob:
    """Files to replace whole, in this order; see :meth:`CheckpointWriter.run`."""

    files: tuple[tuple[Path, bytes], ...]
    sequence: int
    """Its place in the writer's queue (1, 2, ...)."""
    writer: CheckpointWriter

    def run(self) -> None:
        """Write this job and every one queued before it (any thread). Raises OSError."""
        self.writer.run(self)


class CheckpointWriter:
    """The serial writer of one log's checkpoint files (see the module docstring).

    :meth:`submit` and :meth:`write_now` are for the log's owner only; :meth:`run` is
    safe on any thread."""

    def __init__(self, write_file: Callable[[Path, bytes], None] = write_file_atomically) -> None:
        self._write_file = write_file
        """Replaces one file whole: ``checkpoint.write_file_atomically``, or a wrapper
        of it that observes or holds each write (tests)."""
        self._lock = threading.Lock()
        """Held while files are written: one writing thread at a time."""
        self._queue: collections.deque[CheckpointJob] = collections.deque()
        """Submitted, not yet written, in order. Appended by the owner without the lock
        (a deque's append and popleft are atomic); taken from under the lock."""
        self._submitted = 0
        self._taken = 0
        """The sequence of the last job taken from the queue (under the lock)."""

    @property
    def pending(self) -> int:
        """Jobs submitted and not taken from the queue yet."""
        return self._submitted - self._taken

    def submit(self, files: Sequence[tuple[Path, bytes]]) -> CheckpointJob:
        """Queue ``files`` (path, contents) to be written after everything queued."""
        self._submitted += 1
        job = CheckpointJob(tuple(files), self._submitted, self)
        self._queue.append(job)
        return job

    def run(self, job: CheckpointJob) -> None:
        """Write every queued job up to and including ``job``, in order; nothing when
        another run already took it. Raises OSError when a write fails (that job is
        dropped: each job is taken once, written or not)."""
        assert job.writer is self, "a job runs on the writer that queued it"
        with self._lock:
            while self._taken < job.sequence:
                queued = self._queue.popleft()
                assert queued.sequence == self._taken + 1, "jobs are taken in order"
                self._taken = queued.sequence
                for path, data in queued.files:
                    self._write_file(path, data)

    def write_now(self, files: Sequence[tuple[Path, bytes]]) -> None:
        """Queue ``files`` and write them, with everything queued before, on this
        thread. For the owner's rare writes that must be on disk before it goes on
        (opening, truncation, DeleteRecords, close); it waits for a run in flight."""
        self.run(self.submit(files))
