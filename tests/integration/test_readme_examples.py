"""The README's quick-start command-line examples, its Python client examples and its
consumer-group commands, taken from README.md itself and run in order against a fresh
broker, as a newcomer runs them; what the commands print is compared with the output the
README shows beneath them.

The blocks are extracted at test time, so the test breaks when the README drifts. Two
things are adapted, and only these: ``sluice`` runs as ``python -m sluice`` (the
interpreter under test) and the broker address ``127.0.0.1:9092`` becomes the test
broker's loopback port (the command line gets it from SLUICE_BOOTSTRAP_SERVER, the
Python blocks by replacing the address in their text).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from broker_process import BrokerProcess
from readme_blocks import (
    README_ADDRESS,
    assert_shows,
    blocks,
    run,
    shown_after,
    sluice_shell_environment,
)

import sluice.sync

GROUPS = "Consumer groups"
LAGGING_RECORDS = 80
"""Records produced into ``orders`` partition 3 after the quick start's ``billing`` group
read it to its end: the group's lag the consumer-group section shows."""
LAGGING_PARTITION = 3


def quick_start_cli_block() -> str:
    (block,) = [b for b in blocks("sh") if b.startswith("sluice topics create orders")]
    return block


def quick_start_kcat_block() -> str:
    (block,) = [b for b in blocks("sh", "Quick start") if b.startswith('echo "hello" | kcat')]
    return block


def python_client_blocks() -> list[str]:
    """The Python examples of the "Python client" section, in README order."""
    return blocks("python", "Python client")


def test_readme_blocks_run_in_order_on_a_fresh_broker(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    broker = broker_factory({"group.initial.rebalance.delay.ms": "0"})
    environment = sluice_shell_environment(tmp_path, broker.bootstrap)

    block = quick_start_cli_block()
    cli_output = run(["sh", "-e"], environment, stdin=block, with_errors=True)
    assert_shows(cli_output, shown_after(block))
    block = quick_start_kcat_block()
    kcat_output = run(
        ["sh", "-e"], environment, stdin=block.replace(README_ADDRESS, broker.bootstrap)
    )
    assert_shows(kcat_output, shown_after(block))

    python_blocks = python_client_blocks()
    assert len(python_blocks) == 4, "the README's Python examples changed: update this test"
    outputs = []
    for block in python_blocks:
        assert README_ADDRESS in block
        source = block.replace(README_ADDRESS, broker.bootstrap)
        outputs.append(run([sys.executable, "-c", source], environment))
    async_output, sync_output, semantics_output, exactly_once_output = outputs
    assert "b'event 99'" in async_output, async_output
    assert "'payments'" in sync_output, sync_output
    assert "'orders'" in sync_output, sync_output
    # Each group reads every payment left after the first example's delete_records (how
    # many depends on where its keyless records landed); all three count the same.
    counts = [
        int(re.search(pattern, text).group(1))  # type: ignore[union-attr]
        for pattern, text in (
            (r"alerting on (\d+) payments", semantics_output),
            (r"booked (\d+) payments", semantics_output),
            (r"enriched (\d+) payments", exactly_once_output),
        )
    ]
    assert counts[0] > 0 and counts == [counts[0]] * 3, (semantics_output, exactly_once_output)


def test_the_consumer_group_commands_print_what_the_readme_shows(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    """The quick start's commands, then the section's scenario (``billing`` 80 records
    behind on ``orders`` partition 3), then the section's blocks in order."""
    broker = broker_factory({"group.initial.rebalance.delay.ms": "0"})
    environment = sluice_shell_environment(tmp_path, broker.bootstrap)
    run(["sh", "-e"], environment, stdin=quick_start_cli_block())
    with sluice.sync.Producer(bootstrap_servers=broker.bootstrap) as producer:
        for number in range(LAGGING_RECORDS):
            producer.send("orders", b"order %d" % number, partition=LAGGING_PARTITION)
        producer.flush()

    section = blocks("sh", GROUPS)
    assert len(section) == 3, "the README's consumer-group examples changed: update this test"
    for block in section:
        printed = run(["sh", "-e"], environment, stdin=block, with_errors=True)
        assert_shows(printed, shown_after(block))
