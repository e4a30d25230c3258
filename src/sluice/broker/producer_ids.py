"""Producer ids for idempotent producers: unique across restarts (and, with a shared
metadata store, across brokers), reserved from the metadata store a block at a time."""

from __future__ import annotations

from sluice.cluster.store import MetadataStore
from sluice.common.limits import PRODUCER_IDS_PER_BLOCK


class ProducerIdManager:
    def __init__(self, store: MetadataStore, block_size: int = PRODUCER_IDS_PER_BLOCK) -> None:
        self._store = store
        self._block_size = block_size
        self._next = 0
        self._end = 0

    def next_producer_id(self) -> int:
        if self._next >= self._end:
            self._next = self._store.allocate_producer_id_block(self._block_size)
            self._end = self._next + self._block_size
        producer_id = self._next
        self._next += 1
        return producer_id
