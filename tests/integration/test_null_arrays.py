"""A null (-1) array where the schema forbids one, sent over a real socket.

Kafka's parser refuses such a request ("non-nullable field ... was serialized as null")
and the broker closes the connection; before the check, kio handed the handler a None
for Produce's topic array and the broker logged a TypeError traceback.
"""

from __future__ import annotations

import struct

from client_helpers import round_trip_one_message
from kafka_wire import KafkaConnection, metadata_request

NONE = 0


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    client_id = b"null-arrays"
    payload = struct.pack(">hhih", api_key, version, 5, len(client_id)) + client_id + body
    return struct.pack(">i", len(payload)) + payload


def test_a_produce_whose_topic_array_is_null_closes_the_connection_without_a_traceback(broker):
    # transactional_id null, acks -1, timeout 1000 ms, topic_data count -1
    body = struct.pack(">hhii", -1, -1, 1000, -1)
    with KafkaConnection(broker.host, broker.port) as connection:
        connection.send_bytes(_frame(0, 8, body))
        assert connection.wait_closed_by_peer(), "the broker kept the connection open"
    log_text = broker.log_tail()
    assert "ProduceRequest.topic_data is null but not nullable" in log_text
    assert "Traceback" not in log_text
    round_trip_one_message(broker.bootstrap)


def test_a_metadata_v1_request_with_null_topics_is_answered_with_every_topic(broker):
    """Where the schema allows null (Metadata v1+: all topics), null is still accepted."""
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(metadata_request(None))
        assert response.brokers
