"""Retry and dead-letter topics for consumer groups, on delayed delivery and transactions.

A record the application cannot handle now goes to its group's retry topic
(``<group>-retry``), delayed by the policy's backoff for its attempt
(``x-sluice-delay-ms``, see :mod:`sluice.protocol.records.delayed`), and comes back to
the group from there; after the last attempt, or when the application says so, it goes
to the group's dead-letter topic (``<group>-dlq``). Each move is one transaction holding
the new record and the group's offset past the old one, so a crash at any moment leaves
the record in exactly one place: handled, waiting for a retry, or dead.

The records carry the header convention below, so any client can write retries and
dead letters that Sluice's tools understand (and read Sluice's)::

    x-sluice-original-topic      the topic the record was first produced to
    x-sluice-original-partition  its partition there (decimal)
    x-sluice-original-offset     its offset there (decimal)
    x-sluice-attempt             how many times handling it failed (decimal, 1 first)
    x-sluice-error               why the last attempt failed (UTF-8, at most 1,000 bytes)

The record's key, value, timestamp and its own headers are kept; the original-*
headers are those of the first failure, later attempts only update attempt and error.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from sluice.client.admin import Admin, NewTopic
from sluice.client.producer_api import Producer
from sluice.common import errors
from sluice.common.ids import TopicPartition
from sluice.protocol.records.delayed import DELAY_MS_HEADER, DELAYED_FROM_HEADER
from sluice.protocol.records.record import Header

if TYPE_CHECKING:
    from sluice.client.transactions import GroupMetadata

ORIGINAL_TOPIC: Final = "x-sluice-original-topic"
ORIGINAL_PARTITION: Final = "x-sluice-original-partition"
ORIGINAL_OFFSET: Final = "x-sluice-original-offset"
ATTEMPT: Final = "x-sluice-attempt"
ERROR: Final = "x-sluice-error"
ERROR_BYTES_MAX: Final = 1000
_OURS: Final = frozenset(
    {ORIGINAL_TOPIC, ORIGINAL_PARTITION, ORIGINAL_OFFSET, ATTEMPT, ERROR}
    | {DELAY_MS_HEADER, DELAYED_FROM_HEADER}
)


class ConsumerRecord(Protocol):
    """What a retry needs of a consumed record (``sluice.Consumer``'s records)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[Header]: ...


@dataclass(frozen=True)
class RetryPolicy:
    """How a group retries: ``backoff_ms[i]`` is the delay before attempt ``i + 2``;
    after ``len(backoff_ms)`` retries a record goes to the dead-letter topic. The
    topics default to ``<group>-retry`` and ``<group>-dlq``."""

    backoff_ms: Sequence[int] = (1_000, 10_000, 60_000)
    retry_topic: str | None = None
    dead_letter_topic: str | None = None

    def __post_init__(self) -> None:
        if any(delay < 0 for delay in self.backoff_ms):
            raise ValueError("backoff_ms must not be negative")

    def topics(self, group_id: str) -> tuple[str, str]:
        """(retry topic, dead-letter topic) of ``group_id``."""
        return (
            self.retry_topic or f"{group_id}-retry",
            self.dead_letter_topic or f"{group_id}-dlq",
        )


@dataclass(frozen=True)
class Origin:
    """Where a retried or dead record was first produced."""

    topic: str
    partition: int
    offset: int


def _header(record_headers: Sequence[Header], name: str) -> bytes | None:
    for key, value in reversed(record_headers):
        if key == name:
            return value
    return None


def attempts_of(record: ConsumerRecord) -> int:
    """How many times handling the record failed before (0 for a first delivery)."""
    value = _header(record.headers, ATTEMPT)
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


def origin_of(record: ConsumerRecord) -> Origin:
    """The record's first topic, partition and offset (its own for a first delivery)."""
    topic = _header(record.headers, ORIGINAL_TOPIC)
    partition = _header(record.headers, ORIGINAL_PARTITION)
    offset = _header(record.headers, ORIGINAL_OFFSET)
    if topic is None or partition is None or offset is None:
        return Origin(record.topic, record.partition, record.offset)
    try:
        return Origin(topic.decode(), int(partition), int(offset))
    except (UnicodeDecodeError, ValueError):
        return Origin(record.topic, record.partition, record.offset)


def own_headers(record: ConsumerRecord) -> list[Header]:
    """The record's headers without those of the retry convention and of delays."""
    return [(key, value) for key, value in record.headers if key not in _OURS]


def describe(error: BaseException | str) -> bytes:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    data = text.encode(errors="replace")
    return data[:ERROR_BYTES_MAX]


def moved_headers(record: ConsumerRecord, error: BaseException | str, attempt: int) -> list[Header]:
    origin = origin_of(record)
    return [
        *own_headers(record),
        (ORIGINAL_TOPIC, origin.topic.encode()),
        (ORIGINAL_PARTITION, b"%d" % origin.partition),
        (ORIGINAL_OFFSET, b"%d" % origin.offset),
        (ATTEMPT, b"%d" % attempt),
        (ERROR, describe(error)),
    ]


class Retrier:
    """Moves records to a group's retry or dead-letter topic, each move in one
    transaction with the group's offset past the record."""

    def __init__(
        self,
        policy: RetryPolicy,
        group_id: str,
        bootstrap_servers: str | Sequence[str],
        client_id: str,
    ) -> None:
        self.policy = policy
        self.retry_topic, self.dead_letter_topic = policy.topics(group_id)
        self._bootstrap_servers = bootstrap_servers
        self._client_id = client_id
        self._producer: Producer | None = None

    async def ensure_topics(self, admin: Admin, partitions: int) -> None:
        """Create the retry and dead-letter topics if they do not exist."""
        for name in (self.retry_topic, self.dead_letter_topic):
            try:
                await admin.create_topics([NewTopic(name, max(partitions, 1))])
            except errors.TopicAlreadyExists:
                pass

    async def _started(self) -> Producer:
        if self._producer is None:
            producer = Producer(
                self._bootstrap_servers,
                client_id=self._client_id,
                transactional_id=f"{self._client_id}-retries-{uuid.uuid4().hex}",
            )
            await producer.start()
            self._producer = producer
        return self._producer

    async def move(
        self,
        record: ConsumerRecord,
        error: BaseException | str,
        group: GroupMetadata,
        *,
        dead: bool,
    ) -> str:
        """Produce the record to the retry topic (delayed by the backoff of its attempt)
        or, when ``dead`` or out of attempts, to the dead-letter topic, and commit the
        group's offset past it, in one transaction. Returns the topic it went to."""
        attempt = attempts_of(record) + 1
        headers = moved_headers(record, error, attempt)
        retries_left = attempt <= len(self.policy.backoff_ms)
        if dead or not retries_left:
            topic = self.dead_letter_topic
        else:
            topic = self.retry_topic
            headers.append((DELAY_MS_HEADER, b"%d" % self.policy.backoff_ms[attempt - 1]))
        producer = await self._started()
        await producer.begin_transaction()
        try:
            await producer.send(
                topic, record.value, key=record.key, headers=headers, timestamp_ms=record.timestamp
            )
            await producer.send_offsets_to_transaction(
                {TopicPartition(record.topic, record.partition): record.offset + 1}, group
            )
            await producer.commit_transaction()
        except BaseException:
            with contextlib.suppress(Exception):
                await producer.abort_transaction()
            raise
        return topic

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.close()
            self._producer = None
