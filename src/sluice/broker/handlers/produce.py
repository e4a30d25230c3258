"""Produce v3–13: validate each partition's batch, append it as leader, answer per acks.

Every partition's batch is checked before it is stored: its header
(:func:`~sluice.protocol.records.batch.validate_produced`), then its records
(:class:`~sluice.protocol.records.produced.ProducedRecordsCheck`: framing and count,
compressed batches decompressed in bounded chunks, keys on compacted topics). Refusals
get Kafka's error codes; records without a key on a compacted topic are also listed in
``record_errors`` (v8), as Kafka lists them. Internal topics (``__consumer_offsets``…)
are written by the broker itself; a client's produce to one is refused with
INVALID_TOPIC_EXCEPTION, as Kafka refuses it (Kafka exempts the client id
``__admin_client``, for its old Scala tools; Sluice has no such tools and no exemption).

Appends happen in request arrival order per partition. A batch whose check is cheap is
checked and appended synchronously, before the handler's first ``await``; a large one is
checked in a worker thread and appended after it, keeping its place in the partition's
queue (:mod:`sluice.broker.produce_checks`).

Pipelined produce requests on a connection start in arrival order. A request naming
topics that must be auto-created first waits for their creation (off the event loop),
and later produce requests on its connection wait for it before appending, so the order
holds then too. Then, for acks=all, the request waits in the purgatory until the high
watermark covers each partition's last offset, or the request timeout passes. acks=0 gets
no response at all, as in Kafka. Topics with flush.ms=0 or flush.messages=1 are
fsynced by the log inside the append, before any answer.

A transactional batch that would open its producer's transaction on the partition is
first verified with the transaction coordinator (KIP-890 part 1, see
:mod:`sluice.broker.coordination.transactions`), keeping its place in the partition's append queue
meanwhile; it is refused with INVALID_TXN_STATE when its transaction is not open (it was
delayed past its end, or comes from a zombie), and also when a marker for its producer
landed between the verification and the append.

Versions 0–2 are advertised (librdkafka < 2.11 turns compression off otherwise) but
answered with UNSUPPORTED_VERSION for every partition: they carry magic 0/1 message sets
that Sluice does not store.

v13 names topics by id (no auto-creation then): an id no topic has is answered with
UNKNOWN_TOPIC_ID for each of its partitions. From v10 a NOT_LEADER_OR_FOLLOWER answer
names the partition's current leader and epoch, and the response lists those leaders'
endpoints (KIP-951).

With the authorizer on (:mod:`sluice.broker.handlers.acl_rules`): a transactional request
needs WRITE on its transactional id (else every partition is answered
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), an idempotent one IDEMPOTENT_WRITE on the cluster
or WRITE on some topic (else CLUSTER_AUTHORIZATION_FAILED), and each topic WRITE (else
TOPIC_AUTHORIZATION_FAILED); a missing topic is created only with CREATE on the cluster
or the topic.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.extensions.delays import SLUICE_HEADER_PREFIX, park_if_delayed
from sluice.broker.extensions.views import VIEW_SOURCE, view_of
from sluice.broker.handlers.acl_rules import (
    CLUSTER_CREATE,
    IDEMPOTENT_WRITE,
    TOPIC_CREATE,
    TOPIC_WRITE,
    TRANSACTIONAL_WRITE,
)
from sluice.broker.handlers.produce_response import PartitionOutcome, produce_response
from sluice.broker.network.server import ConnectionInfo, Deferred
from sluice.broker.schema_validation import record_errors, refusal_message
from sluice.broker.services import (
    UsesAuthorizer,
    UsesCheckStorageError,
    UsesClock,
    UsesConfig,
    UsesDelays,
    UsesProduceChecks,
    UsesPurgatory,
    UsesReplicas,
    UsesSchemaValidation,
    UsesTopics,
    UsesTraffic,
    UsesVerifyTransaction,
)
from sluice.broker.topics import is_internal_topic
from sluice.cluster.model import ZERO_TOPIC_ID
from sluice.common import errors
from sluice.common.config import TopicConfig
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.common.limits import (
    DECOMPRESSED_BYTES_CHECKED_ON_EVENT_LOOP_MAX,
    PRODUCE_TIMEOUT_MS_MAX,
)
from sluice.protocol import framing
from sluice.protocol.codec import RequestHeader, response_header_bytes
from sluice.protocol.messages import millis
from sluice.protocol.records.batch import BatchHeader, parse_header, validate_produced
from sluice.protocol.records.produced import ProducedRecordsCheck
from sluice.schemas.validation import FieldIds

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext
    from sluice.broker.produce_checks import AppendTurn
    from sluice.broker.replication.partition import Partition


class ProduceServices(
    UsesAuthorizer,
    UsesCheckStorageError,
    UsesClock,
    UsesConfig,
    UsesDelays,
    UsesProduceChecks,
    UsesPurgatory,
    UsesReplicas,
    UsesSchemaValidation,
    UsesTopics,
    UsesTraffic,
    UsesVerifyTransaction,
    Protocol,
):
    """What the produce handlers use of the broker."""


log = logging.getLogger(__name__)

PRODUCE_VERSION_MIN_SERVED = 3

_APPENDS_PENDING: dict[ConnectionInfo, asyncio.Future[None]] = {}
"""Per connection, the produce request that last had to wait (for topic creation) before
appending; produce requests after it on that connection append after it. A request
removes its entry when it is done (none is left behind by a closed connection), so
this is empty, and costs one truth test per request, while nothing waits."""

_NOTHING_REFUSED: dict[str, ErrorCode] = {}
"""What ``_refused_topics`` answers without an authorizer (never modified)."""

TOPIC_IDS_SINCE_VERSION = 13
"""Produce v13+ names topics by id (KIP-516), not by name."""


def _refuse(
    services: ProduceServices,
    outcome: PartitionOutcome,
    topic_partition: TopicPartition,
    e: KafkaError,
) -> None:
    outcome.error_code = e.code
    outcome.error_message = e.message
    if e.code == ErrorCode.kafka_storage_error:
        services.check_storage_error(e, topic_partition)
    if e.code in (ErrorCode.corrupt_message, ErrorCode.invalid_record):
        log.warning("refused produce to %s: %s", topic_partition, e)


@dataclass(frozen=True)
class _Verification:
    """A transactional batch to verify with its coordinator before it is appended."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    markers_before: int
    """Markers for the producer appended to the partition before the verification."""
    add: bool
    """Produce v12+ (transaction version 2): add the partition, do not only check."""
    abortable: bool
    """Produce v11+: a transaction that is not open is answered TRANSACTION_ABORTABLE."""


TRANSACTION_ABORTABLE_SINCE_VERSION = 11
"""Produce versions that know TRANSACTION_ABORTABLE (KIP-890): a transactional batch
whose transaction is not open gets it instead of INVALID_TXN_STATE."""
IMPLICIT_ADD_SINCE_VERSION = 12


def _verification_needed(
    partition: Partition, header: BatchHeader, transactional_id: str | None, version: int
) -> _Verification | None:
    if transactional_id is None:
        raise errors.InvalidRecord("a transactional batch in a produce without transactional id")
    producer_state = partition.log.producer_state
    if producer_state.has_open_transaction(header.producer_id, header.producer_epoch):
        return None
    return _Verification(
        transactional_id,
        header.producer_id,
        header.producer_epoch,
        producer_state.markers_appended.get(header.producer_id, 0),
        add=version >= IMPLICIT_ADD_SINCE_VERSION,
        abortable=version >= TRANSACTION_ABORTABLE_SINCE_VERSION,
    )


def _start_one(
    services: ProduceServices,
    topic_partition: TopicPartition,
    records: bytes | None,
    acks: int,
    outcome: PartitionOutcome,
    creation_failures: dict[str, KafkaError],
    transactional_id: str | None,
    version: int,
) -> _UnfinishedAppend | None:
    """Check and append one partition's batch now, or return what finishes it later
    (having taken its turn in the partition's append queue)."""
    try:
        if topic_partition.topic in creation_failures:
            raise creation_failures[topic_partition.topic]
        if is_internal_topic(topic_partition.topic):
            raise errors.InvalidTopicException(
                f"cannot produce to internal topic {topic_partition.topic}"
            )
        topic = services.topics.get(topic_partition.topic)
        if topic is None:
            raise errors.UnknownTopicOrPartition(f"topic {topic_partition.topic!r} does not exist")
        view = view_of(topic) if VIEW_SOURCE in topic.configs else None
        if view is not None:
            raise errors.InvalidTopicException(
                f"topic {view.name!r} is a read-only view of {view.source!r}: produce to "
                f"{view.source!r}"
            )
        partition = services.replicas.get(topic_partition)
        config = partition.log.config
        if records is None:
            raise errors.InvalidRecord("partition data has no record batch")
        header = validate_produced(records, config.max_message_bytes)
        verification = None
        if header.is_transactional:
            verification = _verification_needed(partition, header, transactional_id, version)
        check = ProducedRecordsCheck(
            records,
            header,
            max_message_bytes=config.max_message_bytes,
            keys_required=config.compact,
            watch_for=SLUICE_HEADER_PREFIX,
            decompressed_ceiling_bytes=services.config.produce_max_decompressed_bytes,
            keep_records=config.schema_validation,
        )
        checks = services.produce_checks
        ids: FieldIds | None = None
        if check.fits_event_loop:
            check.advance(DECOMPRESSED_BYTES_CHECKED_ON_EVENT_LOOP_MAX)
            if (
                check.done
                and verification is None
                and not checks.has_waiting_turns(topic_partition)
            ):
                decided = True
                if config.schema_validation:
                    ids, refused = _schemas_decided_now(
                        services, topic_partition, config, check, header.records_count
                    )
                    if refused:
                        _refuse_schemas(outcome, topic_partition, refused)
                        return None
                    decided = refused is not None
                if decided:
                    _append_checked(
                        services, topic_partition, records, header, check, acks, outcome, partition
                    )
                    return None
        turn = checks.take_turn(topic_partition)
    except KafkaError as e:
        _refuse(services, outcome, topic_partition, e)
        return None
    return _UnfinishedAppend(
        services,
        topic_partition,
        records,
        header,
        check,
        acks,
        outcome,
        turn,
        verification,
        config if config.schema_validation else None,
        ids,
    )


def _schemas_decided_now(
    services: ProduceServices,
    topic_partition: TopicPartition,
    config: TopicConfig,
    check: ProducedRecordsCheck,
    records_count: int,
) -> tuple[FieldIds | None, list[tuple[int, str]] | None]:
    """A validated topic's batch, checked on the event loop: its schema ids (None when
    too large to read here) and the records refused, when the validation's cache alone
    decides (None when the registry must be asked)."""
    validation = services.schema_validation
    section = check.records_section
    if section is None:
        return None, None
    ids = validation.ids_now(config, section, records_count)
    if ids is None:
        return None, None
    return ids, validation.refusals_now(topic_partition.topic, config, ids)


def _refuse_schemas(
    outcome: PartitionOutcome, topic_partition: TopicPartition, refused: list[tuple[int, str]]
) -> None:
    """Answer INVALID_RECORD naming each record the schema validation refused."""
    outcome.error_code = ErrorCode.invalid_record
    outcome.error_message = refusal_message(topic_partition.topic, refused)
    outcome.record_errors = record_errors(refused)
    log.info("refused produce to %s: %s", topic_partition, outcome.error_message)


@dataclass
class _UnfinishedAppend:
    """A batch whose check continues in a thread, or whose append waits for its turn.
    Its turn must be released whatever happens: the handler does it in a ``finally``,
    since a task cancelled before it starts never runs its own."""

    services: ProduceServices
    topic_partition: TopicPartition
    records: bytes
    header: BatchHeader
    check: ProducedRecordsCheck
    acks: int
    outcome: PartitionOutcome
    turn: AppendTurn
    verification: _Verification | None = None
    validated: TopicConfig | None = None
    """The topic's config when it validates its records' schema ids."""
    ids: FieldIds | None = None
    """Their schema ids, when already read."""

    async def finish(self) -> None:
        try:
            if not self.check.done:
                await self.services.produce_checks.run(self.check.advance)
            if self.validated is not None and not await self._schemas_valid(self.validated):
                return
            verification = self.verification
            if verification is not None:
                await self.services.verify_transaction(
                    verification.transactional_id,
                    verification.producer_id,
                    verification.producer_epoch,
                    self.topic_partition,
                    verification.add,
                )
            await self.turn.wait()
            if verification is not None:
                log_state = self.services.replicas.get(self.topic_partition).log.producer_state
                appended = log_state.markers_appended.get(verification.producer_id, 0)
                if appended != verification.markers_before:
                    raise errors.for_code(ErrorCode.invalid_txn_state)(
                        f"the transaction of {verification.transactional_id!r} ended while "
                        "this batch was being verified"
                    )
            _append_checked(
                self.services,
                self.topic_partition,
                self.records,
                self.header,
                self.check,
                self.acks,
                self.outcome,
            )
        except KafkaError as e:
            if (
                self.verification is not None
                and self.verification.abortable
                and e.code is ErrorCode.invalid_txn_state
            ):
                e = errors.for_code(ErrorCode.transaction_abortable)(e.message)
            _refuse(self.services, self.outcome, self.topic_partition, e)
        finally:
            self.turn.release()

    async def _schemas_valid(self, config: TopicConfig) -> bool:
        """Whether the records' schema ids pass the topic's validation; if not, the
        partition is answered INVALID_RECORD naming each refused record."""
        validation = self.services.schema_validation
        section = self.check.records_section
        assert section is not None, "a validated topic's check keeps its records"
        topic_partition = self.topic_partition
        refused = await validation.refusals(
            topic_partition.topic,
            config,
            section,
            self.header.records_count,
            self.services.produce_checks,
            self.ids,
        )
        if not refused:
            return True
        _refuse_schemas(self.outcome, topic_partition, refused)
        return False


def _append_checked(
    services: ProduceServices,
    topic_partition: TopicPartition,
    records: bytes,
    header: BatchHeader,
    check: ProducedRecordsCheck,
    acks: int,
    outcome: PartitionOutcome,
    partition: Partition | None = None,
) -> None:
    """Append a batch (``header``: its header) whose check is done, or refuse it for its
    keyless records. ``partition``: the replica, when just looked up. Raises KafkaError
    for what the append itself refuses."""
    if check.keyless_records:
        _refuse_keyless_records(outcome, topic_partition, check)
        return
    if partition is None:
        partition = services.replicas.get(topic_partition)
    config = partition.log.config
    parked = None
    if check.watched_seen or config.sluice_delivery_delay_ms > 0:
        now_ms = services.clock.wall_ms()
        parked = park_if_delayed(records, header, config, now_ms)
    if parked is None:
        result = partition.append(bytearray(records), acks=acks, header=header)
    else:
        result = partition.append(bytearray(parked[0]), acks=acks, parked=parked[1])
    if parked is not None and not result.duplicate:
        services.delays.parked(
            topic_partition,
            [(d.due_ms, result.base_offset + i) for i, d in enumerate(parked[1])],
        )
    if not result.duplicate:
        services.traffic.produced(
            topic_partition.topic, len(records), result.last_offset - result.base_offset + 1
        )
    outcome.base_offset = result.base_offset
    outcome.log_append_time_ms = result.log_append_time_ms
    outcome.log_start_offset = result.log_start_offset
    if acks == -1:
        outcome.replication = (partition, result.last_offset + 1, partition.leader_epoch)


def _refuse_keyless_records(
    outcome: PartitionOutcome, topic_partition: TopicPartition, check: ProducedRecordsCheck
) -> None:
    """A compacted topic keeps the last value per key, so a record without a key could
    never be compacted away; Kafka refuses the batch with INVALID_RECORD and names each
    such record in ``record_errors``, and so does Sluice (the first
    ``RECORD_ERRORS_PER_PARTITION_MAX`` of them)."""
    reason = f"compacted topic {topic_partition.topic} cannot accept a record without a key"
    indexes = check.keyless_record_indexes
    outcome.error_code = ErrorCode.invalid_record
    outcome.record_errors = [(index, reason) for index in indexes]
    outcome.error_message = (
        f"{check.keyless_records} record(s) rejected: {reason} (record "
        + ", ".join(map(str, indexes[:3]))
        + (", …)" if check.keyless_records > 3 else ")")
    )


Replicating = dict[TopicPartition, tuple["Partition", int, int]]
"""Partitions of an acks=all produce not yet committed: (partition, end offset, epoch)."""


def _replicating(outcomes: dict[TopicPartition, PartitionOutcome]) -> Replicating:
    """The appended partitions of an acks=all produce not yet committed by the ISR (a
    single replica commits at once); those settled already get their outcome now."""
    waiting = {tp: o.replication for tp, o in outcomes.items() if o.replication is not None}
    if not waiting:
        return {}
    settled = _outcomes_now(waiting)
    if False not in settled:
        _settle(outcomes, waiting, settled)
        return {}
    return waiting


async def _answer_once_replicated(
    services: ProduceServices,
    version: int,
    answers: dict[str | uuid.UUID, list[TopicPartition | PartitionOutcome]],
    outcomes: dict[TopicPartition, PartitionOutcome],
    waiting: Replicating,
    timeout: datetime.timedelta,
    listener: str,
) -> Any:
    """acks=all: wait until every appended batch is committed by the ISR, leadership
    moved, or the timeout passed; answer each partition accordingly."""

    def committed() -> bool:
        return False not in _outcomes_now(waiting)

    timeout_s = min(max(millis(timeout), 0), PRODUCE_TIMEOUT_MS_MAX) / 1000
    await services.purgatory.wait_until(waiting, committed, timeout_s)
    _settle(outcomes, waiting, _outcomes_now(waiting))
    return _answer(services, version, answers, outcomes, listener)


def _outcomes_now(waiting: Replicating) -> list[KafkaError | bool]:
    """Each waiting partition's :meth:`Partition.acks_all_outcome` now (False: waits)."""
    return [
        partition.acks_all_outcome(end_offset, epoch)
        for partition, end_offset, epoch in waiting.values()
    ]


def _settle(
    outcomes: dict[TopicPartition, PartitionOutcome],
    waiting: Replicating,
    settled: list[KafkaError | bool],
) -> None:
    for tp, settled_as in zip(waiting, settled, strict=True):
        outcome = outcomes[tp]
        if settled_as is False:
            outcome.error_code = ErrorCode.request_timed_out
            outcome.error_message = "not replicated to the in-sync replicas in time"
        elif isinstance(settled_as, KafkaError):
            outcome.error_code = settled_as.code
            outcome.error_message = settled_as.message


def _has_idempotent_batch(request: Any) -> bool:
    for topic_data in request.topic_data:
        for partition_data in topic_data.partition_data:
            try:
                if partition_data.records and parse_header(partition_data.records).has_producer_id:
                    return True
            except KafkaError:
                continue  # refused when appended
    return False


def _refused_topics(
    services: ProduceServices, context: RequestContext, request: Any
) -> dict[str, ErrorCode]:
    """The topics this request may not write to, with the error answering them (Kafka's
    order: the transactional id, then idempotence, then each topic's WRITE)."""
    authorizer = services.authorizer
    if not authorizer.enabled:
        return {}
    names = {
        name
        for t in request.topic_data
        if (
            name := _topic_name(services, t)
            if context.header.api_version >= TOPIC_IDS_SINCE_VERSION
            else str(t.name)
        )
    }
    transactional_id = request.transactional_id
    if transactional_id is not None:
        if not authorizer.allows(context, TRANSACTIONAL_WRITE, transactional_id):
            return dict.fromkeys(names, TRANSACTIONAL_WRITE.error_code)
    elif (
        _has_idempotent_batch(request)
        and not authorizer.allows(context, IDEMPOTENT_WRITE)
        and not authorizer.allows_any(context, TOPIC_WRITE)
    ):
        return dict.fromkeys(names, IDEMPOTENT_WRITE.error_code)
    refused = {
        n: TOPIC_WRITE.error_code for n in names if not authorizer.allows(context, TOPIC_WRITE, n)
    }
    may_create_any = authorizer.allows(context, CLUSTER_CREATE)
    for name in names - set(refused):
        if services.topics.get(name) is None and not (
            may_create_any or authorizer.allows(context, TOPIC_CREATE, name)
        ):
            refused[name] = ErrorCode.unknown_topic_or_partition
    return refused


async def handle_produce(services: ProduceServices, context: RequestContext, request: Any) -> Any:
    if context.header.api_version < PRODUCE_VERSION_MIN_SERVED:
        return _legacy_unsupported(context.header, request)
    acks = int(request.acks)
    refused = (
        _refused_topics(services, context, request)
        if services.authorizer.enabled
        else _NOTHING_REFUSED
    )
    outcomes: dict[TopicPartition, PartitionOutcome] = {}
    # What to answer, by the topic key of the request (name, or id from v13): the
    # partition whose outcome it is, or the outcome itself for a topic id nobody has.
    answers: dict[str | uuid.UUID, list[TopicPartition | PartitionOutcome]] = {}
    version = context.header.api_version
    by_id = version >= TOPIC_IDS_SINCE_VERSION
    previous = _APPENDS_PENDING.get(context.connection) if _APPENDS_PENDING else None
    missing = (
        []
        if by_id
        else [
            str(t.name)
            for t in request.topic_data
            if services.topics.get(str(t.name)) is None and str(t.name) not in refused
        ]
    )
    turn: asyncio.Future[None] | None = None
    if (missing and acks in (0, 1, -1)) or (previous is not None and not previous.done()):
        turn = asyncio.get_running_loop().create_future()
        _APPENDS_PENDING[context.connection] = turn
    unfinished: list[_UnfinishedAppend] = []
    try:
        creation_failures: dict[str, KafkaError] = {}
        if turn is not None:
            if previous is not None:
                await asyncio.shield(previous)
            if missing and acks in (0, 1, -1):
                found = await services.topics.ensure_all(missing)
                creation_failures = {n: t for n, t in found.items() if isinstance(t, KafkaError)}
        for topic_data in request.topic_data:
            name: str | None = _topic_name(services, topic_data) if by_id else str(topic_data.name)
            key: str | uuid.UUID = (
                (topic_data.topic_id or ZERO_TOPIC_ID) if by_id else str(topic_data.name)
            )
            topic_answers = answers.setdefault(key, [])
            for partition_data in topic_data.partition_data:
                if name is None:
                    unknown = PartitionOutcome(
                        partition_data.index,
                        error_code=ErrorCode.unknown_topic_id,
                        error_message=f"no topic has id {topic_data.topic_id}",
                    )
                    topic_answers.append(unknown)
                    continue
                tp = TopicPartition(name, partition_data.index)
                if tp in outcomes:
                    continue  # a partition named twice is answered (and appended) once
                topic_answers.append(tp)
                outcome = outcomes[tp] = PartitionOutcome(tp.partition)
                if acks not in (0, 1, -1):
                    outcome.error_code = ErrorCode.invalid_required_acks
                    continue
                if name in refused:
                    outcome.error_code = refused[name]
                    continue
                later = _start_one(
                    services,
                    tp,
                    partition_data.records,
                    acks,
                    outcome,
                    creation_failures,
                    request.transactional_id,
                    version,
                )
                if later is not None:
                    unfinished.append(later)
        if unfinished:
            await asyncio.gather(*(append.finish() for append in unfinished))
    finally:
        for append in unfinished:
            append.turn.release()
        if turn is not None:
            turn.set_result(None)
            if _APPENDS_PENDING.get(context.connection) is turn:
                del _APPENDS_PENDING[context.connection]
    for tp, outcome in outcomes.items():
        if outcome.error_code == ErrorCode.not_leader_or_follower:
            outcome.current_leader = _current_leader(services, tp)
    if acks == 0:
        _count_refused(services, outcomes)
        return None
    listener = context.connection.listener_name
    if acks == -1 and (waiting := _replicating(outcomes)):
        # Appended; only the in-sync replicas are awaited now: the connection may take
        # its next Produce meanwhile (server.Deferred).
        return Deferred(
            _answer_once_replicated(
                services, version, answers, outcomes, waiting, request.timeout, listener
            )
        )
    return _answer(services, version, answers, outcomes, listener)


def _answer(
    services: ProduceServices,
    version: int,
    answers: dict[str | uuid.UUID, list[TopicPartition | PartitionOutcome]],
    outcomes: dict[TopicPartition, PartitionOutcome],
    listener: str,
) -> Any:
    _count_refused(services, outcomes)
    leaders = {o.current_leader[0] for o in outcomes.values() if o.current_leader is not None}
    return produce_response(
        version,
        answers,
        outcomes,
        [b for b in services.topics.image.live_brokers() if b.node_id in leaders]
        if leaders
        else (),
        listener,
    )


def _count_refused(
    services: ProduceServices, outcomes: dict[TopicPartition, PartitionOutcome]
) -> None:
    """Count the partitions refused or failed, by topic (``sluice_topic_produce_errors``)."""
    for topic_partition, outcome in outcomes.items():
        if outcome.error_code:
            services.traffic.produce_errors[topic_partition.topic] += 1


def _topic_name(services: ProduceServices, topic_data: Any) -> str | None:
    """The name of a topic named by id (v13+), or None if no topic has that id."""
    topic = services.topics.by_id(topic_data.topic_id)
    return None if topic is None else topic.name


def _current_leader(
    services: ProduceServices, topic_partition: TopicPartition
) -> tuple[int, int] | None:
    topic = services.topics.get(topic_partition.topic)
    state = None if topic is None else topic.partitions.get(topic_partition.partition)
    return None if state is None else (state.leader, state.leader_epoch)


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def _legacy_unsupported(header: RequestHeader, request: Any) -> bytes | None:
    """Produce v0–2 answered with UNSUPPORTED_VERSION, framed by hand (kio has no schema
    for these versions). v1 adds throttle_time_ms, v2 log_append_time per partition."""
    if int(request.acks) == 0:
        return None
    version = header.api_version
    body = bytearray(_I32.pack(len(request.topic_data)))
    for topic_data in request.topic_data:
        name = topic_data.name.encode()
        body += _I16.pack(len(name)) + name + _I32.pack(len(topic_data.partition_data))
        for partition_data in topic_data.partition_data:
            body += _I32.pack(partition_data.index) + _I16.pack(ErrorCode.unsupported_version)
            body += _I64.pack(-1)
            if version >= 2:
                body += _I64.pack(-1)
    if version >= 1:
        body += _I32.pack(0)
    return framing.frame(response_header_bytes(header.correlation_id, False) + bytes(body))
