"""Request and response codec over kio's generated schemas.

A request frame (after the size prefix) is::

    ┌──────────── request header ────────────┐┌──── body ────┐
    api_key int16 │ api_version int16 │ correlation_id int32 │ client_id nullable string
    │ [tagged fields, header v2 only] │ body fields per the API's schema

Header v2 (with tagged fields) is used exactly when the request version is flexible. A
response is ``correlation_id int32`` [+ tagged fields when flexible, except ApiVersions
whose response header is always v0] followed by the body.

Handlers are written once against kio's dataclasses; the version only selects the schema
(no class per version). Everything here is pure: bytes in, objects out, and back.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.serial import entity_reader
from kio.serial.errors import SerialError
from kio.static.constants import EntityType

from sluice.common.errors import ProtocolError
from sluice.protocol import compiled_writer, fast_codecs, private
from sluice.protocol.bounds import checked_body
from sluice.protocol.framing import frame, size_prefix
from sluice.protocol.versions import ApiKey, request_is_flexible

_HEADER_FIXED = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

# Produce v0-2 bodies are v3 bodies without the leading transactional_id; kio has no
# schema for them, so they are read as v3 with a null transactional_id prepended.
_NULL_STRING = b"\xff\xff"


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_header(frame_bytes: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame; enough to answer."""
    if len(frame_bytes) < _HEADER_FIXED.size:
        raise ProtocolError(f"request of {len(frame_bytes)} bytes is too short for a header")
    api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(frame_bytes, 0)
    return int(api_key), int(api_version), int(correlation_id)


def parse_request_header(frame_bytes: bytes) -> tuple[RequestHeader, int]:
    """Parse the request header; return it and the offset where the body starts."""
    api_key, api_version, correlation_id = peek_header(frame_bytes)
    position = _HEADER_FIXED.size
    try:
        if len(frame_bytes) < position + 2:
            raise ProtocolError("request header ends before its client id")
        (length,) = _INT16.unpack_from(frame_bytes, position)
        position += 2
        client_id: str | None = None
        if length >= 0:
            raw = frame_bytes[position : position + length]
            if len(raw) != length:
                raise ProtocolError("request header client id is truncated")
            client_id = raw.decode("utf-8", errors="replace")
            position += length
        if request_is_flexible(api_key, api_version):
            position = _skip_tagged_fields(frame_bytes, position)
    except (IndexError, struct.error) as e:
        raise ProtocolError(f"malformed request header: {e}") from None
    return RequestHeader(api_key, api_version, correlation_id, client_id), position


def _read_uvarint(data: bytes, position: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if position >= len(data):
            raise ProtocolError("unsigned varint runs past the end of the request")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7
        if shift > 28:
            raise ProtocolError("unsigned varint is longer than 5 bytes")


def _skip_tagged_fields(data: bytes, position: int) -> int:
    count, position = _read_uvarint(data, position)
    for _ in range(count):
        _tag, position = _read_uvarint(data, position)
        size, position = _read_uvarint(data, position)
        position += size
        if position > len(data):
            raise ProtocolError("tagged field runs past the end of the request")
    return position


@cache
def request_schema(api_key: int, api_version: int) -> type[Any] | None:
    """kio's request class for a version, or None if kio does not know it."""
    try:
        return load_request_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return None


@cache
def response_schema(api_key: int, api_version: int) -> type[Any] | None:
    try:
        return load_response_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return None


def decode_request_body(header: RequestHeader, frame_bytes: bytes, body_offset: int) -> Any:
    """Decode a request body with kio. Raises ProtocolError for bytes that do not parse.

    Counts and lengths are checked against the bytes that remain before kio allocates
    anything, and nulls where the schema forbids them are refused, so a hostile body is
    an error here, never an abort in kio. The hot requests take the hand-written checks
    of :mod:`sluice.protocol.fast_codecs`; the rest, and anything those leave, the
    schema walk (:mod:`sluice.protocol.bounds`).
    """
    payload = fast_codecs.decode_request(header, frame_bytes, body_offset)
    if payload is not None:
        return payload
    return decode_request_body_generic(header, frame_bytes, body_offset)


def decode_request_body_generic(header: RequestHeader, frame_bytes: bytes, body_offset: int) -> Any:
    """:func:`decode_request_body` by the schema walk and kio alone: the reference the
    fast path is tested against, and the path for every request it does not take."""
    api_key, version = header.api_key, header.api_version
    if api_key == ApiKey.PRODUCE and version < 3:
        frame_bytes, body_offset, version = _NULL_STRING + frame_bytes[body_offset:], 0, 3
    schema = request_schema(api_key, version)
    if schema is None:
        raise ProtocolError(f"no schema for API {api_key} version {version}")
    frame_bytes, _end = checked_body(schema, frame_bytes, body_offset)
    try:
        payload, size = entity_reader(schema)(frame_bytes, body_offset)
    except (
        SerialError,
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        OverflowError,
        UnicodeDecodeError,
    ) as e:
        raise ProtocolError(f"malformed {schema.__name__} v{version}: {e}") from None
    trailing = len(frame_bytes) - body_offset - size
    if trailing and not _trailing_bytes_tolerated(
        payload, frame_bytes[len(frame_bytes) - trailing :]
    ):
        raise ProtocolError(
            f"{schema.__name__} v{version} has {len(frame_bytes) - body_offset - size} "
            "trailing bytes"
        )
    return payload


LIBRDKAFKA_ALL_TOPICS_METADATA_JUNK_BYTES = 3
"""librdkafka (2.x) asks for all topics in Metadata v9+ by leaving its 4-byte array-count
placeholder in place: a null compact array (one byte) and three zero bytes, after which
the real fields follow. Kafka reads the zeros as the remaining fields and ignores what is
left; so does Sluice, for exactly this request and no other."""


LIBRDKAFKA_ALTER_SCRAM_EXTRA_TAGS = b"\x00"
"""librdkafka (2.x) ends AlterUserScramCredentials v0 with one more empty tagged-field
section than the schema has; Kafka ignores what is left after the fields, and Sluice
ignores exactly that byte on exactly this request."""


def _trailing_bytes_tolerated(payload: Any, trailing: bytes) -> bool:
    api_key = int(payload.__api_key__)
    if api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        return trailing == LIBRDKAFKA_ALTER_SCRAM_EXTRA_TAGS
    return (
        len(trailing) == LIBRDKAFKA_ALL_TOPICS_METADATA_JUNK_BYTES
        and api_key == ApiKey.METADATA
        and bool(payload.__flexible__)
        and payload.topics is None
    )


def _response_header_is_flexible(payload: Any) -> bool:
    return bool(payload.__header_schema__.__flexible__)


def encode_body(payload: Any) -> bytes:
    """The bytes of a kio payload: kio's own, by the writer generated for its class
    (:mod:`sluice.protocol.compiled_writer`)."""
    return compiled_writer.encode(payload)


def response_header_bytes(correlation_id: int, flexible: bool) -> bytes:
    header = _INT32.pack(correlation_id)
    return header + b"\x00" if flexible else header


def encode_response(correlation_id: int, payload: Any) -> bytes:
    """A whole response frame, size prefix included (written by hand for the hot
    responses, :mod:`sluice.protocol.fast_codecs`)."""
    fast = fast_codecs.encode_response(correlation_id, payload)
    if fast is not None:
        return fast
    return encode_response_generic(correlation_id, payload)


def encode_response_generic(correlation_id: int, payload: Any) -> bytes:
    """:func:`encode_response` by the writer generated for the payload's class, which
    writes kio's bytes: the reference for the hand-written fast path."""
    parts = [b"", response_header_bytes(correlation_id, _response_header_is_flexible(payload))]
    compiled_writer.writer(type(payload))(payload, parts)
    parts[0] = size_prefix(sum(map(len, parts)))
    return b"".join(parts)


# ── client side ────────────────────────────────────────────────────────────────────────


def encode_request(correlation_id: int, client_id: str | None, payload: Any) -> bytes:
    """A whole request frame for a kio request payload (or one of Sluice's own,
    :class:`~sluice.protocol.private.PrivateRequest`), size prefix included."""
    if isinstance(payload, private.PrivateRequest):
        return frame(private.encode_request_frame(correlation_id, client_id, payload))
    api_key = int(payload.__api_key__)
    version = int(payload.__version__)
    parts = [b"", _HEADER_FIXED.pack(api_key, version, correlation_id)]
    if client_id is None:
        parts.append(_INT16.pack(-1))
    else:
        encoded = client_id.encode()
        parts.append(_INT16.pack(len(encoded)))
        parts.append(encoded)
    if request_is_flexible(api_key, version):
        parts.append(b"\x00")
    compiled_writer.writer(type(payload))(payload, parts)
    parts[0] = size_prefix(sum(map(len, parts)))
    return b"".join(parts)


def decode_response(api_key: int, api_version: int, frame_bytes: bytes) -> tuple[int, Any]:
    """(correlation_id, payload) of a response frame (without its size prefix); the
    payload of one of Sluice's own APIs is its JSON object."""
    if private.is_private(api_key):
        return private.decode_response_frame(frame_bytes)
    schema = response_schema(api_key, api_version)
    if schema is None:
        raise ProtocolError(f"no schema for API {api_key} version {api_version}")
    if len(frame_bytes) < 4:
        raise ProtocolError("response is shorter than its correlation id")
    (correlation_id,) = _INT32.unpack_from(frame_bytes, 0)
    position = 4
    if schema.__header_schema__.__flexible__:
        position = _skip_tagged_fields(frame_bytes, position)
    payload = fast_codecs.decode_response_body(api_key, api_version, frame_bytes, position)
    if payload is not None:
        return int(correlation_id), payload
    frame_bytes, _end = checked_body(schema, frame_bytes, position)
    try:
        payload, _size = entity_reader(schema)(frame_bytes, position)
    except (
        SerialError,
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        OverflowError,
        UnicodeDecodeError,
    ) as e:
        raise ProtocolError(f"malformed {schema.__name__} v{api_version}: {e}") from None
    return int(correlation_id), payload


__all__ = [
    "EntityType",
    "RequestHeader",
    "decode_request_body",
    "decode_response",
    "encode_request",
    "encode_response",
    "parse_request_header",
    "peek_header",
]
