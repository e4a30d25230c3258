"""OffsetForLeaderEpoch on a single node, as raw requests at every served version: where
the leader's epochs end, the current-leader-epoch fence, unknown partitions. (Followers
and a librdkafka consumer use it across a real leader change in the cluster tests.)"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from kafka_wire import KafkaConnection, Record, create_topics_request, encode_batch, produce_request

from sluice.common.errors import ErrorCode
from sluice.protocol.messages import make
from sluice.protocol.versions import SUPPORTED, ApiKey

_SERVED = SUPPORTED[ApiKey.OFFSET_FOR_LEADER_EPOCH]
SERVED_VERSIONS = range(_SERVED.min_version, _SERVED.max_version + 1)
TOPIC = "offset-for-leader-epoch"
RECORDS = 3
EPOCH = 0
"""A single node's partitions lead at epoch 0 from their creation."""


def _request(version: int, partitions: dict[int, tuple[int, int]], topic: str = TOPIC) -> Any:
    """partitions: index → (current leader epoch, epoch asked about)."""
    module = importlib.import_module(f"kio.schema.offset_for_leader_epoch.v{version}.request")
    return make(
        module.OffsetForLeaderEpochRequest,
        replica_id=-1,
        topics=(
            make(
                module.OffsetForLeaderTopic,
                topic=topic,
                partitions=tuple(
                    make(
                        module.OffsetForLeaderPartition,
                        partition=index,
                        current_leader_epoch=current,
                        leader_epoch=asked,
                    )
                    for index, (current, asked) in partitions.items()
                ),
            ),
        ),
    )


@pytest.fixture(scope="module")
def filled_topic(broker: Any) -> str:
    with KafkaConnection(broker.host, broker.port) as connection:
        (created,) = connection.request(create_topics_request(TOPIC, num_partitions=1)).topics
        assert created.error_code == ErrorCode.none, created
        batch = encode_batch([Record(None, b"v") for _ in range(RECORDS)])
        (topic_result,) = connection.request(produce_request(TOPIC, 0, batch)).responses
        assert topic_result.partition_responses[0].error_code == ErrorCode.none
    return TOPIC


@pytest.mark.parametrize("version", SERVED_VERSIONS)
def test_where_epochs_end_and_the_fences(broker: Any, filled_topic: str, version: int) -> None:
    cases = {
        (-1, EPOCH): (ErrorCode.none, EPOCH, RECORDS),  # the latest epoch ends at the log end
        (EPOCH, EPOCH): (ErrorCode.none, EPOCH, RECORDS),
        (-1, EPOCH + 1): (ErrorCode.none, -1, -1),  # newer than any epoch here
        (EPOCH + 1, EPOCH): (ErrorCode.unknown_leader_epoch, -1, -1),
    }
    with KafkaConnection(broker.host, broker.port) as connection:
        for (current, asked), expected in cases.items():
            (topic,) = connection.request(_request(version, {0: (current, asked)})).topics
            (answer,) = topic.partitions
            got = (int(answer.error_code), int(answer.leader_epoch), int(answer.end_offset))
            assert got == expected, (version, current, asked, answer)
        (topic,) = connection.request(_request(version, {0: (-1, 0)}, "no-such-topic")).topics
        assert topic.partitions[0].error_code == ErrorCode.unknown_topic_or_partition
