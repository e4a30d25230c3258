"""Limits on what one decoded request may ask of the broker (``sluice.request.max.partitions``).

The frame size bounds the bytes of a request, not the work it asks for: a 100 MB Fetch or
ListOffsets can name ten million partitions, each looked up and answered. Requests are
counted by the topics and partitions they name (every array whose field names a topic or
a partition, at any depth: Produce's topic_data and partition_data, Fetch's topics,
partitions and forgotten partitions, OffsetFetch's partition indexes, Metadata's topics…)
and one naming more than the limit closes its connection before a handler sees it, as a
request that does not parse does: no answer of every API can say "too many".
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sluice.common.errors import ProtocolError

_NAMING_WORDS = ("topic", "partition")


def named_partitions(request: Any, limit: int) -> int:
    """Topics and partitions ``request`` names, counted until past ``limit``."""
    count = 0
    pending = [request]
    while pending and count <= limit:
        message = pending.pop()
        for name, names_partitions in _array_fields(type(message)):
            value = getattr(message, name)
            if type(value) is not tuple or not value:
                continue
            if names_partitions:
                count += len(value)
            if _is_message(type(value[0])):
                pending.extend(value)
    return count


_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def _array_fields(message_class: type) -> tuple[tuple[str, bool], ...]:
    """The fields of a message class, each with whether it names topics or partitions
    (the per-request walk reads this, kept per class, instead of ``dataclasses.fields``)."""
    found = _FIELDS.get(message_class)
    if found is None:
        found = _FIELDS[message_class] = tuple(
            (field.name, any(word in field.name for word in _NAMING_WORDS))
            for field in dataclasses.fields(message_class)
        )
    return found


def _is_message(value_class: type) -> bool:
    return value_class in _FIELDS or dataclasses.is_dataclass(value_class)


def check_named_partitions(request: Any, limit: int) -> None:
    """Raise ProtocolError (the connection is closed) past ``limit``."""
    if dataclasses.is_dataclass(request) and named_partitions(request, limit) > limit:
        raise ProtocolError(
            f"the request names more than sluice.request.max.partitions={limit} "
            "topics and partitions"
        )
