"""ACLs in a cluster: two brokers on ZooKeeper with the authorizer on and no super users.
The brokers (plaintext: User:ANONYMOUS, like the test's clients) hold ALL on the cluster,
written into the metadata store before they start, as an operator seeds the first ACLs;
an ACL created through one broker is enforced by the other, and replication (followers'
fetches need CLUSTER_ACTION) keeps working."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from client_helpers import unique_topic_name
from cluster_processes import Cluster
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from sluice.cli.local_zookeeper import LocalZooKeeper
from sluice.cluster.zookeeper import ZooKeeperMetadataStore
from sluice.common import authorizer

pytestmark = pytest.mark.integration

TIMEOUT_S = 30.0


def seed_cluster_acls(connect: str) -> None:
    async def write() -> None:
        store = ZooKeeperMetadataStore(connect)
        await store.start()
        await store.create_acls(
            [
                authorizer.AclBinding(
                    authorizer.ResourcePattern(
                        authorizer.ResourceType.CLUSTER,
                        authorizer.CLUSTER_NAME,
                        authorizer.PatternType.LITERAL,
                    ),
                    authorizer.AccessControlEntry(
                        authorizer.ANONYMOUS,
                        "*",
                        authorizer.Operation.ALL,
                        authorizer.Permission.ALLOW,
                    ),
                )
            ]
        )
        await store.close()

    asyncio.run(write())


def produce_error(bootstrap: str, topic: str) -> int | None:
    reports: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(topic, b"v", on_delivery=lambda error, _message: reports.append(error))
    assert producer.flush(TIMEOUT_S) == 0
    (error,) = reports
    return None if error is None else int(error.code())


def test_an_acl_made_through_one_broker_holds_on_the_other(
    tmp_path: Path, zookeeper: LocalZooKeeper
) -> None:
    cluster = Cluster(
        tmp_path,
        f"{zookeeper.connect}/{uuid.uuid4().hex}",
        2,
        {"authorizer.enabled": "true", "offsets.topic.replication.factor": "2"},
    )
    seed_cluster_acls(cluster.zookeeper_connect)
    cluster.start()
    try:
        first, second = cluster.brokers
        topic = unique_topic_name("acl-cluster")
        admin = cluster.admin(first)
        admin.create_topics([NewTopic(topic, 2, 2)])[topic].result(TIMEOUT_S)
        assert produce_error(second.bootstrap, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        grant = AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:ANONYMOUS",
            "*",
            AclOperation.WRITE,
            AclPermissionType.ALLOW,
        )
        for future in admin.create_acls([grant]).values():
            future.result(TIMEOUT_S)
        # The other broker's image has the grant once its ZooKeeper watch fires: it
        # lists it (the ACLs a broker describes are those it enforces).
        as_filter = AclBindingFilter(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        second_admin = cluster.admin(second)
        deadline = time.monotonic() + TIMEOUT_S
        while second_admin.describe_acls(as_filter).result(TIMEOUT_S) != [grant]:
            assert time.monotonic() < deadline, "the other broker never saw the ACL"
            time.sleep(0.05)  # polling interval while the watch fires, not a synchronization
        assert produce_error(second.bootstrap, topic) is None
    finally:
        cluster.stop()
