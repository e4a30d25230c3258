"""The state batches of Kafka's internal share-state APIs on the wire, both ways: the
share-partition's leader sends them in WriteShareGroupState and reads them from
ReadShareGroupState (:mod:`sluice.broker.share.persister`), and the share coordinator
reads and answers them (:mod:`sluice.broker.handlers.share_state`). The messages
themselves are the ``StateBatch`` class of whichever request or response module is in
use."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sluice.protocol.messages import make
from sluice.share.state import DeliveryState, StateBatch


def state_batch_messages(module: Any, batches: Iterable[StateBatch]) -> tuple[Any, ...]:
    """``batches`` as the ``StateBatch`` messages of ``module``."""
    return tuple(
        make(
            module.StateBatch,
            first_offset=b.first_offset,
            last_offset=b.last_offset,
            delivery_state=int(b.state),
            delivery_count=b.delivery_count,
        )
        for b in batches
    )


def state_batches(messages: Iterable[Any]) -> tuple[StateBatch, ...]:
    """The state batches the ``StateBatch`` messages carry. Raises ValueError for a
    delivery state Kafka does not have (each side says whose fault that is)."""
    return tuple(
        StateBatch(
            int(b.first_offset),
            int(b.last_offset),
            DeliveryState(b.delivery_state),
            int(b.delivery_count),
        )
        for b in messages
    )
