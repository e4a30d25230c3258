"""The hand-framed Fetch response is byte for byte what kio encodes for the same
message, at every version served (flexible v12+, topic ids v13+, leader hints v16),
so clients parse it as they parse Kafka's."""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass

import pytest

from sluice.protocol.codec import decode_response, encode_response
from sluice.protocol.fetch_response import (
    FETCH_VERSION_MAX,
    FETCH_VERSION_MIN,
    FetchPartitionResult,
    encode_fetch_response,
)
from sluice.protocol.messages import make, response_module
from sluice.protocol.versions import SUPPORTED, ApiKey

RECORDS = bytes(range(200)) * 3


@dataclass
class _Slice:
    data: bytes

    @property
    def size_bytes(self) -> int:
        return len(self.data)


def _joined(parts: list[object]) -> bytes:
    return b"".join(p if isinstance(p, bytes) else p.data for p in parts)  # type: ignore[attr-defined]


TOPIC_IDS = {"orders": uuid.UUID(int=7 << 64 | 9), "ü-topic": uuid.UUID(int=11)}
ENDPOINTS = [(0, "localhost", 9092, None), (3, "other", 9093, "rack-b")]

RESULTS = [
    (
        "orders",
        [
            FetchPartitionResult(
                0,
                high_watermark=10,
                last_stable_offset=10,
                log_start_offset=2,
                aborted_transactions=[(7, 3), (8, 5)],
                records=[_Slice(RECORDS[:100]), _Slice(RECORDS[100:])],
            ),
            FetchPartitionResult(1, error_code=1),
            FetchPartitionResult(3, error_code=74, current_leader=(3, 12)),
            FetchPartitionResult(
                2, high_watermark=4, last_stable_offset=4, diverging_epoch=(3, 17)
            ),
        ],
    ),
    ("ü-topic", [FetchPartitionResult(5, aborted_transactions=[])]),
]


def _kio_response(version: int) -> object:
    module = response_module(ApiKey.FETCH, version)
    topics = []
    for name, partitions in RESULTS:
        answers = []
        for result in partitions:
            records = b"".join(s.data for s in result.records)  # type: ignore[attr-defined]
            aborted = result.aborted_transactions
            fields: dict[str, object] = {}
            if result.current_leader is not None and version >= 12:
                fields["current_leader"] = make(
                    module.LeaderIdAndEpoch,
                    leader_id=result.current_leader[0],
                    leader_epoch=result.current_leader[1],
                )
            if result.diverging_epoch is not None and version >= 12:
                fields["diverging_epoch"] = make(
                    module.EpochEndOffset,
                    epoch=result.diverging_epoch[0],
                    end_offset=result.diverging_epoch[1],
                )
            answers.append(
                make(
                    module.PartitionData,
                    partition_index=result.partition_index,
                    error_code=result.error_code,
                    high_watermark=result.high_watermark,
                    last_stable_offset=result.last_stable_offset,
                    log_start_offset=result.log_start_offset,
                    aborted_transactions=None
                    if aborted is None
                    else tuple(
                        make(module.AbortedTransaction, producer_id=p, first_offset=f)
                        for p, f in aborted
                    ),
                    preferred_read_replica=result.preferred_read_replica,
                    records=records,
                    **fields,
                )
            )
        topics.append(
            make(
                module.FetchableTopicResponse,
                topic=name,
                topic_id=TOPIC_IDS[name],
                partitions=tuple(answers),
            )
        )
    return make(
        module.FetchResponse,
        throttle_time=datetime.timedelta(0),
        error_code=0,
        session_id=0,
        responses=tuple(topics),
        node_endpoints=tuple(
            make(module.NodeEndpoint, node_id=n, host=h, port=p, rack=r) for n, h, p, r in ENDPOINTS
        )
        if version >= 16
        else (),
    )


def _hand(version: int, correlation_id: int) -> bytes:
    topics = [(TOPIC_IDS[name] if version >= 13 else name, parts) for name, parts in RESULTS]
    parts = encode_fetch_response(version, correlation_id, topics, node_endpoints=ENDPOINTS)  # type: ignore[arg-type]
    return _joined(parts)  # type: ignore[arg-type]


@pytest.mark.parametrize("version", range(FETCH_VERSION_MIN, FETCH_VERSION_MAX + 1))
def test_hand_framing_equals_kio_encoding(version: int) -> None:
    assert _hand(version, 77) == encode_response(77, _kio_response(version))


@pytest.mark.parametrize("version", range(FETCH_VERSION_MIN, FETCH_VERSION_MAX + 1))
def test_kio_reads_the_diverging_epoch_and_records_back(version: int) -> None:
    correlation_id, response = decode_response(ApiKey.FETCH, version, _hand(version, 5)[4:])
    assert correlation_id == 5
    first, _, moved, diverged = response.responses[0].partitions
    assert first.records == RECORDS
    if version >= 12:
        assert (diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) == (3, 17)
        assert (moved.current_leader.leader_id, moved.current_leader.leader_epoch) == (3, 12)
    if version >= 13:
        assert response.responses[1].topic_id == TOPIC_IDS["ü-topic"]
    if version >= 16:
        assert [e.node_id for e in response.node_endpoints] == [0, 3]


def test_every_served_fetch_version_is_framed() -> None:
    served = SUPPORTED[ApiKey.FETCH]
    assert (served.min_version, served.max_version) == (FETCH_VERSION_MIN, FETCH_VERSION_MAX)
