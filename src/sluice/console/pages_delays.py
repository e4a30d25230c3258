"""The delays page: how many delayed records wait in each topic and when the next is
due; a cluster whose topics do not carry Sluice's delay config is not asked."""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from sluice.client.admin_delays import PartitionDelays, describe_delays
from sluice.client.cluster import TopicMetadata
from sluice.common import errors
from sluice.common.errors import KafkaError
from sluice.console import features
from sluice.console.keys import CLIENTS_KEY
from sluice.console.rendering import kafka_detail, render

DELAY_TOPICS_MAX = 200
"""Topics asked about on one load of the delays page (by name)."""


async def delays_page(request: web.Request) -> web.Response:
    """How many delayed records wait in each topic and when the next is due, asked of
    each partition's leader (SluiceDescribeDelays). A cluster whose topics do not carry
    Sluice's delay config is not asked at all."""
    admin = request[CLIENTS_KEY].admin
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
            return kafka_detail(e)  # deleted meanwhile, or not ours to read

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
