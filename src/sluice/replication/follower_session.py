"""A replica fetcher's side of its fetch session with one leader (KIP-227).

The leader keeps what the follower last asked of each partition; the follower keeps the
same, so each fetch names only what changed::

            ┌────────────── full fetch (epoch 0, every partition) ◀──────────────┐
            ▼                                                                    │
     answered with id 0 ──▶ no session: the next fetch is full again             │
     answered with id n ──▶ SESSION n, epoch 1                                   │
                              │ incremental fetch (id n, epoch e): names the      │
                              │ partitions added or whose fetch offset, last      │
                              │ fetched epoch, log start offset, leader epoch or  │
                              │ byte limit changed; forgets those no longer       │
                              │ fetched; answered → epoch e+1                     │
                              └── a session error, a lost connection or any ──────┘
                                  failed fetch: full again (closing session n)

A leader that declines sessions (answering id 0) is fetched from in full every time, as
before sessions existed. The partitions of each fetch are chosen by the fetcher as ever
(those truncating, held back or throttled to nothing are left out, so they leave the
session until they fetch again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.common.ids import TopicPartition
from sluice.replication.session_epochs import INITIAL_EPOCH, NO_SESSION_ID, next_epoch


@dataclass(frozen=True, slots=True)
class Wanted:
    """What a follower asks of one partition."""

    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    current_leader_epoch: int
    partition_max_bytes: int

    def fields(self) -> dict[str, Any]:
        """The request's partition fields but its index and ``current_leader_epoch``."""
        return {
            "fetch_offset": self.fetch_offset,
            "last_fetched_epoch": self.last_fetched_epoch,
            "log_start_offset": self.log_start_offset,
            "partition_max_bytes": self.partition_max_bytes,
        }


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """One fetch: its session id and epoch, the partitions it names and forgets."""

    session_id: int
    epoch: int
    named: frozenset[TopicPartition]
    forgotten: tuple[TopicPartition, ...]
    wanted: Mapping[TopicPartition, Wanted]
    """Every partition the session holds once this fetch is answered."""

    @property
    def incremental(self) -> bool:
        return self.epoch != INITIAL_EPOCH


class FollowerFetchSession:
    def __init__(self) -> None:
        self.id = NO_SESSION_ID
        """The leader's id of the session (when the next fetch is full: the one it
        closes)."""
        self.epoch = INITIAL_EPOCH
        """The next fetch's epoch: 0 for a full fetch."""
        self._sent: dict[TopicPartition, Wanted] = {}
        """What the leader's session holds, as of the last answered fetch."""

    def plan(self, wanted: Mapping[TopicPartition, Wanted]) -> FetchPlan:
        """The next fetch, for the partitions to fetch now and what each asks."""
        if self.epoch == INITIAL_EPOCH:
            return FetchPlan(self.id, INITIAL_EPOCH, frozenset(wanted), (), dict(wanted))
        named = frozenset(tp for tp, asked in wanted.items() if self._sent.get(tp) != asked)
        forgotten = tuple(tp for tp in self._sent if tp not in wanted)
        return FetchPlan(self.id, self.epoch, named, forgotten, dict(wanted))

    def answered(self, plan: FetchPlan, session_id: int) -> None:
        """The leader answered ``plan`` without a top-level error, with ``session_id``."""
        if session_id == NO_SESSION_ID or (plan.incremental and session_id != self.id):
            self.id, self.epoch, self._sent = NO_SESSION_ID, INITIAL_EPOCH, {}
            return
        self.id = session_id
        self.epoch = next_epoch(plan.epoch)
        self._sent = dict(plan.wanted)

    def failed(self) -> None:
        """The fetch failed (a session error, another error, a lost connection): the
        next one is full, closing this session at the leader."""
        self.epoch = INITIAL_EPOCH
        self._sent = {}
