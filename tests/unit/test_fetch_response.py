"""The hand-framed Fetch response is byte for byte what kio encodes for the same
message, at every version served (flexible v12 included), so clients parse it as they
parse Kafka's."""

from __future__ import annotations

import datetime
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
        topics.append(make(module.FetchableTopicResponse, topic=name, partitions=tuple(answers)))
    return make(
        module.FetchResponse,
        throttle_time=datetime.timedelta(0),
        error_code=0,
        session_id=0,
        responses=tuple(topics),
    )


@pytest.mark.parametrize("version", range(FETCH_VERSION_MIN, FETCH_VERSION_MAX + 1))
def test_hand_framing_equals_kio_encoding(version: int) -> None:
    hand = _joined(encode_fetch_response(version, 77, RESULTS))  # type: ignore[arg-type]
    assert hand == encode_response(77, _kio_response(version))


@pytest.mark.parametrize("version", range(FETCH_VERSION_MIN, FETCH_VERSION_MAX + 1))
def test_kio_reads_the_diverging_epoch_and_records_back(version: int) -> None:
    hand = _joined(encode_fetch_response(version, 5, RESULTS))  # type: ignore[arg-type]
    correlation_id, response = decode_response(ApiKey.FETCH, version, hand[4:])
    assert correlation_id == 5
    first, _, diverged = response.responses[0].partitions
    assert first.records == RECORDS
    if version >= 12:
        assert (diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) == (3, 17)


def test_every_served_fetch_version_is_framed() -> None:
    served = SUPPORTED[ApiKey.FETCH]
    assert (served.min_version, served.max_version) == (FETCH_VERSION_MIN, FETCH_VERSION_MAX)
