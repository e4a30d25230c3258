"""Moving replicas on four real brokers with ``sluice topics reassign`` and ``sluice
cluster decommission``: the new replicas copy the partitions and join the ISR, the old
ones leave and their directories go, and every record is still there."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from client_helpers import consume_exactly, produce_and_flush, producer_config
from cluster_processes import Cluster, running_cluster
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from sluice.cli.local_zookeeper import LocalZooKeeper
from sluice.storage.partition_dirs import is_deletion_dir_name

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 60.0
MOVE_TIMEOUT_S = 60.0
VERIFY_INTERVAL_S = 0.5
RECORDS = 200


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), zookeeper.connect, 4) as started:
        yield started


def _sluice(
    cluster: Cluster, *arguments: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice", *arguments, "--bootstrap-server", cluster.bootstrap],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        check=False,
        cwd=cwd,
    )


def _verify_until_complete(cluster: Cluster, plan: Path) -> subprocess.CompletedProcess[str]:
    """``--verify`` until it says every move is complete (exit status 0)."""
    deadline = time.monotonic() + MOVE_TIMEOUT_S
    while (
        verified := _sluice(cluster, "topics", "reassign", "--verify", "--plan", str(plan))
    ).returncode:
        assert time.monotonic() < deadline, verified.stdout + verified.stderr
        time.sleep(VERIFY_INTERVAL_S)  # polling the CLI's answer, not a sync
    return verified


def _replicas(status: dict, name: str) -> dict[int, list[int]]:
    return {p["partition"]: p["replicas"] for p in status["topics"][name]}


def test_reassign_moves_data_to_other_brokers_and_decommission_empties_one(
    cluster: Cluster, tmp_path: Path
) -> None:
    name = f"moving-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin(cluster.broker(0))
    topic = NewTopic(name, num_partitions=2, replica_assignment=[[0, 1], [1, 0]])
    admin.create_topics([topic])[name].result(CLIENT_TIMEOUT_S)
    producer = Producer(producer_config(cluster.bootstrap, acks="all"))
    produce_and_flush(
        producer, name, [{"value": f"v{i}".encode(), "partition": i % 2} for i in range(RECORDS)]
    )

    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": name, "partition": 0, "replicas": [2, 3]},
                    {"topic": name, "partition": 1, "replicas": [3, 2]},
                ],
            }
        )
    )
    started = _sluice(cluster, "topics", "reassign", "--execute", "--plan", str(plan))
    assert started.returncode == 0, started.stderr
    assert "Started moving 2 of 2" in started.stdout
    verified = _verify_until_complete(cluster, plan)
    assert "2 of 2 partition(s) complete" in verified.stdout
    status = cluster.wait_for(
        lambda s: (
            _replicas(s, name) == {0: [2, 3], 1: [3, 2]}
            and all(sorted(p["isr"]) == [2, 3] for p in s["topics"][name])
        )
    )
    assert {p["leader"] for p in status["topics"][name]} <= {2, 3}
    for node_id in (0, 1):
        directories = cluster.broker(node_id).data_dir
        deadline = time.monotonic() + MOVE_TIMEOUT_S
        # A replica moved away is renamed for deletion at once (removed later).
        while any(not is_deletion_dir_name(p.name) for p in directories.glob(f"{name}-*")):
            assert time.monotonic() < deadline, f"broker {node_id} still holds {name}"
            time.sleep(VERIFY_INTERVAL_S)

    # The plan is written where decommission says, and --verify follows it.
    planned = _sluice(cluster, "cluster", "decommission", "2", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    written = tmp_path / "decommission-broker-2.json"
    assert "Wrote the plan to decommission-broker-2.json" in planned.stderr
    saved = json.loads(written.read_text())
    assert {p["partition"] for p in saved["proposed"]["partitions"]} == {0, 1}
    assert all(2 not in p["replicas"] for p in saved["proposed"]["partitions"])
    assert {p["partition"]: p["replicas"] for p in saved["current"]["partitions"]} == {
        0: [2, 3],
        1: [3, 2],
    }
    decommissioned = _sluice(cluster, "cluster", "decommission", "2", "--execute", cwd=tmp_path)
    assert decommissioned.returncode == 0, decommissioned.stderr
    assert "--verify --plan decommission-broker-2.json" in decommissioned.stdout
    verified = _verify_until_complete(cluster, written)
    assert "2 of 2 partition(s) complete" in verified.stdout
    cluster.wait_for(
        lambda s: (
            all(2 not in p["replicas"] for p in s["topics"][name])
            and all(len(p["isr"]) == 2 for p in s["topics"][name])
        ),
        MOVE_TIMEOUT_S,
    )
    got = consume_exactly(cluster.bootstrap, [(name, 0), (name, 1)], RECORDS)
    assert sorted(m.value().decode() for m in got) == sorted(f"v{i}" for i in range(RECORDS))


def test_generate_proposes_a_plan_that_execute_takes(cluster: Cluster, tmp_path: Path) -> None:
    name = f"spread-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin(cluster.broker(0))
    admin.create_topics([NewTopic(name, num_partitions=4, replica_assignment=[[0, 1]] * 4)])[
        name
    ].result(CLIENT_TIMEOUT_S)
    generated = _sluice(
        cluster, "topics", "reassign", "--generate", "--topics", name, "--brokers", "0,1,2,3"
    )
    assert generated.returncode == 0, generated.stderr
    document = json.loads(generated.stdout)
    proposed = {p["partition"]: p["replicas"] for p in document["proposed"]["partitions"]}
    assert {p["partition"]: p["replicas"] for p in document["current"]["partitions"]} == {
        index: [0, 1] for index in range(4)
    }
    assert sorted(r for replicas in proposed.values() for r in replicas) == [0, 0, 1, 1, 2, 2, 3, 3]
    plan = tmp_path / "generated.json"
    plan.write_text(generated.stdout)
    started = _sluice(cluster, "topics", "reassign", "--execute", "--plan", str(plan))
    assert started.returncode == 0, started.stderr
    cluster.wait_for(lambda s: _replicas(s, name) == proposed, MOVE_TIMEOUT_S)


def test_bad_plans_are_refused_with_what_is_wrong(cluster: Cluster, tmp_path: Path) -> None:
    plan = tmp_path / "bad.json"
    plan.write_text('{"version": 1, "partitions": [{"topic": "t", "replicas": "x"}]}')
    refused = _sluice(cluster, "topics", "reassign", "--execute", "--plan", str(plan))
    assert refused.returncode != 0
    assert "entry 1 needs a topic, a partition number" in refused.stderr
    missing = _sluice(cluster, "topics", "reassign", "--verify")
    assert missing.returncode != 0 and "--verify needs --plan FILE" in missing.stderr


THROTTLE_BYTES_PER_S = 100_000
THROTTLED_DATA_BYTES = 1_000_000
"""Ten seconds of copying at the throttle: the move cannot be done after two."""


def test_a_throttled_move_copies_no_faster_than_the_throttle(
    cluster: Cluster, tmp_path: Path
) -> None:
    name = f"throttled-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin(cluster.broker(0))
    admin.create_topics([NewTopic(name, num_partitions=1, replica_assignment=[[0, 1]])])[
        name
    ].result(CLIENT_TIMEOUT_S)
    value = b"x" * 10_000
    producer = Producer(producer_config(cluster.bootstrap, acks="all"))
    count = THROTTLED_DATA_BYTES // len(value)
    produce_and_flush(producer, name, [{"value": value} for _ in range(count)])
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": name, "partition": 0, "replicas": [2, 3]}]}
        )
    )
    started = _sluice(
        cluster,
        "topics",
        "reassign",
        "--execute",
        "--plan",
        str(plan),
        "--throttle",
        str(THROTTLE_BYTES_PER_S),
    )
    assert started.returncode == 0, started.stderr
    copying_since = time.monotonic()
    configs = _sluice(cluster, "topics", "describe", name)
    assert "reassignment.throttled.rate" in configs.stdout, configs.stdout
    # A lower bound only: whatever the machine's speed, a throttled copy cannot be faster.
    while time.monotonic() - copying_since < 2.0:
        verified = _sluice(cluster, "topics", "reassign", "--verify", "--plan", str(plan))
        assert verified.returncode == 1, "copied faster than the throttle allows"
        time.sleep(VERIFY_INTERVAL_S)  # polling the CLI's answer, not a sync
    unthrottled = _sluice(
        cluster, "topics", "alter-config", name, "--delete", "reassignment.throttled.rate"
    )
    assert unthrottled.returncode == 0, unthrottled.stderr
    _verify_until_complete(cluster, plan)
    got = consume_exactly(cluster.bootstrap, [(name, 0)], count)
    assert len(got) == count
