"""Schema validation in a cluster of two brokers: a validated topic led by the broker that
does not host the registry (``_schemas``-0 is led by the other) has its schema ids
looked up through the forwarded registry calls, so Confluent's serializer's records go in
and plain bytes are refused, through confluent-kafka's producer."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from cluster_processes import running_cluster
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

TIMEOUT_S = 30.0
SCHEMA = json.dumps(
    {"type": "record", "name": "Reading", "fields": [{"name": "value", "type": "long"}]}
)


def _delivered(producer: Producer, topic: str, value: bytes) -> str | None:
    """Produce one record; its delivery error's name, None when it went in."""
    outcome: list[str | None] = []
    producer.produce(
        topic,
        value,
        on_delivery=lambda error, _message: outcome.append(None if error is None else error.name()),
    )
    assert producer.flush(TIMEOUT_S) == 0, "the record got no answer"
    return outcome[0]


def test_a_topic_led_away_from_the_registry_validates_through_forwarded_lookups(
    tmp_path: Path, zookeeper_connect: str
) -> None:
    with running_cluster(tmp_path, zookeeper_connect, 2) as cluster:
        registry_url = cluster.brokers[0].schema_registry_url
        assert registry_url is not None, cluster.log_tails()
        registry = SchemaRegistryClient({"url": registry_url})
        topic = f"readings-{uuid.uuid4().hex[:8]}"
        serializer = AvroSerializer(registry, SCHEMA)
        value = serializer({"value": 7}, SerializationContext(topic, MessageField.VALUE))
        assert value is not None  # registered: _schemas exists and has a leader now
        admin = cluster.admin(cluster.brokers[0])
        registry_leader = (
            admin.list_topics("_schemas", timeout=10).topics["_schemas"].partitions[0].leader
        )
        other = next(b.node_id for b in cluster.brokers if b.node_id != registry_leader)
        created = admin.create_topics(
            [
                NewTopic(
                    topic,
                    num_partitions=1,
                    replica_assignment=[[other]],
                    config={"confluent.value.schema.validation": "true"},
                )
            ]
        )
        created[topic].result(timeout=TIMEOUT_S)
        producer = Producer(
            {"bootstrap.servers": cluster.bootstrap, "retries": 0, "message.timeout.ms": 20_000}
        )
        assert _delivered(producer, topic, value) is None, cluster.log_tails()
        assert _delivered(producer, topic, b"plain bytes") == "INVALID_RECORD"
        leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
        assert leader == other != registry_leader
