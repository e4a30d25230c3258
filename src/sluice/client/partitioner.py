"""Which partition a keyed record goes to: murmur2 of the key, like the Java client.

Every Kafka client that wants keyed records to land where the Java producer puts them
uses the same rule, ``positive(murmur2(key)) % partition_count``, where ``positive``
clears the sign bit (it is not ``abs``) and murmur2 is Austin Appleby's MurmurHash2,
32-bit, with seed ``0x9747b28c``, reading the key in little-endian 4-byte words. Keeping
the rule identical means a Sluice producer and a Java (or librdkafka with
``partitioner=murmur2_random``) producer agree on where each key lives.
"""

from __future__ import annotations

_SEED = 0x9747B28C
_MULTIPLIER = 0x5BD1E995
_SHIFT = 24
_MASK_32 = 0xFFFF_FFFF
_SIGN_BIT_CLEAR = 0x7FFF_FFFF


def murmur2(data: bytes) -> int:
    """MurmurHash2 of ``data`` as the Java client computes it: a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK_32
    whole_words = length // 4
    for i in range(whole_words):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * _MULTIPLIER) & _MASK_32
        k ^= k >> _SHIFT
        k = (k * _MULTIPLIER) & _MASK_32
        h = ((h * _MULTIPLIER) & _MASK_32) ^ k
    tail = data[4 * whole_words :]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * _MULTIPLIER) & _MASK_32
    h ^= h >> 13
    h = (h * _MULTIPLIER) & _MASK_32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x8000_0000 else h


def positive(value: int) -> int:
    """The Java client's ``Utils.toPositive``: clear the sign bit of a 32-bit int."""
    return value & _SIGN_BIT_CLEAR


def partition_for_key(key: bytes, partition_count: int) -> int:
    """The partition a record with ``key`` goes to among ``partition_count`` partitions."""
    if partition_count <= 0:
        raise ValueError(f"a topic has at least one partition, not {partition_count}")
    return positive(murmur2(key)) % partition_count
