"""Schema validation at the broker, with confluent-kafka's producer and its serializers
against a real broker and the Schema Registry it serves: a topic with
``confluent.value.schema.validation=true`` (or the key's) refuses records whose value
(key) lacks the wire header or carries an id not registered under the subject its
strategy names, with INVALID_RECORD and a message naming the record; records written by
Confluent's AvroSerializer go in; topics without validation are unaffected; and the
configs take effect when altered at run time."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from broker_process import BrokerProcess
from client_helpers import (
    DeliveryFailedError,
    admin_client,
    consume_exactly,
    create_topic,
    produce_and_flush,
    producer_config,
    wait_until,
)
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from confluent_kafka.schema_registry import (
    Schema,
    SchemaRegistryClient,
    record_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from kafka_wire import KafkaConnection, only_partition, produce_request

from sluice.protocol.records import RecordInput, build_batch
from sluice.schemas.wire import frame

INVALID_RECORD = 87

VALUE_VALIDATION = {"confluent.value.schema.validation": "true"}


def _avro_record(name: str, field: str = "amount") -> str:
    return json.dumps(
        {
            "type": "record",
            "name": name,
            "namespace": "com.example",
            "fields": [{"name": field, "type": "long"}],
        }
    )


@pytest.fixture
def registry(broker: BrokerProcess) -> Iterator[SchemaRegistryClient]:
    assert broker.schema_registry_url is not None, "the test broker serves a registry"
    yield SchemaRegistryClient({"url": broker.schema_registry_url})


@pytest.fixture
def producer(broker: BrokerProcess) -> Iterator[Producer]:
    made = Producer(producer_config(broker.bootstrap, retries=0))
    yield made
    made.flush(5)


def _serialized(
    registry: SchemaRegistryClient,
    topic: str,
    schema: str,
    value: dict[str, Any],
    field: str = MessageField.VALUE,
    **conf: Any,
) -> bytes:
    serializer = AvroSerializer(registry, schema, conf=conf or None)
    serialized = serializer(value, SerializationContext(topic, field))
    assert serialized is not None
    return serialized


def _refused(
    connection: KafkaConnection, topic: str, records: list[RecordInput]
) -> tuple[str, dict[int, str]]:
    """Produce ``records`` as one batch (Produce v8): the refusal's error message and
    its ``record_errors`` by batch index."""
    result: Any = only_partition(
        connection.request(produce_request(topic, 0, build_batch(records)))
    )
    assert result.error_code == INVALID_RECORD, result
    return result.error_message, {
        error.batch_index: error.batch_index_error_message for error in result.record_errors
    }


def test_plain_bytes_are_refused_and_avro_serialized_records_accepted(
    broker: BrokerProcess,
    connection: KafkaConnection,
    topic: str,
    registry: SchemaRegistryClient,
    producer: Producer,
) -> None:
    create_topic(broker.bootstrap, topic, config=VALUE_VALIDATION)
    with pytest.raises(DeliveryFailedError, match=r"INVALID_RECORD"):
        produce_and_flush(producer, topic, [{"value": b'{"amount": 1}'}])
    value = _serialized(registry, topic, _avro_record("Payment"), {"amount": 5})
    message, record_errors = _refused(
        connection, topic, [RecordInput(None, value), RecordInput(None, b'{"amount": 1}')]
    )
    assert message.startswith("1 record(s) rejected by the schema validation of"), message
    assert "record 1 of the batch: value has no magic byte" in message, message
    assert record_errors == {
        1: "value has no magic byte: first byte is 0x7b, not the magic byte 0x00"
    }
    delivered = produce_and_flush(producer, topic, [{"value": value}, {"value": None}])
    assert [d.offset for d in delivered] == [0, 1], "the refused record took no offset"
    messages = consume_exactly(broker.bootstrap, [(topic, 0)], 2)
    assert [m.value() for m in messages] == [value, None], "null values (tombstones) pass"


def test_an_unknown_id_or_one_registered_under_another_subject_is_refused(
    broker: BrokerProcess,
    connection: KafkaConnection,
    topic: str,
    registry: SchemaRegistryClient,
    producer: Producer,
) -> None:
    create_topic(broker.bootstrap, topic, config=VALUE_VALIDATION)
    other_id = registry.register_schema(
        f"{topic}-elsewhere-value", Schema(_avro_record("Elsewhere", "other"), "AVRO")
    )
    unknown_id = 2_000_000_000
    _, record_errors = _refused(
        connection,
        topic,
        [RecordInput(None, frame(other_id, b"\x02")), RecordInput(None, frame(unknown_id, b""))],
    )
    assert record_errors == {
        0: f"value has schema id {other_id}, which is not registered under subject '{topic}-value'",
        1: f"value has schema id {unknown_id}, which is unknown to the Schema Registry",
    }
    with pytest.raises(DeliveryFailedError, match=r"INVALID_RECORD"):
        produce_and_flush(producer, topic, [{"value": frame(other_id, b"\x02")}])
    own_id = registry.register_schema(f"{topic}-value", Schema(_avro_record("Own"), "AVRO"))
    delivered = produce_and_flush(producer, topic, [{"value": frame(own_id, b"\x02")}])
    assert delivered[0].offset == 0


def test_keys_are_validated_on_their_own(
    broker: BrokerProcess,
    connection: KafkaConnection,
    topic: str,
    registry: SchemaRegistryClient,
    producer: Producer,
) -> None:
    create_topic(broker.bootstrap, topic, config={"confluent.key.schema.validation": "true"})
    key = _serialized(registry, topic, _avro_record("OrderKey", "id"), {"id": 1}, MessageField.KEY)
    assert registry.get_latest_version(f"{topic}-key").schema_id == int.from_bytes(key[1:5])
    _, record_errors = _refused(connection, topic, [RecordInput(b"raw key", frame(1, b""))])
    assert record_errors == {
        0: "key has no magic byte: first byte is 0x72, not the magic byte 0x00"
    }
    with pytest.raises(DeliveryFailedError, match=r"INVALID_RECORD"):
        produce_and_flush(producer, topic, [{"key": b"raw key", "value": b"any"}])
    delivered = produce_and_flush(
        producer, topic, [{"key": key, "value": b"values are not checked"}, {"value": b"v"}]
    )
    assert [d.offset for d in delivered] == [0, 1], "a null key passes"


def test_record_name_strategy_takes_the_records_full_name(
    broker: BrokerProcess,
    connection: KafkaConnection,
    topic: str,
    registry: SchemaRegistryClient,
    producer: Producer,
) -> None:
    create_topic(
        broker.bootstrap,
        topic,
        config={
            **VALUE_VALIDATION,
            "confluent.value.subject.name.strategy": "io.confluent.kafka.serializers.subject."
            "RecordNameStrategy",
        },
    )
    record = f"Shipment{uuid.uuid4().hex}"
    value = _serialized(
        registry,
        topic,
        _avro_record(record),
        {"amount": 3},
        **{"subject.name.strategy": record_subject_name_strategy},
    )
    assert registry.get_latest_version(f"com.example.{record}").schema_id == int.from_bytes(
        value[1:5]
    )
    assert produce_and_flush(producer, topic, [{"value": value}])[0].offset == 0
    by_topic = _serialized(registry, topic, _avro_record(f"{record}ByTopic"), {"amount": 4})
    _, record_errors = _refused(connection, topic, [RecordInput(None, by_topic)])
    assert f"not registered under subject 'com.example.{record}ByTopic'" in record_errors[0]


def test_a_topic_without_validation_is_unaffected(
    broker: BrokerProcess, topic: str, producer: Producer
) -> None:
    create_topic(broker.bootstrap, topic)
    delivered = produce_and_flush(producer, topic, [{"key": b"k", "value": b"plain bytes"}])
    assert delivered[0].offset == 0


def _alter(bootstrap: str, topic: str, name: str, value: str) -> None:
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
    )
    admin = admin_client(bootstrap)  # kept alive until its answer arrives
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=15)


def _accepted(producer: Producer, topic: str, value: bytes) -> bool:
    try:
        produce_and_flush(producer, topic, [{"value": value}])
    except DeliveryFailedError:
        return False
    return True


def test_altering_the_configs_takes_effect_at_run_time(
    broker: BrokerProcess, topic: str, registry: SchemaRegistryClient, producer: Producer
) -> None:
    create_topic(broker.bootstrap, topic)
    assert _accepted(producer, topic, b"before")
    _alter(broker.bootstrap, topic, "confluent.value.schema.validation", "true")
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = admin_client(broker.bootstrap)
    [described] = admin.describe_configs([resource]).values()
    configs = described.result(timeout=15)
    assert configs["confluent.value.schema.validation"].value == "true"
    assert configs["confluent.value.subject.name.strategy"].value == (
        "io.confluent.kafka.serializers.subject.TopicNameStrategy"
    )
    wait_until(lambda: not _accepted(producer, topic, b"during"), "validation is on")
    assert _accepted(
        producer, topic, _serialized(registry, topic, _avro_record("Late"), {"amount": 1})
    )
    _alter(broker.bootstrap, topic, "confluent.value.schema.validation", "false")
    wait_until(lambda: _accepted(producer, topic, b"after"), "validation is off")
