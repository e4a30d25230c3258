"""The framing Confluent's serializers put in front of a key or value::

    +-------+-------------------+-------------------------------+
    | magic | schema id         | payload                       |
    | 0x00  | int32, big endian | (Protobuf: message indexes,   |
    |       |                   |  then the message)            |
    +-------+-------------------+-------------------------------+

A value that does not start this way was not written by a schema-aware serializer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

MAGIC_BYTE: Final = 0
HEADER_BYTES: Final = 5
_HEADER = struct.Struct(">Bi")


class NotFramed(ValueError):
    """Bytes that do not start with the magic byte and a schema id."""


@dataclass(frozen=True, slots=True)
class Framed:
    schema_id: int
    payload: memoryview


def schema_id_of(data: bytes | memoryview) -> int:
    """The schema id in ``data``'s header. Raises :class:`NotFramed`."""
    if len(data) < HEADER_BYTES:
        raise NotFramed(f"{len(data)} bytes: shorter than the 5-byte header (magic byte, id)")
    magic, schema_id = _HEADER.unpack_from(data)
    if magic != MAGIC_BYTE:
        raise NotFramed(f"first byte is {magic:#04x}, not the magic byte 0x00")
    found: int = schema_id
    return found


def unframe(data: bytes | memoryview) -> Framed:
    """Split ``data`` into its schema id and payload. Raises :class:`NotFramed`."""
    schema_id = schema_id_of(data)
    return Framed(schema_id, memoryview(data)[HEADER_BYTES:])


def frame(schema_id: int, payload: bytes) -> bytes:
    """``payload`` behind the magic byte and ``schema_id``."""
    return _HEADER.pack(MAGIC_BYTE, schema_id) + payload
