"""``sluice consume`` against kcat: reading a whole topic to standard output.

One ``sluice serve`` on loopback; one topic (one partition) filled once with kcat with
``--records`` short text records; then each reader prints every record, one per line,
into a pipe that counts the lines, ``--repeat`` times, alternating:

- ``sluice consume TOPIC --bootstrap-server …`` (reads up to the end it saw at start)
- ``kcat -C -b … -t TOPIC -e -q`` (exits at the end of the partition)

Printed: the median wall time of each (start of the process to its exit: imports and
connection set-up included, as a user meets them), its CPU (user + system of the
process), records per second, and the ratio to kcat.

    .venv/bin/python bench/cli_consume.py                      # 300,000 records, 3 rounds
    .venv/bin/python bench/cli_consume.py --records 50000 --repeat 1   # smoke run
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from produce_consume import describe_machine, sluice_broker

READ_TIMEOUT_S = 300.0
"""A reader that has not finished in this time fails the benchmark."""
VALUE_SUFFIX = b"-some-payload-value-of-moderate-length"


def fill(kcat: str, bootstrap: str, topic: str, records: int) -> None:
    lines = b"".join(b"%d%s\n" % (i, VALUE_SUFFIX) for i in range(records))
    subprocess.run(
        [kcat, "-P", "-b", bootstrap, "-t", topic, "-z", "none"],
        input=lines,
        check=True,
        timeout=READ_TIMEOUT_S,
    )


def timed(argv: list[str], records: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``argv``, which must print ``records``
    lines."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=True, timeout=READ_TIMEOUT_S)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = done.stdout.count(b"\n")
    if lines != records:
        raise SystemExit(f"{argv[0]} printed {lines} lines, not {records}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    kcat = shutil.which("kcat")
    if kcat is None:
        raise SystemExit("kcat is not installed: it is the peer this benchmark compares with")
    print("## Machine\n")
    for key, value in describe_machine().items():
        print(f"- {key}: {value}")
    with sluice_broker(None, []) as broker:
        topic = "cli-consume"
        fill(kcat, broker.bootstrap, topic, args.records)
        readers = {
            "sluice consume": [
                sys.executable,
                "-m",
                "sluice",
                "consume",
                topic,
                "--bootstrap-server",
                broker.bootstrap,
            ],
            "kcat -C": [kcat, "-C", "-b", broker.bootstrap, "-t", topic, "-e", "-q"],
        }
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in readers}
        for _ in range(args.repeat):
            for name, argv in readers.items():
                runs[name].append(timed(argv, args.records))
    kcat_wall = statistics.median(wall for wall, _ in runs["kcat -C"])
    print(f"\n## Reading {args.records:,} records to a pipe (median of {args.repeat})\n")
    print("| reader | wall s | CPU s | records/s | wall vs kcat |")
    print("|---|---:|---:|---:|---:|")
    for name, measured in runs.items():
        wall = statistics.median(w for w, _ in measured)
        cpu = statistics.median(c for _, c in measured)
        print(
            f"| {name} | {wall:.2f} | {cpu:.2f} | {args.records / wall:,.0f} | "
            f"{wall / kcat_wall:.1f}x |"
        )


if __name__ == "__main__":
    main()
