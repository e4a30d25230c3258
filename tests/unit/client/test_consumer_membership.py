"""The heartbeats of a consumer group member (KIP-848): what each one sends, by Kafka's
rules (everything when joining or after an error, then only what changed)."""

from __future__ import annotations

import datetime
import re
import uuid
from typing import Any

import pytest

from sluice.client.cluster import Cluster
from sluice.client.consumer_membership import (
    UNCHANGED_REBALANCE_TIMEOUT,
    ConsumerMembership,
    check_broker_pattern,
)
from sluice.client.groups import GroupCoordinators
from sluice.client.messages import build_payload
from sluice.client.share_membership import TopicIds
from sluice.common.ids import TopicPartition
from sluice.protocol.versions import ApiKey

ORDERS_ID = uuid.UUID(int=7)


async def _nothing(*_: Any) -> None:
    return None


def member(**options: Any) -> ConsumerMembership:
    cluster = Cluster("127.0.0.1:9")
    topic_ids = TopicIds(cluster)
    topic_ids.remember("orders", ORDERS_ID)
    settings: dict[str, Any] = {
        "group_id": "g",
        "rebalance_timeout_ms": 300_000,
        "group_instance_id": None,
        "rack_id": "rack-1",
        "server_assignor": "uniform",
        "on_revoke": _nothing,
        "on_assign": _nothing,
    }
    settings.update(options)
    joined = ConsumerMembership(GroupCoordinators(cluster), topic_ids, **settings)
    joined.subscribe(["orders", "audit"], None)
    return joined


def answered(joined: ConsumerMembership, epoch: int) -> dict[str, Any]:
    """The next request's fields after the previous one was answered with ``epoch``."""
    _, sent = joined._request()
    joined._sent = sent
    joined.member_epoch = epoch
    return dict(joined._request()[0].fields)


def test_the_join_sends_everything() -> None:
    joining = member(group_instance_id="instance-1")
    request, _ = joining._request()
    fields = dict(request.fields)
    assert fields["member_epoch"] == 0
    assert len(fields["member_id"]) == 22, "a random UUID, as Kafka's clients write it"
    assert fields["subscribed_topic_names"] == ["audit", "orders"]
    assert fields["subscribed_topic_regex"] is None
    assert fields["rebalance_timeout"] == datetime.timedelta(minutes=5)
    assert fields["rack_id"] == "rack-1"
    assert fields["server_assignor"] == "uniform"
    assert fields["instance_id"] == "instance-1"
    assert fields["topic_partitions"] == []
    build_payload(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, fields)  # a valid v1 request


def test_later_heartbeats_send_only_what_changed() -> None:
    joined = member(group_instance_id="instance-1")
    fields = answered(joined, 3)
    assert fields["member_epoch"] == 3
    assert fields["instance_id"] == "instance-1", "sent with every heartbeat"
    for unchanged in (
        "subscribed_topic_names",
        "subscribed_topic_regex",
        "rack_id",
        "server_assignor",
        "topic_partitions",
    ):
        assert fields[unchanged] is None, unchanged
    assert fields["rebalance_timeout"] == UNCHANGED_REBALANCE_TIMEOUT

    joined.assignment = {TopicPartition("orders", 1), TopicPartition("orders", 0)}
    fields = dict(joined._request()[0].fields)
    assert fields["topic_partitions"] == [{"topic_id": ORDERS_ID, "partitions": [0, 1]}]
    joined._sent = joined._request()[1]
    assert joined._request()[0].fields["topic_partitions"] is None, "sent once"

    joined.subscribe(["orders"], None)
    assert joined._request()[0].fields["subscribed_topic_names"] == ["orders"]


def test_after_an_error_the_request_is_full_again() -> None:
    joined = member()
    answered(joined, 4)
    joined._sent = None  # what a failed heartbeat leaves
    fields = dict(joined._request()[0].fields)
    assert fields["member_epoch"] == 4
    assert fields["subscribed_topic_names"] == ["audit", "orders"]
    assert fields["rack_id"] == "rack-1"
    assert fields["topic_partitions"] == []


def test_a_pattern_is_sent_as_text_without_names() -> None:
    joined = member()
    joined.subscribe([], re.compile("orders-.*"))
    fields = dict(joined._request()[0].fields)
    assert fields["subscribed_topic_regex"] == "orders-.*"
    assert fields["subscribed_topic_names"] is None


@pytest.mark.parametrize(
    ("pattern", "refusal"),
    [
        (re.compile(r"(a)\1"), "not valid RE2 syntax"),
        (re.compile(r"(?=a)b"), "not valid RE2 syntax"),
        (re.compile("orders", re.IGNORECASE), "compiled with flags"),
        (re.compile("a" * 40_000), "longer than"),
    ],
)
def test_patterns_the_broker_cannot_take_are_refused(
    pattern: re.Pattern[str], refusal: str
) -> None:
    with pytest.raises(ValueError, match=refusal):
        check_broker_pattern(pattern)


def test_patterns_in_re2_syntax_pass() -> None:
    check_broker_pattern(re.compile(r"(?i)orders-[a-z]+\.v\d"))
