"""Group configs in a cluster: two brokers on ZooKeeper. A share group's configs altered
through one broker reach the other broker's metadata image, and from there the next
ShareFetch on the share-partitions it leads (which reads them from the image, without a
ZooKeeper round trip: fetches go on while ZooKeeper does not answer); the broker that
altered them shows them as soon as it answers."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator

import pytest
from client_helpers import produce_and_flush, producer_config, wait_until
from cluster_processes import Cluster, running_cluster
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from kafka_wire import KafkaConnection
from kio.schema.describe_configs.v1 import request as describe_v1
from share_wire import GROUP_RESOURCE_TYPE, ShareMember, set_group_configs, topic_id
from test_share_failover import fetch_until

from sluice.cli.local_zookeeper import LocalZooKeeper

pytestmark = pytest.mark.integration

TIMEOUT_S = 30.0
"""Bound for a broker to see a change made through another (a ZooKeeper watch)."""
RECORDS = 3
LOCK_NAME = "share.record.lock.duration.ms"


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), zookeeper.connect, 2) as started:
        yield started


def group_configs_seen(connection: KafkaConnection, group: str) -> dict[str, str | None]:
    """The group's configs as the broker at the other end of ``connection`` describes
    them (from its metadata image)."""
    request = describe_v1.DescribeConfigsRequest(
        resources=(
            describe_v1.DescribeConfigsResource(
                resource_type=GROUP_RESOURCE_TYPE, resource_name=group, configuration_keys=None
            ),
        ),
        include_synonyms=False,
    )
    (result,) = connection.request(request).results
    assert int(result.error_code) == 0, result
    return {entry.name: entry.value for entry in result.configs}


def lock_ms(member: ShareMember) -> int:
    return int(member.last_response.acquisition_lock_timeout.total_seconds() * 1000)  # type: ignore[attr-defined]


def test_a_group_config_altered_through_one_broker_applies_to_the_next_fetch_on_another(
    cluster: Cluster,
) -> None:
    topic, group = f"queue-{uuid.uuid4().hex[:8]}", f"workers-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin(cluster.running()[0])
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
    status = cluster.wait_for(lambda s: topic in s["topics"])
    leader = cluster.broker(status["topics"][topic][0]["leader"])
    (other,) = [b for b in cluster.running() if b is not leader]
    produce_and_flush(
        Producer(producer_config(cluster.bootstrap)),
        topic,
        ({"value": b"%d" % i} for i in range(RECORDS)),
    )

    with (
        KafkaConnection(leader.host, leader.port) as to_leader,
        KafkaConnection(other.host, other.port) as to_other,
    ):
        default_lock = group_configs_seen(to_leader, group)[LOCK_NAME]
        assert default_lock not in (None, "20000", "25000")
        # Altered through the broker that does not lead the partition, before the group
        # ever fetched: it shows the change as soon as it answers.
        configs = {"share.auto.offset.reset": "earliest", LOCK_NAME: "20000"}
        set_group_configs(to_other, group, configs)
        assert group_configs_seen(to_other, group)[LOCK_NAME] == "20000"
        wait_until(
            lambda: group_configs_seen(to_leader, group)[LOCK_NAME] == "20000",
            "the leader's image has the group's configs",
        )
        # The leader's first ShareFetch runs with them: from the earliest offset, under
        # the group's lock duration.
        member = ShareMember(to_leader, group, topic_id(to_leader, topic))
        held = fetch_until(member, RECORDS)
        assert [d.offset for d in held] == list(range(RECORDS))
        assert lock_ms(member) == 20_000

        # A change to the share-partition now loaded there applies to its next fetch.
        set_group_configs(to_other, group, {LOCK_NAME: "25000"})
        wait_until(
            lambda: group_configs_seen(to_leader, group)[LOCK_NAME] == "25000",
            "the leader's image has the new lock duration",
        )
        member.fetch()
        assert lock_ms(member) == 25_000

        # Deleted through the other broker: the leader goes back to the default.
        set_group_configs(to_other, group, {}, deleted=[LOCK_NAME])
        wait_until(
            lambda: group_configs_seen(to_leader, group)[LOCK_NAME] == default_lock,
            "the leader's image lost the group's lock duration",
        )
        member.fetch()
        assert str(lock_ms(member)) == default_lock


def test_share_fetches_run_with_the_group_settings_while_zookeeper_does_not_answer(
    cluster: Cluster, zookeeper: LocalZooKeeper
) -> None:
    """The group's settings come from the leader's image: with ZooKeeper paused
    (SIGSTOP), ShareFetch is answered at once, under the group's lock duration."""
    topic, group = f"queue-{uuid.uuid4().hex[:8]}", f"workers-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin(cluster.running()[0])
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
    status = cluster.wait_for(lambda s: topic in s["topics"])
    leader = cluster.broker(status["topics"][topic][0]["leader"])
    produce_and_flush(
        Producer(producer_config(cluster.bootstrap)),
        topic,
        ({"value": b"%d" % i} for i in range(RECORDS)),
    )
    with KafkaConnection(leader.host, leader.port) as to_leader:
        set_group_configs(
            to_leader, group, {"share.auto.offset.reset": "earliest", LOCK_NAME: "20000"}
        )
        member = ShareMember(to_leader, group, topic_id(to_leader, topic))
        assert len(fetch_until(member, RECORDS)) == RECORDS
        os.kill(zookeeper.pid, signal.SIGSTOP)
        try:
            for _ in range(3):
                assert member.fetch() == []  # all held by this member already
                assert lock_ms(member) == 20_000
        finally:
            os.kill(zookeeper.pid, signal.SIGCONT)
