"""Sluice's own APIs on the Kafka port, for what Kafka's protocol has no words for.

They use API keys far above Kafka's (which stay below 100) and are never advertised in
ApiVersions, so no Kafka client sees or sends them; Sluice's client and tools call them
directly. A request is Kafka's request header (version 1: key, version, correlation id,
client id) followed by a UTF-8 JSON object; a response is the correlation id followed by
a JSON object. Both are small (admin calls), bounded by :data:`BODY_BYTES_MAX`.

- ``DESCRIBE_DELAYS`` (32000) v0: the delayed records waiting in partitions led by the
  broker asked. Request ``{"topic": str, "partitions": [int] | null, "limit": int}``;
  response ``{"partitions": [{"partition", "error_code", "error_message", "leader",
  "pending", "fired", "next_due_ms", "first": [{"offset", "due_ms", "schedule_id"}]}]}``.
- ``SCHEMA_REGISTRY_CALL`` (32001) v0: a call of the Schema Registry's REST API that a
  broker received and forwards to the broker hosting the registry (the leader of
  ``_schemas``-0), between brokers only. Request ``{"call": Call.to_json(),
  "principal": "User:name" | null}`` (the caller the sending broker authenticated and
  authorized); response ``Answer.to_json()``, ``{"status", "body"}``; when the broker
  asked does not host the registry, also ``"elsewhere": "moved" | "loading"`` (error
  code 50003, or 50002 while it loads it): the sender looks again.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any, Final

from sluice.common.errors import ProtocolError

DESCRIBE_DELAYS: Final = 32_000
SCHEMA_REGISTRY_CALL: Final = 32_001
PRIVATE_API_KEYS: Final = frozenset({DESCRIBE_DELAYS, SCHEMA_REGISTRY_CALL})
PRIVATE_API_NAMES: Final = {
    DESCRIBE_DELAYS: "SluiceDescribeDelays",
    SCHEMA_REGISTRY_CALL: "SluiceSchemaRegistryCall",
}
BODY_BYTES_MAX: Final = 4 * 1024 * 1024
"""A forwarded registry call holds a schema of up to ``schema.registry.schema.max.bytes``
(1 MiB at most) and its references, as JSON."""

_HEADER = struct.Struct(">hhih")
_CORRELATION_ID = struct.Struct(">i")


class BodyNotEncodable(ProtocolError):
    """A body that cannot be sent: nested too deep for the JSON encoder, or over
    :data:`BODY_BYTES_MAX` once encoded. Sending it again cannot help."""


@dataclass(frozen=True)
class PrivateRequest:
    """A request of one of Sluice's own APIs (quacks like a kio payload for the client:
    ``__api_key__`` and ``__version__``). Its body is encoded once, when it is made:
    one that cannot be sent raises :class:`BodyNotEncodable` here, before any
    connection is involved."""

    api_key: int
    body: dict[str, Any] = field(default_factory=dict)
    version: int = 0
    encoded_body: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "encoded_body", _json(self.body))

    @property
    def __api_key__(self) -> int:
        return self.api_key

    @property
    def __version__(self) -> int:
        return self.version


def is_private(api_key: int) -> bool:
    return api_key in PRIVATE_API_KEYS


def encode_request_frame(
    correlation_id: int, client_id: str | None, request: PrivateRequest
) -> bytes:
    """The request without its size prefix."""
    client = b"" if client_id is None else client_id.encode()
    header = _HEADER.pack(
        request.api_key, request.version, correlation_id, -1 if client_id is None else len(client)
    )
    return header + client + request.encoded_body


def decode_request_body(frame_bytes: bytes, body_offset: int) -> dict[str, Any]:
    """The JSON object after the request header. Raises ProtocolError."""
    return _object(frame_bytes[body_offset:], "request")


def encode_response_frame(correlation_id: int, body: dict[str, Any]) -> bytes:
    """The response without its size prefix."""
    return _CORRELATION_ID.pack(correlation_id) + _json(body)


def decode_response_frame(frame_bytes: bytes) -> tuple[int, dict[str, Any]]:
    if len(frame_bytes) < _CORRELATION_ID.size:
        raise ProtocolError("response is shorter than its correlation id")
    (correlation_id,) = _CORRELATION_ID.unpack_from(frame_bytes, 0)
    return int(correlation_id), _object(frame_bytes[_CORRELATION_ID.size :], "response")


def _json(body: dict[str, Any]) -> bytes:
    """``body`` as UTF-8 JSON. Raises BodyNotEncodable."""
    try:
        # Non-ASCII text as UTF-8, not escaped: a schema's size stays what it was.
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        # A lone surrogate (JSON's "\ud800" decodes to one) has no UTF-8: escaped, it
        # travels and decodes back to what it was.
        data = json.dumps(body, separators=(",", ":")).encode()
    except (RecursionError, ValueError, TypeError) as e:
        raise BodyNotEncodable(f"body cannot be encoded as JSON: {e!r}") from None
    if len(data) > BODY_BYTES_MAX:
        raise BodyNotEncodable(f"body of {len(data)} bytes is over {BODY_BYTES_MAX}")
    return data


def _object(data: bytes, what: str) -> dict[str, Any]:
    if len(data) > BODY_BYTES_MAX:
        raise ProtocolError(f"{what} body of {len(data)} bytes is over {BODY_BYTES_MAX}")
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"{what} body is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} body is not a JSON object")
    return value
