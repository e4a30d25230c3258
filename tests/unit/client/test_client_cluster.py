"""Bootstrap parsing and per-broker concurrency helpers of the client's Cluster."""

from __future__ import annotations

import asyncio

import pytest

from sluice.client.cluster import parse_bootstrap, run_all
from sluice.client.errors import ConnectionClosedError
from sluice.common import errors


def test_bootstrap_lists_parse() -> None:
    assert parse_bootstrap("127.0.0.1:9092") == [("127.0.0.1", 9092)]
    assert parse_bootstrap(" a:1 , b:2 ,") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["[::1]:9093"]) == [("::1", 9093)]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("localhost", "is not host:port"),
        (":9092", "is not host:port"),
        ("h:port", "port that is not a number"),
        ("h:70000", "outside 1-65535"),
        (" , ", "no bootstrap server given"),
    ],
)
def test_bad_bootstrap_lists_name_the_bad_entry(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_bootstrap(text)


def test_run_all_raises_a_client_failure_itself_and_cancels_the_rest() -> None:
    cancelled = asyncio.Event()

    async def fails() -> None:
        raise errors.NotLeaderOrFollower("partition t-0 moved")

    async def waits_forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    async def scenario() -> None:
        with pytest.raises(errors.NotLeaderOrFollower, match="moved"):
            await run_all([waits_forever(), fails()])
        assert cancelled.is_set()
        with pytest.raises(ConnectionClosedError):
            await run_all([_raise(ConnectionClosedError("gone"))])

    asyncio.run(scenario())


def test_run_all_keeps_bugs_in_their_group() -> None:
    async def scenario() -> None:
        with pytest.raises(ExceptionGroup) as caught:
            await run_all([_raise(ZeroDivisionError()), _raise(errors.NotLeaderOrFollower())])
        assert any(isinstance(e, ZeroDivisionError) for e in caught.value.exceptions)

    asyncio.run(scenario())


async def _raise(error: Exception) -> None:
    raise error
