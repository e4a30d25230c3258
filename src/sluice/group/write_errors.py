"""What group members are told when the group coordinator's ``__consumer_offsets``
records could not be written: Kafka's mapping, shared by classic, consumer and share
groups (:mod:`sluice.group.classic_groups` and the modules of the classic protocol,
:mod:`sluice.group.offsets`, :mod:`sluice.group.share_coordinator`), each
of which adds what its own writes map differently."""

from __future__ import annotations

from sluice.common.errors import ErrorCode

TOO_LARGE = (ErrorCode.message_too_large, ErrorCode.record_list_too_large)
"""The record was refused for its size."""


def write_error(error: ErrorCode) -> ErrorCode | None:
    """What clients are told when records could not be written (Kafka's mapping), for
    the errors every kind of write maps alike; None for the others."""
    if error in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
    ):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    return None
