"""Messages between the nodes of a simulation, with the faults of a real network.

A message from one node to another is delivered after a latency drawn from the
``network`` stream, unless a fault takes it: the two nodes are partitioned from each
other (both directions, or one), the receiver is down, or it is lost (``loss_rate``).
Between two nodes messages keep their order, as on a TCP connection, and a message held
up (``delay_rate``: a retransmission, a stalled link) holds up those behind it. A
reordered message (``reorder_rate``, or every message with ``reorder``) is late and lets
later ones overtake it, as a request on a reconnection racing the old connection; a
duplicated message (``duplicate_rate``) arrives again, late and out of order, as a resent
request or a stale answer. A lost message is one whose sender never gets an answer, as
when a connection breaks, so senders time out and retry as real clients do."""

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
    """Messages that arrive a second time, late (``late_ms``) and out of order."""
    delay_rate: float = 0.0
    """Messages held up ``late_ms`` more, and the link's later messages behind them."""
    reorder_rate: float = 0.0
    """Messages ``late_ms`` late that later messages of their link overtake."""
    late_ms: tuple[int, int] = (20, 500)
    """How late a delayed, reordered or duplicated message is (inclusive)."""
    reorder: bool = False
    """Every message may overtake those sent before it."""
    duplicable: Callable[[Any], bool] = lambda message: True
    """Which messages a late duplicate may be made of (the others are delivered once)."""
    cut: set[tuple[int, int]] = field(default_factory=set)
    """(sender, receiver) pairs whose messages are dropped: a partition."""


@dataclass
class NetworkStats:
    sent: int = 0
    delivered: int = 0
    lost: int = 0
    duplicated: int = 0
    delayed: int = 0
    reordered: int = 0


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
        low, high = faults.latency_ms
        arrival = self.world.now_ms + randomly.randint(low, high)
        link = (sender, receiver)
        if faults.delay_rate and randomly.random() < faults.delay_rate:
            self.stats.delayed += 1
            arrival += randomly.randint(*faults.late_ms)
        if faults.reorder or (faults.reorder_rate and randomly.random() < faults.reorder_rate):
            if not faults.reorder:
                self.stats.reordered += 1
                arrival += randomly.randint(*faults.late_ms)
        else:
            arrival = max(arrival, self._last_arrival_ms.get(link, 0))
            self._last_arrival_ms[link] = arrival
        self._deliver_at(arrival, sender, receiver, message)
        if (
            faults.duplicate_rate
            and randomly.random() < faults.duplicate_rate
            and faults.duplicable(message)
        ):
            self.stats.duplicated += 1
            late = arrival + randomly.randint(*faults.late_ms)
            self._deliver_at(late, sender, receiver, message)

    def _deliver_at(self, at_ms: int, sender: int, receiver: int, message: Any) -> None:
        self.world.at(at_ms, lambda: self._arrive(sender, receiver, message))

    def _arrive(self, sender: int, receiver: int, message: Any) -> None:
        deliver = self._inboxes.get(receiver)
        if deliver is None or (sender, receiver) in self.faults.cut:
            self.stats.lost += 1
            return
        self.stats.delivered += 1
        deliver(sender, message)
