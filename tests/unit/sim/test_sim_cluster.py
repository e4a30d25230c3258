"""The simulated cluster: a seed replays exactly, a batch of seeds with every fault finds
no anomaly, and each deliberate defect is found (so the checks can fail)."""

from __future__ import annotations

import pytest

from sluice.sim.__main__ import main
from sluice.sim.broker import BUGS
from sluice.sim.cluster import Settings, run

CLEAN_SEEDS = 12
"""Seeds every CI run checks (the documented longer run: ``python -m sluice.sim --seeds
1000``)."""
SEEDS_TO_FIND_A_BUG = 10
"""Each deliberate defect is found within this many seeds (docs/replication.md)."""


def test_a_seed_replays_exactly() -> None:
    first, again = run(7), run(7)
    assert first.digest == again.digest and first.events == again.events
    assert run(8).digest != first.digest


@pytest.mark.parametrize("seed", range(1, CLEAN_SEEDS + 1))
def test_no_anomaly_under_crashes_lost_tails_and_partitions(seed: int) -> None:
    result = run(seed)
    print(f"seed {seed}: {result.faults}")
    assert result.result.valid, f"seed {seed}\n{result.result.summary()}"
    assert result.result.sends_ok > 0, "the cluster served acks=all sends"


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_each_deliberate_defect_is_found(bug: str) -> None:
    found = any(
        not run(seed, Settings(), frozenset({bug})).result.valid
        for seed in range(1, SEEDS_TO_FIND_A_BUG + 1)
    )
    assert found, f"{bug} went unnoticed in {SEEDS_TO_FIND_A_BUG} seeds"


def test_the_command_line_counts_seeds_and_anomalies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "2 seeds, 0 anomalies"
    assert main(["--seeds", "3", "--inject", "ack-before-isr"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("3 seeds, ") and out[-1] != "3 seeds, 0 anomalies"
    assert any("--inject ack-before-isr" in line for line in out)
