"""Producer ids for idempotent producers: unique across restarts and across the brokers
of a cluster, reserved from the metadata store a block at a time."""

from __future__ import annotations

import asyncio

from sluice.cluster.store import MetadataStore
from sluice.common.limits import PRODUCER_IDS_PER_BLOCK


class ProducerIdManager:
    def __init__(self, store: MetadataStore, block_size: int = PRODUCER_IDS_PER_BLOCK) -> None:
        self._store = store
        self._block_size = block_size
        self._next = 0
        self._end = 0
        self._allocating = asyncio.Lock()
        """One block reservation at a time: requests that find the block used up wait
        for the one reservation, instead of each reserving (and wasting) a block."""

    async def next_producer_id(self) -> int:
        async with self._allocating:
            if self._next >= self._end:
                first = await self._store.allocate_producer_id_block(self._block_size)
                self._next, self._end = first, first + self._block_size
            producer_id = self._next
            self._next += 1
        return producer_id
