"""Client quotas in a cluster: two brokers on ZooKeeper; a quota set through one broker
is described (and so enforced) by the other once it reads the store again."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from cluster_processes import Cluster
from kafka_wire import KafkaConnection
from kio.schema.alter_client_quotas.v1.request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from kio.schema.describe_client_quotas.v1.request import DescribeClientQuotasRequest
from kio.static.primitive import f64

from sluice.cli.local_zookeeper import LocalZooKeeper

pytestmark = pytest.mark.integration

TIMEOUT_S = 30.0
"""Other brokers read the stored quotas every 5 seconds."""


def test_a_quota_set_through_one_broker_reaches_the_other(
    tmp_path: Path, zookeeper: LocalZooKeeper
) -> None:
    cluster = Cluster(tmp_path, f"{zookeeper.connect}/{uuid.uuid4().hex}", 2, {})
    cluster.start()
    try:
        first, second = cluster.brokers
        alter = AlterClientQuotasRequest(
            entries=(
                EntryData(
                    entity=(EntityData(entity_type="client-id", entity_name="shared-app"),),
                    ops=(OpData(key="producer_byte_rate", value=f64(4096.0), remove=False),),
                ),
            ),
            validate_only=False,
        )
        with KafkaConnection(first.host, first.port) as connection:
            (entry,) = connection.request(alter).entries
            assert int(entry.error_code) == 0
        describe = DescribeClientQuotasRequest(components=(), strict=False)
        deadline = time.monotonic() + TIMEOUT_S
        with KafkaConnection(second.host, second.port) as connection:
            while True:
                entries = connection.request(describe).entries
                if entries:
                    break
                assert time.monotonic() < deadline, "the other broker never read the quota"
                time.sleep(0.2)  # polling interval while the broker re-reads, not a sync
        (found,) = entries
        assert [(e.entity_type, e.entity_name) for e in found.entity] == [
            ("client-id", "shared-app")
        ]
        assert [(v.key, float(v.value)) for v in found.values] == [("producer_byte_rate", 4096.0)]
    finally:
        cluster.stop()
