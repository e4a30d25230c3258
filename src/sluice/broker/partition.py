"""One partition replica hosted by this broker: its log and its leadership state.

The leader appends, tracks every in-sync replica's log end offset, and moves the high
watermark to the smallest of them (Kafka's ISR model). A single node is a cluster of one:
its ISR is itself, so the high watermark follows the log end offset at once, but acks=all
still waits through the same high-watermark path a cluster uses.
"""

from __future__ import annotations

from sluice.broker.purgatory import Purgatory
from sluice.cluster.model import PartitionState
from sluice.common import errors
from sluice.common.ids import TopicPartition
from sluice.storage import AppendResult, PartitionLog


class Partition:
    def __init__(
        self,
        topic_partition: TopicPartition,
        log: PartitionLog,
        state: PartitionState,
        node_id: int,
        purgatory: Purgatory,
    ) -> None:
        self.topic_partition = topic_partition
        self.log = log
        self.state = state
        self._node_id = node_id
        self._purgatory = purgatory
        self._replica_log_end_offsets: dict[int, int] = {}
        self.dirty = False
        """Appended to since the last fsync (the flusher's work list)."""
        self.last_flush_ms = 0
        """Monotonic time of the last fsync the flusher started."""
        self.last_checkpoint_ms = 0
        """Monotonic time the flusher last wrote this partition's checkpoints."""
        self._advance_high_watermark()

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self._node_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def update_state(self, state: PartitionState) -> None:
        assert state.leader_epoch >= self.state.leader_epoch, "leader epochs never go back"
        self.state = state
        self._advance_high_watermark()

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Raise unless this replica leads at the epoch the client believes in."""
        if not self.is_leader:
            raise errors.NotLeaderOrFollower(
                f"{self.topic_partition} is led by broker {self.state.leader}"
            )
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                raise errors.for_code(errors.ErrorCode.fenced_leader_epoch)(
                    f"{self.topic_partition}: epoch {current_leader_epoch} < {self.leader_epoch}"
                )
            if current_leader_epoch > self.leader_epoch:
                raise errors.for_code(errors.ErrorCode.unknown_leader_epoch)(
                    f"{self.topic_partition}: epoch {current_leader_epoch} > {self.leader_epoch}"
                )

    def append(self, batch: bytearray, *, acks: int) -> AppendResult:
        """Append one validated batch as leader. Synchronous: appends from pipelined
        requests happen in the order the requests arrived."""
        self.check_leader()
        min_insync = self.log.config.min_insync_replicas
        if acks == -1 and len(self.state.isr) < min_insync:
            raise errors.NotEnoughReplicas(
                f"{self.topic_partition} has {len(self.state.isr)} in-sync replica(s), "
                f"min.insync.replicas is {min_insync}"
            )
        result = self.log.append(batch, leader_epoch=self.leader_epoch)
        if not result.duplicate:
            self.dirty = True
            self._advance_high_watermark()
        return result

    def _advance_high_watermark(self) -> None:
        log_end_offsets = [
            self.log.log_end_offset
            if replica == self._node_id
            else self._replica_log_end_offsets.get(replica, 0)
            for replica in self.state.isr
        ]
        if not self.is_leader or not log_end_offsets:
            return
        new_high_watermark = min(log_end_offsets)
        if new_high_watermark > self.log.high_watermark:
            self.log.update_high_watermark(new_high_watermark)
            self._purgatory.notify(self.topic_partition)

    def has_high_watermark_reached(self, offset: int) -> bool:
        return self.log.high_watermark >= offset
