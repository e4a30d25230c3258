"""``sluice consume TOPIC``: print records of a topic's partitions.

Where reading starts, per partition: ``--offset N``; else ``--from-beginning`` (the log
start offset), which is also the default without ``--follow``; with ``--follow`` the
default is the end, so only new records are printed, like ``tail -f``.

Where it stops: without ``--follow``, at the end each partition had when the command
started; with ``--follow``, never (long-poll fetches wait for new records) until
``--max-messages`` records are printed or Ctrl-C.

Formats (one record per line):

- ``text``: the value as it is stored, or ``key<TAB>value`` with ``--print-key``;
  ``null`` for a missing key or value.
- ``json``: an object with topic, partition, offset, timestamp (ms), key, value and
  headers (a list of {key, value}). Keys and values are UTF-8 strings when they decode
  as UTF-8; otherwise they are base64 and the object says so in ``key_encoding`` /
  ``value_encoding`` (``"base64"``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

import click

from sluice.cli.common import (
    bootstrap_option,
    check_partition,
    open_cluster,
    raise_if_unknown_topic,
    run,
)
from sluice.client.admin import Admin, OffsetSpec
from sluice.client.cluster import Cluster
from sluice.client.consumer import ConsumedRecord, fetch_partitions
from sluice.client.errors import ClientError
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition

FOLLOW_WAIT_MS = 1000
"""How long each long-poll fetch waits for new records while following."""

CATCH_UP_WAIT_MS = 100
"""Fetch wait when records are known to be there (reading up to a fixed end)."""

RECONNECT_TIMEOUT_S = 30.0
"""While following, how long to keep retrying after the broker goes away (a restart)."""

RETRY_WAIT_S_MIN = 0.1
RETRY_WAIT_S_MAX = 2.0
"""Backoff bounds between reconnection attempts while following."""

NULL_TEXT = b"null"


def _text_line(record: ConsumedRecord, print_key: bool) -> bytes:
    value = NULL_TEXT if record.value is None else record.value
    if not print_key:
        return value + b"\n"
    key = NULL_TEXT if record.key is None else record.key
    return key + b"\t" + value + b"\n"


def _encode_bytes(into: dict[str, Any], name: str, data: bytes | None) -> None:
    if data is None:
        into[name] = None
        return
    try:
        into[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        into[name] = base64.b64encode(data).decode("ascii")
        into[f"{name}_encoding"] = "base64"


def record_json(record: ConsumedRecord) -> dict[str, Any]:
    """The JSON object printed for a record (see the module docstring)."""
    document: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp_ms,
    }
    _encode_bytes(document, "key", record.key)
    _encode_bytes(document, "value", record.value)
    headers = []
    for header_key, header_value in record.headers:
        header: dict[str, Any] = {"key": header_key}
        _encode_bytes(header, "value", header_value)
        headers.append(header)
    document["headers"] = headers
    return document


def _json_line(record: ConsumedRecord, _print_key: bool) -> bytes:
    return json.dumps(record_json(record), ensure_ascii=False).encode() + b"\n"


_FORMATTERS: dict[str, Callable[[ConsumedRecord, bool], bytes]] = {
    "text": _text_line,
    "json": _json_line,
}


async def _start_positions(
    admin: Admin,
    partitions: list[TopicPartition],
    *,
    offset: int | None,
    from_beginning: bool,
    follow: bool,
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """(start offset, end offset now) of each partition."""
    earliest = await admin.list_offsets(partitions, OffsetSpec.EARLIEST)
    latest = await admin.list_offsets(partitions, OffsetSpec.LATEST)
    ends = {tp: latest[tp].offset for tp in partitions}
    if offset is not None:
        for tp in partitions:
            low = earliest[tp].offset
            if not low <= offset <= ends[tp]:
                held = f"offsets {low}-{ends[tp] - 1}" if ends[tp] > low else "no records"
                raise click.ClickException(
                    f"--offset {offset} is outside partition {tp}, which holds {held} "
                    f"(next offset {ends[tp]})"
                )
        return dict.fromkeys(partitions, offset), ends
    if from_beginning or not follow:
        return {tp: earliest[tp].offset for tp in partitions}, ends
    return dict(ends), ends


async def _consume(
    out: BinaryIO,
    cluster: Cluster,
    topic: str,
    *,
    partition: int | None,
    offset: int | None,
    from_beginning: bool,
    follow: bool,
    max_messages: int | None,
    formatter: Callable[[ConsumedRecord, bool], bytes],
    print_key: bool,
) -> None:
    admin = Admin(cluster)
    try:
        metadata = await admin.describe_topic(topic)
    except KafkaError as e:
        raise_if_unknown_topic(e, topic)
        raise
    check_partition(metadata, partition)
    partitions = [
        p.topic_partition
        for p in metadata.partitions
        if partition is None or p.partition == partition
    ]
    positions, ends = await _start_positions(
        admin, partitions, offset=offset, from_beginning=from_beginning, follow=follow
    )
    printed = 0
    loop = asyncio.get_running_loop()
    trouble_since: float | None = None
    retry_wait_s = RETRY_WAIT_S_MIN
    while max_messages is None or printed < max_messages:
        active = {
            tp: position for tp, position in positions.items() if follow or position < ends[tp]
        }
        if not active:
            return
        try:
            if trouble_since is not None:
                await cluster.metadata([topic])  # leaders may have moved, or the broker restarted
            fetched = await fetch_partitions(
                cluster, active, max_wait_ms=FOLLOW_WAIT_MS if follow else CATCH_UP_WAIT_MS
            )
        except (ClientError, KafkaError) as failure:
            now = loop.time()
            trouble_since = now if trouble_since is None else trouble_since
            if not (follow and failure.retriable) or now - trouble_since > RECONNECT_TIMEOUT_S:
                raise
            await asyncio.sleep(retry_wait_s)  # back off before reconnecting; not a sync
            retry_wait_s = min(retry_wait_s * 2, RETRY_WAIT_S_MAX)
            continue
        trouble_since = None
        retry_wait_s = RETRY_WAIT_S_MIN
        lines: list[bytes] = []  # written once per fetch: one write per record cost more
        for tp in sorted(fetched):
            result = fetched[tp]
            for record in result.records:
                if not follow and record.offset >= ends[tp]:
                    break
                lines.append(formatter(record, print_key))
                printed += 1
                if max_messages is not None and printed >= max_messages:
                    break
            positions[tp] = result.next_offset
            if max_messages is not None and printed >= max_messages:
                break
        out.write(b"".join(lines))
        out.flush()


@click.command()
@click.argument("topic")
@click.option(
    "--from-beginning", is_flag=True, help="Start at the oldest record (default without --follow)."
)
@click.option(
    "--offset", type=click.IntRange(min=0), help="Start at this offset (in each partition read)."
)
@click.option(
    "--partition", type=click.IntRange(min=0), help="Read only this partition (default: all)."
)
@click.option(
    "--max-messages", type=click.IntRange(min=1), help="Stop after printing this many records."
)
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Keep waiting for new records (starts at the end unless told otherwise).",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(list(_FORMATTERS)),
    default="text",
    show_default=True,
    help="text: values (see --print-key); json: one JSON object per record.",
)
@click.option("--print-key", is_flag=True, help="text format: print key<TAB>value.")
@bootstrap_option
def consume(
    *,
    topic: str,
    from_beginning: bool,
    offset: int | None,
    partition: int | None,
    max_messages: int | None,
    follow: bool,
    output_format: str,
    print_key: bool,
    bootstrap_server: str,
) -> None:
    """Print records of TOPIC, one per line."""
    if offset is not None and from_beginning:
        raise click.UsageError("give --offset or --from-beginning, not both")

    async def consume_topic() -> None:
        async with open_cluster(bootstrap_server) as cluster:
            await _consume(
                sys.stdout.buffer,
                cluster,
                topic,
                partition=partition,
                offset=offset,
                from_beginning=from_beginning,
                follow=follow,
                max_messages=max_messages,
                formatter=_FORMATTERS[output_format],
                print_key=print_key,
            )

    try:
        run(consume_topic)
    finally:
        sys.stdout.flush()
