"""``sluice consume TOPIC``: print records of a topic's partitions.

Where reading starts, per partition: ``--offset N``; ``--offset -N``, the last N records
(the log start offset if it holds fewer); ``--timestamp T``, the first record whose
timestamp is at or after T (ListOffsets; the end when there is none); else
``--from-beginning`` (the log start offset), which is also the default without
``--follow``; with ``--follow`` the default is the end, so only new records are printed,
like ``tail -f``. With ``--group G`` it reads as a member of consumer group G instead
(:mod:`sluice.cli.consume_group`): from the group's committed offsets, committing what it
printed.

Where it stops: without ``--follow``, at the end each partition had when the command
started; with ``--follow``, never (long-poll fetches wait for new records) until
``--max-messages`` records are printed or Ctrl-C.

Formats (one record per line; ``--format-string``/``-F`` prints each record through a
kcat-style template instead, :mod:`sluice.cli.consume_format`):

- ``text``: the value as it is stored, or ``key<TAB>value`` with ``--print-key``;
  ``null`` for a missing key or value.
- ``json``: an object with topic, partition, offset, timestamp (ms), key, value and
  headers (a list of {key, value}). Keys and values are UTF-8 strings when they decode
  as UTF-8; otherwise they are base64 and the object says so in ``key_encoding`` /
  ``value_encoding`` (``"base64"``).

With ``--decode-schemas``, keys and values written by a schema-aware serializer are
decoded with their schemas from the Schema Registry and printed as JSON
(:mod:`sluice.cli.consume_schemas`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, BinaryIO

import click

from sluice.cli.common import (
    bootstrap_option,
    check_partition,
    open_cluster,
    raise_if_unknown_topic,
    run,
)
from sluice.cli.consume_format import TOKEN_HELP, FormatStringError, compile_format
from sluice.cli.consume_group import consume_in_group
from sluice.cli.consume_schemas import SchemaDecoding
from sluice.cli.groups import parse_datetime_ms
from sluice.cli.schemas import open_registry, registry_failure, registry_options
from sluice.client.admin import NO_OFFSET, Admin, OffsetSpec
from sluice.client.cluster import Cluster
from sluice.client.consumer import ConsumedRecord, fetch_partitions
from sluice.client.errors import ClientError
from sluice.client.schema_registry import SchemaRegistryError
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

Prepare = Callable[[Sequence[ConsumedRecord]], Awaitable[None]]
"""Called with a fetch's records before they are formatted (the schemas they need)."""


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


def _timestamp_ms(
    _context: click.Context, _parameter: click.Parameter, value: str | None
) -> int | None:
    """``--timestamp``: milliseconds since the epoch, or an ISO date and time."""
    if value is None:
        return None
    if value.strip().isdigit():
        return int(value)
    try:
        return parse_datetime_ms(value)
    except ValueError as e:
        raise click.BadParameter(f"{e}, or milliseconds since the epoch") from None


async def _start_positions(
    admin: Admin,
    partitions: list[TopicPartition],
    *,
    offset: int | None,
    timestamp_ms: int | None,
    from_beginning: bool,
    follow: bool,
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """(start offset, end offset now) of each partition."""
    earliest = await admin.list_offsets(partitions, OffsetSpec.EARLIEST)
    latest = await admin.list_offsets(partitions, OffsetSpec.LATEST)
    ends = {tp: latest[tp].offset for tp in partitions}
    if timestamp_ms is not None:
        at_time = await admin.list_offsets(partitions, timestamp_ms)
        return {
            tp: ends[tp] if at_time[tp].offset == NO_OFFSET else at_time[tp].offset
            for tp in partitions
        }, ends
    if offset is not None and offset < 0:
        return {tp: max(earliest[tp].offset, ends[tp] + offset) for tp in partitions}, ends
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
    timestamp_ms: int | None,
    from_beginning: bool,
    follow: bool,
    max_messages: int | None,
    formatter: Callable[[ConsumedRecord, bool], bytes],
    print_key: bool,
    prepare: Prepare | None = None,
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
        admin,
        partitions,
        offset=offset,
        timestamp_ms=timestamp_ms,
        from_beginning=from_beginning,
        follow=follow,
    )
    printed = 0
    loop = asyncio.get_running_loop()
    trouble_since: float | None = None
    retry_wait_s = RETRY_WAIT_S_MIN
    wait_ms = FOLLOW_WAIT_MS if follow else CATCH_UP_WAIT_MS
    # The next fetch is asked for as soon as a response is in, before its records are
    # formatted and written: the broker reads while this process writes (one fetch at a
    # time left the broker idle for about a third of a long read).
    ahead: tuple[dict[TopicPartition, int], asyncio.Task[Any]] | None = None
    try:
        while max_messages is None or printed < max_messages:
            active = _still_to_read(positions, ends, follow)
            if not active:
                return
            try:
                if trouble_since is not None:
                    await cluster.metadata([topic])  # leaders moved, or the broker restarted
                if ahead is not None and ahead[0] == active:
                    fetched = await ahead[1]
                else:
                    fetched = await fetch_partitions(cluster, active, max_wait_ms=wait_ms)
                ahead = None
            except (ClientError, KafkaError) as failure:
                ahead = None
                now = loop.time()
                trouble_since = now if trouble_since is None else trouble_since
                if not (follow and failure.retriable) or now - trouble_since > RECONNECT_TIMEOUT_S:
                    raise
                await asyncio.sleep(retry_wait_s)  # back off before reconnecting; not a sync
                retry_wait_s = min(retry_wait_s * 2, RETRY_WAIT_S_MAX)
                continue
            trouble_since = None
            retry_wait_s = RETRY_WAIT_S_MIN
            for tp, result in fetched.items():
                positions[tp] = result.next_offset
            following = _still_to_read(positions, ends, follow)
            if following:
                ahead = (
                    following,
                    asyncio.create_task(fetch_partitions(cluster, following, max_wait_ms=wait_ms)),
                )
            if prepare is not None:
                await prepare([record for result in fetched.values() for record in result.records])
            lines: list[bytes] = []  # written once per fetch: one write per record cost more
            for tp in sorted(fetched):
                for record in fetched[tp].records:
                    if not follow and record.offset >= ends[tp]:
                        break
                    lines.append(formatter(record, print_key))
                    printed += 1
                    if max_messages is not None and printed >= max_messages:
                        break
                if max_messages is not None and printed >= max_messages:
                    break
            out.write(b"".join(lines))
            out.flush()
    finally:
        if ahead is not None:
            ahead[1].cancel()
            with contextlib.suppress(asyncio.CancelledError, ClientError, KafkaError):
                await ahead[1]


def _still_to_read(
    positions: dict[TopicPartition, int], ends: dict[TopicPartition, int], follow: bool
) -> dict[TopicPartition, int]:
    """The partitions to fetch next, from their positions: all of them while following,
    else those not yet at the end seen at start."""
    return {tp: position for tp, position in positions.items() if follow or position < ends[tp]}


@click.command()
@click.argument("topic")
@click.option(
    "--from-beginning", is_flag=True, help="Start at the oldest record (default without --follow)."
)
@click.option(
    "--offset",
    type=int,
    metavar="N|-N",
    help="Start at offset N in each partition read; -N: at its last N records.",
)
@click.option(
    "--timestamp",
    "timestamp_ms",
    metavar="MS|DATETIME",
    callback=_timestamp_ms,
    help="Start at the first record at or after this time: milliseconds since the epoch, "
    "or e.g. 2024-01-31T09:30:00Z (without a zone: local time).",
)
@click.option(
    "--group",
    "-g",
    "group_id",
    metavar="GROUP",
    help="Read as a member of consumer group GROUP: start at its committed offsets "
    "(else as --from-beginning/--follow say) and commit what is printed.",
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
@click.option(
    "--format-string",
    "-F",
    "format_string",
    metavar="TEMPLATE",
    help=f"Print each record through TEMPLATE, as kcat -f does: {TOKEN_HELP}. "
    "E.g. -F '%p:%o %k=%s\\n'.",
)
@click.option(
    "--decode-schemas",
    is_flag=True,
    help="Decode keys and values written by a schema-aware serializer (Avro, JSON Schema, "
    "Protobuf) with their schemas from the Schema Registry at --registry; print them as JSON.",
)
@registry_options
@bootstrap_option
def consume(
    *,
    topic: str,
    from_beginning: bool,
    offset: int | None,
    timestamp_ms: int | None,
    group_id: str | None,
    partition: int | None,
    max_messages: int | None,
    follow: bool,
    output_format: str,
    print_key: bool,
    format_string: str | None,
    decode_schemas: bool,
    registry: str,
    registry_user: str | None,
    registry_ca_file: str | None,
    bootstrap_server: str,
) -> None:
    """Print records of TOPIC, one per line."""
    starts = [
        name
        for name, given in (
            ("--offset", offset is not None),
            ("--timestamp", timestamp_ms is not None),
            ("--from-beginning", from_beginning),
        )
        if given
    ]
    if len(starts) > 1:
        raise click.UsageError(f"give one of {', '.join(starts)}, not several")
    if group_id is not None:
        chosen = [
            name
            for name, given in (
                ("--offset", offset is not None),
                ("--timestamp", timestamp_ms is not None),
                ("--partition", partition is not None),
            )
            if given
        ]
        if chosen:
            raise click.UsageError(
                f"--group reads the partitions the group assigns from its committed offsets; "
                f"it cannot take {chosen[0]} (move the group's offsets with `sluice groups "
                "reset-offsets`)"
            )
        if not group_id.strip():
            raise click.UsageError("--group needs a group id")
    formatter = _FORMATTERS[output_format]
    if format_string is not None:
        if output_format != "text" or print_key:
            raise click.UsageError("--format-string replaces --format and --print-key; give one")
        try:
            template = compile_format(format_string)
        except FormatStringError as e:
            raise click.BadParameter(str(e), param_hint="'--format-string' / '-F'") from None
        formatter = lambda record, _print_key: template(record)  # noqa: E731
    decoding = (
        SchemaDecoding(open_registry(registry, registry_user, registry_ca_file))
        if decode_schemas
        else None
    )
    prepare: Prepare | None = None
    if decoding is not None:
        prepare = decoding.prepare
        if output_format == "json" and format_string is None:
            formatter = decoding.json_formatter(record_json)
        else:
            formatter = decoding.text_formatter(formatter)

    async def consume_topic() -> None:
        try:
            await consume_records()
        except SchemaRegistryError as e:
            raise registry_failure(e) from None
        finally:
            if decoding is not None:
                await decoding.registry.close()

    async def consume_records() -> None:
        if group_id is not None:
            await consume_in_group(
                sys.stdout.buffer,
                bootstrap_server,
                topic,
                group_id,
                from_beginning=from_beginning,
                follow=follow,
                max_messages=max_messages,
                write=lambda record: formatter(record, print_key),
                prepare=prepare,
            )
            return
        async with open_cluster(bootstrap_server) as cluster:
            await _consume(
                sys.stdout.buffer,
                cluster,
                topic,
                partition=partition,
                offset=offset,
                timestamp_ms=timestamp_ms,
                from_beginning=from_beginning,
                follow=follow,
                max_messages=max_messages,
                formatter=formatter,
                print_key=print_key,
                prepare=prepare,
            )

    try:
        run(consume_topic)
    finally:
        sys.stdout.flush()
