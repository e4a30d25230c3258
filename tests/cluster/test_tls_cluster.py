"""Three brokers whose inter-broker listener is SSL with client certificates required:
the followers' replica fetchers and the brokers' own requests go over TLS; clients use
a separate SSL listener, and Metadata there names every broker's SSL endpoint. An RF=3
topic written over TLS keeps every acknowledged record when its leader is killed.

Certificates are made by the test (``tls_certs``), never committed."""

from __future__ import annotations

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

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 60.0


class TlsCluster(Cluster):
    """Each broker: PLAINTEXT on its --port (status and readiness), INTERNAL (SSL,
    client certificates required) between brokers, SSL for clients."""

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
                    "listeners": f"PLAINTEXT://{HOST}:0,INTERNAL://{HOST}:0,SSL://{HOST}:0",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL,SSL:SSL",
                    "inter.broker.listener.name": "INTERNAL",
                    "ssl.keystore.location": str(keystore.keystore),
                    "ssl.truststore.location": str(ca.certificate),
                    "listener.name.internal.ssl.client.auth": "required",
                }
            )

    @property
    def ssl_ports(self) -> dict[int, int]:
        """Each broker's SSL port, by node id (bound at its first start)."""
        return {b.node_id: b.listener_ports["SSL"] for b in self.brokers}

    @property
    def ssl_bootstrap(self) -> str:
        return ",".join(f"{HOST}:{b.listener_ports['SSL']}" for b in self.running())

    def client_settings(self) -> dict[str, str]:
        return {
            "bootstrap.servers": self.ssl_bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.ca.certificate),
        }


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TlsCluster]:
    base = tmp_path_factory.mktemp("tls-cluster")
    ca = CertificateAuthority.create(base / "certificates")
    started = TlsCluster(base, f"{zookeeper.connect}/{uuid.uuid4().hex}", ca)
    started.start()
    try:
        yield started
    finally:
        started.stop()


def _partition(status: dict, name: str) -> dict:
    return next(p for p in status["topics"][name] if p["partition"] == 0)


def _consume(consumer: Consumer, count: int) -> list[str]:
    values: list[str] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(values) < count and time.monotonic() < deadline:
        for message in consumer.consume(count - len(values), 0.5):
            assert message.error() is None, message.error()
            values.append(message.value().decode())
    return values


def test_replication_over_an_ssl_inter_broker_listener_survives_a_leader_kill(
    cluster: TlsCluster,
) -> None:
    settings = cluster.client_settings()
    admin = AdminClient({**settings, "socket.timeout.ms": 10_000})
    brokers = admin.list_topics(timeout=CLIENT_TIMEOUT_S).brokers
    assert {(b.id, b.port) for b in brokers.values()} == set(cluster.ssl_ports.items())

    name = f"tls-replicated-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(name, 1, 3, config={"min.insync.replicas": "2"})])[name].result(
        CLIENT_TIMEOUT_S
    )
    # Followers reach the ISR only by fetching from the leader over the SSL listener.
    status = cluster.wait_for(
        lambda s: name in s["topics"] and len(_partition(s, name)["isr"]) == 3
    )
    producer = Producer({**settings, "acks": "all", "enable.idempotence": True})

    def produce(prefix: str) -> None:
        failures: list[str] = []
        for i in range(300):
            producer.produce(
                name,
                f"{prefix}-{i}".encode(),
                on_delivery=lambda e, _: e and failures.append(str(e)),
            )
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        assert failures == []

    produce("a")
    consumer = Consumer(
        {**settings, "group.id": f"g-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(name, 0, OFFSET_BEGINNING)])
    values = _consume(consumer, 300)
    leader = _partition(status, name)["leader"]
    cluster.broker(leader).kill()
    cluster.wait_for(lambda s: _partition(s, name)["leader"] not in (-1, leader))
    # acks=all with min.insync.replicas=2: each "b" record is acknowledged only once
    # the remaining follower fetched it from the new leader, over TLS.
    produce("b")
    values += _consume(consumer, 300)
    consumer.close()
    assert values == [f"a-{i}" for i in range(300)] + [f"b-{i}" for i in range(300)]
    after = cluster.wait_for(lambda s: len(_partition(s, name)["isr"]) == 2)
    assert leader not in _partition(after, name)["isr"]
