"""``sluice cluster configs [BROKER]``: every setting of one broker with its value and
where the value comes from, as ``kafka-configs.sh --describe --all --entity-type brokers
--entity-name BROKER`` shows them (DescribeConfigs of the BROKER resource, asked of that
broker).

Sources, strongest first: ``dynamic`` (set on this broker at run time), ``dynamic
cluster default`` (set for every broker at run time), ``static`` (the broker's settings
file or command line), ``default`` (built in).
"""

from __future__ import annotations

import click

from sluice.cli.common import (
    bootstrap_option,
    echo_json,
    echo_table,
    format_option,
    open_cluster,
    run,
)
from sluice.cli.topic_documents import config_document
from sluice.client.admin import RESOURCE_TYPE_BROKER, Admin, ConfigEntry, ConfigSource

SOURCE_LABELS = {
    ConfigSource.DYNAMIC_BROKER: "dynamic",
    ConfigSource.DYNAMIC_DEFAULT_BROKER: "dynamic cluster default",
    ConfigSource.STATIC_BROKER: "static",
    ConfigSource.DEFAULT: "default",
    ConfigSource.DYNAMIC_BROKER_LOGGER: "dynamic logger",
}


@click.command(name="configs")
@click.argument("broker", type=click.IntRange(min=0), required=False)
@click.option(
    "--changed",
    is_flag=True,
    help="Only settings whose value is not the built-in default.",
)
@format_option
@bootstrap_option
def configs(
    *, broker: int | None, changed: bool, output_format: str, bootstrap_server: str
) -> None:
    """Show every setting of BROKER (default: the lowest broker id), its value and its
    source: dynamic, dynamic cluster default, static or default.

    With --format json: {"broker": ID, "configs": {NAME: {value, source, sensitive,
    read_only}}}, source being Kafka's in lower case (dynamic_broker,
    dynamic_default_broker, static_broker, default). Sensitive values are never shown.
    """

    async def gather() -> tuple[int, dict[str, ConfigEntry]]:
        async with open_cluster(bootstrap_server) as connected:
            admin = Admin(connected)
            described = await admin.describe_cluster()
            known = sorted(b.node_id for b in described.brokers)
            node_id = known[0] if broker is None else broker
            if node_id not in known:
                raise click.ClickException(
                    f"the cluster has no broker {node_id} (its brokers: "
                    f"{', '.join(map(str, known))}; see `sluice cluster describe`)"
                )
            return node_id, await admin.describe_configs(RESOURCE_TYPE_BROKER, str(node_id))

    node_id, entries = run(gather)
    shown = {
        name: entry
        for name, entry in sorted(entries.items())
        if not changed or entry.source != ConfigSource.DEFAULT
    }
    if output_format == "json":
        echo_json({"broker": node_id, "configs": {n: config_document(e) for n, e in shown.items()}})
        return
    click.echo(f"Broker {node_id}: {len(shown)} setting(s)")
    if not shown:
        return
    rows = [("NAME", "VALUE", "SOURCE", "READ-ONLY")]
    for name, entry in shown.items():
        value = (
            "(sensitive)"
            if entry.is_sensitive
            else ("null" if entry.value is None else entry.value)
        )
        rows.append(
            (
                name,
                value,
                SOURCE_LABELS.get(entry.source, config_document(entry)["source"]),
                "yes" if entry.read_only else "no",
            )
        )
    echo_table(rows)
