"""``python -m sluice`` is the ``sluice`` command."""

from sluice.cli.main import main

main()
