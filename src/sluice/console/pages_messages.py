"""The message browser: a page of one partition's records from an offset or a
timestamp, keys, values and headers shown as text, JSON or hex."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from sluice.client.admin import NO_OFFSET, Admin, OffsetSpec
from sluice.client.consumer import ConsumedRecord, fetch_partitions
from sluice.common.ids import TopicPartition
from sluice.console import formatting
from sluice.console.keys import CLIENTS_KEY
from sluice.console.rendering import int_query, render

MESSAGES_LIMIT_DEFAULT = 20
MESSAGES_LIMIT_MAX = 500
FETCH_ROUNDS_MAX = 20
"""Fetches one page of the message browser may take (batches can be small)."""


async def messages_page(request: web.Request) -> web.Response:
    admin = request[CLIENTS_KEY].admin
    name = request.match_info["name"]
    topic = await admin.describe_topic(name)
    partition = int_query(request, "partition", 0)
    assert partition is not None
    topic.partition(partition)  # an unknown partition is a 404
    limit = int_query(request, "limit", MESSAGES_LIMIT_DEFAULT)
    assert limit is not None
    limit = min(max(limit, 1), MESSAGES_LIMIT_MAX)
    value_format = formatting.parse_format(request.query.get("format"))
    topic_partition = TopicPartition(name, partition)
    start_listed, end_listed = await asyncio.gather(
        admin.list_offsets([topic_partition], OffsetSpec.EARLIEST),
        admin.list_offsets([topic_partition], OffsetSpec.LATEST),
    )
    start = start_listed[topic_partition].offset
    end = end_listed[topic_partition].offset
    notice = ""
    timestamp_text = request.query.get("timestamp", "").strip()
    offset = int_query(request, "offset", None)
    if timestamp_text:
        try:
            timestamp_ms = formatting.parse_timestamp(timestamp_text)
        except ValueError:
            raise web.HTTPBadRequest(
                text=f"timestamp {timestamp_text!r} is neither milliseconds nor ISO 8601"
            ) from None
        found = (await admin.list_offsets([topic_partition], timestamp_ms))[topic_partition]
        if found.offset == NO_OFFSET:
            offset = end
            notice = f"No record at or after {formatting.format_timestamp_ms(timestamp_ms)}."
        else:
            offset = found.offset
    if offset is None:
        offset = max(start, end - limit)
    if offset < start or offset > end:
        notice = f"Offset {offset} is outside the partition ({start}–{end}); showing from {start}."
        offset = start if offset < start else end
    records = await _read(admin, topic_partition, offset, end, limit)
    next_offset = records[-1].offset + 1 if records else offset
    return render(
        request,
        "messages.html",
        topic=topic,
        partition=partition,
        offset=offset,
        limit=limit,
        value_format=value_format,
        formats=formatting.FORMATS,
        timestamp=timestamp_text,
        start=start,
        end=end,
        notice=notice,
        records=[_shown(record, value_format) for record in records],
        next_offset=next_offset if next_offset < end else None,
        previous_offset=max(start, offset - limit) if offset > start else None,
    )


async def _read(
    admin: Admin, topic_partition: TopicPartition, offset: int, end: int, limit: int
) -> list[ConsumedRecord]:
    """Up to ``limit`` records from ``offset``, stopping at ``end`` (no long polls: the
    page answers at once)."""
    records: list[ConsumedRecord] = []
    position = offset
    for _ in range(FETCH_ROUNDS_MAX):
        if position >= end or len(records) >= limit:
            break
        fetched = (
            await fetch_partitions(admin.cluster, {topic_partition: position}, max_wait_ms=0)
        )[topic_partition]
        records.extend(fetched.records)
        if fetched.next_offset <= position:
            break
        position = fetched.next_offset
    return records[:limit]


def _shown(record: ConsumedRecord, value_format: formatting.ValueFormat) -> dict[str, Any]:
    return {
        "offset": record.offset,
        "timestamp": formatting.format_timestamp_ms(record.timestamp_ms),
        "timestamp_ms": record.timestamp_ms,
        "timestamp_type": "LogAppendTime" if record.timestamp_type else "CreateTime",
        "key": formatting.format_bytes(
            record.key, "text" if value_format == "json" else value_format
        ),
        "value": formatting.format_bytes(record.value, value_format),
        "headers": [
            (
                name,
                formatting.format_bytes(value, "text" if value_format == "json" else value_format),
            )
            for name, value in record.headers
        ],
    }
