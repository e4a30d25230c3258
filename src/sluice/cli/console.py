"""``sluice console``: the web console (:mod:`sluice.console`) against any cluster, and
``sluice top``: produce rates and group lag in the terminal, from the same sampler."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
from aiohttp import web
from rich.console import Console
from rich.live import Live
from rich.table import Table

from sluice.cli.common import (
    CLIENT_ID,
    bootstrap_option,
    run,
    security_options_from_environment,
)
from sluice.client.admin_api import Admin
from sluice.console import make_app
from sluice.console.sampler import INTERVAL_S_DEFAULT, Sampler

HOST_DEFAULT = "127.0.0.1"
PORT_DEFAULT = 8080
TOP_INTERVAL_S_DEFAULT = 2.0


def _bootstrap_alias(function: Callable[..., Any]) -> Callable[..., Any]:
    """``--bootstrap`` as a short spelling of ``--bootstrap-server``."""
    option = bootstrap_option(function)
    for parameter in getattr(option, "__click_params__", []):
        if parameter.name == "bootstrap_server":
            parameter.opts.append("--bootstrap")
    return option


@click.command()
@_bootstrap_alias
@click.option("--host", default=HOST_DEFAULT, show_default=True, help="Address to serve on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=PORT_DEFAULT,
    show_default=True,
    help="Port to serve on (0: any free port).",
)
@click.option("--read-only", is_flag=True, help="Never write: no produce form.")
@click.option(
    "--interval",
    type=click.FloatRange(0.1, None),
    default=INTERVAL_S_DEFAULT,
    show_default=True,
    help="Seconds between samples of offsets and groups (rates, lag, timeline).",
)
@click.option(
    "--history-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the sampled history (rates, lag, brokers seen) in this directory, so it "
    "survives a restart.  [default: none, in memory only]",
)
def console(
    bootstrap_server: str,
    host: str,
    port: int,
    read_only: bool,
    interval: float,
    history_dir: Path | None,
) -> None:
    """Serve the web console for the cluster at --bootstrap-server.

    Pages show the brokers (down ones flagged, disk use), topics (configs, partitions,
    offsets, produce rates, consumers), the records of a topic (filtered), consumer and
    share groups (lag, rebalance timeline), transactions, delayed records and views.
    Security settings come from the SLUICE_SECURITY_PROTOCOL, SLUICE_SSL_* and
    SLUICE_SASL_* variables, as for every other command.
    """
    options = security_options_from_environment()
    app = make_app(
        bootstrap_server,
        dict(options),
        read_only=read_only,
        sample_interval_s=interval,
        history_dir=history_dir,
    )
    run(lambda: _serve(app, host, port, bootstrap_server))


async def _serve(app: web.Application, host: str, port: int, bootstrap: str) -> None:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as e:
            raise click.ClickException(f"cannot serve on {host}:{port}: {e.strerror}") from None
        bound_port = int(runner.addresses[0][1]) if runner.addresses else port
        shown_host = f"[{host}]" if ":" in host else host
        click.echo(
            f"Sluice console for {bootstrap} at http://{shown_host}:{bound_port}/", err=False
        )
        sys.stdout.flush()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signal_number in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(signal_number, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


# ── sluice top ─────────────────────────────────────────────────────────────────────────


def rate_text(rate: float | None) -> str:
    return "–" if rate is None else f"{rate:,.1f}"


def top_tables(sampler: Sampler) -> tuple[Table, Table]:
    """The topics table (records/s, partitions) and the groups table (total lag, worst
    partition) of the sampler's latest sample."""
    topics = Table(title="Topics", title_justify="left")
    topics.add_column("topic")
    topics.add_column("partitions", justify="right")
    topics.add_column("records/s", justify="right")
    for rate in sampler.topic_rates():
        topics.add_row(rate.topic, str(rate.partitions), rate_text(rate.records_per_s))
    groups = Table(title="Groups", title_justify="left")
    groups.add_column("group")
    groups.add_column("state")
    groups.add_column("members", justify="right")
    groups.add_column("total lag", justify="right")
    groups.add_column("worst partition")
    for group_id, history in sorted(sampler.groups.items()):
        description = history.description or history.share_description
        worst = max(history.lag.values(), key=lambda lag: lag.lag, default=None)
        groups.add_row(
            group_id,
            description.state if description else "?",
            str(len(description.members)) if description else "?",
            str(sum(lag.lag for lag in history.lag.values())),
            f"{worst.topic_partition} ({worst.lag})" if worst is not None else "–",
        )
    return topics, groups


@click.command()
@_bootstrap_alias
@click.option(
    "--interval",
    type=click.FloatRange(0.1, None),
    default=TOP_INTERVAL_S_DEFAULT,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option(
    "--iterations",
    type=click.IntRange(1, None),
    default=None,
    help="Stop after this many refreshes (printing plain tables, for scripts).",
)
def top(bootstrap_server: str, interval: float, iterations: int | None) -> None:
    """Produce rates per topic and lag per consumer group, refreshed every --interval.

    On a terminal the view updates in place until Ctrl-C; with --iterations, or when
    the output is not a terminal, each refresh prints plain tables.
    """
    options = security_options_from_environment()
    plain = iterations is not None or not sys.stdout.isatty()
    run(lambda: _top(bootstrap_server, dict(options), interval, iterations, plain))


async def _top(
    bootstrap: str,
    options: dict[str, Any],
    interval_s: float,
    iterations: int | None,
    plain: bool,
) -> None:
    async with Admin(bootstrap, client_id=CLIENT_ID, **options) as admin:
        sampler = Sampler(admin, interval_s=interval_s)
        if plain:
            output = Console(width=120, force_terminal=False, no_color=True, highlight=False)
            done = 0
            while iterations is None or done < iterations:
                if done:
                    await asyncio.sleep(interval_s)
                await sampler.sample_once()
                done += 1
                _print_tables(output, top_tables(sampler))
            return
        with Live(auto_refresh=False) as live:
            while True:
                await sampler.sample_once()
                topics, groups = top_tables(sampler)
                live.update(_stacked(topics, groups), refresh=True)
                await asyncio.sleep(interval_s)


def _print_tables(output: Console, tables: Sequence[Table]) -> None:
    for table in tables:
        output.print(table)
    output.print()
    sys.stdout.flush()


def _stacked(*tables: Table) -> Table:
    grid = Table.grid()
    for table in tables:
        grid.add_row(table)
    return grid
