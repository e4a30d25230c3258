"""Options every ``sluice`` command shares, checked over the whole command tree, and the
plan file ``sluice cluster decommission`` writes."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from sluice.cli.main import COMMANDS
from sluice.cli.reassign import write_plan_file


def _commands() -> Iterator[tuple[str, click.Command]]:
    pending: list[tuple[str, click.Command]] = []
    for name, lazy in sorted(COMMANDS.items()):
        command = getattr(importlib.import_module(lazy.module), lazy.attribute)
        pending.append((name, command))
    while pending:
        path, command = pending.pop()
        yield path, command
        if isinstance(command, click.Group):
            pending.extend((f"{path} {name}", sub) for name, sub in command.commands.items())


def test_every_command_with_bootstrap_server_also_takes_b() -> None:
    checked = 0
    for path, command in _commands():
        for parameter in command.params:
            if isinstance(parameter, click.Option) and "--bootstrap-server" in parameter.opts:
                assert "-b" in parameter.opts, path
                checked += 1
            elif isinstance(parameter, click.Option):
                assert "-b" not in parameter.opts, f"{path}: -b means something else"
    assert checked > 40


def _document(replicas: list[int]) -> dict[str, object]:
    partitions = [{"topic": "t", "partition": 0, "replicas": replicas}]
    return {
        "current": {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [0]}]},
        "proposed": {"version": 1, "partitions": partitions},
    }


def test_the_plan_file_is_written_kept_when_the_same_and_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    write_plan_file(path, _document([1]))
    assert json.loads(path.read_text()) == _document([1])
    write_plan_file(path, _document([1]))  # the same plan again: fine
    with pytest.raises(click.ClickException, match="already holds another plan"):
        write_plan_file(path, _document([2]))
    assert json.loads(path.read_text()) == _document([1])  # the rollback is not lost
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_a_plan_file_that_cannot_be_written_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(click.ClickException, match="cannot write the plan"):
        write_plan_file(tmp_path / "no-such-directory" / "plan.json", _document([1]))
