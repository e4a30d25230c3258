"""Consumer groups: Kafka's classic group protocol and committed offsets.

What belongs here: the group coordinator as a deterministic state machine
(:mod:`~sluice.group.coordinator`, with :mod:`~sluice.group.state` and
:mod:`~sluice.group.member`), the ``__consumer_offsets`` record formats
(:mod:`~sluice.group.records`), the group → partition rule
(:mod:`~sluice.group.placement`), and the thin asyncio runtime that gives the state
machine its log and its timers (:mod:`~sluice.group.runtime`). Requests and responses
here are plain data (:mod:`~sluice.group.api`); the broker's handlers translate the wire
messages. This package imports only ``common``, ``protocol`` and ``storage``.
"""

from sluice.group.config import OFFSETS_TOPIC, GroupConfig
from sluice.group.coordinator import GroupCoordinator
from sluice.group.runtime import GroupCoordinatorRuntime, OffsetsLog

__all__ = [
    "OFFSETS_TOPIC",
    "GroupConfig",
    "GroupCoordinator",
    "GroupCoordinatorRuntime",
    "OffsetsLog",
]
