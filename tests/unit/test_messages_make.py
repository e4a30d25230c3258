"""``protocol.messages.make``: fields the requested version lacks are dropped (handlers
are written once for every version), but a name that no version of the class has is a
misspelling and is refused, since it would otherwise vanish from the wire."""

from __future__ import annotations

import dataclasses

import pytest

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
