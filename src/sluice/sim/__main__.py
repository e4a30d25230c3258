"""``python -m sluice.sim``: run the simulated cluster from seeds and check each run.

    python -m sluice.sim --seeds 100          # seeds 1..100; ends with "100 seeds, K anomalies"
    python -m sluice.sim --seed 5863          # one run, its faults and its history's summary
    python -m sluice.sim --seeds 50 --inject ack-before-isr   # a deliberate defect: must be found
    python -m sluice.sim --seeds 1000 --jobs 2  # in 2 worker processes (default: one per core)

Exit status 0 only when no run found an anomaly."""

from __future__ import annotations

import argparse
import logging
import sys

from sluice.sim.broker import BUGS
from sluice.sim.cluster import Settings
from sluice.sim.seeds import check_seeds, default_jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sluice.sim", description=__doc__.split("\n\n")[0]
    )
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--seeds", type=int, default=20, help="run seeds 1..N (default 20)")
    chosen.add_argument("--seed", type=int, help="run this one seed, and show what happened")
    parser.add_argument("--first-seed", type=int, default=1, help="with --seeds, start here")
    parser.add_argument(
        "--inject",
        action="append",
        default=[],
        choices=sorted(BUGS),
        help="switch on a deliberate defect (repeatable): "
        + "; ".join(f"{k}: {v}" for k, v in BUGS.items()),
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=default_jobs(),
        help="worker processes running seeds side by side (default: the machine's cores)",
    )
    parser.add_argument(
        "--log-level",
        default="error",
        choices=["debug", "info", "warning", "error"],
        help="what the brokers' own log lines show (default: errors only; the workers inherit it)",
    )
    args = parser.parse_args(argv)
    sluice_log = logging.getLogger("sluice")
    level_before = sluice_log.level
    sluice_log.setLevel(args.log_level.upper())
    try:
        return _run(args)
    finally:
        sluice_log.setLevel(level_before)  # main() may run inside another program


def _run(args: argparse.Namespace) -> int:
    inject = frozenset(args.inject)
    seeds = (
        [args.seed]
        if args.seed is not None
        else range(args.first_seed, args.first_seed + args.seeds)
    )
    anomalies = 0
    for outcome in check_seeds(seeds, Settings(), inject, jobs=args.jobs):
        seed = outcome.seed
        if args.seed is not None:
            print(f"seed {seed}: {outcome.events} events, history {outcome.digest}")
            for line in outcome.faults:
                print(f"  {line}")
            print(outcome.summary)
        if not outcome.valid:
            anomalies += 1
            if args.seed is None:
                first = f", first {outcome.first_violation}" if outcome.first_violation else ""
                print(
                    f"seed {seed}: anomalies{first} (replay: python -m sluice.sim --seed {seed}"
                    + "".join(f" --inject {bug}" for bug in sorted(inject))
                    + ")"
                )
    print(f"{len(seeds)} seeds, {anomalies} anomalies")
    return 0 if anomalies == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
