"""The ``sluice`` command group; each subcommand lives in its own module.

``serve`` runs a broker; ``topics``, ``produce``, ``consume``, ``groups``,
``share-groups``, ``transactions``, ``delays``, ``dlq``, ``users``, ``cluster`` and
``acls`` talk to one through ``sluice.client``; ``console`` serves the web console and
``top`` shows produce rates and group lag in the terminal.
"""

from __future__ import annotations

import click

from sluice import __version__
from sluice.cli.acls import acls
from sluice.cli.cluster import cluster
from sluice.cli.console import console, top
from sluice.cli.consume import consume
from sluice.cli.delays import delays
from sluice.cli.dev_cluster import dev_cluster
from sluice.cli.dlq import dlq
from sluice.cli.groups import groups
from sluice.cli.pipelines import register_pipelines
from sluice.cli.produce import produce
from sluice.cli.quotas import quotas
from sluice.cli.serve import serve
from sluice.cli.share_groups import share_groups
from sluice.cli.topics import topics
from sluice.cli.transactions import transactions
from sluice.cli.users import users


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sluice")
def main() -> None:
    """Sluice: a durable, partitioned event log that speaks the Kafka protocol."""


main.add_command(serve)
main.add_command(topics)
main.add_command(produce)
main.add_command(consume)
main.add_command(groups)
main.add_command(share_groups)
main.add_command(cluster)
main.add_command(quotas)
main.add_command(transactions)
main.add_command(acls)
main.add_command(delays)
main.add_command(dlq)
main.add_command(users)
main.add_command(dev_cluster)
main.add_command(console)
main.add_command(top)
register_pipelines(main)
