"""Tag-filtered views: read-only topics showing the records of a source topic that match
a filter, at the source's offsets.

A view is a topic created with the configs ``sluice.view.source`` and
``sluice.view.filter`` (:mod:`sluice.features.view_filter`). It is stored with no
partitions of its own and no logs: requests name it like any topic, and the broker
answers from its source (:meth:`TopicManager.get` gives a view the source's partitions,
leaders and epochs; Fetch, ListOffsets and OffsetForLeaderEpoch read the source's
partition). Offsets are the source's, with gaps where records do not match, so commits,
lag, seeks and offsets-for-times mean the same on both. Produce to a view is refused.

:func:`filter_records` turns what the source's log returned into what a consumer of the
view gets, batch by batch: a batch with no matching record is left out, one whose every
record matches is sent as it is stored (zero copy), one with some is rebuilt with only
those (the same offsets, ending at its last matching record). Control batches
(transaction markers) are kept. Gaps between batches are fine (compaction leaves them
too), except at the end of a response: there a control batch of Sluice's own type stands
in for the records left out, its one record at their last offset. Every client moves its
position past a control batch's records; a response ending with a gap (or with a batch
whose last records were left out) would leave librdkafka fetching the same range again
and again, and kafkajs mishandles a batch emptied of records.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from sluice.cluster.model import TopicMetadata
from sluice.common import errors
from sluice.features.view_filter import FilterError, ViewFilter, parse_filter
from sluice.protocol.fetch_response import RecordBytes, RecordsSlice
from sluice.protocol.records.batch import iter_batches
from sluice.protocol.records.builder import (
    CONTROL_RECORD_VERSION,
    RecordInput,
    build_batch,
    decode_batch,
    rebuild_batch,
)
from sluice.protocol.records.tags import TAG_HEADER
from sluice.storage.segment import FileSlice
from sluice.storage.tag_summary import Combinations, TagSummaries

VIEW_SOURCE: Final = "sluice.view.source"
VIEW_FILTER: Final = "sluice.view.filter"
SKIPPED_CONTROL_TYPE: Final = 0x534D
"""Sluice's control record type for a range a view's filter skipped ("SM")."""


@dataclass(frozen=True)
class View:
    name: str
    source: str
    filter: ViewFilter


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> ViewFilter:
    return parse_filter(text)


def view_of(topic: TopicMetadata) -> View | None:
    """The view a topic is, or None for an ordinary topic."""
    source = topic.configs.get(VIEW_SOURCE)
    if not source:
        return None
    return View(topic.name, source, _parsed(topic.configs.get(VIEW_FILTER) or ""))


def new_view(
    name: str,
    partition_count: int,
    configs: Mapping[str, str],
    topics: Mapping[str, TopicMetadata],
) -> TopicMetadata:
    """Check a CreateTopics of a view and make its topic record (no partitions of its
    own). Raises InvalidConfig with a message saying what is wrong."""
    source_name = configs[VIEW_SOURCE]
    text = configs.get(VIEW_FILTER)
    if not text:
        raise errors.InvalidConfig(
            f"view {name!r} needs {VIEW_FILTER}, for example: {VIEW_FILTER}=tag = 'red'"
        )
    try:
        _parsed(text)
    except FilterError as e:
        raise errors.InvalidConfig(f"{VIEW_FILTER} of view {name!r}: {e}") from None
    source = topics.get(source_name)
    if source is None:
        raise errors.InvalidConfig(
            f"{VIEW_SOURCE} of view {name!r}: topic {source_name!r} does not exist"
        )
    if view_of(source) is not None:
        raise errors.InvalidConfig(
            f"{VIEW_SOURCE} of view {name!r}: {source_name!r} is itself a view; "
            f"make a view of its source {source.configs[VIEW_SOURCE]!r}"
        )
    if source_name.startswith("__"):
        raise errors.InvalidConfig(f"{VIEW_SOURCE}: {source_name!r} is an internal topic")
    if partition_count not in (-1, source.partition_count):
        raise errors.InvalidPartitions(
            f"view {name!r} has the {source.partition_count} partition(s) of {source_name!r}; "
            f"leave the partition count out (-1) or give {source.partition_count}"
        )
    return TopicMetadata(name, uuid.uuid4(), {}, dict(configs))


def check_view_configs(topic: TopicMetadata, configs: Mapping[str, str]) -> None:
    """A config change must not make a topic a view, or a view another topic's (or an
    ordinary topic); a view's filter may change, to one that parses."""
    before, after = topic.configs.get(VIEW_SOURCE) or "", configs.get(VIEW_SOURCE) or ""
    if before != after:
        raise errors.InvalidConfig(
            f"{VIEW_SOURCE} is set when a view is created and cannot change "
            f"({topic.name!r}: {before or 'not a view'!r})"
        )
    text = configs.get(VIEW_FILTER) or ""
    if not before:
        if text:
            raise errors.InvalidConfig(f"{VIEW_FILTER} is for views; {topic.name!r} is not one")
        return
    try:
        _parsed(text)
    except FilterError as e:
        raise errors.InvalidConfig(f"{VIEW_FILTER} of view {topic.name!r}: {e}") from None


def with_source_partitions(view: TopicMetadata, source: TopicMetadata | None) -> TopicMetadata:
    """The view as requests see it: the partitions (leaders, epochs) of its source."""
    return TopicMetadata(
        view.name,
        view.topic_id,
        {} if source is None else source.partitions,
        view.configs,
        view.version,
    )


# -- filtering fetched batches --------------------------------------------------------


def filter_records(
    slices: Sequence[RecordsSlice],
    view_filter: ViewFilter,
    summaries: TagSummaries | None = None,
) -> list[RecordsSlice]:
    """What a view's consumer gets of the source's batches in ``slices``. With the
    partition's tag ``summaries``, a filter over tags alone decides most batches
    without decoding them."""
    parts: list[RecordsSlice] = []
    skipped: tuple[int, int, int] | None = None
    """(first offset, last offset, timestamp) of the records left out since the last
    one sent: a gap between batches is fine anywhere but at the end of a response."""
    tags_only = summaries is not None and view_filter.headers <= {TAG_HEADER}
    for part in slices:
        assert isinstance(part, FileSlice)
        data = part.read()
        batches = list(iter_batches(data))
        known = (
            summaries.get(h.base_offset for _, h in batches if not h.is_control)
            if tags_only and summaries is not None
            else {}
        )
        for position, header in batches:
            whole = FileSlice(part.file, part.position + position, header.size_bytes)
            if header.is_control:
                parts.append(whole)
                skipped = None
                continue
            decided = _decide(known.get(header.base_offset), view_filter)
            if decided is True:
                parts.append(whole)
                skipped = None
                continue
            if decided is False:
                first = header.base_offset if skipped is None else skipped[0]
                skipped = (first, header.last_offset, header.max_timestamp)
                continue
            batch = data[position : position + header.size_bytes]
            records = decode_batch(batch).records
            matching = [r for r in records if view_filter.matches_record(r.headers)]
            if not matching:
                first = header.base_offset if skipped is None else skipped[0]
                skipped = (first, header.last_offset, header.max_timestamp)
                continue
            skipped = None
            if len(matching) == len(records):
                parts.append(whole)
                continue
            last = matching[-1].offset
            parts.append(RecordBytes(rebuild_batch(header, matching, last_offset=last)))
            if last < header.last_offset:
                skipped = (last + 1, header.last_offset, header.max_timestamp)
    if skipped is not None:
        parts.append(RecordBytes(_skipped_range(*skipped)))
    return parts


def _decide(summary: Combinations | None, view_filter: ViewFilter) -> bool | None:
    """From a batch's tag summary: True when every record matches, False when none
    does, None when it must be decoded to tell (or has no summary)."""
    if not summary:
        return None
    outcomes = {view_filter.matches({TAG_HEADER: tags} if tags else {}) for tags in summary}
    return outcomes.pop() if len(outcomes) == 1 else None


def _skipped_range(first: int, last: int, timestamp_ms: int) -> bytes:
    """A control batch over [first, last] whose one record sits at ``last``."""
    key = CONTROL_RECORD_VERSION.to_bytes(2, "big") + SKIPPED_CONTROL_TYPE.to_bytes(2, "big")
    return build_batch(
        [RecordInput(key=key, value=b"", timestamp_ms=timestamp_ms)],
        base_offset=first,
        control=True,
        offset_deltas=[last - first],
        base_timestamp_ms=timestamp_ms,
    )
