"""``sluice.Producer``: the batching, retrying, asyncio Kafka producer.

::

    async with sluice.Producer(bootstrap_servers="127.0.0.1:9092", acks="all") as producer:
        future = await producer.send("orders", b"value", key=b"k")   # buffered
        metadata = await future                                        # delivered

How a record travels::

    send() ─► partition (murmur2 of the key, or the topic's sticky partition)
          ─► RecordAccumulator: open batch of that partition (accumulator.py)
                 │ full, or linger_ms passed, or flush()
                 ▼
    sender task: ready partitions ─► grouped by leader ─► one Produce request per
                 leader with one batch per partition, at most
                 max_in_flight_requests_per_connection requests per broker
                 │ answer
                 ├─ ok / DUPLICATE_SEQUENCE_NUMBER ─► futures get RecordMetadata
                 ├─ retriable (leader moved, broker restarting…) ─► refresh metadata,
                 │     batch goes back to the *front* of its partition's queue after
                 │     retry_backoff_ms (one batch per partition in flight: no reordering)
                 └─ otherwise, or retries / delivery_timeout_ms used up ─► futures fail

Each batch is encoded once with ``build_batch`` when it is first sent and re-sent
byte for byte on retries. With ``enable_idempotence`` (the default with acks="all") the
producer gets a producer id from InitProducerId and numbers each partition's batches,
so a retry of a batch the broker already wrote is answered DUPLICATE_SEQUENCE_NUMBER
and counted once.

With a ``transactional_id`` the producer is transactional (``sluice.client.transactions``
has the state machine)::

    async with sluice.Producer(transactional_id="orders-enricher-1") as producer:
        await producer.begin_transaction()
        await producer.send("enriched", b"value")
        await producer.send_offsets_to_transaction({tp: next_offset}, consumer.group_metadata())
        await producer.commit_transaction()       # or abort_transaction()

``start()`` registers the id (fencing older producers with it), the sender adds each
partition to the transaction before its first batch is sent, and batches are written as
transactional batches that read_committed consumers see only once committed.

The sender task is owned by the producer (started by :meth:`Producer.start`, awaited
by :meth:`Producer.close`); every request task is owned by the sender's task group.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Unpack

from sluice.client.accumulator import ProducerBatch, RecordAccumulator, record_size_bytes
from sluice.client.arguments import record_bytes, record_timestamp_ms, topic_name
from sluice.client.cluster import Cluster
from sluice.client.connection import BrokerConnection
from sluice.client.errors import ClientError, RequestTimedOutError
from sluice.client.messages import Request
from sluice.client.partitioner import partition_for_key
from sluice.client.security import SecurityOptions, option_names, security_for
from sluice.client.transactions import (
    GroupMetadata,
    PreparedTransaction,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionManager,
    TransactionState,
    TransactionStateError,
)
from sluice.common import errors
from sluice.common.clock import SYSTEM_CLOCK, Clock
from sluice.common.errors import ErrorCode
from sluice.common.ids import NodeId, TopicPartition
from sluice.protocol.records.batch import NO_SEQUENCE, Compression
from sluice.protocol.records.builder import RecordInput, build_batch
from sluice.protocol.records.record import Header
from sluice.protocol.versions import ApiKey

__all__ = [
    "DeliveryTimeoutError",
    "GroupMetadata",
    "Headers",
    "Producer",
    "ProducerClosedError",
    "ProducerFencedError",
    "RecordMetadata",
    "TransactionAbortableError",
    "TransactionStateError",
]

LINGER_MS_DEFAULT = 5
"""Kafka 4's default: a few milliseconds of waiting fills batches under load."""

BATCH_SIZE_DEFAULT = 64 * 1024
"""Bytes per partition batch. Larger than Java's 16 KiB because each batch costs this
client a fixed amount of Python work (one request entry, one encode); still far under
the broker's max.message.bytes (1 MiB)."""

BUFFER_MEMORY_DEFAULT = 32 * 1024 * 1024
"""Bytes of records buffered before ``send`` waits (Java's buffer.memory)."""

MAX_REQUEST_SIZE_DEFAULT = 1024 * 1024
"""Largest record (and Produce request) the producer sends (Java's max.request.size)."""

MAX_IN_FLIGHT_DEFAULT = 5
RETRIES_DEFAULT = 2_147_483_647
"""Retry until delivery_timeout_ms, as the Java producer does."""
RETRY_BACKOFF_MS_DEFAULT = 100
DELIVERY_TIMEOUT_MS_DEFAULT = 120_000
REQUEST_TIMEOUT_MS_DEFAULT = 30_000
MAX_BLOCK_MS_DEFAULT = 60_000
"""How long ``send`` waits for metadata or buffer space before raising."""
METADATA_MAX_AGE_MS_DEFAULT = 300_000
TRANSACTION_TIMEOUT_MS = 60_000
"""How long a transaction may stay open before the coordinator aborts it (Kafka's
transaction.timeout.ms default)."""

SEQUENCE_MAX = 2**31 - 1
"""Sequence numbers are int32s and wrap to 0."""

_COMPRESSION_BY_NAME = {
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}

_METADATA_ERRORS = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.kafka_storage_error,
    }
)
"""Answers that mean the cached leader is wrong: refresh metadata before retrying."""

Partitioner = Callable[[bytes, int], int]
"""``(key, partition_count) -> partition`` for keyed records."""

Serializer = Callable[[Any], bytes]
"""Turns what ``send`` is given as a key or value into bytes (Kafka's key.serializer
and value.serializer); not called for None."""

OnDelivery = Callable[["RecordMetadata | None", "BaseException | None"], None]
"""Called once per record: ``(metadata, None)`` when delivered, ``(None, error)`` not."""


HeaderValue = bytes | bytearray | memoryview | str | None
Headers = Mapping[str, HeaderValue] | Iterable[tuple[str, HeaderValue]]
"""Record headers as ``send`` takes them: a dict ``{name: value}`` or a list of
``(name, value)`` pairs (a name may repeat), as confluent-kafka takes them. A ``str``
value is sent as its UTF-8 bytes."""


def normalize_headers(headers: Headers | None) -> tuple[Header, ...]:
    """``headers`` as ``(name, bytes or None)`` pairs; TypeError (naming the header)
    for anything that is not a dict or a list of pairs of a str and bytes/str/None."""
    if headers is None:
        return ()
    if isinstance(headers, Mapping):
        items: Iterable[object] = headers.items()
    elif isinstance(headers, str | bytes | bytearray | memoryview) or not isinstance(
        headers, Iterable
    ):
        raise TypeError(
            "headers must be a dict {name: bytes} or a list of (name, bytes) pairs, "
            f"not {type(headers).__name__}"
        )
    else:
        items = headers
    normalized: list[Header] = []
    for item in items:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise TypeError(f"each header must be a (name, value) pair, not {item!r}")
        name, value = item
        if not isinstance(name, str):
            raise TypeError(f"header name {name!r} must be a str, not {type(name).__name__}")
        if isinstance(value, str):
            value = value.encode()
        elif isinstance(value, bytearray | memoryview):
            value = bytes(value)
        elif value is not None and not isinstance(value, bytes):
            raise TypeError(
                f"header {name!r}: value must be bytes, str or None, not {type(value).__name__}"
            )
        normalized.append((name, value))
    return tuple(normalized)


class DeliveryTimeoutError(RequestTimedOutError):
    """A record was not delivered within ``delivery_timeout_ms`` (or ``send`` could not
    buffer it within ``max_block_ms``)."""


class ProducerClosedError(ClientError):
    """The producer is closed (or its sender failed) and accepts no more records."""


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record landed."""

    topic: str
    partition: int
    offset: int
    """-1 with acks=0, where the broker does not answer."""
    timestamp_ms: int
    """The record's timestamp (CreateTime), or the broker's for LogAppendTime topics."""

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def _positive_ms(name: str, value: int, *, zero_ok: bool = True) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"producer option {name} must be an integer, not {value!r}")
    if value < 0 or (value == 0 and not zero_ok):
        raise ValueError(
            f"producer option {name} must be {'>= 0' if zero_ok else '> 0'}, not {value}"
        )
    return value


def _parse_acks(acks: int | str) -> int:
    if acks in ("all", -1, "-1"):
        return -1
    if acks in (0, 1, "0", "1"):
        return int(acks)
    raise ValueError(f"producer option acks must be 0, 1 or 'all' (-1), not {acks!r}")


@dataclass(frozen=True, slots=True)
class _Config:
    client_id: str
    acks: int
    linger_ms: int
    batch_size: int
    buffer_memory: int
    max_request_size: int
    compression: Compression
    max_in_flight: int
    retries: int
    retry_backoff_ms: int
    delivery_timeout_ms: int
    request_timeout_ms: int
    max_block_ms: int
    metadata_max_age_ms: int
    idempotent: bool


class Producer:
    """An asyncio producer. Options are named after Kafka's (``linger.ms`` →
    ``linger_ms``); a bad value raises ``ValueError`` naming the option.

    Use it as ``async with Producer(...) as producer`` or call :meth:`start` and
    :meth:`close`. Records of one partition are delivered in ``send`` order.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str = "sluice-producer",
        acks: int | Literal["all"] = "all",
        linger_ms: int = LINGER_MS_DEFAULT,
        batch_size: int = BATCH_SIZE_DEFAULT,
        buffer_memory: int = BUFFER_MEMORY_DEFAULT,
        max_request_size: int = MAX_REQUEST_SIZE_DEFAULT,
        compression_type: str | None = "none",
        max_in_flight_requests_per_connection: int = MAX_IN_FLIGHT_DEFAULT,
        retries: int = RETRIES_DEFAULT,
        retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT,
        delivery_timeout_ms: int = DELIVERY_TIMEOUT_MS_DEFAULT,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        max_block_ms: int = MAX_BLOCK_MS_DEFAULT,
        metadata_max_age_ms: int = METADATA_MAX_AGE_MS_DEFAULT,
        enable_idempotence: bool | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS,
        partitioner: Partitioner | None = None,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        clock: Clock = SYSTEM_CLOCK,
        random_source: random.Random | None = None,
        **security: Unpack[SecurityOptions],
    ) -> None:
        """Check the options; nothing happens on the network until :meth:`start`.

        ``enable_idempotence`` None means on when ``acks`` is "all", off otherwise.
        ``partitioner`` maps a key to a partition (default: murmur2, as Java and
        librdkafka's ``murmur2_random``); keyless records always use a sticky partition
        per topic that changes each time its batch is sent. ``transactional_id`` makes
        the producer transactional (idempotent, acks="all"; see the module docstring).
        ``key_serializer`` and ``value_serializer`` turn what ``send`` is given into
        bytes (``str.encode``, ``json.dumps(...).encode()``); without them keys and values
        must be bytes-like or None.
        ``security`` holds ``security_protocol`` and its ``ssl_*``/``sasl_*`` options
        (:mod:`sluice.client.security`); an option this class does not take is a
        TypeError naming it and the closest option it takes.
        """
        tls, sasl = security_for("Producer", security, _PRODUCER_OPTIONS)
        acks_value = _parse_acks(acks)
        compression = _COMPRESSION_BY_NAME.get((compression_type or "none").lower())
        if compression is None:
            raise ValueError(
                f"producer option compression_type must be one of "
                f"{', '.join(_COMPRESSION_BY_NAME)}, not {compression_type!r}"
            )
        if transactional_id is not None:
            if acks_value != -1 or enable_idempotence is False:
                raise ValueError(
                    "producer option transactional_id needs acks='all' and idempotence"
                )
            if not transactional_id:
                raise ValueError("producer option transactional_id must not be empty")
            enable_idempotence = True
        if enable_idempotence is None:
            enable_idempotence = acks_value == -1
        elif enable_idempotence and acks_value != -1:
            raise ValueError("producer option enable_idempotence=True needs acks='all'")
        self._config = _Config(
            client_id=client_id,
            acks=acks_value,
            linger_ms=_positive_ms("linger_ms", linger_ms),
            batch_size=_positive_ms("batch_size", batch_size, zero_ok=False),
            buffer_memory=_positive_ms("buffer_memory", buffer_memory, zero_ok=False),
            max_request_size=_positive_ms("max_request_size", max_request_size, zero_ok=False),
            compression=compression,
            max_in_flight=_positive_ms(
                "max_in_flight_requests_per_connection",
                max_in_flight_requests_per_connection,
                zero_ok=False,
            ),
            retries=_positive_ms("retries", retries),
            retry_backoff_ms=_positive_ms("retry_backoff_ms", retry_backoff_ms),
            delivery_timeout_ms=_positive_ms(
                "delivery_timeout_ms", delivery_timeout_ms, zero_ok=False
            ),
            request_timeout_ms=_positive_ms(
                "request_timeout_ms", request_timeout_ms, zero_ok=False
            ),
            max_block_ms=_positive_ms("max_block_ms", max_block_ms),
            metadata_max_age_ms=_positive_ms(
                "metadata_max_age_ms", metadata_max_age_ms, zero_ok=False
            ),
            idempotent=enable_idempotence,
        )
        request_timeout_s = self._config.request_timeout_ms / 1000
        self._cluster = Cluster(
            bootstrap_servers,
            client_id=client_id,
            connect_timeout_s=request_timeout_s,
            request_timeout_s=request_timeout_s,
            sasl=sasl,
            tls=tls,
        )
        self._transactions = (
            None
            if transactional_id is None
            else TransactionManager(
                self._cluster,
                transactional_id,
                transaction_timeout_ms=_positive_ms(
                    "transaction_timeout_ms", transaction_timeout_ms, zero_ok=False
                ),
                timeout_s=self._config.max_block_ms / 1000,
            )
        )
        self._partitioner: Partitioner = partitioner or partition_for_key
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._clock = clock
        self._random = random_source or random.Random()
        self._accumulator: RecordAccumulator[asyncio.Future[RecordMetadata]] = RecordAccumulator(
            batch_bytes_max=self._config.batch_size, linger_ms=linger_ms
        )
        self._partition_counts: dict[str, int] = {}
        self._sticky: dict[str, int] = {}
        self._metadata_lock = asyncio.Lock()
        self._metadata_stale = False
        self._metadata_refreshed_ms = 0
        self._metadata_retry_at_ms = 0
        self._in_flight: dict[NodeId, int] = defaultdict(int)
        self._wakeup = asyncio.Event()
        self._space_freed = asyncio.Event()
        self._all_delivered = asyncio.Event()
        self._all_delivered.set()
        self._flushing = 0
        self._producer_id = -1
        self._producer_epoch = -1
        self._producer_id_wanted = self._config.idempotent
        self._next_sequence: dict[TopicPartition, int] = defaultdict(int)
        self._sender_task: asyncio.Task[None] | None = None
        self._sender_failure: BaseException | None = None
        self._closing = False
        self._closed = False

    # ── lifecycle ──────────────────────────────────────────────────────────────────

    async def start(self) -> None:
        """Connect to a bootstrap broker and start the sender task.

        Raises :class:`~sluice.client.errors.BrokerUnreachableError` ("cannot reach
        broker at …: is `sluice serve` running?") when no bootstrap broker can be
        reached: at once when they refuse connections (after a few quick retries,
        :meth:`Cluster.bootstrap`), after ``request_timeout_ms`` when they do not answer.
        """
        assert self._sender_task is None, "a Producer is started once"
        try:
            await self._cluster.bootstrap()
        except BaseException:
            await self._cluster.close()
            raise
        self._metadata_refreshed_ms = self._clock.monotonic_ms()
        if self._transactions is not None:
            try:
                await self._transactions.init()
            except BaseException:
                await self._cluster.close()
                raise
            self._take_producer_id(
                self._transactions.producer_id, self._transactions.producer_epoch
            )
        self._sender_task = asyncio.create_task(self._run_sender(), name="sluice-producer-sender")

    async def flush(self) -> None:
        """Send every buffered record now (ignoring linger) and wait until each one is
        delivered or failed. Records sent meanwhile are waited for too."""
        self._raise_if_sender_failed()
        if self._sender_task is None:
            return
        self._flushing += 1
        self._accumulator.set_flushing(True)
        self._wakeup.set()
        try:
            waiter = asyncio.ensure_future(self._all_delivered.wait())
            try:
                await asyncio.wait({waiter, self._sender_task}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
        finally:
            self._flushing -= 1
            if not self._flushing:
                self._accumulator.set_flushing(False)
        self._raise_if_sender_failed()

    async def close(self) -> None:
        """Flush, stop the sender and close the connections. Idempotent."""
        if self._closed:
            return
        self._closing = True
        try:
            if self._sender_task is not None:
                if self._sender_failure is None:
                    with contextlib.suppress(ProducerClosedError):
                        await self.flush()
                self._wakeup.set()
                task, self._sender_task = self._sender_task, None
                await asyncio.wait({task})
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]  # a bug in the sender
        finally:
            self._closed = True
            await self._cluster.close()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def _raise_if_sender_failed(self) -> None:
        if self._sender_failure is not None:
            raise ProducerClosedError(
                f"the producer's sender failed: {self._sender_failure!r}"
            ) from self._sender_failure

    # ── transactions ───────────────────────────────────────────────────────────────

    def _transactional(self) -> TransactionManager:
        if self._transactions is None:
            raise TransactionStateError(
                "this producer has no transactional_id: pass one to Producer() to use transactions"
            )
        return self._transactions

    async def begin_transaction(self) -> None:
        """Start a transaction: what is sent until :meth:`commit_transaction` becomes
        visible to read_committed consumers at once, or never."""
        self._transactional().begin()

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group: GroupMetadata | str
    ) -> None:
        """Commit a consumer group's ``offsets`` (next offset to read, per partition)
        with the transaction: they take effect only if it commits. ``group`` is the
        consumer's ``group_metadata()`` (its generation is checked, so a consumer that
        lost its partitions in a rebalance cannot commit), or a group id."""
        transactions = self._transactional()
        transactions.check_can_send()
        metadata = GroupMetadata(group) if isinstance(group, str) else group
        try:
            await transactions.send_offsets(offsets, metadata)
        except (errors.KafkaError, ClientError) as e:
            transactions.fail(e)
            raise

    async def commit_transaction(self) -> None:
        """Flush, then commit. Raises :class:`TransactionAbortableError` when a send of
        the transaction failed (call :meth:`abort_transaction`), and
        :class:`ProducerFencedError` when another producer took over the id."""
        transactions = self._transactional()
        transactions.check_can_send()
        await self.flush()
        if transactions.state is TransactionState.ABORTABLE:
            raise TransactionAbortableError(
                f"the transaction cannot commit: {transactions.failure}; call "
                "abort_transaction() and retry the work in a new transaction"
            ) from transactions.failure
        transactions.check_can_send()
        await transactions.end(commit=True)
        self._take_producer_id(transactions.producer_id, transactions.producer_epoch)

    async def prepare_transaction(self) -> PreparedTransaction:
        """Flush and hand the open transaction over, for another process to commit or
        abort with :func:`sluice.client.transactions.end_prepared` (Spark's driver ends
        its tasks' transactions so). The producer can only be closed afterwards; the
        transaction stays open until ended, or aborted by its timeout."""
        transactions = self._transactional()
        transactions.check_can_send()
        await self.flush()
        return transactions.hand_over()

    async def abort_transaction(self) -> None:
        """Throw the transaction away: what it sent is never seen by read_committed
        consumers, its offsets are not committed. After a failed send the producer
        starts a new epoch (its numbering starts over)."""
        transactions = self._transactional()
        transactions.check_can_send()
        failed = transactions.state is TransactionState.ABORTABLE
        with contextlib.suppress(ProducerClosedError):
            await self.flush()
        await transactions.end(commit=False)
        if failed:
            await transactions.init()
        self._take_producer_id(transactions.producer_id, transactions.producer_epoch)

    # ── sending ────────────────────────────────────────────────────────────────────

    async def send(
        self,
        topic: str,
        value: object = None,
        key: object = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        on_delivery: OnDelivery | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Buffer one record; returns once it is buffered, with a future of its
        :class:`RecordMetadata`.

        Waits (backpressure) while more than ``buffer_memory`` bytes are buffered, and
        raises :class:`DeliveryTimeoutError` after ``max_block_ms`` of waiting for room or
        for the topic's metadata. A record larger than ``max_request_size`` gets a future
        failed with MessageTooLarge. ``headers`` is a dict or a list of ``(name, value)``
        pairs (:data:`Headers`). ``key`` and ``value`` are bytes, bytearray, memoryview
        or None, or what the producer's ``key_serializer``/``value_serializer`` turns
        into bytes. Anything else (a ``str`` value, say) raises TypeError here, saying
        what was given and what is accepted; nothing is buffered then.
        """
        record = self.check_record(topic, value, key, headers, partition, timestamp_ms)
        return await self._send_checked(topic, record, partition, on_delivery)

    def check_record(
        self,
        topic: str,
        value: object = None,
        key: object = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordInput:
        """The record ``send`` would buffer for these arguments (key and value through
        the serializers, as bytes; headers normalized), or the TypeError or ValueError
        ``send`` would raise. Touches no state of the producer but whether it is open,
        so a thread that hands records to the producer's loop checks them itself."""
        if self._closing or self._sender_task is None:
            raise ProducerClosedError(
                "the producer is closed" if self._closing else "the producer is not started"
            )
        if self._transactions is not None:
            self._transactions.check_can_send()
        topic_name(topic)
        key_bytes, value_bytes = self._serialize(key, value)
        record_headers = normalize_headers(headers)
        checked_timestamp_ms = record_timestamp_ms(timestamp_ms)
        if partition is not None and (
            isinstance(partition, bool) or not isinstance(partition, int)
        ):
            raise TypeError(f"partition must be an int or None, not {type(partition).__name__}")
        return RecordInput(key_bytes, value_bytes, record_headers, checked_timestamp_ms)

    async def _send_checked(
        self,
        topic: str,
        record: RecordInput,
        partition: int | None,
        on_delivery: OnDelivery | None,
    ) -> asyncio.Future[RecordMetadata]:
        """``send`` of a record :meth:`check_record` made (the producer's state is
        checked again: records of the sync facade are checked in the caller's thread
        and sent later from the loop's)."""
        if self._closing:
            raise ProducerClosedError("the producer is closed")
        if self._transactions is not None:
            self._transactions.check_can_send()
        key, value, record_headers = record.key, record.value, record.headers
        self._raise_if_sender_failed()
        size_bytes = record_size_bytes(key, value, record_headers)
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        if on_delivery is not None:
            future.add_done_callback(_delivery_callback(on_delivery))
        if size_bytes > self._config.max_request_size:
            future.set_exception(
                errors.MessageTooLarge(
                    f"a record of about {size_bytes} bytes is over max_request_size "
                    f"({self._config.max_request_size} bytes)"
                )
            )
            return future
        if partition is None:
            partition = await self._choose_partition(topic, key)
        else:
            count = self._partition_counts.get(topic)
            if count is None:
                count = await self._load_topic(topic)
            if not 0 <= partition < count:
                raise errors.UnknownTopicOrPartition(
                    f"topic {topic!r} has no partition {partition} (it has {count})"
                )
        if self._accumulator.buffered_bytes + size_bytes > self._config.buffer_memory:
            await self._wait_for_space(size_bytes)
        _, wake = self._accumulator.append(
            TopicPartition(topic, partition),
            record,
            size_bytes,
            future,
            self._clock.monotonic_ms(),
        )
        self._all_delivered.clear()
        if wake:
            self._wakeup.set()
        return future

    def _serialize(self, key: object, value: object) -> tuple[bytes | None, bytes | None]:
        """The record's key and value as bytes (through the serializers, if any);
        TypeError naming the field, the type given and the types accepted."""
        if self._key_serializer is not None and key is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None and value is not None:
            value = self._value_serializer(value)
        return record_bytes("key", key), record_bytes("value", value)

    async def send_and_wait(
        self,
        topic: str,
        value: object = None,
        key: object = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        """Send one record and wait for its delivery."""
        future = await self.send(topic, value, key, headers, partition, timestamp_ms)
        return await future

    async def send_batch(
        self, topic: str, records: Iterable[RecordInput], *, partition: int | None = None
    ) -> list[asyncio.Future[RecordMetadata]]:
        """Buffer many records of one topic; returns their futures in order."""
        return [
            await self.send(
                topic,
                record.value,
                record.key,
                record.headers,
                partition,
                record.timestamp_ms,
            )
            for record in records
        ]

    async def partitions_for(self, topic: str) -> int:
        """The number of partitions of ``topic`` (loading its metadata if needed)."""
        count = self._partition_counts.get(topic)
        return count if count is not None else await self._load_topic(topic)

    async def _choose_partition(self, topic: str, key: bytes | None) -> int:
        count = self._partition_counts.get(topic)
        if count is None:
            count = await self._load_topic(topic)
        if key is not None:
            return self._partitioner(key, count)
        sticky = self._sticky.get(topic)
        if sticky is None or sticky >= count:
            sticky = self._sticky[topic] = self._random.randrange(count)
        return sticky

    async def _wait_for_space(self, size_bytes: int) -> None:
        deadline_ms = self._clock.monotonic_ms() + self._config.max_block_ms
        while (
            self._accumulator.buffered_bytes > 0
            and self._accumulator.buffered_bytes + size_bytes > self._config.buffer_memory
        ):
            self._raise_if_sender_failed()
            remaining_ms = deadline_ms - self._clock.monotonic_ms()
            if remaining_ms <= 0:
                raise DeliveryTimeoutError(
                    f"buffer_memory ({self._config.buffer_memory} bytes) stayed full for "
                    f"max_block_ms ({self._config.max_block_ms} ms)"
                )
            self._space_freed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining_ms / 1000):
                    await self._space_freed.wait()

    # ── metadata ───────────────────────────────────────────────────────────────────

    async def _load_topic(self, topic: str) -> int:
        """Fetch ``topic``'s metadata (auto-creating it if the broker allows) and return
        its partition count; retries until ``max_block_ms``."""
        deadline_ms = self._clock.monotonic_ms() + self._config.max_block_ms
        while True:
            problem: BaseException
            try:
                async with self._metadata_lock:
                    if topic in self._partition_counts:
                        return self._partition_counts[topic]
                    metadata = await self._cluster.metadata([topic], allow_auto_topic_creation=True)
                    self._remember_partition_counts(metadata.topics.values())
                    count = self._partition_counts.get(topic)
                    if count is not None:
                        return count
                    metadata.topic(topic)  # raises the topic's error
                    problem = errors.for_code(ErrorCode.leader_not_available)(
                        f"topic {topic!r} has no partitions yet"
                    )
            except (ClientError, errors.KafkaError) as e:
                if not e.retriable:
                    raise
                problem = e
            if self._clock.monotonic_ms() + self._config.retry_backoff_ms > deadline_ms:
                raise DeliveryTimeoutError(
                    f"no metadata for topic {topic!r} within max_block_ms "
                    f"({self._config.max_block_ms} ms): {problem}"
                ) from problem
            await asyncio.sleep(self._config.retry_backoff_ms / 1000)

    def _remember_partition_counts(self, topics: Iterable[Any]) -> None:
        for topic_metadata in topics:
            if topic_metadata.error_code == ErrorCode.none and topic_metadata.partitions:
                self._partition_counts[topic_metadata.name] = len(topic_metadata.partitions)

    async def _refresh_metadata(self) -> None:
        """Refresh the metadata of every topic produced to; failures are retried later."""
        now_ms = self._clock.monotonic_ms()
        if now_ms < self._metadata_retry_at_ms:
            return
        try:
            async with self._metadata_lock:
                metadata = await self._cluster.metadata(
                    list(self._partition_counts), allow_auto_topic_creation=True
                )
        except (ClientError, errors.KafkaError) as e:
            if not e.retriable:
                raise
            self._metadata_retry_at_ms = now_ms + self._config.retry_backoff_ms
            return
        self._remember_partition_counts(metadata.topics.values())
        self._metadata_stale = False
        self._metadata_refreshed_ms = self._clock.monotonic_ms()
        self._metadata_retry_at_ms = self._metadata_refreshed_ms + self._config.retry_backoff_ms

    def _leader_of(self, topic_partition: TopicPartition) -> NodeId | None:
        metadata = self._cluster.cached_metadata
        if metadata is None:
            return None
        topic = metadata.topics.get(topic_partition.topic)
        if topic is None or topic.error_code != ErrorCode.none:
            return None
        index = topic_partition.partition
        if index >= len(topic.partitions) or topic.partitions[index].partition != index:
            return None
        leader = topic.partitions[index].leader_id
        if leader < 0 or leader not in metadata.brokers:
            return None
        return leader

    async def _init_producer_id(self) -> None:
        connection = await self._cluster.any_connection()
        response = await connection.request(
            Request(
                ApiKey.INIT_PRODUCER_ID,
                {
                    "transactional_id": None,
                    "transaction_timeout": datetime.timedelta(milliseconds=TRANSACTION_TIMEOUT_MS),
                },
            )
        )
        if response.error_code != ErrorCode.none:
            raise errors.for_code(response.error_code)("InitProducerId")
        self._take_producer_id(int(response.producer_id), int(response.producer_epoch))

    def _take_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id or epoch: sequence numbers start over."""
        self._producer_id_wanted = False
        if (producer_id, producer_epoch) == (self._producer_id, self._producer_epoch):
            return
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._next_sequence.clear()

    # ── the sender ─────────────────────────────────────────────────────────────────

    async def _run_sender(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                while not (self._closing and self._accumulator.batch_count == 0):
                    await self._sender_step(group)
        except BaseException as e:
            self._sender_failure = e
            failure = ProducerClosedError(f"the producer's sender failed: {e!r}")
            for batch in self._accumulator.abort_all():
                self._fail(batch, failure)
            self._all_delivered.set()
            self._space_freed.set()
            raise

    async def _sender_step(self, group: asyncio.TaskGroup) -> None:
        self._wakeup.clear()
        config = self._config
        now_ms = self._clock.monotonic_ms()
        for batch in self._accumulator.expired(now_ms, config.delivery_timeout_ms):
            self._fail(batch, self._timeout_error(batch), unmute=False)
        if (
            self._metadata_stale
            or now_ms - self._metadata_refreshed_ms > config.metadata_max_age_ms
        ):
            await self._refresh_metadata()
        if self._producer_id_wanted:
            try:
                await self._init_producer_id()
            except (ClientError, errors.KafkaError) as e:
                if not e.retriable:
                    raise
                await self._sleep_or_wake(config.retry_backoff_ms)
                return
        now_ms = self._clock.monotonic_ms()
        ready, wait_ms = self._accumulator.ready(now_ms)
        if self._transactions is not None:
            ready = await self._add_to_transaction(ready)
        by_leader: dict[NodeId, list[TopicPartition]] = defaultdict(list)
        for topic_partition in ready:
            leader = self._leader_of(topic_partition)
            if leader is None:
                self._metadata_stale = True
                wait_ms = min(wait_ms or config.retry_backoff_ms, config.retry_backoff_ms)
                continue
            by_leader[leader].append(topic_partition)
        for leader, topic_partitions in by_leader.items():
            queued = self._queued_sizes(topic_partitions)
            while queued and self._in_flight[leader] < config.max_in_flight:
                chosen: list[TopicPartition] = []
                request_bytes = 0
                while queued and (
                    not chosen or request_bytes + queued[0][1] <= config.max_request_size
                ):
                    topic_partition, size_bytes = queued.pop(0)
                    chosen.append(topic_partition)
                    request_bytes += size_bytes
                batches = self._accumulator.drain(chosen)
                prepared = [batch for batch in batches if self._prepare(batch)]
                if not prepared:
                    continue
                self._in_flight[leader] += 1
                group.create_task(self._produce(leader, prepared))
        await self._sleep_or_wake(wait_ms)

    async def _add_to_transaction(self, ready: list[TopicPartition]) -> list[TopicPartition]:
        """Add partitions about to get their first batch of the transaction to it; the
        batches of partitions that could not be added fail (the transaction must abort)."""
        transactions = self._transactions
        assert transactions is not None
        new = [tp for tp in ready if tp not in transactions.partitions]
        if not new:
            return ready
        try:
            await transactions.add_partitions(new)
        except (errors.KafkaError, ClientError) as e:
            transactions.fail(e)
            for batch in self._accumulator.drain(new):
                self._fail(batch, e)
            return [tp for tp in ready if tp in transactions.partitions]
        return ready

    def _queued_sizes(
        self, topic_partitions: list[TopicPartition]
    ) -> list[tuple[TopicPartition, int]]:
        return [(tp, self._accumulator.head_size_bytes(tp)) for tp in topic_partitions]

    async def _sleep_or_wake(self, wait_ms: int | None) -> None:
        if self._wakeup.is_set():
            return
        if wait_ms is None:
            await self._wakeup.wait()
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_ms / 1000):
                await self._wakeup.wait()

    def _prepare(self, batch: ProducerBatch[asyncio.Future[RecordMetadata]]) -> bool:
        """Encode a batch on its first send (assigning its sequence numbers); False if
        it cannot be encoded, in which case it has been failed."""
        topic_partition = batch.topic_partition
        if self._sticky.get(topic_partition.topic) == topic_partition.partition:
            del self._sticky[topic_partition.topic]  # keyless records move on
        batch.attempts += 1
        if batch.encoded is not None:
            return True
        batch.base_timestamp_ms = self._clock.wall_ms()
        if self._config.idempotent:
            batch.producer_id = self._producer_id
            batch.producer_epoch = self._producer_epoch
            batch.base_sequence = self._next_sequence[topic_partition]
        try:
            try:
                batch.encoded = self._encode(batch.records, batch)
            except Exception as e:  # one bad record must not stop the sender
                self._drop_unencodable(batch, e)
                batch.encoded = self._encode(batch.records, batch)
        except Exception as e:  # nor a batch that cannot be encoded at all
            batch.base_sequence = NO_SEQUENCE  # its sequence numbers were never used
            self._fail(batch, errors.InvalidRecord(f"cannot encode the batch: {e}"))
            return False
        if self._config.idempotent:
            self._next_sequence[topic_partition] = (batch.base_sequence + batch.record_count) % (
                SEQUENCE_MAX + 1
            )
        return True

    def _encode(self, records: Sequence[RecordInput], batch: ProducerBatch[Any]) -> bytes:
        return build_batch(
            records,
            compression=self._config.compression,
            base_timestamp_ms=batch.base_timestamp_ms,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            transactional=self._transactions is not None,
        )

    def _drop_unencodable(
        self, batch: ProducerBatch[asyncio.Future[RecordMetadata]], failure: Exception
    ) -> None:
        """Take the records that cannot be encoded out of ``batch`` and fail their
        futures, so one bad record fails alone (``send`` checks every record, so this
        only catches what its checks let through). Raises ``failure`` if every record
        encodes on its own (the batch as a whole is the problem)."""
        kept: list[tuple[RecordInput, asyncio.Future[RecordMetadata]]] = []
        dropped = 0
        for record, future in zip(batch.records, batch.tokens, strict=True):
            try:
                self._encode([record], batch)
            except Exception as e:  # this record's own failure
                dropped += 1
                error = errors.InvalidRecord(
                    f"a record for {batch.topic_partition} cannot be encoded: {e!r}"
                )
                if self._transactions is not None:
                    self._transactions.fail(error)  # the transaction lost a record
                if not future.done():
                    future.set_exception(error)
            else:
                kept.append((record, future))
        if not dropped:
            raise failure
        batch.records = [record for record, _ in kept]
        batch.tokens = [future for _, future in kept]
        if not kept:
            raise failure

    async def _produce(
        self, leader: NodeId, batches: list[ProducerBatch[asyncio.Future[RecordMetadata]]]
    ) -> None:
        config = self._config
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for batch in batches:
            by_topic[batch.topic_partition.topic].append(
                {"index": batch.topic_partition.partition, "records": batch.encoded}
            )
        request = Request(
            ApiKey.PRODUCE,
            {
                "transactional_id": None
                if self._transactions is None
                else self._transactions.transactional_id,
                "acks": config.acks,
                "timeout": datetime.timedelta(milliseconds=config.request_timeout_ms),
                "topic_data": [
                    {"name": topic, "partition_data": partitions}
                    for topic, partitions in by_topic.items()
                ],
            },
        )
        connection: BrokerConnection | None = None
        try:
            try:
                connection = await self._cluster.connection(leader)
                response = await connection.request(
                    request,
                    timeout_s=config.request_timeout_ms / 1000,
                    expect_response=config.acks != 0,
                )
            except (ClientError, errors.KafkaError) as e:
                if isinstance(e, RequestTimedOutError) and connection is not None:
                    # Requests on a connection are answered in order: one stuck in the
                    # network holds back every retry sent behind it. Retry on a new
                    # connection (librdkafka and Java do the same).
                    await connection.close()
                self._metadata_stale = True
                for batch in batches:
                    self._retry_or_fail(batch, e)
                return
            if response is None:
                for batch in batches:
                    self._complete(batch, -1, -1)
                return
            answered: dict[TopicPartition, Any] = {}
            for topic in response.responses:
                for partition in topic.partition_responses:
                    answered[TopicPartition(topic.name, int(partition.index))] = partition
            for batch in batches:
                self._handle_answer(batch, answered.get(batch.topic_partition))
        except asyncio.CancelledError:
            # The sender is failing: these records will get no answer.
            for batch in batches:
                self._fail(batch, ProducerClosedError("the producer's sender stopped"))
            raise
        finally:
            self._in_flight[leader] -= 1
            self._wakeup.set()

    def _handle_answer(
        self, batch: ProducerBatch[asyncio.Future[RecordMetadata]], answer: Any
    ) -> None:
        if answer is None:
            self._retry_or_fail(
                batch, errors.UnknownServerError(f"no answer for {batch.topic_partition}")
            )
            return
        code = ErrorCode(answer.error_code)
        if code in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
            log_append_time = getattr(answer, "log_append_time", None)
            log_append_time_ms = (
                int(log_append_time.timestamp() * 1000)
                if isinstance(log_append_time, datetime.datetime)
                else -1
            )
            self._complete(batch, int(answer.base_offset), log_append_time_ms)
            return
        if code in _METADATA_ERRORS:
            self._metadata_stale = True
        detail = getattr(answer, "error_message", None)
        message = f"producing to {batch.topic_partition}" + (f": {detail}" if detail else "")
        self._retry_or_fail(batch, errors.for_code(code)(message))

    def _timeout_error(
        self, batch: ProducerBatch[Any], cause: BaseException | None = None
    ) -> DeliveryTimeoutError:
        suffix = f" (last error: {cause})" if cause is not None else ""
        return DeliveryTimeoutError(
            f"{batch.record_count} records for {batch.topic_partition} were not delivered "
            f"within delivery_timeout_ms ({self._config.delivery_timeout_ms} ms){suffix}"
        )

    def _retry_or_fail(
        self, batch: ProducerBatch[asyncio.Future[RecordMetadata]], error: Exception
    ) -> None:
        now_ms = self._clock.monotonic_ms()
        retriable = bool(getattr(error, "retriable", False))
        if not retriable or batch.attempts > self._config.retries:
            self._fail(batch, error)
            return
        if now_ms - batch.created_ms >= self._config.delivery_timeout_ms:
            self._fail(batch, self._timeout_error(batch, error))
            return
        self._accumulator.requeue(batch, now_ms + self._config.retry_backoff_ms)

    def _complete(
        self,
        batch: ProducerBatch[asyncio.Future[RecordMetadata]],
        base_offset: int,
        log_append_time_ms: int,
    ) -> None:
        self._accumulator.unmute(batch.topic_partition)
        self._release(batch)
        topic, partition = batch.topic_partition
        default_timestamp_ms = (
            log_append_time_ms if log_append_time_ms >= 0 else batch.base_timestamp_ms
        )
        for index, (record, future) in enumerate(zip(batch.records, batch.tokens, strict=True)):
            if future.done():
                continue
            timestamp_ms = (
                record.timestamp_ms
                if record.timestamp_ms is not None and log_append_time_ms < 0
                else default_timestamp_ms
            )
            future.set_result(
                RecordMetadata(
                    topic, partition, base_offset + index if base_offset >= 0 else -1, timestamp_ms
                )
            )

    def _fail(
        self,
        batch: ProducerBatch[asyncio.Future[RecordMetadata]],
        error: BaseException,
        *,
        unmute: bool = True,
    ) -> None:
        """Fail every record of ``batch``; ``unmute`` False for a batch that was never
        drained (its partition may have another batch in flight)."""
        if unmute:
            self._accumulator.unmute(batch.topic_partition)
        self._release(batch)
        if self._transactions is not None:
            # The transaction must abort; aborting starts a new epoch.
            self._transactions.fail(error)
        elif self._config.idempotent and batch.base_sequence >= 0:
            # Its sequence numbers are spent: later batches would leave a gap. Start
            # over with a new producer id.
            self._producer_id_wanted = True
        for future in batch.tokens:
            if not future.done():
                future.set_exception(error)

    def _release(self, batch: ProducerBatch[Any]) -> None:
        self._accumulator.release(batch)
        self._space_freed.set()
        if self._accumulator.batch_count == 0:
            self._all_delivered.set()


_PRODUCER_OPTIONS = option_names(Producer.__init__)


def _delivery_callback(
    on_delivery: OnDelivery,
) -> Callable[[asyncio.Future[RecordMetadata]], None]:
    def done(future: asyncio.Future[RecordMetadata]) -> None:
        if future.cancelled():
            on_delivery(None, asyncio.CancelledError())
        elif (error := future.exception()) is not None:
            on_delivery(None, error)
        else:
            on_delivery(future.result(), None)

    return done
