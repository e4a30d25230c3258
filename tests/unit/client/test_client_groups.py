"""Consumer groups in the client: assignment bytes, and the admin's group requests routed
to coordinators with retries.

The admin talks to a scripted cluster: each request is built at the version under test,
encoded and decoded with Sluice's codec (so it is valid on the wire at that version), and
answered by a function of the test with a response built from data at the same version.
No sockets, no broker: the broker side is covered by the integration tests.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import struct
import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from kio.schema.errors import ErrorCode

from sluice.client.admin import Admin
from sluice.client.cluster import BrokerMetadata, Cluster, ClusterMetadata
from sluice.client.errors import ConnectionClosedError
from sluice.client.groups import (
    ASSIGNMENT_VERSION_MAX,
    GroupState,
    MalformedAssignmentError,
    OffsetAndMetadata,
    decode_consumer_assignment,
    encode_consumer_assignment,
)
from sluice.client.messages import Request, build_entity
from sluice.client.versions import CLIENT_VERSIONS
from sluice.common import errors
from sluice.common.ids import TopicPartition
from sluice.protocol.codec import (
    decode_request_body,
    encode_request,
    parse_request_header,
    response_schema,
)
from sluice.protocol.versions import ApiKey

TEST_TIMEOUT_S = 10.0
ZERO = datetime.timedelta(0)

GROUP_APIS = (
    ApiKey.FIND_COORDINATOR,
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.DESCRIBE_GROUPS,
    ApiKey.LIST_GROUPS,
    ApiKey.DELETE_GROUPS,
    ApiKey.OFFSET_DELETE,
)

# ── assignment bytes ─────────────────────────────────────────────────────────────────────

# Version 0 of {"orders": [0, 2]} with null user data, written out field by field.
GOLDEN_ASSIGNMENT_V0 = (
    b"\x00\x00"  # version 0
    b"\x00\x00\x00\x01"  # one topic
    b"\x00\x06orders"  # topic name
    b"\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x02"  # partitions [0, 2]
    b"\xff\xff\xff\xff"  # user data: null
)


def test_golden_assignment_bytes_decode_and_encode_back() -> None:
    assert decode_consumer_assignment(GOLDEN_ASSIGNMENT_V0) == {"orders": [0, 2]}
    assert encode_consumer_assignment({"orders": [0, 2]}) == GOLDEN_ASSIGNMENT_V0


@pytest.mark.parametrize("version", range(ASSIGNMENT_VERSION_MAX + 1))
def test_every_known_version_round_trips(version: int) -> None:
    assignment = {"b": [3, 1], "a": [0]}
    data = encode_consumer_assignment(assignment, version=version, user_data=b"sticky")
    assert struct.unpack_from(">h", data)[0] == version
    assert decode_consumer_assignment(data) == {"a": [0], "b": [1, 3]}


def test_a_newer_version_is_read_as_the_newest_known_and_its_extra_fields_ignored() -> None:
    body = encode_consumer_assignment({"t": [5]}, version=ASSIGNMENT_VERSION_MAX)[2:]
    newer = struct.pack(">h", ASSIGNMENT_VERSION_MAX + 4) + body + b"\x00\x00\x00\x07future"
    assert decode_consumer_assignment(newer) == {"t": [5]}


def test_empty_bytes_are_an_empty_assignment() -> None:
    assert decode_consumer_assignment(b"") == {}


def test_a_topic_listed_twice_is_merged() -> None:
    data = (
        b"\x00\x00\x00\x00\x00\x02"
        + b"\x00\x01t\x00\x00\x00\x01\x00\x00\x00\x01"
        + b"\x00\x01t\x00\x00\x00\x01\x00\x00\x00\x00"
        + b"\xff\xff\xff\xff"
    )
    assert decode_consumer_assignment(data) == {"t": [0, 1]}


def test_every_truncation_is_refused_with_the_typed_error() -> None:
    for end in range(1, len(GOLDEN_ASSIGNMENT_V0)):
        with pytest.raises(MalformedAssignmentError):
            decode_consumer_assignment(GOLDEN_ASSIGNMENT_V0[:end])


def test_a_negative_version_is_refused() -> None:
    with pytest.raises(MalformedAssignmentError, match="negative version"):
        decode_consumer_assignment(b"\xff\xff" + GOLDEN_ASSIGNMENT_V0[2:])


def test_random_bytes_decode_or_raise_the_typed_error() -> None:
    seed = random.randrange(2**32)
    generator = random.Random(seed)
    for _ in range(2000):
        data = bytes(generator.randrange(256) for _ in range(generator.randrange(1, 40)))
        if generator.random() < 0.5:
            data = b"\x00\x00" + data  # a plausible version, so the body gets parsed
        try:
            decoded = decode_consumer_assignment(data)
        except MalformedAssignmentError:
            continue
        assert isinstance(decoded, dict), f"seed {seed}: {data!r}"


# ── a scripted cluster ───────────────────────────────────────────────────────────────────

Answer = Callable[[int, int, Any], dict[str, Any]]
"""(node id, version, decoded request) → fields of the response at that version."""


class ScriptedConnection:
    def __init__(self, cluster: ScriptedCluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.address = f"broker{node_id}:9092"

    def version_for(self, api_key: int) -> int:
        low, high = CLIENT_VERSIONS[api_key]
        return low if self.cluster.lowest_versions else high

    @property
    def versions(self) -> dict[int, int]:
        """The broker lists what the script answers."""
        return {api_key: self.version_for(api_key) for api_key in self.cluster.answers}

    async def request(self, request: Request, *, timeout_s: float | None = None) -> Any:
        api_key = int(request.api_key)
        version = self.version_for(api_key)
        frame = encode_request(1, "test", request.build(version))[4:]
        header, body_offset = parse_request_header(frame)
        decoded = decode_request_body(header, frame, body_offset)
        self.cluster.sent.append((self.node_id, api_key, decoded))
        self.cluster.requests.append(request)
        fields = self.cluster.answers[api_key](self.node_id, version, decoded)
        schema = response_schema(api_key, version)
        assert schema is not None
        return build_entity(schema, {"throttle_time": ZERO, **fields})


class ScriptedCluster:
    """What Admin uses of a Cluster, answering from ``answers`` (API key → Answer)."""

    def __init__(self, answers: dict[int, Answer], *, lowest_versions: bool = False) -> None:
        self.answers = answers
        self.lowest_versions = lowest_versions
        self.sent: list[tuple[int, int, Any]] = []
        self.requests: list[Request] = []
        self.request_timeout_s = 30.0
        self.brokers = {n: BrokerMetadata(n, f"broker{n}", 9092) for n in (1, 2)}

    async def any_connection(self) -> ScriptedConnection:
        return ScriptedConnection(self, 1)

    async def connection(self, node_id: int) -> ScriptedConnection:
        if node_id not in self.brokers:
            raise errors.for_code(ErrorCode.broker_not_available)(f"no broker {node_id}")
        return ScriptedConnection(self, node_id)

    async def metadata(self, _topics: Any = None, **_: Any) -> ClusterMetadata:
        return ClusterMetadata("test", 1, dict(self.brokers), {})

    def sent_of(self, api_key: int) -> list[tuple[int, Any]]:
        return [(node, body) for node, key, body in self.sent if key == api_key]


def admin_for(cluster: ScriptedCluster, timeout_s: float = 5.0) -> Admin:
    return Admin(cast(Cluster, cluster), coordinator_timeout_s=timeout_s)


def run(coroutine: Any) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            return await coroutine

    return asyncio.run(bounded())


def coordinator_is(node_id: int) -> Answer:
    def answer(_node: int, _version: int, _request: Any) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "node_id": node_id,
            "host": f"broker{node_id}",
            "port": 9092,
        }

    return answer


def coordinator_error(code: ErrorCode) -> dict[str, Any]:
    return {"error_code": code, "error_message": None, "node_id": -1, "host": "", "port": -1}


def described(group_id: str, state: str, members: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.none,
        "group_id": group_id,
        "group_state": state,
        "protocol_type": "consumer",
        "protocol_data": "range" if members else "",
        "members": [
            {
                "member_id": m["member_id"],
                "group_instance_id": m.get("group_instance_id"),
                "client_id": "rdkafka",
                "client_host": "/127.0.0.1",
                "member_metadata": b"",
                "member_assignment": m.get("assignment", b""),
            }
            for m in members
        ],
        "authorized_operations": -2147483648,
    }


@pytest.fixture(params=["highest", "lowest"])
def lowest_versions(request: pytest.FixtureRequest) -> Iterator[bool]:
    yield request.param == "lowest"


# ── coordinator lookup and retries ───────────────────────────────────────────────────────


def test_lookups_are_retried_while_no_coordinator_is_available(lowest_versions: bool) -> None:
    answers = iter(
        [
            coordinator_error(ErrorCode.coordinator_not_available),
            coordinator_error(ErrorCode.coordinator_load_in_progress),
        ]
    )

    def find(node: int, version: int, request: Any) -> dict[str, Any]:
        assert request.key == "g"
        return next(answers, None) or coordinator_is(2)(node, version, request)

    cluster = ScriptedCluster({ApiKey.FIND_COORDINATOR: find}, lowest_versions=lowest_versions)
    node = run(admin_for(cluster).find_coordinator("g"))
    assert node == BrokerMetadata(2, "broker2", 9092)
    assert len(cluster.sent_of(ApiKey.FIND_COORDINATOR)) == 3


def test_a_moved_coordinator_is_looked_up_again() -> None:
    coordinators = iter([1, 2])

    def find(node: int, version: int, request: Any) -> dict[str, Any]:
        return coordinator_is(next(coordinators))(node, version, request)

    def describe(node: int, _version: int, _request: Any) -> dict[str, Any]:
        if node == 1:
            return {
                "groups": [{**described("g", "Empty", []), "error_code": ErrorCode.not_coordinator}]
            }
        return {"groups": [described("g", "Empty", [])]}

    cluster = ScriptedCluster({ApiKey.FIND_COORDINATOR: find, ApiKey.DESCRIBE_GROUPS: describe})
    (description,) = run(admin_for(cluster).describe_groups(["g"]))
    assert description.state == GroupState.EMPTY
    assert [node for node, _ in cluster.sent_of(ApiKey.DESCRIBE_GROUPS)] == [1, 2]
    assert len(cluster.sent_of(ApiKey.FIND_COORDINATOR)) == 2


def test_the_coordinator_is_remembered_between_requests() -> None:
    cluster = ScriptedCluster(
        {
            ApiKey.FIND_COORDINATOR: coordinator_is(2),
            ApiKey.DESCRIBE_GROUPS: lambda *_: {"groups": [described("g", "Empty", [])]},
            ApiKey.OFFSET_FETCH: lambda *_: {"error_code": ErrorCode.none, "topics": []},
        }
    )
    admin = admin_for(cluster)

    async def scenario() -> None:
        await admin.describe_groups(["g"])
        await admin.list_group_offsets("g")

    run(scenario())
    assert len(cluster.sent_of(ApiKey.FIND_COORDINATOR)) == 1
    assert [node for node, _ in cluster.sent_of(ApiKey.OFFSET_FETCH)] == [2]


def test_a_dropped_connection_is_retried() -> None:
    drops = iter([True])

    def fetch(*_: Any) -> dict[str, Any]:
        if next(drops, False):
            raise ConnectionClosedError("broker went away")
        return {"error_code": ErrorCode.none, "topics": []}

    cluster = ScriptedCluster(
        {ApiKey.FIND_COORDINATOR: coordinator_is(1), ApiKey.OFFSET_FETCH: fetch}
    )
    assert run(admin_for(cluster).list_group_offsets("g")) == {}
    assert len(cluster.sent_of(ApiKey.OFFSET_FETCH)) == 2


def test_retries_stop_at_the_deadline_with_the_last_error() -> None:
    cluster = ScriptedCluster(
        {
            ApiKey.FIND_COORDINATOR: lambda *_: coordinator_error(
                ErrorCode.coordinator_load_in_progress
            )
        }
    )
    with pytest.raises(errors.KafkaError, match=r"still failing after 0\.3 s") as caught:
        run(admin_for(cluster, timeout_s=0.3).find_coordinator("g"))
    assert caught.value.code == ErrorCode.coordinator_load_in_progress
    assert 2 <= len(cluster.sent) <= 4  # backoff 0.1 s, then 0.2 s


def test_other_errors_are_raised_at_once() -> None:
    cluster = ScriptedCluster(
        {
            ApiKey.FIND_COORDINATOR: coordinator_is(1),
            ApiKey.OFFSET_FETCH: lambda *_: {
                "error_code": ErrorCode.group_authorization_failed,
                "topics": [],
            },
        }
    )
    with pytest.raises(errors.KafkaError, match="group 'g'") as caught:
        run(admin_for(cluster).list_group_offsets("g"))
    assert caught.value.code == ErrorCode.group_authorization_failed
    assert len(cluster.sent_of(ApiKey.OFFSET_FETCH)) == 1


# ── the group requests ───────────────────────────────────────────────────────────────────


def test_describe_decodes_consumer_assignments(lowest_versions: bool) -> None:
    assignment = encode_consumer_assignment({"orders": [1, 0], "audit": [0]})

    def describe(_node: int, _version: int, request: Any) -> dict[str, Any]:
        assert list(request.groups) == ["g"]
        return {
            "groups": [
                described(
                    "g",
                    "Stable",
                    [{"member_id": "m-1", "group_instance_id": "i-1", "assignment": assignment}],
                )
            ]
        }

    cluster = ScriptedCluster(
        {ApiKey.FIND_COORDINATOR: coordinator_is(1), ApiKey.DESCRIBE_GROUPS: describe},
        lowest_versions=lowest_versions,
    )
    (description,) = run(admin_for(cluster).describe_groups(["g"]))
    assert description.is_active and description.exists
    assert (description.state, description.protocol) == ("Stable", "range")
    (member,) = description.members
    assert member.member_id == "m-1"
    assert member.group_instance_id == (None if lowest_versions else "i-1")
    assert member.client_host == "/127.0.0.1"
    assert member.assignment == {"audit": [0], "orders": [0, 1]}


def test_assignments_of_other_protocol_types_are_not_decoded() -> None:
    def describe(*_: Any) -> dict[str, Any]:
        group = described("c", "Stable", [{"member_id": "w", "assignment": b"\x01opaque"}])
        return {"groups": [{**group, "protocol_type": "connect"}]}

    cluster = ScriptedCluster(
        {ApiKey.FIND_COORDINATOR: coordinator_is(1), ApiKey.DESCRIBE_GROUPS: describe}
    )
    (description,) = run(admin_for(cluster).describe_groups(["c"]))
    assert description.members[0].assignment == {}


def test_a_bad_assignment_names_the_group_and_member() -> None:
    def describe(*_: Any) -> dict[str, Any]:
        return {"groups": [described("g", "Stable", [{"member_id": "m-9", "assignment": b"\x00"}])]}

    cluster = ScriptedCluster(
        {ApiKey.FIND_COORDINATOR: coordinator_is(1), ApiKey.DESCRIBE_GROUPS: describe}
    )
    with pytest.raises(MalformedAssignmentError, match="group 'g', member 'm-9'"):
        run(admin_for(cluster).describe_groups(["g"]))


def test_committed_offsets_leave_out_partitions_without_one(lowest_versions: bool) -> None:
    def fetch(_node: int, _version: int, request: Any) -> dict[str, Any]:
        assert request.group_id == "g"
        assert [(t.name, list(t.partition_indexes)) for t in request.topics] == [("t", [0, 1])]
        return {
            "error_code": ErrorCode.none,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 42,
                            "committed_leader_epoch": 3,
                            "metadata": "m",
                            "error_code": ErrorCode.none,
                        },
                        {
                            "partition_index": 1,
                            "committed_offset": -1,
                            "committed_leader_epoch": -1,
                            "metadata": None,
                            "error_code": ErrorCode.none,
                        },
                    ],
                }
            ],
        }

    cluster = ScriptedCluster(
        {ApiKey.FIND_COORDINATOR: coordinator_is(1), ApiKey.OFFSET_FETCH: fetch},
        lowest_versions=lowest_versions,
    )
    offsets = run(
        admin_for(cluster).list_group_offsets("g", [TopicPartition("t", 0), TopicPartition("t", 1)])
    )
    epoch = -1 if lowest_versions else 3
    assert offsets == {TopicPartition("t", 0): OffsetAndMetadata(42, epoch, "m")}


def test_all_committed_offsets_are_asked_for_with_null_topics() -> None:
    def fetch(_node: int, _version: int, request: Any) -> dict[str, Any]:
        assert request.topics is None
        return {"error_code": ErrorCode.none, "topics": []}

    cluster = ScriptedCluster(
        {ApiKey.FIND_COORDINATOR: coordinator_is(1), ApiKey.OFFSET_FETCH: fetch},
        lowest_versions=True,
    )
    assert run(admin_for(cluster).list_group_offsets("g")) == {}


def _commit_answer(code: ErrorCode) -> Answer:
    def commit(_node: int, _version: int, request: Any) -> dict[str, Any]:
        return {
            "topics": [
                {
                    "name": topic.name,
                    "partitions": [
                        {"partition_index": p.partition_index, "error_code": code}
                        for p in topic.partitions
                    ],
                }
                for topic in request.topics
            ]
        }

    return commit


def test_offsets_are_altered_as_a_commit_outside_any_generation(lowest_versions: bool) -> None:
    cluster = ScriptedCluster(
        {
            ApiKey.FIND_COORDINATOR: coordinator_is(1),
            ApiKey.OFFSET_COMMIT: _commit_answer(ErrorCode.none),
        },
        lowest_versions=lowest_versions,
    )
    run(
        admin_for(cluster).alter_group_offsets(
            "g",
            {
                TopicPartition("t", 0): OffsetAndMetadata(5),
                TopicPartition("t", 2): OffsetAndMetadata(9),
            },
        )
    )
    ((_node, request),) = cluster.sent_of(ApiKey.OFFSET_COMMIT)
    assert (request.group_id, request.generation_id_or_member_epoch, request.member_id) == (
        "g",
        -1,
        "",
    )
    (topic,) = request.topics
    assert [(p.partition_index, p.committed_offset) for p in topic.partitions] == [(0, 5), (2, 9)]


@pytest.mark.parametrize(
    "code",
    [ErrorCode.unknown_member_id, ErrorCode.illegal_generation, ErrorCode.rebalance_in_progress],
)
def test_a_commit_refused_for_active_members_says_so(code: ErrorCode) -> None:
    cluster = ScriptedCluster(
        {ApiKey.FIND_COORDINATOR: coordinator_is(1), ApiKey.OFFSET_COMMIT: _commit_answer(code)}
    )
    with pytest.raises(errors.KafkaError, match="group 'g' has active members") as caught:
        run(
            admin_for(cluster).alter_group_offsets(
                "g", {TopicPartition("t", 0): OffsetAndMetadata(1)}
            )
        )
    assert caught.value.code == code


def test_delete_groups_reports_each_group() -> None:
    outcomes = {
        "a": ErrorCode.none,
        "b": ErrorCode.non_empty_group,
        "c": ErrorCode.group_id_not_found,
    }

    def delete(_node: int, _version: int, request: Any) -> dict[str, Any]:
        return {
            "results": [
                {"group_id": group_id, "error_code": outcomes[group_id]}
                for group_id in request.groups_names
            ]
        }

    cluster = ScriptedCluster(
        {ApiKey.FIND_COORDINATOR: coordinator_is(1), ApiKey.DELETE_GROUPS: delete}
    )
    results = run(admin_for(cluster).delete_groups(["a", "b", "c", "a"]))
    assert list(results) == ["a", "b", "c"]
    assert results["a"] is None
    assert results["b"] is not None and "group 'b' is not empty" in str(results["b"])
    assert results["c"] is not None and "group 'c' does not exist" in str(results["c"])


def test_offsets_of_a_subscribed_topic_cannot_be_deleted() -> None:
    def delete(_node: int, _version: int, request: Any) -> dict[str, Any]:
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in request.topics] == [
            ("t", [0, 1])
        ]
        return {
            "error_code": ErrorCode.none,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {"partition_index": i, "error_code": ErrorCode.group_subscribed_to_topic}
                        for i in (0, 1)
                    ],
                }
            ],
        }

    cluster = ScriptedCluster(
        {ApiKey.FIND_COORDINATOR: coordinator_is(1), ApiKey.OFFSET_DELETE: delete}
    )
    with pytest.raises(errors.KafkaError, match="subscribe to topic 't'"):
        run(
            admin_for(cluster).delete_group_offsets(
                "g", [TopicPartition("t", 0), TopicPartition("t", 1)]
            )
        )


def test_groups_are_listed_from_every_broker_with_their_states() -> None:
    on_broker = {1: ["b", "a"], 2: ["c"]}

    def list_groups(node: int, _version: int, _request: Any) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.none,
            "groups": [
                {
                    "group_id": g,
                    "protocol_type": "consumer",
                    "group_state": "Stable",
                    "group_type": "classic",
                }
                for g in on_broker[node]
            ],
        }

    cluster = ScriptedCluster({ApiKey.LIST_GROUPS: list_groups})
    listings = run(admin_for(cluster).list_groups())
    assert [(g.group_id, g.state) for g in listings] == [
        ("a", GroupState.STABLE),
        ("b", GroupState.STABLE),
        ("c", GroupState.STABLE),
    ]
    assert not cluster.sent_of(ApiKey.DESCRIBE_GROUPS)


def test_groups_are_listed_with_their_type() -> None:
    """ListGroups v5+ names each group's type: classic, or share (KIP-932)."""

    def list_groups(_node: int, _version: int, _request: Any) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.none,
            "groups": [
                {
                    "group_id": g,
                    "protocol_type": kind if kind == "share" else "consumer",
                    "group_state": "Stable",
                    "group_type": kind,
                }
                for g, kind in (("a", "classic"), ("q", "share"))
            ],
        }

    cluster = ScriptedCluster({ApiKey.LIST_GROUPS: list_groups})
    listings = run(admin_for(cluster).list_groups())
    assert sorted({(g.group_id, g.group_type) for g in listings}) == [
        ("a", "classic"),
        ("q", "share"),
    ]


def test_groups_listed_without_states_are_described() -> None:
    """ListGroups before v4 has no states: they come from DescribeGroups."""
    on_broker = {1: ["b", "a"], 2: ["c"]}

    def list_groups(node: int, version: int, _request: Any) -> dict[str, Any]:
        assert version < 4
        return {
            "error_code": ErrorCode.none,
            "groups": [{"group_id": g, "protocol_type": "consumer"} for g in on_broker[node]],
        }

    def describe(_node: int, _version: int, request: Any) -> dict[str, Any]:
        groups = [described(g, "Empty", []) for g in request.groups]
        groups[-1]["error_code"] = ErrorCode.not_coordinator  # moved since it was listed
        return {"groups": groups}

    cluster = ScriptedCluster(
        {ApiKey.LIST_GROUPS: list_groups, ApiKey.DESCRIBE_GROUPS: describe},
        lowest_versions=True,
    )
    listings = run(admin_for(cluster).list_groups())
    assert [(g.group_id, g.state) for g in listings] == [
        ("a", GroupState.UNKNOWN),
        ("b", GroupState.EMPTY),
        ("c", GroupState.UNKNOWN),
    ]


@pytest.mark.parametrize("api_key", GROUP_APIS, ids=lambda key: ApiKey(key).name)
def test_every_group_request_builds_at_every_client_version(api_key: int) -> None:
    """The requests the tests above sent, built at every version the client speaks."""
    requests = {
        ApiKey.FIND_COORDINATOR: Request(ApiKey.FIND_COORDINATOR, {"key": "g", "key_type": 0}),
        ApiKey.LIST_GROUPS: Request(ApiKey.LIST_GROUPS, {"states_filter": []}),
        ApiKey.DESCRIBE_GROUPS: Request(
            ApiKey.DESCRIBE_GROUPS, {"groups": ["g"], "include_authorized_operations": False}
        ),
        ApiKey.DELETE_GROUPS: Request(ApiKey.DELETE_GROUPS, {"groups_names": ["g"]}),
        ApiKey.OFFSET_FETCH: Request(
            ApiKey.OFFSET_FETCH, {"group_id": "g", "topics": None, "require_stable": False}
        ),
        ApiKey.OFFSET_DELETE: Request(
            ApiKey.OFFSET_DELETE,
            {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]},
        ),
        ApiKey.OFFSET_COMMIT: Request(
            ApiKey.OFFSET_COMMIT,
            {
                "group_id": "g",
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 7,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            },
        ),
    }
    low, high = CLIENT_VERSIONS[api_key]
    for version in range(low, high + 1):
        frame = encode_request(1, "test", requests[api_key].build(version))[4:]
        header, body_offset = parse_request_header(frame)
        assert header.api_version == version
        decode_request_body(header, frame, body_offset)


def test_groups_of_one_coordinator_are_described_in_one_request() -> None:
    homes = {"a": 1, "b": 2, "c": 1, "gone": 1}

    def find(_node: int, _version: int, request: Any) -> dict[str, Any]:
        key = request.key if hasattr(request, "key") else request.coordinator_keys[0]
        return coordinator_is(homes[key])(_node, _version, request)

    def describe(node: int, _version: int, request: Any) -> dict[str, Any]:
        answers = []
        for group_id in request.groups:
            assert homes[group_id] == node, f"{group_id} asked at {node}"
            if group_id == "gone":
                answers.append(
                    {**described(group_id, "Dead", []), "error_code": ErrorCode.group_id_not_found}
                )
            else:
                answers.append(described(group_id, "Empty", []))
        return {"groups": answers}

    cluster = ScriptedCluster({ApiKey.FIND_COORDINATOR: find, ApiKey.DESCRIBE_GROUPS: describe})
    descriptions = run(admin_for(cluster).describe_groups(["c", "gone", "b", "a", "c"]))
    assert [(d.group_id, d.state) for d in descriptions] == [
        ("c", GroupState.EMPTY),
        ("gone", GroupState.DEAD),
        ("b", GroupState.EMPTY),
        ("a", GroupState.EMPTY),
    ]
    sent = sorted(
        (node, sorted(body.groups)) for node, body in cluster.sent_of(ApiKey.DESCRIBE_GROUPS)
    )
    assert sent == [(1, ["a", "c", "gone"]), (2, ["b"])]


def test_a_group_whose_coordinator_moved_is_asked_again_on_its_own() -> None:
    homes = {"stays": [1, 1], "moves": [1, 2]}

    def find(node: int, version: int, request: Any) -> dict[str, Any]:
        key = request.key if hasattr(request, "key") else request.coordinator_keys[0]
        return coordinator_is(homes[key].pop(0))(node, version, request)

    def describe(node: int, _version: int, request: Any) -> dict[str, Any]:
        answers = []
        for group_id in request.groups:
            if group_id == "moves" and node == 1:
                answers.append(
                    {**described(group_id, "Empty", []), "error_code": ErrorCode.not_coordinator}
                )
            else:
                answers.append(described(group_id, "Stable" if node == 2 else "Empty", []))
        return {"groups": answers}

    cluster = ScriptedCluster({ApiKey.FIND_COORDINATOR: find, ApiKey.DESCRIBE_GROUPS: describe})
    stays, moves = run(admin_for(cluster).describe_groups(["stays", "moves"]))
    assert (stays.state, moves.state) == (GroupState.EMPTY, GroupState.STABLE)
    assert [
        (node, list(body.groups)) for node, body in cluster.sent_of(ApiKey.DESCRIBE_GROUPS)
    ] == [
        (1, ["stays", "moves"]),
        (2, ["moves"]),
    ]


# ── groups of the consumer group protocol (KIP-848) ─────────────────────────────────────

CONSUMER_TOPIC_ID = uuid.UUID(int=7)


def _topic_partitions(partitions: list[int]) -> dict[str, Any]:
    return {
        "topic_partitions": (
            [{"topic_id": CONSUMER_TOPIC_ID, "topic_name": "orders", "partitions": partitions}]
            if partitions
            else []
        )
    }


def consumer_described(group_id: str) -> dict[str, Any]:
    """A consumer group mid-rebalance: m1 (epoch 4) still holds 0-3, m2 awaits 2-3."""
    member = {
        "instance_id": None,
        "rack_id": None,
        "client_id": "rdkafka",
        "client_host": "/127.0.0.1",
        "subscribed_topic_names": ["orders"],
        "subscribed_topic_regex": None,
        "member_type": 1,
    }
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "group_id": group_id,
        "group_state": "Reconciling",
        "group_epoch": 5,
        "assignment_epoch": 5,
        "assignor_name": "uniform",
        "members": [
            {
                **member,
                "member_id": "m2",
                "member_epoch": 5,
                "subscribed_topic_names": [],
                "subscribed_topic_regex": "ord.*",
                "assignment": _topic_partitions([]),
                "target_assignment": _topic_partitions([2, 3]),
            },
            {
                **member,
                "member_id": "m1",
                "instance_id": "static-1",
                "member_epoch": 4,
                "assignment": _topic_partitions([0, 1, 2, 3]),
                "target_assignment": _topic_partitions([0, 1]),
            },
        ],
        "authorized_operations": -2147483648,
    }


def dead_to_describe_groups(_node: int, _version: int, request: Any) -> dict[str, Any]:
    return {"groups": [described(group_id, "Dead", []) for group_id in request.groups]}


def test_a_consumer_group_is_described_by_consumer_group_describe(
    lowest_versions: bool,
) -> None:
    def describe(_node: int, _version: int, request: Any) -> dict[str, Any]:
        return {
            "groups": [
                consumer_described(g)
                if g == "rebalancing"
                else {
                    **consumer_described(g),
                    "error_code": ErrorCode.group_id_not_found,
                    "group_state": "Dead",
                    "members": [],
                }
                for g in request.group_ids
            ]
        }

    cluster = ScriptedCluster(
        {
            ApiKey.FIND_COORDINATOR: coordinator_is(1),
            ApiKey.DESCRIBE_GROUPS: dead_to_describe_groups,
            ApiKey.CONSUMER_GROUP_DESCRIBE: describe,
        },
        lowest_versions=lowest_versions,
    )
    rebalancing, missing = run(admin_for(cluster).describe_groups(["rebalancing", "missing"]))
    assert not missing.exists and missing.group_type == "classic"
    assert (rebalancing.group_type, rebalancing.state, rebalancing.protocol) == (
        "consumer",
        "Reconciling",
        "uniform",
    )
    assert (rebalancing.group_epoch, rebalancing.assignment_epoch) == (5, 5)
    first, second = rebalancing.members
    assert (first.member_id, first.group_instance_id, first.member_epoch) == ("m1", "static-1", 4)
    assert first.subscribed_topics == ("orders",)
    assert first.assignment == {"orders": [0, 1, 2, 3]}
    assert first.pending_revocation == {"orders": [2, 3]} and first.pending_assignment == {}
    assert (second.subscribed_topics, second.subscribed_topic_regex) == ((), "ord.*")
    assert second.pending_assignment == {"orders": [2, 3]} and second.pending_revocation == {}


def test_without_consumer_group_describe_list_groups_gives_type_and_state() -> None:
    def list_groups(_node: int, version: int, request: Any) -> dict[str, Any]:
        assert version >= 5 and list(request.types_filter) == ["consumer"]
        return {
            "error_code": ErrorCode.none,
            "groups": [
                {
                    "group_id": "modern",
                    "protocol_type": "consumer",
                    "group_state": "Stable",
                    "group_type": "consumer",
                }
            ],
        }

    cluster = ScriptedCluster(
        {
            ApiKey.FIND_COORDINATOR: coordinator_is(1),
            ApiKey.DESCRIBE_GROUPS: dead_to_describe_groups,
            ApiKey.LIST_GROUPS: list_groups,
        }
    )
    modern, missing = run(admin_for(cluster).describe_groups(["modern", "missing"]))
    assert (modern.group_type, modern.state, modern.members) == ("consumer", "Stable", [])
    assert modern.exists and modern.is_active and not modern.members_described
    assert not missing.exists and missing.members_described
    assert not any(key == ApiKey.CONSUMER_GROUP_DESCRIBE for _, key, _ in cluster.sent)
