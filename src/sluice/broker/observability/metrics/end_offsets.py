"""End offsets of partitions led by other brokers, for the consumer lag of the groups
coordinated here.

A group's coordinator need not host the partitions the group consumes. Every
:data:`REFRESH_INTERVAL_S` this task asks each partition's leader for its high watermark
(ListOffsets, latest offset, read uncommitted: the high watermark) for every partition a
group coordinated here has committed and that is not led here, one request per leader.
The lag of such a partition is therefore up to one interval (plus the request's time)
stale; partitions led here are read at scrape time and exact. A leader that does not
answer keeps its last values, whose age ``sluice_consumer_group_lag_end_offsets_age_seconds``
shows.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

from sluice.broker.network.leader_offsets import leader_high_watermarks
from sluice.broker.network.peer_connection import PeerUnavailable
from sluice.broker.network.peers import Peers
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.cluster.image import MetadataImage
from sluice.common import errors
from sluice.common.ids import TopicPartition

log = logging.getLogger(__name__)

REFRESH_INTERVAL_S = 5.0
"""How often the end offsets of partitions led elsewhere are asked for."""
REQUEST_TIMEOUT_S = 10.0


class RemoteEndOffsets:
    def __init__(
        self,
        node_id: int,
        replicas: ReplicaManager,
        image: Callable[[], MetadataImage],
        peers: Peers,
        wanted: Callable[[], Iterable[TopicPartition]],
        interval_s: float = REFRESH_INTERVAL_S,
    ) -> None:
        self._node_id = node_id
        self._replicas = replicas
        self._image = image
        self._peers = peers
        self._wanted = wanted
        self._interval_s = interval_s
        self.offsets: dict[TopicPartition, tuple[int, float]] = {}
        """Partition → (high watermark, ``time.monotonic()`` when its leader answered)."""

    def high_watermark(self, topic_partition: TopicPartition) -> int | None:
        found = self.offsets.get(topic_partition)
        return None if found is None else found[0]

    async def run(self) -> None:
        """Refresh every interval, until cancelled. A metric must never stop the broker:
        a refresh that fails for any reason is logged and tried again next interval."""
        while True:
            try:
                await self.refresh()
            except Exception:
                log.exception("refreshing end offsets for consumer lag failed; will retry")
            await asyncio.sleep(self._interval_s)

    async def refresh(self) -> None:
        image = self._image()
        by_leader: defaultdict[int, list[TopicPartition]] = defaultdict(list)
        wanted = set(self._wanted())
        for topic_partition in wanted:
            hosted = self._replicas.find(topic_partition)
            if hosted is not None and hosted.is_leader:
                continue
            state = image.partition(topic_partition)
            if state is None or state.leader < 0 or state.leader == self._node_id:
                continue
            by_leader[state.leader].append(topic_partition)
        for gone in self.offsets.keys() - wanted:
            del self.offsets[gone]
        if by_leader:
            await asyncio.gather(
                *(self._ask(leader, sorted(tps)) for leader, tps in by_leader.items())
            )

    async def _ask(self, leader: int, partitions: list[TopicPartition]) -> None:
        try:
            answered = await leader_high_watermarks(
                self._peers, leader, partitions, REQUEST_TIMEOUT_S
            )
        except (PeerUnavailable, errors.ProtocolError, errors.KafkaError) as e:
            log.debug("end offsets for consumer lag from broker %d: %s", leader, e)
            return
        now = time.monotonic()
        for topic_partition, offset in answered.items():
            self.offsets[topic_partition] = (offset, now)

    def oldest_age_s(self) -> float:
        """Age of the oldest end offset held (0 without any)."""
        if not self.offsets:
            return 0.0
        return time.monotonic() - min(when for _, when in self.offsets.values())
