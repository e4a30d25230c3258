"""Random and mutated request frames for every served (api, version), against a running
broker, while a well-behaved client keeps producing and fetching.

The frames have a correct size prefix and request header, so they reach the decoder and,
when they still parse, the handlers. The broker must answer or close the connection;
it must never die, and the well-behaved client on its own connection must be served
throughout and afterwards. Versions come from ``protocol.versions.SUPPORTED``.

Reproduce with the printed seed: ``SLUICE_FUZZ_SEED=<seed>``; ``SLUICE_FUZZ_FRAMES`` sets
the frames per version (default 6).
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import socket
import sys
import threading
import time
from pathlib import Path

from client_helpers import round_trip_one_message
from kafka_wire import (
    KafkaConnection,
    Record,
    create_topics_request,
    encode_batch,
    fetch_request,
    only_partition,
    produce_request,
)

# The message generator is shared with the in-process decoder fuzz in tests/unit.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from kio_examples import (
    mutate,
    request_frame,
    served_versions,
    valid_body,
    with_huge_first_count,
)

from sluice.protocol.versions import request_is_flexible

NONE = 0
FRAMES_PER_VERSION = int(os.environ.get("SLUICE_FUZZ_FRAMES", "6"))
CONNECTIONS_AT_ONCE = 10
"""Versions fuzzed at once, each frame on its own connection."""
ANSWER_WAIT_SECONDS = 0.5
FUZZ_SECONDS_MAX = 180.0
WELL_BEHAVED_TIMEOUT_S = 15.0


def _frame_for(api_key: int, version: int, rng: random.Random, first: bool) -> bytes:
    if first:  # every version gets the CVE-2022-34917 shape at least once
        body = with_huge_first_count(
            valid_body(api_key, version, rng), request_is_flexible(api_key, version)
        )
    elif rng.random() < 0.2:
        body = rng.randbytes(rng.randrange(0, 64))
    else:
        body = mutate(valid_body(api_key, version, rng), rng)
    return request_frame(api_key, version, body, correlation_id=rng.randrange(2**31))


def _send_and_wait(frames: list[bytes], host: str, port: int) -> None:
    """Send each frame on its own connection; wait until each is answered or closed (or
    a moment has passed: acks=0 and long polls do not answer), then close them all."""
    sockets = []
    for data in frames:
        sock = socket.create_connection((host, port), timeout=5)
        sockets.append(sock)
        try:
            sock.sendall(data)
        except OSError:  # closed by the broker mid-send: a malformed frame
            continue
    deadline = time.monotonic() + ANSWER_WAIT_SECONDS
    waiting = list(sockets)
    while waiting and (remaining := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select(waiting, [], [], remaining)
        for sock in readable:
            with contextlib.suppress(OSError):
                sock.recv(65536)
            waiting.remove(sock)  # answered or closed: either is fine
    for sock in sockets:
        sock.close()


class WellBehavedClient(threading.Thread):
    """Produces one record and fetches it back, again and again, on one connection."""

    def __init__(self, host: str, port: int, topic: str) -> None:
        super().__init__(daemon=True)
        self._host, self._port, self._topic = host, port, topic
        self.stop_event = threading.Event()
        self.round_trips = 0
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            with KafkaConnection(self._host, self._port, timeout_s=WELL_BEHAVED_TIMEOUT_S) as good:
                assert good.request(create_topics_request(self._topic)).topics[0].error_code == NONE
                while not self.stop_event.is_set():
                    batch = encode_batch([Record(key=None, value=b"%d" % self.round_trips)])
                    produced = only_partition(good.request(produce_request(self._topic, 0, batch)))
                    assert produced.error_code == NONE, produced
                    fetched = only_partition(
                        good.request(fetch_request(self._topic, 0, self.round_trips))
                    )
                    assert fetched.error_code == NONE and fetched.records, fetched
                    self.round_trips += 1
                    self.stop_event.wait(0.05)
        except BaseException as e:  # reported by the test
            self.failure = e


def test_random_and_mutated_frames_for_every_served_version_never_take_the_broker_down(
    broker, topic
):
    seed = int(os.environ.get("SLUICE_FUZZ_SEED", random.randrange(2**32)))
    print(f"broker fuzz seed {seed} (SLUICE_FUZZ_SEED={seed} reproduces it)")
    rng = random.Random(seed)
    pid = broker.pid
    client = WellBehavedClient(broker.host, broker.port, topic)
    client.start()
    versions = served_versions()
    deadline = time.monotonic() + FUZZ_SECONDS_MAX
    sent_versions = 0
    try:
        for start in range(0, len(versions), CONNECTIONS_AT_ONCE):
            group = versions[start : start + CONNECTIONS_AT_ONCE]
            frames = [
                _frame_for(a, v, rng, first=index == 0)
                for a, v in group
                for index in range(FRAMES_PER_VERSION)
            ]
            _send_and_wait(frames, broker.host, broker.port)
            sent_versions += len(group)
            assert broker.is_running, f"seed {seed}: the broker died"
            assert client.failure is None, f"seed {seed}: the well-behaved client failed"
            if time.monotonic() > deadline:
                break
        round_trips_during = client.round_trips
    finally:
        client.stop_event.set()
        client.join(timeout=WELL_BEHAVED_TIMEOUT_S * 3)
    assert client.failure is None, f"seed {seed}: {client.failure!r}"
    assert sent_versions == len(versions), f"seed {seed}: only {sent_versions} versions in time"
    assert round_trips_during >= 5, f"seed {seed}: the well-behaved client barely ran"
    assert broker.is_running and broker.pid == pid, f"seed {seed}: the broker died"
    round_trip_one_message(broker.bootstrap)
    log_text = broker.log_path.read_text(errors="replace")
    print(
        f"broker log: {log_text.count('closing connection from')} warning(s), "
        f"{log_text.count('internal error')} internal error(s)"
    )
