"""Input limits checked where data enters, over raw loopback sockets: the request size
(socket.request.max.bytes), the topics and partitions one request names
(sluice.request.max.partitions), connection limits per address
(max.connections.per.ip.overrides) and per listener
(listener.name.<name>.max.connections), and hundreds of idle connections holding
bounded memory. Each test checks that a well-behaved client is still served.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

from client_helpers import round_trip_one_message
from kafka_wire import (
    KafkaConnection,
    api_versions_request,
    fetch_many_request,
    metadata_request,
    open_many,
)

NONE = 0
MiB = 2**20
IDLE_CONNECTIONS = 400
IDLE_CONNECTIONS_MAX = 300
IDLE_RSS_GROWTH_BYTES_MAX = 48 * MiB
"""An idle connection holds a task, a stream and its small buffers (tens of KB at most):
300 of them stay far below this; the 100 over max.connections hold nothing."""


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def test_a_frame_over_socket_request_max_bytes_closes_before_its_body(broker_factory):
    broker = broker_factory({"socket.request.max.bytes": "65536"})
    with KafkaConnection(broker.host, broker.port) as connection:
        assert connection.request(api_versions_request()).error_code == NONE
        connection.send_bytes(struct.pack(">i", 65_537) + b"\x00\x03")
        assert connection.wait_closed_by_peer(timeout_s=10)
    assert "outside [0, 65536]" in broker.log_tail()
    round_trip_one_message(broker.bootstrap)


def test_a_request_naming_too_many_topics_or_partitions_closes_its_connection(broker_factory):
    broker = broker_factory({"sluice.request.max.partitions": "100"})
    with KafkaConnection(broker.host, broker.port) as connection:
        names = [f"not-there-{i}" for i in range(100)]
        answer = connection.request(metadata_request(names, allow_auto_topic_creation=False))
        assert len(answer.topics) == 100
        connection.send(metadata_request([*names, "one-more"], allow_auto_topic_creation=False))
        assert connection.wait_closed_by_peer(timeout_s=10)
    with KafkaConnection(broker.host, broker.port) as connection:
        connection.send(fetch_many_request([("t", p, 0) for p in range(101)]))
        assert connection.wait_closed_by_peer(timeout_s=10)
    assert "sluice.request.max.partitions=100" in broker.log_tail()
    round_trip_one_message(broker.bootstrap)


def test_max_connections_per_ip_overrides_win_over_the_general_limit(broker_factory):
    broker = broker_factory(
        {"max.connections.per.ip": "50", "max.connections.per.ip.overrides": "127.0.0.1:2"}
    )
    kept, refused = open_many(broker.host, broker.port, 4)
    try:
        assert (len(kept), refused) == (2, 2)
    finally:
        for connection in kept:
            connection.close()
    assert "max.connections.per.ip.overrides=2" in broker.log_tail()


def test_a_listener_max_connections_bounds_that_listener(broker_factory):
    broker = broker_factory({"listener.name.plaintext.max.connections": "3"})
    kept, refused = open_many(broker.host, broker.port, 5)
    try:
        assert (len(kept), refused) == (3, 2)
    finally:
        for connection in kept:
            connection.close()
    assert "listener.name.plaintext.max.connections=3" in broker.log_tail()


def test_hundreds_of_idle_connections_hold_bounded_memory_and_are_closed_when_idle(
    broker_factory,
):
    broker = broker_factory(
        {
            "max.connections": str(IDLE_CONNECTIONS_MAX),
            "max.connections.per.ip": str(IDLE_CONNECTIONS_MAX),
            "connections.max.idle.ms": "4000",
        }
    )
    round_trip_one_message(broker.bootstrap)
    before = _rss_bytes(broker.pid)
    kept, refused = open_many(broker.host, broker.port, IDLE_CONNECTIONS)
    try:
        assert (len(kept), refused) == (
            IDLE_CONNECTIONS_MAX,
            IDLE_CONNECTIONS - IDLE_CONNECTIONS_MAX,
        )
        grown = _rss_bytes(broker.pid) - before
        assert grown < IDLE_RSS_GROWTH_BYTES_MAX, f"RSS grew {grown / MiB:.1f} MiB"
        # None of them sends anything more: all are closed after connections.max.idle.ms.
        deadline = time.monotonic() + 30
        for connection in kept:
            assert connection.wait_closed_by_peer(timeout_s=max(deadline - time.monotonic(), 0.1))
    finally:
        for connection in kept:
            connection.close()
    round_trip_one_message(broker.bootstrap)
