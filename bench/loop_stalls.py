"""Event-loop stalls of one broker under light load: how long a request can wait for
the broker's event loop while the flusher and the log maintenance run.

One broker (its own data directory), a topic of ``--partitions`` partitions (100), and
a confluent-kafka producer sending ``--rate`` msg/s (200) of 100 bytes round-robin over
them with acks=1, so every partition has new data to flush each flush.ms (1 s) and a
checkpoint to write every 5 s. Meanwhile a probe on its own connection sends ApiVersions
requests one after another (one in flight, no pause) for ``--seconds`` (60): each
answer's round trip is at least the longest stretch the loop spent elsewhere while the
request waited, so the tail and the max of the round trips show the stalls.

With ``--py-spy`` it also samples the broker with ``py-spy record`` (100 Hz, with thread
ids) and counts the samples of the event loop's thread (the main thread) that were
inside a file sync or a checkpoint write (``os.fsync``/``os.fdatasync`` callers:
``fsync_directory``, ``write_file_atomically``, ``LogSegment.flush``...).

    .venv/bin/python bench/loop_stalls.py --seconds 60 --py-spy
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer

from produce_consume import create_topic, print_run_header, producer_config, sluice_broker

API_VERSIONS_KEY = 18
PROBE_TIMEOUT_S = 10.0
"""A probe answer slower than this ends the run: the broker is stuck, not stalling."""
SYNC_FRAMES = (
    "fsync_directory",
    "write_file_atomically",
    "sync_data",
    "make_read_only",
    "LogSegment.flush",
    "flush (sluice/storage/segment.py",
)
"""Frames under which a main-thread sample counts as waiting for a file sync."""
WARM_UP_S = 6.0
"""Probing before the measurement: every partition written and checkpointed once."""
PY_SPY_EXIT_TIMEOUT_S = 60.0


def api_versions_frame(correlation_id: int) -> bytes:
    """An ApiVersions v0 request (no body), client id "probe"."""
    client_id = b"probe"
    header = struct.pack(">hhih", API_VERSIONS_KEY, 0, correlation_id, len(client_id))
    body = header + client_id
    return struct.pack(">i", len(body)) + body


def read_exactly(connection: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise SystemExit("the broker closed the probe's connection")
        data += chunk
    return bytes(data)


def probe_round_trips(bootstrap: str, seconds: float) -> list[float]:
    """Round trips (ms) of back-to-back ApiVersions requests for ``seconds``."""
    host, port = bootstrap.rsplit(":", 1)
    round_trips: list[float] = []
    with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S) as connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        end = time.monotonic() + seconds
        correlation_id = 0
        while time.monotonic() < end:
            correlation_id += 1
            started = time.perf_counter()
            connection.sendall(api_versions_frame(correlation_id))
            (size,) = struct.unpack(">i", read_exactly(connection, 4))
            answer = read_exactly(connection, size)
            round_trips.append((time.perf_counter() - started) * 1000)
            assert struct.unpack(">i", answer[:4])[0] == correlation_id
    return round_trips


def produce_steadily(
    bootstrap: str, topic: str, partitions: int, rate: int, stop: threading.Event
) -> int:
    """``rate`` msg/s round-robin over the partitions until ``stop``; how many sent."""
    producer = Producer(producer_config(bootstrap, "1", **{"linger.ms": 0}))
    value = b"x" * 100
    sent = 0
    started = time.monotonic()
    while not stop.is_set():
        producer.produce(topic, value, partition=sent % partitions)
        sent += 1
        producer.poll(0)
        wait_s = started + sent / rate - time.monotonic()
        if wait_s > 0:
            stop.wait(wait_s)  # pacing to the fixed rate
    producer.flush(30)
    return sent


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main_thread_sync_samples(raw_profile: Path, pid: int) -> tuple[int, int]:
    """(samples of the main thread inside a sync frame, samples of the main thread)
    from ``py-spy record --format raw --threads`` lines, ``thread (<tid>): <name>;<frame>;
    ... <count>`` (the main thread's id is the process id; idle samples are left out)."""
    in_sync = total = 0
    for line in raw_profile.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack.startswith(f"thread ({pid}):"):
            continue
        total += int(count_text)
        if any(marker in stack for marker in SYNC_FRAMES):
            in_sync += int(count_text)
    return in_sync, total


def run(options: argparse.Namespace, scratch: Path) -> None:
    with sluice_broker(scratch / "data", options.overrides) as target:
        assert target.pid is not None
        topic = create_topic(target.bootstrap, options.partitions)
        stop = threading.Event()
        sent: list[int] = []

        def produce() -> None:
            sent.append(
                produce_steadily(target.bootstrap, topic, options.partitions, options.rate, stop)
            )

        producer = threading.Thread(target=produce)
        producer.start()
        spy: subprocess.Popen[bytes] | None = None
        raw_profile = scratch / "profile.txt"
        try:
            probe_round_trips(target.bootstrap, WARM_UP_S)
            if options.py_spy:
                py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
                spy = subprocess.Popen(
                    [
                        py_spy, "record", "--format", "raw", "--threads", "--rate", "100",
                        "--duration", str(int(options.seconds)), "--pid", str(target.pid),
                        "--output", str(raw_profile), "--nonblocking",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
            round_trips = probe_round_trips(target.bootstrap, options.seconds)
        finally:
            stop.set()
            producer.join()
            if spy is not None:
                spy.wait(PY_SPY_EXIT_TIMEOUT_S)
        pid = target.pid
    print(
        f"{options.partitions} partitions, {options.rate} msg/s of 100 B (acks=1, "
        f"{sum(sent)} sent), {len(round_trips)} ApiVersions round trips in "
        f"{options.seconds:.0f} s"
    )
    print()
    print("| probe round trip | p50 | p99 | p99.9 | max | > 2 ms | > 5 ms |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| ms | {statistics.median(round_trips):.2f} | {percentile(round_trips, 0.99):.2f} | "
        f"{percentile(round_trips, 0.999):.2f} | {max(round_trips):.2f} | "
        f"{sum(r > 2 for r in round_trips)} | {sum(r > 5 for r in round_trips)} |"
    )
    if options.py_spy and raw_profile.exists():
        in_sync, total = main_thread_sync_samples(raw_profile, pid)
        share = 100 * in_sync / total if total else 0.0
        print()
        print(
            f"py-spy: {in_sync} of {total} busy samples of the event-loop thread "
            f"({share:.1f} %) inside a file sync or checkpoint write"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rate", type=int, default=200, help="produced msg/s")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--py-spy", action="store_true", help="sample the broker with py-spy")
    parser.add_argument("-o", dest="overrides", action="append", default=[], metavar="K=V")
    options = parser.parse_args()

    print_run_header()
    scratch = Path(tempfile.mkdtemp(prefix="sluice-loop-stalls-"))
    try:
        run(options, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
