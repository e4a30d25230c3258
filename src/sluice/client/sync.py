"""Blocking facades over the asyncio clients, for code that runs in plain threads.

Each facade owns one background thread running its own event loop; its methods submit
coroutines to that loop and block until they finish. Futures handed back are
``concurrent.futures.Future`` objects, completed from the loop thread (so their done
callbacks run there and must not block)::

    with sluice.sync.Producer(bootstrap_servers="127.0.0.1:9092") as producer:
        future = producer.send("orders", b"value", key=b"k")
        print(future.result().offset)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import re
import threading
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from types import TracebackType
from typing import Any, TypeVar

from sluice.client import admin_api, consumer_api, producer_api, share_consumer
from sluice.client.admin import (
    ADMIN_TIMEOUT_MS_DEFAULT,
    AlterConfigOp,
    ClusterDescription,
    ConfigEntry,
    ElectionType,
    ListedOffset,
    LogDirDescription,
    NewTopic,
    OffsetSpec,
    PartitionReassignment,
)
from sluice.client.cluster import BrokerMetadata, TopicMetadata
from sluice.client.groups import GroupDescription, GroupListing, OffsetAndMetadata
from sluice.client.producer_api import Headers, OnDelivery, RecordMetadata
from sluice.client.transactions import GroupMetadata
from sluice.common import errors
from sluice.common.ids import TopicPartition
from sluice.protocol.records.builder import RecordInput

__all__ = ["Admin", "Consumer", "Producer", "ShareConsumer"]

_T = TypeVar("_T")

SYNC_HANDOFF_RECORDS_MAX = 10_000
"""Records a sync producer's callers may hand over before the loop thread has taken
them; past this, ``send`` blocks (backpressure across the thread boundary)."""


class _LoopThread:
    """An event loop running in a daemon thread, owned by one facade."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, _T], timeout_s: float | None = None) -> _T:
        assert threading.current_thread() is not self._thread, "would block its own loop"
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def call(self, function: Any, *arguments: Any, **keywords: Any) -> Any:
        """Run a plain (not async) method of the facade's client in this thread: the
        client's state belongs to its loop."""

        async def call() -> Any:
            return function(*arguments, **keywords)

        return self.run(call())

    def start(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run a facade's start-up; if it fails, stop this thread too (the facade
        never comes to exist, so nothing else would)."""
        try:
            return self.run(coroutine)
        except BaseException:
            self.stop()
            raise

    def close(self, closing: Callable[[], Coroutine[Any, Any, object]]) -> None:
        """Run the coroutine ``closing()`` makes, then stop this thread. Idempotent:
        once the loop is closed, ``closing`` is not called."""
        if self.loop.is_closed():
            return
        try:
            self.run(closing())
        finally:
            self.stop()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


def _copy_into(target: concurrent.futures.Future[_T], source: asyncio.Future[_T]) -> None:
    if source.cancelled():
        target.cancel()
    elif (error := source.exception()) is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())


# ── Producer ───────────────────────────────────────────────────────────────────────────


class Producer:
    """:class:`sluice.Producer` with blocking methods; takes the same options.

    The constructor connects (raising as :meth:`sluice.Producer.start` does); use it as a
    context manager or call :meth:`close`.
    """

    def __init__(
        self, bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092", **options: Any
    ) -> None:
        self._producer = producer_api.Producer(bootstrap_servers, **options)
        # Records handed from the calling threads to the loop in bulk: one wake-up of the
        # loop thread serves many sends instead of a round trip per record.
        self._handoff: list[tuple[tuple[Any, ...], concurrent.futures.Future[RecordMetadata]]]
        self._handoff = []
        self._handoff_lock = threading.Condition()
        self._drain_scheduled = False
        self._drain_lock = asyncio.Lock()
        self._loop_thread = _LoopThread("sluice-producer-loop")
        self._loop_thread.start(self._producer.start())

    def send(
        self,
        topic: str,
        value: object = None,
        key: object = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        on_delivery: OnDelivery | None = None,
    ) -> concurrent.futures.Future[RecordMetadata]:
        """Hand one record to the producer; the future completes when it is delivered
        (or fails, e.g. with MessageTooLarge). Blocks while SYNC_HANDOFF_RECORDS_MAX
        records wait for the loop thread, and the loop waits while the producer's
        buffer_memory is full, so a fast caller is held back, never buffered without
        bound."""
        # A TypeError or ValueError for a bad argument is raised here, in the caller.
        record = self._producer.check_record(topic, value, key, headers, partition, timestamp_ms)
        result: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()
        arguments = (topic, record, partition, on_delivery)
        with self._handoff_lock:
            while len(self._handoff) >= SYNC_HANDOFF_RECORDS_MAX:
                self._handoff_lock.wait()
            self._handoff.append((arguments, result))
            schedule = not self._drain_scheduled
            self._drain_scheduled = True
        if schedule:
            asyncio.run_coroutine_threadsafe(self._drain_handoff(), self._loop_thread.loop)
        return result

    async def _drain_handoff(self) -> None:
        # One drain at a time (a scheduled one and flush's may overlap): records reach
        # the producer in the order the callers sent them.
        async with self._drain_lock:
            await self._drain_handoff_locked()

    async def _drain_handoff_locked(self) -> None:
        while True:
            with self._handoff_lock:
                items, self._handoff = self._handoff, []
                if not items:
                    self._drain_scheduled = False
                    return
                self._handoff_lock.notify_all()
            for arguments, result in items:
                try:
                    future = await self._producer._send_checked(*arguments)
                except Exception as e:
                    result.set_exception(e)
                    continue
                future.add_done_callback(functools.partial(_copy_into, result))

    def send_and_wait(
        self,
        topic: str,
        value: object = None,
        key: object = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        """Send one record and block until it is delivered."""
        return self._loop_thread.run(
            self._producer.send_and_wait(topic, value, key, headers, partition, timestamp_ms)
        )

    def send_batch(
        self, topic: str, records: Iterable[RecordInput], *, partition: int | None = None
    ) -> list[concurrent.futures.Future[RecordMetadata]]:
        """Buffer many records of one topic in one hop to the loop thread."""
        return self._loop_thread.run(self._send_batch(topic, list(records), partition))

    async def _send_batch(
        self, topic: str, records: list[RecordInput], partition: int | None
    ) -> list[concurrent.futures.Future[RecordMetadata]]:
        results: list[concurrent.futures.Future[RecordMetadata]] = []
        for future in await self._producer.send_batch(topic, records, partition=partition):
            result: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()
            future.add_done_callback(functools.partial(_copy_into, result))
            results.append(result)
        return results

    def flush(self, timeout_s: float | None = None) -> None:
        """Block until every buffered record is delivered or failed."""
        self._loop_thread.run(self._flush(), timeout_s)

    async def _flush(self) -> None:
        await self._drain_handoff()
        await self._producer.flush()

    # Transactions: each call first hands over the records sent before it, so they
    # belong to the transaction they were sent in.

    def begin_transaction(self) -> None:
        self._loop_thread.run(self._after_handoff(self._producer.begin_transaction))

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group: GroupMetadata | str
    ) -> None:
        self._loop_thread.run(
            self._after_handoff(
                functools.partial(self._producer.send_offsets_to_transaction, offsets, group)
            )
        )

    def commit_transaction(self, timeout_s: float | None = None) -> None:
        self._loop_thread.run(self._after_handoff(self._producer.commit_transaction), timeout_s)

    def abort_transaction(self, timeout_s: float | None = None) -> None:
        self._loop_thread.run(self._after_handoff(self._producer.abort_transaction), timeout_s)

    async def _after_handoff(self, call: Callable[[], Awaitable[None]]) -> None:
        await self._drain_handoff()
        await call()

    def close(self) -> None:
        """Flush, stop the producer and its loop thread. Idempotent."""
        self._loop_thread.close(self._close)

    async def _close(self) -> None:
        await self._drain_handoff()
        await self._producer.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


# ── Consumer ───────────────────────────────────────────────────────────────────────────


class Consumer:
    """:class:`sluice.Consumer` with blocking methods; takes the same options.

    The constructor connects (and subscribes to ``topics`` when given); use it as a
    context manager or call :meth:`close`::

        with sluice.sync.Consumer("orders", group_id="billing") as consumer:
            for record in consumer:
                handle(record)

    Rebalance listener callbacks run in the consumer's loop thread.
    """

    def __init__(self, *topics: str | Iterable[str], **options: Any) -> None:
        self._loop_thread = _LoopThread("sluice-consumer-loop")
        self._consumer = self._loop_thread.start(self._create(topics, options))

    @staticmethod
    async def _create(
        topics: Sequence[str | Iterable[str]], options: dict[str, Any]
    ) -> consumer_api.Consumer:
        consumer = consumer_api.Consumer(*topics, **options)
        await consumer.start()
        return consumer

    # ── subscription and assignment ────────────────────────────────────────────────

    def subscribe(
        self,
        topics: str | Iterable[str] = (),
        *,
        pattern: str | re.Pattern[str] | None = None,
        listener: consumer_api.ConsumerRebalanceListener | None = None,
    ) -> None:
        names = topics if isinstance(topics, str) else list(topics)
        self._loop_thread.call(self._consumer.subscribe, names, pattern=pattern, listener=listener)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._loop_thread.call(self._consumer.assign, list(partitions))

    def unsubscribe(self) -> None:
        self._loop_thread.run(self._consumer.unsubscribe())

    def assignment(self) -> set[TopicPartition]:
        result: set[TopicPartition] = self._loop_thread.call(self._consumer.assignment)
        return result

    def wait_for_assignment(self, timeout_s: float = 30.0) -> set[TopicPartition]:
        return self._loop_thread.run(self._consumer.wait_for_assignment(timeout_s))

    # ── records ────────────────────────────────────────────────────────────────────

    def poll(
        self, timeout_s: float = 0.0, max_records: int | None = None
    ) -> list[consumer_api.ConsumerRecord]:
        """Records that arrive within ``timeout_s`` (an empty list when none do)."""
        batch = self._loop_thread.run(self._consumer.getmany(int(timeout_s * 1000), max_records))
        return [record for records in batch.values() for record in records]

    def getmany(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[consumer_api.ConsumerRecord]]:
        return self._loop_thread.run(self._consumer.getmany(timeout_ms, max_records))

    def getone(self) -> consumer_api.ConsumerRecord:
        return self._loop_thread.run(self._consumer.getone())

    def __iter__(self) -> Iterator[consumer_api.ConsumerRecord]:
        while True:
            yield self.getone()

    # ── positions ──────────────────────────────────────────────────────────────────

    def pause(self, *partitions: TopicPartition) -> None:
        self._loop_thread.call(self._consumer.pause, *partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._loop_thread.call(self._consumer.resume, *partitions)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._loop_thread.call(self._consumer.seek, partition, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._loop_thread.call(self._consumer.seek_to_beginning, *partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._loop_thread.call(self._consumer.seek_to_end, *partitions)

    def position(self, partition: TopicPartition) -> int:
        return self._loop_thread.run(self._consumer.position(partition))

    def committed(self, partition: TopicPartition) -> int | None:
        return self._loop_thread.run(self._consumer.committed(partition))

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        self._loop_thread.run(self._consumer.commit(offsets))

    def retry(self, record: consumer_api.ConsumerRecord, error: BaseException | str) -> str:
        """See :meth:`sluice.Consumer.retry`."""
        topic: str = self._loop_thread.run(self._consumer.retry(record, error))
        return topic

    def dead_letter(self, record: consumer_api.ConsumerRecord, error: BaseException | str) -> str:
        """See :meth:`sluice.Consumer.dead_letter`."""
        topic: str = self._loop_thread.run(self._consumer.dead_letter(record, error))
        return topic

    def lag(self, partition: TopicPartition) -> int | None:
        result: int | None = self._loop_thread.call(self._consumer.lag, partition)
        return result

    def group_metadata(self) -> GroupMetadata:
        result: GroupMetadata = self._loop_thread.call(self._consumer.group_metadata)
        return result

    def positions(self) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = self._loop_thread.call(self._consumer.positions)
        return result

    def rewind_to_committed(self) -> None:
        self._loop_thread.run(self._consumer.rewind_to_committed())

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._loop_thread.run(self._consumer.end_offsets(list(partitions)))

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._loop_thread.run(self._consumer.beginning_offsets(list(partitions)))

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, consumer_api.OffsetAndTimestamp | None]:
        return self._loop_thread.run(self._consumer.offsets_for_times(dict(timestamps)))

    # ── closing ────────────────────────────────────────────────────────────────────

    def close(self, *, finished: bool = True) -> None:
        """Commit (per the delivery mode), leave the group, stop the loop thread."""
        self._loop_thread.close(lambda: self._consumer.close(finished=finished))

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close(finished=exc is None)


# ── ShareConsumer ──────────────────────────────────────────────────────────────────────


class ShareConsumer:
    """:class:`sluice.ShareConsumer` with blocking methods; takes the same options.

    The constructor connects and joins the share group; use it as a context manager or
    call :meth:`close`::

        with sluice.sync.ShareConsumer("jobs", group_id="workers",
                                       acknowledgement_mode="explicit") as consumer:
            for record in consumer.poll(timeout_s=1.0):
                handle(record)
                consumer.accept(record)
            consumer.commit()
    """

    def __init__(self, *topics: str | Iterable[str], **options: Any) -> None:
        self._loop_thread = _LoopThread("sluice-share-consumer-loop")
        self._consumer = self._loop_thread.start(self._create(topics, options))

    @staticmethod
    async def _create(
        topics: Sequence[str | Iterable[str]], options: dict[str, Any]
    ) -> share_consumer.ShareConsumer:
        consumer = share_consumer.ShareConsumer(*topics, **options)
        await consumer.start()
        return consumer

    @property
    def member_id(self) -> str | None:
        return self._consumer.member_id

    def assignment(self) -> set[TopicPartition]:
        result: set[TopicPartition] = self._loop_thread.call(self._consumer.assignment)
        return result

    def wait_for_assignment(self, timeout_s: float = 30.0) -> set[TopicPartition]:
        return self._loop_thread.run(self._consumer.wait_for_assignment(timeout_s))

    def poll(self, timeout_s: float = 0.0) -> list[share_consumer.ShareConsumerRecord]:
        """Records acquired within ``timeout_s`` (see :meth:`sluice.ShareConsumer.poll`)."""
        return self._loop_thread.run(self._consumer.poll(timeout_s))

    def accept(self, record: share_consumer.ShareConsumerRecord) -> None:
        self._loop_thread.call(self._consumer.accept, record)

    def release(self, record: share_consumer.ShareConsumerRecord) -> None:
        self._loop_thread.call(self._consumer.release, record)

    def reject(self, record: share_consumer.ShareConsumerRecord) -> None:
        self._loop_thread.call(self._consumer.reject, record)

    def renew(self, record: share_consumer.ShareConsumerRecord) -> None:
        self._loop_thread.call(self._consumer.renew, record)

    def commit(self) -> dict[TopicPartition, errors.KafkaError | None]:
        """Send the acknowledgements; per partition the broker's error or None."""
        return self._loop_thread.run(self._consumer.commit())

    def close(self, *, finished: bool = True) -> None:
        """Release what is held, close the sessions, leave the group, stop the thread."""
        self._loop_thread.close(lambda: self._consumer.close(finished=finished))

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close(finished=exc is None)


# ── Admin ──────────────────────────────────────────────────────────────────────────────


class Admin:
    """:class:`sluice.Admin` with blocking methods; takes the same options.

    The constructor connects (raising as :meth:`sluice.Admin.start` does); use it as a
    context manager or call :meth:`close`::

        with sluice.sync.Admin(bootstrap_servers="127.0.0.1:9092") as admin:
            admin.create_topics([NewTopic("orders", partitions=3)])

    Each method runs the async method of the same name (documented in
    :class:`sluice.client.admin.Admin`) in the facade's loop thread and blocks until it
    finishes.
    """

    def __init__(
        self, bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092", **options: Any
    ) -> None:
        self._loop_thread = _LoopThread("sluice-admin-loop")
        self._admin = self._loop_thread.start(self._create(bootstrap_servers, options))

    @staticmethod
    async def _create(
        bootstrap_servers: str | Sequence[str], options: dict[str, Any]
    ) -> admin_api.Admin:
        admin = admin_api.Admin(bootstrap_servers, **options)
        await admin.start()
        return admin

    def _run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return self._loop_thread.run(coroutine)

    # ── cluster and topics ─────────────────────────────────────────────────────────

    def describe_cluster(self) -> ClusterDescription:
        return self._run(self._admin.describe_cluster())

    def describe_log_dirs(
        self,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        brokers: Iterable[int] | None = None,
    ) -> dict[int, list[LogDirDescription]]:
        return self._run(self._admin.describe_log_dirs(partitions, brokers=brokers))

    def elect_leaders(
        self,
        election_type: ElectionType = ElectionType.PREFERRED,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int = ADMIN_TIMEOUT_MS_DEFAULT,
    ) -> dict[TopicPartition, errors.KafkaError | None]:
        return self._run(
            self._admin.elect_leaders(election_type, partitions, timeout_ms=timeout_ms)
        )

    def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        return self._run(self._admin.list_partition_reassignments(partitions))

    def list_topics(self, *, include_internal: bool = False) -> list[TopicMetadata]:
        return self._run(self._admin.list_topics(include_internal=include_internal))

    def describe_topic(self, name: str) -> TopicMetadata:
        return self._run(self._admin.describe_topic(name))

    def create_topics(
        self,
        topics: Sequence[NewTopic],
        *,
        timeout_ms: int = ADMIN_TIMEOUT_MS_DEFAULT,
        validate_only: bool = False,
    ) -> None:
        self._run(
            self._admin.create_topics(topics, timeout_ms=timeout_ms, validate_only=validate_only)
        )

    def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int = ADMIN_TIMEOUT_MS_DEFAULT
    ) -> None:
        self._run(self._admin.delete_topics(names, timeout_ms=timeout_ms))

    def create_partitions(
        self,
        new_totals: Mapping[str, int],
        *,
        validate_only: bool = False,
        timeout_ms: int = ADMIN_TIMEOUT_MS_DEFAULT,
    ) -> None:
        self._run(
            self._admin.create_partitions(
                new_totals, validate_only=validate_only, timeout_ms=timeout_ms
            )
        )

    def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int = ADMIN_TIMEOUT_MS_DEFAULT
    ) -> dict[TopicPartition, int]:
        return self._run(self._admin.delete_records(offsets, timeout_ms=timeout_ms))

    # ── configs ────────────────────────────────────────────────────────────────────

    def describe_topic_configs(self, topic: str) -> dict[str, ConfigEntry]:
        return self._run(self._admin.describe_topic_configs(topic))

    def describe_configs(self, resource_type: int, name: str) -> dict[str, ConfigEntry]:
        return self._run(self._admin.describe_configs(resource_type, name))

    def alter_topic_configs(
        self, topic: str, operations: Sequence[AlterConfigOp], *, validate_only: bool = False
    ) -> None:
        self._run(self._admin.alter_topic_configs(topic, operations, validate_only=validate_only))

    def incremental_alter_configs(
        self,
        resource_type: int,
        name: str,
        operations: Sequence[AlterConfigOp],
        *,
        validate_only: bool = False,
    ) -> None:
        self._run(
            self._admin.incremental_alter_configs(
                resource_type, name, operations, validate_only=validate_only
            )
        )

    # ── offsets ────────────────────────────────────────────────────────────────────

    def list_offsets(
        self,
        partitions: Iterable[TopicPartition],
        spec: OffsetSpec | int,
        *,
        read_committed: bool = False,
    ) -> dict[TopicPartition, ListedOffset]:
        return self._run(
            self._admin.list_offsets(list(partitions), spec, read_committed=read_committed)
        )

    # ── consumer groups ────────────────────────────────────────────────────────────

    def find_coordinator(self, group_id: str) -> BrokerMetadata:
        return self._run(self._admin.find_coordinator(group_id))

    def list_groups(self) -> list[GroupListing]:
        return self._run(self._admin.list_groups())

    def describe_groups(self, group_ids: Sequence[str]) -> list[GroupDescription]:
        return self._run(self._admin.describe_groups(group_ids))

    def list_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        wanted = None if partitions is None else list(partitions)
        return self._run(self._admin.list_group_offsets(group_id, wanted))

    def alter_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> None:
        self._run(self._admin.alter_group_offsets(group_id, offsets))

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, errors.KafkaError | None]:
        return self._run(self._admin.delete_groups(group_ids))

    def delete_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        self._run(self._admin.delete_group_offsets(group_id, list(partitions)))

    # ── closing ────────────────────────────────────────────────────────────────────

    def close(self) -> None:
        """Close the connections and stop the loop thread. Idempotent."""
        self._loop_thread.close(self._admin.close)

    def __enter__(self) -> Admin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
