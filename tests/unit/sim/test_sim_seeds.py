"""Seeds run side by side in worker processes come back in seed order, each exactly as
the same seed run alone."""

from __future__ import annotations

from sluice.sim.cluster import Settings, run
from sluice.sim.seeds import check_seeds


def test_seeds_run_in_workers_replay_as_alone_and_come_back_in_order() -> None:
    settings = Settings(sends_per_producer=60, duration_ms=8_000, settle_ms=8_000)
    seeds = [5, 3, 4, 9, 1]
    outcomes = list(check_seeds(seeds, settings, jobs=2))
    assert [o.seed for o in outcomes] == seeds
    for outcome in outcomes:
        alone = run(outcome.seed, settings)
        assert (outcome.digest, outcome.events) == (alone.digest, alone.events)
        assert outcome.valid == alone.result.valid


def test_a_seed_whose_run_raises_is_an_anomaly_with_its_traceback() -> None:
    (outcome,) = check_seeds([1], Settings(partitions=0))  # no partition to send to
    assert not outcome.valid and outcome.first_violation is not None
    assert outcome.first_violation.startswith("crash (") and "Traceback" in outcome.summary
