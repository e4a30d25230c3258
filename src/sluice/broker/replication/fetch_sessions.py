"""Fetch sessions (KIP-227): what a fetcher last asked of each partition, so its next
Fetch names only what changed and the answer carries only partitions with news.

A Fetch (v7+) carries a session id and an epoch::

    session epoch -1 (id 0)      sessionless full fetch: every partition named, every
                                 one answered, nothing kept (librdkafka fetches so)
    session epoch -1 (id n)      the same, closing session n first
    session epoch 0              full fetch: session n (if named) is closed, and a new one
                                 is made from the partitions named, if the cache has room;
                                 the answer carries its id (0: declined, fetch in full)
    session epoch e > 0 (id n)   incremental fetch on session n, whose next epoch is e:
                                 partitions named are added or updated, those in
                                 ``forgotten_topics_data`` leave, the epoch moves to e+1
                                 (after the largest int32 comes 1) and every partition of
                                 the session is read; the answer lists only those with
                                 records, a changed high watermark, last stable offset or
                                 log start offset, an error or a diverging epoch

An incremental fetch on an id the cache lacks is answered FETCH_SESSION_ID_NOT_FOUND, one
with another epoch INVALID_FETCH_SESSION_EPOCH, one whose version names topics otherwise
than the session (by id from v13, by name before) FETCH_SESSION_TOPIC_ID_ERROR; the
fetcher then starts again with a full fetch. An incremental fetch that leaves the session
empty closes it and is answered as a sessionless one. From v13 a session keeps topics by
id: a partition of a deleted topic is answered UNKNOWN_TOPIC_ID at every fetch, as Kafka
does, until the fetcher forgets it.

A session holds at most as many partitions as one request may name
(``sluice.request.max.partitions``); an incremental fetch adding more ends it and is
answered INVALID_REQUEST. The cache holds at most
``max.incremental.fetch.session.cache.slots`` sessions (0: none).
When full, a new session takes a slot only by evicting one, by Kafka's rules: first the
session least recently used, if unused for :data:`SESSION_EVICTION_MS`; else the least
valuable one that may be evicted, if the new one is worth at least as much. Sessions of
followers (*privileged*) are worth more than consumers', then bigger ones more than
smaller ones; a follower may evict any consumer's session and a follower's older than
:data:`SESSION_EVICTION_MS`, a consumer only a session that old. Sessions belong to the
event loop (the fetch handler), like the partitions they name.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sluice.cluster.model import ZERO_TOPIC_ID
from sluice.common.errors import ErrorCode
from sluice.protocol.fetch_response import FetchPartitionResult
from sluice.protocol.messages import has_field
from sluice.replication.session_epochs import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INT32_MAX,
    NO_SESSION_ID,
    next_epoch,
)

SESSION_EVICTION_MS = 120_000
"""A session unused this long may be evicted by any new one, and one older than this
competes on its value alone (Kafka's minimum eviction time, fixed there too)."""
FIRST_TOPIC_ID_VERSION = 13
PARTITIONS_MAX_DEFAULT = 100_000
"""Partitions one session may hold (the broker passes ``sluice.request.max.partitions``,
what one full fetch may name): incremental fetches cannot grow a session past what a
request could name; one that tries ends the session, answered INVALID_REQUEST."""

TopicKey = str | uuid.UUID
"""A topic as a fetch names it: by name up to v12, by id from v13."""


class SessionPartition(NamedTuple):
    topic: TopicKey
    partition: int


@dataclass(frozen=True, slots=True)
class FetchedTopic:
    """One topic a fetch reads: its key and the request's entries of its partitions
    (``partition``, ``fetch_offset``, ``partition_max_bytes``, and from their versions
    ``current_leader_epoch``, ``last_fetched_epoch``, ``log_start_offset``)."""

    key: TopicKey
    partitions: Sequence[Any]


@dataclass(slots=True)
class CachedPartition:
    """A partition of a session: what the fetcher last asked of it, and what the last
    answer naming it told (-1: nothing yet, or an error, so the next answer names it)."""

    wanted: Any
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def take_answer(self, result: FetchPartitionResult) -> bool:
        """Whether ``result`` must be in an incremental answer; notes what it tells."""
        must_answer = result.records_size_bytes > 0 or result.diverging_epoch is not None
        if result.error_code != ErrorCode.none:
            self.high_watermark = -1  # answered again once the error is gone
            return True
        if (result.high_watermark, result.last_stable_offset, result.log_start_offset) != (
            self.high_watermark,
            self.last_stable_offset,
            self.log_start_offset,
        ):
            self.high_watermark = result.high_watermark
            self.last_stable_offset = result.last_stable_offset
            self.log_start_offset = result.log_start_offset
            must_answer = True
        return must_answer


@dataclass(eq=False)
class FetchSession:
    id: int
    privileged: bool
    """A follower's (replica id ≥ 0): worth more than a consumer's when evicting."""
    uses_topic_ids: bool
    created_ms: int
    last_used_ms: int
    epoch: int = 1
    """The epoch the next incremental fetch must carry."""
    partitions: dict[SessionPartition, CachedPartition] = field(default_factory=dict)
    """In fetch order: a partition whose answer carried records moves to the end, so a
    response's byte limit does not starve the others."""

    def value(self) -> tuple[bool, int, int]:
        """Kafka's eviction order: consumers' before followers', smaller before bigger."""
        return (self.privileged, len(self.partitions), self.id)

    def topics(self) -> list[FetchedTopic]:
        """The partitions to read, grouped by topic in the session's order."""
        by_topic: dict[TopicKey, list[Any]] = {}
        for key, cached in self.partitions.items():
            by_topic.setdefault(key.topic, []).append(cached.wanted)
        return [FetchedTopic(topic, partitions) for topic, partitions in by_topic.items()]


def _topic_key(entry: Any) -> TopicKey:
    """The key of a request's topic entry (FetchTopic or ForgottenTopic)."""
    if has_field(type(entry), "topic_id"):
        topic_id: uuid.UUID = entry.topic_id or ZERO_TOPIC_ID
        return topic_id
    return str(entry.topic)


def requested_topics(request: Any) -> list[FetchedTopic]:
    """The topics a Fetch request names, in its order."""
    return [FetchedTopic(_topic_key(t), tuple(t.partitions)) for t in request.topics]


TopicResults = list[tuple[TopicKey, list[FetchPartitionResult]]]


@dataclass
class FetchContext:
    """How one Fetch is read and answered, as its session id and epoch say."""

    topics: list[FetchedTopic]
    """What to read."""
    error_code: ErrorCode = ErrorCode.none
    """A session error: answered at once, nothing read."""
    session: FetchSession | None = None
    """The session an incremental fetch reads."""
    create_session: bool = False
    """A full fetch asking for a new session."""

    @property
    def incremental(self) -> bool:
        return self.session is not None


class FetchSessionCache:
    """The broker's fetch sessions, at most ``slots_max`` of them."""

    def __init__(
        self,
        slots_max: int,
        partitions_max: int = PARTITIONS_MAX_DEFAULT,
        rng: random.Random | None = None,
    ) -> None:
        self._slots_max = slots_max
        self._partitions_max = partitions_max
        self._sessions: dict[int, FetchSession] = {}
        """By id, least recently used first."""
        self._rng = rng or random.Random()
        self.evictions_total = 0
        self.incremental_fetches_total = 0
        self.incremental_partitions_named_total = 0
        """Incremental fetches served and the partitions they named (for the metrics:
        what sessions save shows as fewer partitions named than held)."""

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    @property
    def partitions_cached(self) -> int:
        return sum(len(s.partitions) for s in self._sessions.values())

    # ── requests ───────────────────────────────────────────────────────────────────

    def context(self, request: Any, privileged: bool, now_ms: int) -> FetchContext:
        """How to serve ``request`` (a decoded Fetch of any version)."""
        session_id = int(getattr(request, "session_id", NO_SESSION_ID))
        epoch = int(getattr(request, "session_epoch", FINAL_EPOCH))
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != NO_SESSION_ID:
                self._sessions.pop(session_id, None)  # a full fetch closes its session
            return FetchContext(requested_topics(request), create_session=epoch == INITIAL_EPOCH)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext([], ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return FetchContext([], ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != (int(request.__version__) >= FIRST_TOPIC_ID_VERSION):
            return FetchContext([], ErrorCode.fetch_session_topic_id_error)
        self._update(session, request)
        if len(session.partitions) > self._partitions_max:
            del self._sessions[session.id]
            return FetchContext([], ErrorCode.invalid_request)
        if not session.partitions:
            del self._sessions[session.id]
            return FetchContext(requested_topics(request))
        self._touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        self.incremental_fetches_total += 1
        self.incremental_partitions_named_total += sum(len(t.partitions) for t in request.topics)
        return FetchContext(session.topics(), session=session)

    @staticmethod
    def _update(session: FetchSession, request: Any) -> None:
        """Add or update the partitions named, then drop those forgotten."""
        for fetch_topic in request.topics:
            topic = _topic_key(fetch_topic)
            for wanted in fetch_topic.partitions:
                key = SessionPartition(topic, int(wanted.partition))
                cached = session.partitions.get(key)
                if cached is None:
                    session.partitions[key] = CachedPartition(wanted)
                else:
                    cached.wanted = wanted
        for forgotten in request.forgotten_topics_data or ():
            topic = _topic_key(forgotten)
            for partition in forgotten.partitions:
                session.partitions.pop(SessionPartition(topic, int(partition)), None)

    def answer(
        self,
        context: FetchContext,
        request: Any,
        results: TopicResults,
        privileged: bool,
        now_ms: int,
    ) -> tuple[int, TopicResults]:
        """(session id, the topics to answer) once ``results`` were read for
        ``context``: a full fetch may make a session, an incremental one answers only
        the partitions with news."""
        session = context.session
        if session is not None:
            return session.id, self._incremental_answer(session, results)
        if not context.create_session:
            return NO_SESSION_ID, results
        created = self._create(
            privileged,
            int(request.__version__) >= FIRST_TOPIC_ID_VERSION,
            context.topics,
            results,
            now_ms,
        )
        return (NO_SESSION_ID if created is None else created.id), results

    @staticmethod
    def _incremental_answer(session: FetchSession, results: TopicResults) -> TopicResults:
        answered: TopicResults = []
        with_records: list[SessionPartition] = []
        for topic, topic_results in results:
            selected = []
            for result in topic_results:
                key = SessionPartition(topic, result.partition_index)
                cached = session.partitions.get(key)
                if cached is None or cached.take_answer(result):
                    selected.append(result)
                    if result.records_size_bytes > 0:
                        with_records.append(key)
            if selected:
                answered.append((topic, selected))
        for key in with_records:  # to the end of the fetch order
            session.partitions[key] = session.partitions.pop(key)
        return answered

    # ── the cache ──────────────────────────────────────────────────────────────────

    def _create(
        self,
        privileged: bool,
        uses_topic_ids: bool,
        topics: Iterable[FetchedTopic],
        results: TopicResults,
        now_ms: int,
    ) -> FetchSession | None:
        """A new session holding the partitions of a full fetch and what its answer
        told, or None when the cache has no room for it."""
        partitions: dict[SessionPartition, CachedPartition] = {}
        for fetched in topics:
            for wanted in fetched.partitions:
                key = SessionPartition(fetched.key, int(wanted.partition))
                partitions[key] = CachedPartition(wanted)
        for topic, topic_results in results:
            for result in topic_results:
                cached = partitions.get(SessionPartition(topic, result.partition_index))
                if cached is not None:
                    cached.take_answer(result)
        session = FetchSession(
            self._new_id(), privileged, uses_topic_ids, now_ms, now_ms, partitions=partitions
        )
        if len(self._sessions) >= self._slots_max and not self._evict_for(session, now_ms):
            return None
        self._sessions[session.id] = session
        return session

    def _evict_for(self, candidate: FetchSession, now_ms: int) -> bool:
        """Free a slot for ``candidate`` by Kafka's rules; whether one was freed."""
        if not self._sessions:
            return False  # no slots at all
        least_recent = next(iter(self._sessions.values()))
        if now_ms - least_recent.last_used_ms > SESSION_EVICTION_MS:
            self._evict(least_recent)
            return True
        evictable = [
            s
            for s in self._sessions.values()
            if now_ms - s.created_ms > SESSION_EVICTION_MS
            or (candidate.privileged and not s.privileged)
        ]
        if not evictable:
            return False
        least_valuable = min(evictable, key=FetchSession.value)
        if candidate.value() < least_valuable.value():
            return False
        self._evict(least_valuable)
        return True

    def _evict(self, session: FetchSession) -> None:
        del self._sessions[session.id]
        self.evictions_total += 1

    def _touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        self._sessions[session.id] = self._sessions.pop(session.id)  # most recent last

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, INT32_MAX)
            if session_id not in self._sessions:
                return session_id
