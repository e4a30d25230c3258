"""``protocol.messages.make``: fields the requested version lacks are dropped (handlers
are written once for every version), but a name that no version of the class has is a
misspelling and is refused, since it would otherwise vanish from the wire."""

from __future__ import annotations

import dataclasses
import datetime

import pytest
from kio.schema.errors import ErrorCode

from sluice.protocol.messages import UnknownFieldError, make, response_module
from sluice.protocol.versions import ApiKey


def test_a_field_of_a_later_version_is_dropped_from_an_earlier_one() -> None:
    v0 = response_module(ApiKey.METADATA, 0)
    topic = make(
        v0.MetadataResponseTopic,
        error_code=0,
        name="orders",
        partitions=(),
        is_internal=False,  # v1+
        topic_id=None,  # v10+
        topic_authorized_operations=0,  # v8+
    )
    assert topic.name == "orders"
    assert "is_internal" not in {f.name for f in dataclasses.fields(topic)}


def test_a_name_no_version_has_is_refused() -> None:
    v8 = response_module(ApiKey.METADATA, 8)
    with pytest.raises(UnknownFieldError, match="'leader_epcoh'") as refused:
        make(
            v8.MetadataResponsePartition,
            error_code=0,
            partition_index=0,
            leader_id=0,
            leader_epcoh=3,
            replica_nodes=(0,),
            isr_nodes=(0,),
        )
    assert "MetadataResponsePartition" in str(refused.value)


def test_the_check_knows_every_version_of_a_nested_class() -> None:
    """A field that only the newest versions have is not a misspelling in the oldest."""
    oldest = response_module(ApiKey.DESCRIBE_LOG_DIRS, 1)
    result = make(
        oldest.DescribeLogDirsResult,
        error_code=0,
        log_dir="/data",
        topics=(),
        total_bytes=1,  # v4+
        usable_bytes=1,  # v4+
    )
    assert result.log_dir == "/data"
    with pytest.raises(UnknownFieldError):
        make(
            oldest.DescribeLogDirsResult,
            error_code=0,
            log_dir="/data",
            topics=(),
            is_cordonned=False,
        )


def test_plain_values_are_converted_to_the_wire_types_and_wire_values_kept() -> None:
    v8 = response_module(ApiKey.PRODUCE, 8)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    partition = make(
        v8.PartitionProduceResponse,
        index=0,
        error_code=6,
        base_offset=5,
        log_append_time=1_000,
        record_errors=(),
    )
    assert partition.error_code is ErrorCode(6)
    assert partition.log_append_time == epoch + datetime.timedelta(seconds=1)
    unset = make(
        v8.PartitionProduceResponse,
        index=0,
        error_code=0,
        base_offset=5,
        log_append_time=-1,
        record_errors=(),
    )
    assert unset.log_append_time is None  # a negative timestamp is none
    at = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    kept = make(
        v8.PartitionProduceResponse,
        index=0,
        error_code=ErrorCode.none,
        base_offset=5,
        log_append_time=at,
        record_errors=(),
    )
    assert kept.error_code is ErrorCode.none
    assert kept.log_append_time is at
    response = make(v8.ProduceResponse, responses=(), throttle_time=250)
    assert response.throttle_time == datetime.timedelta(milliseconds=250)
    two_seconds = datetime.timedelta(seconds=2)
    assert make(v8.ProduceResponse, responses=(), throttle_time=two_seconds).throttle_time is (
        two_seconds
    )


def test_a_later_versions_field_is_dropped_and_a_misspelling_refused_on_every_call() -> None:
    # The per-class plan is built on the first call; later calls must check the same.
    v0 = response_module(ApiKey.METADATA, 0)
    for _ in range(3):
        topic = make(
            v0.MetadataResponseTopic, error_code=0, name="t", partitions=(), is_internal=True
        )
        assert topic.name == "t"
        with pytest.raises(UnknownFieldError, match="'nmae'"):
            make(v0.MetadataResponseTopic, error_code=0, nmae="t", partitions=())


def test_a_missing_required_field_is_still_kios_type_error() -> None:
    v0 = response_module(ApiKey.METADATA, 0)
    with pytest.raises(TypeError, match="partitions"):
        make(v0.MetadataResponseTopic, error_code=0, name="t")
