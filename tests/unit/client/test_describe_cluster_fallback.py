"""``Admin.describe_cluster`` picks its request by what the broker serves: DescribeCluster
where advertised (tested against a real broker in the integration suite), Metadata for
no topics on brokers without it (Kafka before 2.8), scripted here."""

from __future__ import annotations

import asyncio
from typing import Any

from sluice.client.admin import Admin
from sluice.client.cluster import BrokerMetadata, ClusterMetadata
from sluice.protocol.versions import ApiKey


class BrokerWithoutDescribeCluster:
    def supports(self, api_key: int) -> bool:
        return api_key != ApiKey.DESCRIBE_CLUSTER

    async def request(self, request: Any, **_: Any) -> Any:
        raise AssertionError(f"nothing but Metadata may be sent, not {request}")


class ScriptedCluster:
    def __init__(self) -> None:
        self.metadata_requests: list[Any] = []

    async def any_connection(self) -> BrokerWithoutDescribeCluster:
        return BrokerWithoutDescribeCluster()

    async def metadata(self, topics: Any = None, **_: Any) -> ClusterMetadata:
        self.metadata_requests.append(topics)
        return ClusterMetadata(
            cluster_id="old-cluster",
            controller_id=2,
            brokers={2: BrokerMetadata(2, "b", 9093), 1: BrokerMetadata(1, "a", 9092)},
            topics={},
        )


def test_describe_cluster_falls_back_to_metadata() -> None:
    cluster = ScriptedCluster()
    admin = Admin(cluster)  # type: ignore[arg-type]
    described = asyncio.run(admin.describe_cluster())
    assert cluster.metadata_requests == [[]], "one Metadata request, for no topics"
    assert described.cluster_id == "old-cluster"
    assert [b.node_id for b in described.brokers] == [1, 2]
    assert described.controller == BrokerMetadata(2, "b", 9093)
