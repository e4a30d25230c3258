"""Storage: one segmented, append-only log per partition, on local files.

What belongs here: segments and their indexes, the partition log (append, read,
truncate, retention, DeleteRecords), crash recovery, checkpoints, the leader-epoch cache,
producer state (idempotence, open transactions, the last stable offset's inputs), the
aborted-transaction index and the log cleaner (compaction). What does not:
sockets, asyncio, replication decisions (the broker's replica manager sets the high
watermark and calls ``truncate_to``), and anything about topics beyond one partition's
directory. Everything here is synchronous and single-threaded per log, except
``cleaner.CleaningPlan.build``, which runs on a worker thread (it reads duplicated
descriptors and writes only its own new files), ``log.PendingFlush.sync`` (fsyncs of
duplicated descriptors) and ``checkpoint_writer.CheckpointJob.run`` (checkpoint files
whose contents the owning thread took), which the broker runs on worker threads too.

Modules, bottom up::

    checkpoint      atomic small-file writes; text checkpoint formats
    checkpoint_writer  one log's checkpoint writes, in order, on any thread
    index           offset index and time index of a segment (mmap)
    transaction_index  a segment's aborted transactions (.txnindex)
    segment         one .log file + indexes; scan, recover, truncate
    leader_epoch    (epoch, start offset) cache + leader-epoch-checkpoint
    producer_state  producers: dedup, sequence checks, open transactions, snapshots
    cleaner_transactions  a cleaning pass's view of transactions: aborted data,
                    markers that may go, the .txnindex entries kept
    cleaner         compaction: prepare (appending thread) / build (worker) / swap
    log             PartitionLog, the API the broker uses
    partition_dirs  deleted partitions: <topic>-<partition>.<id>-delete, removed later
    machine_boot    the boot id a data directory last started under: did the machine go down?

On-disk format of a partition directory (each module's docstring has the byte layout)::

    <topic>-<partition>/
      00000000000000000000.log        record batches (magic v2) as produced, with base
                                      offset and leader epoch filled in; nothing else
      00000000000000000000.index      8-byte entries: int32 relative offset, int32 position
      00000000000000000000.timeindex  12-byte entries: int64 max timestamp so far,
                                      int32 relative offset
      00000000000000000000.txnindex   34-byte entries, one per ABORT marker in the segment
                                      (a cleaned segment: per ABORT marker it kept)
      00000000000000052311.log …      next segment, named by its base offset (20 digits)
      00000000000000052311.snapshot   producer state below offset 52311 (binary, CRC-32C)
      leader-epoch-checkpoint         text: version, count, "epoch start_offset" lines
      partition.checkpoint            text: version, "log_start_offset N",
                                      "high_watermark N", "recovery_point N"
      cleaner-offset-checkpoint       text: version, "first_dirty_offset N",
                                      "tombstone_horizon_ms N" (compacted topics)
      *.deleted                       deleted segment files, unlinked after
                                      file.delete.delay.ms; removed on open
      *.cleaned                       a cleaned segment being written (.log, .index,
                                      .timeindex, .txnindex); deleted on open: not
                                      committed
      *.swap                          a committed cleaned segment being swapped in;
                                      completed on open (it replaces the segments in
                                      its offset range) unless a .log.cleaned remains
    <data dir>/.clean-shutdown        written by the broker after closing every log
    <data dir>/<topic>-<partition>.<id>-delete/   a deleted partition, removed later

Every checkpoint and snapshot is written to ``<name>.tmp``, fsynced, renamed, and the
directory fsynced. The ``.log`` files are the truth: indexes, the leader-epoch cache and
producer state can all be rebuilt from the batch headers, and are whenever they are
missing or look wrong. After a crash (no clean-shutdown marker), segments from the
recovery point on are rescanned: lengths bounded by the file, magic 2, CRC-32C,
increasing offsets; the log is truncated at the first bad batch and later segments are
dropped, with a warning saying what was lost.

Compaction never changes an offset: a cleaned segment keeps the base offset and the end
offset of the segments it replaces, with gaps inside, and is swapped in so that a crash
leaves all old or all new segments (``cleaner`` has the protocol). It cleans only below
the last stable offset, compacts committed transactional records like any others, drops
aborted ones, and removes a marker once no data of its transaction is left and its
delete horizon has passed.
"""

from sluice.storage import cleaner
from sluice.storage.cleaner import CleanedSegment, CleaningPlan, CleaningStats
from sluice.storage.leader_epoch import LeaderEpochCache
from sluice.storage.log import (
    CLEAN_SHUTDOWN_MARKER_NAME,
    AppendResult,
    PartitionLog,
    PendingFlush,
    ReadResult,
    TimestampAndOffset,
    clean_shutdown_marker_exists,
    remove_clean_shutdown_marker,
    write_clean_shutdown_marker,
)
from sluice.storage.producer_state import BatchMetadata, ProducerStateManager
from sluice.storage.segment import FileSlice, LogSegment, RecoveryReport

__all__ = [
    "CLEAN_SHUTDOWN_MARKER_NAME",
    "AppendResult",
    "BatchMetadata",
    "CleanedSegment",
    "CleaningPlan",
    "CleaningStats",
    "FileSlice",
    "LeaderEpochCache",
    "LogSegment",
    "PartitionLog",
    "PendingFlush",
    "ProducerStateManager",
    "ReadResult",
    "RecoveryReport",
    "TimestampAndOffset",
    "clean_shutdown_marker_exists",
    "cleaner",
    "remove_clean_shutdown_marker",
    "write_clean_shutdown_marker",
]
