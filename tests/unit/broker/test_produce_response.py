"""The Produce response built straight from kio's classes (``produce_response``) is the
message the generic builder (``messages.make``, with its per-field conversion) makes from
the same outcomes, field types included, for every served version, and the broker's
encoder writes it byte for byte as kio's general encoder writes the generic one."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from sluice.broker.handlers.produce_response import PartitionOutcome, produce_response
from sluice.cluster.model import BrokerInfo
from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.protocol import codec
from sluice.protocol.messages import has_field, make, response_module
from sluice.protocol.versions import ApiKey

VERSIONS = range(3, 14)
TOPIC_ID = uuid.UUID("6f1c2a4e-0d9b-4c5e-9a43-2f8e1b7d3c10")


def _reference(
    version: int,
    answers: dict[str | uuid.UUID, list[TopicPartition | PartitionOutcome]],
    outcomes: dict[TopicPartition, PartitionOutcome],
    leaders: list[BrokerInfo],
) -> Any:
    """The response as the handler built it before, with ``make`` and its conversions."""
    module = response_module(ApiKey.PRODUCE, version)

    def partition(outcome: PartitionOutcome) -> Any:
        fields: dict[str, Any] = {}
        if outcome.current_leader is not None and has_field(
            module.PartitionProduceResponse, "current_leader"
        ):
            leader_id, leader_epoch = outcome.current_leader
            fields["current_leader"] = make(
                module.LeaderIdAndEpoch, leader_id=leader_id, leader_epoch=leader_epoch
            )
        return make(
            module.PartitionProduceResponse,
            index=outcome.index,
            error_code=int(outcome.error_code),
            base_offset=outcome.base_offset,
            log_append_time=outcome.log_append_time_ms,
            log_start_offset=outcome.log_start_offset,
            record_errors=tuple(
                make(
                    module.BatchIndexAndErrorMessage,
                    batch_index=index,
                    batch_index_error_message=why,
                )
                for index, why in outcome.record_errors
            )
            if has_field(module.PartitionProduceResponse, "record_errors")
            else (),
            error_message=outcome.error_message,
            **fields,
        )

    return make(
        module.ProduceResponse,
        responses=tuple(
            make(
                module.TopicProduceResponse,
                name=key,
                topic_id=key,
                partition_responses=tuple(
                    partition(outcomes[item] if isinstance(item, TopicPartition) else item)
                    for item in items
                ),
            )
            for key, items in answers.items()
        ),
        throttle_time=0,
        node_endpoints=tuple(
            make(
                module.NodeEndpoint,
                node_id=b.node_id,
                host=b.address("PLAINTEXT")[0],
                port=b.address("PLAINTEXT")[1],
                rack=b.rack,
            )
            for b in leaders
        )
        if hasattr(module, "NodeEndpoint")
        else (),
    )


OTHER_KEY = uuid.UUID(int=1)
"""A second topic key: an id nobody has (v13), or its text as a name before."""


def _cases(
    version: int,
) -> list[
    tuple[
        dict[str | uuid.UUID, list[TopicPartition | PartitionOutcome]],
        dict[TopicPartition, PartitionOutcome],
        list[BrokerInfo],
    ]
]:
    key: str | uuid.UUID = TOPIC_ID if version >= 13 else "orders"
    appended = PartitionOutcome(0, base_offset=41, log_start_offset=7)
    append_time = PartitionOutcome(
        1, base_offset=5, log_append_time_ms=1_767_225_600_123, log_start_offset=0
    )
    keyless = PartitionOutcome(
        2,
        error_code=ErrorCode.invalid_record,
        error_message="1 record(s) rejected",
        record_errors=[(0, "no key"), (3, "no key")],
    )
    moved = PartitionOutcome(
        3,
        error_code=ErrorCode.not_leader_or_follower,
        error_message="led elsewhere",
        current_leader=(2, 9),
    )
    outcomes = {
        TopicPartition("orders", o.index): o for o in (appended, append_time, keyless, moved)
    }
    unknown = PartitionOutcome(0, error_code=ErrorCode.unknown_topic_id, error_message="no id")
    leader = BrokerInfo(node_id=2, host="broker-2.local", port=9093, rack="r1")
    return [
        ({key: [TopicPartition("orders", 0)]}, {TopicPartition("orders", 0): appended}, []),
        ({key: list(outcomes)}, outcomes, [leader]),
        ({key: list(outcomes), OTHER_KEY: [unknown]}, outcomes, [leader]),
        ({}, {}, []),
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_direct_response_is_the_generic_one_and_encodes_the_same(version: int) -> None:
    for keyed, outcomes, leaders in _cases(version):
        answers = keyed if version >= 13 else {str(k): v for k, v in keyed.items()}
        built = produce_response(version, answers, outcomes, leaders, "PLAINTEXT")
        reference = _reference(version, answers, outcomes, leaders)
        assert built == reference
        assert repr(built) == repr(reference)  # the same types too (ErrorCode, not int)
        assert codec.encode_response(7, built) == codec.encode_response_generic(7, reference)
