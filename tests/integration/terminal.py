"""Run ``sluice`` with its standard error (and optionally standard output) on a
pseudo-terminal, as at a user's terminal, and collect what it drew there."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

COMMAND_TIMEOUT_S = 120.0
PROGRESS_MARK = "━"
"""The character rich draws its bars with."""


@dataclass(frozen=True)
class TerminalRun:
    returncode: int
    terminal: str
    """Everything written to the pseudo-terminal (escape sequences included)."""
    stdout: str
    """Standard output when it was a pipe ("" when it went to the terminal)."""


def run_at_terminal(
    bootstrap: str,
    *args: str,
    stdin: Path | None = None,
    stdin_bytes: bytes | None = None,
    stdout_to_terminal: bool = False,
    environment: dict[str, str] | None = None,
    timeout_s: float = COMMAND_TIMEOUT_S,
) -> TerminalRun:
    """``python -m sluice ARGS`` with standard error on a new pseudo-terminal;
    standard input from a file, from bytes through a pipe, or empty."""
    main, secondary = pty.openpty()
    env = {name: value for name, value in os.environ.items() if name != "SLUICE_NO_PROGRESS"}
    env.update(
        {
            "SLUICE_BOOTSTRAP_SERVER": bootstrap,
            "TERM": "xterm-256color",
            "COLUMNS": "120",
            **(environment or {}),
        }
    )
    stdin_file = stdin.open("rb") if stdin is not None else None
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "sluice", *args],
            stdin=stdin_file
            if stdin_file is not None
            else (subprocess.PIPE if stdin_bytes is not None else subprocess.DEVNULL),
            stdout=secondary if stdout_to_terminal else subprocess.PIPE,
            stderr=secondary,
            env=env,
        )
    finally:
        os.close(secondary)
        if stdin_file is not None:
            stdin_file.close()
    if stdin_bytes is not None:
        assert process.stdin is not None
        process.stdin.write(stdin_bytes)
        process.stdin.close()
    drawn = bytearray()
    out = bytearray()
    streams = [main]
    if process.stdout is not None:
        streams.append(process.stdout.fileno())
    deadline = time.monotonic() + timeout_s
    while streams:
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"sluice {' '.join(args)} did not finish in {timeout_s}s")
        ready, _, _ = select.select(streams, [], [], 1.0)
        for descriptor in ready:
            try:
                data = os.read(descriptor, 65536)
            except OSError:  # EIO: the terminal's other side is closed
                data = b""
            if not data:
                streams.remove(descriptor)
            elif descriptor == main:
                drawn += data
            else:
                out += data
    os.close(main)
    returncode = process.wait(timeout_s)
    return TerminalRun(returncode, drawn.decode(errors="replace"), out.decode(errors="replace"))


def run_piped(
    bootstrap: str, *args: str, stdin: bytes = b"", environment: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The same command with every stream a pipe, as scripts run it."""
    return subprocess.run(
        [sys.executable, "-m", "sluice", *args],
        input=stdin.decode(),
        capture_output=True,
        text=True,
        env={**os.environ, "SLUICE_BOOTSTRAP_SERVER": bootstrap, **(environment or {})},
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
