"""``sluice console``: the web console (:mod:`sluice.console`) against any cluster, and
``sluice top``: produce rates, consume rates and group lag in the terminal, from the same
sampler."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import enum
import shutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from aiohttp import web
from rich.console import Console, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sluice.cli.common import (
    CLIENT_ID,
    bootstrap_option,
    run,
    security_options_from_environment,
)
from sluice.cli.schemas import REGISTRY_ENV_VAR
from sluice.client.admin_api import Admin
from sluice.client.errors import ClientError
from sluice.client.schema_registry import DEFAULT_REGISTRY_URL, SchemaRegistryClient
from sluice.common.errors import KafkaError
from sluice.console import make_app
from sluice.console.sampler import INTERVAL_S_DEFAULT, GroupHistory, Sampler, TopicRate

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
    "--schema-registry",
    "--registry",
    "schema_registry",
    envvar=REGISTRY_ENV_VAR,
    default=DEFAULT_REGISTRY_URL,
    show_default=True,
    show_envvar=True,
    metavar="URL",
    help="The Schema Registry the schema pages and the message browser ask (several "
    "URLs comma-separated are tried in turn; credentials as http://user:password@host, "
    "else the SASL user's; '' for none).",
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
    schema_registry: str,
    history_dir: Path | None,
) -> None:
    """Serve the web console for the cluster at --bootstrap-server.

    Pages show the brokers (down ones flagged, disk use), topics (configs, partitions,
    offsets, produce rates, consumers), the records of a topic (filtered), consumer and
    share groups (lag, rebalance timeline), transactions, delayed records and views,
    and the Schema Registry's subjects, versions and diffs (records a schema-aware
    serializer wrote are decoded in the browser). Security settings come from the
    SLUICE_SECURITY_PROTOCOL, SLUICE_SSL_* and SLUICE_SASL_* variables, as for every
    other command.
    """
    options = security_options_from_environment()
    registry_url = schema_registry.strip() or None
    if registry_url is not None:
        try:
            SchemaRegistryClient(registry_url)  # checks the URLs; opens nothing
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--schema-registry") from None
    app = make_app(
        bootstrap_server,
        dict(options),
        read_only=read_only,
        sample_interval_s=interval,
        history_dir=history_dir,
        schema_registry_url=registry_url,
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


class SortKey(enum.Enum):
    """What ``sluice top`` orders its rows by: topics by produce rate, groups by consume
    rate (``rate``); groups by total lag, topics then by name (``lag``); both by name."""

    RATE = "rate"
    LAG = "lag"
    NAME = "name"


NARROW_COLUMNS = 80
"""At this width and below, ``top`` drops its less important columns (the worst
partition, a topic's partition count) and truncates names."""
TINY_COLUMNS = 60
"""At this width and below it also drops each group's state and member count."""
NAME_SHARE = 0.4
"""The most of the width a name column takes on a narrow terminal."""
UNKNOWN_TEXT = "–"
"""How ``top`` shows a value it does not know (a lag without committed offsets, a rate
before two samples): never 0."""


def rate_text(rate: float | None) -> str:
    return UNKNOWN_TEXT if rate is None else f"{rate:,.1f}"


def trend_text(delta: float | None) -> str:
    """The total lag's move since the previous sample: ``↑12``, ``↓3``, ``=``."""
    if delta is None:
        return UNKNOWN_TEXT
    if delta > 0:
        return f"↑{delta:,.0f}"
    if delta < 0:
        return f"↓{-delta:,.0f}"
    return "="


def lag_text(history: GroupHistory) -> str:
    """The known total lag, ``+N?`` when N assigned partitions have no committed offset
    (their lag is unknown), ``–`` when nothing is known."""
    total = history.total
    unknown = history.unknown_partitions
    text = UNKNOWN_TEXT if total is None else f"{total:,}"
    return f"{text} +{unknown}?" if unknown and total is not None else text


@dataclass(frozen=True, slots=True)
class ClusterHeader:
    """What the header line of ``top`` names."""

    cluster_id: str | None
    brokers: int
    time_s: float
    error: str | None = None
    """Why the last refresh failed (the view shows the one before)."""

    def text(self) -> str:
        moment = datetime.datetime.fromtimestamp(self.time_s).strftime("%H:%M:%S")
        line = f"cluster {self.cluster_id or UNKNOWN_TEXT} · {self.brokers} broker(s) · {moment}"
        return line if self.error is None else f"{line} · last refresh failed: {self.error}"


def _sorted_topics(rates: list[TopicRate], sort: SortKey) -> list[TopicRate]:
    if sort is SortKey.RATE:
        return sorted(rates, key=lambda rate: (-(rate.records_per_s or 0.0), rate.topic))
    return sorted(rates, key=lambda rate: rate.topic)


def _sorted_groups(
    groups: list[tuple[str, GroupHistory]], sort: SortKey
) -> list[tuple[str, GroupHistory]]:
    """Highest first; groups whose lag (or rate) is unknown come last, by name."""
    if sort is SortKey.LAG:
        return sorted(
            groups,
            key=lambda item: (item[1].total is None, -(item[1].total or 0), item[0]),
        )
    if sort is SortKey.RATE:
        return sorted(
            groups,
            key=lambda item: (
                item[1].consume_rate is None,
                -(item[1].consume_rate or 0.0),
                item[0],
            ),
        )
    return sorted(groups, key=lambda item: item[0])


def top_tables(
    sampler: Sampler,
    *,
    sort: SortKey = SortKey.NAME,
    width: int = 120,
    show_all: bool = False,
) -> tuple[Table, Table]:
    """The topics table (records/s, partitions) and the groups table (consume rate,
    total lag, its trend, worst partition) of the sampler's latest sample, ordered by
    ``sort`` and fitted to ``width`` columns. Bookkeeping groups are left out unless
    ``show_all``, then marked."""
    narrow = width <= NARROW_COLUMNS
    tiny = width <= TINY_COLUMNS
    name_width = max(int(width * NAME_SHARE), 8) if narrow else None
    topics = Table(title="Topics", title_justify="left")
    topics.add_column("topic", no_wrap=True, overflow="ellipsis", max_width=name_width)
    if not narrow:
        topics.add_column("partitions", justify="right")
    topics.add_column("records/s", justify="right", no_wrap=True)
    for rate in _sorted_topics(sampler.topic_rates(), sort):
        cells = [rate.topic, str(rate.partitions), rate_text(rate.records_per_s)]
        topics.add_row(*(cells if not narrow else [cells[0], cells[2]]))
    groups = Table(title="Groups", title_justify="left")
    groups.add_column("group", no_wrap=True, overflow="ellipsis", max_width=name_width)
    if not tiny:
        groups.add_column("state", no_wrap=True)
        groups.add_column("members", justify="right")
    groups.add_column("read/s", justify="right", no_wrap=True)
    groups.add_column("lag", justify="right", no_wrap=True)
    groups.add_column("trend", justify="right", no_wrap=True)
    if not narrow:
        groups.add_column("worst partition")
    shown = [
        (group_id, history)
        for group_id, history in sampler.groups.items()
        if show_all or not history.bookkeeping
    ]
    for group_id, history in _sorted_groups(shown, sort):
        description = history.description or history.share_description
        known = [lag for lag in history.lag.values() if lag.lag is not None]
        worst = max(known, key=lambda lag: lag.lag or 0, default=None)
        cells = [f"{group_id} (bookkeeping)" if history.bookkeeping else group_id]
        if not tiny:
            cells += [
                description.state if description else "?",
                str(len(description.members)) if description else "?",
            ]
        cells += [rate_text(history.consume_rate), lag_text(history), trend_text(history.lag_trend)]
        if not narrow:
            cells.append(
                f"{worst.topic_partition} ({worst.lag})" if worst is not None else UNKNOWN_TEXT
            )
        groups.add_row(*cells)
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
@click.option(
    "--sort",
    type=click.Choice([key.value for key in SortKey]),
    default=SortKey.NAME.value,
    show_default=True,
    help="Order rows by rate (topics: produced, groups: consumed records/s), lag or name.",
)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Show bookkeeping groups too (Spark's exactly-once progress), marked.",
)
def top(
    bootstrap_server: str, interval: float, iterations: int | None, sort: str, show_all: bool
) -> None:
    """Produce rates per topic and lag per consumer group, refreshed every --interval.

    A header names the cluster, its brokers and the time. Per group: records/s consumed
    (committed offsets' progress), total lag, its trend since the previous refresh (↑ ↓ =)
    and the worst partition. A lag is – (unknown) where the group committed nothing, and
    "+N?" counts assigned partitions without a committed offset. Topics deleted while it
    runs leave the table; a failed refresh is shown in the header and the next one tries
    again. On a terminal the view updates in place until Ctrl-C and fits the terminal's
    width; with --iterations, or when the output is not a terminal, each refresh prints
    plain tables as wide as $COLUMNS (120 without it).
    """
    options = security_options_from_environment()
    plain = iterations is not None or not sys.stdout.isatty()
    view = TopView(SortKey(sort), show_all)
    run(lambda: _top(bootstrap_server, dict(options), interval, iterations, plain, view))


@dataclass(frozen=True, slots=True)
class TopView:
    sort: SortKey
    show_all: bool


async def top_refresh(admin: Admin, sampler: Sampler) -> ClusterHeader:
    """One refresh of ``top``: a sample and the cluster's header. A failed one is named
    in the header; the sampler keeps what it had."""
    try:
        await sampler.sample_once()
        cluster = await admin.describe_cluster()
    except (ClientError, KafkaError, OSError) as e:
        return ClusterHeader(None, 0, time.time(), f"{type(e).__name__}: {e}")
    return ClusterHeader(cluster.cluster_id, len(cluster.brokers), time.time())


def top_renderables(
    header: ClusterHeader, sampler: Sampler, view: TopView, width: int
) -> tuple[Text, Table, Table]:
    topics, groups = top_tables(sampler, sort=view.sort, width=width, show_all=view.show_all)
    return Text(header.text(), overflow="ellipsis", no_wrap=True), topics, groups


async def _top(
    bootstrap: str,
    options: dict[str, Any],
    interval_s: float,
    iterations: int | None,
    plain: bool,
    view: TopView,
) -> None:
    async with Admin(bootstrap, client_id=CLIENT_ID, **options) as admin:
        sampler = Sampler(admin, interval_s=interval_s)
        if plain:
            width = shutil.get_terminal_size((PLAIN_WIDTH_DEFAULT, 24)).columns
            output = Console(width=width, force_terminal=False, no_color=True, highlight=False)
            done = 0
            while iterations is None or done < iterations:
                if done:
                    await asyncio.sleep(interval_s)
                header = await top_refresh(admin, sampler)
                done += 1
                _print_all(output, top_renderables(header, sampler, view, width))
            return
        console = Console()
        with Live(auto_refresh=False, console=console) as live:
            while True:
                header = await top_refresh(admin, sampler)
                width = console.size.width
                live.update(_stacked(*top_renderables(header, sampler, view, width)), refresh=True)
                await asyncio.sleep(interval_s)


PLAIN_WIDTH_DEFAULT = 120
"""Columns of plain output when $COLUMNS does not say."""


def _print_all(output: Console, renderables: Sequence[RenderableType]) -> None:
    for renderable in renderables:
        output.print(renderable)
    output.print()
    sys.stdout.flush()


def _stacked(*renderables: RenderableType) -> Table:
    grid = Table.grid()
    for renderable in renderables:
        grid.add_row(renderable)
    return grid
