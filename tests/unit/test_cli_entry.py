"""The ``sluice`` entry point keeps Hypothesis (a test dependency kio registers strategies
with at import) out of the process, so a broker or command starts without that cost; and
``sluice --help`` lists the commands without importing any of them."""

from __future__ import annotations

import importlib
import subprocess
import sys

import click
import pytest

from sluice.cli.main import COMMANDS

RUN_SLUICE_HELP = """
import runpy, sys
sys.argv = ["sluice", *sys.argv[1:]]
try:
    runpy.run_module("sluice", run_name="__main__")
except SystemExit:
    pass
print("kio loaded:", "kio.static.primitive" in sys.modules)
print("hypothesis loaded:", sys.modules.get("hypothesis") is not None)
heavy = ("sluice.broker", "sluice.client", "kio", "aiohttp")
print("heavy:", sorted(m for m in sys.modules if m.startswith(heavy)))
"""


def test_python_m_sluice_never_imports_hypothesis() -> None:
    result = subprocess.run(
        [sys.executable, "-c", RUN_SLUICE_HELP, "topics", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "Usage" in result.stdout
    assert "kio loaded: True" in result.stdout  # the schemas were loaded...
    assert "hypothesis loaded: False" in result.stdout  # ...without Hypothesis


def test_the_command_list_imports_no_command() -> None:
    result = subprocess.run(
        [sys.executable, "-c", RUN_SLUICE_HELP, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    for name in COMMANDS:
        assert f"  {name} " in result.stdout
    assert "heavy: []" in result.stdout  # no broker, client, schemas or HTTP library


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_listed_summary_is_the_commands_own(name: str) -> None:
    lazy = COMMANDS[name]
    command = getattr(importlib.import_module(lazy.module), lazy.attribute)
    assert isinstance(command, click.Command)
    assert lazy.summary == command.get_short_help_str(10_000)
