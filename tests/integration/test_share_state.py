"""Share-partition state kept by a real broker's share coordinator, spoken to as another
broker would: Kafka's internal share-state requests (InitializeShareGroupState,
ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState,
ReadShareGroupStateSummary) encoded with kio over a socket.

They are served but not advertised in ApiVersions. FindCoordinator with a share key
(type 2) creates ``__share_group_state`` with the share.coordinator.state.topic.*
settings and names its leader. The state is in that topic: it survives a restart, and so
does the fencing of a deposed leader's epoch.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from broker_process import BrokerProcess
from kafka_wire import KafkaConnection, advertised_versions, metadata_request
from kio.schema.delete_share_group_state.v0 import request as delete_v0
from kio.schema.describe_configs.v4 import request as describe_configs_v4
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from kio.schema.initialize_share_group_state.v0 import request as initialize_v0
from kio.schema.read_share_group_state.v0 import request as read_v0
from kio.schema.read_share_group_state_summary.v0 import request as summary_v0
from kio.schema.write_share_group_state.v0 import request as write_v0
from share_state_harness import outside_persister

from sluice.common.errors import KafkaError
from sluice.share.state import DeliveryState, ShareState, ShareStateKey, StateBatch
from sluice.share.state_coordinator import ShareStateSummary

GROUP = "queue-orders"
TOPIC_ID = uuid.UUID("5f6a0c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b")
STATE_PARTITIONS = 3
COORDINATOR_MOVING = (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress)
LOAD_DEADLINE_S = 20.0
SCENARIO_TIMEOUT_S = 60.0

AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4


def _initialize(partition: int, start_offset: int, state_epoch: int = -1) -> Any:
    return initialize_v0.InitializeShareGroupStateRequest(
        group_id=GROUP,
        topics=(
            initialize_v0.InitializeStateData(
                topic_id=TOPIC_ID,
                partitions=(
                    initialize_v0.PartitionData(
                        partition=partition, state_epoch=state_epoch, start_offset=start_offset
                    ),
                ),
            ),
        ),
    )


def _read(partition: int, leader_epoch: int) -> Any:
    return read_v0.ReadShareGroupStateRequest(
        group_id=GROUP,
        topics=(
            read_v0.ReadStateData(
                topic_id=TOPIC_ID,
                partitions=(read_v0.PartitionData(partition=partition, leader_epoch=leader_epoch),),
            ),
        ),
    )


def _write(
    partition: int,
    state_epoch: int,
    leader_epoch: int,
    start_offset: int,
    batches: tuple[tuple[int, int, int, int], ...],
) -> Any:
    return write_v0.WriteShareGroupStateRequest(
        group_id=GROUP,
        topics=(
            write_v0.WriteStateData(
                topic_id=TOPIC_ID,
                partitions=(
                    write_v0.PartitionData(
                        partition=partition,
                        state_epoch=state_epoch,
                        leader_epoch=leader_epoch,
                        start_offset=start_offset,
                        state_batches=tuple(
                            write_v0.StateBatch(
                                first_offset=first,
                                last_offset=last,
                                delivery_state=state,
                                delivery_count=count,
                            )
                            for first, last, state, count in batches
                        ),
                    ),
                ),
            ),
        ),
    )


def _delete(partition: int) -> Any:
    return delete_v0.DeleteShareGroupStateRequest(
        group_id=GROUP,
        topics=(
            delete_v0.DeleteStateData(
                topic_id=TOPIC_ID, partitions=(delete_v0.PartitionData(partition=partition),)
            ),
        ),
    )


def _summary(partition: int) -> Any:
    return summary_v0.ReadShareGroupStateSummaryRequest(
        group_id=GROUP,
        topics=(
            summary_v0.ReadStateSummaryData(
                topic_id=TOPIC_ID,
                partitions=(summary_v0.PartitionData(partition=partition, leader_epoch=-1),),
            ),
        ),
    )


def _answer(response: Any) -> Any:
    [result] = response.results
    assert result.topic_id == TOPIC_ID
    [partition] = result.partitions
    return partition


def _until_coordinated(connection: KafkaConnection, request: Callable[[], Any]) -> Any:
    """The answer to ``request()``, sent again while the coordinator's partition is still
    being loaded after the topic was made (clients retry these errors)."""
    deadline = time.monotonic() + LOAD_DEADLINE_S
    while True:
        answer = _answer(connection.request(request()))
        if answer.error_code not in COORDINATOR_MOVING or time.monotonic() > deadline:
            return answer


def _batches(answer: Any) -> list[tuple[int, int, int, int]]:
    return [
        (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        for b in answer.state_batches
    ]


def test_share_state_is_kept_fenced_and_survives_a_restart(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory({"share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS)})
    advertised = advertised_versions(broker.host, broker.port)
    assert not set(advertised) & {83, 84, 85, 86, 87}, "internal APIs are not advertised"
    with KafkaConnection(broker.host, broker.port) as connection:
        # Kafka's share coordinator lookup makes the topic, compacted, as configured.
        key = ShareStateKey(GROUP, TOPIC_ID, 0).coordinator_key()
        found = connection.request(FindCoordinatorRequest(key_type=2, coordinator_keys=(key,)))
        [coordinator] = found.coordinators
        assert (coordinator.error_code, coordinator.port) == (ErrorCode.none, broker.port)
        metadata = connection.request(metadata_request(["__share_group_state"]))
        [topic] = metadata.topics
        assert (topic.error_code, topic.is_internal) == (ErrorCode.none, True)
        assert len(topic.partitions) == STATE_PARTITIONS
        configs = connection.request(
            describe_configs_v4.DescribeConfigsRequest(
                resources=(
                    describe_configs_v4.DescribeConfigsResource(
                        resource_type=2,
                        resource_name="__share_group_state",
                        configuration_keys=("cleanup.policy",),
                    ),
                ),
                include_synonyms=False,
                include_documentation=False,
            )
        )
        assert [c.value for c in configs.results[0].configs] == ["compact"]

        # A new share-partition: no state (start offset -1) until it is initialized.
        unread = _until_coordinated(connection, lambda: _read(0, 3))
        assert (unread.error_code, unread.start_offset) == (ErrorCode.none, -1)
        for partition in (0, 1):
            initialized = _until_coordinated(connection, lambda p=partition: _initialize(p, 100))
            assert initialized.error_code == ErrorCode.none
        batches = ((100, 104, ACKNOWLEDGED, 1), (105, 109, AVAILABLE, 2), (110, 110, ARCHIVED, 5))
        written = _answer(connection.request(_write(0, 0, 3, 100, batches)))
        assert written.error_code == ErrorCode.none
        read = _answer(connection.request(_read(0, 3)))
        assert (read.error_code, read.state_epoch, read.start_offset) == (ErrorCode.none, 0, 100)
        assert _batches(read) == list(batches)
        # Initialized again (AlterShareGroupOffsets): the next state epoch fences writes
        # carrying the old one.
        again = _answer(connection.request(_initialize(1, 200)))
        assert again.error_code == ErrorCode.none
        stale = _answer(connection.request(_write(1, 0, 3, 250, ())))
        assert stale.error_code == ErrorCode.fenced_state_epoch
        summary = _answer(connection.request(_summary(1)))
        assert (summary.state_epoch, summary.start_offset) == (1, 200)
        # A new leader (epoch 4) reads partition 0; the old one (3) is fenced.
        assert _answer(connection.request(_read(0, 4))).error_code == ErrorCode.none
        deposed = _answer(connection.request(_write(0, 0, 3, 111, ())))
        assert deposed.error_code == ErrorCode.fenced_leader_epoch
        deleted = _answer(connection.request(_delete(1)))
        assert deleted.error_code == ErrorCode.none

    broker.restart()
    with KafkaConnection(broker.host, broker.port) as connection:
        read = _answer(connection.request(_read(0, 4)))
        assert (read.error_code, read.state_epoch, read.start_offset) == (ErrorCode.none, 0, 100)
        assert _batches(read) == list(batches)
        summary = _answer(connection.request(_summary(0)))
        assert (summary.state_epoch, summary.leader_epoch, summary.start_offset) == (0, 4, 100)
        assert _answer(connection.request(_read(1, 4))).start_offset == -1, "deleted"
        deposed = _answer(connection.request(_write(0, 0, 3, 111, ())))
        assert deposed.error_code == ErrorCode.fenced_leader_epoch
        unknown = _answer(connection.request(_write(1, 1, 4, 200, ())))
        assert unknown.error_code == ErrorCode.fenced_state_epoch, "no state after delete"


def test_a_share_key_that_is_not_group_topic_partition_is_refused(
    broker: BrokerProcess,
) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        found = connection.request(
            FindCoordinatorRequest(key_type=2, coordinator_keys=("g:not-a-topic-id:0", "g"))
        )
        assert [c.error_code for c in found.coordinators] == [ErrorCode.invalid_request] * 2


def test_a_persister_on_another_node_reaches_the_share_coordinator(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """BrokerSharePersister's remote path: each SharePersister call becomes the internal
    request to the coordinating broker, at the version of this side's own table."""
    broker = broker_factory({"share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS)})
    key = ShareStateKey(GROUP, TOPIC_ID, 7)
    with KafkaConnection(broker.host, broker.port) as connection:
        connection.request(
            FindCoordinatorRequest(key_type=2, coordinator_keys=(key.coordinator_key(),))
        )
    persister, peers = outside_persister(lambda: [(broker.host, broker.port)], STATE_PARTITIONS)
    batches = (
        StateBatch(10, 14, DeliveryState.ACKNOWLEDGED, 1),
        StateBatch(15, 15, DeliveryState.AVAILABLE, 4),
    )

    async def scenario() -> None:
        try:
            assert await persister.read(key, 1) is None
            initialized = await persister.initialize(key, 10)
            assert (initialized.state_epoch, initialized.start_offset) == (0, 10)
            await persister.write(key, ShareState(0, 10, batches, 1))
            assert await persister.read(key, 1) == ShareState(0, 10, batches, 1)
            again = await persister.initialize(key, 20)
            assert (again.state_epoch, again.start_offset, again.batches) == (1, 20, ())
            with pytest.raises(KafkaError) as fenced:
                await persister.write(key, ShareState(0, 20, (), 1))
            assert fenced.value.code is ErrorCode.fenced_state_epoch
            await persister.read(key, 2)
            with pytest.raises(KafkaError) as deposed:
                await persister.write(key, ShareState(1, 20, (), 1))
            assert deposed.value.code is ErrorCode.fenced_leader_epoch
            assert await persister.summary(key) == ShareStateSummary(1, 2, 20)
            await persister.delete(key)
            assert await persister.read(key, 2) is None
            assert await persister.summary(key) is None
        finally:
            await peers.close()

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_TIMEOUT_S))
