"""ACLs with authenticated principals: two SCRAM users on a SASL_PLAINTEXT listener, one
granted a topic and the other not, and an administrator (a super user) managing ACLs
through confluent-kafka's admin API (CreateAcls, DescribeAcls, DeleteAcls); a user
without DESCRIBE on the cluster describing SCRAM users is refused in Kafka's shape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from broker_process import BrokerProcess
from client_helpers import unique_topic_name
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka_wire import KafkaConnection
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from test_sasl import scram_login, seed_users

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
TIMEOUT_S = 30.0


def config(broker: BrokerProcess, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("acls-sasl") / "data"
    seed_users(data_dir, USERS)
    process = BrokerProcess(data_dir)
    process.overrides = {
        "listeners": f"SASL_PLAINTEXT://{process.host}:{process.port}",
        "authorizer.enabled": "true",
        "super.users": "User:admin",
    }
    process.start()
    try:
        yield process
    finally:
        process.stop()


def produce_error(broker: BrokerProcess, user: str, topic: str) -> int | None:
    reports: list[Any] = []
    producer = Producer({**config(broker, user), "enable.idempotence": False})
    producer.produce(topic, b"v", on_delivery=lambda error, _message: reports.append(error))
    assert producer.flush(TIMEOUT_S) == 0
    (error,) = reports
    return None if error is None else int(error.code())


def test_each_user_may_do_only_what_it_was_granted(broker: BrokerProcess) -> None:
    topic = unique_topic_name("granted")
    admin = AdminClient(config(broker, "admin"))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
    grant = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([grant]).values():
        future.result(TIMEOUT_S)
    described = admin.describe_acls(
        AclBindingFilter(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.MATCH,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(TIMEOUT_S)
    assert described == [grant]

    assert produce_error(broker, "alice", topic) is None
    assert produce_error(broker, "bob", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Metadata hides the topic from bob, not from alice.
    alice_sees = AdminClient(config(broker, "alice")).list_topics(timeout=TIMEOUT_S).topics
    bob_sees = AdminClient(config(broker, "bob")).list_topics(timeout=TIMEOUT_S).topics
    assert topic in alice_sees
    assert topic not in bob_sees
    # Bob may not change ACLs; the administrator removes alice's.
    bob_admin = AdminClient(config(broker, "bob"))
    with pytest.raises(KafkaException) as refused:
        for future in bob_admin.create_acls([grant]).values():
            future.result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    everything_for_alice = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        "User:alice",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    (deleted,) = admin.delete_acls([everything_for_alice]).values()
    assert deleted.result(TIMEOUT_S) == [grant]
    assert produce_error(broker, "alice", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED


CLUSTER_AUTHORIZATION_FAILED = 31


def test_describing_scram_users_unauthorized_answers_in_kafkas_shape(
    broker: BrokerProcess,
) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        assert scram_login(connection, "bob", USERS["bob"]).error_code == 0
        named = connection.request(
            DescribeUserScramCredentialsRequest(
                users=(UserName(name="alice"), UserName(name="nobody"))
            )
        )
        everyone = connection.request(DescribeUserScramCredentialsRequest(users=None))
    assert named.error_code == CLUSTER_AUTHORIZATION_FAILED
    assert named.error_message == "Cluster authorization failed."
    assert [(r.user, r.error_code, r.error_message, r.credential_infos) for r in named.results] == [
        ("alice", CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", ()),
        ("nobody", CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", ()),
    ]
    # Describing every user names nobody: the top-level error alone.
    assert everyone.error_code == CLUSTER_AUTHORIZATION_FAILED
    assert everyone.error_message == "Cluster authorization failed."
    assert everyone.results == ()
