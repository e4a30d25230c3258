"""``sluice delays`` run as a user runs it (a subprocess) against a real broker, and
the SluiceDescribeDelays API it uses: waiting records listed by partition with their
schedule ids, one cancelled, refusals in one line; a malformed request to the
API closes its connection and the broker serves on."""

from __future__ import annotations

import json
import struct
import subprocess
from typing import Any

import pytest
from broker_process import BrokerProcess
from client_helpers import create_topic, produce_and_flush, producer_config, run_sluice
from confluent_kafka import Producer
from kafka_wire import KafkaConnection

from sluice.protocol import framing
from sluice.protocol.private import (
    DESCRIBE_DELAYS,
    PrivateRequest,
    decode_response_frame,
    encode_request_frame,
)

pytestmark = pytest.mark.usefixtures("broker_still_serves_afterwards")

HOUR_MS = 3_600_000


def sluice(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_sluice(broker.bootstrap, "delays", *args)


def listed(broker: BrokerProcess, topic: str) -> Any:
    result = sluice(broker, "list", topic, "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def schedule(key: bytes, delay_ms: int) -> dict[str, Any]:
    return {
        "key": key,
        "value": b"v",
        "headers": [("x-sluice-delay-ms", b"%d" % delay_ms), ("x-sluice-schedule-id", key)],
    }


def test_waiting_records_are_listed_and_one_is_cancelled(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=2)
    producer = Producer(producer_config(broker.bootstrap))
    produce_and_flush(
        producer, topic, [schedule(b"job-%d" % i, (i + 1) * HOUR_MS) for i in range(6)]
    )
    before = listed(broker, topic)
    assert [p["partition"] for p in before] == [0, 1]
    assert sum(p["pending"] for p in before) == 6
    assert all(p["fired"] == 0 for p in before)
    waiting = sorted(w["schedule_id"] for p in before for w in p["next"])
    assert waiting == [f"job-{i}" for i in range(6)]
    for partition in before:  # the next due first
        dues = [w["due_ms"] for w in partition["next"]]
        assert dues == sorted(dues) and partition["next_due_ms"] == dues[0]

    result = sluice(broker, "cancel", topic, "job-3")
    assert result.returncode == 0, result.stderr
    after = listed(broker, topic)
    assert sum(p["pending"] for p in after) == 5
    assert "job-3" not in {w["schedule_id"] for p in after for w in p["next"]}

    table = sluice(broker, "list", topic)
    assert table.returncode == 0 and "PENDING" in table.stdout and "job-4" in table.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["list", "no-such-topic"], "topic 'no-such-topic' does not exist"),
        (["cancel", "no-such-topic", "x"], "topic 'no-such-topic' does not exist"),
        (["cancel", "__consumer_offsets", "x", "--partition", "99"], "has no partition 99"),
    ],
)
def test_refusals_are_one_line(broker: BrokerProcess, arguments: list[str], message: str) -> None:
    result = sluice(broker, *arguments)
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr


def test_the_api_answers_a_partition_and_refuses_garbage(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    request = PrivateRequest(DESCRIBE_DELAYS, {"topic": topic, "partitions": [0, 7], "limit": 1})
    with KafkaConnection(broker.host, broker.port) as connection:
        connection.send_bytes(framing.frame(encode_request_frame(5, "test", request)))
        correlation_id, body = decode_response_frame(connection.read_frame())
    assert correlation_id == 5
    by_partition = {p["partition"]: p for p in body["partitions"]}
    assert by_partition[0]["pending"] == 0 and by_partition[0]["error_code"] == 0
    assert by_partition[7]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    header = struct.pack(">hhih", DESCRIBE_DELAYS, 0, 6, -1)
    for body_bytes in (b"not json", b"[1, 2]", b'{"topic": 5}', b'{"topic": "t", "limit": -1}'):
        with KafkaConnection(broker.host, broker.port) as connection:
            connection.send_bytes(framing.frame(header + body_bytes))
            assert connection.wait_closed_by_peer(), body_bytes
