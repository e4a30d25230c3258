"""Consumer groups: Kafka's classic group protocol and committed offsets, the
membership of share groups (KIP-932), and the new consumer group protocol (KIP-848).

What belongs here: the group coordinator as a deterministic state machine
(:mod:`~sluice.group.coordinator`, the shard, which routes each request to its part:
classic groups hosted in :mod:`~sluice.group.classic_groups`, their protocol in
:mod:`~sluice.group.classic_join`, :mod:`~sluice.group.classic_members` and
:mod:`~sluice.group.classic_rebalance` over :mod:`~sluice.group.state` and
:mod:`~sluice.group.member`, their conversions to and from consumer groups in
:mod:`~sluice.group.classic_conversion`; committed offsets in
:mod:`~sluice.group.offsets`; share groups in :mod:`~sluice.group.share_coordinator`,
:mod:`~sluice.group.share_group` and the pure :mod:`~sluice.group.share_assignor`; the
core of KIP-848 consumer groups in :mod:`~sluice.group.consumer_heartbeat` and the other
``consumer_*`` modules, hosted by the shard in :mod:`~sluice.group.consumer_coordinator`), the
``__consumer_offsets`` record formats (:mod:`~sluice.group.records`), the group → partition rule
(:mod:`~sluice.coordinator.placement`), and the group operations on top of the generic
coordinator runtime, which gives the state machine its log and its timers
(:mod:`~sluice.group.runtime` over :mod:`sluice.coordinator`). Requests and responses
here are plain data (:mod:`~sluice.group.api`); the broker's handlers translate the wire
messages. This package imports only ``common``, ``protocol``, ``storage`` and
``coordinator``.
"""

from sluice.group.config import OFFSETS_TOPIC, GroupConfig
from sluice.group.coordinator import GroupCoordinator
from sluice.group.runtime import GroupCoordinatorRuntime

__all__ = [
    "OFFSETS_TOPIC",
    "GroupConfig",
    "GroupCoordinator",
    "GroupCoordinatorRuntime",
]
