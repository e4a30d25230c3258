"""The ``sluice`` command group; each subcommand lives in its own module."""

from __future__ import annotations

import click

from sluice import __version__
from sluice.cli.serve import serve


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sluice")
def main() -> None:
    """Sluice: a durable, partitioned event log that speaks the Kafka protocol."""


main.add_command(serve)
