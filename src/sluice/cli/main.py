"""The ``sluice`` command group; each subcommand lives in its own module.

``serve`` runs a broker; ``topics``, ``produce``, ``consume``, ``groups``,
``share-groups``, ``transactions``, ``delays``, ``dlq``, ``users``, ``cluster`` and
``acls`` talk to one through ``sluice.client``; ``console`` serves the web console and
``top`` shows produce rates and group lag in the terminal.
"""

from __future__ import annotations

import importlib

import click

from sluice import __version__

COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("sluice.cli.serve", "serve"),
    "topics": ("sluice.cli.topics", "topics"),
    "produce": ("sluice.cli.produce", "produce"),
    "consume": ("sluice.cli.consume", "consume"),
    "groups": ("sluice.cli.groups", "groups"),
    "share-groups": ("sluice.cli.share_groups", "share_groups"),
    "cluster": ("sluice.cli.cluster", "cluster"),
    "quotas": ("sluice.cli.quotas", "quotas"),
    "transactions": ("sluice.cli.transactions", "transactions"),
    "acls": ("sluice.cli.acls", "acls"),
    "delays": ("sluice.cli.delays", "delays"),
    "dlq": ("sluice.cli.dlq", "dlq"),
    "users": ("sluice.cli.users", "users"),
    "dev-cluster": ("sluice.cli.dev_cluster", "dev_cluster"),
    "console": ("sluice.cli.console", "console"),
    "top": ("sluice.cli.console", "top"),
    "archive": ("sluice.cli.pipelines", "archive"),
    "replay": ("sluice.cli.pipelines", "replay"),
}
"""Each subcommand by name: the module that defines it and its name there. A command's
module is imported only when that command runs (or ``--help`` lists them all): ``sluice
serve`` need not load the client, the console or Spark's glue, nor ``sluice topics``
the broker."""


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            module_name, attribute = COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module_name), attribute)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sluice")
def main() -> None:
    """Sluice: a durable, partitioned event log that speaks the Kafka protocol."""
