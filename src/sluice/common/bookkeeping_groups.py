"""Bookkeeping groups: consumer groups that only record progress, never consume.

Spark's exactly-once sink (``sluice.spark.sink``) commits, inside each task's
transaction, the next micro-batch id as the "offset" of a group named
``<transactional id prefix>-<task>`` on partition 0 of a topic it writes. That offset is
a batch number, not a position in the partition, so the partition's end offset minus it
is no lag at all: such a group would look behind forever and fire lag alerts.

A group is a bookkeeping group when it has no members and no protocol type (it only
stores offsets) and either its id starts with :data:`SPARK_GROUP_PREFIX` (the sink's
default prefix) or every committed offset it holds carries
:data:`BOOKKEEPING_METADATA` in its metadata string (what the sink writes, whatever the
prefix). The command line, ``sluice top`` and the console hide these groups unless asked
to show them (marked), and the broker exports no lag series for them.
"""

from __future__ import annotations

from collections.abc import Iterable

SPARK_GROUP_PREFIX = "sluice-spark-"
"""The default transactional id prefix of Spark's exactly-once sink, which names its
progress groups."""

BOOKKEEPING_METADATA = "sluice:bookkeeping"
"""The metadata string of an offset that records progress, not a consumer position."""


def is_bookkeeping_group(
    group_id: str,
    *,
    protocol_type: str | None,
    member_count: int,
    offset_metadata: Iterable[str] = (),
) -> bool:
    """Whether ``group_id`` is a bookkeeping group (see the module docstring), from its
    protocol type, how many members it has and the metadata of its committed offsets."""
    if protocol_type or member_count:
        return False
    if group_id.startswith(SPARK_GROUP_PREFIX):
        return True
    metadata = list(offset_metadata)
    return bool(metadata) and all(value == BOOKKEEPING_METADATA for value in metadata)
