"""``sluice share-groups`` run as a user runs it (a subprocess) against a real broker,
with sluice.ShareConsumer as the group's members. Waits poll with deadlines."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest
from broker_process import BrokerProcess
from client_helpers import (
    create_topic,
    produce_and_flush,
    producer_config,
    run_sluice,
    unique_group_id,
)
from confluent_kafka import Producer

import sluice

TIMEOUT_S = 30.0
T = TypeVar("T")


@pytest.fixture(scope="module")
def broker(fast_groups_broker: BrokerProcess) -> BrokerProcess:
    return fast_groups_broker


def run(coroutine: Awaitable[T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coroutine, TIMEOUT_S * 3)

    return asyncio.run(bounded())


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer(producer_config(bootstrap))
    produce_and_flush(producer, topic, [{"value": b"job", "partition": 0} for _ in range(count)])


def share_group(bootstrap: str) -> str:
    """A new share group that starts at the earliest offset (set with the CLI)."""
    group_id = unique_group_id()
    configured = ok(bootstrap, "configure", group_id, "--set", "share.auto.offset.reset=earliest")
    assert f"Configured share group {group_id}: share.auto.offset.reset=earliest." in configured
    return group_id


async def accept(bootstrap: str, topic: str, group_id: str, count: int) -> None:
    """A share consumer that accepts ``count`` records, then leaves."""
    async with sluice.ShareConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group_id,
        acknowledgement_mode="explicit",
        max_poll_records=1,
    ) as member:
        done = 0
        deadline = time.monotonic() + TIMEOUT_S
        while done < count:
            assert time.monotonic() < deadline, f"only {done} of {count} records arrived"
            for record in await member.poll(0.5):
                member.accept(record)
                done += 1
        results = await member.commit()
        assert all(error is None for error in results.values()), results


def ok(bootstrap: str, *args: str) -> str:
    result = run_sluice(bootstrap, "share-groups", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def refused(bootstrap: str, *args: str) -> str:
    """The one-line error of a command that must fail (no traceback)."""
    result = run_sluice(bootstrap, "share-groups", *args)
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    return result.stderr


def describe_json(bootstrap: str, group_id: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(ok(bootstrap, "describe", group_id, "--format", "json"))
    return document


def test_list_and_describe_show_the_group_its_members_offsets_and_lag(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 10)
    group_id = share_group(broker.bootstrap)
    run(accept(broker.bootstrap, topic, group_id, 4))

    listed = json.loads(ok(broker.bootstrap, "list", "--format", "json"))
    assert {"group": group_id, "state": "Empty"} in listed
    assert group_id in ok(broker.bootstrap, "list")

    document = describe_json(broker.bootstrap, group_id)
    assert document["state"] == "Empty"
    assert document["member_count"] == 0
    (partition,) = document["partitions"]
    assert (partition["topic"], partition["partition"]) == (topic, 0)
    assert partition["start_offset"] == 4  # the four accepted records are done
    assert partition["lag"] == 6
    text = ok(broker.bootstrap, "describe", group_id)
    assert "START OFFSET" in text and topic in text

    async def while_a_member_is_in() -> dict[str, Any]:
        async with sluice.ShareConsumer(
            topic, bootstrap_servers=broker.bootstrap, group_id=group_id
        ) as member:
            await member.wait_for_assignment(TIMEOUT_S)
            members = json.loads(
                ok(broker.bootstrap, "describe", group_id, "--members", "--format", "json")
            )
            assert [m["member_id"] for m in members["members"]] == [member.member_id]
            return dict(members)

    members = run(while_a_member_is_in())
    assert members["state"] == "Stable"


def test_describe_of_a_missing_group_says_how_to_find_groups(broker: BrokerProcess) -> None:
    error = refused(broker.bootstrap, "describe", unique_group_id())
    assert "does not exist" in error
    assert "sluice share-groups list" in error


def test_reset_offsets_plans_then_executes_only_while_the_group_is_empty(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 10)
    group_id = share_group(broker.bootstrap)
    run(accept(broker.bootstrap, topic, group_id, 10))
    assert describe_json(broker.bootstrap, group_id)["partitions"][0]["start_offset"] == 10

    dry_run = ok(broker.bootstrap, "reset-offsets", group_id, "--topic", topic, "--to-earliest")
    assert "Dry run" in dry_run
    assert describe_json(broker.bootstrap, group_id)["partitions"][0]["start_offset"] == 10

    async def refused_while_a_member_is_in() -> str:
        async with sluice.ShareConsumer(
            topic, bootstrap_servers=broker.bootstrap, group_id=group_id
        ) as member:
            await member.wait_for_assignment(TIMEOUT_S)
            return refused(
                broker.bootstrap,
                "reset-offsets",
                group_id,
                "--topic",
                topic,
                "--to-earliest",
                "--execute",
            )

    assert "stop its share consumers first" in run(refused_while_a_member_is_in())

    executed = ok(
        broker.bootstrap,
        "reset-offsets",
        group_id,
        "--topic",
        topic,
        "--to-offset",
        "3",
        "--execute",
    )
    assert "Reset the start offsets" in executed
    (partition,) = describe_json(broker.bootstrap, group_id)["partitions"]
    assert partition["start_offset"] == 3
    run(accept(broker.bootstrap, topic, group_id, 7))  # offsets 3..9 are delivered again

    ok(broker.bootstrap, "reset-offsets", group_id, "--topic", topic, "--to-latest", "--execute")
    assert describe_json(broker.bootstrap, group_id)["partitions"][0]["start_offset"] == 10


def test_reset_offsets_needs_exactly_one_target(broker: BrokerProcess, topic: str) -> None:
    error = refused(
        broker.bootstrap, "reset-offsets", "g", "--topic", topic, "--to-earliest", "--to-latest"
    )
    assert "exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset" in error


def test_delete_removes_an_empty_group(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 1)
    group_id = share_group(broker.bootstrap)
    run(accept(broker.bootstrap, topic, group_id, 1))

    assert f"Deleted share group {group_id}." in ok(broker.bootstrap, "delete", group_id)
    listed = json.loads(ok(broker.bootstrap, "list", "--format", "json"))
    assert group_id not in [g["group"] for g in listed]
    assert "does not exist" in refused(broker.bootstrap, "delete", group_id)


def test_configure_refuses_unknown_settings_and_bad_values(broker: BrokerProcess) -> None:
    group_id = unique_group_id()
    typo = refused(broker.bootstrap, "configure", group_id, "--set", "share.auto.ofset.reset=x")
    assert "did you mean 'share.auto.offset.reset'?" in typo
    bad = refused(broker.bootstrap, "configure", group_id, "--set", "share.auto.offset.reset=soon")
    assert "soon" in bad
    assert "give --set KEY=VALUE or --delete KEY" in refused(
        broker.bootstrap, "configure", group_id
    )
