"""What one connection, one address and one fetch may take from the broker.

Real sockets against a real broker: clients that never read their replies, that pipeline
expensive requests ahead of a newcomer, that open more connections than allowed, that
stall halfway through a frame or send garbage in a loop; and a fetch asking for 2 GiB.
Each test checks the bound and that a well-behaved client is served meanwhile.
"""

from __future__ import annotations

import contextlib
import re
import selectors
import socket
import struct
import time

import psutil
from client_helpers import round_trip_one_message
from kafka_wire import (
    KafkaConnection,
    Record,
    api_versions_request,
    create_topics_request,
    encode_batch,
    fetch_request,
    metadata_request,
    only_partition,
    open_many,
    produce_request,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from sluice.protocol.codec import encode_request

NONE = 0
INT32_MAX = 2**31 - 1
MiB = 2**20

GREEDY_CONNECTIONS = 50
GREEDY_RECEIVE_BUFFER_BYTES = 4096
"""The greedy clients' SO_RCVBUF: the kernel holds almost nothing for them, so what they
do not read piles up in the broker, if anywhere."""
FLOOD_SECONDS = 12.0
WELL_BEHAVED_TIMEOUT_S = 10.0
TOPICS_FOR_METADATA = 20
RSS_GROWTH_BYTES_MAX = 80 * MiB
"""Each connection that does not read holds at most about 256 KiB of queued responses
plus up to 512 KiB of request bytes read but not yet admitted: 50 × 0.75 MiB ≈ 38 MiB,
doubled for the allocator's slack. Before these bounds, the same flood starved the
well-behaved client (its requests timed out) and over minutes grew the broker past
500 MB."""


def _rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def _greedy_connections(host: str, port: int) -> list[socket.socket]:
    connections = []
    for _ in range(GREEDY_CONNECTIONS):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, GREEDY_RECEIVE_BUFFER_BYTES)
        sock.connect((host, port))
        sock.setblocking(False)
        connections.append(sock)
    return connections


def _flood_while_serving(broker, request: bytes, topic: str) -> tuple[int, int]:
    """Send ``request`` pipelined on every greedy connection, never reading a reply, for
    FLOOD_SECONDS; meanwhile a well-behaved client produces and fetches one record at a
    time. Return (largest RSS growth seen, records the well-behaved client round-tripped)."""
    rss_before = _rss(broker.pid)
    peak_growth = 0
    served = 0
    burst = request * 64
    greedy = _greedy_connections(broker.host, broker.port)
    try:
        with KafkaConnection(broker.host, broker.port, timeout_s=WELL_BEHAVED_TIMEOUT_S) as good:
            assert good.request(create_topics_request(topic)).topics[0].error_code == NONE
            deadline = time.monotonic() + FLOOD_SECONDS
            next_round_trip = time.monotonic()
            while time.monotonic() < deadline:
                for sock in greedy:
                    with contextlib.suppress(BlockingIOError):
                        sock.send(burst)
                if time.monotonic() >= next_round_trip:
                    batch = encode_batch([Record(key=None, value=b"%d" % served)])
                    produced = only_partition(good.request(produce_request(topic, 0, batch)))
                    assert produced.error_code == NONE
                    fetched = only_partition(good.request(fetch_request(topic, 0, served)))
                    assert fetched.error_code == NONE and fetched.records
                    served += 1
                    next_round_trip = time.monotonic() + 1.0
                peak_growth = max(peak_growth, _rss(broker.pid) - rss_before)
    finally:
        for sock in greedy:
            sock.close()
    return peak_growth, served


def test_fifty_connections_pipelining_metadata_without_reading_do_not_starve_others(
    broker_factory, topic
):
    """The well-behaved client's every produce and fetch is answered within 10 s while
    50 connections flood Metadata requests (an unbounded broker let them all time out)."""
    broker = broker_factory()
    with KafkaConnection(broker.host, broker.port) as admin:
        for index in range(TOPICS_FOR_METADATA):
            admin.request(create_topics_request(f"metadata-weight-{index}"))
    request = encode_request(1, "greedy", metadata_request(None))
    peak_growth, served = _flood_while_serving(broker, request, topic)
    assert served >= 3
    assert peak_growth < RSS_GROWTH_BYTES_MAX, f"grew by {peak_growth // MiB} MiB"
    round_trip_one_message(broker.bootstrap)


def test_fifty_connections_that_never_read_replies_hold_bounded_memory(broker_factory, topic):
    broker = broker_factory()
    request = encode_request(
        1, "greedy", ApiVersionsRequest(client_software_name="g", client_software_version="1")
    )
    peak_growth, served = _flood_while_serving(broker, request, topic)
    assert served >= 3
    assert peak_growth < RSS_GROWTH_BYTES_MAX, (
        f"the broker grew by {peak_growth // MiB} MiB holding replies for "
        f"{GREEDY_CONNECTIONS} connections that never read them"
    )
    round_trip_one_message(broker.bootstrap)


FAIRNESS_CONNECTIONS = 20
FAIRNESS_REQUESTS_PER_CONNECTION = 40
FAIRNESS_PARTITIONS = 200
"""One topic this wide makes each Metadata request for all topics cost milliseconds."""
FAIRNESS_NEWCOMER_AFTER = 0.1
"""The newcomer arrives once this share of the flood is answered: every flood request
has been sent and the broker is busy with them."""
FAIRNESS_TIMEOUT_S = 120.0
FAIRNESS_SHARE_MAX = 0.25
"""Most of the flood's remaining answers that may leave before the newcomer's. The
newcomer's accept, read and answer each take a turn of the event loop, and a turn serves
one request of each busy connection: a few turns, a small share of the pipelines."""


class _Answers:
    """Reads whole response frames from many non-blocking sockets, counting them."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self.buffers: dict[socket.socket, bytearray] = {}

    def add(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.buffers[sock] = bytearray()
        self.selector.register(sock, selectors.EVENT_READ)

    def frames(self, timeout_s: float) -> list[socket.socket]:
        """The socket of each frame completed within one wait, in order."""
        completed = []
        for key, _ in self.selector.select(timeout=timeout_s):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            chunk = sock.recv(1 << 20)
            assert chunk, "the broker closed a connection"
            buffer = self.buffers[sock]
            buffer += chunk
            while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack_from(">i", buffer)[0]:
                del buffer[: 4 + struct.unpack_from(">i", buffer)[0]]
                completed.append(sock)
        return completed

    def close(self) -> None:
        self.selector.close()
        for sock in self.buffers:
            sock.close()


def _flood_answers_while_newcomer_waits(host: str, port: int) -> tuple[int, int, float, float]:
    """FAIRNESS_CONNECTIONS connections each pipeline FAIRNESS_REQUESTS_PER_CONNECTION
    Metadata requests for all topics (reading every answer); once the broker is busy with
    them a new client sends one ApiVersions. Return (flood answers received while the
    newcomer waited, flood answers still due when it arrived, seconds it waited, seconds
    the whole flood took)."""
    request = encode_request(1, "flood", metadata_request(None))
    expected = FAIRNESS_CONNECTIONS * FAIRNESS_REQUESTS_PER_CONNECTION
    answers = _Answers()
    try:
        flood = [socket.create_connection((host, port)) for _ in range(FAIRNESS_CONNECTIONS)]
        started = time.monotonic()
        for sock in flood:
            sock.sendall(request * FAIRNESS_REQUESTS_PER_CONNECTION)
            answers.add(sock)
        newcomer: socket.socket | None = None
        answered = 0
        answered_when_newcomer_came = answered_when_newcomer_served = -1
        newcomer_sent = newcomer_waited_s = 0.0
        deadline = time.monotonic() + FAIRNESS_TIMEOUT_S
        while answered < expected or answered_when_newcomer_served < 0:
            assert time.monotonic() < deadline, f"{answered} of {expected} answered"
            if newcomer is None and answered >= FAIRNESS_NEWCOMER_AFTER * expected:
                newcomer = socket.create_connection((host, port))
                newcomer_sent = time.monotonic()
                newcomer.sendall(encode_request(1, "newcomer", api_versions_request()))
                answers.add(newcomer)
                answered_when_newcomer_came = answered
            for sock in answers.frames(timeout_s=1.0):
                if sock is newcomer:
                    answered_when_newcomer_served = answered
                    newcomer_waited_s = time.monotonic() - newcomer_sent
                else:
                    answered += 1
        flood_s = time.monotonic() - started
    finally:
        answers.close()
    return (
        answered_when_newcomer_served - answered_when_newcomer_came,
        expected - answered_when_newcomer_came,
        newcomer_waited_s,
        flood_s,
    )


def test_a_new_client_is_served_before_other_connections_pipelined_requests(broker_factory):
    """Connections take turns, one request each (Kafka mutes a connection while its
    request is handled): a new client's ApiVersions is answered after a few turns of the
    flood's connections, not behind their pipelines."""
    broker = broker_factory()
    with KafkaConnection(broker.host, broker.port) as admin:
        created = admin.request(create_topics_request("metadata-weight", FAIRNESS_PARTITIONS))
        assert created.topics[0].error_code == NONE
    ahead, due, waited_s, flood_s = _flood_answers_while_newcomer_waits(broker.host, broker.port)
    print(
        f"{ahead} of the {due} flood answers still due went out before the newcomer's; "
        f"it waited {waited_s:.2f} s of the flood's {flood_s:.2f} s"
    )
    assert ahead < FAIRNESS_SHARE_MAX * due


PARKED_FETCH_WAIT_MS = 1500


def test_a_connection_has_one_request_in_flight(broker_factory, topic):
    """A produce pipelined behind a fetch parked in the purgatory is not handled until
    the fetch is answered (Kafka mutes the connection meanwhile), so the fetch, waiting
    for records of that very partition, ends empty at its max_wait; another connection's
    produce wakes it at once."""
    broker = broker_factory()
    with (
        KafkaConnection(broker.host, broker.port) as connection,
        KafkaConnection(broker.host, broker.port) as other,
    ):
        assert connection.request(create_topics_request(topic)).topics[0].error_code == NONE
        batch = encode_batch([Record(key=None, value=b"behind the fetch")])
        fetch = fetch_request(topic, 0, 0, max_wait_ms=PARKED_FETCH_WAIT_MS)
        produce = produce_request(topic, 0, batch, acks=1)
        fetch_id = connection.send(fetch)
        produce_id = connection.send(produce)
        assert only_partition(connection.receive(fetch, fetch_id)).records in (None, b"")
        assert only_partition(connection.receive(produce, produce_id)).error_code == NONE
        # The same fetch, parked again, is woken by a produce on another connection.
        fetch_id = connection.send(fetch_request(topic, 0, 1, max_wait_ms=60_000))
        assert only_partition(other.request(produce_request(topic, 0, batch))).error_code == NONE
        assert only_partition(connection.receive(fetch, fetch_id)).records


def test_connections_beyond_max_connections_per_ip_are_closed_and_slots_come_back(broker_factory):
    broker = broker_factory({"max.connections.per.ip": "5"})
    kept, refused = open_many(broker.host, broker.port, 8)
    try:
        assert (len(kept), refused) == (5, 3)
        for connection in kept:  # those admitted keep working
            assert connection.request(api_versions_request()).error_code == NONE
    finally:
        for connection in kept:
            connection.close()
    deadline = time.monotonic() + 10
    while True:  # the slots are given back once the connections are gone
        again, refused = open_many(broker.host, broker.port, 5)
        for connection in again:
            connection.close()
        if refused == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert refused == 0
    assert "max.connections.per.ip=5" in broker.log_tail()


def test_connections_beyond_max_connections_are_closed(broker_factory):
    broker = broker_factory({"max.connections": "3"})
    kept, refused = open_many(broker.host, broker.port, 5)
    try:
        assert (len(kept), refused) == (3, 2)
    finally:
        for connection in kept:
            connection.close()


def test_an_idle_connection_is_closed_after_connections_max_idle_ms(broker_factory):
    broker = broker_factory({"connections.max.idle.ms": "1000"})
    with KafkaConnection(broker.host, broker.port) as idle:
        assert idle.request(api_versions_request()).error_code == NONE
        started = time.monotonic()
        assert idle.wait_closed_by_peer(timeout_s=15), "an idle connection was kept open"
        assert time.monotonic() - started >= 0.9


def test_a_connection_that_stalls_inside_a_frame_is_closed(broker_factory):
    broker = broker_factory({"connections.max.idle.ms": "1500"})
    with KafkaConnection(broker.host, broker.port) as stalled:
        stalled.send_bytes(struct.pack(">i", 10_000) + b"\x00\x03\x00\x08")
        assert stalled.wait_closed_by_peer(timeout_s=15), "a half-sent frame was held forever"


def test_a_connection_trickling_a_frame_is_closed_even_though_bytes_keep_arriving(broker_factory):
    """Slowloris: one byte every 300 ms keeps the connection active, but the frame
    never completes within connections.max.idle.ms."""
    broker = broker_factory({"connections.max.idle.ms": "1500"})
    with KafkaConnection(broker.host, broker.port) as trickle:
        trickle.send_bytes(struct.pack(">i", 1000))
        deadline = time.monotonic() + 10
        closed = False
        while time.monotonic() < deadline and not closed:
            try:
                trickle.send_bytes(b"\x00")
            except OSError:
                closed = True
                break
            closed = trickle.wait_closed_by_peer(timeout_s=0.3)
        assert closed, "a frame trickled in byte by byte was held open"


def test_a_busy_connection_is_not_closed_as_idle(broker_factory, topic):
    """A long-polling fetch holds the connection quiet longer than the idle time; the
    connection is working, not idle, and gets its answer."""
    broker = broker_factory({"connections.max.idle.ms": "1000"})
    with KafkaConnection(broker.host, broker.port) as connection:
        assert connection.request(create_topics_request(topic)).topics[0].error_code == NONE
        for _ in range(3):
            connection.request(api_versions_request())
            time.sleep(0.2)  # activity every 0.2 s: never idle for 1 s, even when slowed
        response = connection.request(fetch_request(topic, 0, 0, max_wait_ms=2500, min_bytes=1))
        assert only_partition(response).error_code == NONE


def test_malformed_request_warnings_are_rate_limited_with_a_count_of_those_suppressed(
    broker_factory,
):
    broker = broker_factory()
    # Metadata v8 whose topic array claims one element and ends: malformed.
    payload = struct.pack(">hhih", 3, 8, 1, -1) + struct.pack(">i", 1)
    garbage = struct.pack(">i", len(payload)) + payload
    for _ in range(200):
        with socket.create_connection((broker.host, broker.port), timeout=5) as sock:
            sock.sendall(garbage)
            sock.settimeout(5)
            try:
                while sock.recv(4096):
                    pass
            except ConnectionResetError:
                pass
    round_trip_one_message(broker.bootstrap)
    log_text = broker.log_tail()
    warnings = log_text.count("closing connection from")
    assert 1 <= warnings <= 20, f"{warnings} warnings for 200 malformed requests"
    match = re.search(r"(\d+) more warnings about malformed requests suppressed", log_text)
    if match is None:
        broker.stop()  # the count is reported when the interval ends or at shutdown
        log_text = broker.log_tail()
        match = re.search(r"(\d+) more warnings about malformed requests suppressed", log_text)
    assert match is not None, log_text[-3000:]
    assert int(match.group(1)) + warnings == 200


def test_a_fetch_asking_for_2_gib_gets_at_most_fetch_max_bytes(broker_factory, topic):
    broker = broker_factory({"fetch.max.bytes": str(MiB)})
    value = b"v" * (100 * 1024)
    with KafkaConnection(broker.host, broker.port) as connection:
        assert connection.request(create_topics_request(topic)).topics[0].error_code == NONE
        for _ in range(30):  # 30 batches of ~100 KiB: 3 MiB in the partition
            batch = encode_batch([Record(key=None, value=value)])
            response = connection.request(produce_request(topic, 0, batch))
            assert only_partition(response).error_code == NONE
        response = connection.request(
            fetch_request(topic, 0, 0, partition_max_bytes=INT32_MAX, max_bytes=INT32_MAX)
        )
        records = only_partition(response).records
        assert records, "the first batches are returned"
        assert len(records) <= MiB, f"{len(records)} bytes in one response"
        assert len(records) > MiB // 2, "the response is filled up to the limit"
        # A consumer makes progress through the whole partition in bounded steps.


def test_a_batch_larger_than_fetch_max_bytes_is_still_returned_alone(broker_factory, topic):
    """KIP-74: the first batch is returned even when it alone exceeds the limits, so a
    consumer never gets stuck."""
    broker = broker_factory({"fetch.max.bytes": str(MiB), "message.max.bytes": str(4 * MiB)})
    with KafkaConnection(broker.host, broker.port) as connection:
        assert connection.request(create_topics_request(topic)).topics[0].error_code == NONE
        big = encode_batch([Record(key=None, value=b"b" * (2 * MiB))])
        small = encode_batch([Record(key=None, value=b"s")])
        for batch in (big, small):
            assert (
                only_partition(connection.request(produce_request(topic, 0, batch))).error_code
                == NONE
            )
        response = connection.request(
            fetch_request(topic, 0, 0, partition_max_bytes=INT32_MAX, max_bytes=INT32_MAX)
        )
        records = only_partition(response).records
        assert len(records) == len(big), "exactly the first (oversized) batch"
