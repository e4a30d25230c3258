"""The one error table: each Kafka error code maps to one exception class.

Operating errors (bad bytes from a peer or a disk, a missing topic, a full queue) are
raised as a :class:`KafkaError` subclass, carry the error code the protocol answers with,
and say whether retrying can help. Broken invariants are bugs: they are ``assert``-ed and
never caught here.

Classes are generated from kio's ``ErrorCode`` enum, which is itself generated from
Kafka's error list, so the codes and retriable flags are Kafka's own::

    raise errors.UnknownTopicOrPartition("no topic 'orders'")
    errors.for_code(ErrorCode.not_leader_or_follower)  # -> NotLeaderOrFollower
"""

from __future__ import annotations

from typing import ClassVar

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "ProtocolError", "for_code"]


class KafkaError(Exception):
    """An error with a Kafka error code."""

    code: ClassVar[ErrorCode] = ErrorCode.unknown_server_error

    @property
    def retriable(self) -> bool:
        return bool(self.code.retriable)

    @property
    def message(self) -> str:
        """The detail alone, for a response's error_message (clients print the code)."""
        return super().__str__()

    def __str__(self) -> str:
        detail = super().__str__()
        name = self.code.name.upper()
        return f"{name}: {detail}" if detail else name


class ProtocolError(Exception):
    """Bytes from a peer that cannot be parsed at all; the connection is closed."""


def _class_name(code: ErrorCode) -> str:
    return "".join(part.capitalize() for part in code.name.split("_"))


_BY_CODE: dict[ErrorCode, type[KafkaError]] = {}
for _code in ErrorCode:
    if _code is ErrorCode.none:
        continue
    _cls = type(_class_name(_code), (KafkaError,), {"code": _code, "__module__": __name__})
    _BY_CODE[_code] = _cls
    globals()[_cls.__name__] = _cls


def for_code(code: int) -> type[KafkaError]:
    """The exception class for a (non-zero) error code."""
    return _BY_CODE.get(ErrorCode(code), KafkaError)


# Names used across the code base, spelled out so mypy and readers can see them.
UnknownServerError: type[KafkaError] = _BY_CODE[ErrorCode.unknown_server_error]
OffsetOutOfRange: type[KafkaError] = _BY_CODE[ErrorCode.offset_out_of_range]
CorruptMessage: type[KafkaError] = _BY_CODE[ErrorCode.corrupt_message]
UnknownTopicOrPartition: type[KafkaError] = _BY_CODE[ErrorCode.unknown_topic_or_partition]
NotLeaderOrFollower: type[KafkaError] = _BY_CODE[ErrorCode.not_leader_or_follower]
RequestTimedOut: type[KafkaError] = _BY_CODE[ErrorCode.request_timed_out]
MessageTooLarge: type[KafkaError] = _BY_CODE[ErrorCode.message_too_large]
InvalidTopicException: type[KafkaError] = _BY_CODE[ErrorCode.invalid_topic_exception]
RecordListTooLarge: type[KafkaError] = _BY_CODE[ErrorCode.record_list_too_large]
NotEnoughReplicas: type[KafkaError] = _BY_CODE[ErrorCode.not_enough_replicas]
NotEnoughReplicasAfterAppend: type[KafkaError] = _BY_CODE[
    ErrorCode.not_enough_replicas_after_append
]
InvalidRequiredAcks: type[KafkaError] = _BY_CODE[ErrorCode.invalid_required_acks]
InvalidTimestamp: type[KafkaError] = _BY_CODE[ErrorCode.invalid_timestamp]
UnsupportedVersion: type[KafkaError] = _BY_CODE[ErrorCode.unsupported_version]
TopicAlreadyExists: type[KafkaError] = _BY_CODE[ErrorCode.topic_already_exists]
InvalidPartitions: type[KafkaError] = _BY_CODE[ErrorCode.invalid_partitions]
InvalidReplicationFactor: type[KafkaError] = _BY_CODE[ErrorCode.invalid_replication_factor]
InvalidConfig: type[KafkaError] = _BY_CODE[ErrorCode.invalid_config]
InvalidRequest: type[KafkaError] = _BY_CODE[ErrorCode.invalid_request]
UnsupportedForMessageFormat: type[KafkaError] = _BY_CODE[ErrorCode.unsupported_for_message_format]
OutOfOrderSequenceNumber: type[KafkaError] = _BY_CODE[ErrorCode.out_of_order_sequence_number]
DuplicateSequenceNumber: type[KafkaError] = _BY_CODE[ErrorCode.duplicate_sequence_number]
InvalidProducerEpoch: type[KafkaError] = _BY_CODE[ErrorCode.invalid_producer_epoch]
UnknownProducerId: type[KafkaError] = _BY_CODE[ErrorCode.unknown_producer_id]
UnsupportedCompressionType: type[KafkaError] = _BY_CODE[ErrorCode.unsupported_compression_type]
PolicyViolation: type[KafkaError] = _BY_CODE[ErrorCode.policy_violation]
InvalidRecord: type[KafkaError] = _BY_CODE[ErrorCode.invalid_record]
KafkaStorageError: type[KafkaError] = _BY_CODE[ErrorCode.kafka_storage_error]
ResourceNotFound: type[KafkaError] = _BY_CODE[ErrorCode.resource_not_found]
