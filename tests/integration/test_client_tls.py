"""Sluice's own client over TLS: sluice.Admin, sluice.Producer and sluice.Consumer on an
SSL listener, on a SASL_SSL listener with SCRAM, and with a client certificate on a
listener with ``ssl.client.auth=required``; a broker certificate of a CA the client does
not trust, and a missing client certificate, refused with errors that say so; and the
``sluice`` command over TLS through its SLUICE_SECURITY_PROTOCOL and SLUICE_SSL_*
variables.

Certificates are made by the tests (``tls_certs``), never committed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import HOST, BrokerProcess
from client_helpers import CLIENT_TIMEOUT_S, unique_topic_name
from console_process import ConsoleProcess
from test_sasl import seed_users
from tls_certs import CertificateAuthority

import sluice
from sluice.client.admin import NewTopic
from sluice.client.consumer_api import TopicPartition
from sluice.client.errors import (
    AuthenticationFailedError,
    ConnectionClosedError,
    TlsHandshakeError,
)

BROKER_KEY_PASSWORD = "broker-key-secret"
CLIENT_KEY_PASSWORD = "client-key-secret"
USERS = {"alice": "alice-secret"}
RECORDS = 20


class Certificates:
    def __init__(self, directory: Path) -> None:
        self.ca = CertificateAuthority.create(directory, "test")
        self.broker = self.ca.issue(
            "broker", "/O=Sluice/CN=broker", server=True, key_password=BROKER_KEY_PASSWORD
        )
        self.client = self.ca.issue(
            "client", "/O=Sluice/CN=client", key_password=CLIENT_KEY_PASSWORD
        )
        self.other_ca = CertificateAuthority.create(directory, "other")


class TlsBroker(BrokerProcess):
    """A broker with PLAINTEXT (its --port), SSL, SASL_SSL and MTLS (SSL requiring a
    client certificate) listeners."""

    def __init__(self, data_dir: Path, certificates: Certificates) -> None:
        super().__init__(data_dir)
        self.overrides = {
            # Port 0: each listener binds a port of the kernel's choice (read back once
            # started, kept across restarts).
            "listeners": (
                f"PLAINTEXT://{HOST}:0,SSL://{HOST}:0,SASL_SSL://{HOST}:0,MTLS://{HOST}:0"
            ),
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,MTLS:SSL"
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certificates.broker.keystore),
            "ssl.key.password": BROKER_KEY_PASSWORD,
            "ssl.truststore.location": str(certificates.ca.certificate),
            "listener.name.mtls.ssl.client.auth": "required",
            "group.initial.rebalance.delay.ms": "0",
        }

    @property
    def ssl_port(self) -> int:
        return self.listener_ports["SSL"]

    @property
    def sasl_ssl_port(self) -> int:
        return self.listener_ports["SASL_SSL"]

    @property
    def mtls_port(self) -> int:
        return self.listener_ports["MTLS"]


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture(scope="module")
def broker(
    tmp_path_factory: pytest.TempPathFactory, certificates: Certificates
) -> Iterator[TlsBroker]:
    data_dir = tmp_path_factory.mktemp("client-tls") / "data"
    seed_users(data_dir, USERS)
    process = TlsBroker(data_dir, certificates)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, CLIENT_TIMEOUT_S * 2))


async def round_trip(bootstrap: str, **security: Any) -> None:
    """Create a topic with sluice.Admin, write records to it with sluice.Producer and
    read them back with sluice.Consumer (in a group), all with ``security``."""
    topic = await create_topic(bootstrap, **security)
    values = [b"value %d" % i for i in range(RECORDS)]
    async with sluice.Producer(bootstrap, **security) as producer:
        sent = [await producer.send(topic, value, partition=0) for value in values]
        await asyncio.gather(*sent)
    async with sluice.Consumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"{topic}-group",
        auto_offset_reset="earliest",
        **security,
    ) as consumer:
        read = [(await consumer.getone()).value for _ in values]
        assert consumer.assignment() == {TopicPartition(topic, 0)}
    assert read == values


async def create_topic(bootstrap: str, **security: Any) -> str:
    topic = unique_topic_name("client-tls")
    async with sluice.Admin(bootstrap, **security) as admin:
        await admin.create_topics([NewTopic(topic)])
    return topic


def ssl_options(certificates: Certificates) -> dict[str, Any]:
    return {"security_protocol": "SSL", "ssl_cafile": str(certificates.ca.certificate)}


def test_producer_and_consumer_over_ssl(broker: TlsBroker, certificates: Certificates) -> None:
    run(round_trip(f"{HOST}:{broker.ssl_port}", **ssl_options(certificates)))


def test_producer_and_consumer_over_sasl_ssl_with_scram(
    broker: TlsBroker, certificates: Certificates
) -> None:
    run(
        round_trip(
            f"{HOST}:{broker.sasl_ssl_port}",
            security_protocol="SASL_SSL",
            ssl_cafile=str(certificates.ca.certificate),
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username="alice",
            sasl_plain_password=USERS["alice"],
        )
    )


def test_a_wrong_password_over_sasl_ssl_is_refused(
    broker: TlsBroker, certificates: Certificates
) -> None:
    with pytest.raises(AuthenticationFailedError):
        run(
            round_trip(
                f"{HOST}:{broker.sasl_ssl_port}",
                security_protocol="SASL_SSL",
                ssl_cafile=str(certificates.ca.certificate),
                sasl_mechanism="SCRAM-SHA-512",
                sasl_plain_username="alice",
                sasl_plain_password="guess",
            )
        )


def test_producer_and_consumer_with_a_client_certificate(
    broker: TlsBroker, certificates: Certificates
) -> None:
    assert certificates.client.encrypted_key is not None
    run(
        round_trip(
            f"{HOST}:{broker.mtls_port}",
            **ssl_options(certificates),
            ssl_certfile=str(certificates.client.certificate),
            ssl_keyfile=str(certificates.client.encrypted_key),
            ssl_password=CLIENT_KEY_PASSWORD,
        )
    )


def test_the_sync_admin_over_a_client_certificate(
    broker: TlsBroker, certificates: Certificates
) -> None:
    topic = unique_topic_name("client-tls-sync")
    with sluice.sync.Admin(
        f"{HOST}:{broker.mtls_port}",
        **ssl_options(certificates),
        ssl_certfile=str(certificates.client.certificate),
        ssl_keyfile=str(certificates.client.key),
    ) as admin:
        admin.create_topics([NewTopic(topic)])
        assert topic in {t.name for t in admin.list_topics()}


def test_a_listener_requiring_a_client_certificate_refuses_a_client_without_one(
    broker: TlsBroker, certificates: Certificates
) -> None:
    async def connect() -> None:
        async with sluice.Admin(f"{HOST}:{broker.mtls_port}", **ssl_options(certificates)):
            pass

    with pytest.raises(ConnectionClosedError, match="refused the client's certificate"):
        run(connect())


def test_a_broker_certificate_of_another_ca_is_refused_with_a_clear_error(
    broker: TlsBroker, certificates: Certificates
) -> None:
    async def produce() -> None:
        async with sluice.Producer(
            f"{HOST}:{broker.ssl_port}",
            security_protocol="SSL",
            ssl_cafile=str(certificates.other_ca.certificate),
        ):
            pass

    with pytest.raises(TlsHandshakeError) as raised:
        run(produce())
    message = str(raised.value)
    assert message.startswith(f"TLS handshake with broker at {HOST}:{broker.ssl_port} failed")
    assert "its certificate was refused" in message
    assert "ssl_cafile" in message


def test_a_tls_client_on_a_plaintext_listener_fails_the_handshake(
    broker: TlsBroker, certificates: Certificates
) -> None:
    async def connect() -> None:
        async with sluice.Admin(broker.bootstrap, **ssl_options(certificates)):
            pass

    with pytest.raises(TlsHandshakeError, match=r"is it a TLS \(SSL or SASL_SSL\) listener"):
        run(connect())


def test_a_plaintext_client_on_a_tls_listener_is_told_to_use_tls(broker: TlsBroker) -> None:
    async def connect() -> None:
        async with sluice.Admin(f"{HOST}:{broker.ssl_port}"):
            pass

    with pytest.raises(ConnectionClosedError, match="use security_protocol SSL or SASL_SSL"):
        run(connect())


# ── the sluice command ────────────────────────────────────────────────────────────────


def sluice_command(
    bootstrap: str, *args: str, **variables: str
) -> subprocess.CompletedProcess[str]:
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("SLUICE_SSL_", "SLUICE_SASL_", "SLUICE_SECURITY_"))
    }
    return subprocess.run(
        [sys.executable, "-m", "sluice", *args],
        capture_output=True,
        text=True,
        env={**environment, "SLUICE_BOOTSTRAP_SERVER": bootstrap, **variables},
        timeout=CLIENT_TIMEOUT_S * 2,
        check=False,
    )


def test_sluice_topics_list_over_ssl(broker: TlsBroker, certificates: Certificates) -> None:
    topic = run(create_topic(broker.bootstrap))
    listed = sluice_command(
        f"{HOST}:{broker.ssl_port}",
        "topics",
        "list",
        SLUICE_SECURITY_PROTOCOL="SSL",
        SLUICE_SSL_CA_LOCATION=str(certificates.ca.certificate),
    )
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.splitlines()


def test_sluice_topics_list_with_a_client_certificate(
    broker: TlsBroker, certificates: Certificates
) -> None:
    topic = run(create_topic(broker.bootstrap))
    listed = sluice_command(
        f"{HOST}:{broker.mtls_port}",
        "topics",
        "list",
        SLUICE_SECURITY_PROTOCOL="SSL",
        SLUICE_SSL_CA_LOCATION=str(certificates.ca.certificate),
        SLUICE_SSL_CERTIFICATE_LOCATION=str(certificates.client.certificate),
        SLUICE_SSL_KEY_LOCATION=str(certificates.client.encrypted_key),
        SLUICE_SSL_KEY_PASSWORD=CLIENT_KEY_PASSWORD,
    )
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.splitlines()


def test_sluice_console_with_a_client_certificate(
    broker: TlsBroker, certificates: Certificates
) -> None:
    topic = run(create_topic(broker.bootstrap))
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("SLUICE_SSL_", "SLUICE_SASL_", "SLUICE_SECURITY_"))
    }
    console = ConsoleProcess(
        f"{HOST}:{broker.mtls_port}",
        environment={
            **environment,
            "SLUICE_SECURITY_PROTOCOL": "SSL",
            "SLUICE_SSL_CA_LOCATION": str(certificates.ca.certificate),
            "SLUICE_SSL_CERTIFICATE_LOCATION": str(certificates.client.certificate),
            "SLUICE_SSL_KEY_LOCATION": str(certificates.client.encrypted_key),
            "SLUICE_SSL_KEY_PASSWORD": CLIENT_KEY_PASSWORD,
        },
    )
    try:
        page = console.get(f"/topics/{topic}")
    finally:
        console.stop()
    assert page.status == 200, page.text
    assert f'<span id="topic-name">{topic}</span>' in page.text


def test_sluice_over_ssl_trusting_another_ca_fails_in_one_line(
    broker: TlsBroker, certificates: Certificates
) -> None:
    listed = sluice_command(
        f"{HOST}:{broker.ssl_port}",
        "topics",
        "list",
        SLUICE_SECURITY_PROTOCOL="SSL",
        SLUICE_SSL_CA_LOCATION=str(certificates.other_ca.certificate),
    )
    assert listed.returncode == 1, listed.stderr
    (line,) = listed.stderr.strip().splitlines()
    assert "its certificate was refused" in line, line


def test_sluice_over_ssl_without_a_ca_is_a_usage_error(broker: TlsBroker) -> None:
    listed = sluice_command(
        f"{HOST}:{broker.ssl_port}", "topics", "list", SLUICE_SECURITY_PROTOCOL="SSL"
    )
    assert listed.returncode == 2
    assert "TLS needs SLUICE_SSL_CA_LOCATION" in listed.stderr
