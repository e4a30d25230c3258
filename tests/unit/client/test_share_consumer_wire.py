"""sluice.ShareConsumer on the wire: what it sends, request by request.

The peer is a scripted protocol endpoint on a loopback socket (the one the connection
tests use), decoding requests and encoding answers with Sluice's real codec. It is not
a broker: each test decides what a ShareFetch answers (records, acquired ranges, errors)
and checks the requests that follow (session epochs, partitions named or forgotten,
acknowledgement batches, the leave). Share groups on the real broker are covered by the
integration tests. A ShareFetch with nothing scripted is held for its max_wait, as a
broker's long poll is.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from test_client_connection import ScriptedPeer

import sluice
from sluice.client.errors import UnsupportedApiError
from sluice.client.messages import build_entity
from sluice.client.share_consumer import ShareConsumer
from sluice.common.ids import TopicPartition
from sluice.protocol.codec import RequestHeader, encode_response, response_schema
from sluice.protocol.records.builder import (
    ControlRecordType,
    RecordInput,
    build_batch,
    build_control_batch,
)
from sluice.protocol.versions import SUPPORTED, ApiKey

TEST_TIMEOUT_S = 10.0
ZERO = datetime.timedelta(0)
TOPIC = "jobs"

SHARE_RANGES = {
    int(ApiKey.SHARE_GROUP_HEARTBEAT): (1, 1),
    int(ApiKey.SHARE_GROUP_DESCRIBE): (1, 1),
    int(ApiKey.SHARE_FETCH): (1, 2),
    int(ApiKey.SHARE_ACKNOWLEDGE): (1, 2),
}


def _ranges(**overrides: tuple[int, int]) -> dict[int, tuple[int, int]]:
    ranges = {int(key): (r.min_version, r.max_version) for key, r in SUPPORTED.items()}
    ranges.update(SHARE_RANGES)
    for name, value in overrides.items():
        ranges[int(ApiKey[name])] = value
    return ranges


def _records(first: int, count: int) -> bytes:
    return build_batch(
        [RecordInput(None, f"job-{first + i}".encode()) for i in range(count)],
        base_offset=first,
        base_timestamp_ms=1_000,
    )


class ShareBroker:
    """One scripted broker (node 0) leading partition 0 of ``jobs`` and coordinating
    every group."""

    def __init__(self) -> None:
        self.topic_id = uuid.uuid4()
        self.fetches: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        """What the next ShareFetches answer (fields of the answer)."""
        self.heartbeat_codes: list[ErrorCode] = []
        self.assignments: list[list[int]] = []
        """The partitions the next heartbeats assign (a join without one: [0])."""
        """Error codes the next heartbeats answer, in order (then none)."""
        self.acknowledge_code = ErrorCode.none
        self.sent: list[tuple[int, Any]] = []
        self.peer: ScriptedPeer | None = None
        self.next_epoch = 1
        self.failures: list[Exception] = []

    def requests(self, api_key: ApiKey) -> list[Any]:
        return [body for key, body in self.sent if key == api_key]

    async def answer(self, header: RequestHeader, body: Any, peer: ScriptedPeer) -> bytes | None:
        api_key, version = int(header.api_key), int(header.api_version)
        self.sent.append((api_key, body))
        try:
            fields = await self._fields(api_key, body, peer)
            schema = response_schema(api_key, version)
            assert schema is not None
            return encode_response(header.correlation_id, build_entity(schema, fields))
        except Exception as e:
            self.failures.append(e)  # raised by run(): a bug in the script, not the client
            raise

    async def _fields(self, api_key: int, body: Any, peer: ScriptedPeer) -> dict[str, Any]:
        if api_key == ApiKey.METADATA:
            return {
                "throttle_time": ZERO,
                "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": peer.port}],
                "cluster_id": "scripted",
                "controller_id": 0,
                "topics": [
                    {
                        "error_code": ErrorCode.none,
                        "name": TOPIC,
                        "topic_id": self.topic_id,
                        "is_internal": False,
                        "partitions": [
                            {
                                "error_code": ErrorCode.none,
                                "partition_index": index,
                                "leader_id": 0,
                                "leader_epoch": 0,
                                "replica_nodes": [0],
                                "isr_nodes": [0],
                            }
                            for index in (0, 1)
                        ],
                    }
                ],
            }
        if api_key == ApiKey.FIND_COORDINATOR:
            return {
                "throttle_time": ZERO,
                "error_code": ErrorCode.none,
                "error_message": None,
                "node_id": 0,
                "host": "127.0.0.1",
                "port": peer.port,
            }
        if api_key == ApiKey.SHARE_GROUP_HEARTBEAT:
            code = self.heartbeat_codes.pop(0) if self.heartbeat_codes else ErrorCode.none
            joining = body.member_epoch == 0
            if code == ErrorCode.none and (joining or self.assignments):
                partitions = self.assignments.pop(0) if self.assignments else [0]
                assignment = {
                    "topic_partitions": [{"topic_id": self.topic_id, "partitions": partitions}]
                }
            else:
                assignment = None
            return {
                "throttle_time": ZERO,
                "error_code": code,
                "member_id": body.member_id,
                "member_epoch": -1
                if body.member_epoch == -1
                else (self.next_epoch if joining else body.member_epoch),
                "heartbeat_interval": datetime.timedelta(seconds=5),
                "assignment": assignment,
            }
        if api_key == ApiKey.SHARE_FETCH:
            try:
                scripted = self.fetches.get_nowait()
            except asyncio.QueueEmpty:
                await asyncio.sleep(body.max_wait.total_seconds())  # the long poll
                scripted = {}
            return {
                "throttle_time": ZERO,
                "error_code": scripted.get("error_code", ErrorCode.none),
                "acquisition_lock_timeout": datetime.timedelta(seconds=30),
                "node_endpoints": [],
                "responses": [
                    {
                        "topic_id": self.topic_id,
                        "partitions": [
                            {
                                "partition_index": index,
                                "error_code": scripted.get("partition_error", ErrorCode.none),
                                "acknowledge_error_code": scripted.get(
                                    "acknowledge_error_code", ErrorCode.none
                                ),
                                "current_leader": {"leader_id": 0, "leader_epoch": 0},
                                "records": scripted.get("records", b""),
                                "acquired_records": [
                                    {"first_offset": a, "last_offset": b, "delivery_count": c}
                                    for a, b, c in scripted.get("acquired", [])
                                ],
                            }
                            for index in scripted.get("partitions", [0])
                        ],
                    }
                ],
            }
        if api_key == ApiKey.SHARE_ACKNOWLEDGE:
            return {
                "throttle_time": ZERO,
                "acquisition_lock_timeout": datetime.timedelta(seconds=30),
                "error_code": ErrorCode.none,
                "node_endpoints": [],
                "responses": [
                    {
                        "topic_id": topic.topic_id,
                        "partitions": [
                            {
                                "partition_index": p.partition_index,
                                "error_code": self.acknowledge_code,
                                "current_leader": {"leader_id": 0, "leader_epoch": 0},
                            }
                            for p in topic.partitions
                        ],
                    }
                    for topic in body.topics
                ],
            }
        raise AssertionError(f"unexpected request {api_key}: {body}")


def run(scenario: Any, **range_overrides: tuple[int, int]) -> ShareBroker:
    """Run ``scenario(broker, consumer)`` with a started explicit-mode consumer; the
    consumer is closed afterwards. Returns the broker for checks of what was sent."""
    broker = ShareBroker()

    async def main() -> None:
        async with ScriptedPeer(broker.answer, _ranges(**range_overrides)) as peer:
            broker.peer = peer
            consumer = ShareConsumer(
                TOPIC,
                group_id="workers",
                bootstrap_servers=f"127.0.0.1:{peer.port}",
                acknowledgement_mode="explicit",
                fetch_max_wait_ms=50,
            )
            await consumer.start()
            try:
                await scenario(broker, consumer)
            finally:
                await consumer.close()

    async def bounded() -> None:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            await main()

    try:
        asyncio.run(bounded())
    finally:
        if broker.failures:
            raise broker.failures[0]
    return broker


def _acks(request: Any) -> list[tuple[int, int, tuple[int, ...]]]:
    return [
        (int(b.first_offset), int(b.last_offset), tuple(int(t) for t in b.acknowledge_types))
        for topic in request.topics
        for partition in topic.partitions
        for b in partition.acknowledgement_batches
    ]


def _named(request: Any) -> list[int]:
    return [int(p.partition_index) for topic in request.topics for p in topic.partitions]


async def _poll_records(consumer: ShareConsumer) -> list[Any]:
    while not (records := await consumer.poll(1.0)):
        pass
    return records


def test_the_member_joins_with_its_own_id_and_epoch_0_and_leaves_with_minus_1() -> None:
    async def scenario(broker: ShareBroker, consumer: ShareConsumer) -> None:
        assert consumer.assignment() == {TopicPartition(TOPIC, 0)}  # topic id → name

    broker = run(scenario)
    join, *_, leave = broker.requests(ApiKey.SHARE_GROUP_HEARTBEAT)
    assert (join.member_epoch, list(join.subscribed_topic_names)) == (0, [TOPIC])
    assert len(join.member_id) == 22  # a UUID, URL-safe base64, as Kafka's clients make
    assert (leave.member_id, leave.member_epoch) == (join.member_id, -1)


def test_sessions_open_at_epoch_0_then_count_up_carrying_acknowledgements() -> None:
    async def scenario(broker: ShareBroker, consumer: ShareConsumer) -> None:
        broker.fetches.put_nowait({"records": _records(0, 3), "acquired": [(0, 2, 1)]})
        records = await _poll_records(consumer)
        assert [(r.offset, r.delivery_count, r.value) for r in records] == [
            (0, 1, b"job-0"),
            (1, 1, b"job-1"),
            (2, 1, b"job-2"),
        ]
        consumer.accept(records[0])
        consumer.release(records[1])
        consumer.reject(records[2])
        assert await consumer.poll(0) == []
        assert await consumer.poll(0) == []

    broker = run(scenario)
    first, second, *_ = broker.requests(ApiKey.SHARE_FETCH)
    assert (first.share_session_epoch, _named(first), _acks(first)) == (0, [0], [])
    assert second.share_session_epoch == 1
    assert _acks(second) == [(0, 2, (1, 2, 3))]  # accept, release, reject
    # Nothing more to say on the next fetch: the session already holds the partition.
    third = broker.requests(ApiKey.SHARE_FETCH)[2]
    assert (third.share_session_epoch, _named(third), _acks(third)) == (2, [], [])


def test_acquired_offsets_without_records_are_acknowledged_as_gap() -> None:
    marker = build_control_batch(
        ControlRecordType.COMMIT,
        producer_id=1,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp_ms=1_000,
        base_offset=3,
    )

    async def scenario(broker: ShareBroker, consumer: ShareConsumer) -> None:
        # Offsets 0-5 come back; only 1-4 are this member's (3 is a transaction marker).
        data = _records(0, 3) + marker + _records(4, 2)
        broker.fetches.put_nowait({"records": data, "acquired": [(1, 4, 1)]})
        records = await _poll_records(consumer)
        assert [r.offset for r in records] == [1, 2, 4]
        for record in records:
            consumer.accept(record)
        await consumer.poll(0)

    broker = run(scenario)
    assert _acks(broker.requests(ApiKey.SHARE_FETCH)[1]) == [(1, 4, (1, 1, 0, 1))]


def test_a_lost_session_is_opened_again_and_its_acknowledgements_wait_for_it() -> None:
    async def scenario(broker: ShareBroker, consumer: ShareConsumer) -> None:
        broker.fetches.put_nowait({"records": _records(0, 1), "acquired": [(0, 0, 1)]})
        (record,) = await _poll_records(consumer)
        consumer.accept(record)
        broker.fetches.put_nowait({"error_code": ErrorCode.share_session_not_found})
        assert await consumer.poll(0.3) == []

    broker = run(scenario)
    epochs = [(r.share_session_epoch, _acks(r)) for r in broker.requests(ApiKey.SHARE_FETCH)]
    assert epochs[:4] == [
        (0, []),
        (1, [(0, 0, (1,))]),  # refused: session not found
        (0, []),  # a new session; acknowledgements cannot open one
        (1, [(0, 0, (1,))]),
    ]


def test_commit_acknowledges_at_once_and_returns_each_partitions_error() -> None:
    async def scenario(broker: ShareBroker, consumer: ShareConsumer) -> None:
        broker.fetches.put_nowait({"records": _records(0, 2), "acquired": [(0, 1, 3)]})
        records = await _poll_records(consumer)
        assert [r.delivery_count for r in records] == [3, 3]
        consumer.accept(records[0])
        consumer.accept(records[1])
        broker.acknowledge_code = ErrorCode.invalid_record_state
        results = await consumer.commit()
        (error,) = results.values()
        assert list(results) == [TopicPartition(TOPIC, 0)]
        assert error is not None and error.code == ErrorCode.invalid_record_state
        assert await consumer.commit() == {}  # nothing sent since

    broker = run(scenario)
    acknowledge, *_ = broker.requests(ApiKey.SHARE_ACKNOWLEDGE)
    assert acknowledge.share_session_epoch == 1
    assert _acks(acknowledge) == [(0, 1, (1,))]


def test_close_releases_what_it_holds_closes_the_session_then_leaves() -> None:
    async def scenario(broker: ShareBroker, consumer: ShareConsumer) -> None:
        broker.fetches.put_nowait({"records": _records(0, 4), "acquired": [(0, 3, 1)]})
        records = await _poll_records(consumer)
        consumer.accept(records[0])

    broker = run(scenario)
    final = broker.requests(ApiKey.SHARE_ACKNOWLEDGE)[-1]
    assert final.share_session_epoch == -1
    assert _acks(final) == [(0, 3, (1, 2, 2, 2))]  # accepted one, released the rest
    order = [key for key, _ in broker.sent if key != ApiKey.METADATA]
    assert order[-2:] == [ApiKey.SHARE_ACKNOWLEDGE, ApiKey.SHARE_GROUP_HEARTBEAT]


def test_an_unknown_member_joins_again_with_epoch_0_and_the_same_id() -> None:
    async def scenario(broker: ShareBroker, consumer: ShareConsumer) -> None:
        assert consumer._membership is not None
        broker.heartbeat_codes = [ErrorCode.unknown_member_id]
        await consumer._membership.heartbeat()  # refused: the assignment is gone
        assert consumer.assignment() == set()
        await consumer._membership.heartbeat()
        assert consumer.assignment() == {TopicPartition(TOPIC, 0)}

    broker = run(scenario)
    beats = broker.requests(ApiKey.SHARE_GROUP_HEARTBEAT)
    assert [b.member_epoch for b in beats[:3]] == [0, 1, 0]
    assert len({b.member_id for b in beats}) == 1


def test_renew_needs_version_2_of_share_fetch_and_acknowledge() -> None:
    async def scenario(broker: ShareBroker, consumer: ShareConsumer) -> None:
        broker.fetches.put_nowait({"records": _records(0, 1), "acquired": [(0, 0, 1)]})
        (record,) = await _poll_records(consumer)
        with pytest.raises(
            UnsupportedApiError, match=r"renew\(\) needs ShareFetch and ShareAcknowledge v2"
        ):
            consumer.renew(record)
        consumer.accept(record)

    run(scenario, SHARE_ACKNOWLEDGE=(1, 1))


def test_renew_rides_on_the_next_request_flagged_as_renewing() -> None:
    async def scenario(broker: ShareBroker, consumer: ShareConsumer) -> None:
        broker.fetches.put_nowait({"records": _records(0, 1), "acquired": [(0, 0, 1)]})
        (record,) = await _poll_records(consumer)
        consumer.renew(record)
        await consumer.commit()
        consumer.accept(record)  # still held after a renew
        await consumer.commit()

    broker = run(scenario)
    renew, accept, *_ = broker.requests(ApiKey.SHARE_ACKNOWLEDGE)
    assert (renew.is_renew_ack, _acks(renew)) == (True, [(0, 0, (4,))])
    assert (accept.is_renew_ack, _acks(accept)) == (False, [(0, 0, (1,))])


def test_a_broker_without_share_groups_is_refused_at_start() -> None:
    async def main() -> None:
        ranges = {
            int(k): (r.min_version, r.max_version)
            for k, r in SUPPORTED.items()
            if int(k) not in SHARE_RANGES
        }
        async with ScriptedPeer(ShareBroker().answer, ranges) as peer:
            consumer = sluice.ShareConsumer(
                TOPIC, group_id="g", bootstrap_servers=f"127.0.0.1:{peer.port}"
            )
            with pytest.raises(UnsupportedApiError, match="does not serve share groups"):
                await consumer.start()

    asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT_S))


def test_a_partition_the_assignment_drops_is_forgotten_by_the_session() -> None:
    async def scenario(broker: ShareBroker, consumer: ShareConsumer) -> None:
        assert consumer._membership is not None
        broker.assignments = [[0, 1], [0]]
        await consumer._membership.heartbeat()
        assert consumer.assignment() == {TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)}
        assert await consumer.poll(0) == []
        await consumer._membership.heartbeat()
        assert consumer.assignment() == {TopicPartition(TOPIC, 0)}
        assert await consumer.poll(0) == []

    broker = run(scenario)
    opening, shrinking, *_ = broker.requests(ApiKey.SHARE_FETCH)
    assert (opening.share_session_epoch, _named(opening)) == (0, [0, 1])
    assert (shrinking.share_session_epoch, _named(shrinking)) == (1, [])
    forgotten = [(t.topic_id, list(t.partitions)) for t in shrinking.forgotten_topics_data]
    assert forgotten == [(broker.topic_id, [1])]


def test_a_moved_leader_makes_the_consumer_ask_for_metadata_again() -> None:
    async def scenario(broker: ShareBroker, consumer: ShareConsumer) -> None:
        asked_before = len(broker.requests(ApiKey.METADATA))
        broker.fetches.put_nowait({"partition_error": ErrorCode.not_leader_or_follower})
        broker.fetches.put_nowait({"records": _records(0, 1), "acquired": [(0, 0, 1)]})
        (record,) = await _poll_records(consumer)
        assert record.offset == 0
        assert len(broker.requests(ApiKey.METADATA)) > asked_before
        consumer.accept(record)

    run(scenario)
