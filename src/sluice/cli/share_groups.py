"""``sluice share-groups``: list, describe and delete share groups (KIP-932: queues on a
topic), and reset or delete their start offsets, like Kafka's ``kafka-share-groups``.

A share group's *start offset* of a partition is where its unfinished records begin;
``reset-offsets`` moves it (a dry run unless given ``--execute``) and is allowed only
while the group has no members, so the command checks that first and the coordinator
refuses too if a consumer joins meanwhile. Targets, per partition (always inside
[log start offset, log end offset]): ``--to-earliest``, ``--to-latest``,
``--to-datetime T`` (the first record at or after T, else the log end) and
``--to-offset N`` (moved into the range if outside it).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

import click

from sluice.cli.common import (
    bootstrap_option,
    echo_json,
    echo_table,
    format_option,
    open_cluster,
    parse_key_values,
    run,
)
from sluice.cli.groups import (
    PlannedReset,
    _check_group_id,
    _named_partitions,
    _reset_target,
    _topic_specs,
    echo_plan,
    plan_resets,
    report_deletions,
    reset_target_options,
)
from sluice.client.admin import Admin
from sluice.client.admin_share_groups import (
    ShareGroupDescription,
    ShareGroupListing,
    SharePartitionOffset,
    alter_share_group_configs,
    alter_share_group_offsets,
    delete_share_group_offsets,
    delete_share_groups,
    describe_share_group,
    list_share_groups,
    share_group_offsets,
)
from sluice.common.config import GROUP_CONFIG_KEYS
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition

NONE_TEXT = "-"


def _text(value: object) -> str:
    return NONE_TEXT if value is None or value in ("", -1) else str(value)


def share_group_missing(group_id: str) -> click.ClickException:
    return click.ClickException(
        f"share group {group_id!r} does not exist (list share groups with "
        "`sluice share-groups list`; classic consumer groups are under `sluice groups`)"
    )


def _share_group_error(error: KafkaError, group_id: str) -> KafkaError | click.ClickException:
    """A one-line message for a group refusal; other errors go to :func:`run` as they are."""
    if error.code == ErrorCode.group_id_not_found:
        return share_group_missing(group_id)
    if error.code == ErrorCode.non_empty_group:
        return click.ClickException(
            f"share group {group_id!r} has active members: stop its share consumers first"
        )
    return error


def _active_message(description: ShareGroupDescription, action: str) -> str:
    return (
        f"cannot {action} share group {description.group_id!r}: it has "
        f"{len(description.members)} active member(s) (state {description.state}); "
        "stop its share consumers first"
    )


async def _describe_or_none(admin: Admin, group_id: str) -> ShareGroupDescription | None:
    try:
        return await describe_share_group(admin, group_id)
    except KafkaError as e:
        if e.code == ErrorCode.group_id_not_found:
            return None
        raise


_group_argument = click.argument("group_id", metavar="GROUP", callback=_check_group_id)


@click.group(name="share-groups")
def share_groups() -> None:
    """List, describe and delete share groups; reset or delete their start offsets."""


@share_groups.command(name="list")
@format_option
@bootstrap_option
def list_groups(*, output_format: str, bootstrap_server: str) -> None:
    """List every share group with its state."""

    async def listings() -> list[ShareGroupListing]:
        async with open_cluster(bootstrap_server) as cluster:
            return await list_share_groups(Admin(cluster))

    found = run(listings)
    if output_format == "json":
        echo_json([{"group": g.group_id, "state": g.state} for g in found])
        return
    if found:
        echo_table([("GROUP", "STATE")] + [(g.group_id, g.state) for g in found])


@share_groups.command()
@_group_argument
@click.option("--members", is_flag=True, help="List the members and their assignments instead.")
@format_option
@bootstrap_option
def describe(*, group_id: str, members: bool, output_format: str, bootstrap_server: str) -> None:
    """Show the state, start offsets and lag of share group GROUP.

    One row per partition the group has read: its start offset (where the records not
    yet acknowledged for good begin) and lag (records from there on still to
    acknowledge). With --members: one row per member and the partitions it fetches.
    """

    async def gather() -> tuple[ShareGroupDescription, dict[TopicPartition, SharePartitionOffset]]:
        async with open_cluster(bootstrap_server) as cluster:
            admin = Admin(cluster)
            try:
                description = await describe_share_group(admin, group_id)
                offsets = await share_group_offsets(admin, group_id)
            except KafkaError as e:
                raise _share_group_error(e, group_id) from None
            return description, offsets

    description, offsets = run(gather)
    if output_format == "json":
        document = _summary_json(description)
        if members:
            document["members"] = [
                {
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "host": m.client_host,
                    "member_epoch": m.member_epoch,
                    "subscribed_topics": list(m.subscribed_topics),
                    "assignment": m.assignment,
                }
                for m in description.members
            ]
        else:
            document["partitions"] = [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "start_offset": None if o.start_offset < 0 else o.start_offset,
                    "lag": None if o.lag < 0 else o.lag,
                    "error": None if o.error is None else str(o.error),
                }
                for tp, o in sorted(offsets.items())
            ]
        echo_json(document)
        return
    _print_summary(description)
    if members:
        _print_members(description)
    else:
        _print_offsets(offsets)


def _summary_json(description: ShareGroupDescription) -> dict[str, Any]:
    return {
        "group": description.group_id,
        "state": description.state,
        "group_epoch": description.group_epoch,
        "assignment_epoch": description.assignment_epoch,
        "assignor": description.assignor,
        "member_count": len(description.members),
    }


def _print_summary(description: ShareGroupDescription) -> None:
    click.echo(f"Share group: {description.group_id}")
    click.echo(
        f"  state: {description.state}   members: {len(description.members)}   "
        f"group epoch: {description.group_epoch}   assignor: {_text(description.assignor)}"
    )


def _print_members(description: ShareGroupDescription) -> None:
    if not description.members:
        click.echo("  no active members")
        return
    echo_table(
        [("MEMBER ID", "CLIENT ID", "HOST", "EPOCH", "ASSIGNMENT")]
        + [
            (
                m.member_id,
                _text(m.client_id),
                _text(m.client_host),
                str(m.member_epoch),
                _text(
                    " ".join(
                        f"{topic}:{','.join(map(str, partitions))}"
                        for topic, partitions in m.assignment.items()
                    )
                ),
            )
            for m in description.members
        ]
    )


def _print_offsets(offsets: Mapping[TopicPartition, SharePartitionOffset]) -> None:
    if not offsets:
        click.echo("  no partitions read yet")
        return
    echo_table(
        [("TOPIC", "PARTITION", "START OFFSET", "LAG")]
        + [
            (
                tp.topic,
                str(tp.partition),
                _text(o.start_offset),
                _text(o.lag) if o.error is None else str(o.error),
            )
            for tp, o in sorted(offsets.items())
        ]
    )


@share_groups.command(name="reset-offsets")
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
@reset_target_options
@click.option(
    "--execute/--dry-run",
    default=False,
    help="Apply the plan, or (the default) only print it.",
)
@bootstrap_option
def reset_offsets(
    *,
    group_id: str,
    topic_specs: dict[str, list[int] | None],
    to_earliest: bool,
    to_latest: bool,
    to_datetime_ms: int | None,
    to_offset: int | None,
    execute: bool,
    bootstrap_server: str,
) -> None:
    """Move the start offsets of share group GROUP (a dry run without --execute).

    Name partitions with --topic (repeatable) and exactly one target: --to-earliest,
    --to-latest, --to-datetime or --to-offset. The group must have no members when the
    plan is executed.
    """
    targets = (to_earliest, to_latest, to_datetime_ms is not None, to_offset is not None)
    if sum(targets) != 1:
        raise click.UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset"
        )
    target = _reset_target(
        to_earliest=to_earliest,
        to_latest=to_latest,
        to_datetime_ms=to_datetime_ms,
        to_offset=to_offset,
        shift_by=None,
    )

    async def reset() -> tuple[ShareGroupDescription | None, list[PlannedReset]]:
        async with open_cluster(bootstrap_server) as cluster:
            admin = Admin(cluster)
            description = await _describe_or_none(admin, group_id)
            if execute and description is not None and not description.is_empty:
                raise click.ClickException(_active_message(description, "reset the offsets of"))
            partitions = await _named_partitions(admin, topic_specs)
            current = (
                await share_group_offsets(admin, group_id, partitions)
                if description is not None
                else {}
            )
            plan = await plan_resets(
                admin,
                target,
                partitions,
                {tp: o.start_offset for tp, o in current.items() if o.start_offset >= 0},
                group_id,
            )
            if execute:
                try:
                    outcomes = await alter_share_group_offsets(
                        admin, group_id, {p.topic_partition: p.new_offset for p in plan}
                    )
                except KafkaError as e:
                    raise _share_group_error(e, group_id) from None
                refused = [f"{tp}: {error}" for tp, error in outcomes.items() if error]
                if refused:
                    raise click.ClickException(
                        f"share group {group_id!r} refused some offsets: " + "; ".join(refused)
                    )
            return description, plan

    description, plan = run(reset)
    echo_plan(plan, "START OFFSET")
    if execute:
        click.echo(
            f"Reset the start offsets of share group {group_id} for {len(plan)} partition(s)."
        )
        return
    click.echo("Dry run: nothing changed. Add --execute to reset these offsets.")
    if description is not None and not description.is_empty:
        click.echo(
            f"Note: share group {group_id!r} has {len(description.members)} active member(s): "
            "--execute is refused until its share consumers stop.",
            err=True,
        )


@share_groups.command()
@click.argument("group_ids", metavar="GROUP...", nargs=-1, required=True, callback=_check_group_id)
@bootstrap_option
def delete(*, group_ids: tuple[str, ...], bootstrap_server: str) -> None:
    """Delete share groups and their state. Only a group without members can be deleted."""

    async def delete_groups() -> dict[str, KafkaError | None]:
        async with open_cluster(bootstrap_server) as cluster:
            return await delete_share_groups(Admin(cluster), group_ids)

    report_deletions(run(delete_groups), "share group", _share_group_error)


@share_groups.command(name="delete-offsets")
@_group_argument
@click.option(
    "--topic", "topics", multiple=True, required=True, help="A topic to forget (repeatable)."
)
@bootstrap_option
def delete_offsets(*, group_id: str, topics: tuple[str, ...], bootstrap_server: str) -> None:
    """Forget share group GROUP's state of whole topics (the group must have no members)."""

    async def delete_group_offsets() -> dict[str, KafkaError | None]:
        async with open_cluster(bootstrap_server) as cluster:
            try:
                return await delete_share_group_offsets(Admin(cluster), group_id, topics)
            except KafkaError as e:
                raise _share_group_error(e, group_id) from None

    outcomes = run(delete_group_offsets)
    refused = [f"{topic}: {error}" for topic, error in outcomes.items() if error is not None]
    if refused:
        raise click.ClickException(
            f"share group {group_id!r} kept some offsets: " + "; ".join(refused)
        )
    click.echo(
        f"Deleted the offsets of share group {group_id} for topic(s) {', '.join(sorted(outcomes))}."
    )


def _check_group_config_names(names: Iterable[str]) -> None:
    for name in names:
        if name not in GROUP_CONFIG_KEYS:
            close = difflib.get_close_matches(name, GROUP_CONFIG_KEYS, n=1)
            hint = (
                f"did you mean {close[0]!r}?"
                if close
                else "known: " + ", ".join(sorted(GROUP_CONFIG_KEYS))
            )
            raise click.UsageError(f"unknown group config {name!r} ({hint})")


@share_groups.command()
@_group_argument
@click.option(
    "--set",
    "set_texts",
    multiple=True,
    metavar="KEY=VALUE",
    help="A group setting to set, e.g. share.auto.offset.reset=earliest (repeatable).",
)
@click.option(
    "--delete",
    "delete_names",
    multiple=True,
    metavar="KEY",
    help="A group setting to remove, back to the broker's default (repeatable).",
)
@bootstrap_option
def configure(
    *,
    group_id: str,
    set_texts: tuple[str, ...],
    delete_names: tuple[str, ...],
    bootstrap_server: str,
) -> None:
    """Set or remove settings of share group GROUP (it need not exist yet).

    For example, to read what a topic already holds rather than only new records:
    --set share.auto.offset.reset=earliest.
    """
    configs = parse_key_values(set_texts, "--set")
    if not configs and not delete_names:
        raise click.UsageError("give --set KEY=VALUE or --delete KEY (repeatable)")
    _check_group_config_names([*configs, *delete_names])

    async def alter() -> None:
        async with open_cluster(bootstrap_server) as cluster:
            await alter_share_group_configs(
                Admin(cluster), group_id, set_configs=configs, delete_configs=delete_names
            )

    run(alter)
    changes = [f"{k}={v}" for k, v in configs.items()] + [f"-{k}" for k in delete_names]
    click.echo(f"Configured share group {group_id}: {', '.join(changes)}.")


__all__ = ["share_groups"]
