"""Client quotas in a cluster: two brokers on ZooKeeper; a quota set through one broker
is described (and so enforced) by the other once it reads the store again."""

from __future__ import annotations

import asyncio
import logging
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
from zookeeper_sessions import SESSION_TIMEOUT_S, expire_session

from sluice.broker.quotas import ClientQuotas
from sluice.cli.local_zookeeper import LocalZooKeeper
from sluice.cluster.zookeeper import ZooKeeperMetadataStore
from sluice.common.quotas import QuotaEntity, WindowConfig

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


def test_an_expired_zookeeper_session_costs_one_log_line_and_a_retry(
    zookeeper_connect: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker's quota refresh meets a ZooKeeper session expired on the server (as a
    long pause or a partition would): it logs one line without kazoo's traceback, keeps
    the quotas it had, and its next refresh reads the store again."""
    entity = QuotaEntity(None, "shared-app")

    async def scenario() -> None:
        store = ZooKeeperMetadataStore(zookeeper_connect, session_timeout_s=SESSION_TIMEOUT_S)
        await store.start()
        try:
            quotas = ClientQuotas(store, WindowConfig())
            await quotas.store(entity, {"producer_byte_rate": 4096.0})
            failures = 0
            deadline = time.monotonic() + TIMEOUT_S
            # Expire the session until a refresh meets it (one expiry normally does;
            # kazoo may already have a new session when the refresh runs).
            while failures == 0:
                assert time.monotonic() < deadline, "no refresh ever met the expired session"
                await asyncio.to_thread(expire_session, zookeeper_connect, store)
                while not await quotas.refresh():
                    failures += 1
                    assert time.monotonic() < deadline, "the store never came back"
                    await asyncio.sleep(0.1)  # the retry's pace, not a synchronization
            assert quotas.quotas == {entity: {"producer_byte_rate": 4096.0}}
        finally:
            await store.close()

    with caplog.at_level(logging.DEBUG, logger="sluice.broker.quotas"):
        asyncio.run(scenario())
    records = [r for r in caplog.records if r.name == "sluice.broker.quotas"]
    warnings = [r for r in records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    (warning,) = warnings
    assert warning.exc_info is None
    assert "could not read the client quotas" in warning.getMessage()
    assert "Error" in warning.getMessage()  # the kazoo exception, named
    assert "\n" not in warning.getMessage()
    assert any("read the client quotas again" in r.getMessage() for r in records)
