"""The HTTP listener of a broker with SASL and ACLs (a real broker process, SCRAM users,
ACLs made with confluent-kafka's admin API, requests as ``curl`` sends them): nothing but
``/health`` and ``/ready`` without credentials, HTTP Basic against the SCRAM users,
``/metrics`` for DESCRIBE on the cluster or the bearer token, and a console that acts as
the caller, so a user reads and writes through it only what their ACLs allow. The bind
address (loopback unless ``http.host`` says otherwise) is checked on brokers run in this
process, whose sockets can be listed."""

from __future__ import annotations

import asyncio
import base64
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from broker_process import BrokerProcess
from client_helpers import unique_topic_name
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from console_process import Page
from metrics_scrape import get
from test_sasl import seed_users
from tls_certs import CertificateAuthority

from sluice.broker.app import Broker
from sluice.cli.loopback import HOST, free_port
from sluice.common.config import BrokerConfig

USERS = {
    "admin": "admin-secret",
    "alice": "alice-secret",
    "bob": "bob-secret",
    "monitor": "monitor-secret",
}
BEARER_TOKEN = "scraper-token-0123456789"
SECRET_VALUE = "classified-payload"
TIMEOUT_S = 30.0
READY_TIMEOUT_S = 60.0


def config(broker: BrokerProcess, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def as_user(user: str) -> str:
    return basic(user, USERS[user])


def call(
    broker: BrokerProcess,
    path: str,
    authorization: str | None = None,
    form: dict[str, str] | None = None,
) -> Page:
    """A GET (or, with ``form``, a same-origin form POST) as ``curl -H Authorization``
    sends it; redirects are not followed."""
    headers = {} if authorization is None else {"Authorization": authorization}
    data = None
    if form is not None:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
        headers["Origin"] = broker.http_url
        data = urllib.parse.urlencode(form).encode()
    request = urllib.request.Request(broker.http_url + path, data=data, headers=headers)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=TIMEOUT_S) as response:
            return Page(response.status, response.read().decode(), dict(response.headers))
    except urllib.error.HTTPError as e:
        return Page(e.code, e.read().decode(), dict(e.headers))


def end_offset(broker: BrokerProcess, topic: str) -> int:
    consumer = Consumer({**config(broker, "admin"), "group.id": "http-security-offsets"})
    try:
        _, high = consumer.get_watermark_offsets(
            TopicPartition(topic, 0), timeout=TIMEOUT_S, cached=False
        )
        return int(high)
    finally:
        consumer.close()


def grant(admin: AdminClient, topic: str, user: str, *operations: AclOperation) -> None:
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            f"User:{user}",
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for operation in operations
    ]
    for future in admin.create_acls(bindings).values():
        future.result(TIMEOUT_S)


def csrf_token(page: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert match is not None, page
    return match.group(1)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("http-security") / "data"
    seed_users(data_dir, USERS)
    process = BrokerProcess(data_dir, http_port=0)
    process.overrides = {
        "listeners": f"SASL_PLAINTEXT://{process.host}:{process.port}",
        "authorizer.enabled": "true",
        "super.users": "User:admin",
        "http.metrics.bearer.token": BEARER_TOKEN,
    }
    process.start()
    try:
        describe_cluster = AclBinding(
            ResourceType.BROKER,
            "kafka-cluster",
            ResourcePatternType.LITERAL,
            "User:monitor",
            "*",
            AclOperation.DESCRIBE,
            AclPermissionType.ALLOW,
        )
        admin = AdminClient(config(process, "admin"))
        for future in admin.create_acls([describe_cluster]).values():
            future.result(TIMEOUT_S)
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def secret_topic(broker: BrokerProcess) -> str:
    """A topic holding one record; alice may read and write it, bob only see it (its
    description and configs)."""
    topic = unique_topic_name("secret")
    admin = AdminClient(config(broker, "admin"))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
    seeing = (AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)
    grant(admin, topic, "alice", AclOperation.READ, AclOperation.WRITE, *seeing)
    grant(admin, topic, "bob", *seeing)
    producer = Producer({**config(broker, "admin"), "enable.idempotence": False})
    producer.produce(topic, SECRET_VALUE.encode())
    assert producer.flush(TIMEOUT_S) == 0
    assert end_offset(broker, topic) == 1
    return topic


@pytest.mark.parametrize("path", ["/metrics", "/", "/topics", "/static/console.css"])
def test_without_credentials_only_the_probes_answer(broker: BrokerProcess, path: str) -> None:
    refused = call(broker, path)
    assert refused.status == 401, refused.text
    assert refused.headers["WWW-Authenticate"].startswith('Basic realm="sluice"')
    assert get(f"{broker.http_url}/health")[0] == 200
    assert get(f"{broker.http_url}/ready")[0] == 200


@pytest.mark.parametrize(
    "authorization",
    [
        basic("alice", "wrong-password"),
        basic("nobody", "alice-secret"),
        basic("alice", ""),
        "Basic not-base64!",
        "Bearer wrong-token",
        "Digest username=alice",
    ],
    ids=["wrong-password", "unknown-user", "empty-password", "garbage", "wrong-token", "scheme"],
)
def test_wrong_credentials_are_refused(broker: BrokerProcess, authorization: str) -> None:
    for path in ("/metrics", "/topics"):
        refused = call(broker, path, authorization)
        assert refused.status == 401, refused.text
        assert "WWW-Authenticate" in refused.headers


def test_metrics_need_describe_on_the_cluster_or_the_token(broker: BrokerProcess) -> None:
    for authorization in (as_user("admin"), as_user("monitor"), f"Bearer {BEARER_TOKEN}"):
        scraped = call(broker, "/metrics", authorization)
        assert scraped.status == 200, scraped.text
        assert "sluice_requests_total" in scraped.text
    refused = call(broker, "/metrics", as_user("alice"))
    assert refused.status == 403
    assert "User:alice may not read metrics" in refused.text
    # A right password keeps working once remembered, a wrong one for the same user never.
    assert call(broker, "/metrics", as_user("admin")).status == 200
    assert call(broker, "/metrics", basic("admin", "alice-secret")).status == 401
    # The token is for metrics only: it is no user the console could act as.
    console = call(broker, "/topics", f"Bearer {BEARER_TOKEN}")
    assert console.status == 403
    assert "grants /metrics only" in console.text


def test_without_credentials_the_console_neither_reads_nor_writes(
    broker: BrokerProcess, secret_topic: str
) -> None:
    read = call(broker, f"/topics/{secret_topic}/messages?partition=0&offset=0")
    assert read.status == 401
    assert SECRET_VALUE not in read.text
    fields = {"partition": "0", "key": "", "value": "forged", "headers": "", "confirm": "yes"}
    written = call(broker, f"/topics/{secret_topic}/produce", form=fields)
    assert written.status == 401
    assert end_offset(broker, secret_topic) == 1


def test_the_console_acts_as_the_caller_with_the_callers_acls(
    broker: BrokerProcess, secret_topic: str
) -> None:
    messages = f"/topics/{secret_topic}/messages?partition=0&offset=0"
    produce = f"/topics/{secret_topic}/produce"
    fields = {"partition": "0", "key": "", "value": "forged", "headers": "", "confirm": "yes"}

    # Bob may see the topic (its page, with a form token of his), not read or write it.
    bob_page = call(broker, f"/topics/{secret_topic}", as_user("bob"))
    assert bob_page.status == 200, bob_page.text
    bob_token = csrf_token(bob_page.text)
    bob_read = call(broker, messages, as_user("bob"))
    assert bob_read.status == 403, bob_read.text
    assert "TOPIC_AUTHORIZATION_FAILED" in bob_read.text
    assert SECRET_VALUE not in bob_read.text
    bob_write = call(broker, produce, as_user("bob"), {**fields, "csrf_token": bob_token})
    assert bob_write.status == 403, bob_write.text
    assert "TOPIC_AUTHORIZATION_FAILED" in bob_write.text
    assert end_offset(broker, secret_topic) == 1

    # Alice may: the same requests read the record and write one, as her.
    alice_read = call(broker, messages, as_user("alice"))
    assert alice_read.status == 200, alice_read.text
    assert SECRET_VALUE in alice_read.text
    alice_token = csrf_token(call(broker, f"/topics/{secret_topic}", as_user("alice")).text)
    assert alice_token != bob_token
    # A form token is bound to its user: alice's in bob's request is refused.
    stolen = call(broker, produce, as_user("bob"), {**fields, "csrf_token": alice_token})
    assert stolen.status == 403
    assert "did not come from this console" in stolen.text
    assert end_offset(broker, secret_topic) == 1
    alice_write = call(
        broker, produce, as_user("alice"), {**fields, "value": "hers", "csrf_token": alice_token}
    )
    assert alice_write.status == 303, alice_write.text
    assert end_offset(broker, secret_topic) == 2


def test_with_acls_but_no_sasl_listener_there_is_no_console(tmp_path: Path) -> None:
    """The console acts as each caller through a SASL listener; without one it is off
    (it never falls back to the broker's identity), and the metrics stay."""
    data_dir = tmp_path / "data"
    seed_users(data_dir, USERS)
    process = BrokerProcess(
        data_dir,
        http_port=0,
        overrides={"authorizer.enabled": "true", "super.users": "User:admin"},
    )
    process.start()
    try:
        assert call(process, "/topics").status == 401
        assert call(process, "/topics", as_user("admin")).status == 404
        index = call(process, "/", as_user("admin"))
        assert index.status == 200
        assert '"service": "sluice broker"' in index.text
        assert call(process, "/metrics", as_user("admin")).status == 200
        assert "no web console" in process.log_text()
    finally:
        process.stop()


def test_each_user_lists_only_the_topics_their_acls_show(
    broker: BrokerProcess, secret_topic: str
) -> None:
    """The topics list comes from the user's own client and sampler: a topic nobody but
    the administrator may describe is in no one else's list."""
    hidden = unique_topic_name("hidden")
    admin = AdminClient(config(broker, "admin"))
    admin.create_topics([NewTopic(hidden, 1, 1)])[hidden].result(TIMEOUT_S)
    listed: dict[str, str] = {}
    for user in ("admin", "alice", "bob", "monitor"):
        page = call(broker, "/topics", as_user(user))
        assert page.status == 200, page.text
        listed[user] = page.text
    assert hidden in listed["admin"] and secret_topic in listed["admin"]
    for user in ("alice", "bob"):
        assert secret_topic in listed[user]
        assert hidden not in listed[user]
    assert secret_topic not in listed["monitor"] and hidden not in listed["monitor"]


def test_over_sasl_ssl_the_console_acts_as_the_caller(tmp_path: Path) -> None:
    """A broker whose only listener is SASL_SSL requiring client certificates: the
    console connects with TLS (showing the broker's certificate) and the caller's SASL
    user, whose ACLs decide what it sees."""
    ca = CertificateAuthority.create(tmp_path / "certificates")
    keystore = ca.issue("broker", "/CN=broker", server=True)
    client = ca.issue("client", "/CN=client")
    data_dir = tmp_path / "data"
    seed_users(data_dir, USERS)
    process = BrokerProcess(data_dir, http_port=0)
    process.overrides = {
        "listeners": f"SASL_SSL://{process.host}:{process.port}",
        "ssl.keystore.location": str(keystore.keystore),
        "ssl.truststore.location": str(ca.certificate),
        "ssl.client.auth": "required",
        "authorizer.enabled": "true",
        "super.users": "User:admin",
    }
    process.start()
    try:
        admin = AdminClient(
            {
                **config(process, "admin"),
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(ca.certificate),
                "ssl.certificate.location": str(client.certificate),
                "ssl.key.location": str(client.key),
            }
        )
        shown, hidden = unique_topic_name("shown"), unique_topic_name("hidden")
        for future in admin.create_topics([NewTopic(shown, 1, 1), NewTopic(hidden, 1, 1)]).values():
            future.result(TIMEOUT_S)
        grant(admin, shown, "alice", AclOperation.DESCRIBE)
        page = call(process, "/topics", as_user("alice"))
        assert page.status == 200, page.text
        assert shown in page.text and hidden not in page.text
    finally:
        process.stop()


def _listening_address(port: int) -> str:
    """The address this process listens on at ``port``."""
    (address,) = {
        c.laddr.ip
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    }
    return str(address)


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        ({"listeners": "SASL_PLAINTEXT://0.0.0.0:0"}, "127.0.0.1"),
        ({"listeners": "PLAINTEXT://0.0.0.0:0", "authorizer.enabled": "true"}, "127.0.0.1"),
        ({"listeners": "SASL_PLAINTEXT://0.0.0.0:0", "http.host": "0.0.0.0"}, "0.0.0.0"),
        ({"listeners": "PLAINTEXT://0.0.0.0:0"}, "0.0.0.0"),  # a plain broker: as before
    ],
    ids=["sasl", "acls", "sasl-http-host-given", "plain"],
)
def test_a_secured_broker_binds_http_to_loopback_unless_told(
    tmp_path: Path, properties: dict[str, str], expected: str
) -> None:
    http_port = free_port(HOST)
    broker_config = BrokerConfig()
    broker_config.apply_properties(
        {**properties, "http.port": str(http_port), "schema.registry.listeners": ""}
    )
    broker_config.data_dir = tmp_path / "data"

    async def scenario() -> str:
        loop = asyncio.get_running_loop()
        broker = Broker(broker_config)
        await broker.start()
        running = asyncio.create_task(broker.run())
        try:
            url = f"http://{HOST}:{http_port}/ready"
            deadline = time.monotonic() + READY_TIMEOUT_S
            while (await loop.run_in_executor(None, get, url))[0] != 200:
                assert time.monotonic() < deadline, "the broker never became ready"
                await asyncio.sleep(0.05)  # polling interval for readiness, not a sync
            return _listening_address(http_port)
        finally:
            broker.request_stop()
            await running

    assert asyncio.run(scenario()) == expected
