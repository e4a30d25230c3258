"""Append turns: batches checked off the event loop keep their partition's arrival order."""

from __future__ import annotations

import asyncio
import threading

from sluice.broker.produce_checks import ProduceChecks
from sluice.common.ids import TopicPartition

ORDERS = TopicPartition("orders", 0)
AUDIT = TopicPartition("audit", 0)


def test_turns_end_in_arrival_order_even_when_a_later_one_is_released_first() -> None:
    async def scenario() -> list[str]:
        checks = ProduceChecks(threads=1)
        appended: list[str] = []
        first = checks.take_turn(ORDERS)
        second = checks.take_turn(ORDERS)  # refused early: released before the first
        third = checks.take_turn(ORDERS)
        other = checks.take_turn(AUDIT)
        second.release()

        async def append_when_due(name: str, turn_wait: asyncio.Future[None]) -> None:
            await turn_wait
            appended.append(name)

        waiting_third = asyncio.ensure_future(append_when_due("third", third.wait()))
        await other.wait()  # another partition does not wait for orders
        appended.append("other")
        await asyncio.sleep(0)
        assert not waiting_third.done(), "the third appended before the first"
        assert checks.has_waiting_turns(ORDERS)
        appended.append("first")
        first.release()
        await waiting_third
        third.release()
        other.release()
        await asyncio.sleep(0)
        assert not checks.has_waiting_turns(ORDERS)
        assert not checks.has_waiting_turns(AUDIT)
        checks.close()
        return appended

    assert asyncio.run(scenario()) == ["other", "first", "third"]


def test_a_cancelled_waiter_does_not_cancel_the_turn_before_it() -> None:
    async def scenario() -> None:
        checks = ProduceChecks(threads=1)
        first = checks.take_turn(ORDERS)
        second = checks.take_turn(ORDERS)
        waiter = asyncio.ensure_future(second.wait())
        await asyncio.sleep(0)
        waiter.cancel()
        second.release()
        await asyncio.sleep(0)
        third = checks.take_turn(ORDERS)
        third_waiter = asyncio.ensure_future(third.wait())
        await asyncio.sleep(0)
        assert not third_waiter.done()
        first.release()
        await asyncio.wait_for(third_waiter, 1)
        third.release()
        checks.close()

    asyncio.run(scenario())


def test_work_runs_in_a_check_thread() -> None:
    async def scenario() -> str:
        checks = ProduceChecks(threads=1)
        try:
            return await checks.run(lambda: threading.current_thread().name)
        finally:
            checks.close()

    assert asyncio.run(scenario()).startswith("sluice-record-check")
