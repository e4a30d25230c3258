"""The ``sluice`` command group; each subcommand lives in its own module.

``serve`` runs a broker; ``topics``, ``produce``, ``consume``, ``groups``,
``share-groups``, ``transactions``, ``delays``, ``dlq``, ``users``, ``cluster`` and
``acls`` talk to one through ``sluice.client``, ``schemas`` to its Schema Registry;
``console`` serves the web console and ``top`` shows produce rates and group lag in the
terminal.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

import click

from sluice import __version__


class LazyCommand(NamedTuple):
    module: str
    attribute: str
    """The command's name in its module."""
    summary: str
    """Its short help, as ``sluice --help`` lists it without importing the module (a
    unit test keeps it equal to the command's own)."""


COMMANDS: dict[str, LazyCommand] = {
    "serve": LazyCommand(
        "sluice.cli.serve",
        "serve",
        "Run a broker in the foreground: a single node, or with --zookeeper one broker of a "
        "cluster (each with its own --node-id, --port and --data-dir).",
    ),
    "topics": LazyCommand(
        "sluice.cli.topics",
        "topics",
        "Create, list, describe, delete topics and change their configs.",
    ),
    "produce": LazyCommand(
        "sluice.cli.produce",
        "produce",
        "Send each line of standard input to TOPIC as one record.",
    ),
    "consume": LazyCommand(
        "sluice.cli.consume",
        "consume",
        "Print records of TOPIC, one per line.",
    ),
    "groups": LazyCommand(
        "sluice.cli.groups",
        "groups",
        "List, describe and delete consumer groups; reset or delete their offsets.",
    ),
    "share-groups": LazyCommand(
        "sluice.cli.share_groups",
        "share_groups",
        "List, describe and delete share groups; reset or delete their start offsets.",
    ),
    "cluster": LazyCommand(
        "sluice.cli.cluster",
        "cluster",
        "See the brokers, their configs and where partitions lead; elect partition leaders.",
    ),
    "quotas": LazyCommand(
        "sluice.cli.quotas",
        "quotas",
        "List, set and remove client quotas (byte rates, request percentage).",
    ),
    "transactions": LazyCommand(
        "sluice.cli.transactions",
        "transactions",
        "List and describe transactions; find hanging ones and abort them.",
    ),
    "acls": LazyCommand(
        "sluice.cli.acls",
        "acls",
        "Add, list and remove ACLs (brokers with authorizer.enabled=true).",
    ),
    "delays": LazyCommand(
        "sluice.cli.delays",
        "delays",
        "Inspect and cancel delayed and scheduled records (x-sluice-* headers).",
    ),
    "dlq": LazyCommand(
        "sluice.cli.dlq",
        "dlq",
        "Inspect and replay dead-letter topics.",
    ),
    "users": LazyCommand(
        "sluice.cli.users",
        "users",
        "Create, list, change and delete SCRAM users (SASL SCRAM-SHA-256/512 and PLAIN).",
    ),
    "schemas": LazyCommand(
        "sluice.cli.schemas",
        "schemas",
        "Register, check, list, show and delete schemas in the Schema Registry; set "
        "compatibility levels and modes.",
    ),
    "dev-cluster": LazyCommand(
        "sluice.cli.dev_cluster",
        "dev_cluster",
        "Start a private ZooKeeper and a cluster of brokers on this machine (loopback only) "
        "and keep them running until Ctrl-C; drill failover with its subcommands.",
    ),
    "console": LazyCommand(
        "sluice.cli.console",
        "console",
        "Serve the web console for the cluster at --bootstrap-server.",
    ),
    "top": LazyCommand(
        "sluice.cli.console",
        "top",
        "Produce rates per topic and lag per consumer group, refreshed every --interval.",
    ),
    "archive": LazyCommand(
        "sluice.cli.pipelines",
        "archive",
        "Copy topics into Parquet, exactly once, partitioned by topic and date.",
    ),
    "replay": LazyCommand(
        "sluice.cli.pipelines",
        "replay",
        "Re-publish archived records into a topic, keys, headers and order kept.",
    ),
}
"""Each subcommand by name: the module that defines it and its name there. A command's
module is imported only when that command runs: ``sluice --help`` lists the summaries
written here, ``sluice serve`` need not load the client, the console or Spark's glue, nor
``sluice topics`` the broker."""


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            lazy = COMMANDS[cmd_name]
            command = getattr(importlib.import_module(lazy.module), lazy.attribute)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands and their summaries, as click lists them, from the table."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in COMMANDS:
                # Shortened as click shortens a command's own help.
                listed = click.Command(name, help=COMMANDS[name].summary)
                rows.append((name, listed.get_short_help_str(limit)))
                continue
            command = super().get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sluice")
def main() -> None:
    """Sluice: a durable, partitioned event log that speaks the Kafka protocol."""
