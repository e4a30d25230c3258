"""SASL on SASL_PLAINTEXT and SASL_SSL listeners: confluent-kafka, kafka-python, aiokafka
and kcat authenticate with SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN; wrong passwords,
requests before authentication, oversized frames before authentication and expired
sessions close the connection (a failed authentication is answered after
connection.failed.authentication.delay.ms, while other clients are served);
re-authentication (KIP-368) keeps a connection going; ``sluice users`` and
confluent-kafka's admin API manage the users.

Certificates are made by the tests (``tls_certs``), never committed."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from broker_process import BrokerProcess
from client_helpers import unique_topic_name
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from confluent_kafka.admin import ScramMechanism as ScramMechanism_
from kafka import KafkaConsumer, KafkaProducer
from kafka_wire import ConnectionClosedError, KafkaConnection, metadata_request
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeRequestV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from tls_certs import CertificateAuthority

from sluice.cluster.embedded import EmbeddedMetadataStore
from sluice.protocol.sasl import ScramClient, ScramMechanism, make_credential, plain_token

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
KCAT = shutil.which("kcat") or shutil.which("kafkacat")
CLIENT_TIMEOUT_S = 30


def seed_users(data_dir: Path, users: dict[str, str]) -> None:
    """Store SCRAM credentials before the broker first starts (as an operator does with
    ``sluice users create --data-dir``)."""

    async def write() -> None:
        store = EmbeddedMetadataStore(data_dir)
        await store.start()
        for user, password in users.items():
            for mechanism in ScramMechanism:
                await store.set_scram_credential(
                    user, mechanism, make_credential(mechanism, password)
                )
        await store.close()

    data_dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(write())


def sasl_broker_process(data_dir: Path, overrides: dict[str, str] | None = None) -> BrokerProcess:
    seed_users(data_dir, USERS)
    process = BrokerProcess(data_dir)
    process.overrides = {
        "listeners": f"SASL_PLAINTEXT://{process.host}:{process.port}",
        "sluice.sasl.plain.insecure.allow": "true",
        "group.initial.rebalance.delay.ms": "0",
        **(overrides or {}),
    }
    return process


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = sasl_broker_process(tmp_path_factory.mktemp("sasl") / "data")
    process.start()
    try:
        yield process
    finally:
        process.stop()


def librdkafka_config(
    broker: BrokerProcess, mechanism: str, user: str = "alice", password: str | None = None
) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": USERS.get(user, "") if password is None else password,
        "socket.timeout.ms": 10_000,
    }


def produce_and_consume_with_librdkafka(config: dict[str, Any], topic: str) -> None:
    producer = Producer({**config, "acks": "all"})
    failures: list[KafkaError] = []
    producer.produce(
        topic, b"hello", partition=0, on_delivery=lambda e, _m: failures.append(e) if e else None
    )
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert not failures
    consumer = Consumer(
        {**config, "group.id": unique_topic_name("g"), "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            assert message.value() == b"hello"
            return
        pytest.fail("the consumer got nothing")
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_confluent_kafka_produces_and_consumes(broker: BrokerProcess, mechanism: str) -> None:
    produce_and_consume_with_librdkafka(
        librdkafka_config(broker, mechanism), unique_topic_name(mechanism)
    )


def librdkafka_authentication_errors(
    broker: BrokerProcess, mechanism: str, password: str
) -> list[KafkaError]:
    """The errors a librdkafka producer reports once it fails to log in (at least one)."""
    errors: list[KafkaError] = []
    config = {
        **librdkafka_config(broker, mechanism, password=password),
        "error_cb": errors.append,
    }
    producer = Producer(config)
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=10)
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.5)  # error_cb is served by poll
    return errors


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_confluent_kafka_wrong_password_is_refused(broker: BrokerProcess, mechanism: str) -> None:
    errors = librdkafka_authentication_errors(broker, mechanism, "wrong")
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any("Authentication failed" in e.str() for e in errors), errors


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_kafka_python_produces_and_consumes(broker: BrokerProcess, mechanism: str) -> None:
    config = {
        "bootstrap_servers": broker.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "bob",
        "sasl_plain_password": USERS["bob"],
    }
    topic = unique_topic_name("kafka-python")
    producer = KafkaProducer(acks="all", **config)
    producer.send(topic, b"from kafka-python", partition=0).get(timeout=CLIENT_TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=20_000, **config
    )
    try:
        assert [m.value for m in consumer][:1] == [b"from kafka-python"]
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_aiokafka_produces_and_consumes(broker: BrokerProcess, mechanism: str) -> None:
    config = {
        "bootstrap_servers": broker.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "alice",
        "sasl_plain_password": USERS["alice"],
    }
    topic = unique_topic_name("aiokafka")

    async def scenario() -> bytes | None:
        producer = AIOKafkaProducer(acks="all", **config)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"from aiokafka", partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **config)
        await consumer.start()
        try:
            message = await asyncio.wait_for(consumer.getone(), CLIENT_TIMEOUT_S)
            return message.value
        finally:
            await consumer.stop()

    assert asyncio.run(scenario()) == b"from aiokafka"


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_kcat_produces_and_consumes(broker: BrokerProcess, mechanism: str) -> None:
    assert KCAT is not None
    topic = unique_topic_name("kcat")
    sasl = [
        "-X", "security.protocol=SASL_PLAINTEXT",
        "-X", f"sasl.mechanism={mechanism}",
        "-X", "sasl.username=alice",
        "-X", f"sasl.password={USERS['alice']}",
    ]  # fmt: skip

    def kcat(*arguments: str, stdin: str | None = None) -> str:
        completed = subprocess.run(
            [KCAT, "-b", broker.bootstrap, *sasl, *arguments],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert completed.returncode == 0, completed.stderr
        return completed.stdout

    kcat("-P", "-t", topic, "-p", "0", stdin="one\ntwo\n")
    assert kcat("-C", "-t", topic, "-p", "0", "-o", "beginning", "-e").splitlines() == [
        "one",
        "two",
    ]


# -- the raw protocol -----------------------------------------------------------------


def scram_login(connection: KafkaConnection, user: str, password: str) -> Any:
    """SaslHandshake v1 and a SCRAM-SHA-512 exchange; the last SaslAuthenticate answer."""
    handshake = connection.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    assert handshake.error_code == 0
    assert "SCRAM-SHA-512" in handshake.mechanisms
    client = ScramClient(SHA512, user, password)
    first = connection.request(SaslAuthenticateRequest(auth_bytes=client.first()))
    assert first.error_code == 0, first.error_message
    final = connection.request(SaslAuthenticateRequest(auth_bytes=client.final(first.auth_bytes)))
    if final.error_code == 0:
        client.verify(final.auth_bytes)
    return final


def test_raw_scram_login_then_metadata(broker: BrokerProcess) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        answer = scram_login(connection, "alice", USERS["alice"])
        assert answer.error_code == 0
        assert answer.session_lifetime.total_seconds() == 0  # connections.max.reauth.ms=0
        assert connection.request(metadata_request([])).brokers


def test_wrong_password_answers_sasl_authentication_failed_and_closes(
    broker: BrokerProcess,
) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        answer = scram_login(connection, "alice", "not-her-password")
        assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert "Authentication failed" in answer.error_message
        assert connection.wait_closed_by_peer()


def test_unknown_user_fails_like_a_wrong_password(broker: BrokerProcess) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        answer = scram_login(connection, "mallory", "guess")
        assert answer.error_code == 58
        assert "mallory" not in answer.error_message
        assert connection.wait_closed_by_peer()


def test_a_request_before_authentication_closes_the_connection(broker: BrokerProcess) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        connection.send(metadata_request([]))
        assert connection.wait_closed_by_peer()
    assert "Metadata request before SASL authentication" in broker.log_text()


def test_an_oversized_frame_before_authentication_closes_the_connection(
    broker: BrokerProcess,
) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        # A frame prefix above sasl.server.max.receive.size (524288) is refused before
        # its body arrives.
        connection.send_bytes((524_289).to_bytes(4, "big") + b"\0" * 1024)
        assert connection.wait_closed_by_peer()
    with KafkaConnection(broker.host, broker.port) as connection:
        assert scram_login(connection, "alice", USERS["alice"]).error_code == 0
        # Once authenticated, large requests are fine again: the limit is pre-auth only.
        big_topic = "t" * 200
        assert connection.request(metadata_request([big_topic] * 3000)).topics


def test_an_unknown_mechanism_is_refused_with_the_list(broker: BrokerProcess) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        answer = connection.request(SaslHandshakeRequest(mechanism="GSSAPI"))
        assert answer.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
        assert set(answer.mechanisms) == {"SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"}
        assert connection.wait_closed_by_peer()


def test_plain_is_refused_on_sasl_plaintext_unless_allowed(
    tmp_path: Path,
) -> None:
    process = sasl_broker_process(tmp_path / "data", {"sluice.sasl.plain.insecure.allow": "false"})
    process.start()
    try:
        with KafkaConnection(process.host, process.port) as connection:
            answer = connection.request(SaslHandshakeRequest(mechanism="PLAIN"))
            assert answer.error_code == 33
            assert set(answer.mechanisms) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
        with KafkaConnection(process.host, process.port) as connection:
            assert connection.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 33
            with pytest.raises(ConnectionClosedError):
                connection.request(SaslAuthenticateRequest(auth_bytes=plain_token("alice", "x")))
    finally:
        process.stop()


FAILED_AUTHENTICATION_DELAY_S = 3.0
"""Long enough that another connection's whole login fits in it on a loaded machine."""


@pytest.fixture(scope="module")
def delaying_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = sasl_broker_process(
        tmp_path_factory.mktemp("sasl-delay") / "data",
        {
            "connection.failed.authentication.delay.ms": str(
                int(FAILED_AUTHENTICATION_DELAY_S * 1000)
            )
        },
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_a_failed_authentication_is_answered_after_the_delay_while_others_are_served(
    delaying_broker: BrokerProcess,
) -> None:
    broker = delaying_broker
    with (
        KafkaConnection(broker.host, broker.port) as guessing,
        KafkaConnection(broker.host, broker.port) as other,
    ):
        assert guessing.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == 0
        client = ScramClient(SHA512, "alice", "a-guess")
        first = guessing.request(SaslAuthenticateRequest(auth_bytes=client.first()))
        final = SaslAuthenticateRequest(auth_bytes=client.final(first.auth_bytes))
        started = time.monotonic()
        correlation_id = guessing.send(final)
        # While the guess waits for its answer, another client logs in and is served.
        assert scram_login(other, "alice", USERS["alice"]).error_code == 0
        assert other.request(metadata_request([])).brokers
        other_served_s = time.monotonic() - started
        answer = guessing.receive(final, correlation_id)
        answered_s = time.monotonic() - started
        assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert guessing.wait_closed_by_peer()
    assert answered_s >= FAILED_AUTHENTICATION_DELAY_S
    assert other_served_s < FAILED_AUTHENTICATION_DELAY_S


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_confluent_kafka_wrong_password_waits_for_the_delay(
    delaying_broker: BrokerProcess, mechanism: str
) -> None:
    started = time.monotonic()
    errors = librdkafka_authentication_errors(delaying_broker, mechanism, "wrong")
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert time.monotonic() - started >= FAILED_AUTHENTICATION_DELAY_S


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = sasl_broker_process(
        tmp_path_factory.mktemp("sasl-reauth") / "data", {"connections.max.reauth.ms": "2000"}
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_an_expired_session_is_closed_at_its_next_request(reauth_broker: BrokerProcess) -> None:
    with KafkaConnection(reauth_broker.host, reauth_broker.port) as connection:
        answer = scram_login(connection, "alice", USERS["alice"])
        assert answer.session_lifetime.total_seconds() == 2
        assert connection.request(metadata_request([])).brokers
        time.sleep(2.5)  # the session's lifetime passing is what is tested
        connection.send(metadata_request([]))
        assert connection.wait_closed_by_peer()
    assert "expired (connections.max.reauth.ms)" in reauth_broker.log_text()


def test_re_authentication_keeps_the_connection(reauth_broker: BrokerProcess) -> None:
    with KafkaConnection(reauth_broker.host, reauth_broker.port) as connection:
        assert scram_login(connection, "alice", USERS["alice"]).error_code == 0
        started = time.monotonic()
        # Re-authenticate well inside each 2 s session (a busy machine may stall the test
        # for a while between two logins) until past the end of the first sessions.
        while time.monotonic() - started < 4.5:
            time.sleep(0.4)
            assert scram_login(connection, "alice", USERS["alice"]).error_code == 0
            assert connection.request(metadata_request([])).brokers


def test_re_authentication_as_someone_else_is_refused(reauth_broker: BrokerProcess) -> None:
    with KafkaConnection(reauth_broker.host, reauth_broker.port) as connection:
        assert scram_login(connection, "alice", USERS["alice"]).error_code == 0
        answer = scram_login(connection, "bob", USERS["bob"])
        assert answer.error_code == 58
        assert "principal User:alice" in answer.error_message
        assert connection.wait_closed_by_peer()


def test_librdkafka_re_authenticates_across_several_sessions(
    reauth_broker: BrokerProcess,
) -> None:
    """A producer that lives through four session lifetimes keeps delivering: librdkafka
    re-authenticates on its connections before each session ends."""
    topic = unique_topic_name("reauth")
    producer = Producer({**librdkafka_config(reauth_broker, "SCRAM-SHA-512"), "acks": "all"})
    failures: list[Any] = []
    delivered = 0

    def on_delivery(error: Any, _message: Any) -> None:
        nonlocal delivered
        if error is not None:
            failures.append(error)
        else:
            delivered += 1

    log_before = len(reauth_broker.log_text())
    deadline = time.monotonic() + 8
    sent = 0
    while time.monotonic() < deadline:
        producer.produce(topic, b"x", partition=0, on_delivery=on_delivery)
        sent += 1
        producer.flush(CLIENT_TIMEOUT_S)
        time.sleep(0.2)  # a steady trickle over several session lifetimes
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert not failures
    assert delivered == sent
    assert "expired (connections.max.reauth.ms)" not in reauth_broker.log_text()[log_before:]


# -- users: the CLI and Kafka's admin API ---------------------------------------------


@pytest.fixture(scope="module")
def two_listener_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """PLAINTEXT on its --port (administration on the loopback) and SASL_PLAINTEXT for
    clients, with no user to begin with."""
    process = BrokerProcess(tmp_path_factory.mktemp("sasl-users") / "data")
    process.overrides = {
        # Port 0: each listener binds a port of the kernel's choice, read back once started.
        "listeners": f"PLAINTEXT://{process.host}:0,SASL_PLAINTEXT://{process.host}:0",
        "sluice.sasl.plain.insecure.allow": "true",
    }
    process.start()
    process.sasl_port = process.listener_ports["SASL_PLAINTEXT"]  # type: ignore[attr-defined]
    try:
        yield process
    finally:
        process.stop()


def sluice_users(broker: BrokerProcess, *args: str, stdin: str | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "sluice", "users", *args, "--bootstrap-server", broker.bootstrap],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def can_log_in(broker: BrokerProcess, user: str, password: str, mechanism: str) -> bool:
    """A SaslHandshake and exchange on the SASL listener: True if it authenticates."""
    port = broker.sasl_port  # type: ignore[attr-defined]
    with KafkaConnection(broker.host, port) as connection:
        handshake = connection.request(SaslHandshakeRequest(mechanism=mechanism))
        assert handshake.error_code == 0
        if mechanism == "PLAIN":
            answer = connection.request(
                SaslAuthenticateRequest(auth_bytes=plain_token(user, password))
            )
            return bool(answer.error_code == 0)
        client = ScramClient(ScramMechanism.by_name(mechanism), user, password)
        first = connection.request(SaslAuthenticateRequest(auth_bytes=client.first()))
        assert first.error_code == 0
        final = connection.request(
            SaslAuthenticateRequest(auth_bytes=client.final(first.auth_bytes))
        )
        if final.error_code:
            return False
        client.verify(final.auth_bytes)
        return True


def test_users_cli_create_list_passwd_delete(two_listener_broker: BrokerProcess) -> None:
    broker = two_listener_broker
    created = sluice_users(
        broker, "create", "carol", "--mechanism", "SCRAM-SHA-512", "--password-stdin",
        stdin="first-secret\n",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert can_log_in(broker, "carol", "first-secret", "SCRAM-SHA-512")
    assert can_log_in(broker, "carol", "first-secret", "PLAIN")
    assert not can_log_in(broker, "carol", "other", "SCRAM-SHA-512")
    assert not can_log_in(broker, "carol", "first-secret", "SCRAM-SHA-256")

    again = sluice_users(broker, "create", "carol", "--password-stdin", stdin="x\n")
    assert again.returncode == 1
    assert "already has SCRAM-SHA-512 credentials" in again.stderr

    listed = sluice_users(broker, "list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["carol"] == [
        {"mechanism": "SCRAM-SHA-512", "iterations": 4096}
    ]

    changed = sluice_users(broker, "passwd", "carol", "--password-stdin", stdin="second\n")
    assert changed.returncode == 0, changed.stderr
    assert not can_log_in(broker, "carol", "first-secret", "SCRAM-SHA-512")
    assert can_log_in(broker, "carol", "second", "SCRAM-SHA-512")

    deleted = sluice_users(broker, "delete", "carol")
    assert deleted.returncode == 0, deleted.stderr
    assert not can_log_in(broker, "carol", "second", "SCRAM-SHA-512")
    assert "carol" not in json.loads(sluice_users(broker, "list", "--format", "json").stdout)

    missing = sluice_users(broker, "passwd", "carol", "--password-stdin", stdin="x\n")
    assert missing.returncode == 1
    assert "does not exist" in missing.stderr
    gone = sluice_users(broker, "delete", "carol")
    assert gone.returncode == 1
    assert "has no credentials" in gone.stderr
    empty = sluice_users(broker, "create", "dave", "--password-stdin", stdin="\n")
    assert empty.returncode == 2
    assert "the password is empty" in empty.stderr


def test_confluent_kafka_admin_manages_scram_users(two_listener_broker: BrokerProcess) -> None:
    broker = two_listener_broker
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    upsert = UserScramCredentialUpsertion(
        "erin", ScramCredentialInfo(ScramMechanism_.SCRAM_SHA_256, 8192), b"erin-secret"
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(CLIENT_TIMEOUT_S)
    assert can_log_in(broker, "erin", "erin-secret", "SCRAM-SHA-256")
    described = admin.describe_user_scram_credentials(["erin"])
    description = described["erin"].result(CLIENT_TIMEOUT_S)
    assert [(info.mechanism, info.iterations) for info in description.scram_credential_infos] == [
        (ScramMechanism_.SCRAM_SHA_256, 8192)
    ]
    missing = admin.describe_user_scram_credentials(["nobody"])["nobody"]
    with pytest.raises(KafkaException) as raised:
        missing.result(CLIENT_TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    deletion = UserScramCredentialDeletion("erin", ScramMechanism_.SCRAM_SHA_256)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        future.result(CLIENT_TIMEOUT_S)
    assert not can_log_in(broker, "erin", "erin-secret", "SCRAM-SHA-256")


# -- SASL_SSL -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sasl_ssl_broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BrokerProcess, Path]]:
    """SASL_PLAINTEXT on its --port and SASL_SSL for clients, PLAIN allowed only over
    TLS (the default); yields the broker and the CA certificate clients trust."""
    directory = tmp_path_factory.mktemp("sasl-ssl")
    ca = CertificateAuthority.create(directory / "certificates")
    keystore = ca.issue("broker", "/CN=broker", server=True)
    seed_users(directory / "data", USERS)
    process = BrokerProcess(directory / "data")
    process.overrides = {
        # Port 0: each listener binds a port of the kernel's choice, read back once started.
        "listeners": f"SASL_PLAINTEXT://{process.host}:0,SASL_SSL://{process.host}:0",
        "ssl.keystore.location": str(keystore.keystore),
        "group.initial.rebalance.delay.ms": "0",
    }
    process.start()
    process.ssl_port = process.listener_ports["SASL_SSL"]  # type: ignore[attr-defined]
    try:
        yield process, ca.certificate
    finally:
        process.stop()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_sasl_ssl_with_every_client(
    sasl_ssl_broker: tuple[BrokerProcess, Path], mechanism: str
) -> None:
    broker, ca_file = sasl_ssl_broker
    bootstrap = f"{broker.host}:{broker.ssl_port}"  # type: ignore[attr-defined]
    librdkafka = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(ca_file),
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": USERS["alice"],
    }
    produce_and_consume_with_librdkafka(librdkafka, unique_topic_name("sasl-ssl-confluent"))

    python_clients = {
        "bootstrap_servers": bootstrap,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "bob",
        "sasl_plain_password": USERS["bob"],
    }
    topic = unique_topic_name("sasl-ssl-kafka-python")
    context = ssl.create_default_context(cafile=str(ca_file))
    producer = KafkaProducer(acks="all", ssl_context=context, **python_clients)
    producer.send(topic, b"kafka-python", partition=0).get(timeout=CLIENT_TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        auto_offset_reset="earliest",
        consumer_timeout_ms=20_000,
        ssl_context=context,
        **python_clients,
    )
    try:
        assert [m.value for m in consumer][:1] == [b"kafka-python"]
    finally:
        consumer.close()

    async def with_aiokafka() -> bytes | None:
        topic = unique_topic_name("sasl-ssl-aiokafka")
        producer = AIOKafkaProducer(acks="all", ssl_context=context, **python_clients)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"aiokafka", partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, auto_offset_reset="earliest", ssl_context=context, **python_clients
        )
        await consumer.start()
        try:
            return (await asyncio.wait_for(consumer.getone(), CLIENT_TIMEOUT_S)).value
        finally:
            await consumer.stop()

    assert asyncio.run(with_aiokafka()) == b"aiokafka"

    if KCAT is not None:
        topic = unique_topic_name("sasl-ssl-kcat")
        settings = [f"{k}={v}" for k, v in librdkafka.items() if k != "bootstrap.servers"]
        arguments = [KCAT, "-b", bootstrap, *(x for s in settings for x in ("-X", s))]
        produced = subprocess.run(
            [*arguments, "-P", "-t", topic, "-p", "0"],
            input="over tls\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert produced.returncode == 0, produced.stderr
        consumed = subprocess.run(
            [*arguments, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert consumed.returncode == 0, consumed.stderr
        assert consumed.stdout.splitlines() == ["over tls"]


def test_plain_is_offered_over_tls_but_not_over_plaintext(
    sasl_ssl_broker: tuple[BrokerProcess, Path],
) -> None:
    broker, _ = sasl_ssl_broker
    with KafkaConnection(broker.host, broker.port) as connection:
        answer = connection.request(SaslHandshakeRequest(mechanism="PLAIN"))
        assert answer.error_code == 33
        assert "PLAIN" not in answer.mechanisms


def test_legacy_framing_after_handshake_v0_is_refused_clearly(broker: BrokerProcess) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        answer = connection.request(SaslHandshakeRequestV0(mechanism="PLAIN"))
        assert answer.error_code == 0
        # Kafka's legacy framing: the raw PLAIN token as its own frame.
        token = plain_token("alice", USERS["alice"])
        connection.send_bytes(len(token).to_bytes(4, "big") + token)
        assert connection.wait_closed_by_peer()
    assert "legacy framing) is not supported" in broker.log_text()


def test_sasl_authenticate_after_handshake_v0_is_served(broker: BrokerProcess) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        assert connection.request(SaslHandshakeRequestV0(mechanism="PLAIN")).error_code == 0
        answer = connection.request(
            SaslAuthenticateRequest(auth_bytes=plain_token("alice", USERS["alice"]))
        )
        assert answer.error_code == 0
        assert connection.request(metadata_request([])).brokers


def test_sasl_authenticate_without_a_handshake_is_an_illegal_state(
    broker: BrokerProcess,
) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        answer = connection.request(
            SaslAuthenticateRequest(auth_bytes=plain_token("alice", USERS["alice"]))
        )
        assert answer.error_code == 34  # ILLEGAL_SASL_STATE
        assert connection.wait_closed_by_peer()


def test_sasl_handshake_on_a_plaintext_listener_is_an_illegal_state(
    two_listener_broker: BrokerProcess,
) -> None:
    broker = two_listener_broker
    with KafkaConnection(broker.host, broker.port) as connection:
        answer = connection.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        assert answer.error_code == 34
        assert connection.wait_closed_by_peer()


def test_the_cli_authenticates_with_the_sasl_environment(broker: BrokerProcess) -> None:
    def users_list(password: str) -> Any:
        return subprocess.run(
            [sys.executable, "-m", "sluice", "users", "list", "--format", "json",
             "--bootstrap-server", broker.bootstrap],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={
                **os.environ,
                "SLUICE_SASL_MECHANISM": "SCRAM-SHA-512",
                "SLUICE_SASL_USERNAME": "alice",
                "SLUICE_SASL_PASSWORD": password,
            },
        )  # fmt: skip

    listed = users_list(USERS["alice"])
    assert listed.returncode == 0, listed.stderr
    assert sorted(json.loads(listed.stdout)) == ["alice", "bob"]
    refused = users_list("wrong")
    assert refused.returncode == 1
    assert "Authentication failed" in refused.stderr
    assert "Traceback" not in refused.stderr
