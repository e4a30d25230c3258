"""``sluice groups``: list, describe and delete consumer groups, and reset or delete their
committed offsets, like Kafka's ``kafka-consumer-groups``.

``reset-offsets`` only prints its plan unless given ``--execute``. Offsets can be changed
only while the group is inactive (Empty, or Dead: never seen), because the consumers of
an active group would overwrite them with their next commit; the command checks the
state first, and the coordinator refuses the commit too if a consumer joins meanwhile.

Where a reset goes, per partition (always inside [log start offset, log end offset]):

- ``--to-earliest``: the log start offset; ``--to-latest``: the log end offset;
- ``--to-datetime T``: the first record with a timestamp at or after T, or the log end
  offset if there is none;
- ``--to-offset N``: N, moved into the range if outside it (as Kafka does);
- ``--shift-by N``: the committed offset plus N (N may be negative), moved into the range.

At a terminal, ``reset-offsets`` shows its steps (finding the partitions, reading their
logs' bounds, committing) as a progress bar on standard error, then prints the plan; all
the new offsets are committed in one request, so a reset is never half done.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from sluice.cli.common import (
    bootstrap_option,
    check_partition,
    echo_json,
    echo_table,
    format_option,
    open_cluster,
    run,
    topic_missing,
)
from sluice.cli.progress import Bar, progress_bar, progress_enabled, progress_option
from sluice.client.admin import ACTIVE_MEMBER_CODES, NO_OFFSET, Admin, OffsetSpec
from sluice.client.groups import (
    CONSUMER_GROUP_TYPE,
    GroupDescription,
    GroupListing,
    GroupState,
    MemberDescription,
)
from sluice.client.groups import OffsetAndMetadata as CommittedOffset
from sluice.common import errors
from sluice.common.bookkeeping_groups import SPARK_GROUP_PREFIX, is_bookkeeping_group
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition, topic_name_problem
from sluice.common.limits import PARTITIONS_PER_TOPIC_MAX

NONE_TEXT = "-"
"""How text output shows a missing value (no committed offset, no owner)."""

# ── parsing ────────────────────────────────────────────────────────────────────────────

_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?$")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def parse_datetime_ms(text: str) -> int:
    """Milliseconds since the epoch of ``YYYY-MM-DDTHH:mm[:SS[.fff]][Z|±hh:mm]``.

    Without a zone the time is local, like Kafka's ``--to-datetime``. Raises
    ``ValueError`` with an example of the expected form.
    """
    example = "expected e.g. 2024-01-31T09:30:00, 2024-01-31T09:30:00Z or 2024-01-31T09:30:00+02:00"
    if not _DATETIME.match(text.strip()):
        raise ValueError(f"{text!r} is not a date and time ({example})")
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError as e:
        raise ValueError(f"{text!r} is not a valid date and time: {e}") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # naive: the local time zone, as Kafka reads it
    return (moment - _EPOCH) // datetime.timedelta(milliseconds=1)


def parse_topic_spec(text: str) -> tuple[str, list[int] | None]:
    """``TOPIC`` (every partition: ``None``) or ``TOPIC:P,P,FIRST-LAST`` (those, sorted).

    Raises ``ValueError`` naming what is wrong.
    """
    topic, separator, partitions_text = text.partition(":")
    problem = topic_name_problem(topic)
    if problem is not None:
        raise ValueError(problem)
    if not separator:
        return topic, None
    if not partitions_text.strip():
        raise ValueError(f"{text!r} has no partitions after ':' (e.g. {topic}:0,1 or {topic}:0-3)")
    partitions: set[int] = set()
    for item in partitions_text.split(","):
        first_text, dash, last_text = item.strip().partition("-")
        try:
            first = int(first_text)
            last = int(last_text) if dash else first
        except ValueError:
            raise ValueError(
                f"{item.strip()!r} in {text!r} is not a partition number or range FIRST-LAST"
            ) from None
        if first < 0 or last < first:
            raise ValueError(f"{item.strip()!r} in {text!r} is not a valid partition range")
        if last >= PARTITIONS_PER_TOPIC_MAX:
            raise ValueError(
                f"partition {last} in {text!r} is beyond the {PARTITIONS_PER_TOPIC_MAX} "
                "partitions a topic can have"
            )
        partitions.update(range(first, last + 1))
    return topic, sorted(partitions)


def merge_topic_specs(texts: Iterable[str]) -> dict[str, list[int] | None]:
    """Parse repeated ``--topic`` values; a topic named whole anywhere stays whole."""
    merged: dict[str, set[int] | None] = {}
    for text in texts:
        topic, partitions = parse_topic_spec(text)
        known = merged.get(topic, set())
        merged[topic] = None if partitions is None or known is None else known | set(partitions)
    return {
        topic: None if partitions is None else sorted(partitions)
        for topic, partitions in merged.items()
    }


def _topic_specs(
    _context: click.Context, _parameter: click.Parameter, values: Sequence[str]
) -> dict[str, list[int] | None]:
    try:
        return merge_topic_specs(values)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _datetime_ms(
    _context: click.Context, _parameter: click.Parameter, value: str | None
) -> int | None:
    if value is None:
        return None
    try:
        return parse_datetime_ms(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _check_group_id(_context: click.Context, _parameter: click.Parameter, value: Any) -> Any:
    for group_id in value if isinstance(value, tuple) else (value,):
        if not group_id:
            raise click.BadParameter("a group id cannot be empty")
    return value


# ── planning a reset ───────────────────────────────────────────────────────────────────


class ResetKind(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    DATETIME = "datetime"
    OFFSET = "offset"
    SHIFT_BY = "shift-by"


@dataclass(frozen=True, slots=True)
class ResetTarget:
    """Where ``reset-offsets`` moves each partition; ``value`` is the time in ms
    (DATETIME), the offset (OFFSET) or the distance (SHIFT_BY)."""

    kind: ResetKind
    value: int = 0


@dataclass(frozen=True, slots=True)
class PlannedReset:
    topic_partition: TopicPartition
    current_offset: int | None
    """The committed offset now; None if the group has none for the partition."""
    new_offset: int
    requested_offset: int | None = None
    """The offset asked for (--to-offset, --shift-by) when it lay outside the log and
    ``new_offset`` is the log's bound it was moved to; None otherwise."""


def clamp(offset: int, log_start_offset: int, log_end_offset: int) -> int:
    """``offset`` moved into [log start, log end], as Kafka's tool does."""
    return max(log_start_offset, min(offset, log_end_offset))


def requested_offset(target: ResetTarget, current_offset: int | None) -> int | None:
    """The offset ``target`` asks for before it is moved into the log (None for the
    targets that name a bound or a time)."""
    if target.kind is ResetKind.OFFSET:
        return target.value
    if target.kind is ResetKind.SHIFT_BY and current_offset is not None:
        return current_offset + target.value
    return None


def new_offset(
    target: ResetTarget,
    *,
    current_offset: int | None,
    log_start_offset: int,
    log_end_offset: int,
    offset_at_time: int = NO_OFFSET,
) -> int:
    """Where ``target`` puts one partition; ``offset_at_time`` is ListOffsets' answer
    for the target's time (DATETIME only). Raises ``ValueError`` for SHIFT_BY without a
    committed offset to shift from."""
    assert log_start_offset <= log_end_offset
    kind = target.kind
    if kind is ResetKind.EARLIEST:
        return log_start_offset
    if kind is ResetKind.LATEST:
        return log_end_offset
    if kind is ResetKind.DATETIME:
        if offset_at_time == NO_OFFSET:
            return log_end_offset  # no record at or after that time
        return clamp(offset_at_time, log_start_offset, log_end_offset)
    if kind is ResetKind.OFFSET:
        return clamp(target.value, log_start_offset, log_end_offset)
    assert kind is ResetKind.SHIFT_BY
    if current_offset is None:
        raise ValueError("it has no committed offset to shift from")
    return clamp(current_offset + target.value, log_start_offset, log_end_offset)


def _reset_target(
    *,
    to_earliest: bool,
    to_latest: bool,
    to_datetime_ms: int | None,
    to_offset: int | None,
    shift_by: int | None,
) -> ResetTarget:
    chosen = [
        target
        for target in (
            ResetTarget(ResetKind.EARLIEST) if to_earliest else None,
            ResetTarget(ResetKind.LATEST) if to_latest else None,
            None if to_datetime_ms is None else ResetTarget(ResetKind.DATETIME, to_datetime_ms),
            None if to_offset is None else ResetTarget(ResetKind.OFFSET, to_offset),
            None if shift_by is None else ResetTarget(ResetKind.SHIFT_BY, shift_by),
        )
        if target is not None
    ]
    if len(chosen) != 1:
        raise click.UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset, --shift-by"
        )
    return chosen[0]


_F = TypeVar("_F", bound=Callable[..., Any])


def reset_target_options(command: _F) -> _F:
    """The targets both ``groups reset-offsets`` and ``share-groups reset-offsets`` take:
    --to-earliest, --to-latest, --to-datetime and --to-offset."""
    for option in reversed(
        (
            click.option("--to-earliest", is_flag=True, help="To the log start offset."),
            click.option("--to-latest", is_flag=True, help="To the log end offset."),
            click.option(
                "--to-datetime",
                "to_datetime_ms",
                metavar="YYYY-MM-DDTHH:mm:SS[Z|+hh:mm]",
                callback=_datetime_ms,
                help="To the first record at or after this time (local time without a zone).",
            ),
            click.option(
                "--to-offset",
                type=click.IntRange(min=0),
                metavar="N",
                help="To this offset, moved into [log start, log end] if outside.",
            ),
        )
    ):
        command = option(command)
    return command


# ── errors and output ──────────────────────────────────────────────────────────────────


def group_missing(group_id: str) -> click.ClickException:
    return click.ClickException(
        f"group {group_id!r} does not exist (list groups with `sluice groups list`)"
    )


def _group_error(error: KafkaError, group_id: str) -> KafkaError | click.ClickException:
    """The one-line message for a group refusal; other errors are returned as they are
    for :func:`~sluice.cli.common.run` to print."""
    code = error.code
    if code == ErrorCode.group_id_not_found:
        return group_missing(group_id)
    if code == ErrorCode.non_empty_group:
        return click.ClickException(f"{error.message} (stop its consumers first)")
    if code in ACTIVE_MEMBER_CODES or code == ErrorCode.group_subscribed_to_topic:
        return click.ClickException(error.message)
    return error


def _active_message(description: GroupDescription, action: str) -> str:
    return (
        f"cannot {action} group {description.group_id!r}: it has "
        f"{len(description.members)} active member(s) (state {description.state}); "
        "stop its consumers first"
    )


def _text(value: object) -> str:
    return NONE_TEXT if value is None or value == "" else str(value)


_group_argument = click.argument("group_id", metavar="GROUP", callback=_check_group_id)


async def _existing_partitions(
    admin: Admin, partitions: Iterable[TopicPartition]
) -> list[TopicPartition]:
    """Those of ``partitions`` whose topic and partition still exist."""
    wanted = sorted(set(partitions))
    metadata = await admin.cluster.metadata({tp.topic for tp in wanted})
    existing = []
    for topic_partition in wanted:
        topic = metadata.topics.get(topic_partition.topic)
        if (
            topic is not None
            and topic.error_code == ErrorCode.none
            and any(p.partition == topic_partition.partition for p in topic.partitions)
        ):
            existing.append(topic_partition)
    return existing


async def _named_partitions(
    admin: Admin, specs: Mapping[str, list[int] | None]
) -> list[TopicPartition]:
    """Every partition ``--topic`` names; a missing topic or partition is an error."""
    partitions: list[TopicPartition] = []
    for topic, indexes in specs.items():
        try:
            metadata = await admin.describe_topic(topic)
        except errors.KafkaError as e:
            if isinstance(e, errors.UnknownTopicOrPartition):
                raise topic_missing(topic) from None
            raise
        if indexes is None:
            partitions += [p.topic_partition for p in metadata.partitions]
            continue
        for index in indexes:
            check_partition(metadata, index)
            partitions.append(TopicPartition(topic, index))
    return sorted(set(partitions))


# ── commands ───────────────────────────────────────────────────────────────────────────


@click.group()
def groups() -> None:
    """List, describe and delete consumer groups; reset or delete their offsets."""


@groups.command(name="list")
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Show bookkeeping groups too (Spark's exactly-once progress), marked.",
)
@format_option
@bootstrap_option
def list_groups(*, show_all: bool, output_format: str, bootstrap_server: str) -> None:
    """List every group with its type (classic, consumer, share), state and protocol type.

    Bookkeeping groups (offsets that record a Spark query's progress, not a consumer's
    position) are left out unless --all is given.
    """

    async def listings() -> tuple[list[GroupListing], set[str]]:
        async with open_cluster(bootstrap_server) as cluster:
            admin = Admin(cluster)
            found = await admin.list_groups()
            return found, await bookkeeping_group_ids(admin, found)

    found, bookkeeping = run(listings)
    shown = [g for g in found if show_all or g.group_id not in bookkeeping]
    if output_format == "json":
        echo_json(
            [
                {
                    "group": g.group_id,
                    "type": g.group_type,
                    "state": g.state,
                    "protocol_type": g.protocol_type,
                    "bookkeeping": g.group_id in bookkeeping,
                }
                for g in shown
            ]
        )
    elif shown:
        header = ["GROUP", "TYPE", "STATE", "PROTOCOL TYPE"]
        table = [[*header, "NOTE"] if show_all else header]
        for g in shown:
            row = [g.group_id, g.group_type, g.state, _text(g.protocol_type)]
            if show_all:
                row.append(BOOKKEEPING_NOTE if g.group_id in bookkeeping else "")
            table.append(row)
        echo_table(table)
    hidden = len(found) - len(shown)
    if hidden:
        click.echo(f"{hidden} bookkeeping group(s) hidden (--all shows them).", err=True)


BOOKKEEPING_NOTE = "bookkeeping"
"""How ``--all`` marks a bookkeeping group."""


async def bookkeeping_group_ids(admin: Admin, listings: Sequence[GroupListing]) -> set[str]:
    """The ids of the bookkeeping groups among ``listings``
    (:mod:`sluice.common.bookkeeping_groups`). Only groups that store offsets without a
    protocol and are Empty can be; those not named as Spark's are asked for the
    metadata of their committed offsets."""
    candidates = [
        g.group_id
        for g in listings
        if not g.protocol_type and g.state == GroupState.EMPTY and g.group_type != "share"
    ]
    to_ask = [g for g in candidates if not g.startswith(SPARK_GROUP_PREFIX)]
    offsets = await asyncio.gather(*(admin.list_group_offsets(g) for g in to_ask))
    metadata = {
        group_id: [value.metadata for value in committed.values()]
        for group_id, committed in zip(to_ask, offsets, strict=True)
    }
    return {
        group_id
        for group_id in candidates
        if is_bookkeeping_group(
            group_id,
            protocol_type=None,
            member_count=0,
            offset_metadata=metadata.get(group_id, ()),
        )
    }


@dataclass(frozen=True, slots=True)
class _PartitionRow:
    topic_partition: TopicPartition
    committed: CommittedOffset | None
    log_end_offset: int | None
    """None when the topic or partition no longer exists."""
    owner: MemberDescription | None
    bookkeeping: bool = False
    """The group's offsets record progress, not positions: no lag to show."""

    @property
    def lag(self) -> int | None:
        """Log end minus committed offset, as Kafka's tool shows it; None (shown ``-``)
        where either is unknown, or in a bookkeeping group."""
        if self.committed is None or self.log_end_offset is None or self.bookkeeping:
            return None
        return self.log_end_offset - self.committed.offset


def total_lag(rows: Iterable[_PartitionRow]) -> int | None:
    """Records behind (never counting a partition ahead) over the partitions whose lag
    is known; None when no partition's is: a group that never committed has an unknown
    lag, not a lag of 0."""
    known = [row.lag for row in rows if row.lag is not None]
    return sum(max(0, lag) for lag in known) if known else None


def _member_json(member: MemberDescription) -> dict[str, Any]:
    document: dict[str, Any] = {
        "member_id": member.member_id,
        "group_instance_id": member.group_instance_id,
        "client_id": member.client_id,
        "host": member.client_host,
        "assignment": member.assignment,
    }
    if member.target_assignment is not None:
        document |= {
            "member_epoch": member.member_epoch,
            "rack_id": member.rack_id,
            "subscribed_topics": list(member.subscribed_topics),
            "subscribed_topic_regex": member.subscribed_topic_regex,
            "target_assignment": member.target_assignment,
            "pending_assignment": member.pending_assignment,
            "pending_revocation": member.pending_revocation,
        }
    return document


def _subscription_text(member: MemberDescription) -> str:
    """Topic names joined by commas, then ``regex PATTERN``."""
    parts = [",".join(member.subscribed_topics)] if member.subscribed_topics else []
    if member.subscribed_topic_regex is not None:
        parts.append(f"regex {member.subscribed_topic_regex}")
    return " ".join(parts)


def _pending_text(member: MemberDescription) -> str:
    """``+topic:p`` for partitions of the target still to come (another member is
    revoking them), ``-topic:p`` for those it has beyond its target."""
    return " ".join(
        [f"+{part}" for part in _assignment_text(member.pending_assignment).split()]
        + [f"-{part}" for part in _assignment_text(member.pending_revocation).split()]
    )


def _assignment_text(assignment: Mapping[str, list[int]]) -> str:
    return " ".join(
        f"{topic}:{','.join(map(str, partitions))}" for topic, partitions in assignment.items()
    )


@groups.command()
@_group_argument
@click.option("--members", is_flag=True, help="List the members and their assignments instead.")
@format_option
@bootstrap_option
def describe(*, group_id: str, members: bool, output_format: str, bootstrap_server: str) -> None:
    """Show the state, committed offsets and lag of GROUP.

    One row per partition the group has committed an offset for or has assigned to a
    member: committed offset, log end offset, lag (log end minus committed) and the
    member that owns the partition. A partition without a committed offset shows ``-``
    (JSON: null) as its offset and lag, as Kafka's tool does: its lag is unknown, not 0.
    A bookkeeping group (Spark's exactly-once progress) is marked and shows no lag.
    With --members: one row per member instead.

    A group of the consumer group protocol (KIP-848) also shows its group and assignment
    epochs and assignor, and each member's epoch, subscription, assigned and target
    partitions; PENDING marks partitions of its target it does not have yet (+) and
    partitions it still has beyond it (-).
    """

    async def gather() -> tuple[GroupDescription, list[_PartitionRow]]:
        async with open_cluster(bootstrap_server) as cluster:
            admin = Admin(cluster)
            (description,) = await admin.describe_groups([group_id])
            committed = await admin.list_group_offsets(group_id)
            if not description.exists and not committed:
                raise group_missing(group_id)
            owners = {
                TopicPartition(topic, partition): member
                for member in description.members
                for topic, partitions in member.assignment.items()
                for partition in partitions
            }
            targeted = {
                TopicPartition(topic, partition)
                for member in description.members
                for topic, partitions in (member.target_assignment or {}).items()
                for partition in partitions
            }
            partitions = sorted(set(committed) | set(owners) | targeted)
            existing = await _existing_partitions(admin, partitions)
            log_ends = await admin.list_offsets(existing, OffsetSpec.LATEST) if existing else {}
            bookkeeping = is_bookkeeping_group(
                group_id,
                protocol_type=description.protocol_type,
                member_count=len(description.members),
                offset_metadata=[value.metadata for value in committed.values()],
            )
            rows = [
                _PartitionRow(
                    tp,
                    committed.get(tp),
                    log_ends[tp].offset if tp in log_ends else None,
                    owners.get(tp),
                    bookkeeping,
                )
                for tp in partitions
            ]
            return description, rows

    description, rows = run(gather)
    if members:
        _print_members(description, output_format)
    elif description.group_type == CONSUMER_GROUP_TYPE and output_format == "text":
        _print_members(description, output_format)
        _print_partitions(description, rows, output_format, summary=False)
    else:
        _print_partitions(description, rows, output_format)


def _summary_json(description: GroupDescription) -> dict[str, Any]:
    document: dict[str, Any] = {
        "group": description.group_id,
        "type": description.group_type,
        "state": description.state,
        "protocol_type": description.protocol_type,
        "protocol": description.protocol,
        "member_count": len(description.members) if description.members_described else None,
    }
    if description.group_type == CONSUMER_GROUP_TYPE:
        document |= {
            "group_epoch": description.group_epoch,
            "assignment_epoch": description.assignment_epoch,
            "assignor": description.protocol or None,
        }
    return document


def _print_summary(description: GroupDescription) -> None:
    click.echo(f"Group: {description.group_id}")
    if description.group_type != CONSUMER_GROUP_TYPE:
        click.echo(
            f"  state: {description.state}   protocol type: {_text(description.protocol_type)}"
            f"   protocol: {_text(description.protocol)}   members: {len(description.members)}"
        )
        return
    if not description.members_described:
        click.echo(
            f"  type: consumer   state: {description.state}   members: unknown (the "
            "coordinator does not answer ConsumerGroupDescribe: enable "
            "group.coordinator.rebalance.protocols=classic,consumer on the broker)"
        )
        return
    click.echo(
        f"  type: consumer   state: {description.state}   group epoch: "
        f"{_text(description.group_epoch)}   assignment epoch: "
        f"{_text(description.assignment_epoch)}   assignor: {_text(description.protocol)}   "
        f"members: {len(description.members)}"
    )


def _print_members(description: GroupDescription, output_format: str) -> None:
    if output_format == "json":
        document = _summary_json(description)
        document["members"] = [_member_json(member) for member in description.members]
        echo_json(document)
        return
    _print_summary(description)
    if not description.members_described:
        return
    if not description.members:
        click.echo("  no active members")
        return
    if description.group_type == CONSUMER_GROUP_TYPE:
        _print_consumer_members(description)
        return
    header = ("MEMBER ID", "INSTANCE ID", "CLIENT ID", "HOST", "PARTITIONS", "ASSIGNMENT")
    echo_table(
        [header]
        + [
            (
                member.member_id,
                _text(member.group_instance_id),
                _text(member.client_id),
                _text(member.client_host),
                str(sum(len(partitions) for partitions in member.assignment.values())),
                _text(_assignment_text(member.assignment)),
            )
            for member in description.members
        ]
    )


def _print_consumer_members(description: GroupDescription) -> None:
    """The members of a consumer group (KIP-848) with their epochs, subscriptions and
    current, target and pending assignments."""
    header = (
        "MEMBER ID",
        "INSTANCE ID",
        "CLIENT ID",
        "HOST",
        "EPOCH",
        "SUBSCRIPTION",
        "ASSIGNED",
        "TARGET",
        "PENDING",
    )
    echo_table(
        [header]
        + [
            (
                member.member_id,
                _text(member.group_instance_id),
                _text(member.client_id),
                _text(member.client_host),
                _text(member.member_epoch),
                _text(_subscription_text(member)),
                _text(_assignment_text(member.assignment)),
                _text(_assignment_text(member.target_assignment or {})),
                _text(_pending_text(member)),
            )
            for member in description.members
        ]
    )


def _print_partitions(
    description: GroupDescription,
    rows: Sequence[_PartitionRow],
    output_format: str,
    *,
    summary: bool = True,
) -> None:
    bookkeeping = any(row.bookkeeping for row in rows)
    total = total_lag(rows)
    without_offset = sum(1 for row in rows if row.committed is None)
    if output_format == "json":
        document = _summary_json(description)
        if description.group_type == CONSUMER_GROUP_TYPE:
            document["members"] = [_member_json(member) for member in description.members]
        document["bookkeeping"] = bookkeeping
        document["partitions"] = [
            {
                "topic": row.topic_partition.topic,
                "partition": row.topic_partition.partition,
                "current_offset": None if row.committed is None else row.committed.offset,
                "log_end_offset": row.log_end_offset,
                "lag": row.lag,
                "member_id": None if row.owner is None else row.owner.member_id,
                "client_id": None if row.owner is None else row.owner.client_id,
                "host": None if row.owner is None else row.owner.client_host,
            }
            for row in rows
        ]
        document["total_lag"] = total
        document["partitions_without_committed_offset"] = without_offset
        echo_json(document)
        return
    if summary:
        _print_summary(description)
    if bookkeeping:
        click.echo(
            "  bookkeeping group: its offsets record a Spark query's progress (batch ids), "
            "not positions, so it has no lag"
        )
    if not rows:
        click.echo("  no committed offsets and no assigned partitions")
        return
    header = (
        "TOPIC",
        "PARTITION",
        "CURRENT OFFSET",
        "LOG END",
        "LAG",
        "MEMBER ID",
        "CLIENT ID",
        "HOST",
    )
    table = [header]
    for row in rows:
        owner = row.owner
        table.append(
            (
                row.topic_partition.topic,
                str(row.topic_partition.partition),
                _text(None if row.committed is None else row.committed.offset),
                _text(row.log_end_offset),
                _text(row.lag),
                _text(None if owner is None else owner.member_id),
                _text(None if owner is None else owner.client_id),
                _text(None if owner is None else owner.client_host),
            )
        )
    echo_table(table)
    if bookkeeping:
        return
    unknown = (
        f" ({without_offset} partition(s) without a committed offset: lag unknown)"
        if without_offset
        else ""
    )
    click.echo(f"  total lag: {_text(total)}{unknown}")


@groups.command(name="reset-offsets")
@_group_argument
@click.option(
    "--topic",
    "topic_specs",
    multiple=True,
    metavar="TOPIC[:P,P,FIRST-LAST]",
    callback=_topic_specs,
    help="A topic, or some of its partitions (repeatable).",
)
@click.option(
    "--all-topics", is_flag=True, help="Every partition the group has committed offsets for."
)
@reset_target_options
@click.option(
    "--shift-by",
    type=int,
    metavar="N",
    help="By N from the committed offset (negative: back), kept inside the log.",
)
@click.option("--execute", is_flag=True, help="Apply the plan (without it: only print it).")
@progress_option
@bootstrap_option
def reset_offsets(
    *,
    group_id: str,
    topic_specs: dict[str, list[int] | None],
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_datetime_ms: int | None,
    to_offset: int | None,
    shift_by: int | None,
    execute: bool,
    no_progress: bool,
    bootstrap_server: str,
) -> None:
    """Move the committed offsets of GROUP (a dry run without --execute).

    Choose partitions with --topic (repeatable) or --all-topics, and exactly one target:
    --to-earliest, --to-latest, --to-datetime, --to-offset or --shift-by. The group must
    have no active members when the plan is executed.
    """
    if bool(topic_specs) == all_topics:
        raise click.UsageError("give --topic TOPIC[:PARTITIONS] (repeatable) or --all-topics")
    target = _reset_target(
        to_earliest=to_earliest,
        to_latest=to_latest,
        to_datetime_ms=to_datetime_ms,
        to_offset=to_offset,
        shift_by=shift_by,
    )

    async def reset() -> tuple[GroupDescription, list[PlannedReset]]:
        with progress_bar(
            f"resetting offsets of {group_id}" if execute else f"planning a reset of {group_id}",
            enabled=progress_enabled(no_progress),
            total=4 if execute else 3,
            detail="{task.fields[step]}",
            step="describing the group",
        ) as bar:
            return await reset_with(bar)

    async def reset_with(bar: Bar) -> tuple[GroupDescription, list[PlannedReset]]:
        async with open_cluster(bootstrap_server) as cluster:
            admin = Admin(cluster)
            (description,) = await admin.describe_groups([group_id])
            bar.update(completed=1, step="finding the partitions")
            if execute and description.is_active:
                raise click.ClickException(_active_message(description, "reset the offsets of"))
            if all_topics:
                committed = await admin.list_group_offsets(group_id)
                partitions = sorted(committed)
                if not partitions:
                    raise click.ClickException(
                        f"group {group_id!r} has no committed offsets to reset "
                        "(name partitions with --topic)"
                    )
                gone = sorted(
                    {tp.topic for tp in partitions}
                    - {tp.topic for tp in await _existing_partitions(admin, partitions)}
                )
                if gone:
                    raise click.ClickException(
                        f"topic {gone[0]!r}, which group {group_id!r} has offsets for, no "
                        f"longer exists (remove them with `sluice groups delete-offsets "
                        f"{group_id} --topic {gone[0]}`)"
                    )
            else:
                partitions = await _named_partitions(admin, topic_specs)
                committed = await admin.list_group_offsets(group_id, partitions)
            bar.update(completed=2, step=f"reading the logs of {len(partitions)} partition(s)")
            plan = await plan_resets(
                admin,
                target,
                partitions,
                {tp: committed_offset.offset for tp, committed_offset in committed.items()},
                group_id,
            )
            if execute:
                bar.update(completed=3, step=f"committing {len(plan)} offset(s)")
                try:
                    await admin.alter_group_offsets(
                        group_id, {p.topic_partition: CommittedOffset(p.new_offset) for p in plan}
                    )
                except KafkaError as e:
                    raise _group_error(e, group_id) from None
            bar.update(completed=4 if execute else 3, step="done")
            return description, plan

    description, plan = run(reset)
    echo_plan(plan, "OFFSET")
    if execute:
        click.echo(f"Reset the offsets of group {group_id} for {len(plan)} partition(s).")
        return
    click.echo("Dry run: nothing changed. Add --execute to reset these offsets.")
    if description.is_active:
        click.echo(
            f"Note: group {group_id!r} has {len(description.members)} active member(s) "
            f"(state {description.state}): --execute is refused until its consumers stop.",
            err=True,
        )


def echo_plan(plan: Sequence[PlannedReset], offset_name: str) -> None:
    """Print a reset plan as a table; ``offset_name`` is what moves ("OFFSET" for a
    group's committed offsets)."""
    echo_table(
        [("TOPIC", "PARTITION", f"CURRENT {offset_name}", f"NEW {offset_name}")]
        + [
            (
                p.topic_partition.topic,
                str(p.topic_partition.partition),
                _text(p.current_offset),
                str(p.new_offset),
            )
            for p in plan
        ]
    )
    echo_clamped(plan)


def echo_clamped(plan: Sequence[PlannedReset]) -> None:
    """Warn, on standard error, about each partition whose requested offset lay outside
    its log and was moved to the log start or end offset, as Kafka's tool does."""
    for p in plan:
        if p.requested_offset is None:
            continue
        bound = "log start" if p.requested_offset < p.new_offset else "log end"
        relation = "below" if p.requested_offset < p.new_offset else "above"
        click.echo(
            f"Warning: partition {p.topic_partition}: offset {p.requested_offset} is "
            f"{relation} its {bound} offset; set to {p.new_offset} instead.",
            err=True,
        )


async def plan_resets(
    admin: Admin,
    target: ResetTarget,
    partitions: Sequence[TopicPartition],
    current_offsets: Mapping[TopicPartition, int],
    group_id: str,
) -> list[PlannedReset]:
    """Each partition's new offset for ``target``, from its current offset (none where
    ``current_offsets`` has no entry) and the log's bounds (and the offset at the target
    time for --to-datetime)."""
    starts = await admin.list_offsets(partitions, OffsetSpec.EARLIEST)
    ends = await admin.list_offsets(partitions, OffsetSpec.LATEST)
    at_time = (
        await admin.list_offsets(partitions, target.value)
        if target.kind is ResetKind.DATETIME
        else {}
    )
    plan = []
    for topic_partition in partitions:
        current_offset = current_offsets.get(topic_partition)
        try:
            offset = new_offset(
                target,
                current_offset=current_offset,
                log_start_offset=starts[topic_partition].offset,
                log_end_offset=ends[topic_partition].offset,
                offset_at_time=(
                    at_time[topic_partition].offset if topic_partition in at_time else NO_OFFSET
                ),
            )
        except ValueError as e:
            raise click.ClickException(
                f"cannot shift partition {topic_partition} of group {group_id!r}: {e} "
                "(use --to-offset, --to-earliest or --to-latest for it)"
            ) from None
        asked = requested_offset(target, current_offset)
        plan.append(
            PlannedReset(
                topic_partition, current_offset, offset, None if asked == offset else asked
            )
        )
    return plan


def report_deletions(
    outcomes: Mapping[str, KafkaError | None],
    kind: str,
    refusal: Callable[[KafkaError, str], KafkaError | click.ClickException],
) -> None:
    """Print each deleted group ("Deleted ``kind`` G."), then fail once with every group's
    refusal (``refusal`` makes its one-line message)."""
    problems = []
    for group_id, outcome in outcomes.items():
        if outcome is None:
            click.echo(f"Deleted {kind} {group_id}.")
            continue
        refused = refusal(outcome, group_id)
        problems.append(
            refused.message if isinstance(refused, click.ClickException) else str(refused)
        )
    if problems:
        raise click.ClickException("; ".join(problems))


@groups.command()
@click.argument("group_ids", metavar="GROUP...", nargs=-1, required=True, callback=_check_group_id)
@bootstrap_option
def delete(*, group_ids: tuple[str, ...], bootstrap_server: str) -> None:
    """Delete groups and their committed offsets.

    Only a group without active members can be deleted.
    """

    async def delete_groups() -> dict[str, KafkaError | None]:
        async with open_cluster(bootstrap_server) as cluster:
            return await Admin(cluster).delete_groups(group_ids)

    report_deletions(run(delete_groups), "group", _group_error)


@groups.command(name="delete-offsets")
@_group_argument
@click.option(
    "--topic",
    "topic_specs",
    multiple=True,
    required=True,
    metavar="TOPIC[:P,P,FIRST-LAST]",
    callback=_topic_specs,
    help="A topic, or some of its partitions (repeatable).",
)
@bootstrap_option
def delete_offsets(
    *, group_id: str, topic_specs: dict[str, list[int] | None], bootstrap_server: str
) -> None:
    """Delete committed offsets of GROUP.

    Name the topics or partitions with --topic (repeatable). Allowed while the group is
    empty, or for topics none of its members subscribes to.
    """

    async def delete_group_offsets() -> list[TopicPartition]:
        async with open_cluster(bootstrap_server) as cluster:
            admin = Admin(cluster)
            committed = await admin.list_group_offsets(group_id)
            partitions: set[TopicPartition] = set()
            for topic, indexes in topic_specs.items():
                if indexes is not None:
                    partitions.update(TopicPartition(topic, index) for index in indexes)
                    continue
                of_topic = {tp for tp in committed if tp.topic == topic}
                metadata = await cluster.metadata([topic])
                listed = metadata.topics.get(topic)
                if listed is not None and listed.error_code == ErrorCode.none:
                    of_topic.update(p.topic_partition for p in listed.partitions)
                if not of_topic:
                    raise topic_missing(topic)
                partitions.update(of_topic)
            try:
                await admin.delete_group_offsets(group_id, sorted(partitions))
            except KafkaError as e:
                raise _group_error(e, group_id) from None
            return sorted(partitions)

    deleted = run(delete_group_offsets)
    by_topic: dict[str, list[int]] = {}
    for topic_partition in deleted:
        by_topic.setdefault(topic_partition.topic, []).append(topic_partition.partition)
    click.echo(
        f"Deleted the committed offsets of group {group_id} for "
        + ", ".join(
            f"{topic} partition(s) {','.join(map(str, indexes))}"
            for topic, indexes in by_topic.items()
        )
        + "."
    )


__all__ = ["groups"]
