"""A request carrying a tagged field the broker's version does not know (KIP-482) gets
a normal answer, and the connection stays open, as with Kafka."""

from __future__ import annotations

import struct
from typing import Any

from kafka_wire import KafkaConnection
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12 import request as metadata_v12

from sluice.protocol.codec import decode_response, encode_request

UNKNOWN_SECTION = bytes([1, 9, 2, 0xAA, 0xBB])  # one field: tag 9, size 2


def _with_unknown_tag(payload: Any, correlation_id: int) -> bytes:
    """The framed request with its (empty) top-level tagged fields replaced by one
    field of an unknown tag."""
    framed = encode_request(correlation_id, "sluice-test", payload)
    assert framed.endswith(b"\x00")
    message = framed[4:-1] + UNKNOWN_SECTION
    return struct.pack(">i", len(message)) + message


def test_unknown_tagged_fields_are_skipped(broker: Any) -> None:
    api_versions = ApiVersionsRequest(client_software_name="sluic", client_software_version="1")
    metadata = metadata_v12.MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        for correlation_id, payload in ((1, api_versions), (2, metadata), (3, api_versions)):
            connection.send_bytes(_with_unknown_tag(payload, correlation_id))
            answered_id, response = decode_response(
                int(payload.__api_key__), int(payload.__version__), connection.read_frame()
            )
            assert answered_id == correlation_id
            assert int(response.error_code if hasattr(response, "error_code") else 0) == 0
            if payload is metadata:
                assert response.brokers, response
        assert not connection.wait_closed_by_peer(timeout_s=0.5)
