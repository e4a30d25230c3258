"""kcat (librdkafka 2.0, an older client) as a user runs it from a shell."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from kafka_wire import (
    KafkaConnection,
    decode_batches,
    fetch_request,
    librdkafka_enables_lz4,
    only_partition,
)

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not installed")

KCAT_TIMEOUT_S = 60


def kcat(broker, *arguments: str, stdin: str | None = None) -> str:
    completed = subprocess.run(
        [KCAT, "-b", broker.bootstrap, "-X", "socket.timeout.ms=10000", *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=KCAT_TIMEOUT_S,
        check=False,
    )
    assert completed.returncode == 0, (
        f"kcat {' '.join(arguments)} exited {completed.returncode}: {completed.stderr}"
    )
    return completed.stdout


def consume_lines(broker, topic: str, fmt: str, *extra: str) -> list[str]:
    output = kcat(broker, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", fmt, *extra)
    return output.splitlines()


def test_metadata_listing_names_the_broker_and_the_topic(broker, topic):
    kcat(broker, "-P", "-t", topic, "-p", "0", stdin="one\n")
    listing = json.loads(kcat(broker, "-L", "-J", "-t", topic))
    assert [(b["id"], b["name"]) for b in listing["brokers"]] == [(0, broker.bootstrap)]
    (described,) = listing["topics"]
    assert described["topic"] == topic
    assert described.get("error") is None
    assert [(p["partition"], p["leader"]) for p in described["partitions"]] == [(0, 0)]


def test_produce_lines_and_consume_them_back_to_the_end(broker, topic):
    lines = [f"line {i}" for i in range(100)]
    kcat(broker, "-P", "-t", topic, "-p", "0", stdin="\n".join(lines) + "\n")
    assert consume_lines(broker, topic, "%o %s\n") == [f"{i} line {i}" for i in range(100)]


def test_keys_with_a_delimiter_and_headers(broker, topic):
    kcat(
        broker,
        "-P",
        "-t",
        topic,
        "-p",
        "0",
        "-K",
        ":",
        "-H",
        "source=kcat",
        "-H",
        "trace=abc",
        stdin="alpha:1\nbeta:2\ngamma:3\n",
    )
    assert consume_lines(broker, topic, "%k=%s|%h\n") == [
        "alpha=1|source=kcat,trace=abc",
        "beta=2|source=kcat,trace=abc",
        "gamma=3|source=kcat,trace=abc",
    ]


@pytest.mark.parametrize(
    ("codec", "codec_id"), [("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)]
)
def test_compressed_production(broker, topic, codec, codec_id):
    lines = [f"{codec} message {i} " + "x" * 50 for i in range(200)]
    kcat(broker, "-P", "-t", topic, "-p", "0", "-z", codec, stdin="\n".join(lines) + "\n")
    assert consume_lines(broker, topic, "%s\n") == lines
    with KafkaConnection(broker.host, broker.port) as connection:
        result = only_partition(connection.request(fetch_request(topic, 0, 0)))
    if codec == "lz4" and not librdkafka_enables_lz4(broker.host, broker.port):
        pytest.xfail("librdkafka sends lz4 uncompressed until FindCoordinator v0 is advertised")
    assert {batch.compression for batch in decode_batches(result.records)} == {codec_id}


def test_consume_a_count_from_an_offset_relative_to_the_end(broker, topic):
    kcat(broker, "-P", "-t", topic, "-p", "0", stdin="".join(f"{i}\n" for i in range(10)))
    output = kcat(broker, "-C", "-t", topic, "-p", "0", "-o", "-3", "-e", "-f", "%o:%s\n")
    assert output.splitlines() == ["7:7", "8:8", "9:9"]
    output = kcat(broker, "-C", "-t", topic, "-p", "0", "-o", "2", "-c", "2", "-f", "%s\n")
    assert output.splitlines() == ["2", "3"]


def test_acks_all_production_is_acknowledged(broker, topic):
    kcat(
        broker,
        "-P",
        "-t",
        topic,
        "-p",
        "0",
        "-X",
        "topic.request.required.acks=all",
        stdin="a\nb\n",
    )
    assert consume_lines(broker, topic, "%s\n") == ["a", "b"]


def test_offset_query_by_timestamp(broker, topic):
    kcat(broker, "-P", "-t", topic, "-p", "0", stdin="".join(f"{i}\n" for i in range(5)))
    output = kcat(broker, "-Q", "-t", f"{topic}:0:-1")
    # kcat prints e.g. "<topic> [0] offset 5"
    assert f"{topic} [0] offset 5" in output
