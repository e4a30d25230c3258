"""Produce-time record checks that run off the event loop, and the order of appends
meanwhile.

Most produced batches are checked and appended at once, on the event loop, in the order
their requests arrived. A batch with many records, or one that decompresses to more
than a little, is checked in a worker thread instead, so that other clients are served
while it is walked. It is appended when its check ends, and appends to a partition must
still happen in arrival order (a connection's pipelined requests; Kafka serves a
connection's requests one at a time). So such a batch takes a turn in its partition's
queue when it arrives, and every later batch for that partition, however small, waits
for the turns before its own::

    request 1 (large) ─▶ turn 1 ── checked in a thread ──────────▶ append ─┐
    request 2 (small) ─▶ turn 2 ── checked at once ── waits for turn 1 ────┴─▶ append
    request 3 (small, no turn waiting on its partition) ── checked and appended at once

Threads are a pool of ``RECORD_CHECK_THREADS`` owned by the broker (closed at shutdown),
apart from the default executor so that checks cannot hold up the flusher's fsyncs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from sluice.common.ids import TopicPartition
from sluice.common.limits import RECORD_CHECK_THREADS

T = TypeVar("T")


class AppendTurn:
    """One batch's place in its partition's append queue. Wait for it with
    :meth:`wait`; always :meth:`release` it (appended, refused or abandoned)."""

    def __init__(
        self,
        turns: ProduceChecks,
        topic_partition: TopicPartition,
        previous: asyncio.Future[None] | None,
        own: asyncio.Future[None],
    ) -> None:
        self._turns = turns
        self._topic_partition = topic_partition
        self._previous = previous
        self._own = own

    async def wait(self) -> None:
        """Return once every earlier turn of the partition is released. (``asyncio.wait``
        rather than ``await``: cancelling this waiter must not cancel the earlier turn.)"""
        if self._previous is not None and not self._previous.done():
            await asyncio.wait([self._previous])

    def release(self) -> None:
        """Give the turn up (again is harmless). It ends only once the turns before it
        have ended, so a batch refused early never lets a later one append before an
        earlier one."""
        previous = self._previous
        if previous is None or previous.done():
            self._end()
        else:
            previous.add_done_callback(lambda _: self._end())

    def _end(self) -> None:
        if not self._own.done():
            self._own.set_result(None)
        self._turns._forget(self._topic_partition, self._own)


class ProduceChecks:
    def __init__(self, threads: int = RECORD_CHECK_THREADS) -> None:
        self._executor = ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="sluice-record-check"
        )
        self._last_turns: dict[TopicPartition, asyncio.Future[None]] = {}

    def has_waiting_turns(self, topic_partition: TopicPartition) -> bool:
        """Whether a batch for this partition waits to be appended: a new one must then
        take a turn too, not append at once."""
        return topic_partition in self._last_turns

    def take_turn(self, topic_partition: TopicPartition) -> AppendTurn:
        """A place after every batch already waiting for this partition. Take it when
        the request arrives, before any ``await``."""
        own: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        previous = self._last_turns.get(topic_partition)
        self._last_turns[topic_partition] = own
        return AppendTurn(self, topic_partition, previous, own)

    async def run(self, function: Callable[..., T], *arguments: object) -> T:
        """Run ``function(*arguments)`` in a check thread."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, function, *arguments
        )

    def close(self) -> None:
        """Stop the threads; checks not started are dropped, running ones finish."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _forget(self, topic_partition: TopicPartition, turn: asyncio.Future[None]) -> None:
        if self._last_turns.get(topic_partition) is turn:
            del self._last_turns[topic_partition]
