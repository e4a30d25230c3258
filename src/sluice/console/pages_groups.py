"""The groups list and a group's page: a classic group's members, committed offsets and
lag, a consumer group's (KIP-848) epochs, members with their epochs and current, target
and pending assignments, committed offsets and lag, or a share group's (KIP-932)
members, start offsets and lag, each with the lag over time and the membership timeline.

A partition assigned without a committed offset shows its lag as unknown (–), and so
does a group with no known lag. Bookkeeping groups (Spark's exactly-once progress) are
left out of the list unless ``?all=1``, then marked; their page shows no lag."""

from __future__ import annotations

import asyncio

from aiohttp import web

from sluice.client.admin_share_groups import (
    SHARE_GROUP_TYPE,
    describe_share_group,
    share_group_offsets,
)
from sluice.client.errors import UnsupportedApiError
from sluice.client.groups import GroupState
from sluice.common import errors
from sluice.common.bookkeeping_groups import is_bookkeeping_group
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition
from sluice.console import charts
from sluice.console.keys import CLIENTS_KEY
from sluice.console.rendering import error_page, render
from sluice.console.sampler import PartitionLag, known_total_lag, share_lags


async def groups_page(request: web.Request) -> web.Response:
    admin = request[CLIENTS_KEY].admin
    sampler = request[CLIENTS_KEY].sampler
    show_all = request.query.get("all", "") not in ("", "0")
    listings = await admin.list_groups()
    lags: dict[str, int | None] = {
        listing.group_id: history.total
        for listing in listings
        if (history := sampler.group(listing.group_id)) is not None
    }
    bookkeeping = {
        listing.group_id
        for listing in listings
        if ((history := sampler.group(listing.group_id)) is not None and history.bookkeeping)
        or is_bookkeeping_group(  # by its name, before the sampler saw its offsets
            listing.group_id,
            protocol_type=listing.protocol_type,
            member_count=0 if listing.state == GroupState.EMPTY else 1,
        )
    }
    shown = [g for g in listings if show_all or g.group_id not in bookkeeping]
    return render(
        request,
        "groups.html",
        listings=shown,
        lags=lags,
        bookkeeping=bookkeeping,
        show_all=show_all,
        hidden=len(listings) - len(shown),
    )


async def group_page(request: web.Request) -> web.Response:
    admin = request[CLIENTS_KEY].admin
    sampler = request[CLIENTS_KEY].sampler
    group_id = request.match_info["group_id"]
    if any(
        listing.group_id == group_id and listing.group_type == SHARE_GROUP_TYPE
        for listing in sampler.listings
    ):
        return await share_group_page(request, group_id)
    (description,) = await admin.describe_groups([group_id])
    committed = await admin.list_group_offsets(group_id)
    if description.state == GroupState.DEAD and not committed:
        # Not a classic group: a share group the sampler has not seen yet, or none.
        try:
            return await share_group_page(request, group_id)
        except UnsupportedApiError:
            pass  # a cluster without share groups
        except KafkaError as e:
            if e.code != errors.ErrorCode.group_id_not_found:
                raise
        return error_page(request, 404, "Unknown group", f"There is no group {group_id!r}.")
    bookkeeping = is_bookkeeping_group(
        group_id,
        protocol_type=description.protocol_type,
        member_count=len(description.members),
        offset_metadata=[value.metadata for value in committed.values()],
    )
    assigned = {
        TopicPartition(topic, partition)
        for member in description.members
        for assignment in (member.assignment, member.target_assignment or {})
        for topic, partitions in assignment.items()
        for partition in partitions
    }
    wanted = sorted(set(committed) | assigned)
    ends = await sampler.latest_offsets(wanted)  # a deleted topic's partitions left out
    lags = [
        PartitionLag(
            tp,
            None if tp not in committed else committed[tp].offset,
            ends[tp].offset,
        )
        for tp in wanted
        if tp in ends and not (bookkeeping and tp in committed)
    ]
    history = sampler.group(group_id)
    chart = charts.line_chart(
        [charts.Series("total lag", list(history.total_lag) if history else [])],
        title=f"Lag of {group_id}",
        y_label="records",
    )
    return render(
        request,
        "group.html",
        group=description,
        lags=lags,
        total_lag=known_total_lag(lags),
        unknown=sum(1 for lag in lags if lag.lag is None),
        bookkeeping=bookkeeping,
        chart=chart,
        events=sampler.timeline(group_id),
    )


async def share_group_page(request: web.Request, group_id: str) -> web.Response:
    """A share group (KIP-932): members, each partition's start offset and lag, the lag
    over time and the membership timeline. Raises GroupIdNotFound for no such group."""
    admin = request[CLIENTS_KEY].admin
    sampler = request[CLIENTS_KEY].sampler
    description, offsets = await asyncio.gather(
        describe_share_group(admin, group_id), share_group_offsets(admin, group_id)
    )
    read = sorted(tp for tp, offset in offsets.items() if offset.start_offset >= 0)
    ends = await sampler.latest_offsets(read)  # a deleted topic's partitions left out
    lags = share_lags(offsets, lambda tp: ends[tp].offset if tp in ends else None)
    history = sampler.group(group_id)
    chart = charts.line_chart(
        [charts.Series("total lag", list(history.total_lag) if history else [])],
        title=f"Lag of {group_id}",
        y_label="records",
    )
    return render(
        request,
        "share_group.html",
        group=description,
        lags=list(lags.values()),
        unread=sorted(tp for tp in offsets if tp not in lags),
        total_lag=known_total_lag(lags.values()),
        chart=chart,
        events=sampler.timeline(group_id),
    )
