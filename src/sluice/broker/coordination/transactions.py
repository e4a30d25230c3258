"""The broker's side of transactions: writing markers into partitions, and checking a
transactional produce against its coordinator.

Markers. When the transaction coordinator has decided (a Prepare* record is committed)
it hands out :class:`~sluice.txn.api.WriteMarkers`; :class:`TransactionMarkers` writes a
marker into every partition of the transaction through the partition's leader, here
(:meth:`TransactionMarkers.append_here`, which the WriteTxnMarkers handler also uses)
or on another broker (WriteTxnMarkers v1, one request per leader). Each marker is
appended like an acks=all produce and counts once the high watermark passes it; one
landing in ``__consumer_offsets`` also tells the group coordinator, so the
transaction's offsets take effect. Partitions that fail with a retriable error (no
leader, leader moved, not enough replicas) are tried again with a growing backoff until
all are written, a topic that was deleted is skipped, and the writer gives up only when
this broker stops coordinating the transaction (the next coordinator writes them all
again: a marker written twice closes nothing the second time).

Verification (KIP-890 part 1). Before the first batch of a transaction is appended to a
partition, the leader asks the coordinator whether the partition is in the producer's
open transaction (AddPartitionsToTxn v4, verify only); a batch arriving after its
transaction ended (delayed in the network, or from a zombie) is refused, instead of
opening a transaction here that no coordinator would ever close.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from sluice.broker.network.peer_connection import PeerUnavailable
from sluice.broker.network.peers import Peers
from sluice.broker.replication.partition import Partition, settled_acks_all
from sluice.broker.replication.purgatory import Purgatory
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.cluster.image import MetadataImage
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.group.config import OFFSETS_TOPIC
from sluice.group.runtime import GroupCoordinatorRuntime
from sluice.protocol.messages import make, request_module
from sluice.protocol.versions import ApiKey
from sluice.txn.api import AddPartitionsRequest, WriteMarkers
from sluice.txn.config import TRANSACTION_STATE_TOPIC
from sluice.txn.runtime import TransactionCoordinatorRuntime

log = logging.getLogger(__name__)

MARKER_WRITE_TIMEOUT_MS = 30_000
"""How long one marker append may wait for the in-sync replicas before it is retried."""
MARKER_RETRY_BACKOFF_MS = (50, 2_000)
"""First and largest wait between two rounds of retries (doubling)."""
PEER_REQUEST_TIMEOUT_S = 30.0

RETRIABLE_MARKER_ERRORS = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.leader_not_available,
        ErrorCode.kafka_storage_error,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.fenced_leader_epoch,
    }
)
"""Marker errors that clear up when leadership or the ISR settles."""
STALE_MARKER_ERRORS = frozenset(
    {ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced}
)
"""The partition saw a newer producer epoch or coordinator: this marker is moot."""


class TransactionMarkers:
    def __init__(
        self,
        node_id: int,
        replicas: ReplicaManager,
        purgatory: Purgatory,
        image: Callable[[], MetadataImage],
        peers: Peers,
        groups: GroupCoordinatorRuntime,
    ) -> None:
        self._node_id = node_id
        self._replicas = replicas
        self._purgatory = purgatory
        self._image = image
        self._peers = peers
        self._groups = groups
        self.coordinator: TransactionCoordinatorRuntime | None = None
        """Set once the transaction coordinator exists (it is built with this writer)."""

    # ======================================================== one partition, here

    async def append_here(
        self,
        topic_partition: TopicPartition,
        *,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
    ) -> ErrorCode:
        """Append one marker as this partition's leader and wait until it is committed."""
        hosted = self._replicas.find(topic_partition)
        if hosted is None:
            if self._image().partition(topic_partition) is None:
                return ErrorCode.unknown_topic_or_partition
            return ErrorCode.not_leader_or_follower
        try:
            result = hosted.append_marker(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                committed=committed,
                coordinator_epoch=coordinator_epoch,
            )
        except KafkaError as e:
            return e.code
        error = await self._committed(hosted, result.last_offset + 1)
        if error is not ErrorCode.none:
            return error
        if topic_partition.topic == OFFSETS_TOPIC:
            try:
                await self._groups.complete_transaction(
                    topic_partition.partition, producer_id, committed
                )
            except KafkaError as e:
                # Not coordinating that partition (yet): loading replays the marker.
                log.debug("%s: group coordinator not told of a marker: %s", topic_partition, e)
        return ErrorCode.none

    async def _committed(self, hosted: Partition, end_offset: int) -> ErrorCode:
        outcome = await settled_acks_all(
            self._purgatory,
            hosted,
            end_offset,
            hosted.leader_epoch,
            MARKER_WRITE_TIMEOUT_MS / 1000,
        )
        if outcome is False:
            return ErrorCode.request_timed_out
        if isinstance(outcome, KafkaError):
            return outcome.code
        return ErrorCode.none

    # ================================================== a decision, everywhere

    async def write(self, state_partition: int, work: WriteMarkers) -> None:
        """Write ``work``'s markers (the coordinator's task runner; see the module
        docstring). Returns when all are written or the coordinator moved away."""
        pending = set(work.partitions)
        backoff_ms = MARKER_RETRY_BACKOFF_MS[0]
        while pending:
            coordinator_epoch = self._coordinator_epoch(state_partition)
            if coordinator_epoch is None:
                log.info(
                    "transaction %r: %s-%d is no longer coordinated here; its new "
                    "coordinator writes the markers",
                    work.transactional_id,
                    TRANSACTION_STATE_TOPIC,
                    state_partition,
                )
                return
            image = self._image()
            by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
            for topic_partition in sorted(pending):
                state = image.partition(topic_partition)
                if state is None:
                    log.info(
                        "transaction %r: %s was deleted; no marker for it",
                        work.transactional_id,
                        topic_partition,
                    )
                    pending.discard(topic_partition)
                elif state.leader >= 0 and state.leader in image.brokers:
                    by_leader[state.leader].append(topic_partition)
            rounds = [
                self._write_to(leader, partitions, work, coordinator_epoch)
                for leader, partitions in by_leader.items()
            ]
            for results in await asyncio.gather(*rounds):
                for topic_partition, error in results.items():
                    if error is ErrorCode.none or error in STALE_MARKER_ERRORS:
                        if error is not ErrorCode.none:
                            log.info(
                                "transaction %r: marker for %s is stale (%s)",
                                work.transactional_id,
                                topic_partition,
                                error.name,
                            )
                        pending.discard(topic_partition)
                    elif error not in RETRIABLE_MARKER_ERRORS:
                        log.warning(
                            "transaction %r: marker for %s failed with %s; retrying",
                            work.transactional_id,
                            topic_partition,
                            error.name,
                        )
            if pending:
                await asyncio.sleep(backoff_ms / 1000)
                backoff_ms = min(backoff_ms * 2, MARKER_RETRY_BACKOFF_MS[1])

    def _coordinator_epoch(self, state_partition: int) -> int | None:
        """The leader epoch of the ``__transaction_state`` partition while this broker
        coordinates it (the markers' coordinator epoch), else None."""
        coordinator = self.coordinator
        if coordinator is None or state_partition not in coordinator.loaded_partitions():
            return None
        hosted = self._replicas.find(TopicPartition(TRANSACTION_STATE_TOPIC, state_partition))
        if hosted is None or not hosted.is_leader:
            return None
        return hosted.leader_epoch

    async def _write_to(
        self,
        leader: int,
        partitions: list[TopicPartition],
        work: WriteMarkers,
        coordinator_epoch: int,
    ) -> dict[TopicPartition, ErrorCode]:
        if leader == self._node_id:
            errors_here = await asyncio.gather(
                *(
                    self.append_here(
                        topic_partition,
                        producer_id=work.producer_id,
                        producer_epoch=work.producer_epoch,
                        committed=work.committed,
                        coordinator_epoch=coordinator_epoch,
                    )
                    for topic_partition in partitions
                )
            )
            return dict(zip(partitions, errors_here, strict=True))
        try:
            response = await self._peers.request(
                leader,
                ApiKey.WRITE_TXN_MARKERS,
                lambda version: _write_markers_request(
                    version, work, partitions, coordinator_epoch
                ),
                PEER_REQUEST_TIMEOUT_S,
            )
        except (PeerUnavailable, errors.ProtocolError, KafkaError) as e:
            log.info("markers to broker %d: %s; retrying", leader, e)
            return {p: ErrorCode.not_leader_or_follower for p in partitions}
        results = {p: ErrorCode.not_leader_or_follower for p in partitions}
        for marker in response.markers:
            for topic in marker.topics:
                for partition in topic.partitions:
                    results[TopicPartition(topic.name, partition.partition_index)] = ErrorCode(
                        partition.error_code
                    )
        return results


def _write_markers_request(
    version: int, work: WriteMarkers, partitions: Iterable[TopicPartition], coordinator_epoch: int
) -> Any:
    module = request_module(ApiKey.WRITE_TXN_MARKERS, version)
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic_partition in partitions:
        by_topic[topic_partition.topic].append(topic_partition.partition)
    marker = make(
        module.WritableTxnMarker,
        producer_id=work.producer_id,
        producer_epoch=work.producer_epoch,
        transaction_result=work.committed,
        topics=tuple(
            make(module.WritableTxnMarkerTopic, name=topic, partition_indexes=tuple(ids))
            for topic, ids in by_topic.items()
        ),
        coordinator_epoch=coordinator_epoch,
    )
    return make(module.WriteTxnMarkersRequest, markers=(marker,))


# ============================================================== verification


VERIFICATION_RETRIABLE = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.concurrent_transactions,
    }
)


class TransactionVerifier:
    """Asks a transactional id's coordinator (here or on another broker) whether a
    partition is in the producer's open transaction."""

    def __init__(
        self,
        node_id: int,
        coordinator: TransactionCoordinatorRuntime,
        image: Callable[[], MetadataImage],
        peers: Peers,
    ) -> None:
        self._node_id = node_id
        self._coordinator = coordinator
        self._image = image
        self._peers = peers

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic_partition: TopicPartition,
        add: bool = False,
    ) -> None:
        """Raise the error the produce answers with when the partition is not in the
        producer's open transaction: INVALID_TXN_STATE (abortable for the client),
        INVALID_PRODUCER_EPOCH (fenced), or NOT_ENOUGH_REPLICAS (retriable) when the
        coordinator cannot be asked right now. ``add`` (transaction version 2: Produce
        v12, TxnOffsetCommit v5): add the partition to the transaction instead of only
        checking, starting the transaction if it is the first."""
        request = AddPartitionsRequest(
            transactional_id, producer_id, producer_epoch, (topic_partition,), verify_only=not add
        )
        state_partition = self._coordinator.coordinator_partition(transactional_id)
        leader = self._image().partition(TopicPartition(TRANSACTION_STATE_TOPIC, state_partition))
        try:
            if leader is None or leader.leader < 0:
                raise errors.NotEnoughReplicas(f"{transactional_id!r} has no coordinator now")
            if leader.leader == self._node_id:
                error = (await self._coordinator.add_partitions(request)).errors[topic_partition]
            else:
                error = await self._verify_remote(leader.leader, request)
        except (PeerUnavailable, errors.ProtocolError) as e:
            raise errors.NotEnoughReplicas(f"transaction coordinator unreachable: {e}") from None
        except KafkaError as e:
            error = e.code
        if error is ErrorCode.none:
            return
        if error in VERIFICATION_RETRIABLE:
            raise errors.NotEnoughReplicas(
                f"cannot verify the transaction of {transactional_id!r} now ({error.name})"
            )
        if error in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch):
            raise errors.InvalidProducerEpoch(
                f"producer {producer_id} epoch {producer_epoch} is fenced"
            )
        raise errors.for_code(ErrorCode.invalid_txn_state)(
            f"{topic_partition} is not in an open transaction of {transactional_id!r}"
        )

    async def _verify_remote(self, leader: int, request: AddPartitionsRequest) -> ErrorCode:
        def build(version: int) -> Any:
            module = request_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)
            topic_partition = request.partitions[0]
            return make(
                module.AddPartitionsToTxnRequest,
                transactions=(
                    make(
                        module.AddPartitionsToTxnTransaction,
                        transactional_id=request.transactional_id,
                        producer_id=request.producer_id,
                        producer_epoch=request.producer_epoch,
                        verify_only=request.verify_only,
                        topics=(
                            make(
                                module.AddPartitionsToTxnTopic,
                                name=topic_partition.topic,
                                partitions=(topic_partition.partition,),
                            ),
                        ),
                    ),
                ),
            )

        response = await self._peers.request(
            leader, ApiKey.ADD_PARTITIONS_TO_TXN, build, PEER_REQUEST_TIMEOUT_S
        )
        if response.error_code:
            return ErrorCode(response.error_code)
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for partition in topic.results_by_partition:
                    return ErrorCode(partition.partition_error_code)
        return ErrorCode.invalid_txn_state
