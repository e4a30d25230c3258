"""Flexible versions with meaning: topic ids (stable across restarts, the same in every
API that shows them, usable to name a topic), ApiVersions v3/v4 answered in full, the
new fields of the group and admin APIs, flexible Fetch's diverging-epoch check, and
Produce v13 / Fetch v13+ naming topics by id.

Raw requests, because a client library hides exactly these fields."""

from __future__ import annotations

import datetime
import json
import uuid
from pathlib import Path
from typing import Any

from broker_process import BrokerProcess
from kafka_wire import (
    KafkaConnection,
    Record,
    advertised_versions,
    decode_batches,
    encode_batch,
    produce_request,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsRequestV4
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.delete_topics.v6 import request as delete_topics_v6
from kio.schema.describe_groups.v6.request import DescribeGroupsRequest
from kio.schema.describe_topic_partitions.v0 import request as describe_partitions_v0
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.fetch.v16 import request as fetch_v16
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.offset_fetch.v8 import request as offset_fetch_v8
from kio.schema.produce.v13 import request as produce_v13

from sluice.common.config import BrokerConfig
from sluice.protocol.versions import ApiKey, advertised

ZERO_ID = uuid.UUID(int=0)
SECONDS_10 = datetime.timedelta(seconds=10)


def create_topic_v7(connection: KafkaConnection, name: str, partitions: int) -> Any:
    response = connection.request(
        create_topics_v7.CreateTopicsRequest(
            topics=(
                create_topics_v7.CreatableTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=1,
                    assignments=(),
                    configs=(
                        create_topics_v7.CreatableTopicConfig(name="retention.ms", value="123456"),
                    ),
                ),
            ),
            timeout=SECONDS_10,
            validate_only=False,
        )
    )
    [result] = response.topics
    return result


def metadata_v12_request(*, names: tuple[str, ...] = (), ids: tuple[uuid.UUID, ...] = ()) -> Any:
    return metadata_v12.MetadataRequest(
        topics=tuple(metadata_v12.MetadataRequestTopic(topic_id=None, name=n) for n in names)
        + tuple(metadata_v12.MetadataRequestTopic(topic_id=i, name=None) for i in ids),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def describe_partitions(
    connection: KafkaConnection, names: tuple[str, ...], limit: int = 2000, cursor: Any = None
) -> Any:
    return connection.request(
        describe_partitions_v0.DescribeTopicPartitionsRequest(
            topics=tuple(describe_partitions_v0.TopicRequest(name=n) for n in names),
            response_partition_limit=limit,
            cursor=cursor,
        )
    )


def topic_id_everywhere(broker: BrokerProcess, name: str) -> set[uuid.UUID]:
    with KafkaConnection(broker.host, broker.port) as connection:
        [by_name] = connection.request(metadata_v12_request(names=(name,))).topics
        [described] = describe_partitions(connection, (name,)).topics
    assert by_name.error_code == ErrorCode.none and described.error_code == ErrorCode.none
    return {by_name.topic_id, described.topic_id}


def test_topic_id_is_stable_across_restarts_and_equal_in_every_api(
    broker_factory: Any, topic: str
) -> None:
    broker = broker_factory()
    with KafkaConnection(broker.host, broker.port) as connection:
        created = create_topic_v7(connection, topic, 3)
    assert created.error_code == ErrorCode.none
    assert created.topic_id not in (None, ZERO_ID)
    assert (created.num_partitions, created.replication_factor) == (3, 1)
    configs = {c.name: c for c in created.configs}
    assert configs["retention.ms"].value == "123456"
    assert configs["retention.ms"].config_source == 1  # DYNAMIC_TOPIC_CONFIG
    assert configs["cleanup.policy"].value == "delete"
    assert topic_id_everywhere(broker, topic) == {created.topic_id}
    broker.stop()
    broker.start()
    assert topic_id_everywhere(broker, topic) == {created.topic_id}


def test_a_topic_stored_without_an_id_gets_one_once(broker_factory: Any, topic: str) -> None:
    broker = broker_factory()
    with KafkaConnection(broker.host, broker.port) as connection:
        create_topic_v7(connection, topic, 1)
    broker.stop()
    metadata_file = Path(broker.data_dir) / "cluster-metadata.json"
    document = json.loads(metadata_file.read_text())
    del document["topics"][topic]["topic_id"]  # as written before topics had ids
    metadata_file.write_text(json.dumps(document))
    broker.start()
    [given] = topic_id_everywhere(broker, topic)
    assert given != ZERO_ID
    assert json.loads(metadata_file.read_text())["topics"][topic]["topic_id"] == str(given)
    broker.stop()
    broker.start()
    assert topic_id_everywhere(broker, topic) == {given}


def test_topics_are_found_and_deleted_by_id(broker: BrokerProcess, topic: str) -> None:
    unknown, other = uuid.uuid4(), uuid.uuid4()
    with KafkaConnection(broker.host, broker.port) as connection:
        topic_id = create_topic_v7(connection, topic, 2).topic_id
        found, missing = connection.request(metadata_v12_request(ids=(topic_id, unknown))).topics
        assert (found.error_code, found.name, found.topic_id) == (ErrorCode.none, topic, topic_id)
        assert len(found.partitions) == 2
        assert (missing.error_code, missing.name, missing.topic_id) == (
            ErrorCode.unknown_topic_id,
            None,
            unknown,
        )
        deleted = connection.request(
            delete_topics_v6.DeleteTopicsRequest(
                topics=(
                    delete_topics_v6.DeleteTopicState(name=None, topic_id=topic_id),
                    delete_topics_v6.DeleteTopicState(name=None, topic_id=unknown),
                    delete_topics_v6.DeleteTopicState(name=topic, topic_id=other),
                ),
                timeout=SECONDS_10,
            )
        ).responses
        assert [(r.name, r.topic_id, r.error_code) for r in deleted] == [
            (topic, topic_id, ErrorCode.none),
            (None, unknown, ErrorCode.unknown_topic_id),
            (topic, other, ErrorCode.invalid_request),
        ]
        [gone] = connection.request(metadata_v12_request(ids=(topic_id,))).topics
        assert gone.error_code == ErrorCode.unknown_topic_id


def test_describe_topic_partitions_pages_with_a_cursor(broker: BrokerProcess, topic: str) -> None:
    second = f"{topic}-b"
    with KafkaConnection(broker.host, broker.port) as connection:
        create_topic_v7(connection, topic, 3)
        create_topic_v7(connection, second, 2)
        names = (second, topic, f"{topic}-missing")
        pages = []
        cursor = None
        for _ in range(10):
            page = describe_partitions(connection, names, limit=2, cursor=cursor)
            pages.append(
                [
                    (t.name, t.error_code, [p.partition_index for p in t.partitions])
                    for t in page.topics
                ]
            )
            if page.next_cursor is None:
                break
            cursor = describe_partitions_v0.Cursor(
                topic_name=page.next_cursor.topic_name,
                partition_index=page.next_cursor.partition_index,
            )
        [leader_view] = describe_partitions(connection, (topic,)).topics
        outside = describe_partitions_v0.Cursor(topic_name="not-named", partition_index=0)
        refused = describe_partitions(connection, (topic, second), cursor=outside)
        negative = describe_partitions_v0.Cursor(topic_name=topic, partition_index=-1)
        refused_too = describe_partitions(connection, (topic,), cursor=negative)
    assert pages == [
        [(topic, ErrorCode.none, [0, 1])],
        [(topic, ErrorCode.none, [2]), (second, ErrorCode.none, [0])],
        [
            (second, ErrorCode.none, [1]),
            (f"{topic}-missing", ErrorCode.unknown_topic_or_partition, []),
        ],
    ]
    assert [(t.name, t.error_code) for t in refused.topics] == [
        (topic, ErrorCode.invalid_request),
        (second, ErrorCode.invalid_request),
    ]
    assert [t.error_code for t in refused_too.topics] == [ErrorCode.invalid_request]
    partition = leader_view.partitions[0]
    assert (partition.leader_id, partition.replica_nodes, partition.isr_nodes) == (0, (0,), (0,))
    assert partition.eligible_leader_replicas == () and partition.last_known_elr == ()
    assert partition.offline_replicas == ()


def test_api_versions_v3_and_v4_are_answered_in_full(broker: BrokerProcess) -> None:
    for request_class in (ApiVersionsRequestV3, ApiVersionsRequestV4):
        with KafkaConnection(broker.host, broker.port) as connection:
            response = connection.request(
                request_class(client_software_name="sluice-tests", client_software_version="1.2.3")
            )
        assert response.error_code == ErrorCode.none
        ranges = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
        }
        default = advertised(BrokerConfig().group_coordinator_rebalance_protocols)
        assert ranges == {int(k): (r.min_version, r.max_version) for k, r in default.items()}
        # Two features, finalized: transaction version 2 (KIP-890 part 2) and group
        # version 1 (KIP-848, the consumer protocol enabled by default).
        assert [(f.name, f.min_version, f.max_version) for f in response.supported_features] == [
            ("transaction.version", 0, 2),
            ("group.version", 0, 1),
        ]
        assert [
            (f.name, f.min_version_level, f.max_version_level) for f in response.finalized_features
        ] == [("transaction.version", 2, 2), ("group.version", 1, 1)]
    with KafkaConnection(broker.host, broker.port) as connection:
        refused = connection.request(
            ApiVersionsRequestV3(client_software_name="no spaces", client_software_version="1")
        )
    assert refused.error_code == ErrorCode.invalid_request


def test_client_software_is_logged_per_connection(broker_factory: Any) -> None:
    broker = broker_factory(extra_arguments=["--log-level", "debug"])
    with KafkaConnection(broker.host, broker.port) as connection:
        connection.request(
            ApiVersionsRequestV4(
                client_software_name="probe-client", client_software_version="9.8.7"
            )
        )
    assert "client probe-client 9.8.7" in broker.log_tail()


def test_group_apis_of_the_newest_versions(broker: BrokerProcess) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        both = connection.request(FindCoordinatorRequest(key_type=0, coordinator_keys=("g1", "g2")))
        assert [(c.key, c.error_code, c.port) for c in both.coordinators] == [
            ("g1", ErrorCode.none, broker.port),
            ("g2", ErrorCode.none, broker.port),
        ]
        share = connection.request(FindCoordinatorRequest(key_type=2, coordinator_keys=("g:x:0",)))
        assert share.coordinators[0].error_code == ErrorCode.invalid_request
        described = connection.request(
            DescribeGroupsRequest(groups=("no-such-group",), include_authorized_operations=False)
        )
        assert described.groups[0].error_code == ErrorCode.group_id_not_found
        assert described.groups[0].error_message
        classic = connection.request(ListGroupsRequest(states_filter=(), types_filter=("Classic",)))
        consumer = connection.request(
            ListGroupsRequest(states_filter=(), types_filter=("consumer",))
        )
        assert consumer.groups == ()
        assert all(g.group_type == "classic" for g in classic.groups)
        fetched = connection.request(
            offset_fetch_v8.OffsetFetchRequest(
                groups=(
                    offset_fetch_v8.OffsetFetchRequestGroup(group_id="a-group", topics=None),
                    offset_fetch_v8.OffsetFetchRequestGroup(group_id="b-group", topics=None),
                ),
                require_stable=True,
            )
        )
        assert [(g.group_id, g.error_code) for g in fetched.groups] == [
            ("a-group", ErrorCode.none),
            ("b-group", ErrorCode.none),
        ]


def test_fetch_v12_answers_a_diverged_fetcher_with_the_diverging_epoch(
    broker: BrokerProcess, topic: str
) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        create_topic_v7(connection, topic, 1)
        batch = encode_batch([Record(b"k", b"v%d" % i) for i in range(3)])
        produced = connection.request(produce_request(topic, 0, batch))
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.none

        def fetch(offset: int, last_fetched_epoch: int) -> Any:
            request = fetch_v12.FetchRequest(
                replica_id=-1,
                max_wait=datetime.timedelta(0),
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=(
                    fetch_v12.FetchTopic(
                        topic=topic,
                        partitions=(
                            fetch_v12.FetchPartition(
                                partition=0,
                                current_leader_epoch=-1,
                                fetch_offset=offset,
                                last_fetched_epoch=last_fetched_epoch,
                                log_start_offset=-1,
                                partition_max_bytes=1 << 20,
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
                rack_id="",
            )
            [partition] = connection.request(request).responses[0].partitions
            return partition

        # A consumer (no last fetched epoch) and a fetcher in step get the records.
        assert fetch(0, -1).records and fetch(0, 0).records
        # Epoch 7 is unknown here (newer than any): where it ends cannot be told.
        assert fetch(3, 7).error_code == ErrorCode.offset_out_of_range
        # A fetcher whose epoch 0 went past where epoch 0 ends here (3) has diverged:
        # it is told where to truncate, and gets no records.
        beyond = fetch(5, 0)
        assert beyond.error_code == ErrorCode.none
        assert (beyond.diverging_epoch.epoch, beyond.diverging_epoch.end_offset) == (0, 3)
        assert not beyond.records


def test_old_clients_still_see_the_old_lower_bounds(broker: BrokerProcess) -> None:
    versions = advertised_versions(broker.host, broker.port)
    assert versions[ApiKey.PRODUCE][0] == 0
    assert versions[ApiKey.FETCH][0] <= 4 <= 10 <= versions[ApiKey.FETCH][1]
    assert versions[ApiKey.FIND_COORDINATOR][0] == 0
    assert versions[ApiKey.INIT_PRODUCER_ID][0] == 0
    # KIP-848's APIs at Kafka 4.3's versions (librdkafka needs ConsumerGroupHeartbeat v1).
    assert (versions[68], versions[69]) == ((0, 1), (0, 1))


def fetch_v16_request(topic_id: uuid.UUID, offset: int = 0) -> Any:
    return fetch_v16.FetchRequest(
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            fetch_v16.FetchTopic(
                topic_id=topic_id,
                partitions=(
                    fetch_v16.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


def produce_v13_request(topic_id: uuid.UUID, records: bytes) -> Any:
    return produce_v13.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=SECONDS_10,
        topic_data=(
            produce_v13.TopicProduceData(
                topic_id=topic_id,
                partition_data=(produce_v13.PartitionProduceData(index=0, records=records),),
            ),
        ),
    )


def test_produce_and_fetch_name_topics_by_id(broker: BrokerProcess, topic: str) -> None:
    unknown = uuid.uuid4()
    batch = encode_batch([Record(b"k", b"by-id")])
    with KafkaConnection(broker.host, broker.port) as connection:
        topic_id = create_topic_v7(connection, topic, 1).topic_id
        [produced] = connection.request(produce_v13_request(topic_id, batch)).responses
        assert produced.topic_id == topic_id
        assert produced.partition_responses[0].error_code == ErrorCode.none
        [refused] = connection.request(produce_v13_request(unknown, batch)).responses
        assert refused.topic_id == unknown
        assert refused.partition_responses[0].error_code == ErrorCode.unknown_topic_id
        [fetched] = connection.request(fetch_v16_request(topic_id)).responses
        assert fetched.topic_id == topic_id
        [partition] = fetched.partitions
        assert partition.error_code == ErrorCode.none and partition.high_watermark == 1
        assert [r.value for b in decode_batches(partition.records) for r in b.records] == [b"by-id"]
        [missing] = connection.request(fetch_v16_request(unknown)).responses
        assert missing.topic_id == unknown
        assert missing.partitions[0].error_code == ErrorCode.unknown_topic_id
        # A topic deleted and created again under its name has a new id: the old id is
        # unknown, so a fetcher holding it looks the topic up again.
        connection.request(
            delete_topics_v6.DeleteTopicsRequest(
                topics=(delete_topics_v6.DeleteTopicState(name=topic, topic_id=None),),
                timeout=SECONDS_10,
            )
        )
        new_id = create_topic_v7(connection, topic, 1).topic_id
        assert new_id != topic_id
        [stale] = connection.request(fetch_v16_request(topic_id)).responses
        assert stale.partitions[0].error_code == ErrorCode.unknown_topic_id
