"""Confluent's own clients, unmodified, against a real broker's Schema Registry: the
serializers and deserializers of confluent-kafka-python (Avro, JSON Schema, Protobuf)
round-tripping records through a real producer and consumer, and the API surface its
``SchemaRegistryClient`` uses (register, evolve, refuse, look up, versions,
compatibility and mode, references, normalize, soft and hard delete).

One broker process serves the module; each test works in subjects of its own topic. The
README's Schema Registry example runs here too, as a newcomer runs it (its broker and
registry addresses replaced by the test broker's).
Restarts, SASL and a cluster's leader are the other registry modules' business
(test_schema_registry_broker.py, tests/cluster/test_schema_registry_cluster.py).
"""

from __future__ import annotations

import importlib
import importlib.resources
import json
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
from broker_process import BrokerProcess
from client_helpers import (
    consume_exactly,
    create_topic,
    produce_and_flush,
    producer_config,
    unique_topic_name,
)
from confluent_kafka import Producer
from confluent_kafka.schema_registry import (
    RegisteredSchema,
    Schema,
    SchemaReference,
    SchemaRegistryClient,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.schema_registry.schema_registry_client import (
    ConfigCompatibilityLevel,
    ServerConfig,
)
from confluent_kafka.serialization import MessageField, SerializationContext
from grpc_tools import protoc
from readme_blocks import (
    README_ADDRESS,
    README_SCHEMA_REGISTRY,
    assert_shows,
    blocks,
    run,
    shown_after,
)

PROTO_PACKAGE_DIR = "sluice_registry_e2e"
"""Where the Protobuf files compiled for this module live (their import path, hence the
subject Confluent's serializer registers a referenced file under)."""
MONEY_PROTO = """syntax = "proto3";
package sluice.e2e;

message Money {
  string currency = 1;
  int64 units = 2;
}
"""
ORDER_PROTO = f"""syntax = "proto3";
package sluice.e2e;

import "{PROTO_PACKAGE_DIR}/money.proto";
import "google/protobuf/timestamp.proto";

message Order {{
  string id = 1;
  Money total = 2;
  google.protobuf.Timestamp placed = 3;
  repeated string lines = 4;
}}
"""


@pytest.fixture(scope="module")
def broker(fast_groups_broker: BrokerProcess) -> BrokerProcess:
    """The module's broker forms groups at once (the README's example subscribes)."""
    return fast_groups_broker


def _client(broker: BrokerProcess) -> SchemaRegistryClient:
    """A new client (Confluent's client caches what it registers and reads: a new one
    asks the registry again)."""
    assert broker.schema_registry_url is not None
    return SchemaRegistryClient({"url": broker.schema_registry_url})


def _avro_record(name: str, *fields: dict[str, Any], namespace: str = "shop") -> str:
    return json.dumps(
        {"type": "record", "name": name, "namespace": namespace, "fields": list(fields)}
    )


def _round_trip(
    broker: BrokerProcess,
    topic: str,
    serialize: Callable[[Any, SerializationContext], bytes | None],
    deserialize: Callable[[bytes, SerializationContext], Any],
    values: list[Any],
) -> list[Any]:
    """``values`` serialized, produced to ``topic``, consumed and deserialized again."""
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer(producer_config(broker.bootstrap))
    delivered = produce_and_flush(
        producer, topic, [{"value": serialize(value, context), "partition": 0} for value in values]
    )
    messages = consume_exactly(
        broker.bootstrap, [(topic, 0)], len(values), start_offset=delivered[0].offset
    )
    return [deserialize(message.value(), context) for message in messages]


def _refused(call: Callable[[], object]) -> SchemaRegistryError:
    with pytest.raises(SchemaRegistryError) as refused:
        call()
    return refused.value


@pytest.fixture
def topic(broker: BrokerProcess) -> str:
    name = unique_topic_name("registry")
    create_topic(broker.bootstrap, name)
    return name


def test_avro_records_round_trip_and_a_subject_evolves_backward(
    broker: BrokerProcess, topic: str
) -> None:
    client = _client(broker)
    subject = f"{topic}-value"
    v1 = _avro_record("Order", {"name": "id", "type": "string"})
    v2 = _avro_record(
        "Order",
        {"name": "id", "type": "string"},
        {"name": "amount", "type": "long", "default": 0},
    )
    first = _round_trip(
        broker,
        topic,
        AvroSerializer(client, v1),
        AvroDeserializer(client),
        [{"id": "a"}, {"id": "b"}],
    )
    assert first == [{"id": "a"}, {"id": "b"}]
    v1_id = client.get_latest_version(subject).schema_id
    # A field added with a default: compatible under the default level, BACKWARD.
    assert _client(broker).get_compatibility() == "BACKWARD"
    second = _round_trip(
        broker,
        topic,
        AvroSerializer(client, v2),
        AvroDeserializer(client),
        [{"id": "c", "amount": 7}],
    )
    assert second == [{"id": "c", "amount": 7}]
    fresh = _client(broker)
    latest = fresh.get_latest_version(subject)
    assert latest.version == 2 and latest.schema_id != v1_id
    assert fresh.get_versions(subject) == [1, 2]
    assert json.loads(fresh.get_schema(v1_id).schema_str)["fields"] == [
        {"name": "id", "type": "string"}
    ]
    # A reader of the old data given the new schema: the added field takes its default.
    reader = AvroDeserializer(fresh, schema_str=v2)
    context = SerializationContext(topic, MessageField.VALUE)
    framed = AvroSerializer(fresh, v1, conf={"auto.register.schemas": False})({"id": "z"}, context)
    assert framed is not None and reader(framed, context) == {"id": "z", "amount": 0}
    # A field added without a default is not: 409, and nothing registered.
    v3 = _avro_record("Order", {"name": "id", "type": "string"}, {"name": "note", "type": "string"})
    error = _refused(lambda: fresh.register_schema(subject, Schema(v3, "AVRO")))
    assert error.http_status_code == 409 and error.error_code == 40901, error
    assert "note" in error.error_message
    assert _client(broker).get_versions(subject) == [1, 2]
    check = fresh.test_compatibility(subject, Schema(v3, "AVRO"))
    assert check is False


def test_lookup_and_ids_answer_what_was_registered(broker: BrokerProcess, topic: str) -> None:
    client = _client(broker)
    subject = f"{topic}-value"
    schema = Schema(_avro_record("Payment", {"name": "id", "type": "string"}), "AVRO")
    registered = client.register_schema_full_response(subject, schema)
    assert registered.schema_id is not None and registered.version == 1
    # Registering it again, under the same or another subject, gives the same id.
    again = _client(broker)
    assert again.register_schema(subject, schema) == registered.schema_id
    assert again.register_schema(f"{topic}-key", schema) == registered.schema_id
    found = _client(broker).lookup_schema(subject, schema)
    assert (found.schema_id, found.subject, found.version) == (registered.schema_id, subject, 1)
    error = _refused(
        lambda: _client(broker).lookup_schema(
            subject, Schema(_avro_record("Other", {"name": "x", "type": "int"}), "AVRO")
        )
    )
    assert (error.http_status_code, error.error_code) == (404, 40403), error
    error = _refused(lambda: _client(broker).lookup_schema(f"{topic}-nothing", schema))
    assert (error.http_status_code, error.error_code) == (404, 40401), error
    fresh = _client(broker)
    assert sorted(fresh.get_subjects_by_schema_id(registered.schema_id)) == sorted(
        [subject, f"{topic}-key"]
    )
    versions = fresh.get_schema_versions(registered.schema_id)
    assert sorted((v.subject, v.version) for v in versions) == [(f"{topic}-key", 1), (subject, 1)]
    assert {subject, f"{topic}-key"} <= set(fresh.get_subjects())
    assert fresh.get_version(subject, 1).schema_id == registered.schema_id
    assert set(fresh.get_schema_types()) == {"AVRO", "JSON", "PROTOBUF"}
    error = _refused(lambda: fresh.get_schema(2**31 - 1))
    assert (error.http_status_code, error.error_code) == (404, 40403), error
    error = _refused(lambda: fresh.get_version(subject, 9))
    assert (error.http_status_code, error.error_code) == (404, 40402), error


def test_json_schema_records_round_trip(broker: BrokerProcess, topic: str) -> None:
    client = _client(broker)
    schema = json.dumps(
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": "Shipment",
            "type": "object",
            "properties": {"id": {"type": "string"}, "weight": {"type": "number"}},
            "required": ["id"],
        }
    )
    values = [{"id": "s1", "weight": 2.5}, {"id": "s2"}]
    read = _round_trip(
        broker,
        topic,
        JSONSerializer(schema, client),
        JSONDeserializer(None, schema_registry_client=client),
        values,
    )
    assert read == values
    latest = _client(broker).get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "JSON"
    assert json.loads(latest.schema.schema_str)["title"] == "Shipment"
    # Closing an open content model with a new optional property is refused as Confluent
    # refuses it; making a property optional is accepted.
    narrowed = json.loads(schema)
    narrowed["properties"]["weight"] = {"type": "integer"}
    error = _refused(
        lambda: client.register_schema(f"{topic}-value", Schema(json.dumps(narrowed), "JSON"))
    )
    assert error.http_status_code == 409, error
    relaxed = json.loads(schema)
    relaxed["required"] = []
    assert client.register_schema(f"{topic}-value", Schema(json.dumps(relaxed), "JSON")) > 0


def test_a_json_schema_referencing_another_subject(broker: BrokerProcess, topic: str) -> None:
    client = _client(broker)
    address = json.dumps({"type": "object", "properties": {"city": {"type": "string"}}})
    address_subject = f"{topic}-address"
    client.register_schema(address_subject, Schema(address, "JSON"))
    customer = json.dumps(
        {
            "type": "object",
            "properties": {"name": {"type": "string"}, "home": {"$ref": "address.json"}},
        }
    )
    schema = Schema(customer, "JSON", [SchemaReference("address.json", address_subject, 1)])
    value = {"name": "Ada", "home": {"city": "London"}}
    (read,) = _round_trip(
        broker,
        topic,
        JSONSerializer(schema, client),
        JSONDeserializer(None, schema_registry_client=_client(broker)),
        [value],
    )
    assert read == value
    latest = _client(broker).get_latest_version(f"{topic}-value")
    assert [r.name for r in latest.schema.references] == ["address.json"]


@pytest.fixture(scope="module")
def order_pb2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The ``_pb2`` module of :data:`ORDER_PROTO` (which imports :data:`MONEY_PROTO` and a
    well-known type), compiled with grpc_tools' protoc into a temporary directory."""
    root = tmp_path_factory.mktemp("protos")
    package = root / PROTO_PACKAGE_DIR
    package.mkdir()
    (package / "money.proto").write_text(MONEY_PROTO)
    (package / "order.proto").write_text(ORDER_PROTO)
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    status = protoc.main(
        [
            "protoc",
            f"-I{root}",
            f"-I{well_known}",
            f"--python_out={root}",
            f"{PROTO_PACKAGE_DIR}/money.proto",
            f"{PROTO_PACKAGE_DIR}/order.proto",
        ]
    )
    assert status == 0, "protoc failed"
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(f"{PROTO_PACKAGE_DIR}.order_pb2")
    finally:
        sys.path.remove(str(root))


def test_protobuf_records_with_an_import_round_trip(
    broker: BrokerProcess, topic: str, order_pb2: ModuleType
) -> None:
    client = _client(broker)
    order = order_pb2.Order(id="o-1", lines=["tea", "cake"])
    order.total.currency = "EUR"
    order.total.units = 12
    order.placed.seconds = 1_700_000_000
    serializer = ProtobufSerializer(order_pb2.Order, client)
    deserializer = ProtobufDeserializer(order_pb2.Order)
    (read,) = _round_trip(broker, topic, serializer, deserializer, [order])
    assert read == order
    # The import was registered as a subject of its own and referenced by name.
    fresh = _client(broker)
    money_subject = f"{PROTO_PACKAGE_DIR}/money.proto"
    money = fresh.get_latest_version(money_subject)
    assert money.schema.schema_type == "PROTOBUF" and "message Money" in money.schema.schema_str
    latest = fresh.get_latest_version(f"{topic}-value")
    assert [(r.name, r.subject) for r in latest.schema.references] == [
        (money_subject, money_subject)
    ]
    assert fresh.get_referenced_by(money_subject, money.version) == [latest.schema_id]
    # A deserializer that asks for the writer's schema (format=serialized) decodes it too.
    schemaless = ProtobufDeserializer(order_pb2.Order, schema_registry_client=fresh)
    (again,) = _round_trip(broker, topic, serializer, schemaless, [order])
    assert again == order
    # A referenced version cannot be deleted while something references it.
    error = _refused(lambda: fresh.delete_version(money_subject, money.version))
    assert (error.http_status_code, error.error_code) == (422, 42206), error


def test_an_avro_named_type_from_another_subject(broker: BrokerProcess, topic: str) -> None:
    client = _client(broker)
    address = _avro_record("Address", {"name": "city", "type": "string"}, namespace="shop.common")
    address_subject = f"{topic}-address"
    address_version = client.register_schema_full_response(
        address_subject, Schema(address, "AVRO")
    ).version
    customer = _avro_record(
        "Customer",
        {"name": "name", "type": "string"},
        {"name": "home", "type": "shop.common.Address"},
    )
    schema = Schema(
        customer,
        "AVRO",
        [SchemaReference("shop.common.Address", address_subject, address_version)],
    )
    value = {"name": "Ada", "home": {"city": "London"}}
    (read,) = _round_trip(
        broker, topic, AvroSerializer(client, schema), AvroDeserializer(_client(broker)), [value]
    )
    assert read == value
    fresh = _client(broker)
    registered = fresh.get_latest_version(f"{topic}-value")
    assert [(r.name, r.subject, r.version) for r in registered.schema.references] == [
        ("shop.common.Address", address_subject, address_version)
    ]
    assert fresh.get_referenced_by(address_subject, address_version) == [registered.schema_id]
    # Without the reference, the named type is unknown: an invalid schema.
    error = _refused(lambda: fresh.register_schema(f"{topic}-other", Schema(customer, "AVRO")))
    assert (error.http_status_code, error.error_code) == (422, 42201), error


def test_compatibility_levels_and_modes(broker: BrokerProcess, topic: str) -> None:
    client = _client(broker)
    subject = f"{topic}-value"
    v1 = _avro_record("Event", {"name": "id", "type": "string"})
    client.register_schema(subject, Schema(v1, "AVRO"))
    error = _refused(lambda: client.get_compatibility(subject))
    assert (error.http_status_code, error.error_code) == (404, 40408), error
    assert client.set_compatibility(subject, "NONE") == {"compatibility": "NONE"}
    assert _client(broker).get_compatibility(subject) == "NONE"
    assert _client(broker).get_config(subject).compatibility_level is not None
    # Under NONE anything goes, even a schema no reader of the old one could read.
    assert client.register_schema(subject, Schema('"string"', "AVRO")) > 0
    assert client.set_compatibility(subject, "FULL_TRANSITIVE") == {
        "compatibility": "FULL_TRANSITIVE"
    }
    error = _refused(lambda: client.register_schema(subject, Schema('"int"', "AVRO")))
    assert error.http_status_code == 409, error
    error = _refused(lambda: client.set_compatibility(subject, "SIDEWAYS"))
    assert (error.http_status_code, error.error_code) == (422, 42203), error
    deleted = client.delete_config(subject)
    assert deleted.compatibility_level is not None
    assert deleted.compatibility_level.value == "FULL_TRANSITIVE"
    assert _client(broker).get_compatibility() == "BACKWARD"
    # Modes: a read-only subject refuses registrations, and answers reads.
    error = _refused(lambda: client.get_mode(subject))
    assert (error.http_status_code, error.error_code) == (404, 40409), error
    assert client.update_mode(subject, "READONLY") == "READONLY"
    assert _client(broker).get_mode(subject) == "READONLY"
    error = _refused(lambda: _client(broker).register_schema(subject, Schema('"bytes"', "AVRO")))
    assert (error.http_status_code, error.error_code) == (422, 42205), error
    assert _client(broker).get_versions(subject) == [1, 2]
    assert client.delete_mode(subject) == "READONLY"
    assert _client(broker).get_global_mode() == "READWRITE"
    error = _refused(lambda: client.update_mode(subject, "SOMETIMES"))
    assert (error.http_status_code, error.error_code) == (422, 42204), error
    assert _client(broker).register_schema(subject, Schema('"bytes"', "AVRO")) > 0
    assert _client(broker).get_contexts() == ["."]
    # The same through set_config and get_config, as the client's ServerConfig.
    config = ServerConfig(compatibility=ConfigCompatibilityLevel.FORWARD)
    assert client.set_config(subject, config) == {"compatibility": "FORWARD"}
    read_back = _client(broker).get_config(subject).compatibility_level
    assert read_back is ConfigCompatibilityLevel.FORWARD


def test_normalize_registers_equivalent_schemas_once(broker: BrokerProcess, topic: str) -> None:
    subject = f"{topic}-value"
    written = json.dumps(
        {
            "type": "record",
            "name": "Item",
            "namespace": "shop",
            "fields": [{"name": "sku", "type": "string", "aliases": ["code", "id"]}],
        }
    )
    reordered = json.dumps(
        {
            "fields": [{"aliases": ["id", "code"], "type": "string", "name": "sku"}],
            "name": "shop.Item",
            "type": "record",
        }
    )
    client = _client(broker)
    first = client.register_schema(subject, Schema(written, "AVRO"), normalize_schemas=True)
    second = _client(broker).register_schema(
        subject, Schema(reordered, "AVRO"), normalize_schemas=True
    )
    assert first == second
    assert _client(broker).get_versions(subject) == [1]
    found = _client(broker).lookup_schema(
        subject, Schema(reordered, "AVRO"), normalize_schemas=True
    )
    assert found.schema_id == first
    # The serializer's own normalize.schemas does the same.
    serializer = AvroSerializer(_client(broker), reordered, conf={"normalize.schemas": True})
    framed = serializer({"sku": "x"}, SerializationContext(topic, MessageField.VALUE))
    assert framed is not None and int.from_bytes(framed[1:5], "big") == first


def test_soft_and_hard_deletes_as_confluent_s_client_sees_them(
    broker: BrokerProcess, topic: str
) -> None:
    client = _client(broker)
    subject = f"{topic}-value"
    ids = [
        client.register_schema(
            subject,
            Schema(
                _avro_record(
                    "Row", *({"name": f"f{i}", "type": "int", "default": 0} for i in range(n))
                ),
                "AVRO",
            ),
        )
        for n in (1, 2, 3)
    ]
    # A soft-deleted version disappears from the listings; its id still reads.
    assert client.delete_version(subject, 1) == 1
    fresh = _client(broker)
    assert fresh.get_versions(subject) == [2, 3]
    assert fresh.get_schema(ids[0]).schema_str
    error = _refused(lambda: fresh.get_version(subject, 1))
    assert (error.http_status_code, error.error_code) == (404, 40402), error
    assert fresh.get_version(subject, 1, deleted=True).schema_id == ids[0]
    assert fresh.get_versions(subject, deleted=True) == [1, 2, 3]
    first = fresh.get_schema(ids[0])
    error = _refused(lambda: _client(broker).lookup_schema(subject, first))
    assert (error.http_status_code, error.error_code) == (404, 40403), error
    assert _client(broker).lookup_schema(subject, first, deleted=True).version == 1
    error = _refused(lambda: fresh.delete_version(subject, 1))
    assert (error.http_status_code, error.error_code) == (404, 40406), error
    error = _refused(lambda: fresh.delete_version(subject, 2, permanent=True))
    assert (error.http_status_code, error.error_code) == (404, 40407), error
    # Hard delete of the soft-deleted version: gone, and its id with it.
    assert fresh.delete_version(subject, 1, permanent=True) == 1
    error = _refused(lambda: _client(broker).get_schema(ids[0]))
    assert (error.http_status_code, error.error_code) == (404, 40403), error
    # The subject: soft delete, then hard.
    error = _refused(lambda: fresh.delete_subject(subject, permanent=True))
    assert (error.http_status_code, error.error_code) == (404, 40405), error
    assert sorted(fresh.delete_subject(subject)) == [2, 3]
    after = _client(broker)
    assert subject not in after.get_subjects()
    assert subject in after.get_subjects(deleted=True)
    error = _refused(lambda: after.get_latest_version(subject))
    assert (error.http_status_code, error.error_code) == (404, 40401), error
    error = _refused(lambda: after.delete_subject(subject))
    assert (error.http_status_code, error.error_code) == (404, 40404), error
    assert after.get_schema(ids[2]).schema_str  # soft-deleted ids still read
    assert sorted(after.delete_subject(subject, permanent=True)) == [2, 3]
    gone = _client(broker)
    assert subject not in gone.get_subjects(deleted=True)
    error = _refused(lambda: gone.get_schema(ids[2]))
    assert (error.http_status_code, error.error_code) == (404, 40403), error
    # Registered anew, the subject starts again from version 1.
    again: RegisteredSchema = gone.register_schema_full_response(
        subject,
        Schema(_avro_record("Row", {"name": "f0", "type": "int", "default": 0}), "AVRO"),
    )
    assert again.version == 1


def test_listings_page_as_the_client_asks(broker: BrokerProcess, topic: str) -> None:
    client = _client(broker)
    subject = f"{topic}-value"
    for n in (1, 2, 3):
        fields = ({"name": f"f{i}", "type": "int", "default": 0} for i in range(n))
        client.register_schema(subject, Schema(_avro_record("Page", *fields), "AVRO"))
    for suffix in ("a", "b"):
        client.register_schema(f"{topic}-{suffix}", Schema('"long"', "AVRO"))
    assert client.get_versions(subject, offset=1, limit=1) == [2]
    assert client.get_versions(subject, offset=2) == [3]
    assert client.get_subjects(subject_prefix=topic) == [f"{topic}-a", f"{topic}-b", subject]
    assert client.get_subjects(subject_prefix=topic, offset=1, limit=1) == [f"{topic}-b"]
    long_id = client.get_latest_version(f"{topic}-a").schema_id
    assert client.get_subjects_by_schema_id(long_id, offset=1, limit=1) == [f"{topic}-b"]
    (second,) = client.get_schema_versions(long_id, offset=1, limit=1)
    assert (second.subject, second.version) == (f"{topic}-b", 1)


def test_the_readme_example_runs_as_written(broker: BrokerProcess) -> None:
    (block,) = blocks("python", "Schema Registry")
    assert README_ADDRESS in block and README_SCHEMA_REGISTRY in block
    assert broker.schema_registry_url is not None
    source = block.replace(README_ADDRESS, broker.bootstrap).replace(
        README_SCHEMA_REGISTRY, broker.schema_registry_url
    )
    assert_shows(run([sys.executable, "-c", source], {}), shown_after(block))
