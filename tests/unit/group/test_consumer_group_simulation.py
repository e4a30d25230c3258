"""Seeded random runs of consumer groups of the new protocol (KIP-848): consumers join,
heartbeat, leave (for good or, static ones, for a while), crash, lose answers, change
their subscriptions (names or a regular expression); topics grow, disappear and come
back under a new id; the clock jumps and timers fire; some writes of the records fail,
and their change is reverted (the groups exactly as before, checked each time). The
simulated consumers behave as Kafka's: they take the assignment each answer gives, give
up what it leaves out before their next heartbeat, and rejoin when fenced.

Checked after every step: no partition is owned by two members (on the coordinator)
nor held by two consumers the coordinator still counts as members; a consumer only
gets a partition nobody else holds; member epochs never go backwards. At the end,
with the chaos stopped and the consumers heartbeating, the group becomes STABLE with
every partition of a subscribed topic assigned, and a coordinator loaded from the
records holds the same groups. A failure prints its seed (SLUICE_TEST_SEED replays it).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field

from consumer_helpers import GROUP, REBALANCE_MS, Coordinator, topic

from sluice.common.errors import ErrorCode
from sluice.group.consumer_group import ConsumerGroupState, TopicImage
from sluice.group.consumer_heartbeat_api import (
    ArmTimer,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TimerKey,
)
from sluice.group.consumer_records import TopicPartitions

STEPS = 1_500
CLIENTS = 6
SETTLE_ROUNDS = 40
"""Heartbeat rounds after the chaos, each a heartbeat interval apart: long enough for
crashed members' sessions to end and for every revocation to go through."""
PARTITIONS_MAX = 8
WRITE_FAILURE_PROBABILITY = 0.05
"""Of a heartbeat's or an expiry's records not being written (reverted in memory)."""
HEARTBEAT_MS = 5_000
SESSION_MS = 45_000
SUBSCRIPTIONS: list[tuple[tuple[str, ...] | None, str | None]] = [
    (("a",), None),
    (("a", "b"), None),
    (("b", "c"), None),
    (None, "a|c"),
    (("c",), None),
]

Held = set[tuple[uuid.UUID, int]]


@dataclass
class Client:
    name: str
    instance_id: str | None
    incarnation: int = 0
    member_id: str = ""
    epoch: int = 0
    in_group: bool = False
    held: Held = field(default_factory=set)
    subscription: tuple[tuple[str, ...] | None, str | None] = SUBSCRIPTIONS[0]

    def new_incarnation(self) -> None:
        self.incarnation += 1
        self.member_id = f"{self.name}-{self.incarnation}"
        self.epoch, self.in_group, self.held = 0, False, set()


class Simulation:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.coordinator = Coordinator()
        self.now_ms = 0
        self.topics: dict[str, TopicImage] = {
            "a": topic("a", 3),
            "b": topic("b", 2),
            "c": topic("c", 4),
        }
        self.timers: dict[TimerKey, int] = {}
        self.clients = [Client(f"c{i}", f"i{i}" if i % 3 == 0 else None) for i in range(CLIENTS)]
        for client in self.clients:
            client.new_incarnation()
            client.subscription = self.rng.choice(SUBSCRIPTIONS)
        self.epochs_seen: dict[str, int] = {}
        self.chaos = True
        """Writes fail now and then (until the group is left to settle)."""

    # ------------------------------------------------------------ the consumers

    def request(self, client: Client) -> ConsumerGroupHeartbeatRequest:
        names, regex = client.subscription
        owned = _as_entries(client.held)
        if not client.in_group:
            return ConsumerGroupHeartbeatRequest(
                GROUP, client.member_id, 0, client.instance_id, None, REBALANCE_MS,
                names, regex, None, (), client.name, "/10.0.0.1",
            )  # fmt: skip
        return ConsumerGroupHeartbeatRequest(
            GROUP, client.member_id, client.epoch, client.instance_id,
            owned_partitions=owned, client_id=client.name, client_host="/10.0.0.1",
        )  # fmt: skip

    def send(
        self, client: Client, request: ConsumerGroupHeartbeatRequest, *, lost: bool = False
    ) -> None:
        written = not self.chaos or self.rng.random() >= WRITE_FAILURE_PROBABILITY
        result = self.coordinator.heartbeat(request, self.topics, self.now_ms, written=written)
        lost = lost or (not written and bool(result.records))  # told NOT_COORDINATOR
        for change in result.timers:
            if isinstance(change, ArmTimer):
                self.timers[change.key] = change.deadline_ms
            else:
                self.timers.pop(change.key, None)
        if lost:
            return
        self.learn(client, request, result.response)

    def learn(
        self,
        client: Client,
        request: ConsumerGroupHeartbeatRequest,
        answer: ConsumerGroupHeartbeatResponse,
    ) -> None:
        if answer.error is ErrorCode.none:
            if request.member_epoch < 0:
                client.in_group, client.held, client.epoch = False, set(), 0
                return
            assert answer.member_id == client.member_id
            if client.in_group:
                assert answer.member_epoch >= client.epoch, "a member's epoch went backwards"
            client.in_group, client.epoch = True, answer.member_epoch
            if answer.assignment is not None:
                given = {(e.topic_id, p) for e in answer.assignment for p in e.partitions}
                for key in given - client.held:
                    for other in self.live_members():
                        assert other is client or key not in other.held, (
                            f"{client.member_id} given {key} still held by {other.member_id}"
                        )
                client.held = given
        elif answer.error in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id):
            client.in_group, client.held, client.epoch = False, set(), 0
        else:
            assert answer.error is ErrorCode.unreleased_instance_id, answer
            client.held = set()

    def live_members(self) -> list[Client]:
        """The consumers the coordinator still counts as members."""
        group = self.coordinator.groups.group(GROUP)
        members = {} if group is None else group.members
        return [c for c in self.clients if c.member_id in members]

    # ------------------------------------------------------------ the world

    def fire_timers(self) -> None:
        for key, deadline in sorted(self.timers.items(), key=lambda item: item[1]):
            if deadline <= self.now_ms and self.timers.get(key) == deadline:
                del self.timers[key]
                written = not self.chaos or self.rng.random() >= WRITE_FAILURE_PROBABILITY
                result = self.coordinator.expire(key, self.now_ms, written=written)
                for change in result.timers:
                    if isinstance(change, ArmTimer):
                        self.timers[change.key] = change.deadline_ms
                    else:
                        self.timers.pop(change.key, None)

    def change_topics(self) -> None:
        name = self.rng.choice(["a", "b", "c"])
        current = self.topics.get(name)
        if current is None:
            fresh = uuid.UUID(int=self.rng.getrandbits(128))
            self.topics[name] = TopicImage(fresh, name, self.rng.randint(1, 3))
        elif current.partition_count < PARTITIONS_MAX and self.rng.random() < 0.7:
            self.topics[name] = TopicImage(current.topic_id, name, current.partition_count + 1)
        else:
            del self.topics[name]

    def step(self) -> None:
        client = self.rng.choice(self.clients)
        action = self.rng.randrange(100)
        if action < 55:
            self.send(client, self.request(client))
        elif action < 60:
            self.send(client, self.request(client), lost=True)
        elif action < 65 and client.in_group:
            client.held = set()
            self.send(
                client,
                ConsumerGroupHeartbeatRequest(GROUP, client.member_id, -1, client.instance_id),
            )
        elif action < 70 and client.in_group and client.instance_id is not None:
            client.held = set()
            self.send(
                client,
                ConsumerGroupHeartbeatRequest(GROUP, client.member_id, -2, client.instance_id),
            )
            client.new_incarnation()
        elif action < 74:
            client.new_incarnation()  # crashed and restarted: its old member times out
        elif action < 80 and client.in_group:
            client.subscription = self.rng.choice(SUBSCRIPTIONS)
            names, regex = client.subscription
            request = self.request(client)
            self.send(client, ConsumerGroupHeartbeatRequest(
                GROUP, client.member_id, client.epoch, client.instance_id, None, -1,
                names if names is not None else (), regex if regex is not None else "",
                None, request.owned_partitions, client.name, "/10.0.0.1",
            ))  # fmt: skip
        elif action < 85:
            self.change_topics()
        else:
            self.now_ms += self.rng.choice([100, 1_000, HEARTBEAT_MS, SESSION_MS // 2])
            self.fire_timers()

    # ------------------------------------------------------------ invariants

    def check(self) -> None:
        group = self.coordinator.groups.group(GROUP)
        if group is None:
            return
        owners: dict[tuple[uuid.UUID, int], str] = {}
        for member in group.members.values():
            for key in member.owned():
                assert key not in owners, f"{key} owned by {owners[key]} and {member.member_id}"
                owners[key] = member.member_id
            if member.member_epoch >= 0:
                seen = self.epochs_seen.get(member.member_id, 0)
                assert member.member_epoch >= seen, f"{member.member_id}'s epoch went back"
                self.epochs_seen[member.member_id] = member.member_epoch
        assert owners == group.partition_owners
        held: dict[tuple[uuid.UUID, int], str] = {}
        for client in self.live_members():
            for key in client.held:
                assert key not in held, f"{key} held by {held[key]} and {client.member_id}"
                held[key] = client.member_id
                assert owners.get(key) == client.member_id

    def settle(self) -> None:
        self.chaos = False
        for client in self.clients:
            if self.rng.random() < 0.5:
                client.subscription = SUBSCRIPTIONS[0]
        for _ in range(SETTLE_ROUNDS):
            self.now_ms += HEARTBEAT_MS
            for client in self.clients:
                self.send(client, self.request(client))
                self.check()
            self.fire_timers()
            self.check()
        group = self.coordinator.groups.group(GROUP)
        assert group is not None
        assert group.state is ConsumerGroupState.STABLE, group.state
        subscribed = group.subscribed_topics
        expected = {(t.topic_id, p) for t in subscribed.values() for p in range(t.partition_count)}
        assigned = {key for m in group.members.values() for key in m.owned()}
        assert assigned == expected
        held = {key for c in self.live_members() for key in c.held}
        assert held == expected
        self.coordinator.check_replay()


def _as_entries(held: Held) -> tuple[TopicPartitions, ...]:
    by_topic: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in sorted(held):
        by_topic.setdefault(topic_id, []).append(partition)
    return tuple(TopicPartitions(t, tuple(p)) for t, p in sorted(by_topic.items()))


def test_random_consumer_groups_keep_their_invariants_and_settle(seed: int) -> None:
    simulation = Simulation(seed)
    for _ in range(STEPS):
        simulation.step()
        simulation.check()
    simulation.settle()
