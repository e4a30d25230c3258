"""Consumer group rebalances: the classic protocol (eager ``range`` and
``cooperative-sticky``) against the consumer protocol (KIP-848, server assignor
``uniform``), on one single-node broker.

A topic of ``--partitions`` (60) is written at a steady ``--rate`` (1,200 records/s,
round-robin, 100-byte values) by a producer thread for the whole run. ``--members`` (10)
confluent-kafka consumers, each its own process, subscribe to it in one group; once the
group is settled, the scenarios run in turn on that group:

1. ``join``: an 11th member subscribes;
2. ``leave``: one of the 11 (one of the first ten) closes (it leaves the group);
3. ``kill``: one more is killed with SIGKILL (it leaves when its session times out).

Every member reports each change of what it owns (its ``on_assign``, ``on_revoke`` and
``on_lost`` callbacks, with the time of the callback) and, at the end, the time and size
of each of its polls that returned records. The group is *settled* when the live members
own every partition exactly once, balanced (no member owns two more than another), and
nothing has changed for ``--quiet-seconds``. For each scenario:

- **rebalance**: from the trigger (the new member's ``subscribe()``, the leaving
  member's ``close()``, the kill) to the last change of ownership before the group
  settled: from then on every member owns its final assignment;
- **pause**: for each member that runs through the scenario (the others than the one
  joining, leaving or killed), the longest time between two of its polls that returned
  records, around the rebalance (the last pair starting before it settled, the first
  ending after the trigger); the median over those members and the longest; and the same
  measure over the quiet period before the trigger (what a member sees at rest);
- **without partitions**: the longest time a running member owned no partition in that
  window (from its callbacks: what an eager revocation costs until the new assignment);
- **records**: those the members received between the trigger and the settling, as a
  share of those produced in that time (100 % = consumption never slowed down).

It also replays every member's ownership changes in time order and counts the
partitions ever owned by two live members at once (a broker defect if it happens with
the consumer protocol: it must never give a partition before its owner revoked it); the
run goes on, and the report names them. Each of ``--repeat`` rounds runs every mode on a
new topic and group; the report gives the median and the lowest–highest.

Settings, fair to each protocol: the classic members use ``session.timeout.ms=10000``
and ``heartbeat.interval.ms=1000`` (``--session-ms``, ``--heartbeat-ms``); the broker gets
``group.initial.rebalance.delay.ms=0`` and the consumer protocol's
``group.consumer.heartbeat.interval.ms`` and ``group.consumer.session.timeout.ms`` at
the same values (their minimums lowered to allow it: Kafka's defaults are 5 s and 45 s).
A member of the consumer protocol may not set either (librdkafka refuses them).

    .venv/bin/python bench/rebalance.py --repeat 3                  # ~10 minutes
    .venv/bin/python bench/rebalance.py --repeat 1 --scenarios join,leave   # a quick look
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import queue
import random
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.context import SpawnProcess
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from produce_consume import (
    create_topic,
    print_run_header,
    producer_config,
    sluice_broker,
    spread,
)

MODES: dict[str, dict[str, str]] = {
    "eager": {"group.protocol": "classic", "partition.assignment.strategy": "range"},
    "cooperative": {
        "group.protocol": "classic",
        "partition.assignment.strategy": "cooperative-sticky",
    },
    "consumer": {"group.protocol": "consumer", "group.remote.assignor": "uniform"},
}
"""Mode name → the member's group settings."""
SCENARIOS = ("join", "leave", "kill")
VALUE_BYTES = 100
POLL_S = 0.01
"""How long a member's consume() waits for records (librdkafka's waits that long unless
the batch fills): the resolution of the pauses measured."""
COMMAND_WAIT_S = 0.1
"""How long a member not yet subscribed waits for a command at a time."""
POLL_RECORDS_MAX = 500
PRODUCE_TICK_S = 0.01
"""The producer sends rate × this many records every tick."""
READY_TIMEOUT_S = 60.0
"""How long a member process may take to start and make its consumer."""
SETTLE_TIMEOUT_S = 60.0
"""How long a group may take to settle after a trigger, beyond the session timeout."""
CLOSE_TIMEOUT_S = 60.0
MEMBER_LIFETIME_S = 1_800.0
"""A member closes itself after this, should the benchmark have gone away."""


# ── a member process ───────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Event:
    member: int
    kind: str
    """ready, subscribe, assign, revoke, close, closed (from a member), killed (noted by
    the benchmark)."""
    at: float
    """time.monotonic() (one clock for every process on Linux)."""
    owned: tuple[int, ...] = ()
    """The partitions the member owns after the event."""


@dataclass(frozen=True)
class PollLog:
    member: int
    polls: list[tuple[float, int]]
    """(time after the poll, records it returned) for each poll that returned records."""


def member(
    index: int,
    mode: str,
    bootstrap: str,
    topic: str,
    group: str,
    timing: dict[str, int],
    commands: Queue[str],
    events: Queue[Event],
    logs: Queue[PollLog],
) -> None:
    """One group member: makes its consumer, then subscribes and closes when told."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": f"member-{index}",
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        **MODES[mode],
    }
    if mode != "consumer":
        config["session.timeout.ms"] = timing["session_ms"]
        config["heartbeat.interval.ms"] = timing["heartbeat_ms"]
    consumer = Consumer(config)
    eager = mode == "eager"
    owned: set[int] = set()

    def on_assign(_: Consumer, partitions: list[TopicPartition]) -> None:
        at = time.monotonic()
        if eager:
            owned.clear()  # an eager assignment is the whole of it
        owned.update(p.partition for p in partitions)
        events.put(Event(index, "assign", at, tuple(sorted(owned))))

    def on_revoke(_: Consumer, partitions: list[TopicPartition]) -> None:
        if eager:
            owned.clear()
        else:
            owned.difference_update(p.partition for p in partitions)
        # Noted once the callback is done: the client lets go of them after it.
        events.put(Event(index, "revoke", time.monotonic(), tuple(sorted(owned))))

    events.put(Event(index, "ready", time.monotonic()))
    polls: list[tuple[float, int]] = []
    subscribed = False
    deadline = time.monotonic() + MEMBER_LIFETIME_S
    while time.monotonic() < deadline:
        try:
            command = (
                commands.get(timeout=COMMAND_WAIT_S) if not subscribed else commands.get_nowait()
            )
        except queue.Empty:
            command = None
        if command == "subscribe":
            events.put(Event(index, "subscribe", time.monotonic()))
            consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
            subscribed = True
        elif command == "close":
            break
        if subscribed:
            messages = consumer.consume(POLL_RECORDS_MAX, POLL_S)
            received = sum(1 for m in messages if m.error() is None)
            if received:
                polls.append((time.monotonic(), received))
    events.put(Event(index, "close", time.monotonic(), tuple(sorted(owned))))
    consumer.close()
    events.put(Event(index, "closed", time.monotonic()))
    logs.put(PollLog(index, polls))


# ── the producer ───────────────────────────────────────────────────────────────────────


class SteadyProducer:
    """A thread producing ``rate`` records/s round-robin over the partitions, until
    stopped or ``seconds`` passed; it notes when it sent how many."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int, seconds: float):
        self._producer = Producer(producer_config(bootstrap, "1"))
        self._topic, self._partitions, self._rate, self._seconds = topic, partitions, rate, seconds
        self._stop = threading.Event()
        self.sent: list[tuple[float, int]] = []
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._producer.flush(CLOSE_TIMEOUT_S)
        del self._producer  # librdkafka's threads go with it, not with this object

    def _run(self) -> None:
        payload = b"x" * VALUE_BYTES
        per_tick = max(1, round(self._rate * PRODUCE_TICK_S))
        started = time.monotonic()
        next_tick = started
        partition = 0
        while not self._stop.is_set() and next_tick - started < self._seconds:
            for _ in range(per_tick):
                self._producer.produce(self._topic, payload, partition=partition)
                partition = (partition + 1) % self._partitions
            self.sent.append((time.monotonic(), per_tick))
            self._producer.poll(0)
            next_tick += PRODUCE_TICK_S
            self._stop.wait(max(0.0, next_tick - time.monotonic()))  # pacing, not a sync

    def sent_between(self, start: float, end: float) -> int:
        return sum(n for at, n in self.sent if start <= at <= end)


# ── the group as the benchmark sees it ─────────────────────────────────────────────────


@dataclass
class Scenario:
    name: str
    trigger_at: float
    settled_at: float | None
    """The last change of ownership before the group settled (None: it never did)."""
    quiet_from: float
    """The start of the quiet period before the trigger."""
    running: frozenset[int]
    """The members live both before the trigger and after (not the one joining, leaving
    or killed)."""
    unsettled: str = ""
    """What the group looked like when it did not settle."""


class GroupView:
    """The members' ownership, from their events, and the wait until it settles."""

    def __init__(self, partitions: int, events: Queue[Event]):
        self.partitions = partitions
        self._events = events
        self.log: list[Event] = []
        self.owned: dict[int, tuple[int, ...]] = {}
        self.live: set[int] = set()

    def note(self, event: Event) -> None:
        self.log.append(event)
        if event.kind in ("assign", "revoke", "close"):
            self.owned[event.member] = event.owned
        elif event.kind in ("closed", "killed"):
            self.owned.pop(event.member, None)

    def wait_for(self, member: int, kind: str, timeout_s: float) -> Event:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                event = self._events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise SystemExit(f"member {member} sent no {kind!r} in {timeout_s}s") from None
            self.note(event)
            if event.member == member and event.kind == kind:
                return event

    def wait_ready(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        ready: set[int] = set()
        while len(ready) < count:
            try:
                event = self._events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise SystemExit(
                    f"{count - len(ready)} members not ready in {timeout_s}s"
                ) from None
            self.note(event)
            if event.kind == "ready":
                ready.add(event.member)

    def balanced(self) -> bool:
        shares = [self.owned.get(m, ()) for m in self.live]
        owners = [p for share in shares for p in share]
        return (
            sorted(owners) == list(range(self.partitions))
            and max(map(len, shares)) - min(map(len, shares)) <= 1
        )

    def settle(self, quiet_s: float, timeout_s: float) -> float | None:
        """Wait until the live members own every partition once, balanced, and nothing
        changed for ``quiet_s``; the time of the last change, or None after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        changed_at = time.monotonic()
        while time.monotonic() < deadline:
            try:
                event = self._events.get(timeout=COMMAND_WAIT_S)
            except queue.Empty:
                if self.balanced() and time.monotonic() - changed_at >= quiet_s:
                    return changed_at
                continue
            before = {m: self.owned.get(m) for m in self.live}
            self.note(event)
            if {m: self.owned.get(m) for m in self.live} != before:
                changed_at = event.at
        return None

    def describe(self) -> str:
        return "; ".join(
            f"member {m}: {len(self.owned.get(m, ()))} partitions" for m in sorted(self.live)
        )


def double_owners(log: Iterable[Event]) -> list[str]:
    """Replays the ownership changes in time order: each time a partition was owned by two
    members at once (a member stops owning anything when it has closed or was killed)."""
    owned: dict[int, tuple[int, ...]] = {}
    found: list[str] = []
    seen: set[tuple[int, int, int]] = set()
    for event in sorted(log, key=lambda e: e.at):
        if event.kind in ("assign", "revoke", "close"):
            owned[event.member] = event.owned
        elif event.kind in ("closed", "killed"):
            owned.pop(event.member, None)
        owners: dict[int, list[int]] = {}
        for m, share in owned.items():
            for p in share:
                owners.setdefault(p, []).append(m)
        for p, ms in owners.items():
            if len(ms) > 1 and (key := (p, ms[0], ms[1])) not in seen:
                seen.add(key)
                found.append(f"partition {p} owned by members {ms} at {event.at:.3f}")
    return found


# ── one round of one mode ──────────────────────────────────────────────────────────────


@dataclass
class Measure:
    mode: str
    scenario: str
    rebalance_s: float | None
    """From the trigger to the last change of ownership (None: it never settled)."""
    pause_median_s: float | None
    pause_max_s: float | None
    pause_steady_s: float | None
    """The longest gap any running member saw in the quiet period before the trigger."""
    records: int | None
    records_share: float | None
    """Records received in the window ÷ records produced in it."""
    unowned_max_s: float | None = None
    """The longest time a running member owned no partition in the window (the eager
    protocol's stop: from a member's revocation to its new assignment)."""
    double_owned: list[str] = field(default_factory=list)
    unsettled: str = ""


def longest_gap(polls: Sequence[float], start: float, end: float) -> float | None:
    """The longest time between two consecutive polls (that returned records) where the
    later one comes after ``start`` and the earlier one before ``end``."""
    gaps = [b - a for a, b in itertools.pairwise(polls) if b > start and a < end]
    return max(gaps) if gaps else None


def longest_unowned(log: Iterable[Event], member: int, start: float, end: float) -> float:
    """The longest time within [start, end] that ``member`` owned no partition."""
    longest = 0.0
    empty_since: float | None = None
    for event in sorted((e for e in log if e.member == member), key=lambda e: e.at):
        if event.kind not in ("assign", "revoke") or event.at > end:
            continue
        if not event.owned and empty_since is None:
            empty_since = event.at
        elif event.owned and empty_since is not None:
            if event.at > start:
                longest = max(longest, event.at - max(empty_since, start))
            empty_since = None
    if empty_since is not None:
        longest = max(longest, end - max(empty_since, start))
    return longest


def measure(
    mode: str,
    scenario: Scenario,
    logs: dict[int, PollLog],
    producer: SteadyProducer,
    events: list[Event],
    doubles: list[str],
) -> Measure:
    if scenario.settled_at is None:
        return Measure(
            mode,
            scenario.name,
            *(None, None, None, None, None, None),
            double_owned=doubles,
            unsettled=scenario.unsettled,
        )
    start, end = scenario.trigger_at, scenario.settled_at
    pauses: list[float] = []
    steady: list[float] = []
    for m in sorted(scenario.running & logs.keys()):  # a killed member's log is lost
        times = [at for at, _ in logs[m].polls]
        if (gap := longest_gap(times, start, end)) is not None:
            pauses.append(gap)
        if (rest := longest_gap(times, scenario.quiet_from, start)) is not None:
            steady.append(rest)
    received = sum(n for log in logs.values() for at, n in log.polls if start <= at <= end)
    produced = producer.sent_between(start, end)
    return Measure(
        mode,
        scenario.name,
        end - start,
        statistics.median(pauses) if pauses else None,
        max(pauses) if pauses else None,
        max(steady) if steady else None,
        received,
        received / produced if produced else None,
        max(longest_unowned(events, m, start, end) for m in scenario.running),
        doubles,
    )


class Members:
    """The member processes of one round, each told what to do through its own queue;
    all stopped (closed, else killed) on leaving the block."""

    def __init__(self, count: int, mode: str, bootstrap: str, topic: str, args: argparse.Namespace):
        context = multiprocessing.get_context("spawn")
        group = f"bench-{mode}-{uuid.uuid4().hex[:8]}"
        timing = {"session_ms": args.session_ms, "heartbeat_ms": args.heartbeat_ms}
        self.events: Queue[Event] = context.Queue()
        self.logs: Queue[PollLog] = context.Queue()
        self._commands: list[Queue[str]] = [context.Queue() for _ in range(count)]
        self.processes: list[SpawnProcess] = [
            context.Process(
                target=member,
                args=(i, mode, bootstrap, topic, group, timing, self._commands[i]),
                kwargs={"events": self.events, "logs": self.logs},
                name=f"rebalance-member-{i}",
            )
            for i in range(count)
        ]
        self.gone: set[int] = set()
        """Members closed or killed."""
        self.killed: set[int] = set()

    def __enter__(self) -> Members:
        for process in self.processes:
            process.start()
        return self

    def __exit__(self, *_: object) -> None:
        for i in range(len(self.processes)):
            if i not in self.gone:
                self._commands[i].put("close")
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()

    def tell(self, index: int, command: str) -> None:
        self._commands[index].put(command)
        if command == "close":
            self.gone.add(index)

    def kill(self, index: int) -> None:
        self.processes[index].kill()
        self.processes[index].join(CLOSE_TIMEOUT_S)
        self.gone.add(index)
        self.killed.add(index)

    def close_all(self) -> dict[int, PollLog]:
        """Close every member still running; the poll logs of all but the killed."""
        for i in range(len(self.processes)):
            if i not in self.gone:
                self.tell(i, "close")
        collected: dict[int, PollLog] = {}
        for _ in range(len(self.processes) - len(self.killed)):
            log = self.logs.get(timeout=CLOSE_TIMEOUT_S)
            collected[log.member] = log
        return collected


def run_mode(bootstrap: str, mode: str, args: argparse.Namespace) -> list[Measure]:
    """One round of one mode: a new topic and group, the scenarios in turn."""
    topic = create_topic(bootstrap, args.partitions)
    settle_timeout_s = args.session_ms / 1000 + SETTLE_TIMEOUT_S + args.quiet_seconds
    joining, leaving, killed = args.members, 0, 1
    scenarios: list[Scenario] = []
    with (
        Members(args.members + 1, mode, bootstrap, topic, args) as members,
        SteadyProducer(bootstrap, topic, args.partitions, args.rate, MEMBER_LIFETIME_S) as producer,
    ):
        view = GroupView(args.partitions, members.events)
        view.wait_ready(len(members.processes), READY_TIMEOUT_S)
        view.live = set(range(args.members))
        for i in sorted(view.live):
            members.tell(i, "subscribe")
        if view.settle(args.quiet_seconds, settle_timeout_s) is None:
            raise SystemExit(f"{mode}: the first members never settled: {view.describe()}")
        for name in args.scenarios:
            # At a random point of the members' heartbeat cycle: the quiet period would
            # otherwise end at the same point of it every time.
            time.sleep(random.uniform(0, args.heartbeat_ms / 1000))  # a delay, not a sync
            quiet_from = time.monotonic() - args.quiet_seconds
            before = frozenset(view.live)
            if name == "join":
                view.live.add(joining)
                members.tell(joining, "subscribe")
                trigger = view.wait_for(joining, "subscribe", READY_TIMEOUT_S).at
            elif name == "leave":
                view.live.discard(leaving)
                members.tell(leaving, "close")
                trigger = view.wait_for(leaving, "close", READY_TIMEOUT_S).at
            else:
                view.live.discard(killed)
                trigger = time.monotonic()
                members.kill(killed)
                view.note(Event(killed, "killed", trigger))
            settled = view.settle(args.quiet_seconds, settle_timeout_s)
            state = view.describe()
            scenarios.append(
                Scenario(
                    name,
                    trigger,
                    settled,
                    quiet_from,
                    before & view.live,
                    "" if settled is not None else state,
                )
            )
            outcome = (
                f"settled {settled - trigger:.2f} s after the trigger"
                if settled is not None
                else f"did not settle in {settle_timeout_s:.0f} s: {state}"
            )
            print(f"  {mode} {name}: {outcome}", file=sys.stderr)
            if settled is None:
                break  # the next scenario would start from an unsettled group
        logs = members.close_all()
        while True:  # the closing members' last events, for the replay
            try:
                view.note(members.events.get(timeout=COMMAND_WAIT_S))
            except queue.Empty:
                break
    doubles = double_owners(view.log)
    return [measure(mode, scenario, logs, producer, view.log, doubles) for scenario in scenarios]


# ── the report ─────────────────────────────────────────────────────────────────────────


def print_report(results: list[Measure], args: argparse.Namespace, seed: int) -> None:
    print_run_header()
    print(
        f"{args.members} members (+1 joining), {args.partitions} partitions, "
        f"{args.rate:,} records/s produced; classic session {args.session_ms} ms, heartbeat "
        f"{args.heartbeat_ms} ms; broker: {', '.join(broker_settings(args))}; "
        f"median (lowest–highest) of {args.repeat} rounds; seed {seed}."
    )
    print()
    print(
        "| mode | scenario | rebalance, s | pause of a running member, s (median) "
        "| longest pause, s | longest gap at rest, s | longest without partitions, s "
        "| records received in the window | % of produced |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for mode in args.modes:
        for name in args.scenarios:
            rows = [r for r in results if r.mode == mode and r.scenario == name]
            if not rows:
                continue
            unsettled = sum(1 for r in rows if r.rebalance_s is None)
            note = f" ({unsettled} of {len(rows)} never settled)" if unsettled else ""
            print(
                f"| {mode} | {name}{note} | {spread((r.rebalance_s for r in rows), 2)} "
                f"| {spread((r.pause_median_s for r in rows), 2)} "
                f"| {spread((r.pause_max_s for r in rows), 2)} "
                f"| {spread((r.pause_steady_s for r in rows), 2)} "
                f"| {spread((r.unowned_max_s for r in rows), 2)} "
                f"| {spread(r.records for r in rows)} "
                f"| {spread(percent(r.records_share) for r in rows)} |"
            )
    doubles = sorted({d for r in results for d in r.double_owned})
    print()
    if doubles:
        print(f"Partitions owned by two members at once ({len(doubles)}):")
        for line in doubles[:20]:
            print(f"- {line}")
    else:
        print("No partition was ever owned by two members at once.")
    for r in results:
        if r.unsettled:
            print(f"- {r.mode} {r.scenario} did not settle: {r.unsettled}")


def percent(share: float | None) -> float | None:
    return None if share is None else 100 * share


def broker_settings(args: argparse.Namespace) -> list[str]:
    return [
        "group.coordinator.rebalance.protocols=classic,consumer",
        "group.initial.rebalance.delay.ms=0",
        f"group.consumer.min.heartbeat.interval.ms={args.heartbeat_ms}",
        f"group.consumer.heartbeat.interval.ms={args.heartbeat_ms}",
        f"group.consumer.min.session.timeout.ms={args.session_ms}",
        f"group.consumer.session.timeout.ms={args.session_ms}",
        *args.override,
    ]


def comma_list(choices: Sequence[str]) -> Any:
    def parse(text: str) -> list[str]:
        values = [v.strip() for v in text.split(",") if v.strip()]
        unknown = [v for v in values if v not in choices]
        if unknown or not values:
            raise argparse.ArgumentTypeError(f"choose among {', '.join(choices)}")
        return values

    return parse


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--modes", type=comma_list(tuple(MODES)), default=list(MODES))
    parser.add_argument(
        "--scenarios", type=comma_list(SCENARIOS), default=list(SCENARIOS), help="in this order"
    )
    parser.add_argument("--members", type=int, default=10, help="the group before the join")
    parser.add_argument("--partitions", type=int, default=60)
    parser.add_argument("--rate", type=int, default=1_200, help="records/s produced")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of every mode")
    parser.add_argument("--quiet-seconds", type=float, default=5.0, help="settled after this")
    parser.add_argument("--session-ms", type=int, default=10_000)
    parser.add_argument("--heartbeat-ms", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=None, help="of the trigger delays")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the raw figures")
    parser.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another broker setting",
    )
    args = parser.parse_args(argv)
    if args.members < 2 or args.partitions < args.members + 1:
        parser.error("--members must be at least 2, and --partitions more than --members")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    random.seed(seed)
    print(f"seed {seed} (--seed {seed} repeats the trigger delays)", file=sys.stderr)
    results: list[Measure] = []
    with sluice_broker(args.data_dir, broker_settings(args)) as target:
        for round_number in range(args.repeat):
            print(f"round {round_number + 1} of {args.repeat}", file=sys.stderr)
            for mode in args.modes:
                results += run_mode(target.bootstrap, mode, args)
    print_report(results, args, seed)
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
