"""The broker's side of the Schema Registry over real HTTP (aiohttp's client) against a
real broker: its listener's own answers (content types, body bounds, bad JSON, schema
size), the registry's topic, hosting on the leader of ``_schemas``-0 and the private API
that forwards calls to it, ports and the settings, and, on a broker with SASL and ACLs,
authentication and authorization by subject.

The registry's logic is a stand-in here (:mod:`registry_stand_in`): what is tested is
the broker's part, whatever the shard answers.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
import time
from pathlib import Path

import aiohttp
import pytest
from confluent_kafka.admin import AclBinding as ConfluentAclBinding
from confluent_kafka.admin import (
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
)
from confluent_kafka.admin import ResourceType as ConfluentResourceType
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from registry_stand_in import (
    POLL_INTERVAL_S,
    READY_TIMEOUT_S,
    STAND_IN_CORE,
    STAND_IN_SCHEMA_MAX_BYTES,
    call_registry,
    registry_url,
    running_broker,
    stand_in_config,
)
from test_sasl import USERS as SASL_USERS
from test_sasl import librdkafka_config, sasl_broker_process, seed_users

import sluice.testing
from sluice.broker.app import Broker
from sluice.broker.fatal import BrokerFatalError
from sluice.broker.network.peer_connection import InterBrokerListener, InterBrokerSasl
from sluice.broker.network.peers import Peers
from sluice.broker.registry.http_listener import (
    ANSWER_CONTENT_TYPE,
    RegistryListener,
    body_bytes_max,
)
from sluice.cli.loopback import HOST
from sluice.cluster.embedded import EmbeddedMetadataStore
from sluice.common.authorizer import (
    AccessControlEntry,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from sluice.common.config import HttpEndpoint
from sluice.protocol.private import SCHEMA_REGISTRY_CALL, PrivateRequest
from sluice.registry.api import Answer, Call
from sluice.testing.ready_line import ready_schema_registry_url

SCHEMA_MAX_BYTES = STAND_IN_SCHEMA_MAX_BYTES
JSON_BODY = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def test_the_listener_answers_what_confluent_answers(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path / "data") as broker, aiohttp.ClientSession() as s:
            url = registry_url(broker)
            assert url.startswith(f"http://{HOST}:") and not url.endswith(":0")
            status, body, headers = await call_registry(s, "GET", f"{url}/no/such/path")
            assert (status, body["error_code"]) == (404, 404)
            assert headers["Content-Type"] == ANSWER_CONTENT_TYPE
            register = f"{url}/subjects/orders-value/versions"
            status, body, _ = await call_registry(
                s, "POST", register, data=b'{"schema": "x"}', headers={"Content-Type": "text/plain"}
            )
            assert (status, body["error_code"]) == (415, 415), body
            status, body, _ = await call_registry(
                s, "POST", register, data=b"{nope", headers=JSON_BODY
            )
            assert (status, body["error_code"]) == (400, 400), body
            too_long = b'{"schema": "' + b"x" * (SCHEMA_MAX_BYTES + 1) + b'"}'
            status, body, _ = await call_registry(
                s, "POST", register, data=too_long, headers=JSON_BODY
            )
            assert (status, body["error_code"]) == (422, 42209), body  # Confluent's code
            assert "schema.registry.schema.max.bytes" in body["message"]
            huge = b" " * (body_bytes_max(SCHEMA_MAX_BYTES) + 1)
            status, body, _ = await call_registry(s, "POST", register, data=huge, headers=JSON_BODY)
            assert (status, body["error_code"]) == (413, 413), body
            # Nothing refused reached the registry; every accepted content type does.
            for content_type in (
                "application/vnd.schemaregistry.v1+json",
                "application/vnd.schemaregistry+json",
                "application/json",
                "application/octet-stream",
            ):
                status, body, _ = await call_registry(
                    s,
                    "POST",
                    register,
                    data=b'{"schema": "x"}',
                    headers={"Content-Type": content_type},
                )
                assert (status, body) == (200, {"id": 1}), content_type
            status, body, _ = await call_registry(s, "GET", f"{url}/subjects")
            assert (status, body) == (200, ["orders-value"])
            # A subject with a slash travels percent-encoded and arrives whole.
            status, body, _ = await call_registry(
                s, "POST", f"{url}/subjects/a%2Fb-value/versions", data=b"{}", headers=JSON_BODY
            )
            assert (status, body) == (200, {"id": 2})
            status, body, _ = await call_registry(s, "GET", f"{url}/subjects")
            assert body == ["a/b-value", "orders-value"]
            # A shard's Task runs in a worker thread of the registry's own, not on the
            # event loop nor in asyncio's default executor (sign-ins, ZooKeeper use it).
            status, body, _ = await call_registry(
                s, "POST", f"{url}/check", data=b'{"a": 1}', headers=JSON_BODY
            )
            assert status == 200 and body["work"] == {"a": 1} and body["in_a_worker_thread"]
            assert body["thread"].startswith("sluice-registry-check"), body
        # Its threads end with the broker.
        deadline = time.monotonic() + READY_TIMEOUT_S
        while any(t.name.startswith("sluice-registry-check") for t in threading.enumerate()):
            assert time.monotonic() < deadline, "the registry's check threads outlived it"
            await asyncio.sleep(POLL_INTERVAL_S)  # polling interval, not a sync

    asyncio.run(scenario())


def test_the_registry_topic_is_compacted_with_one_partition_and_ids_survive_a_restart(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        data_dir = tmp_path / "data"
        async with running_broker(data_dir) as broker, aiohttp.ClientSession() as s:
            assert broker.topics.get("_schemas") is None, "made on the first call, not before"
            for subject, expected in (("a-value", 1), ("b-value", 2), ("a-value", 1)):
                register = f"{registry_url(broker)}/subjects/{subject}/versions"
                status, body, _ = await call_registry(
                    s, "POST", register, data=b"{}", headers=JSON_BODY
                )
                assert (status, body) == (200, {"id": expected})
            topic = broker.topics.get("_schemas")
            assert topic is not None and topic.partition_count == 1
            assert topic.configs.get("cleanup.policy") == "compact"
        async with running_broker(data_dir) as broker, aiohttp.ClientSession() as s:
            status, body, _ = await call_registry(
                s,
                "POST",
                f"{registry_url(broker)}/subjects/c-value/versions",
                data=b"{}",
                headers=JSON_BODY,
            )
            assert (status, body) == (200, {"id": 3})
            status, body, _ = await call_registry(s, "GET", f"{registry_url(broker)}/subjects")
            assert body == ["a-value", "b-value", "c-value"]

    asyncio.run(scenario())


def test_a_forwarded_call_is_answered_by_the_registry_s_host(tmp_path: Path) -> None:
    """SCHEMA_REGISTRY_CALL over a broker-to-broker connection (what another broker of
    a cluster sends the leader of _schemas-0); a malformed one closes the connection."""

    async def scenario() -> None:
        async with running_broker(tmp_path / "data") as broker, aiohttp.ClientSession() as s:
            status, _, _ = await call_registry(s, "GET", f"{registry_url(broker)}/subjects")
            assert status == 200  # the registry's topic exists and is hosted here
            peers = Peers(99, lambda: broker.applier.image, InterBrokerListener())
            try:
                call = Call("POST", ("subjects", "fwd-value", "versions"), {}, {"schema": "x"})
                answer = await peers.request_private(
                    0,
                    PrivateRequest(
                        SCHEMA_REGISTRY_CALL, {"call": call.to_json(), "principal": "User:x"}
                    ),
                    10.0,
                )
                assert answer == {"status": 200, "body": {"id": 1}}
                bad = PrivateRequest(SCHEMA_REGISTRY_CALL, {"call": {"method": 1}})
                with pytest.raises(Exception, match=r"closed the connection|did not answer"):
                    await peers.request_private(0, bad, 10.0)
            finally:
                await peers.close()
            status, body, _ = await call_registry(s, "GET", f"{registry_url(broker)}/subjects")
            assert body == ["fwd-value"]

    asyncio.run(scenario())


def test_a_broker_without_registry_listeners_still_hosts_the_registry(tmp_path: Path) -> None:
    """Other brokers forward to the leader of _schemas-0 whatever its own listeners; a
    broker asked before it hosts the registry answers 50003 (the sender looks again)."""

    async def scenario() -> None:
        settings = {"schema.registry.listeners": ""}
        async with running_broker(tmp_path / "data", settings) as broker:
            assert broker.schema_registry is not None and broker.schema_registry.urls == []
            peers = Peers(99, lambda: broker.applier.image, InterBrokerListener())
            call = Call("POST", ("subjects", "fwd-value", "versions"), {}, {"schema": "x"})
            request = PrivateRequest(
                SCHEMA_REGISTRY_CALL, {"call": call.to_json(), "principal": None}
            )
            try:
                answer = await peers.request_private(0, request, 10.0)
                assert answer["status"] == 500 and answer["body"]["error_code"] == 50003
                await broker.topics.ensure_schema_registry_topic()
                deadline = time.monotonic() + READY_TIMEOUT_S
                while broker.schema_registry.runtime.loaded_partitions() != [0]:
                    assert time.monotonic() < deadline, "the registry was never loaded"
                    await asyncio.sleep(POLL_INTERVAL_S)  # polling interval, not a sync
                assert await peers.request_private(0, request, 10.0) == {
                    "status": 200,
                    "body": {"id": 1},
                }
            finally:
                await peers.close()

    asyncio.run(scenario())


def _order(*fields: str) -> Schema:
    record = {
        "type": "record",
        "name": "Order",
        "fields": [{"name": field, "type": "string", "default": ""} for field in fields],
    }
    return Schema(json.dumps(record), "AVRO")


def test_confluent_s_client_registers_and_reads_back_after_a_restart(tmp_path: Path) -> None:
    """``sluice serve`` as a user runs it, with the registry's own logic, and Confluent's
    client unmodified: ids stay what they were across a restart."""
    data_dir = tmp_path / "data"
    with sluice.testing.Broker(mode="process", data_dir=data_dir) as broker:
        client = SchemaRegistryClient({"url": broker.schema_registry_url})
        assert client.register_schema("orders-value", _order("id")) == 1
        assert client.register_schema("orders-value", _order("id", "note")) == 2
        with pytest.raises(SchemaRegistryError) as refused:
            client.register_schema("orders-value", Schema('"int"', "AVRO"))
        assert refused.value.http_status_code == 409
    with sluice.testing.Broker(mode="process", data_dir=data_dir) as broker:
        client = SchemaRegistryClient({"url": broker.schema_registry_url})
        latest = client.get_latest_version("orders-value")
        assert (latest.schema_id, latest.version) == (2, 2)
        assert client.register_schema("payments-value", _order("id")) == 1
        assert client.register_schema("refunds-value", Schema('"string"', "AVRO")) == 3


def test_a_registry_port_in_use_stops_the_start_naming_the_setting(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]

        async def scenario() -> None:
            settings = {"schema.registry.listeners": f"http://{HOST}:{port}"}
            broker = Broker(
                stand_in_config(tmp_path / "data", settings), registry_core=STAND_IN_CORE
            )
            with pytest.raises(BrokerFatalError, match=r"schema\.registry\.listeners=") as failed:
                await broker.start()
            assert f"port {port}" in str(failed.value)

        asyncio.run(scenario())


def test_the_ready_line_names_the_registry() -> None:
    line = (
        "INFO sluice broker 0 ready on PLAINTEXT 127.0.0.1:4000 (PLAINTEXT) (data in /d, 1 "
        "partition(s); single node; Schema Registry http://127.0.0.1:4001; HTTP "
        "http://127.0.0.1:8080)\n"
    )
    assert ready_schema_registry_url(line) == "http://127.0.0.1:4001"
    assert (
        ready_schema_registry_url(
            line.replace("Schema Registry http://127.0.0.1:4001", "no Schema Registry")
        )
        is None
    )


# ── a broker with SASL and ACLs ──────────────────────────────────────────────────────

USERS = {"admin": "admin-secret", "writer": "writer-secret", "reader": "reader-secret"}


def _seed_acls(data_dir: Path) -> None:
    def allow(user: str, operation: Operation, topic: str) -> AclBinding:
        return AclBinding(
            ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
            AccessControlEntry(f"User:{user}", "*", operation, Permission.ALLOW),
        )

    async def write() -> None:
        store = EmbeddedMetadataStore(data_dir)
        await store.start()
        await store.create_acls(
            [
                allow("writer", Operation.WRITE, "orders"),
                allow("reader", Operation.READ, "orders"),
            ]
        )
        await store.close()

    asyncio.run(write())


def test_on_a_secured_broker_callers_sign_in_and_are_authorized_by_subject(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    seed_users(data_dir, USERS)
    _seed_acls(data_dir)
    settings = {
        "listeners": f"SASL_PLAINTEXT://{HOST}:0",
        "authorizer.enabled": "true",
        "super.users": "User:admin",
        "connection.failed.authentication.delay.ms": "0",
    }

    def auth(user: str, password: str | None = None) -> str:
        credentials = f"{user}:{password or USERS[user]}".encode()
        return "Basic " + base64.b64encode(credentials).decode()

    async def scenario() -> None:
        async with running_broker(data_dir, settings) as broker, aiohttp.ClientSession() as s:
            url = registry_url(broker)
            register = f"{url}/subjects/orders-value/versions"
            status, body, headers = await call_registry(s, "GET", f"{url}/subjects")
            assert (status, body) == (401, {"error_code": 401, "message": "Unauthorized"})
            assert headers["WWW-Authenticate"].startswith("Basic ")
            status, body, _ = await call_registry(
                s, "GET", f"{url}/subjects", auth=auth("writer", "wrong")
            )
            assert status == 401
            # Refused before the call reaches the registry: nothing is registered.
            status, body, _ = await call_registry(
                s, "POST", register, data=b"{}", headers=JSON_BODY, auth=auth("reader")
            )
            assert (status, body["error_code"]) == (403, 40301), body
            assert "User:reader" in body["message"] and "orders" in body["message"]
            status, body, _ = await call_registry(
                s,
                "POST",
                f"{url}/subjects/payments-value/versions",
                data=b"{}",
                headers=JSON_BODY,
                auth=auth("writer"),
            )
            assert (status, body["error_code"]) == (403, 40301), body
            status, body, _ = await call_registry(
                s, "POST", register, data=b"{}", headers=JSON_BODY, auth=auth("writer")
            )
            assert (status, body) == (200, {"id": 1})
            status, body, _ = await call_registry(
                s,
                "POST",
                f"{url}/subjects/payments-value/versions",
                data=b"{}",
                headers=JSON_BODY,
                auth=auth("admin"),
            )
            assert (status, body) == (200, {"id": 2})
            # A subject outside TopicNameStrategy needs the cluster; so does global config.
            status, body, _ = await call_registry(
                s,
                "POST",
                f"{url}/subjects/com.acme.Order/versions",
                data=b"{}",
                headers=JSON_BODY,
                auth=auth("writer"),
            )
            assert (status, body["error_code"]) == (403, 40301), body
            status, body, _ = await call_registry(
                s,
                "PUT",
                f"{url}/config",
                data=b'{"compatibility": "NONE"}',
                headers=JSON_BODY,
                auth=auth("writer"),
            )
            assert (status, body["error_code"]) == (403, 40301), body
            # Listing shows each caller only the subjects it may read.
            status, body, _ = await call_registry(s, "GET", f"{url}/subjects", auth=auth("reader"))
            assert (status, body) == (200, ["orders-value"])
            status, body, _ = await call_registry(s, "GET", f"{url}/subjects", auth=auth("admin"))
            assert (status, body) == (200, ["orders-value", "payments-value"])

    asyncio.run(scenario())


def test_every_listing_shows_only_the_subjects_the_caller_may_read(tmp_path: Path) -> None:
    """GET /schemas (each version's subject, id and text) and the subjects and versions
    of an id are filtered by the caller's READ per subject like GET /subjects, and
    paged after the filter."""
    data_dir = tmp_path / "data"
    seed_users(data_dir, USERS)
    _seed_acls(data_dir)
    settings = {
        "listeners": f"SASL_PLAINTEXT://{HOST}:0",
        "authorizer.enabled": "true",
        "super.users": "User:admin",
        "connection.failed.authentication.delay.ms": "0",
    }

    def auth(user: str) -> str:
        return "Basic " + base64.b64encode(f"{user}:{USERS[user]}".encode()).decode()

    async def scenario() -> None:
        async with running_broker(data_dir, settings) as broker, aiohttp.ClientSession() as s:
            url = registry_url(broker)

            async def get(path: str, user: str) -> object:
                status, body, _ = await call_registry(s, "GET", f"{url}{path}", auth=auth(user))
                assert status == 200, body
                return body

            # One schema under a subject reader may read and one it may not: one id.
            for subject in ("orders-value", "secret-value"):
                status, body, _ = await call_registry(
                    s,
                    "POST",
                    f"{url}/subjects/{subject}/versions",
                    data=b'{"schema": "shared"}',
                    headers=JSON_BODY,
                    auth=auth("admin"),
                )
                assert (status, body) == (200, {"id": 1})
            everything = await get("/schemas", "admin")
            assert [entry["subject"] for entry in everything] == ["orders-value", "secret-value"]
            assert await get("/schemas", "reader") == everything[:1]
            assert await get("/schemas?offset=0&limit=1", "reader") == everything[:1]
            assert await get("/schemas?offset=1&limit=1", "reader") == []
            assert await get("/schemas?offset=1&limit=1", "admin") == everything[1:]
            assert await get("/schemas/ids/1/subjects", "reader") == ["orders-value"]
            assert await get("/schemas/ids/1/versions", "reader") == [
                {"subject": "orders-value", "version": 1}
            ]
            assert await get("/schemas/ids/1/subjects", "writer") == []
            assert await get("/schemas/ids/1/subjects", "admin") == [
                "orders-value",
                "secret-value",
            ]

    asyncio.run(scenario())


def test_confluent_s_client_signs_in_to_a_sasl_broker_s_registry(tmp_path: Path) -> None:
    """A ``sluice serve`` with a SASL listener and ACLs: Confluent's client with
    ``basic.auth.user.info`` of a SCRAM user; without credentials 401, a user without
    WRITE on the subject's topic 403 (40301)."""
    broker = sasl_broker_process(
        tmp_path / "data", {"authorizer.enabled": "true", "super.users": "User:alice"}
    )
    broker.start()
    try:
        url = broker.schema_registry_url
        assert url is not None
        alice = SchemaRegistryClient(
            {"url": url, "basic.auth.user.info": f"alice:{SASL_USERS['alice']}"}
        )
        assert alice.register_schema("orders-value", _order("id")) == 1
        anonymous = SchemaRegistryClient({"url": url})
        with pytest.raises(SchemaRegistryError) as refused:
            anonymous.get_subjects()
        assert refused.value.http_status_code == 401
        bob = SchemaRegistryClient({"url": url, "basic.auth.user.info": f"bob:{SASL_USERS['bob']}"})
        with pytest.raises(SchemaRegistryError) as refused:
            bob.register_schema("orders-value", _order("id", "note"))
        assert (refused.value.http_status_code, refused.value.error_code) == (403, 40301)
        assert bob.get_subjects() == []  # may read no topic: sees no subject
        assert alice.get_latest_version("orders-value").schema_id == 1
        # Given READ on orders, bob's listing pages through the subjects he may read only.
        alice.register_schema("invoices-value", _order("id"))
        admin = AdminClient(
            {**librdkafka_config(broker, "SCRAM-SHA-512"), "socket.timeout.ms": 10_000}
        )
        read_orders = ConfluentAclBinding(
            ConfluentResourceType.TOPIC,
            "orders",
            ResourcePatternType.LITERAL,
            "User:bob",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
        for future in admin.create_acls([read_orders]).values():
            future.result(timeout=30)
        assert bob.get_subjects() == ["orders-value"]
        assert bob.get_subjects(limit=1) == ["orders-value"]
        assert bob.get_subjects(offset=1, limit=1) == []
        assert alice.get_subjects(offset=1, limit=1) == ["orders-value"]
    finally:
        broker.stop()


def _nested(depth: int) -> bytes:
    return b'{"schema": "x", "deep": ' + b"[" * depth + b"]" * depth + b"}"


def test_bodies_no_broker_could_send_on_are_refused_by_the_listener(tmp_path: Path) -> None:
    """A lone surrogate escape (JSON decodes it to text with no UTF-8) or nesting the
    JSON encoder cannot follow back is refused 400 before the registry sees it, as the
    leader would need it encoded, on every broker alike; an answer echoing any text
    is sent (as ASCII JSON), never a 500."""
    reached: list[Call] = []

    async def echo(call: Call, principal: str | None) -> Answer:
        reached.append(call)
        return Answer(422, {"error_code": 42201, "message": f"Invalid schema {call.body!r}"})

    async def scenario() -> None:
        listener = RegistryListener(
            [HttpEndpoint(HOST, 0)],
            echo,
            schema_max_bytes=SCHEMA_MAX_BYTES,
            subject_of=lambda call: None,
            is_write=lambda call: True,
        )
        await listener.start()
        try:
            async with aiohttp.ClientSession() as s:
                register = f"{listener.urls[0]}/subjects/orders-value/versions"
                status, body, _ = await call_registry(
                    s, "POST", register, data=b'{"schema": "\\ud800"}', headers=JSON_BODY
                )
                assert (status, body["error_code"]) == (400, 400), body
                assert "surrogate" in body["message"]
                for depth in range(900, 1000, 10):
                    status, body, _ = await call_registry(
                        s, "POST", register, data=_nested(depth), headers=JSON_BODY
                    )
                    assert (status, body["error_code"]) in ((400, 400), (422, 42201)), depth
                assert all(json.dumps(call.body) for call in reached)  # each one encodable
                # An answer echoing a lone surrogate (say, from a path) still goes out.
                status, body, _ = await call_registry(
                    s, "POST", register, data=b'{"schema": "caf\\u00e9"}', headers=JSON_BODY
                )
                assert (status, body["message"]) == (422, "Invalid schema {'schema': 'café'}")
        finally:
            await listener.stop()
        assert not any(
            isinstance(call.body, dict) and call.body.get("schema") == "\ud800" for call in reached
        )

    asyncio.run(scenario())


def test_only_brokers_may_forward_registry_calls_with_the_authorizer_off(
    tmp_path: Path,
) -> None:
    """SCHEMA_REGISTRY_CALL skips the registry's HTTP sign-in and authorization: on a
    SASL broker without the authorizer, a client signed in as any other user than the
    brokers' inter-broker user is refused 40301, and nothing is registered."""
    data_dir = tmp_path / "data"
    seed_users(data_dir, USERS)
    settings = {
        "listeners": f"SASL_PLAINTEXT://{HOST}:0",
        "sluice.inter.broker.sasl.username": "admin",
        "sluice.inter.broker.sasl.password": USERS["admin"],
        "connection.failed.authentication.delay.ms": "0",
    }
    call = Call("POST", ("subjects", "orders-value", "versions"), {}, {"schema": "x"})
    request = PrivateRequest(SCHEMA_REGISTRY_CALL, {"call": call.to_json(), "principal": None})

    async def forward_as(broker: Broker, user: str) -> dict[str, object]:
        sasl = InterBrokerSasl("SCRAM-SHA-512", user, USERS[user])
        peers = Peers(
            99, lambda: broker.applier.image, InterBrokerListener("SASL_PLAINTEXT", sasl=sasl)
        )
        try:
            return await peers.request_private(0, request, 10.0)
        finally:
            await peers.close()

    async def scenario() -> None:
        async with running_broker(data_dir, settings) as broker:
            refused = await forward_as(broker, "writer")
            assert refused["status"] == 403, refused
            assert refused["body"]["error_code"] == 40301  # type: ignore[index]
            await broker.topics.ensure_schema_registry_topic()
            registry = broker.schema_registry
            assert registry is not None
            deadline = time.monotonic() + READY_TIMEOUT_S
            while registry.runtime.loaded_partitions() != [0]:
                assert time.monotonic() < deadline, "the registry was never loaded"
                await asyncio.sleep(POLL_INTERVAL_S)  # polling interval, not a sync
            assert (await forward_as(broker, "writer"))["status"] == 403
            assert await forward_as(broker, "admin") == {"status": 200, "body": {"id": 1}}

    asyncio.run(scenario())
