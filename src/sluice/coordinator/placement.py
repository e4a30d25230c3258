"""Which partition of a coordinator's topic (and so which broker) coordinates a key: a
group on ``__consumer_offsets``, a transactional id on ``__transaction_state``, a
share-partition (``group:topic id:partition``) on ``__share_group_state``.

Kafka's rule, so clients and tools that compute it themselves agree:
``Utils.abs(groupId.hashCode()) % partitionCount``, where ``hashCode`` is Java's
``String.hashCode`` (over UTF-16 code units, int32 arithmetic) and ``Utils.abs`` is
``x & 0x7fffffff`` (not ``Math.abs``, which stays negative for ``Integer.MIN_VALUE``).
"""

from __future__ import annotations

_INT32_MASK = 0xFFFF_FFFF


def java_string_hashcode(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text``: an int32."""
    encoded = text.encode("utf-16-be", "surrogatepass")
    value = 0
    for index in range(0, len(encoded), 2):
        value = (31 * value + ((encoded[index] << 8) | encoded[index + 1])) & _INT32_MASK
    return value - (1 << 32) if value >= 1 << 31 else value


def partition_for(key: str, partition_count: int) -> int:
    """The partition of the coordinator's topic holding ``key`` (a group id, a
    transactional id)."""
    assert partition_count > 0, "a coordinator's topic has at least one partition"
    return (java_string_hashcode(key) & 0x7FFF_FFFF) % partition_count
