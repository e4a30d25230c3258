"""murmur2 partitioning must put every key where the Java client puts it."""

from __future__ import annotations

import random

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from sluice.client.partitioner import murmur2, partition_for_key, positive

# From the Java client's own test (org.apache.kafka.common.utils.UtilsTest#testMurmur2):
# signed 32-bit results.
JAVA_KNOWN_VALUES = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), JAVA_KNOWN_VALUES.items())
def test_murmur2_matches_the_java_client(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_murmur2_matches_kafka_python_for_every_tail_length() -> None:
    seed = random.randrange(2**32)
    generator = random.Random(seed)
    for length in range(0, 67):
        for _ in range(20):
            key = generator.randbytes(length)
            # kafka-python returns the unsigned 32-bit value; ours is signed, like Java.
            assert murmur2(key) & 0xFFFF_FFFF == kafka_python_murmur2(key), (
                f"seed={seed} key={key!r}"
            )


def test_positive_clears_the_sign_bit_like_java_to_positive() -> None:
    assert positive(-1) == 0x7FFF_FFFF
    assert positive(-(2**31)) == 0
    assert positive(5) == 5


def test_partition_for_key_is_positive_murmur2_modulo_partitions() -> None:
    # Java: Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFF_FFFF) % 7
    assert partition_for_key(b"foobar", 1) == 0
    counts = [0] * 4
    for number in range(1000):
        counts[partition_for_key(f"key-{number}".encode(), 4)] += 1
    assert all(count > 150 for count in counts), counts


def test_partition_for_key_refuses_a_topic_without_partitions() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for_key(b"k", 0)
