"""ListOffsets special timestamps (KIP-734 MAX_TIMESTAMP, KIP-1005 EARLIEST_LOCAL and
LATEST_TIERED) as raw requests, plus confluent-kafka's
``list_offsets``, at every version the broker serves.

Kafka answers a special timestamp only from the version that defines it (-3 from v7,
-4 from v8, -5 from v9, -6 from v11) and UNSUPPORTED_VERSION for that partition below it;
any other negative timestamp is UNSUPPORTED_VERSION at every version."""

from __future__ import annotations

import datetime
import importlib
from typing import Any

import pytest
from client_helpers import CLIENT_TIMEOUT_S, admin_client
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import OffsetSpec
from kafka_wire import (
    KafkaConnection,
    Record,
    advertised_versions,
    create_topics_request,
    encode_batch,
    produce_request,
)

from sluice.protocol.messages import make
from sluice.protocol.versions import SUPPORTED, ApiKey

LIST_OFFSETS = 2
NONE = 0
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
_SERVED = SUPPORTED[ApiKey.LIST_OFFSETS]
SERVED_VERSIONS = range(_SERVED.min_version, _SERVED.max_version + 1)
"""Every version the broker serves (-6, earliest pending upload, needs v11: served only
once the range reaches it, and then this test covers it)."""

BASE_MS = 1_700_000_000_000
# Two batches: offsets 0-2 and 3-4; the largest timestamp is on offset 1, in the middle.
FIRST_BATCH_MS = (BASE_MS + 1000, BASE_MS + 5000, BASE_MS + 2000)
SECOND_BATCH_MS = (BASE_MS + 3000, BASE_MS + 4000)
MAX_TIMESTAMP_OFFSET = 1
LOG_END = 5

FIRST_VERSION = {-1: 1, -2: 1, -3: 7, -4: 8, -5: 9, -6: 11}


def _request(version: int, topic: str, timestamps: dict[int, int]) -> Any:
    module = importlib.import_module(f"kio.schema.list_offsets.v{version}.request")
    partitions = tuple(
        make(module.ListOffsetsPartition, partition_index=p, current_leader_epoch=-1, timestamp=t)
        for p, t in timestamps.items()
    )
    return make(
        module.ListOffsetsRequest,
        replica_id=-1,
        isolation_level=0,
        timeout=datetime.timedelta(seconds=5),
        topics=(make(module.ListOffsetsTopic, name=topic, partitions=partitions),),
    )


def _answers(connection: KafkaConnection, request: Any) -> dict[int, Any]:
    (topic,) = connection.request(request).topics
    return {int(p.partition_index): p for p in topic.partitions}


@pytest.fixture(scope="module")
def filled_topic(broker) -> str:
    name = "list-offsets-special"
    with KafkaConnection(broker.host, broker.port) as connection:
        (created,) = connection.request(create_topics_request(name, num_partitions=1)).topics
        assert created.error_code == NONE, created
        for timestamps in (FIRST_BATCH_MS, SECOND_BATCH_MS):
            batch = encode_batch([Record(None, b"v", timestamp_ms=t) for t in timestamps])
            (topic_result,) = connection.request(produce_request(name, 0, batch)).responses
            (produced,) = topic_result.partition_responses
            assert produced.error_code == NONE, produced
    return name


def _expected(version: int, timestamp: int) -> tuple[int, int, int]:
    """(error code, offset, timestamp) Kafka answers on a broker without tiered storage."""
    first = FIRST_VERSION.get(timestamp)
    if first is None or version < first:
        return UNSUPPORTED_VERSION, -1, -1
    return {
        -1: (NONE, LOG_END, -1),
        -2: (NONE, 0, -1),
        -3: (NONE, MAX_TIMESTAMP_OFFSET, max(FIRST_BATCH_MS)),
        -4: (NONE, 0, -1),
        -5: (NONE, -1, -1),
        -6: (NONE, -1, -1),
    }[timestamp]


@pytest.mark.parametrize("version", SERVED_VERSIONS)
def test_special_timestamps_answered_per_version_as_kafka_does(broker, filled_topic, version):
    specials = [-1, -2, -3, -4, -5, -6, -7, -100]
    with KafkaConnection(broker.host, broker.port) as connection:
        for timestamp in specials:
            (answer,) = _answers(
                connection, _request(version, filled_topic, {0: timestamp})
            ).values()
            got = (int(answer.error_code), int(answer.offset), int(answer.timestamp))
            assert got == _expected(version, timestamp), (version, timestamp, answer)
            if timestamp == -3 and version >= 7:
                assert int(answer.leader_epoch) == 0, answer  # the batch's leader epoch
            if timestamp in (-5, -6) and got[0] == NONE:
                assert int(answer.leader_epoch) == -1, answer


@pytest.mark.parametrize("version", SERVED_VERSIONS)
def test_a_refused_timestamp_leaves_the_other_partitions_answered(broker, topic, version):
    with KafkaConnection(broker.host, broker.port) as connection:
        (created,) = connection.request(create_topics_request(topic, num_partitions=2)).topics
        assert created.error_code == NONE, created
        answers = _answers(connection, _request(version, topic, {0: -7, 1: -1}))
    assert int(answers[0].error_code) == UNSUPPORTED_VERSION
    assert (int(answers[0].offset), int(answers[0].timestamp)) == (-1, -1)
    assert (int(answers[1].error_code), int(answers[1].offset)) == (NONE, 0)


def test_time_lookup_still_finds_the_first_record_at_or_after(broker, filled_topic):
    with KafkaConnection(broker.host, broker.port) as connection:
        (answer,) = _answers(connection, _request(5, filled_topic, {0: BASE_MS + 2500})).values()
    # offset 1 (5000) is the first record whose timestamp is >= 2500
    assert (int(answer.offset), int(answer.timestamp)) == (1, BASE_MS + 5000)


def test_a_partition_named_twice_is_invalid(broker, filled_topic):
    module = importlib.import_module("kio.schema.list_offsets.v5.request")
    partition = make(module.ListOffsetsPartition, partition_index=0, timestamp=-1)
    request = make(
        module.ListOffsetsRequest,
        replica_id=-1,
        isolation_level=0,
        topics=(
            make(module.ListOffsetsTopic, name=filled_topic, partitions=(partition,)),
            make(module.ListOffsetsTopic, name=filled_topic, partitions=(partition,)),
        ),
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        topics = connection.request(request).topics
    assert [int(p.error_code) for t in topics for p in t.partitions] == [INVALID_REQUEST] * 2


def test_confluent_list_offsets_earliest_latest_and_by_time(broker, filled_topic):
    admin = admin_client(broker.bootstrap)
    tp = ConfluentTopicPartition(filled_topic, 0)
    specs = {
        "earliest": OffsetSpec.earliest(),
        "latest": OffsetSpec.latest(),
        "by_time": OffsetSpec.for_timestamp(BASE_MS + 2500),
    }
    found = {}
    for name, spec in specs.items():
        result = admin.list_offsets({tp: spec}, request_timeout=15)[tp].result(
            timeout=CLIENT_TIMEOUT_S
        )
        found[name] = (result.offset, result.timestamp)
    assert found["earliest"][0] == 0
    assert found["latest"][0] == LOG_END
    assert found["by_time"] == (1, BASE_MS + 5000)


def test_confluent_max_timestamp_is_the_record_or_a_clear_refusal(broker, filled_topic):
    """librdkafka asks for -3 at whatever ListOffsets version the broker advertises. From
    v7 the answer is the record with the largest timestamp; below it, Kafka's refusal
    (UNSUPPORTED_VERSION), never an offset computed as if -3 were a time."""
    admin = admin_client(broker.bootstrap)
    tp = ConfluentTopicPartition(filled_topic, 0)
    future = admin.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=15)[tp]
    high = advertised_versions(broker.host, broker.port)[LIST_OFFSETS][1]
    if high >= 7:
        result = future.result(timeout=CLIENT_TIMEOUT_S)
        assert (result.offset, result.timestamp) == (MAX_TIMESTAMP_OFFSET, max(FIRST_BATCH_MS))
    else:
        with pytest.raises(KafkaException) as raised:
            future.result(timeout=CLIENT_TIMEOUT_S)
        assert raised.value.args[0].code() == UNSUPPORTED_VERSION, raised.value
