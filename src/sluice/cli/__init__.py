"""The ``sluice`` command.

What belongs here: argument parsing, output formatting and error messages for people at
a terminal. Each subcommand lives in its own module and does its work through
``sluice.client`` (or, for ``serve`` only, the broker). No protocol or storage logic
lives here: if a command needs something the client cannot do, the client grows it.
"""
