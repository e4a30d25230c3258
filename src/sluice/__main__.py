"""``python -m sluice`` is the ``sluice`` command."""

from sluice.cli.entry import main

main()
