"""Progress bars of the CLI's long operations, drawn with rich on standard error.

A bar is drawn only when standard error is a terminal, so scripts that parse a
command's output (standard output) or capture its errors see exactly what they saw
before. ``--no-progress``, or ``SLUICE_NO_PROGRESS=1`` in the environment, turns bars
off at a terminal too. A command asks for one bar at a time::

    with progress_bar("producing", enabled=progress_enabled(no_progress), unit="bytes",
                      total=size, detail="{task.fields[records]} records sent",
                      records=0) as bar:
        bar.advance(len(chunk))
        bar.update(records=sent)

When the bar is off, the same calls do nothing. A command prints its results to
standard output only after its bar has finished, so output and bar never interleave.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.text import Text

NO_PROGRESS_ENV_VAR = "SLUICE_NO_PROGRESS"

REFRESHES_PER_S = 8.0

F = TypeVar("F", bound=Callable[..., Any])


def progress_option(function: F) -> F:
    """``--no-progress`` (env SLUICE_NO_PROGRESS=1): no progress bar at a terminal."""
    return click.option(
        "--no-progress",
        "no_progress",
        is_flag=True,
        envvar=NO_PROGRESS_ENV_VAR,
        show_envvar=True,
        help="Draw no progress bar (bars are drawn only when standard error is a terminal).",
    )(function)


def progress_enabled(no_progress: bool) -> bool:
    """Whether to draw bars: standard error is a terminal and they are not turned off."""
    return not no_progress and sys.stderr.isatty()


class Bar:
    """One operation's progress; every method does nothing when bars are off."""

    def __init__(self, progress: Progress | None, task: TaskID | None) -> None:
        self._progress = progress
        self._task = task

    @property
    def shown(self) -> bool:
        return self._progress is not None

    def advance(self, amount: float = 1) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, amount)

    def update(
        self,
        *,
        completed: float | None = None,
        total: float | None = None,
        description: str | None = None,
        **fields: Any,
    ) -> None:
        """Set the count done, the total (once known), the description, or the fields
        the ``detail`` text shows."""
        if self._progress is None or self._task is None:
            return
        if total is not None:
            self._progress.update(self._task, total=total)
        self._progress.update(self._task, completed=completed, description=description, **fields)


class _CountColumn(MofNCompleteColumn):
    """N/TOTAL, or nothing while the total is unknown (rather than N/?)."""

    def render(self, task: Task) -> Text:
        return super().render(task) if task.total is not None else Text("")


@contextlib.contextmanager
def progress_bar(
    description: str,
    *,
    enabled: bool,
    total: float | None = None,
    unit: Literal["items", "bytes"] = "items",
    detail: str = "",
    **fields: Any,
) -> Iterator[Bar]:
    """A bar on standard error while the block runs (a pulsing one until ``total`` is
    known). ``unit="bytes"`` shows sizes and a rate, ``"items"`` N/TOTAL (once known);
    ``detail`` is a rich template of more text after it, from ``fields``."""
    if not enabled:
        yield Bar(None, None)
        return
    columns: list[ProgressColumn] = [
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
    ]
    if unit == "bytes":
        columns += [DownloadColumn(), TransferSpeedColumn()]
    else:
        columns.append(_CountColumn())
    if detail:
        columns.append(TextColumn(detail))
    columns.append(TimeElapsedColumn())
    progress = Progress(
        *columns,
        console=Console(file=sys.stderr),
        refresh_per_second=REFRESHES_PER_S,
    )
    with progress:
        task = progress.add_task(description, total=total, **fields)
        yield Bar(progress, task)
