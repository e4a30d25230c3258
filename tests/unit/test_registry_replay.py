"""Random operations on the registry shard (Avro schemas), some of their appends failing: replaying
the records it committed always rebuilds the state it holds, and its invariants hold
after every step."""

from __future__ import annotations

import os
import random

import pytest
from registry_testing import Driver, record_schema

from sluice.common.errors import ErrorCode

STEPS = 300
SUBJECTS = ("a", "b", "c")
SCHEMAS = [
    record_schema("R", ("a", "int")),
    record_schema("R", ("a", "int"), ("b", "int", 0)),
    record_schema("R", ("a", "int"), ("c", "string")),
    record_schema("R"),
    record_schema("S", ("a", "string")),
]
LEVELS = ("NONE", "BACKWARD", "FULL_TRANSITIVE", "FORWARD")
MODES = ("READWRITE", "READONLY")
BASE_SEED = int(os.environ.get("REGISTRY_SEED") or random.randrange(2**32))
"""The seed of the first run (each run adds its number); printed, and taken from
``REGISTRY_SEED`` to reproduce a failure."""


def random_call(rng: random.Random) -> tuple[str, str, object, dict[str, str]]:
    subject = rng.choice(SUBJECTS)
    permanent = {"permanent": "true"} if rng.random() < 0.4 else {}
    choices: list[tuple[str, str, object, dict[str, str]]] = [
        ("POST", f"subjects/{subject}/versions", {"schema": rng.choice(SCHEMAS)}, {}),
        ("POST", f"subjects/{subject}/versions", {"schema": rng.choice(SCHEMAS)}, {}),
        ("DELETE", f"subjects/{subject}/versions/{rng.randint(1, 4)}", None, permanent),
        ("DELETE", f"subjects/{subject}", None, permanent),
        ("PUT", f"config/{subject}", {"compatibility": rng.choice(LEVELS)}, {}),
        ("PUT", "config", {"compatibility": rng.choice(LEVELS)}, {}),
        ("DELETE", f"config/{subject}", None, {}),
        ("PUT", f"mode/{subject}", {"mode": rng.choice(MODES)}, {}),
        ("DELETE", f"mode/{subject}", None, {}),
        ("GET", f"subjects/{subject}/versions", None, {"deleted": "true"}),
    ]
    return rng.choice(choices)


@pytest.mark.parametrize("run", range(4))
def test_replaying_the_committed_records_rebuilds_the_state(run: int) -> None:
    seed = BASE_SEED + run
    print(f"registry replay seed {seed} (REGISTRY_SEED={BASE_SEED} reproduces the runs)")
    rng = random.Random(seed)
    driver = Driver()
    statuses: set[int] = set()
    for _ in range(STEPS):
        driver.fail_appends_with = (
            rng.choice([ErrorCode.not_enough_replicas, ErrorCode.not_leader_or_follower])
            if rng.random() < 0.1
            else None
        )
        method, target, body, query = random_call(rng)
        statuses.add(driver.call(method, target, body, **query).status)
        driver.shard.state.check_invariants()
    replayed = driver.replayed()
    assert vars(replayed.state) == vars(driver.shard.state)
    assert {200, 404, 500}.issubset(statuses), statuses
    ids = {(value.subject, value.version): value.id for value in driver.shard.state.all_versions()}
    by_text: dict[str, set[int]] = {}
    for value in driver.shard.state.all_versions():
        by_text.setdefault(value.schema, set()).add(value.id)
    assert all(len(found) == 1 for found in by_text.values()), "one id per schema"
    assert len(ids) == len(set(ids)), ids
