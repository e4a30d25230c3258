"""Three brokers whose inter-broker listener is SASL_SSL with SCRAM-SHA-512: the
followers' replica fetchers and the brokers' own requests authenticate as the user
``broker``, whose credential lives in ZooKeeper like every user's; clients use a
separate SASL_SSL listener as ``alice``. Sessions last 3 s (connections.max.reauth.ms),
so the brokers' own connections re-authenticate many times while an RF=3 topic is
written with acks=all; no connection is ever closed for an expired session.

Certificates are made by the test (``tls_certs``), never committed."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from broker_process import HOST
from cluster_processes import Cluster
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tls_certs import CertificateAuthority

from sluice.cli.local_zookeeper import LocalZooKeeper
from sluice.cluster.zookeeper import ZooKeeperMetadataStore
from sluice.protocol.sasl import ScramMechanism, make_credential

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 60.0
SESSION_LIFETIME_MS = 3000
BROKER_PASSWORD = "broker-secret"
ALICE_PASSWORD = "alice-secret"


def seed_users(zookeeper_connect: str, users: dict[str, str]) -> None:
    async def write() -> None:
        store = ZooKeeperMetadataStore(zookeeper_connect)
        await store.start()
        try:
            for user, password in users.items():
                mechanism = ScramMechanism.SCRAM_SHA_512
                await store.set_scram_credential(
                    user, mechanism, make_credential(mechanism, password)
                )
        finally:
            await store.close()

    asyncio.run(write())


class SaslCluster(Cluster):
    """Each broker: PLAINTEXT on its --port (status and readiness), INTERNAL
    (SASL_SSL) between brokers, CLIENTS (SASL_SSL) for clients."""

    def __init__(self, base_dir, zookeeper_connect: str, ca: CertificateAuthority) -> None:
        super().__init__(base_dir, zookeeper_connect, 3)
        self.ca = ca
        for broker in self.brokers:
            keystore = ca.issue(
                f"broker-{broker.node_id}", f"/CN=broker-{broker.node_id}", server=True
            )
            broker.overrides.update(
                {
                    # Port 0: each listener binds a port of the kernel's choice (read
                    # back once started, kept across restarts).
                    "listeners": f"PLAINTEXT://{HOST}:0,INTERNAL://{HOST}:0,CLIENTS://{HOST}:0",
                    "listener.security.protocol.map": (
                        "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CLIENTS:SASL_SSL"
                    ),
                    "inter.broker.listener.name": "INTERNAL",
                    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                    "sluice.inter.broker.sasl.username": "broker",
                    "sluice.inter.broker.sasl.password": BROKER_PASSWORD,
                    "connections.max.reauth.ms": str(SESSION_LIFETIME_MS),
                    "ssl.keystore.location": str(keystore.keystore),
                    "ssl.truststore.location": str(ca.certificate),
                }
            )

    @property
    def client_ports(self) -> dict[int, int]:
        """Each broker's CLIENTS port, by node id (bound at its first start)."""
        return {b.node_id: b.listener_ports["CLIENTS"] for b in self.brokers}

    def client_settings(self) -> dict[str, str]:
        return {
            "bootstrap.servers": ",".join(
                f"{HOST}:{b.listener_ports['CLIENTS']}" for b in self.running()
            ),
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.ca.certificate),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": ALICE_PASSWORD,
        }


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SaslCluster]:
    base = tmp_path_factory.mktemp("sasl-cluster")
    ca = CertificateAuthority.create(base / "certificates")
    connect = f"{zookeeper.connect}/{uuid.uuid4().hex}"
    seed_users(connect, {"broker": BROKER_PASSWORD, "alice": ALICE_PASSWORD})
    started = SaslCluster(base, connect, ca)
    started.start()
    try:
        yield started
    finally:
        started.stop()


def _partition(status: dict, name: str) -> dict:
    return next(p for p in status["topics"][name] if p["partition"] == 0)


def test_replication_over_a_sasl_ssl_inter_broker_listener(cluster: SaslCluster) -> None:
    settings = cluster.client_settings()
    admin = AdminClient({**settings, "socket.timeout.ms": 10_000})
    brokers = admin.list_topics(timeout=CLIENT_TIMEOUT_S).brokers
    assert {(b.id, b.port) for b in brokers.values()} == set(cluster.client_ports.items())

    name = f"sasl-replicated-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(name, 1, 3, config={"min.insync.replicas": "3"})])[name].result(
        CLIENT_TIMEOUT_S
    )
    # Followers reach the ISR only by fetching from the leader as an authenticated peer.
    cluster.wait_for(lambda s: name in s["topics"] and len(_partition(s, name)["isr"]) == 3)
    producer = Producer({**settings, "acks": "all", "enable.idempotence": True})
    failures: list[str] = []
    sent = 0
    # Several session lifetimes: each acks=all record needs both followers' fetches.
    deadline = time.monotonic() + 3 * SESSION_LIFETIME_MS / 1000
    while time.monotonic() < deadline:
        producer.produce(
            name, f"r-{sent}".encode(), on_delivery=lambda e, _: e and failures.append(str(e))
        )
        sent += 1
        assert producer.flush(CLIENT_TIMEOUT_S) == 0, cluster.log_tails()
    assert failures == [], cluster.log_tails()
    consumer = Consumer(
        {**settings, "group.id": f"g-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(name, 0, OFFSET_BEGINNING)])
    values: list[str] = []
    read_deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(values) < sent and time.monotonic() < read_deadline:
        for message in consumer.consume(sent - len(values), 0.5):
            assert message.error() is None, message.error()
            values.append(message.value().decode())
    consumer.close()
    assert values == [f"r-{i}" for i in range(sent)]
    assert len(_partition(cluster.status(), name)["isr"]) == 3
    for broker in cluster.brokers:
        log = broker.log_text()
        assert "expired (connections.max.reauth.ms)" not in log, broker.node_id
        assert "SASL authentication as broker failed" not in log, broker.node_id


def test_a_broker_with_a_wrong_inter_broker_password_never_joins_the_isr(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> None:
    base = tmp_path_factory.mktemp("sasl-cluster-wrong")
    ca = CertificateAuthority.create(base / "certificates")
    connect = f"{zookeeper.connect}/{uuid.uuid4().hex}"
    seed_users(connect, {"broker": BROKER_PASSWORD, "alice": ALICE_PASSWORD})
    cluster = SaslCluster(base, connect, ca)
    cluster.brokers[2].overrides["sluice.inter.broker.sasl.password"] = "wrong"
    for broker in cluster.brokers:
        broker.overrides["replica.lag.time.max.ms"] = "2000"
    cluster.start()
    try:
        admin = AdminClient({**cluster.client_settings(), "socket.timeout.ms": 10_000})
        name = f"sasl-wrong-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(name, num_partitions=1, replica_assignment=[[0, 1, 2]])])[
            name
        ].result(CLIENT_TIMEOUT_S)
        cluster.wait_for(
            lambda s: name in s["topics"] and sorted(_partition(s, name)["isr"]) == [0, 1]
        )
        log = cluster.broker(2).log_text()
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while "SASL authentication as broker failed" not in log:
            assert time.monotonic() < deadline, log[-3000:]
            time.sleep(0.2)  # polling the log for the fetcher's failure
            log = cluster.broker(2).log_text()
        assert 2 not in _partition(cluster.status(), name)["isr"]
    finally:
        cluster.stop()
