"""A kept failure raised again and again keeps a traceback of bounded length (raising
one exception object again would add frames to it every time)."""

from __future__ import annotations

import traceback

import pytest

from sluice.client.errors import ClientError
from sluice.client.failure import StoredFailure


def _kept() -> StoredFailure[ClientError]:
    try:
        raise ClientError("the connection broke")
    except ClientError as e:
        return StoredFailure(e)


def _depth(error: BaseException) -> int:
    return len(traceback.extract_tb(error.__traceback__))


def test_raising_a_kept_failure_again_does_not_grow_its_traceback() -> None:
    failure = _kept()
    depths = []
    for _ in range(1_000):
        with pytest.raises(ClientError) as raised:
            failure.raise_again()
        depths.append(_depth(raised.value))
    assert raised.value is failure.error
    assert max(depths) == min(depths) <= 3


def test_raising_the_same_object_again_would_grow_it() -> None:
    """What StoredFailure prevents (so the test above can fail)."""
    error = _kept().error
    depths = []
    for _ in range(3):
        try:
            raise error
        except ClientError as e:
            depths.append(_depth(e))
    assert depths[0] < depths[1] < depths[2]
