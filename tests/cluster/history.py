"""The real-process fault tests' side of histories: a :class:`History` that several
client threads append to, saved to and loaded from a file, and the final reads of
stopped brokers' partition directories (:func:`read_replica_log`). The operations, the
anomalies and the checker are :mod:`sluice.sim.history`'s, shared with the simulator."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from sluice.common.clock import SYSTEM_CLOCK
from sluice.common.config import TopicConfig
from sluice.protocol.records.builder import decode_batches
from sluice.sim import history as shared
from sluice.sim.history import (
    ABORTED_READ,
    ANOMALY_KINDS,
    DUPLICATE,
    EXAMPLES_PER_ANOMALY_MAX,
    INCONSISTENT_OFFSETS,
    LOST_WRITE,
    NONMONOTONIC_POLL,
    NONMONOTONIC_SEND,
    OUTCOMES,
    POLL_SKIP,
    REPLICA_DIVERGENCE,
    TORN_TRANSACTION,
    Anomaly,
    Assign,
    CheckResult,
    FinalRead,
    Operation,
    Outcome,
    Poll,
    PolledRecord,
    Send,
    TopicPartition,
    Transaction,
    Value,
    check,
)
from sluice.storage import PartitionLog

__all__ = [
    "ABORTED_READ",
    "ANOMALY_KINDS",
    "DUPLICATE",
    "EXAMPLES_PER_ANOMALY_MAX",
    "INCONSISTENT_OFFSETS",
    "LOST_WRITE",
    "NONMONOTONIC_POLL",
    "NONMONOTONIC_SEND",
    "OUTCOMES",
    "POLL_SKIP",
    "REPLICA_DIVERGENCE",
    "TORN_TRANSACTION",
    "Anomaly",
    "Assign",
    "CheckResult",
    "FinalRead",
    "History",
    "Operation",
    "Outcome",
    "Poll",
    "PolledRecord",
    "ReplicaLog",
    "Send",
    "TopicPartition",
    "Transaction",
    "Value",
    "check",
    "read_replica_log",
]

REPLICA_READ_BYTES_MAX = 1 << 20
"""Bytes read from a replica's log at a time by :func:`read_replica_log`."""


class History(shared.History):
    """A history that client threads append to at once, saved to a file for a look
    after a failure."""

    def __init__(
        self, operations: Iterable[Operation] = (), final_reads: Iterable[FinalRead] = ()
    ) -> None:
        self._lock = threading.Lock()
        super().__init__(operations, final_reads)

    def add(self, operation: Operation) -> None:
        with self._lock:
            super().add(operation)

    def final_read(self, read: FinalRead) -> None:
        with self._lock:
            super().final_read(read)

    @property
    def operations(self) -> list[Operation]:
        with self._lock:
            return super().operations

    @property
    def final_reads(self) -> list[FinalRead]:
        with self._lock:
            return super().final_reads

    def dump(self, path: Path) -> None:
        path.write_text(self.to_json())

    @classmethod
    def load(cls, path: Path) -> History:
        return cls.from_json(path.read_text())


@dataclass(frozen=True, slots=True)
class ReplicaLog:
    """Every data record of a stopped replica's partition log, up to its log end."""

    records: list[tuple[int, bytes | None]]
    log_start_offset: int
    high_watermark: int
    log_end_offset: int

    def final_read(
        self, partition: TopicPartition, replica: int, decode: Callable[[bytes | None], Value]
    ) -> FinalRead:
        """This log as a :class:`FinalRead`, each record's value turned back into the
        test's value by ``decode``."""
        return FinalRead(
            partition,
            replica,
            tuple((offset, decode(value)) for offset, value in self.records),
            self.high_watermark,
            self.log_start_offset,
            self.log_end_offset,
        )


def read_replica_log(partition_directory: Path) -> ReplicaLog:
    """Read a stopped broker's partition directory (``<data dir>/<topic>-<partition>``)
    with the broker's own storage layer, up to the log end offset (not only the high
    watermark, which comes from the partition checkpoint); control batches are skipped.

    The log is opened, and recovered as a restarting broker would, in a temporary copy:
    the directory itself is left as the broker left it, for a look after a failure."""
    with tempfile.TemporaryDirectory(prefix="replica-") as scratch:
        copy = Path(scratch) / partition_directory.name
        shutil.copytree(partition_directory, copy)
        log = PartitionLog.open(copy, TopicConfig(), SYSTEM_CLOCK, recover=True)
        try:
            records: list[tuple[int, bytes | None]] = []
            offset = log.log_start_offset
            while offset < log.log_end_offset:
                batches = list(
                    decode_batches(log.read(offset, REPLICA_READ_BYTES_MAX).read_bytes())
                )
                if not batches:
                    break
                for batch in batches:
                    if not batch.header.is_control:
                        records.extend(
                            (record.offset, record.value)
                            for record in batch.records
                            if record.offset >= offset
                        )
                offset = batches[-1].header.next_offset
            return ReplicaLog(records, log.log_start_offset, log.high_watermark, log.log_end_offset)
        finally:
            log.close()
