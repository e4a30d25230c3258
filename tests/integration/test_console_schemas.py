"""The console's Schema Registry pages and its schema-aware message browser, against a
real broker whose registry holds schemas registered by confluent-kafka's own client and
serializers, read with an aiohttp client: the subjects list (soft-deleted ones when
asked), a subject's versions, the diff of two versions with the registry's
compatibility messages, the topic page's links to its subjects, Avro, JSON Schema and
Protobuf values decoded in the browser (and undecodable ones shown as stored, saying
why), a registry that does not answer, and a secured broker's console acting as the
signed-in user towards the registry."""

from __future__ import annotations

import asyncio
import html
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from broker_process import BrokerProcess
from client_helpers import create_topic, producer_config, unique_topic_name
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema as ConfluentSchema
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from console_process import rows, running_console
from test_sasl import USERS as SASL_USERS
from test_sasl import seed_users

from sluice.cli.loopback import HOST
from sluice.schemas.api import SchemaType, format_for
from sluice.schemas.wire import frame

pytestmark = pytest.mark.integration

REQUEST_TIMEOUT_S = 30.0

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "string"}, {"name": "cents", "type": "long"}],
}
ORDER_V2 = {  # BACKWARD-compatible: the new field has a default
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "note", "type": "string", "default": ""}],
}
ORDER_V3 = {  # not BACKWARD-compatible with v2: a new field without a default
    **ORDER_V1,
    "fields": [*ORDER_V2["fields"], {"name": "customer", "type": "string"}],
}
CUSTOMER_JSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "vip": {"type": "boolean"}},
    "required": ["name"],
}
PAYMENT_PROTO = """syntax = "proto3";
package shop;

message Payment {
  string id = 1;
  int64 cents = 2;
}
"""


def get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, str]:
    """GET ``url`` with an aiohttp client: the status and the page."""

    async def fetch() -> tuple[int, str]:
        basic = None if auth is None else aiohttp.BasicAuth(*auth)
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        async with (
            aiohttp.ClientSession(timeout=timeout, auth=basic) as session,
            session.get(url) as response,
        ):
            return response.status, await response.text()

    return asyncio.run(fetch())


def text_of(page: str, element_id: str) -> str:
    """The text (tags stripped, unescaped) of the element with this id."""
    found = re.search(rf'<(\w+)[^>]*\bid="{element_id}"[^>]*>(.*?)</\1>', page, re.S)
    assert found is not None, f"no element {element_id}"
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(2))).strip()


def diff_lines(page: str) -> list[str]:
    """The diff's lines (each one element of the diff's ``pre``)."""
    found = re.search(r'<pre class="diff" id="diff">(.*?)</pre>', page, re.S)
    assert found is not None, "no diff"
    return [html.unescape(line) for line in re.findall(r"<span[^>]*>(.*?)</span>", found[1])]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # Its own console on a free HTTP port, asking its own registry.
    process = BrokerProcess(tmp_path_factory.mktemp("console-schemas-broker") / "data", http_port=0)
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def confluent(broker: BrokerProcess) -> ConfluentRegistryClient:
    assert broker.schema_registry_url is not None, "the broker serves no Schema Registry"
    return ConfluentRegistryClient({"url": broker.schema_registry_url})


def test_subjects_versions_and_the_diff_of_two_versions(
    broker: BrokerProcess, confluent: ConfluentRegistryClient
) -> None:
    topic = unique_topic_name("orders")
    subject = f"{topic}-value"
    ids = [
        confluent.register_schema(subject, ConfluentSchema(json.dumps(v), "AVRO"))
        for v in (ORDER_V1, ORDER_V2)
    ]
    confluent.set_compatibility(subject, "NONE")
    ids.append(confluent.register_schema(subject, ConfluentSchema(json.dumps(ORDER_V3), "AVRO")))
    confluent.set_compatibility(subject, "BACKWARD")
    gone = f"{unique_topic_name('gone')}-value"
    confluent.register_schema(gone, ConfluentSchema(json.dumps(CUSTOMER_JSON), "JSON"))
    confluent.delete_subject(gone)

    status, page = get(f"{broker.http_url}/schemas?prefix={topic}")
    assert status == 200
    assert rows(page, "subjects") == [[subject, "3", str(ids[2]), "AVRO", "BACKWARD", "3"]]
    _, listed = get(f"{broker.http_url}/schemas")
    assert gone not in listed
    _, with_deleted = get(f"{broker.http_url}/schemas?deleted=true")
    shown = {row[0]: row for row in rows(with_deleted, "subjects")}
    [_, latest, _, schema_type, _, count] = shown[f"{gone} soft-deleted"]
    assert (latest, schema_type, count) == ("1", "JSON", "1")
    assert shown[subject][1] == "3"

    status, subject_page = get(f"{broker.http_url}/schemas/subjects/{subject}")
    assert status == 200
    versions = rows(subject_page, "versions")
    assert [(row[0].split()[0], row[1], row[2]) for row in versions] == [
        ("3", str(ids[2]), "AVRO"),
        ("2", str(ids[1]), "AVRO"),
        ("1", str(ids[0]), "AVRO"),
    ]
    assert '"name": "customer"' in versions[0][4]  # pretty-printed: one field a line
    assert '\n  "fields": [' in versions[2][4]
    assert text_of(subject_page, "subject-level") == "BACKWARD"

    # The latest two by default: v3 broke BACKWARD (it was registered under NONE).
    status, diff = get(f"{broker.http_url}/schemas/diff/{subject}")
    assert status == 200
    assert "version 2 → 3" in diff
    assert "is not compatible with version 2" in text_of(diff, "compatibility")
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in text_of(diff, "compatibility-messages")
    lines = diff_lines(diff)
    assert any(line.startswith("+") and '"customer"' in line for line in lines)
    assert not any(line.startswith("-") and '"note"' in line for line in lines)

    status, older = get(f"{broker.http_url}/schemas/diff/{subject}?from=1&to=2")
    assert status == 200
    assert "is compatible with version 1" in text_of(older, "compatibility")
    assert any(line.startswith("+") and '"note"' in line for line in diff_lines(older))

    missing, _ = get(f"{broker.http_url}/schemas/subjects/{topic}-nothing")
    assert missing == 404
    no_version, _ = get(f"{broker.http_url}/schemas/diff/{subject}?from=1&to=9")
    assert no_version == 404


def test_the_topic_page_links_to_its_subjects(
    broker: BrokerProcess, confluent: ConfluentRegistryClient
) -> None:
    topic = unique_topic_name("linked")
    create_topic(broker.bootstrap, topic)
    confluent.register_schema(f"{topic}-value", ConfluentSchema(json.dumps(ORDER_V1), "AVRO"))
    _, page = get(f"{broker.http_url}/topics/{topic}")
    assert f'href="/schemas/subjects/{topic}-value"' in page
    assert f"/schemas/subjects/{topic}-key" not in page
    plain = unique_topic_name("unlinked")
    create_topic(broker.bootstrap, plain)
    _, unlinked = get(f"{broker.http_url}/topics/{plain}")
    assert "/schemas/subjects/" not in unlinked


def test_the_browser_decodes_avro_json_and_protobuf_values(
    broker: BrokerProcess, confluent: ConfluentRegistryClient
) -> None:
    topic = unique_topic_name("decoded")
    create_topic(broker.bootstrap, topic)
    avro = AvroSerializer(confluent, json.dumps(ORDER_V1))
    as_json = JSONSerializer(json.dumps(CUSTOMER_JSON), confluent)
    proto_id = confluent.register_schema(
        f"{topic}-payment", ConfluentSchema(PAYMENT_PROTO, "PROTOBUF")
    )
    protobuf = format_for(SchemaType.PROTOBUF)
    parsed = protobuf.parse(PAYMENT_PROTO, [])
    value_context = SerializationContext(topic, MessageField.VALUE)
    key_context = SerializationContext(topic, MessageField.KEY)
    producer = Producer(producer_config(broker.bootstrap))
    producer.produce(
        topic,
        key=as_json({"name": "Ada", "vip": True}, key_context),
        value=avro({"id": "o-1", "cents": 1250}, value_context),
    )
    producer.produce(
        topic, value=frame(proto_id, protobuf.encode(parsed, {"id": "p-1", "cents": 99}))
    )
    producer.produce(topic, key=b"plain", value=b'{"not": "framed"}')
    producer.produce(topic, value=frame(987_654, b"\x02\x06abc"))  # an id nobody has
    assert producer.flush(30) == 0

    status, page = get(f"{broker.http_url}/topics/{topic}/messages?partition=0&offset=0")
    assert status == 200
    shown = rows(page, "messages")
    assert len(shown) == 4
    avro_id = confluent.get_latest_version(f"{topic}-value").schema_id
    badge, _, value = shown[0][5].partition("\n")
    assert badge == f"schema id {avro_id} · {topic}-value v1"
    assert json.loads(value) == {"id": "o-1", "cents": 1250}
    key_badge, _, key = shown[0][3].partition("\n")
    assert key_badge.startswith("schema id ") and key_badge.endswith(f"{topic}-key v1")
    assert json.loads(key) == {"name": "Ada", "vip": True}
    badge, _, value = shown[1][5].partition("\n")
    assert badge == f"schema id {proto_id} · {topic}-payment v1"
    assert json.loads(value) == {"id": "p-1", "cents": "99"}  # int64 as Protobuf's JSON
    assert shown[2][3] == "plain" and shown[2][5] == '{"not": "framed"}'
    assert "schema id 987654:" in shown[3][5] and "shown as stored" in shown[3][5]
    # Hex shows the bytes as stored: nothing decoded.
    _, raw = get(f"{broker.http_url}/topics/{topic}/messages?partition=0&offset=0&format=hex")
    assert "schema-badge" not in raw


def test_a_registry_that_does_not_answer_is_said_plainly(
    broker: BrokerProcess, confluent: ConfluentRegistryClient
) -> None:
    topic = unique_topic_name("unanswered")
    create_topic(broker.bootstrap, topic)
    avro = AvroSerializer(confluent, json.dumps(ORDER_V1))
    producer = Producer(producer_config(broker.bootstrap))
    producer.produce(
        topic,
        value=avro({"id": "o-2", "cents": 5}, SerializationContext(topic, MessageField.VALUE)),
    )
    assert producer.flush(30) == 0
    # A bound socket that does not listen: connections are refused, and no other
    # process can take the port while the test holds it.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        with running_console(broker.bootstrap, "--schema-registry", url) as console:
            status, page = get(f"{console.url}/schemas")
            assert status == 503
            assert "Schema Registry unreachable" in page
            assert f"cannot reach the schema registry at {url}" in page
            status, topic_page = get(f"{console.url}/topics/{topic}")
            assert status == 200 and "/schemas/subjects/" not in topic_page
            status, messages = get(f"{console.url}/topics/{topic}/messages?partition=0&offset=0")
            assert status == 200
            [row] = rows(messages, "messages")
            assert "cannot reach the schema registry" in row[5] and "shown as stored" in row[5]
        with running_console(broker.bootstrap, "--schema-registry", "") as console:
            status, page = get(f"{console.url}/schemas")
            assert status == 503 and "without a Schema Registry" in page


def test_a_secured_brokers_console_asks_the_registry_as_the_signed_in_user(
    tmp_path: Path,
) -> None:
    seed_users(tmp_path / "data", SASL_USERS)
    broker = BrokerProcess(
        tmp_path / "data",
        http_port=0,
        overrides={
            "listeners": f"SASL_PLAINTEXT://{HOST}:0",
            "sluice.sasl.plain.insecure.allow": "true",
        },
    )
    broker.start()
    try:
        assert broker.schema_registry_url is not None
        alice = ("alice", SASL_USERS["alice"])
        registry = ConfluentRegistryClient(
            {"url": broker.schema_registry_url, "basic.auth.user.info": ":".join(alice)}
        )
        subject = f"{unique_topic_name('secured')}-value"
        schema_id = registry.register_schema(subject, ConfluentSchema(json.dumps(ORDER_V1), "AVRO"))
        status, page = get(f"{broker.http_url}/schemas", auth=alice)
        assert status == 200
        assert [subject, "1", str(schema_id), "AVRO"] == rows(page, "subjects")[0][:4]
        refused, _ = get(f"{broker.http_url}/schemas")
        assert refused == 401
    finally:
        broker.stop()
