"""Reading helpers shared by the hand-built body checks of the hot requests
(``produce_codec``, ``fetch_request_codec``, ``fetch_response_codec``).

Those checks are a fast path in front of :mod:`sluice.protocol.bounds`: they either
return where a body ends, having seen every count and length fit and no tagged field
the schema does not know, or None, in which case the caller takes the general path
(the schema walk of ``bounds``, then kio), which refuses a bad body with its precise
error. So the checks never raise on bad bytes: any surprise (a read past the end, a
null, an unknown or unusual tagged field) is None, and they only need to agree with
``bounds`` on the bodies they accept; unit tests hold them to exactly that.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

UVARINT_BYTES_MAX = 5
"""Kafka's unsigned varints for lengths, counts and tags are at most 5 bytes (32 bits)."""
UUID_BYTES = 16


class Unusual(Exception):
    """A body the fast check leaves to the general path."""


BodyCheck = Callable[[bytes, int], int]
"""A hand-written check: where the body at a position ends, raising on any surprise."""


def checked_end(check: BodyCheck, data: bytes, position: int) -> int | None:
    """Where the body at ``data[position:]`` ends by ``check``, or None for any surprise
    (a read past the end, a bad count or length, something :class:`Unusual`)."""
    try:
        return check(data, position)
    except (IndexError, struct.error, Unusual):
        return None


def uvarint_at(data: bytes, position: int) -> tuple[int, int]:
    """The unsigned varint at ``position`` and the position after it. Raises IndexError
    past the end of ``data`` and :class:`Unusual` for a varint longer than 5 bytes."""
    first = data[position]
    if first < 0x80:  # one byte: nearly every count and tag
        return first, position + 1
    result = first & 0x7F
    shift = 7
    position += 1
    for _ in range(UVARINT_BYTES_MAX - 1):
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7
    raise Unusual("unsigned varint longer than 5 bytes")


def compact_count_at(data: bytes, position: int, item_min_bytes: int, what: str) -> tuple[int, int]:
    """A compact array's item count (its varint holds count + 1; a null array is
    unusual) and the position after it; unusual too when that many items of at least
    ``item_min_bytes`` each cannot fit in the bytes left."""
    count, position = uvarint_at(data, position)
    if not count or (count - 1) * item_min_bytes > len(data) - position:
        raise Unusual(what)
    return count - 1, position


def past_compact_topic_key(data: bytes, position: int, by_topic_id: bool) -> int:
    """The position after a topic's key in a flexible body: its id (v13+: 16 bytes) or
    its compact name (a null name is unusual)."""
    if by_topic_id:
        return position + UUID_BYTES
    length, position = uvarint_at(data, position)
    if not length:
        raise Unusual("null topic name")
    return position + length - 1
