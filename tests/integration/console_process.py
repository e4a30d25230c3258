"""A real ``python -m sluice console`` process on a loopback port, for tests.

It binds port 0 (the kernel's choice: nothing to race for) and is ready when it printed
its URL, which names the port it got (it prints it once it listens); the wait has a
deadline.
``console_broker`` and ``running_console`` are the setup the console test modules share:
a broker with its HTTP listener on, and a console on it, each stopped on leaving.
"""

from __future__ import annotations

import contextlib
import html
import os
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from broker_process import BrokerProcess

import sluice
from sluice.cli.loopback import HOST

START_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 30.0
_ANNOUNCED_URL = re.compile(r" at (?P<url>http://[^/\s]+:(?P<port>\d+))/$")


@dataclass(frozen=True, slots=True)
class Page:
    status: int
    text: str
    headers: dict[str, str] = field(default_factory=dict)


class ConsoleProcess:
    def __init__(
        self, bootstrap: str, *arguments: str, environment: dict[str, str] | None = None
    ) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sluice",
                "console",
                "--bootstrap",
                bootstrap,
                "--host",
                HOST,
                "--port",
                "0",
                *arguments,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**(os.environ if environment is None else environment), "PYTHONUNBUFFERED": "1"},
        )
        self.output: list[str] = []
        self.first_line = self._first_line()
        announced = _ANNOUNCED_URL.search(self.first_line)
        if announced is None:
            self.stop()
            raise RuntimeError(f"sluice console announced no URL: {self.first_line}")
        self.url = announced["url"]
        self.port = int(announced["port"])

    def _first_line(self) -> str:
        """The line announcing the URL; anything logged before it is kept in ``output``.
        A thread reads the pipe, so a deadline bounds the wait whatever the buffering."""
        assert self.process.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        stdout = self.process.stdout

        def read() -> None:
            for raw in stdout:
                lines.put(raw.decode(errors="replace"))
            lines.put("")

        threading.Thread(target=read, name="console-output", daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                break
            if line.startswith("Sluice console"):
                return line.strip()
            if not line:
                break
            self.output.append(line)
        self.stop()
        raise RuntimeError(
            f"sluice console did not start (exit code {self.process.returncode}): "
            + "".join(self.output)
        )

    def get(self, path: str) -> Page:
        try:
            with urllib.request.urlopen(self.url + path, timeout=REQUEST_TIMEOUT_S) as response:
                return Page(response.status, response.read().decode(), dict(response.headers))
        except urllib.error.HTTPError as e:
            return Page(e.code, e.read().decode(), dict(e.headers))

    def post(self, path: str, fields: dict[str, str], *, origin: str | None = "same") -> Page:
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if origin == "same":
            headers["Origin"] = self.url
        elif origin is not None:
            headers["Origin"] = origin
        request = urllib.request.Request(
            self.url + path,
            data=urllib.parse.urlencode(fields).encode(),
            headers=headers,
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                return Page(response.status, response.read().decode(), dict(response.headers))
        except urllib.error.HTTPError as e:
            return Page(e.code, e.read().decode(), dict(e.headers))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def console_broker(
    directory: Path, overrides: Mapping[str, str] | None = None
) -> Iterator[BrokerProcess]:
    """A started broker with its data in ``directory``, its HTTP listener on a free port
    (which also serves its own console) and ``overrides``; stopped on leaving."""
    process = BrokerProcess(directory / "data", overrides={"http.port": "0", **(overrides or {})})
    process.start()
    try:
        yield process
    finally:
        process.stop()


@contextlib.contextmanager
def running_console(bootstrap: str, *arguments: str) -> Iterator[ConsoleProcess]:
    """A ``sluice console`` process on the cluster at ``bootstrap``; stopped on leaving."""
    process = ConsoleProcess(bootstrap, *arguments)
    try:
        yield process
    finally:
        process.stop()


def rows(page: str, table_id: str) -> list[list[str]]:
    """The cells (tags stripped, unescaped) of each body row of a table."""
    table = re.search(rf'<table id="{table_id}".*?<tbody>(.*?)</tbody>', page, re.S)
    assert table is not None, f"no table {table_id}"
    found = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        found.append(
            [
                html.unescape(re.sub(r"<[^>]+>", "", cell.replace("</div>", "\n"))).strip()
                for cell in cells
            ]
        )
    return found


async def accept_first(member: sluice.ShareConsumer, count: int, timeout_s: float) -> None:
    """Accept the first ``count`` records the share consumer ``member`` is given (one a
    poll) and release any more, so the group has a known number of accepted records."""
    accepted = 0
    deadline = time.monotonic() + timeout_s
    while accepted < count:
        assert time.monotonic() < deadline, f"only {accepted} records arrived"
        for record in await member.poll(0.5):
            if accepted < count:
                member.accept(record)
                accepted += 1
            else:
                member.release(record)
