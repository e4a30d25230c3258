"""ACLs against a real broker: CreateAcls, DescribeAcls and DeleteAcls through Sluice's
client, and what a principal may do once the authorizer is on.

Every plaintext client is ``User:ANONYMOUS``. The broker starts with ANONYMOUS as a super
user, which grants ANONYMOUS ALTER and DESCRIBE on the cluster (so it can change ACLs),
and restarts without super users: from then on ANONYMOUS may do only what the ACLs
allow, and the tests add and remove ACLs between checks."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka
import kafka
import kafka.errors
import pytest
from broker_process import BrokerProcess
from consumer_group_wire import CONSUMER_PROTOCOL, describe, heartbeat, heartbeat_request
from kafka_wire import (
    KafkaConnection,
    Record,
    create_topics_request,
    encode_batch,
    fetch_request,
    list_offsets_request,
    metadata_request,
    only_partition,
    produce_request,
)
from kio.schema.alter_replica_log_dirs.v2 import request as alter_replica_log_dirs_v2
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.delete_topics.v3 import request as delete_topics_v3
from kio.schema.describe_log_dirs.v1 import request as describe_log_dirs_v1
from kio.schema.describe_quorum.v2 import request as describe_quorum_v2
from kio.schema.write_txn_markers.v1 import request as write_txn_markers_v1
from share_wire import ShareMember
from share_wire import topic_id as share_topic_id

from sluice.client.admin import Admin
from sluice.client.admin_acls import create_acls, delete_acls, describe_acls
from sluice.client.cluster import Cluster
from sluice.common import errors
from sluice.common.authorizer import (
    ANONYMOUS,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    EntryFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

TIMEOUT_S = 30.0
AUTHORIZER = {"authorizer.enabled": "true", **CONSUMER_PROTOCOL}
"""The authorizer on (and the consumer group protocol, whose rights are tested too)."""


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, TIMEOUT_S))


def binding(
    resource_type: ResourceType,
    name: str,
    operation: Operation,
    permission: Permission = Permission.ALLOW,
    *,
    pattern_type: PatternType = PatternType.LITERAL,
    principal: str = ANONYMOUS,
    host: str = "*",
) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource_type, name, pattern_type),
        AccessControlEntry(principal, host, operation, permission),
    )


ADMIN_ACLS = [
    binding(ResourceType.CLUSTER, "kafka-cluster", Operation.ALTER),
    binding(ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE),
]


async def _call(broker: BrokerProcess, action: Callable[[Cluster], Any]) -> Any:
    async with Cluster(broker.bootstrap) as cluster:
        return await action(cluster)


def add(broker: BrokerProcess, *bindings: AclBinding) -> None:
    run(_call(broker, lambda cluster: create_acls(cluster, list(bindings))))


def remove(broker: BrokerProcess, *filters: AclBindingFilter) -> list[AclBinding]:
    result: list[AclBinding] = run(_call(broker, lambda cluster: delete_acls(cluster, filters)))
    return result


def listed(broker: BrokerProcess, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
    result: list[AclBinding] = run(
        _call(broker, lambda cluster: describe_acls(cluster, acl_filter or AclBindingFilter()))
    )
    return result


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with the authorizer on where ANONYMOUS holds only ALTER and DESCRIBE on
    the cluster (granted while it was a super user)."""
    data_dir = tmp_path_factory.mktemp("acls") / "broker"
    broker = BrokerProcess(data_dir, overrides={**AUTHORIZER, "super.users": ANONYMOUS})
    broker.start()
    try:
        add(broker, *ADMIN_ACLS)
        broker.stop()
        broker.overrides = dict(AUTHORIZER)
        broker.start()
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def clean(secured: BrokerProcess) -> Iterator[BrokerProcess]:
    """The secured broker, with the ACLs a test added removed afterwards."""
    yield secured
    everything_but_admin = [
        AclBindingFilter(ResourcePatternFilter(resource_type=kind))
        for kind in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)
    ]
    remove(secured, *everything_but_admin)
    extra = [b for b in listed(secured) if b not in ADMIN_ACLS]
    for b in extra:
        remove(
            secured,
            AclBindingFilter(
                ResourcePatternFilter(
                    b.pattern.resource_type, b.pattern.name, b.pattern.pattern_type
                ),
                EntryFilter(b.entry.principal, b.entry.host, b.entry.operation, b.entry.permission),
            ),
        )


def test_acl_apis_answer_security_disabled_without_the_authorizer(broker: BrokerProcess) -> None:
    with pytest.raises(errors.for_code(errors.ErrorCode.security_disabled)):
        listed(broker)
    with pytest.raises(errors.for_code(errors.ErrorCode.security_disabled)):
        add(broker, binding(ResourceType.TOPIC, "t", Operation.READ))


def test_acls_are_created_described_and_deleted(clean: BrokerProcess) -> None:
    read_orders = binding(ResourceType.TOPIC, "orders", Operation.READ)
    write_prefix = binding(
        ResourceType.TOPIC, "ord", Operation.WRITE, pattern_type=PatternType.PREFIXED
    )
    deny_bob = binding(
        ResourceType.GROUP, "g", Operation.READ, Permission.DENY, principal="User:bob"
    )
    add(clean, read_orders, write_prefix, deny_bob)
    assert set(listed(clean)) == {read_orders, write_prefix, deny_bob, *ADMIN_ACLS}
    match_orders = AclBindingFilter(
        ResourcePatternFilter(ResourceType.TOPIC, "orders", PatternType.MATCH)
    )
    assert listed(clean, match_orders) == sorted([read_orders, write_prefix])
    by_principal = AclBindingFilter(entry=EntryFilter(principal="User:bob"))
    assert listed(clean, by_principal) == [deny_bob]
    assert remove(clean, match_orders) == sorted([read_orders, write_prefix])
    assert set(listed(clean)) == {deny_bob, *ADMIN_ACLS}
    assert remove(clean, match_orders) == []


def test_invalid_acls_are_refused_with_the_reason(clean: BrokerProcess) -> None:
    invalid = errors.for_code(errors.ErrorCode.invalid_request)
    with pytest.raises(invalid, match="kafka-cluster"):
        add(clean, binding(ResourceType.CLUSTER, "mine", Operation.ALTER))
    with pytest.raises(invalid, match="principal"):
        add(clean, binding(ResourceType.TOPIC, "t", Operation.READ, principal="alice"))
    with pytest.raises(invalid, match="patternType"):
        add(clean, binding(ResourceType.TOPIC, "t", Operation.READ, pattern_type=PatternType.MATCH))
    assert set(listed(clean)) == set(ADMIN_ACLS)


def test_changing_acls_needs_alter_on_the_cluster(clean: BrokerProcess) -> None:
    """A DENY of ALTER on the cluster takes the power to change ACLs away (and nobody can
    give it back but a super user: the test restores it by restarting as one)."""
    deny_alter = binding(ResourceType.CLUSTER, "kafka-cluster", Operation.ALTER, Permission.DENY)
    add(clean, deny_alter)
    try:
        refused = errors.for_code(errors.ErrorCode.cluster_authorization_failed)
        with pytest.raises(refused):
            add(clean, binding(ResourceType.TOPIC, "t", Operation.READ))
        with pytest.raises(refused):
            remove(clean, AclBindingFilter())
        assert deny_alter in listed(clean)  # DESCRIBE is still allowed
    finally:
        clean.stop()
        clean.overrides = {**AUTHORIZER, "super.users": ANONYMOUS}
        clean.start()
        remove(
            clean,
            AclBindingFilter(
                ResourcePatternFilter(ResourceType.CLUSTER),
                EntryFilter(permission=Permission.DENY),
            ),
        )
        clean.stop()
        clean.overrides = dict(AUTHORIZER)
        clean.start()


# -- what a principal may do: topics -----------------------------------------------------

TOPIC_DENIED = errors.ErrorCode.topic_authorization_failed
GROUP_DENIED = errors.ErrorCode.group_authorization_failed


def allow_topic(
    broker: BrokerProcess, name: str, operation: Operation, **kwargs: Any
) -> AclBinding:
    granted = binding(ResourceType.TOPIC, name, operation, **kwargs)
    add(broker, granted)
    return granted


def revoke(broker: BrokerProcess, granted: AclBinding) -> None:
    pattern, entry = granted.pattern, granted.entry
    removed = remove(
        broker,
        AclBindingFilter(
            ResourcePatternFilter(pattern.resource_type, pattern.name, pattern.pattern_type),
            EntryFilter(entry.principal, entry.host, entry.operation, entry.permission),
        ),
    )
    assert removed == [granted]


def visible_topics(connection: KafkaConnection) -> set[str]:
    return {str(t.name) for t in connection.request(metadata_request(None)).topics}


def topic_code(connection: KafkaConnection, name: str) -> int:
    response = connection.request(metadata_request([name], allow_auto_topic_creation=False))
    (found,) = response.topics
    return int(found.error_code)


def produce_code(connection: KafkaConnection, name: str) -> int:
    batch = encode_batch([Record(key=b"k", value=b"v")])
    return int(only_partition(connection.request(produce_request(name, 0, batch))).error_code)


def fetch_code(connection: KafkaConnection, name: str) -> int:
    return int(only_partition(connection.request(fetch_request(name, 0, 0))).error_code)


def list_offsets_code(connection: KafkaConnection, name: str) -> int:
    return int(only_partition(connection.request(list_offsets_request(name, 0, -1))).error_code)


def create_code(connection: KafkaConnection, name: str) -> int:
    return int(connection.request(create_topics_request(name)).topics[0].error_code)


def delete_topics_request(name: str) -> delete_topics_v3.DeleteTopicsRequest:
    return delete_topics_v3.DeleteTopicsRequest(
        topic_names=(name,), timeout=datetime.timedelta(seconds=10)
    )


def test_topics_are_denied_by_default_and_allowed_operation_by_operation(
    clean: BrokerProcess, topic: str
) -> None:
    with KafkaConnection(clean.host, clean.port) as connection:
        # Nothing granted: nothing may be done, and nothing is seen.
        assert create_code(connection, topic) == TOPIC_DENIED
        add(clean, binding(ResourceType.TOPIC, topic, Operation.CREATE))
        assert create_code(connection, topic) == 0
        assert topic not in visible_topics(connection)  # CREATE does not imply DESCRIBE
        assert topic_code(connection, topic) == TOPIC_DENIED
        assert produce_code(connection, topic) == TOPIC_DENIED
        assert fetch_code(connection, topic) == TOPIC_DENIED
        assert list_offsets_code(connection, topic) == TOPIC_DENIED
        # WRITE: produce, and (implied) DESCRIBE.
        allow_topic(clean, topic, Operation.WRITE)
        assert produce_code(connection, topic) == 0
        assert topic in visible_topics(connection)
        assert topic_code(connection, topic) == 0
        assert list_offsets_code(connection, topic) == 0
        assert fetch_code(connection, topic) == TOPIC_DENIED
        # READ: fetch.
        allow_topic(clean, topic, Operation.READ)
        assert fetch_code(connection, topic) == 0
        # A DENY of DESCRIBE hides the topic but leaves WRITE and READ.
        deny = allow_topic(clean, topic, Operation.DESCRIBE, permission=Permission.DENY)
        assert topic not in visible_topics(connection)
        assert list_offsets_code(connection, topic) == TOPIC_DENIED
        assert produce_code(connection, topic) == 0
        revoke(clean, deny)
        # A DENY of everything wins over every ALLOW.
        deny = allow_topic(clean, topic, Operation.ALL, permission=Permission.DENY)
        assert produce_code(connection, topic) == TOPIC_DENIED
        assert fetch_code(connection, topic) == TOPIC_DENIED
        revoke(clean, deny)
        # Deleting needs DELETE.
        delete = connection.request(delete_topics_request(topic))
        assert int(delete.responses[0].error_code) == TOPIC_DENIED
        allow_topic(clean, topic, Operation.DELETE)
        delete = connection.request(delete_topics_request(topic))
        assert int(delete.responses[0].error_code) == 0


def test_host_and_prefixed_rules(clean: BrokerProcess, topic: str) -> None:
    add(clean, binding(ResourceType.CLUSTER, "kafka-cluster", Operation.CREATE))
    with KafkaConnection(clean.host, clean.port) as connection:
        assert create_code(connection, topic) == 0
        elsewhere = allow_topic(clean, topic, Operation.READ, host="10.9.9.9")
        assert fetch_code(connection, topic) == TOPIC_DENIED
        revoke(clean, elsewhere)
        allow_topic(clean, topic, Operation.READ, host=clean.host)
        assert fetch_code(connection, topic) == 0
        assert produce_code(connection, topic) == TOPIC_DENIED
        allow_topic(clean, topic[:5], Operation.WRITE, pattern_type=PatternType.PREFIXED)
        assert produce_code(connection, topic) == 0
        # Auto-creation by Metadata needs CREATE (here on the cluster) and DESCRIBE.
        fresh = topic + "-auto"
        allow_topic(clean, fresh, Operation.DESCRIBE)
        response = connection.request(metadata_request([fresh]))
        assert int(response.topics[0].error_code) == 0


# -- clients see the right exceptions ------------------------------------------------------


def test_confluent_kafka_gets_authorization_errors(clean: BrokerProcess, topic: str) -> None:
    add(clean, binding(ResourceType.TOPIC, topic, Operation.CREATE))
    with KafkaConnection(clean.host, clean.port) as connection:
        assert create_code(connection, topic) == 0
    allow_topic(clean, topic, Operation.DESCRIBE)
    reports: list[Any] = []
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": clean.bootstrap, "enable.idempotence": False, "acks": "all"}
    )
    producer.produce(topic, b"v", on_delivery=lambda error, _message: reports.append(error))
    producer.flush(TIMEOUT_S)
    assert [e.code() for e in reports] == [confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # An idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
    idempotent = confluent_kafka.Producer(
        {
            "bootstrap.servers": clean.bootstrap,
            "enable.idempotence": True,
            "message.timeout.ms": 5000,
        }
    )
    deadline = time.monotonic() + TIMEOUT_S  # it asks for a producer id at once
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        while time.monotonic() < deadline:
            idempotent.poll(0.2)
    fatal = raised.value.args[0]
    assert fatal.code() == confluent_kafka.KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert fatal.fatal()
    # READ on the topic but not on the group: the consumer's group is refused.
    allow_topic(clean, topic, Operation.READ)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": clean.bootstrap,
            "group.id": f"{topic}-group",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([topic])
        error = None
        deadline = time.monotonic() + TIMEOUT_S
        while error is None and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is not None:
                error = message.error()
        assert error is not None
        assert error.code() == confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def test_kafka_python_gets_authorization_errors(clean: BrokerProcess, topic: str) -> None:
    add(clean, binding(ResourceType.TOPIC, topic, Operation.CREATE))
    with KafkaConnection(clean.host, clean.port) as connection:
        assert create_code(connection, topic) == 0
    allow_topic(clean, topic, Operation.DESCRIBE)
    producer = kafka.KafkaProducer(
        bootstrap_servers=clean.bootstrap, request_timeout_ms=15_000, enable_idempotence=False
    )
    try:
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            producer.send(topic, b"v").get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    allow_topic(clean, topic, Operation.WRITE)
    producer = kafka.KafkaProducer(
        bootstrap_servers=clean.bootstrap, request_timeout_ms=15_000, enable_idempotence=False
    )
    try:
        assert producer.send(topic, b"v").get(timeout=TIMEOUT_S).offset == 0
    finally:
        producer.close()


# -- the command line ---------------------------------------------------------------------


def sluice_acls(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice", "acls", *args, "--bootstrap-server", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def test_the_acls_command_adds_lists_and_removes(clean: BrokerProcess) -> None:
    added = sluice_acls(
        clean,
        "add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "read",
        "--operation",
        "describe",
        "--topic",
        "orders",
        "--group",
        "billing",
    )
    assert added.returncode == 0, added.stderr
    denied = sluice_acls(
        clean,
        "add",
        "--deny-principal",
        "User:bob",
        "--operation",
        "write",
        "--topic",
        "pay",
        "--resource-pattern-type",
        "prefixed",
    )
    assert denied.returncode == 0, denied.stderr
    listed_out = sluice_acls(clean, "list", "--principal", "User:alice", "--format", "json")
    assert listed_out.returncode == 0, listed_out.stderr
    assert sorted(
        (a["resource_type"], a["name"], a["operation"]) for a in json.loads(listed_out.stdout)
    ) == [
        ("GROUP", "billing", "DESCRIBE"),
        ("GROUP", "billing", "READ"),
        ("TOPIC", "orders", "DESCRIBE"),
        ("TOPIC", "orders", "READ"),
    ]
    matching = sluice_acls(clean, "list", "--topic", "payments", "--resource-pattern-type", "match")
    assert "User:bob" in matching.stdout and "PREFIXED" in matching.stdout
    assert "User:alice" not in matching.stdout
    refused = sluice_acls(clean, "remove", "--principal", "User:alice")
    assert refused.returncode != 0  # asked, and stdin is not a terminal
    removed = sluice_acls(clean, "remove", "--principal", "User:alice", "--yes")
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.count("User:alice") == 4
    left = {b.entry.principal for b in listed(clean)}
    assert left == {ANONYMOUS, "User:bob"}
    bad = sluice_acls(
        clean, "add", "--allow-principal", "alice", "--operation", "read", "--topic", "t"
    )
    assert bad.returncode != 0
    assert "principal" in bad.stderr


# -- groups, transactional ids, authorized operations ---------------------------------------


def test_groups_need_read_to_consume_and_describe_to_be_listed(
    clean: BrokerProcess, topic: str
) -> None:
    group = f"{topic}-group"
    add(clean, binding(ResourceType.TOPIC, topic, Operation.ALL))
    with KafkaConnection(clean.host, clean.port) as connection:
        assert create_code(connection, topic) == 0
        assert produce_code(connection, topic) == 0
    add(clean, binding(ResourceType.GROUP, group, Operation.READ))
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": clean.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        message = None
        deadline = time.monotonic() + TIMEOUT_S
        while message is None and time.monotonic() < deadline:
            polled = consumer.poll(1.0)
            if polled is not None:
                assert polled.error() is None, polled.error()
                message = polled
        assert message is not None and message.value() == b"v"
        consumer.commit(message=message, asynchronous=False)
    finally:
        consumer.close()

    async def groups_listed() -> list[str]:
        async with Cluster(clean.bootstrap) as cluster:
            return [g.group_id for g in await Admin(cluster).list_groups()]

    # With DESCRIBE on the cluster every group is listed; without it, those the principal
    # may DESCRIBE (READ implies it), and a DENY of DESCRIBE hides the group.
    assert group in run(groups_listed())
    deny_cluster = binding(
        ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE, Permission.DENY
    )
    add(clean, deny_cluster)
    try:
        assert group in run(groups_listed())
        add(clean, binding(ResourceType.GROUP, group, Operation.DESCRIBE, Permission.DENY))
        assert group not in run(groups_listed())
    finally:
        revoke(clean, deny_cluster)


def test_transactional_ids_need_write(clean: BrokerProcess, topic: str) -> None:
    add(clean, binding(ResourceType.TOPIC, topic, Operation.ALL))
    transactional_id = f"{topic}-tx"
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": clean.bootstrap, "transactional.id": transactional_id}
    )
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        producer.init_transactions(TIMEOUT_S)
    denied = confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert raised.value.args[0].code() == denied
    add(clean, binding(ResourceType.TRANSACTIONAL_ID, transactional_id, Operation.WRITE))
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": clean.bootstrap, "transactional.id": transactional_id}
    )
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"in a transaction")
    producer.commit_transaction(TIMEOUT_S)


def test_authorized_operations_are_the_principals(clean: BrokerProcess, topic: str) -> None:
    add(clean, binding(ResourceType.CLUSTER, "kafka-cluster", Operation.CREATE))
    with KafkaConnection(clean.host, clean.port) as connection:
        assert create_code(connection, topic) == 0
        allow_topic(clean, topic, Operation.READ)
        request = dataclasses.replace(
            metadata_request([topic]),
            include_cluster_authorized_operations=True,
            include_topic_authorized_operations=True,
        )
        response = connection.request(request)
    (described,) = response.topics
    assert int(described.topic_authorized_operations) == (1 << Operation.READ) | (
        1 << Operation.DESCRIBE
    )
    # ANONYMOUS holds ALTER, DESCRIBE and CREATE on the cluster.
    assert int(response.cluster_authorized_operations) == sum(
        1 << op for op in (Operation.ALTER, Operation.DESCRIBE, Operation.CREATE)
    )


# -- cluster actions -------------------------------------------------------------------------


def test_cluster_apis_need_their_cluster_operation(clean: BrokerProcess, topic: str) -> None:
    """ANONYMOUS holds ALTER and DESCRIBE on the cluster but not CLUSTER_ACTION: requests
    brokers send each other are refused; a DENY of DESCRIBE refuses DescribeLogDirs and
    empties the cluster's authorized operations."""
    cluster_denied = errors.ErrorCode.cluster_authorization_failed
    markers = write_txn_markers_v1.WriteTxnMarkersRequest(
        markers=(
            write_txn_markers_v1.WritableTxnMarker(
                producer_id=1,
                producer_epoch=0,
                transaction_result=True,
                topics=(
                    write_txn_markers_v1.WritableTxnMarkerTopic(name=topic, partition_indexes=(0,)),
                ),
                coordinator_epoch=0,
            ),
        )
    )
    log_dirs = describe_log_dirs_v1.DescribeLogDirsRequest(topics=None)
    with KafkaConnection(clean.host, clean.port) as connection:
        (marker,) = connection.request(markers).markers
        assert int(marker.topics[0].partitions[0].error_code) == cluster_denied
        assert len(connection.request(log_dirs).results) == 1
        deny = binding(ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE, Permission.DENY)
        add(clean, deny)
        try:
            assert connection.request(log_dirs).results == ()
            request = dataclasses.replace(
                metadata_request([]), include_cluster_authorized_operations=True
            )
            assert int(connection.request(request).cluster_authorized_operations) == 0
        finally:
            revoke(clean, deny)


def test_log_dir_moves_and_the_quorum_are_cluster_apis(clean: BrokerProcess, topic: str) -> None:
    """AlterReplicaLogDirs runs with ALTER on the cluster (which ANONYMOUS holds; denying
    it would lock the test out of removing the denial), and a DENY of DESCRIBE refuses
    DescribeQuorum as a whole, as Kafka's controller does."""
    move = alter_replica_log_dirs_v2.AlterReplicaLogDirsRequest(
        dirs=(
            alter_replica_log_dirs_v2.AlterReplicaLogDir(
                path=str(clean.data_dir.resolve()),
                topics=(
                    alter_replica_log_dirs_v2.AlterReplicaLogDirTopic(name=topic, partitions=(0,)),
                ),
            ),
        )
    )
    quorum = describe_quorum_v2.DescribeQuorumRequest(
        topics=(
            describe_quorum_v2.TopicData(
                topic_name="__cluster_metadata",
                partitions=(describe_quorum_v2.PartitionData(partition_index=0),),
            ),
        )
    )
    with KafkaConnection(clean.host, clean.port) as connection:
        (moved,) = connection.request(move).results
        not_hosted = errors.ErrorCode.replica_not_available
        assert int(moved.partitions[0].error_code) == not_hosted
        described = connection.request(quorum)
        assert int(described.error_code) == 0
        assert int(described.topics[0].partitions[0].error_code) == 3  # no quorum here
        deny = binding(ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE, Permission.DENY)
        add(clean, deny)
        try:
            refused = connection.request(quorum)
            assert int(refused.error_code) == errors.ErrorCode.cluster_authorization_failed
            assert refused.topics == ()
        finally:
            revoke(clean, deny)


def test_created_topics_show_their_configs_only_with_describe_configs(
    clean: BrokerProcess, topic: str
) -> None:
    add(clean, binding(ResourceType.CLUSTER, "kafka-cluster", Operation.CREATE))

    def create(name: str) -> Any:
        request = create_topics_v7.CreateTopicsRequest(
            topics=(
                create_topics_v7.CreatableTopic(
                    name=name, num_partitions=2, replication_factor=1, assignments=(), configs=()
                ),
            ),
            timeout=datetime.timedelta(seconds=10),
        )
        with KafkaConnection(clean.host, clean.port) as connection:
            (result,) = connection.request(request).topics
        return result

    hidden = create(topic)
    assert int(hidden.error_code) == 0
    assert int(hidden.num_partitions) == 2
    assert hidden.configs == ()
    assert int(hidden.topic_config_error_code) == TOPIC_DENIED
    allow_topic(clean, topic + "-shown", Operation.DESCRIBE_CONFIGS)
    shown = create(topic + "-shown")
    assert int(shown.topic_config_error_code) == 0
    assert any(c.name == "retention.ms" for c in shown.configs)


# -- share groups ----------------------------------------------------------------------------


def test_share_fetch_needs_read_on_the_group_and_on_the_topic(
    clean: BrokerProcess, topic: str
) -> None:
    group = f"{topic}-share"
    add(clean, binding(ResourceType.CLUSTER, "kafka-cluster", Operation.CREATE))
    read_topic = allow_topic(clean, topic, Operation.READ)
    allow_topic(clean, topic, Operation.WRITE)
    with KafkaConnection(clean.host, clean.port) as connection:
        assert create_code(connection, topic) == 0
        ids = share_topic_id(connection, topic)
        refused = ShareMember(connection, group, ids)
        with pytest.raises(AssertionError):
            refused.fetch()
        assert int(refused.last_response.error_code) == GROUP_DENIED  # type: ignore[attr-defined]
        add(clean, binding(ResourceType.GROUP, group, Operation.READ))
        member = ShareMember(connection, group, ids)
        member.fetch()  # the share-partition starts at the log end
        assert produce_code(connection, topic) == 0
        delivered = member.fetch(max_wait_ms=5000)
        assert [d.value for d in delivered] == [b"v"]
        revoke(clean, read_topic)  # WRITE still implies DESCRIBE
        with pytest.raises(AssertionError):  # the helper insists on error 0
            member.fetch()
        (answered,) = member.last_response.responses  # type: ignore[attr-defined]
        assert int(answered.partitions[0].error_code) == TOPIC_DENIED
        ack = member.acknowledge([(delivered[0].offset, delivered[0].offset, [1])])
        assert ack == TOPIC_DENIED


def test_consumer_group_heartbeat_and_describe_need_kafkas_rights(
    clean: BrokerProcess, topic: str
) -> None:
    """KIP-848: a heartbeat needs READ on the group and DESCRIBE
    on its subscribed topics; a description DESCRIBE on the group and on its topics."""
    group = f"{topic}-consumers"
    member = str(uuid.uuid4())
    add(clean, binding(ResourceType.CLUSTER, "kafka-cluster", Operation.CREATE))
    with KafkaConnection(clean.host, clean.port) as connection:
        assert create_code(connection, topic) == 0
    join = heartbeat_request(group, member, 0, (topic,))
    assert heartbeat(clean.host, clean.port, join).error_code == GROUP_DENIED
    (refused,) = describe(clean.host, clean.port, group)
    assert refused.error_code == GROUP_DENIED
    add(clean, binding(ResourceType.GROUP, group, Operation.READ))  # implies DESCRIBE
    assert heartbeat(clean.host, clean.port, join).error_code == TOPIC_DENIED
    describe_topic = allow_topic(clean, topic, Operation.DESCRIBE)
    joined = heartbeat(clean.host, clean.port, join)
    assert (joined.error_code, joined.member_epoch) == (0, 1), joined

    (described,) = describe(clean.host, clean.port, group)
    assert (described.error_code, [m.member_id for m in described.members]) == (0, [member])
    revoke(clean, describe_topic)
    (hidden,) = describe(clean.host, clean.port, group)
    assert (hidden.error_code, hidden.members) == (TOPIC_DENIED, ())


def test_a_consumer_groups_pattern_matches_only_topics_the_member_may_describe(
    clean: BrokerProcess, topic: str
) -> None:
    """KIP-848: a regular expression resolves to the topics its member's principal may
    DESCRIBE (Kafka's rule); a right granted later is picked up by the next heartbeat."""
    group, granted, hidden = f"{topic}-consumers", f"{topic}-granted", f"{topic}-hidden"
    member = str(uuid.uuid4())
    add(clean, binding(ResourceType.CLUSTER, "kafka-cluster", Operation.CREATE))
    add(clean, binding(ResourceType.GROUP, group, Operation.READ))
    allow_topic(clean, granted, Operation.DESCRIBE)
    with KafkaConnection(clean.host, clean.port) as connection:
        assert create_code(connection, granted) == 0
        assert create_code(connection, hidden) == 0
        granted_id = share_topic_id(connection, granted)
    pattern = f"{topic}-.*"
    join = dataclasses.replace(heartbeat_request(group, member, 0), subscribed_topic_regex=pattern)
    joined = heartbeat(clean.host, clean.port, join)
    assert joined.error_code == 0, joined
    assert [t.topic_id for t in joined.assignment.topic_partitions] == [granted_id], (
        "the topic it may not describe is not matched"
    )
    allow_topic(clean, hidden, Operation.DESCRIBE)
    again = heartbeat(clean.host, clean.port, heartbeat_request(group, member, joined.member_epoch))
    assert again.error_code == 0, again
    assert again.member_epoch == joined.member_epoch + 1, "its topics changed"
    assert again.assignment is not None and len(again.assignment.topic_partitions) == 2
