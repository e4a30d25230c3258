"""Where requests wait for a condition on one or more partitions.

A produce with acks=all waits for the high watermark to pass its last offset; a fetch
with min_bytes waits for data. Both register a future under each partition they care
about and re-check their condition when woken. Wake-ups are cheap and may be spurious;
the waiter always re-checks (there is no lost wake-up because the condition is checked
after registering and before sleeping).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable


class Purgatory:
    def __init__(self) -> None:
        self._waiters: defaultdict[Hashable, set[asyncio.Future[None]]] = defaultdict(set)

    def waiting(self) -> dict[str, int]:
        """Requests waiting, by kind: on a partition's high watermark (acks=all
        producers, consumer fetches) or its log end (follower fetches). A request
        waiting on several partitions counts once."""
        by_kind: dict[str, set[asyncio.Future[None]]] = {"partition": set(), "log_end": set()}
        for key, waiters in self._waiters.items():
            kind = "log_end" if isinstance(key, tuple) and key[:1] == ("log end",) else "partition"
            by_kind[kind] |= waiters
        return {kind: len(futures) for kind, futures in by_kind.items()}

    def notify(self, key: Hashable) -> None:
        """Wake everything waiting on ``key``."""
        waiters = self._waiters.pop(key, None)
        if waiters:
            for future in waiters:
                if not future.done():
                    future.set_result(None)

    async def wait_until(
        self, keys: Iterable[Hashable], condition: Callable[[], bool], timeout_s: float
    ) -> bool:
        """Wait until ``condition()`` holds (checked at every wake-up of any key) or the
        timeout passes. Returns the final value of the condition."""
        keys = list(keys)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            if condition():
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            future: asyncio.Future[None] = loop.create_future()
            for key in keys:
                self._waiters[key].add(future)
            # A timer on the future itself rather than asyncio.wait_for, which in 3.11
            # adds a second future, a done-callback and one more turn of the loop to
            # every wake-up (every parked follower fetch and acks=all produce).
            timer = loop.call_at(deadline, _wake, future)
            try:
                await future
            finally:
                timer.cancel()
                for key in keys:
                    waiters = self._waiters.get(key)
                    if waiters is not None:
                        waiters.discard(future)
                        if not waiters:
                            del self._waiters[key]


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
