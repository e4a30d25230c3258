"""Where a server's time goes, from a sampling profile: py-spy's collapsed stacks
(``py-spy record --format raw``, one ``frame;frame;…;leaf count`` line per distinct stack,
root first), aggregated by function (own time and total time) and by group.

Samples whose innermost frame waits for work (the event loop in ``select``/``epoll``, a
thread in ``wait``) are idle and left out of every percentage; py-spy already drops idle
threads unless asked for them, and this catches what it lets through.

Each busy sample is put in one :data:`GROUPS` entry: the group of its innermost frame
that belongs to any, so time in a helper (``struct``, ``io``) counts for the code that
called it. The same collapsed file opens in speedscope (https://www.speedscope.app) and
in flamegraph.pl.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*)\)$")
_IDLE: tuple[tuple[str, str], ...] = (
    ("selectors.py", "select"),
    ("selectors.py", "poll"),
    ("threading.py", "wait"),
    ("queue.py", "get"),
    ("concurrent/futures/thread.py", "_worker"),
)
"""(file suffix, method name) of an innermost frame that waits rather than works. A
thread-pool worker's own frame is innermost only while it blocks on its queue (in C):
the work it runs has frames of its own."""

_SCAFFOLDING: tuple[tuple[str, str | None], ...] = (
    ("<frozen runpy>", None),
    ("click/", None),
    ("sluice/__main__.py", None),
    ("sluice/cli/", None),
    ("asyncio/runners.py", None),
    ("asyncio/base_events.py", "run_forever"),
    ("asyncio/base_events.py", "run_until_complete"),
    ("threading.py", None),
    ("concurrent/futures/thread.py", "_worker"),
)
"""(file part, method name or any) of the frames that start the process, its event loop
or a thread: under nearly every sample, they are left out of the total-time table."""

_SOCKET_WRITE_FUNCTIONS = frozenset(
    {"write", "writelines", "_write_ready", "_write_send", "_write_sendmsg", "sendfile"}
)
_SOCKET_READ_FUNCTIONS = frozenset(
    {"_read_ready", "_read_ready__get_buffer", "_read_ready__data_received", "data_received"}
)


@dataclass(frozen=True)
class Group:
    name: str
    files: tuple[str, ...]
    """Substrings of a frame's file name."""
    functions: frozenset[str] | None = None
    """Only these functions of those files (None: any)."""

    def matches(self, frame: Frame) -> bool:
        return any(part in frame.file for part in self.files) and (
            self.functions is None or frame.method in self.functions
        )


GROUPS: tuple[Group, ...] = (
    Group("socket write", ("asyncio/selector_events.py",), _SOCKET_WRITE_FUNCTIONS),
    Group("socket read", ("asyncio/selector_events.py",), _SOCKET_READ_FUNCTIONS),
    Group("kio decode/encode, message building", ("kio/", "sluice/protocol/messages.py")),
    Group("bounds check", ("sluice/protocol/bounds.py",)),
    Group("storage append", ("sluice/storage/",)),
    Group(
        "produce handler",
        (
            "sluice/broker/handlers/produce",
            "sluice/broker/produce_checks.py",
            "sluice/broker/replication/partition.py",
            "sluice/broker/replication/replica_manager.py",
            "sluice/broker/replication/purgatory.py",
            "sluice/broker/network/leader_offsets.py",
            "sluice/broker/replication/isr.py",
            "sluice/broker/coordination/producer_ids.py",
            "sluice/protocol/records/",
        ),
    ),
    Group("fetch handler", ("sluice/broker/handlers/fetch", "sluice/protocol/fetch_response.py")),
    Group("metadata handler", ("sluice/broker/handlers/metadata", "sluice/broker/topics.py")),
    Group(
        "dispatcher/metrics/quota wrappers",
        (
            "sluice/broker/dispatcher.py",
            "sluice/broker/observability/metrics/",
            "sluice/broker/quotas.py",
            "sluice/broker/request_limits.py",
            "sluice/broker/authorization.py",
            "sluice/broker/context.py",
            "prometheus_client/",
        ),
    ),
    Group(
        "request loop, framing, codec glue",
        (
            "sluice/broker/network/server.py",
            "sluice/protocol/framing.py",
            "sluice/protocol/codec.py",
        ),
    ),
    Group(
        "event loop/task machinery",
        ("asyncio/", "selectors.py", "contextvars", "contextlib.py", "functools.py"),
    ),
)
OTHER = "other"


@dataclass(frozen=True)
class Frame:
    function: str
    file: str

    @classmethod
    def parse(cls, text: str) -> Frame:
        match = _FRAME.match(text)
        if match is None:
            return cls(text, "")
        return cls(match["function"], match["file"])

    @property
    def method(self) -> str:
        """The function's own name, without its class (py-spy writes ``Class.method``)."""
        return self.function.rpartition(".")[2]

    def is_scaffolding(self) -> bool:
        return any(part in self.file and name in (None, self.method) for part, name in _SCAFFOLDING)

    def label(self) -> str:
        return f"{self.function} ({self.file})" if self.file else self.function


def _is_idle(leaf: Frame) -> bool:
    return any(leaf.file.endswith(suffix) and leaf.method == name for suffix, name in _IDLE)


def group_of(stack: list[Frame]) -> str:
    """The group of the innermost frame that has one (``stack`` is root first)."""
    for frame in reversed(stack):
        for group in GROUPS:
            if group.matches(frame):
                return group.name
    return OTHER


@dataclass
class Profile:
    busy_samples: int = 0
    idle_samples: int = 0
    own: Counter[str] = field(default_factory=Counter)
    total: Counter[str] = field(default_factory=Counter)
    groups: Counter[str] = field(default_factory=Counter)

    def add(self, stack: list[Frame], count: int) -> None:
        if not stack:
            return
        if _is_idle(stack[-1]):
            self.idle_samples += count
            return
        self.busy_samples += count
        self.own[stack[-1].label()] += count
        for label in {frame.label() for frame in stack if not frame.is_scaffolding()}:
            self.total[label] += count
        self.groups[group_of(stack)] += count

    def share(self, count: int) -> float:
        return count / self.busy_samples if self.busy_samples else 0.0


def _stack_frames(line: str) -> tuple[list[Frame], int] | None:
    text, _, count = line.rstrip().rpartition(" ")
    if not text or not count.isdigit():
        return None
    frames = [Frame.parse(part) for part in text.split(";")]
    # py-spy starts each stack with a "process <pid>:…" (and with --threads a thread)
    # pseudo-frame: not code.
    frames = [f for f in frames if not f.function.startswith(("process ", "thread "))]
    return frames, int(count)


def aggregate(lines: Iterable[str]) -> Profile:
    profile = Profile()
    for line in lines:
        parsed = _stack_frames(line)
        if parsed is not None:
            profile.add(*parsed)
    return profile


def read_collapsed(path: Path) -> Profile:
    with path.open() as lines:
        return aggregate(lines)


def report_lines(profile: Profile, top: int) -> list[str]:
    """Markdown: the groups, then the ``top`` functions by own and by total time (the
    total without the frames that start the process, its loop and its threads)."""
    lines = [
        f"{profile.busy_samples:,} busy samples; {profile.idle_samples:,} idle samples (the "
        "event loop waiting in select/epoll, threads waiting) left out of every percentage",
        "",
        "| group | share of busy samples |",
        "|---|---:|",
    ]
    for name, count in profile.groups.most_common():
        lines.append(f"| {name} | {profile.share(count):.1%} |")
    for title, counter in (("own time", profile.own), ("total time", profile.total)):
        lines += ["", f"| top functions by {title} | share |", "|---|---:|"]
        for label, count in counter.most_common(top):
            lines.append(f"| `{label}` | {profile.share(count):.1%} |")
    return lines
