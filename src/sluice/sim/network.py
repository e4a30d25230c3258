"""Messages between the nodes of a simulation, with the faults of a real network.

A message from one node to another is delivered after a latency drawn from the
``network`` stream, unless a fault takes it: the two nodes are partitioned from each
other (both directions, or one), the receiver is down, or it is lost (``loss_rate``). It
may also arrive twice (``duplicate_rate``). Between two nodes messages keep their order,
as on a TCP connection, unless ``reorder`` is on (a reconnection racing the old
connection); a lost message is one whose sender never gets an answer, as when a
connection breaks, so senders time out and retry as real clients do."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluice.sim.world import World

Deliver = Callable[[int, Any], None]
"""A node's inbox: (sender, message)."""


@dataclass
class Faults:
    latency_ms: tuple[int, int] = (1, 3)
    """Each message takes between these many milliseconds (inclusive)."""
    loss_rate: float = 0.0
    duplicate_rate: float = 0.0
    reorder: bool = False
    cut: set[tuple[int, int]] = field(default_factory=set)
    """(sender, receiver) pairs whose messages are dropped: a partition."""


@dataclass
class NetworkStats:
    sent: int = 0
    delivered: int = 0
    lost: int = 0
    duplicated: int = 0


class Network:
    def __init__(self, world: World, faults: Faults | None = None) -> None:
        self.world = world
        self._random = world.random("network")
        self.faults = faults or Faults()
        self._inboxes: dict[int, Deliver] = {}
        self._last_arrival_ms: dict[tuple[int, int], int] = {}
        self.stats = NetworkStats()

    def attach(self, node: int, deliver: Deliver) -> None:
        """``node`` is up and receives its messages through ``deliver``."""
        self._inboxes[node] = deliver

    def detach(self, node: int) -> None:
        """``node`` is down: messages reaching it are lost (its links start afresh)."""
        self._inboxes.pop(node, None)
        for link in [link for link in self._last_arrival_ms if node in link]:
            del self._last_arrival_ms[link]

    def is_up(self, node: int) -> bool:
        return node in self._inboxes

    def partition(self, side: set[int], other: set[int], *, both_ways: bool = True) -> None:
        """Cut every link from ``side`` to ``other`` (and back unless ``both_ways`` is
        false)."""
        for a in side:
            for b in other:
                self.faults.cut.add((a, b))
                if both_ways:
                    self.faults.cut.add((b, a))

    def heal(self) -> None:
        self.faults.cut.clear()

    def send(self, sender: int, receiver: int, message: Any) -> None:
        self.stats.sent += 1
        faults = self.faults
        randomly = self._random
        if (sender, receiver) in faults.cut or (
            faults.loss_rate and randomly.random() < faults.loss_rate
        ):
            self.stats.lost += 1
            return
        copies = 2 if faults.duplicate_rate and randomly.random() < faults.duplicate_rate else 1
        self.stats.duplicated += copies - 1
        for _ in range(copies):
            low, high = faults.latency_ms
            arrival = self.world.now_ms + randomly.randint(low, high)
            link = (sender, receiver)
            if not faults.reorder:
                arrival = max(arrival, self._last_arrival_ms.get(link, 0))
                self._last_arrival_ms[link] = arrival
            self.world.at(arrival, lambda: self._arrive(sender, receiver, message))

    def _arrive(self, sender: int, receiver: int, message: Any) -> None:
        deliver = self._inboxes.get(receiver)
        if deliver is None or (sender, receiver) in self.faults.cut:
            self.stats.lost += 1
            return
        self.stats.delivered += 1
        deliver(sender, message)
