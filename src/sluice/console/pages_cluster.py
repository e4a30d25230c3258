"""The cluster page (brokers, their leaders and replicas), the topics list and a topic's
page: its partitions' offsets, sizes and rates, its configs, the views over it and its
delayed records."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from sluice.client.admin import Admin, ConfigEntry, ListedOffset, OffsetSpec
from sluice.client.admin_delays import PartitionDelays, describe_delays
from sluice.client.cluster import NO_LEADER, TopicMetadata
from sluice.client.cluster_health import ClusterHealth
from sluice.client.errors import ClientError
from sluice.common import errors
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition
from sluice.console import charts, features
from sluice.console.brokers import broker_disks, broker_rows
from sluice.console.clients import ConsoleClients
from sluice.console.keys import CLIENTS_KEY
from sluice.console.pages_schemas import topic_subjects
from sluice.console.rendering import kafka_detail, render

DELAYS_SHOWN = 5
"""Next waiting records shown per partition on a topic's page."""
VIEW_CANDIDATES_MAX = 20
"""Topics whose configs are read to find the views of a topic (one request each)."""
VIEWS_TTL_S = 30.0
"""How long the views found over a topic are reused (the topic page refreshes itself)."""


async def cluster_page(request: web.Request) -> web.Response:
    admin = request[CLIENTS_KEY].admin
    sampler = request[CLIENTS_KEY].sampler
    description = await admin.describe_cluster()
    metadata = await admin.cluster.metadata(None)
    topics = sorted(
        (t for t in metadata.topics.values() if t.error_code == errors.ErrorCode.none),
        key=lambda t: t.name,
    )
    health = ClusterHealth(description, topics)
    disks = await broker_disks(admin, health.live)
    brokers = broker_rows(health, sampler.brokers, disks)
    show_internal = request.query.get("internal") == "1"
    return render(
        request,
        "cluster.html",
        description=description,
        topics=topics,
        listed=[t for t in topics if show_internal or not t.is_internal],
        show_internal=show_internal,
        brokers=brokers,
        brokers_down=[b for b in brokers if not b.up],
        offline=health.offline(),
        under_replicated=health.under_replicated(),
        live=health.live,
        no_leader=NO_LEADER,
    )


async def topics_page(request: web.Request) -> web.Response:
    admin = request[CLIENTS_KEY].admin
    sampler = request[CLIENTS_KEY].sampler
    topics = await admin.list_topics(include_internal=True)
    rates = {rate.topic: rate.records_per_s for rate in sampler.topic_rates()}
    return render(request, "topics.html", topics=topics, rates=rates)


async def _offsets(
    admin: Admin, topic: TopicMetadata
) -> tuple[dict[TopicPartition, ListedOffset], dict[TopicPartition, ListedOffset]]:
    partitions = [p.topic_partition for p in topic.partitions if p.leader_id != NO_LEADER]
    if not partitions:
        return {}, {}
    start, end = await asyncio.gather(
        admin.list_offsets(partitions, OffsetSpec.EARLIEST),
        admin.list_offsets(partitions, OffsetSpec.LATEST),
    )
    return start, end


async def _sizes(admin: Admin, topic: TopicMetadata) -> dict[TopicPartition, int]:
    """Each partition's size on its leader (DescribeLogDirs); empty when the cluster
    will not say (an old broker, or no permission)."""
    leaders = {p.leader_id for p in topic.partitions if p.leader_id != NO_LEADER}
    try:
        described = await admin.describe_log_dirs(
            [p.topic_partition for p in topic.partitions], brokers=sorted(leaders)
        )
    except (KafkaError, ClientError):
        return {}
    sizes: dict[TopicPartition, int] = {}
    for partition in topic.partitions:
        for log_dir in described.get(partition.leader_id, []):
            replica = log_dir.replicas.get(partition.topic_partition)
            if replica is not None and not replica.is_future:
                sizes[partition.topic_partition] = replica.size_bytes
    return sizes


async def topic_page(request: web.Request) -> web.Response:
    admin = request[CLIENTS_KEY].admin
    sampler = request[CLIENTS_KEY].sampler
    name = request.match_info["name"]
    topic = await admin.describe_topic(name)
    configs, (start, end), sizes, described, subjects = await asyncio.gather(
        admin.describe_topic_configs(name),
        _offsets(admin, topic),
        _sizes(admin, topic),
        admin.describe_cluster(),
        topic_subjects(request[CLIENTS_KEY].registry, name),
    )
    view = features.view_of(configs)
    delays_offered = features.offers_delayed_delivery(configs)
    views: list[features.ViewOver] = []
    views_capped = False
    delays: list[PartitionDelays] | str = []
    if view is None:  # a view has no views over it and no delays of its own
        (views, views_capped), delays = await asyncio.gather(
            _cached_views_over(request[CLIENTS_KEY], topic),
            _topic_delays(admin, name, offered=delays_offered),
        )
    health = ClusterHealth(described, [topic])
    rate_series = sampler.topic_rate_series(name)
    chart = charts.line_chart(
        [charts.Series(name, rate_series)],
        title=f"Produce rate of {name}",
        y_label="records/s",
    )
    return render(
        request,
        "topic.html",
        topic=topic,
        configs=sorted(configs.values(), key=lambda c: c.name),
        start=start,
        end=end,
        sizes=sizes,
        rate=next((r.records_per_s for r in sampler.topic_rates() if r.topic == name), None),
        partition_rates={
            p.partition: sampler.partition_rate(p.topic_partition) for p in topic.partitions
        },
        chart=chart,
        live=health.live,
        offline=[p.partition for p in health.offline()],
        under_replicated=[p.partition for p in health.under_replicated()],
        down_brokers=health.down_brokers(),
        consumers=sampler.consumers_of(name),
        groups_capped=sampler.groups_capped,
        groups_max=sampler.max_groups,
        csrf_token=request[CLIENTS_KEY].csrf_token,
        no_leader=NO_LEADER,
        view=view,
        views=views,
        views_capped=views_capped,
        delays_offered=delays_offered,
        delays=delays if isinstance(delays, list) else [],
        delays_refused=delays if isinstance(delays, str) else "",
        delays_total=features.topic_delays(name, delays if isinstance(delays, list) else []),
        subjects=subjects,
    )


async def _topic_delays(admin: Admin, name: str, *, offered: bool) -> list[PartitionDelays] | str:
    """What waits in each partition of the topic (nothing where delayed delivery is not
    ``offered``: the cluster is not asked), or why the cluster would not say (not ours
    to read, say: the rest of the page still shows)."""
    if not offered:
        return []
    try:
        return await describe_delays(admin.cluster, name, limit=DELAYS_SHOWN)
    except KafkaError as e:
        return kafka_detail(e)


async def _cached_views_over(
    clients: ConsoleClients, source: TopicMetadata
) -> tuple[list[features.ViewOver], bool]:
    cache = clients.views
    now = time.monotonic()
    cached = cache.get(source.name)
    if cached is not None and now - cached[0] < VIEWS_TTL_S:
        return cached[1], cached[2]
    views, capped = await _views_over(clients.admin, source)
    if len(cache) > len(clients.sampler.topics) + 100:
        cache.clear()  # bounded: entries of deleted topics go too
    cache[source.name] = (now, views, capped)
    return views, capped


async def _views_over(admin: Admin, source: TopicMetadata) -> tuple[list[features.ViewOver], bool]:
    """The views whose source is ``source`` (name and filter), and whether there were
    more candidates than were checked. Only topics laid out like the source can be
    views of it; at most ``VIEW_CANDIDATES_MAX`` of their configs are read."""
    candidates = features.view_candidates(source, await admin.list_topics())
    checked = candidates[:VIEW_CANDIDATES_MAX]

    async def configs_of(name: str) -> dict[str, ConfigEntry]:
        try:
            return await admin.describe_topic_configs(name)
        except KafkaError:
            return {}  # deleted meanwhile, or not ours to describe

    found = await asyncio.gather(*(configs_of(name) for name in checked))
    views = [
        features.ViewOver(name, view.filter)
        for name, configs in zip(checked, found, strict=True)
        if (view := features.view_of(configs)) is not None and view.source == source.name
    ]
    return views, len(candidates) > len(checked)
