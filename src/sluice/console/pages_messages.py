"""The message browser: a page of a topic's records, from every partition or one, from
the newest, an offset or a timestamp, optionally filtered (a substring or a regular
expression over keys and values: :mod:`sluice.console.message_filter`); keys, values
and headers shown as text, JSON or hex, and keys and values a schema-aware serializer
wrote decoded with their schema from the Schema Registry
(:mod:`sluice.console.schema_decoding`).

A page is bounded: at most ``MESSAGES_LIMIT_MAX`` records shown, at most
``SCAN_RECORDS_MAX`` records read in ``FETCH_ROUNDS_MAX`` fetches (a filter that
matches little stops there, and the page says how far it got and links on from
there). The next page starts each partition where this one left it (``positions``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from sluice.client.admin import NO_OFFSET, Admin, OffsetSpec
from sluice.client.cluster import NO_LEADER
from sluice.client.consumer import ConsumedRecord, fetch_partitions
from sluice.common.ids import TopicPartition
from sluice.console import formatting
from sluice.console.keys import CLIENTS_KEY
from sluice.console.message_filter import MODES, WHERE, FilterError, RecordFilter, merge_page
from sluice.console.rendering import int_query, render
from sluice.console.schema_decoding import PageDecoder

MESSAGES_LIMIT_DEFAULT = 20
MESSAGES_LIMIT_MAX = 500
"""Records shown on one page."""
FETCH_ROUNDS_MAX = 20
"""Fetches one page of the message browser may take (batches can be small)."""
SCAN_RECORDS_MAX = 10_000
"""Records one page may read looking for matches of a filter."""
NEWEST_SCAN_RECORDS = 1_000
"""With a filter and no start given, how far back from each partition's end the search
starts."""
POSITIONS_MAX_CHARS = 64 * 1024
"""Longest ``positions`` parameter read (partition:offset pairs)."""


def _positions(text: str, partitions: Sequence[int]) -> dict[int, int]:
    """``0:12,3:40`` as {partition: offset}; only partitions of the topic."""
    if len(text) > POSITIONS_MAX_CHARS:
        raise web.HTTPBadRequest(text=f"positions is longer than {POSITIONS_MAX_CHARS} characters")
    found: dict[int, int] = {}
    for item in text.split(","):
        partition, separator, offset = item.partition(":")
        try:
            index, position = int(partition), int(offset)
        except ValueError:
            index, position = -1, -1
        if not separator or index not in partitions or position < 0:
            raise web.HTTPBadRequest(
                text=f"positions must be partition:offset pairs of this topic, not {item!r}"
            )
        found[index] = position
    return found


async def messages_page(request: web.Request) -> web.Response:
    admin = request[CLIENTS_KEY].admin
    name = request.match_info["name"]
    topic = await admin.describe_topic(name)
    partition_text = request.query.get("partition", "all").strip() or "all"
    if partition_text == "all":
        selected = list(topic.partitions)
        partition: int | None = None
    else:
        partition = int_query(request, "partition", 0)
        assert partition is not None
        selected = [topic.partition(partition)]  # an unknown partition is a 404
    limit = int_query(request, "limit", MESSAGES_LIMIT_DEFAULT)
    assert limit is not None
    limit = min(max(limit, 1), MESSAGES_LIMIT_MAX)
    value_format = formatting.parse_format(request.query.get("format"))
    filter_text = request.query.get("q", "")
    mode = request.query.get("match", "substring")
    where = request.query.get("search", "both")
    try:
        record_filter = RecordFilter.parse(filter_text, mode, where)
    except FilterError as e:
        raise web.HTTPBadRequest(text=str(e)) from None
    notices: list[str] = []
    offline = [p.partition for p in selected if p.leader_id == NO_LEADER]
    if offline:
        listed = ", ".join(map(str, offline))
        notices.append(f"Partition(s) {listed} offline (no leader): not read.")
    readable = [p.topic_partition for p in selected if p.leader_id != NO_LEADER]
    start_listed, end_listed = (
        await asyncio.gather(
            admin.list_offsets(readable, OffsetSpec.EARLIEST),
            admin.list_offsets(readable, OffsetSpec.LATEST),
        )
        if readable
        else ({}, {})
    )
    starts = {tp: start_listed[tp].offset for tp in readable}
    ends = {tp: end_listed[tp].offset for tp in readable}
    timestamp_text = request.query.get("timestamp", "").strip()
    offset = int_query(request, "offset", None)
    positions_text = request.query.get("positions", "").strip()
    newest = False
    if positions_text:
        given = _positions(positions_text, [p.partition for p in topic.partitions])
        positions = {tp: given.get(tp.partition, ends[tp]) for tp in readable}
    elif timestamp_text:
        try:
            timestamp_ms = formatting.parse_timestamp(timestamp_text)
        except ValueError:
            raise web.HTTPBadRequest(
                text=f"timestamp {timestamp_text!r} is neither milliseconds nor ISO 8601"
            ) from None
        found = await admin.list_offsets(readable, timestamp_ms) if readable else {}
        positions = {
            tp: ends[tp] if found[tp].offset == NO_OFFSET else found[tp].offset for tp in readable
        }
        if readable and all(found[tp].offset == NO_OFFSET for tp in readable):
            notices.append(f"No record at or after {formatting.format_timestamp_ms(timestamp_ms)}.")
    elif offset is not None:
        positions = {tp: offset for tp in readable}
    else:
        newest = True
        back = limit if record_filter is None else max(limit, NEWEST_SCAN_RECORDS)
        positions = {tp: max(starts[tp], ends[tp] - back) for tp in readable}
        if record_filter is not None:
            notices.append(
                f"Searched the last {back} records of each partition: give an offset or a "
                "timestamp to search earlier."
            )
    for tp, position in positions.items():
        if not starts[tp] <= position <= ends[tp]:
            clamped = starts[tp] if position < starts[tp] else ends[tp]
            notices.append(
                f"Offset {position} is outside partition {tp.partition} "
                f"({starts[tp]}–{ends[tp]}); showing from {clamped}."
            )
            positions[tp] = clamped
    matched, scanned_to, scanned = await _read(
        admin, positions, ends, limit if not newest else None, record_filter
    )
    stopped_early = any(scanned_to[tp] < ends[tp] for tp in scanned_to)
    found_count = sum(len(records) for records in matched.values())
    if record_filter is not None and stopped_early and found_count < limit:
        notices.append(
            f"Read {scanned} records without finding {limit} matches; the next page searches on."
        )
    records, next_positions = merge_page(matched, scanned_to, limit, newest=newest)
    more = any(next_positions[tp] < ends[tp] for tp in next_positions)
    start = offset if offset is not None else None
    decoder = PageDecoder(request[CLIENTS_KEY].registry, name)
    shown = [await _shown(record, value_format, decoder) for record in records]
    return render(
        request,
        "messages.html",
        topic=topic,
        partition=partition,
        offset=start,
        limit=limit,
        value_format=value_format,
        formats=formatting.FORMATS,
        timestamp=timestamp_text,
        filter_text=filter_text,
        mode=mode,
        where=where,
        modes=MODES,
        wheres=WHERE,
        query_tail=_query_tail(filter_text, mode, where),
        starts={tp.partition: o for tp, o in starts.items()},
        ends={tp.partition: o for tp, o in ends.items()},
        total=sum(ends[tp] - starts[tp] for tp in readable),
        notices=notices,
        records=shown,
        next_offset=(
            next_positions[selected[0].topic_partition]
            if partition is not None and more and readable
            else None
        ),
        next_positions=(
            ",".join(f"{tp.partition}:{o}" for tp, o in sorted(next_positions.items()))
            if partition is None and more
            else None
        ),
        previous_offset=(
            max(starts[readable[0]], positions[readable[0]] - limit)
            if partition is not None
            and readable
            and record_filter is None
            and positions[readable[0]] > starts[readable[0]]
            else None
        ),
    )


def _query_tail(filter_text: str, mode: str, where: str) -> str:
    """The filter's part of the pager's links ("" without one)."""
    if not filter_text:
        return ""
    return "&" + urlencode({"q": filter_text, "match": mode, "search": where})


async def _read(
    admin: Admin,
    positions: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    limit: int | None,
    record_filter: RecordFilter | None,
) -> tuple[dict[TopicPartition, list[ConsumedRecord]], dict[TopicPartition, int], int]:
    """Each partition's records (matching the filter) from its position, stopping at its
    end or at ``limit`` matches (None: read to the end), the offset each one's reading
    stopped at, and how many records were read; no long polls (the page answers at
    once), at most ``SCAN_RECORDS_MAX`` records in ``FETCH_ROUNDS_MAX`` fetches."""
    matched: dict[TopicPartition, list[ConsumedRecord]] = {tp: [] for tp in positions}
    reached = dict(positions)
    scanned = 0
    for _ in range(FETCH_ROUNDS_MAX):
        wanted = {
            tp: position
            for tp, position in reached.items()
            if position < ends[tp] and (limit is None or len(matched[tp]) < limit)
        }
        if not wanted or scanned >= SCAN_RECORDS_MAX:
            break
        fetched = await fetch_partitions(admin.cluster, wanted, max_wait_ms=0)
        moved = False
        for tp, answer in fetched.items():
            records = [r for r in answer.records if reached[tp] <= r.offset < ends[tp]]
            scanned += len(records)
            # A regular expression can be slow: matched off the loop, other pages go on.
            kept = (
                records
                if record_filter is None
                else await asyncio.to_thread(_matching, record_filter, records)
            )
            matched[tp].extend(kept)
            next_offset = min(answer.next_offset, ends[tp])
            if next_offset > reached[tp]:
                reached[tp] = next_offset
                moved = True
        if not moved:
            break
    if limit is not None:
        for tp, records in matched.items():
            if len(records) > limit:
                # Read past the page: the next one starts at the first record not kept.
                reached[tp] = records[limit].offset
                del records[limit:]
    return matched, reached, scanned


def _matching(record_filter: RecordFilter, records: list[ConsumedRecord]) -> list[ConsumedRecord]:
    return [record for record in records if record_filter.matches(record)]


async def _shown(
    record: ConsumedRecord, value_format: formatting.ValueFormat, decoder: PageDecoder
) -> dict[str, Any]:
    key_format: formatting.ValueFormat = "text" if value_format == "json" else value_format
    return {
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": formatting.format_timestamp_ms(record.timestamp_ms),
        "timestamp_ms": record.timestamp_ms,
        "timestamp_type": "LogAppendTime" if record.timestamp_type else "CreateTime",
        "key": await decoder.show(record.key, "key", key_format),
        "value": await decoder.show(record.value, "value", value_format),
        "headers": [
            (name, formatting.format_bytes(value, key_format)) for name, value in record.headers
        ],
    }
