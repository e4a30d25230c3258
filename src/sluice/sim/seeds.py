"""Running many seeds: each seed is one :func:`~sluice.sim.cluster.run`, alone in its
world, so seeds can run side by side in worker processes and come back in seed order.
A worker sends back only what the report needs (:class:`SeedOutcome`), not the history;
a seed run here gives the same digest as the same seed run alone (``--seed S``)."""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from sluice.sim.cluster import Settings, run

SEEDS_PER_TASK = 4
"""Seeds a worker takes at a time: few enough to keep both ends of a batch busy, enough
that handing them out costs nothing next to running them (a seed takes tenths of a
second)."""


@dataclass(frozen=True, slots=True)
class SeedOutcome:
    seed: int
    valid: bool
    events: int
    digest: str
    faults: tuple[str, ...]
    summary: str
    first_violation: str | None
    """The first invariant the run broke, if any (kind and simulated time)."""


def check_seed(seed: int, settings: Settings, inject: frozenset[str]) -> SeedOutcome:
    """Run ``seed`` and check its history. A run that raises is an anomaly too (the
    simulated cluster broke), reported with its traceback rather than ending the batch."""
    try:
        result = run(seed, settings, inject)
    except Exception as e:  # the batch goes on; this seed's line names the error
        return SeedOutcome(
            seed, False, 0, "", (), traceback.format_exc(), f"crash ({type(e).__name__}: {e})"
        )
    return SeedOutcome(
        seed,
        result.valid,
        result.events,
        result.digest,
        tuple(result.faults),
        result.summary(),
        (
            f"{result.violations[0].kind} at {result.violations[0].at_ms} ms"
            if result.violations
            else None
        ),
    )


def _check(task: tuple[int, Settings, frozenset[str]]) -> SeedOutcome:
    return check_seed(*task)


def default_jobs() -> int:
    """One worker per core of the machine."""
    return multiprocessing.cpu_count()


def check_seeds(
    seeds: Iterable[int],
    settings: Settings,
    inject: frozenset[str] = frozenset(),
    *,
    jobs: int = 1,
) -> Iterator[SeedOutcome]:
    """Each seed's outcome, in the order of ``seeds``, run by ``jobs`` worker processes
    (in this one when ``jobs`` is 1)."""
    tasks = [(seed, settings, inject) for seed in seeds]
    if jobs <= 1 or len(tasks) <= 1:
        yield from map(_check, tasks)
        return
    with multiprocessing.get_context("fork").Pool(min(jobs, len(tasks))) as pool:
        yield from pool.imap(_check, tasks, chunksize=SEEDS_PER_TASK)
