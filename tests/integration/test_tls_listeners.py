"""TLS listeners with real clients: a broker with a PLAINTEXT, an SSL and an mTLS
listener (``MTLS`` mapped to SSL with ``ssl.client.auth=required`` for that listener
only), served to confluent-kafka, kafka-python, aiokafka and kcat; Metadata answering
with the endpoint of the listener the request came on; client certificates refused or
accepted and made into principals; certificates reloaded without a restart.

Certificates are made by the tests (``tls_certs``), never committed."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from broker_process import HOST, BrokerProcess
from client_helpers import CLIENT_TIMEOUT_S, unique_topic_name
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from tls_certs import CertificateAuthority, Leaf

from sluice.broker.network.server import TLS_WRITE_CHUNK_BYTES, ConnectionInfo, Server
from sluice.broker.network.tls import TlsFiles, principal_from_peercert, server_context

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
KEY_PASSWORD = "broker-key-secret"
LARGE_RECORD_BYTES = 1_000_000
"""Below the default max.message.bytes, and several TLS write chunks."""


class Certificates:
    def __init__(self, directory: Path) -> None:
        self.ca = CertificateAuthority.create(directory, "test")
        self.broker = self.ca.issue(
            "broker", "/O=Sluice/CN=broker", server=True, key_password=KEY_PASSWORD
        )
        self.alice = self.ca.issue("alice", "/O=Sluice/OU=eng/CN=alice")
        self.other_ca = CertificateAuthority.create(directory, "other")
        self.mallory = self.other_ca.issue("mallory", "/O=Elsewhere/CN=mallory")


class TlsBroker(BrokerProcess):
    """A broker with PLAINTEXT (its --port), SSL and MTLS listeners."""

    def __init__(self, data_dir: Path, certificates: Certificates, keystore: Path) -> None:
        super().__init__(data_dir)
        self.overrides = {
            # Port 0: each listener binds a port of the kernel's choice (read back once
            # started, kept across restarts).
            "listeners": f"PLAINTEXT://{HOST}:0,SSL://{HOST}:0,MTLS://{HOST}:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.key.password": KEY_PASSWORD,
            "ssl.truststore.location": str(certificates.ca.certificate),
            "listener.name.mtls.ssl.client.auth": "required",
        }

    @property
    def ssl_port(self) -> int:
        return self.listener_ports["SSL"]

    @property
    def mtls_port(self) -> int:
        return self.listener_ports["MTLS"]

    @property
    def ssl_bootstrap(self) -> str:
        return f"{HOST}:{self.ssl_port}"

    @property
    def mtls_bootstrap(self) -> str:
        return f"{HOST}:{self.mtls_port}"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture(scope="module")
def tls_broker(
    tmp_path_factory: pytest.TempPathFactory, certificates: Certificates
) -> Iterator[TlsBroker]:
    directory = tmp_path_factory.mktemp("tls-broker")
    keystore = directory / "keystore.pem"
    shutil.copyfile(certificates.broker.keystore, keystore)
    broker = TlsBroker(directory / "data", certificates, keystore)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _librdkafka_ssl(certificates: Certificates, client: Leaf | None = None) -> dict[str, str]:
    settings = {"security.protocol": "SSL", "ssl.ca.location": str(certificates.ca.certificate)}
    if client is not None:
        settings["ssl.certificate.location"] = str(client.certificate)
        settings["ssl.key.location"] = str(client.key)
    return settings


def _advertised(bootstrap: str, **settings: str) -> set[tuple[int, str]]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000, **settings})
    brokers = admin.list_topics(timeout=CLIENT_TIMEOUT_S).brokers
    return {(b.id, f"{b.host}:{b.port}") for b in brokers.values()}


def _confluent_round_trip(bootstrap: str, settings: dict[str, str]) -> None:
    topic = unique_topic_name("tls-confluent")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **settings})
    values = [f"value {i}".encode() for i in range(10)]
    failures: list[str] = []
    for value in values:
        producer.produce(
            topic, value, partition=0, on_delivery=lambda e, m: e and failures.append(str(e))
        )
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert failures == []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            **settings,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen: list[bytes] = []
        while len(seen) < len(values):
            message = consumer.poll(CLIENT_TIMEOUT_S)
            assert message is not None, f"only {len(seen)} records came back"
            assert message.error() is None, message.error()
            seen.append(message.value())
        assert seen == values
    finally:
        consumer.close()


def test_metadata_advertises_the_listener_the_client_came_in_on(tls_broker, certificates):
    assert _advertised(tls_broker.bootstrap) == {(0, tls_broker.bootstrap)}
    assert _advertised(tls_broker.ssl_bootstrap, **_librdkafka_ssl(certificates)) == {
        (0, tls_broker.ssl_bootstrap)
    }
    assert _advertised(
        tls_broker.mtls_bootstrap, **_librdkafka_ssl(certificates, certificates.alice)
    ) == {(0, tls_broker.mtls_bootstrap)}


def test_describe_cluster_and_find_coordinator_answer_with_the_ssl_endpoint(
    tls_broker, certificates
):
    settings = {"bootstrap.servers": tls_broker.ssl_bootstrap, **_librdkafka_ssl(certificates)}
    admin = AdminClient(settings)
    described = admin.describe_cluster().result(timeout=CLIENT_TIMEOUT_S)
    assert [(n.id, n.port) for n in described.nodes] == [(0, tls_broker.ssl_port)]
    # A committed offset goes to the group coordinator, which librdkafka reaches at the
    # address FindCoordinator gave: over TLS only if that is the SSL endpoint.
    topic = unique_topic_name("tls-coordinator")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(CLIENT_TIMEOUT_S)
    group = f"g-{uuid.uuid4().hex}"
    consumer = Consumer({**settings, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=CLIENT_TIMEOUT_S)
        assert committed.offset == 7
    finally:
        consumer.close()


def test_describe_configs_shows_listener_settings_but_not_the_key_password(tls_broker):
    admin = AdminClient({"bootstrap.servers": tls_broker.bootstrap, "socket.timeout.ms": 10_000})
    resource = ConfigResource(ResourceType.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)
    assert configs["listeners"].value == tls_broker.overrides["listeners"]
    assert configs["listener.security.protocol.map"].value == "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL"
    assert configs["inter.broker.listener.name"].value == "PLAINTEXT"
    assert configs["ssl.keystore.location"].value == tls_broker.overrides["ssl.keystore.location"]
    assert "ssl.key.password" not in configs
    assert KEY_PASSWORD not in repr({name: entry.value for name, entry in configs.items()})


def test_confluent_kafka_produces_and_consumes_over_ssl(tls_broker, certificates):
    _confluent_round_trip(tls_broker.ssl_bootstrap, _librdkafka_ssl(certificates))


def test_kafka_python_produces_and_consumes_over_ssl(tls_broker, certificates):
    topic = unique_topic_name("tls-kafka-python")
    settings = {
        "bootstrap_servers": tls_broker.ssl_bootstrap,
        "security_protocol": "SSL",
        "ssl_cafile": str(certificates.ca.certificate),
    }
    producer = KafkaProducer(acks="all", **settings)
    try:
        for i in range(10):
            producer.send(topic, f"value {i}".encode(), partition=0).get(CLIENT_TIMEOUT_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        auto_offset_reset="earliest", consumer_timeout_ms=int(CLIENT_TIMEOUT_S * 1000), **settings
    )
    try:
        consumer.assign([KafkaTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        values = [record.value for _, record in zip(range(10), consumer, strict=False)]
    finally:
        consumer.close()
    assert values == [f"value {i}".encode() for i in range(10)]


def test_aiokafka_produces_and_consumes_over_mtls(tls_broker, certificates):
    async def run() -> list[bytes]:
        context = create_ssl_context(
            cafile=str(certificates.ca.certificate),
            certfile=str(certificates.alice.certificate),
            keyfile=str(certificates.alice.key),
        )
        topic = unique_topic_name("tls-aiokafka")
        settings = {
            "bootstrap_servers": tls_broker.mtls_bootstrap,
            "security_protocol": "SSL",
            "ssl_context": context,
        }
        producer = AIOKafkaProducer(acks="all", **settings)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, f"value {i}".encode(), partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **settings)
        await consumer.start()
        try:
            values = []
            async with asyncio.timeout(CLIENT_TIMEOUT_S):
                async for record in consumer:
                    values.append(record.value)
                    if len(values) == 10:
                        break
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"value {i}".encode() for i in range(10)]


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_kcat_produces_consumes_and_lists_over_ssl(tls_broker, certificates):
    assert KCAT is not None
    topic = unique_topic_name("tls-kcat")

    def kcat(*arguments: str, stdin: str | None = None) -> str:
        completed = subprocess.run(
            [
                KCAT,
                "-b",
                tls_broker.ssl_bootstrap,
                "-X",
                "security.protocol=SSL",
                "-X",
                f"ssl.ca.location={certificates.ca.certificate}",
                *arguments,
            ],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert completed.returncode == 0, completed.stderr
        return completed.stdout

    kcat("-P", "-t", topic, "-p", "0", stdin="one\ntwo\nthree\n")
    consumed = kcat("-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%o %s\n")
    assert consumed.splitlines() == ["0 one", "1 two", "2 three"]
    listing = json.loads(kcat("-L", "-J", "-t", topic))
    assert [b["name"] for b in listing["brokers"]] == [tls_broker.ssl_bootstrap]


def test_a_record_larger_than_a_tls_write_chunk_is_fetched_whole(tls_broker, certificates):
    """Over TLS, record bytes are copied through memory in TLS_WRITE_CHUNK_BYTES pieces
    (no sendfile): a batch several chunks long arrives intact."""
    assert TLS_WRITE_CHUNK_BYTES * 3 < LARGE_RECORD_BYTES
    settings = _librdkafka_ssl(certificates)
    topic = unique_topic_name("tls-large")
    value = os.urandom(LARGE_RECORD_BYTES)
    producer = Producer(
        {"bootstrap.servers": tls_broker.ssl_bootstrap, "message.max.bytes": 2_000_000, **settings}
    )
    producer.produce(topic, value, partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": tls_broker.ssl_bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            **settings,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        message = consumer.poll(CLIENT_TIMEOUT_S)
        assert message is not None and message.error() is None
        assert message.value() == value
    finally:
        consumer.close()


def test_mtls_listener_refuses_a_client_without_a_certificate(tls_broker, certificates):
    admin = AdminClient(
        {
            "bootstrap.servers": tls_broker.mtls_bootstrap,
            "socket.timeout.ms": 5_000,
            **_librdkafka_ssl(certificates),
        }
    )
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    assert "listener MTLS: TLS handshake with" in tls_broker.log_text()
    assert "peer did not return a certificate" in tls_broker.log_text()
    # The same client with a certificate of the trusted CA is served.
    _confluent_round_trip(
        tls_broker.mtls_bootstrap, _librdkafka_ssl(certificates, certificates.alice)
    )


API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 1, -1)
"""An ApiVersions v0 request, framed: any served connection answers it."""


def _answers_api_versions(port: int, context: ssl.SSLContext) -> bool:
    """Whether a TLS connection with ``context`` gets an answer to ApiVersions; False
    when the handshake or the first read fails (TLS 1.3 reports a refused client
    certificate after the client's handshake is done) or the broker closes."""
    try:
        with (
            socket.create_connection((HOST, port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=HOST) as tls,
        ):
            tls.sendall(API_VERSIONS_V0)
            return len(tls.recv(4)) == 4
    except (ssl.SSLError, ConnectionError):
        return False


def test_mtls_listener_refuses_a_certificate_of_another_ca(tls_broker, certificates):
    def context(client: Leaf) -> ssl.SSLContext:
        made = ssl.create_default_context(cafile=str(certificates.ca.certificate))
        made.load_cert_chain(client.certificate, client.key)
        return made

    assert not _answers_api_versions(tls_broker.mtls_port, context(certificates.mallory))
    assert _answers_api_versions(tls_broker.mtls_port, context(certificates.alice))


def test_a_client_trusting_another_ca_refuses_the_broker(tls_broker, certificates):
    context = ssl.create_default_context(cafile=str(certificates.other_ca.certificate))
    with (
        socket.create_connection((HOST, tls_broker.ssl_port), timeout=10) as raw,
        pytest.raises(ssl.SSLCertVerificationError),
    ):
        context.wrap_socket(raw, server_hostname=HOST)
    trusting = ssl.create_default_context(cafile=str(certificates.ca.certificate))
    assert _answers_api_versions(tls_broker.ssl_port, trusting)


def test_plaintext_listener_keeps_serving_plaintext(tls_broker, certificates):
    # A TLS client hello on the plaintext port is not a Kafka request: refused there,
    # and plaintext ApiVersions is answered.
    context = ssl.create_default_context(cafile=str(certificates.ca.certificate))
    assert not _answers_api_versions(tls_broker.port, context)
    with socket.create_connection((HOST, tls_broker.port), timeout=10) as raw:
        raw.sendall(API_VERSIONS_V0)
        assert len(raw.recv(4)) == 4


def _served_serial(port: int, ca: Path) -> int:
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection((HOST, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        return int(tls.getpeercert()["serialNumber"], 16)


def test_a_replaced_certificate_is_served_to_new_connections_without_a_restart(
    tmp_path, certificates
):
    keystore = tmp_path / "keystore.pem"
    shutil.copyfile(certificates.broker.keystore, keystore)
    broker = TlsBroker(tmp_path / "data", certificates, keystore)
    broker.start()
    try:
        assert _served_serial(broker.ssl_port, certificates.ca.certificate) == (
            certificates.broker.serial
        )
        renewed = certificates.ca.issue(
            "broker-renewed", "/O=Sluice/CN=broker", server=True, key_password=KEY_PASSWORD
        )
        staged = tmp_path / "keystore.pem.new"
        shutil.copyfile(renewed.keystore, staged)
        os.replace(staged, keystore)
        assert _served_serial(broker.ssl_port, certificates.ca.certificate) == renewed.serial
        _confluent_round_trip(broker.ssl_bootstrap, _librdkafka_ssl(certificates))
        assert "reloaded the TLS keystore" in broker.log_text()
    finally:
        broker.stop()


def test_the_principal_is_the_verified_certificate_subject(certificates):
    """A TLS server as the broker builds it, its connections' principals recorded."""

    async def run() -> list[str]:
        seen: asyncio.Queue[str] = asyncio.Queue()

        async def handle(frame: bytes, connection: ConnectionInfo) -> None:
            seen.put_nowait(connection.principal)

        files = TlsFiles(
            keystore=str(certificates.broker.keystore),
            key_password=KEY_PASSWORD,
            truststore=str(certificates.ca.certificate),
            client_auth="requested",
            enabled_protocols=None,
            cipher_suites=None,
            check_hostname=True,
        )
        server = Server(
            HOST,
            0,
            handle,
            listener_name="SSL",
            security_protocol="SSL",
            ssl_context=server_context(files, "test"),
            principal_of=principal_from_peercert,
        )
        await server.start()
        principals = []
        try:
            for client in (certificates.alice, None):
                context = ssl.create_default_context(cafile=str(certificates.ca.certificate))
                if client is not None:
                    context.load_cert_chain(client.certificate, client.key)
                _, writer = await asyncio.open_connection(
                    HOST, server.port, ssl=context, server_hostname=HOST
                )
                # One frame (its handler answers nothing), seen with its connection.
                writer.write(b"\x00\x00\x00\x01\x00")
                await writer.drain()
                principals.append(await asyncio.wait_for(seen.get(), 10))
                writer.close()
        finally:
            await server.stop()
        return principals

    assert asyncio.run(run()) == ["User:CN=alice,OU=eng,O=Sluice", "User:ANONYMOUS"]
