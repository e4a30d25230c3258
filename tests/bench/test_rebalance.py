"""bench/rebalance.py: its replay finds a partition owned by two members at once (and
only then), and, against a real broker, small: a group of two classic (eager) and two
consumer-protocol members settles after a third joins and after one leaves, with no
partition ever owned twice."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import rebalance
from rebalance import Event, double_owners, longest_unowned

RUN_TIMEOUT_S = 300


def test_the_replay_names_a_partition_given_before_its_owner_let_go() -> None:
    events = [
        Event(0, "assign", 1.0, (0, 1)),
        Event(1, "assign", 2.0, (1,)),
        Event(0, "revoke", 3.0, (0,)),
    ]

    assert double_owners(events) == ["partition 1 owned by members [0, 1] at 2.000"]


def test_the_replay_orders_by_time_and_drops_what_a_killed_member_owned() -> None:
    events = [
        Event(1, "assign", 2.5, (1,)),  # reported before the revoke, happened after it
        Event(0, "assign", 1.0, (0, 1)),
        Event(0, "revoke", 2.0, (0,)),
        Event(0, "killed", 4.0),
        Event(1, "assign", 5.0, (0, 1)),
    ]

    assert double_owners(events) == []


def test_the_time_without_partitions_is_counted_within_the_window_only() -> None:
    events = [
        Event(0, "assign", 1.0, (0, 1)),
        Event(0, "revoke", 2.0, ()),
        Event(0, "assign", 2.5, (0,)),
        Event(1, "revoke", 2.0, ()),  # another member's
        Event(0, "revoke", 4.0, ()),  # still without partitions at the end
    ]

    assert longest_unowned(events, 0, 2.2, 4.6) == pytest.approx(0.6)
    assert longest_unowned(events, 0, 1.5, 3.0) == pytest.approx(0.5)
    assert longest_unowned(events, 0, 2.6, 3.9) == 0.0


@pytest.mark.integration
def test_a_small_run_settles_every_scenario_with_one_owner_per_partition(
    tmp_path: Path,
) -> None:
    """Run as the script it is, in a process of its own: its spawned members bring up
    multiprocessing's resource tracker, which lives as long as the process that
    started it."""
    output = tmp_path / "results.json"

    finished = subprocess.run(
        [
            sys.executable,
            str(Path(rebalance.__file__)),
            *("--modes", "eager,consumer", "--scenarios", "join,leave", "--repeat", "1"),
            *("--members", "2", "--partitions", "6", "--rate", "300", "--quiet-seconds", "2"),
            *("--session-ms", "6000", "--json", str(output)),
        ],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr[-4000:]

    results = json.loads(output.read_text())
    assert [(r["mode"], r["scenario"]) for r in results] == [
        ("eager", "join"),
        ("eager", "leave"),
        ("consumer", "join"),
        ("consumer", "leave"),
    ]
    for result in results:
        assert result["unsettled"] == ""
        assert result["double_owned"] == []
        assert 0 < result["rebalance_s"] < 6
        assert result["pause_max_s"] is not None
        assert result["unowned_max_s"] is not None
