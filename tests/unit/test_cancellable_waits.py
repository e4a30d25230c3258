"""The background loops of the broker end when cancelled (a shutdown cancels them and
waits for them): each waits for its event with ``asyncio.timeout``, never with
``asyncio.wait_for``, which on Python 3.11 returns normally when the event is set in the
same turn of the loop as the task is cancelled, losing the cancellation
(python/cpython#86296): the loop went on and the broker did not stop on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

SOURCE_ROOT = Path(__file__).resolve().parents[2] / "src" / "sluice"
END_WAIT_S = 5.0
"""Bound of the wait for a cancelled loop to end (it takes a turn or two)."""
LOST_WAIT_S = 0.5
"""How long the demonstration of the lost cancellation waits for an end that never
comes (any wait shows it: the task goes on to its 60 s timeout)."""
EVENT_WAIT_FOR = re.compile(r"asyncio\.wait_for\(\s*[\w.]+\.wait\(\)")


async def as_the_loops_wait(event: asyncio.Event) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(60.0):
            await event.wait()


async def with_wait_for(event: asyncio.Event) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), 60.0)


async def ends_when_cancelled_as_the_event_is_set(
    wait: Callable[[asyncio.Event], Awaitable[None]], end_wait_s: float = END_WAIT_S
) -> bool:
    event = asyncio.Event()

    async def background_loop() -> None:
        while True:  # as the controller's, a scheduler's or a fetcher's loop
            await wait(event)
            event.clear()

    task = asyncio.create_task(background_loop())
    await asyncio.sleep(0)  # one turn: the loop now waits on the event
    event.set()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=end_wait_s)
    if not done:
        task.cancel()  # again: the first was lost
        await asyncio.wait({task}, timeout=END_WAIT_S)
    return bool(done) and task.cancelled()


def test_a_loop_waiting_as_the_broker_loops_do_ends_when_cancelled() -> None:
    assert asyncio.run(ends_when_cancelled_as_the_event_is_set(as_the_loops_wait))


@pytest.mark.skipif(
    sys.version_info >= (3, 12),
    reason="the lost cancellation is Python 3.11's asyncio.wait_for (fixed in 3.12)",
)
def test_a_loop_waiting_with_wait_for_loses_that_cancellation() -> None:
    """The defect itself, so the test above is known to test something."""
    assert not asyncio.run(ends_when_cancelled_as_the_event_is_set(with_wait_for, LOST_WAIT_S))


def test_no_module_waits_for_an_event_with_wait_for() -> None:
    found = [
        f"{path.relative_to(SOURCE_ROOT)}:{text[: match.start()].count(chr(10)) + 1}"
        for path in sorted(SOURCE_ROOT.rglob("*.py"))
        for text in [path.read_text()]
        for match in EVENT_WAIT_FOR.finditer(text)
    ]
    assert not found, f"asyncio.wait_for on an event's wait(): use asyncio.timeout ({found})"
