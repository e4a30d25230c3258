"""Simulated time and the one queue of everything that happens in a simulation.

A :class:`World` holds the time (``now_ms``, which only moves when the next event is
taken) and the events scheduled for later. Events at the same time run in the order they
were scheduled (a sequence number breaks ties), so a run depends on nothing but its seed:
every random choice comes from :meth:`World.random`, one ``random.Random`` per named
stream, each seeded from the world's seed and the stream's name (adding a stream, or
drawing more from one, does not change what the others draw)."""

from __future__ import annotations

import hashlib
import heapq
import random
from collections.abc import Callable

Event = Callable[[], None]


class Timer:
    """A scheduled event, which can be called off. The queue holds
    ``(at_ms, sequence, timer)`` tuples, compared as tuples (the sequence is unique, so
    the timer itself is never compared)."""

    __slots__ = ("at_ms", "cancelled", "event")

    def __init__(self, at_ms: int, event: Event) -> None:
        self.at_ms = at_ms
        self.event = event
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class World:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.now_ms = 0
        self._queue: list[tuple[int, int, Timer]] = []
        self._sequence = 0
        self._streams: dict[str, random.Random] = {}
        self.events_run = 0

    def random(self, stream: str) -> random.Random:
        """The random numbers of one part of the simulation (a node's faults, the
        network's latencies, a workload), seeded from the world's seed and ``stream``."""
        found = self._streams.get(stream)
        if found is None:
            digest = hashlib.sha256(f"{self.seed}/{stream}".encode()).digest()
            found = self._streams[stream] = random.Random(int.from_bytes(digest[:8], "big"))
        return found

    def at(self, at_ms: int, event: Event) -> Timer:
        """Run ``event`` at ``at_ms`` (now if that is past)."""
        self._sequence += 1
        at_ms = max(at_ms, self.now_ms)
        timer = Timer(at_ms, event)
        heapq.heappush(self._queue, (at_ms, self._sequence, timer))
        return timer

    def after(self, delay_ms: int, event: Event) -> Timer:
        """Run ``event`` ``delay_ms`` from now."""
        return self.at(self.now_ms + max(delay_ms, 0), event)

    def run_until(self, end_ms: int, *, stop: Callable[[], bool] | None = None) -> None:
        """Run events in time order until the next one is after ``end_ms`` (the clock then
        stands at ``end_ms``), or until ``stop()`` holds after an event."""
        queue = self._queue
        pop = heapq.heappop
        while queue and queue[0][0] <= end_ms:
            at_ms, _, scheduled = pop(queue)
            if scheduled.cancelled:
                continue
            self.now_ms = at_ms
            self.events_run += 1
            scheduled.event()
            if stop is not None and stop():
                return
        self.now_ms = max(self.now_ms, end_ms)

    @property
    def pending(self) -> int:
        """Events scheduled and not called off."""
        return sum(1 for _, _, scheduled in self._queue if not scheduled.cancelled)


class NodeClock:
    """One node's view of the world, which a pause can stop (a SIGSTOP, a long garbage
    collection): while paused, the node's timers that come due and whatever reaches it
    (:meth:`hold`) wait; when it resumes they run at once, in the order they came, and
    the node finds the clock moved on and its view of the cluster stale. The node
    schedules through this (``at``, ``after``) as through the :class:`World`."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.paused = False
        self._held: list[tuple[Timer | None, Event]] = []
        self._life = 0
        """Bumped by a crash: events scheduled in an earlier life do not run."""

    @property
    def now_ms(self) -> int:
        return self.world.now_ms

    def random(self, stream: str) -> random.Random:
        return self.world.random(stream)

    def at(self, at_ms: int, event: Event) -> Timer:
        timer: Timer
        life = self._life

        def gated() -> None:
            if life != self._life:
                return
            if self.paused:
                self._held.append((timer, event))
            else:
                event()

        timer = self.world.at(at_ms, gated)
        return timer

    def after(self, delay_ms: int, event: Event) -> Timer:
        return self.at(self.world.now_ms + max(delay_ms, 0), event)

    def hold(self, event: Event) -> bool:
        """While paused, keep ``event`` (something that reached the node) for the resume
        and say so; otherwise False (the caller goes on at once)."""
        if self.paused:
            self._held.append((None, event))
        return self.paused

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        """Run what waited, in order (a timer called off meanwhile does not run)."""
        self.paused = False
        while self._held and not self.paused:
            timer, event = self._held.pop(0)
            if timer is None or not timer.cancelled:
                event()

    def reset(self) -> None:
        """The node crashed: its timers and what waited for it are gone, and it runs
        (when it starts again) unpaused."""
        self._life += 1
        self._held.clear()
        self.paused = False
