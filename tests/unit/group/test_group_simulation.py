"""Seeded random runs of the coordinator: many members and groups doing everything at
once (joins of every kind, syncs, heartbeats, leaves, commits, deletions), appends that
complete late or fail, and a clock that jumps. Throughout, the harness checks the
groups' invariants and that no request is answered twice; at the end every request has
its answer, and a coordinator replayed from the log has exactly the committed offsets
of the one that wrote it. A failure prints its seed (SLUICE_TEST_SEED replays it)."""

from __future__ import annotations

import random

import pytest
from group_helpers import CONFIG, REBALANCE_MS, SESSION_MS, Harness

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.group.api import JoinGroupResponse, MemberIdentity

GROUPS = ["g1", "g2", "g3"]
INSTANCES = ["i1", "i2"]
APPEND_FAILURES = [ErrorCode.not_leader_or_follower, ErrorCode.request_timed_out]


class Client:
    """What one simulated consumer knows: its group, member id and generation."""

    def __init__(self, group_id: str, instance: str | None) -> None:
        self.group_id = group_id
        self.instance = instance
        self.member_id = ""
        self.generation = -1


def run_simulation(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    harness = Harness(CONFIG, seed)
    harness.auto_commit = False
    clients = [Client(rng.choice(GROUPS), rng.choice([None, None, *INSTANCES])) for _ in range(8)]
    tokens: list[int] = []
    joins: dict[int, Client] = {}

    def learn() -> None:
        for token, client in list(joins.items()):
            answer = harness.reply(token)
            if isinstance(answer, JoinGroupResponse):
                del joins[token]
                if answer.error in (ErrorCode.none, ErrorCode.member_id_required):
                    client.member_id = answer.member_id
                    client.generation = answer.generation_id
                elif answer.error in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
                    client.member_id, client.generation = "", -1

    for _ in range(steps):
        client = rng.choice(clients)
        action = rng.randrange(12)
        if action <= 2:
            token = harness.join(
                client.group_id,
                client.member_id,
                instance=client.instance,
                client_id="c",
                require_known=rng.random() < 0.5,
                session_ms=SESSION_MS,
                rebalance_ms=rng.choice([SESSION_MS, REBALANCE_MS]),
            )
            joins[token] = client
            tokens.append(token)
        elif action == 3:
            group = harness.coordinator.group(client.group_id)
            members = list(group.members) if group is not None else []
            assignments = {m: rng.randbytes(2) for m in members}
            tokens.append(
                harness.sync(
                    client.member_id,
                    client.generation,
                    assignments,
                    group_id=client.group_id,
                    instance=client.instance,
                )
            )
        elif action == 4:
            harness.heartbeat(
                client.member_id,
                client.generation,
                group_id=client.group_id,
                instance=client.instance,
            )
        elif action == 5:
            harness.leave(
                MemberIdentity(client.member_id, client.instance), group_id=client.group_id
            )
        elif action == 6:
            offsets = {("t", rng.randrange(3)): rng.randrange(1000) for _ in range(2)}
            if rng.random() < 0.5:
                tokens.append(harness.commit(offsets, group_id=client.group_id))
            else:
                tokens.append(
                    harness.commit(
                        offsets,
                        group_id=client.group_id,
                        member_id=client.member_id,
                        generation=client.generation,
                        instance=client.instance,
                    )
                )
        elif action == 7 and rng.random() < 0.2:
            tokens.append(harness.delete_groups(client.group_id))
        elif action == 8 and rng.random() < 0.3:
            tokens.append(harness.delete_offsets(client.group_id, TopicPartition("t", 0)))
        elif action == 9:
            harness.commit_appends(count=rng.randrange(1, 4))
        elif action == 10 and rng.random() < 0.3:
            harness.commit_appends(rng.choice(APPEND_FAILURES), count=1)
        else:
            harness.advance(rng.choice([0, 1, 500, 3_000, SESSION_MS]))
        learn()

    for _ in range(4):
        harness.commit_appends()
        harness.advance(REBALANCE_MS + SESSION_MS)
    harness.commit_appends()
    learn()
    unanswered = [t for t in tokens if harness.reply(t) is None]
    assert unanswered == [], f"requests never answered: {unanswered}"
    assert harness.coordinator.appends_in_flight == 0
    replayed = harness.replayed()
    for group_id in GROUPS:
        assert replayed.fetch_offsets(group_id, None) == harness.coordinator.fetch_offsets(
            group_id, None
        ), group_id


def test_random_runs(seed: int) -> None:
    run_simulation(seed, steps=1_500)


@pytest.mark.parametrize("offset", range(20))
def test_random_runs_many_seeds(seed: int, offset: int) -> None:
    run_simulation(seed + offset, steps=300)
