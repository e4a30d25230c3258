"""The console's aiohttp application: routes, pages, the produce form, error pages.

Besides brokers, topics, records and consumer groups, pages show what Sluice adds and
Kafka's protocol can reach: share groups (KIP-932) on the group pages, open
transactions (``/transactions``), delayed records (``/delays`` and each topic's page)
and tag-filtered views (each topic's page). Against a cluster that lacks one (an older
Kafka, or ACLs that refuse it) the page says so instead of failing.

``make_app(bootstrap, client_options)`` builds the application; it opens its client
(one :class:`~sluice.client.admin_api.Admin`) and starts the sampler when the app starts,
and closes both when it stops (``cleanup_ctx``). Every read goes through the client; the
only write is the produce form, which must be confirmed, carries a per-app CSRF token and
must come from a page of this console (Origin or Referer), and is switched off entirely
with ``read_only=True``.

The paths ``/metrics``, ``/health`` and ``/ready`` are left free: a broker that mounts the
console adds its own handlers there.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import random
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import jinja2
from aiohttp import web

from sluice import __version__
from sluice.client.admin import NO_OFFSET, Admin, ConfigEntry, ListedOffset, OffsetSpec
from sluice.client.admin_api import Admin as OwningAdmin
from sluice.client.admin_delays import PartitionDelays, describe_delays
from sluice.client.admin_share_groups import (
    SHARE_GROUP_TYPE,
    describe_share_group,
    share_group_offsets,
)
from sluice.client.admin_transactions import (
    TransactionDescription,
    TransactionListing,
    describe_transactions,
    list_transactions,
)
from sluice.client.cluster import NO_LEADER, TopicMetadata
from sluice.client.consumer import ConsumedRecord, fetch_partitions
from sluice.client.errors import BrokerUnreachableError, ClientError, UnsupportedApiError
from sluice.client.groups import GroupState
from sluice.client.partitioner import partition_for_key
from sluice.client.producer import produce_batch
from sluice.common import errors
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition
from sluice.console import charts, features, formatting
from sluice.console.sampler import INTERVAL_S_DEFAULT, PartitionLag, Sampler, share_lags
from sluice.protocol.records.builder import RecordInput

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"

CLIENT_ID = "sluice-console"
MESSAGES_LIMIT_DEFAULT = 20
MESSAGES_LIMIT_MAX = 500
FETCH_ROUNDS_MAX = 20
"""Fetches one page of the message browser may take (batches can be small)."""
REFRESH_S_MIN = 1.0
"""Pages refresh their live parts as often as the sampler samples, at most once a second."""
TRANSACTIONS_MAX = 200
"""Transactional ids described on one load of the transactions page (open ones first)."""
DESCRIBE_TRANSACTION_TIMEOUT_S = 5.0
DELAY_TOPICS_MAX = 200
"""Topics asked about on one load of the delays page (by name)."""
DELAYS_SHOWN = 5
"""Next waiting records shown per partition on a topic's page."""
VIEW_CANDIDATES_MAX = 20
"""Topics whose configs are read to find the views of a topic (one request each)."""
VIEWS_TTL_S = 30.0
"""How long the views found over a topic are reused (the topic page refreshes itself)."""
RESERVED_PATHS = ("/metrics", "/health", "/ready")
"""Served by the broker when it mounts the console; never routes of the console."""

ADMIN_KEY = web.AppKey("admin", Admin)
SAMPLER_KEY = web.AppKey("sampler", Sampler)
SETTINGS_KEY = web.AppKey("settings", dict[str, Any])
TEMPLATES_KEY = web.AppKey("templates", jinja2.Environment)
VIEWS_KEY = web.AppKey("views", dict[str, tuple[float, list[features.ViewOver], bool]])

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def make_app(
    bootstrap: str,
    client_options: Mapping[str, object],
    *,
    read_only: bool = False,
    sample_interval_s: float = INTERVAL_S_DEFAULT,
) -> web.Application:
    """The console for the cluster at ``bootstrap``. ``client_options`` are the client's
    security keywords (``security_protocol``, ``ssl_*``, ``sasl_*``)."""
    app = web.Application(middlewares=[_security_headers, _error_pages])
    app[SETTINGS_KEY] = {
        "bootstrap": bootstrap,
        "read_only": read_only,
        "csrf_token": secrets.token_urlsafe(32),
        "interval_s": sample_interval_s,
    }
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.globals.update(
        version=__version__,
        format_size=formatting.format_size,
        format_time_ms=formatting.format_timestamp_ms,
        format_time_s=lambda s: formatting.format_timestamp_ms(int(s * 1000)),
        format_duration_ms=formatting.format_duration_ms,
        format_rate=_format_rate,
    )
    app[TEMPLATES_KEY] = environment
    app[VIEWS_KEY] = {}

    async def client_context(app: web.Application) -> AsyncIterator[None]:
        admin = OwningAdmin(bootstrap, client_id=CLIENT_ID, **client_options)  # type: ignore[arg-type]
        sampler = Sampler(admin, interval_s=sample_interval_s)
        app[ADMIN_KEY] = admin
        app[SAMPLER_KEY] = sampler
        task = asyncio.create_task(sampler.run(), name="console-sampler")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await admin.close()

    app.cleanup_ctx.append(client_context)
    app.router.add_get("/", cluster_page)
    app.router.add_get("/topics", topics_page)
    app.router.add_get("/topics/{name}", topic_page)
    app.router.add_get("/topics/{name}/messages", messages_page)
    app.router.add_post("/topics/{name}/produce", produce)
    app.router.add_get("/topics/{name}/produced", produced_page)
    app.router.add_get("/groups", groups_page)
    app.router.add_get("/groups/{group_id:.+}", group_page)  # group ids may hold "/"
    app.router.add_get("/transactions", transactions_page)
    app.router.add_get("/delays", delays_page)
    app.router.add_static("/static", STATIC)
    return app


# ── rendering and errors ───────────────────────────────────────────────────────────────


def _format_rate(rate: float | None) -> str:
    if rate is None:
        return "–"
    return f"{rate:,.1f}/s"


def render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    settings = request.app[SETTINGS_KEY]
    sampler = request.app.get(SAMPLER_KEY)
    body = (
        request.app[TEMPLATES_KEY]
        .get_template(template)
        .render(
            bootstrap=settings["bootstrap"],
            read_only=settings["read_only"],
            interval_s=settings["interval_s"],
            refresh_ms=int(max(settings["interval_s"], REFRESH_S_MIN) * 1000),
            sampler=sampler,
            path=request.path,
            **context,
        )
    )
    return web.Response(text=body, status=status, content_type="text/html")


def _error(request: web.Request, status: int, title: str, detail: str) -> web.Response:
    return render(request, "error.html", status=status, title=title, detail=detail)


SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; object-src 'none'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}
"""Only the console's own scripts, styles and forms; never inside another site's frame."""


@web.middleware
async def _security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    response.headers.update(SECURITY_HEADERS)
    return response


@web.middleware
async def _error_pages(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Failures as pages: 404 for what does not exist, 503 when the cluster cannot be
    reached (naming the bootstrap address), 502 for other refusals of the cluster."""
    bootstrap = request.app[SETTINGS_KEY]["bootstrap"]
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return _error(request, 404, "Not found", f"There is no page at {request.path}.")
    except web.HTTPBadRequest as e:
        return _error(request, 400, "Bad request", e.text or "The request does not make sense.")
    except errors.UnknownTopicOrPartition as e:
        return _error(request, 404, "Unknown topic or partition", _kafka_detail(e))
    except BrokerUnreachableError as e:
        return _error(
            request, 503, "Cluster unreachable", f"Bootstrap {bootstrap} did not answer: {e}"
        )
    except ClientError as e:
        return _error(request, 503, "Cluster unreachable", f"Bootstrap {bootstrap}: {e}")
    except KafkaError as e:
        return _error(request, 502, "The cluster refused", _kafka_detail(e))


def _kafka_detail(error: KafkaError) -> str:
    return str(error).removeprefix(f"{error.code.name.upper()}: ")


def _int_query(request: web.Request, name: str, default: int | None) -> int | None:
    text = request.query.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be a whole number, not {text!r}") from None


# ── cluster ────────────────────────────────────────────────────────────────────────────


async def cluster_page(request: web.Request) -> web.Response:
    admin = request.app[ADMIN_KEY]
    description = await admin.describe_cluster()
    metadata = await admin.cluster.metadata(None)
    topics = sorted(
        (t for t in metadata.topics.values() if t.error_code == errors.ErrorCode.none),
        key=lambda t: t.name,
    )
    leaders: dict[int, int] = {broker.node_id: 0 for broker in description.brokers}
    replicas: dict[int, int] = dict.fromkeys(leaders, 0)
    under_replicated = 0
    for topic in topics:
        for partition in topic.partitions:
            if partition.leader_id != NO_LEADER:
                leaders[partition.leader_id] = leaders.get(partition.leader_id, 0) + 1
            for replica in partition.replica_ids:
                replicas[replica] = replicas.get(replica, 0) + 1
            under_replicated += len(partition.isr_ids) < len(partition.replica_ids)
    show_internal = request.query.get("internal") == "1"
    return render(
        request,
        "cluster.html",
        description=description,
        topics=topics,
        listed=[t for t in topics if show_internal or not t.is_internal],
        show_internal=show_internal,
        leaders=leaders,
        replicas=replicas,
        under_replicated=under_replicated,
        no_leader=NO_LEADER,
    )


# ── topics ─────────────────────────────────────────────────────────────────────────────


async def topics_page(request: web.Request) -> web.Response:
    admin = request.app[ADMIN_KEY]
    sampler = request.app[SAMPLER_KEY]
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
    admin = request.app[ADMIN_KEY]
    sampler = request.app[SAMPLER_KEY]
    name = request.match_info["name"]
    topic = await admin.describe_topic(name)
    configs, (start, end), sizes = await asyncio.gather(
        admin.describe_topic_configs(name), _offsets(admin, topic), _sizes(admin, topic)
    )
    view = features.view_of(configs)
    delays_offered = features.offers_delayed_delivery(configs)
    views: list[features.ViewOver] = []
    views_capped = False
    delays: list[PartitionDelays] | str = []
    if view is None:  # a view has no views over it and no delays of its own
        (views, views_capped), delays = await asyncio.gather(
            _cached_views_over(request.app, topic),
            _topic_delays(admin, name, offered=delays_offered),
        )
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
        csrf_token=request.app[SETTINGS_KEY]["csrf_token"],
        no_leader=NO_LEADER,
        view=view,
        views=views,
        views_capped=views_capped,
        delays_offered=delays_offered,
        delays=delays if isinstance(delays, list) else [],
        delays_refused=delays if isinstance(delays, str) else "",
        delays_total=features.topic_delays(name, delays if isinstance(delays, list) else []),
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
        return _kafka_detail(e)


async def _cached_views_over(
    app: web.Application, source: TopicMetadata
) -> tuple[list[features.ViewOver], bool]:
    cache = app[VIEWS_KEY]
    now = time.monotonic()
    cached = cache.get(source.name)
    if cached is not None and now - cached[0] < VIEWS_TTL_S:
        return cached[1], cached[2]
    views, capped = await _views_over(app[ADMIN_KEY], source)
    if len(cache) > len(app[SAMPLER_KEY].topics) + 100:
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


# ── message browser ────────────────────────────────────────────────────────────────────


async def messages_page(request: web.Request) -> web.Response:
    admin = request.app[ADMIN_KEY]
    name = request.match_info["name"]
    topic = await admin.describe_topic(name)
    partition = _int_query(request, "partition", 0)
    assert partition is not None
    topic.partition(partition)  # an unknown partition is a 404
    limit = _int_query(request, "limit", MESSAGES_LIMIT_DEFAULT)
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
    offset = _int_query(request, "offset", None)
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


# ── producing a test message ───────────────────────────────────────────────────────────


def _parse_headers(text: str) -> list[tuple[str, bytes]]:
    headers = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, separator, value = line.partition("=")
        if not separator or not name.strip():
            raise web.HTTPBadRequest(text=f"header line {line!r} is not name=value")
        headers.append((name.strip(), value.encode()))
    return headers


def _same_origin(request: web.Request) -> bool:
    """The form was posted from a page of this console: its Origin (or, without one, its
    Referer) names this host."""
    origin = request.headers.get("Origin")
    if origin and origin != "null":
        return urlsplit(origin).netloc == request.host
    referer = request.headers.get("Referer")
    if referer:
        return urlsplit(referer).netloc == request.host
    return False


async def produce(request: web.Request) -> web.Response:
    """The produce form: without ``confirm`` it renders what would be written; with it,
    writes exactly that one record and shows where it went."""
    settings = request.app[SETTINGS_KEY]
    if settings["read_only"]:
        return _error(request, 403, "Read-only console", "This console does not write.")
    form = await request.post()
    token = str(form.get("csrf_token", ""))
    if not hmac.compare_digest(token, settings["csrf_token"]) or not _same_origin(request):
        return _error(
            request,
            403,
            "Refused",
            "The form did not come from this console (missing or wrong CSRF token, or "
            "another origin). Reload the topic page and try again.",
        )
    admin = request.app[ADMIN_KEY]
    name = request.match_info["name"]
    topic = await admin.describe_topic(name)
    key_text = str(form.get("key", ""))
    value_text = str(form.get("value", ""))
    headers_text = str(form.get("headers", ""))
    headers = _parse_headers(headers_text)
    key = key_text.encode() if key_text else None
    partition_text = str(form.get("partition", "")).strip()
    if partition_text:
        try:
            partition = int(partition_text)
        except ValueError:
            raise web.HTTPBadRequest(text=f"partition {partition_text!r} is not a number") from None
        topic.partition(partition)
    elif key is not None:
        partition = partition_for_key(key, len(topic.partitions))
    else:
        partition = random.randrange(len(topic.partitions))
    fields = {
        "partition": partition,
        "key": key_text,
        "value": value_text,
        "headers": headers_text,
    }
    if form.get("confirm") != "yes":
        return render(
            request,
            "confirm.html",
            topic=topic,
            fields=fields,
            header_list=[(n, v.decode()) for n, v in headers],
            csrf_token=settings["csrf_token"],
        )
    result = await produce_batch(
        admin.cluster,
        TopicPartition(name, partition),
        [RecordInput(key, value_text.encode(), tuple(headers))],
    )
    # Post/redirect/get: reloading the result page must not write the record again.
    raise web.HTTPSeeOther(
        f"/topics/{quote(name)}/produced?partition={partition}&offset={result.base_offset}"
    )


async def produced_page(request: web.Request) -> web.Response:
    """Where a confirmed test record went (the produce form redirects here)."""
    admin = request.app[ADMIN_KEY]
    topic = await admin.describe_topic(request.match_info["name"])
    partition = _int_query(request, "partition", None)
    offset = _int_query(request, "offset", None)
    if partition is None or offset is None:
        raise web.HTTPBadRequest(text="partition and offset are needed")
    return render(request, "produced.html", topic=topic, partition=partition, offset=offset)


# ── groups ─────────────────────────────────────────────────────────────────────────────


async def groups_page(request: web.Request) -> web.Response:
    admin = request.app[ADMIN_KEY]
    sampler = request.app[SAMPLER_KEY]
    listings = await admin.list_groups()
    lags: dict[str, int] = {
        listing.group_id: sum(lag.lag for lag in history.lag.values())
        for listing in listings
        if (history := sampler.group(listing.group_id)) is not None
    }
    return render(request, "groups.html", listings=listings, lags=lags)


async def group_page(request: web.Request) -> web.Response:
    admin = request.app[ADMIN_KEY]
    sampler = request.app[SAMPLER_KEY]
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
        return _error(request, 404, "Unknown group", f"There is no group {group_id!r}.")
    ends = await admin.list_offsets(sorted(committed), OffsetSpec.LATEST) if committed else {}
    lags = [
        PartitionLag(tp, offset.offset, ends[tp].offset)
        for tp, offset in sorted(committed.items())
        if tp in ends
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
        total_lag=sum(lag.lag for lag in lags),
        chart=chart,
        events=sampler.timeline(group_id),
    )


async def share_group_page(request: web.Request, group_id: str) -> web.Response:
    """A share group (KIP-932): members, each partition's start offset and lag, the lag
    over time and the membership timeline. Raises GroupIdNotFound for no such group."""
    admin = request.app[ADMIN_KEY]
    sampler = request.app[SAMPLER_KEY]
    description, offsets = await asyncio.gather(
        describe_share_group(admin, group_id), share_group_offsets(admin, group_id)
    )
    read = sorted(tp for tp, offset in offsets.items() if offset.start_offset >= 0)
    ends = await admin.list_offsets(read, OffsetSpec.LATEST) if read else {}
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
        total_lag=sum(lag.lag for lag in lags.values()),
        chart=chart,
        events=sampler.timeline(group_id),
    )


# ── transactions ───────────────────────────────────────────────────────────────────────


def _refusal(error: KafkaError | UnsupportedApiError) -> str:
    if isinstance(error, KafkaError):
        return f"{error.code.name.replace('_', ' ')}: {_kafka_detail(error)}"
    return str(error)


async def transactions_page(request: web.Request) -> web.Response:
    """Every transactional id (ListTransactions) with what its coordinator says of it
    (DescribeTransactions): open ones first, those open past their timeout marked."""
    admin = request.app[ADMIN_KEY]
    try:
        listings = await list_transactions(admin.cluster)
    except (KafkaError, UnsupportedApiError) as e:
        # An older Kafka without these APIs, or ACLs that refuse them: say so.
        return render(request, "transactions.html", rows=[], refused=_refusal(e), capped=0)
    ordered = features.listing_order(listings)
    shown = ordered[:TRANSACTIONS_MAX]

    async def describe(listing: TransactionListing) -> TransactionDescription | None:
        try:
            (described,) = await describe_transactions(
                admin.cluster,
                [listing.transactional_id],
                timeout_s=DESCRIBE_TRANSACTION_TIMEOUT_S,
            )
        except (KafkaError, UnsupportedApiError):
            return None  # expired meanwhile, or refused: the listing is all there is
        return described

    descriptions = await asyncio.gather(*(describe(listing) for listing in shown))
    now_ms = int(time.time() * 1000)
    rows = features.row_order(
        features.transaction_row(listing, description, now_ms)
        for listing, description in zip(shown, descriptions, strict=True)
    )
    return render(
        request,
        "transactions.html",
        rows=rows,
        refused="",
        capped=len(ordered) - len(shown),
        is_open=features.is_open,
    )


# ── delayed delivery ───────────────────────────────────────────────────────────────────


async def delays_page(request: web.Request) -> web.Response:
    """How many delayed records wait in each topic and when the next is due, asked of
    each partition's leader (SluiceDescribeDelays). A cluster whose topics do not carry
    Sluice's delay config is not asked at all."""
    admin = request.app[ADMIN_KEY]
    topics = await admin.list_topics()
    if not topics:
        return render(request, "delays.html", offered=None, rows=[])
    offered = features.offers_delayed_delivery(await admin.describe_topic_configs(topics[0].name))
    if not offered:
        return render(request, "delays.html", offered=False, rows=[])
    asked = topics[:DELAY_TOPICS_MAX]

    async def of(topic: TopicMetadata) -> list[PartitionDelays] | str | None:
        """The topic's delays; None for a view (no delays of its own, and no leader of
        its own to answer: its configs say so); the refusal of any other topic."""
        try:
            return await describe_delays(admin.cluster, topic.name, limit=0)
        except KafkaError as e:
            if e.code == errors.ErrorCode.not_leader_or_follower:
                with contextlib.suppress(KafkaError):
                    if features.view_of(await admin.describe_topic_configs(topic.name)):
                        return None
            return _kafka_detail(e)  # deleted meanwhile, or not ours to read

    answers = await asyncio.gather(*(of(topic) for topic in asked))
    totals = [
        features.topic_delays(topic.name, answer)
        for topic, answer in zip(asked, answers, strict=True)
        if isinstance(answer, list)
    ]
    rows = [total for total in totals if total.pending or total.fired]
    rows.sort(key=lambda t: (t.next_due_ms is None, t.next_due_ms or 0, t.topic))
    return render(
        request,
        "delays.html",
        offered=True,
        rows=rows,
        quiet=len(totals) - len(rows),
        views=sum(1 for answer in answers if answer is None),
        failed=[
            (topic.name, answer)
            for topic, answer in zip(asked, answers, strict=True)
            if isinstance(answer, str)
        ],
        capped=len(topics) - len(asked),
    )
