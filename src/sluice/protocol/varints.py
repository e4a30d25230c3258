"""Kafka's unsigned varints, written: 7 bits a byte, least significant group first, the
high bit set on every byte but the last. Flexible versions (KIP-482) use them for lengths,
counts and tags. Reading them, with bounds, is :mod:`sluice.protocol.wire_reading`'s
and :mod:`sluice.protocol.bounds`' job."""

from __future__ import annotations

from typing import Final

ONE_BYTE: Final = tuple(bytes((value,)) for value in range(0x80))
"""The encoding of each value below ONE_BYTE_LIMIT, made once."""
ONE_BYTE_LIMIT: Final = 0x80


def uvarint_bytes(value: int) -> bytes:
    """The unsigned varint encoding of ``value`` (a length, a count or a tag)."""
    if value < 0:
        raise ValueError(f"unsigned varint of a negative value: {value}")
    if value < ONE_BYTE_LIMIT:
        return ONE_BYTE[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
