"""``sluice transactions``: the transactional ids a cluster knows, their state, and
what their open transactions hold (to find a transaction that is stuck open); the
producers of a partition, hanging transactions and aborting them are in
:mod:`sluice.cli.transaction_recovery`."""

from __future__ import annotations

import datetime

import click

from sluice.cli.common import (
    bootstrap_option,
    echo_json,
    echo_table,
    format_option,
    open_cluster,
    run,
)
from sluice.cli.transaction_recovery import abort, describe_producers_command, find_hanging
from sluice.client.admin_transactions import (
    TransactionDescription,
    TransactionListing,
    describe_transactions,
    list_transactions,
)


@click.group()
def transactions() -> None:
    """List and describe transactions; find hanging ones and abort them."""


@transactions.command(name="list")
@click.option(
    "--state",
    "states",
    multiple=True,
    help="Only this state (Ongoing, PrepareCommit, CompleteAbort, …); repeatable.",
)
@click.option(
    "--open-longer-than-ms",
    type=click.IntRange(min=0),
    default=None,
    help="Only transactions open longer than this (finds stuck ones).",
)
@format_option
@bootstrap_option
def list_command(
    *,
    states: tuple[str, ...],
    open_longer_than_ms: int | None,
    output_format: str,
    bootstrap_server: str,
) -> None:
    """List every transactional id with its producer id and state."""

    async def listings() -> list[TransactionListing]:
        async with open_cluster(bootstrap_server) as cluster:
            return await list_transactions(
                cluster,
                states=states,
                open_longer_than_ms=-1 if open_longer_than_ms is None else open_longer_than_ms,
            )

    found = run(listings)
    if output_format == "json":
        echo_json(
            [
                {
                    "transactional_id": t.transactional_id,
                    "producer_id": t.producer_id,
                    "state": t.state,
                }
                for t in found
            ]
        )
        return
    if found:
        echo_table(
            [("TRANSACTIONAL ID", "PRODUCER ID", "STATE")]
            + [(t.transactional_id, str(t.producer_id), t.state) for t in found]
        )


@transactions.command()
@click.argument("transactional_ids", nargs=-1, required=True)
@format_option
@bootstrap_option
def describe(
    *, transactional_ids: tuple[str, ...], output_format: str, bootstrap_server: str
) -> None:
    """Show each transactional id's state, producer, timeout and open partitions."""

    async def described() -> list[TransactionDescription]:
        async with open_cluster(bootstrap_server) as cluster:
            return await describe_transactions(cluster, transactional_ids)

    found = run(described)
    if output_format == "json":
        echo_json(
            [
                {
                    "transactional_id": d.transactional_id,
                    "state": d.state,
                    "producer_id": d.producer_id,
                    "producer_epoch": d.producer_epoch,
                    "timeout_ms": d.timeout_ms,
                    "start_ms": d.start_ms,
                    "partitions": [f"{p.topic}-{p.partition}" for p in d.partitions],
                }
                for d in found
            ]
        )
        return
    echo_table(
        [("TRANSACTIONAL ID", "STATE", "PRODUCER", "TIMEOUT MS", "STARTED", "PARTITIONS")]
        + [
            (
                d.transactional_id,
                d.state,
                f"{d.producer_id} (epoch {d.producer_epoch})",
                str(d.timeout_ms),
                _started(d.start_ms),
                ", ".join(f"{p.topic}-{p.partition}" for p in d.partitions) or "-",
            )
            for d in found
        ]
    )


def _started(start_ms: int) -> str:
    if start_ms < 0:
        return "-"
    started = datetime.datetime.fromtimestamp(start_ms / 1000, tz=datetime.UTC)
    return started.isoformat(timespec="seconds")


transactions.add_command(describe_producers_command)
transactions.add_command(find_hanging)
transactions.add_command(abort)
