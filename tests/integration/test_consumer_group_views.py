"""Groups of the consumer group protocol (KIP-848) as administrators see them, against a
real broker process: Sluice's admin client (ConsumerGroupDescribe), ``sluice groups
list`` and ``describe`` (text and JSON), and the broker's ``/metrics``. The members speak
ConsumerGroupHeartbeat themselves (raw requests), so the test decides exactly where the
group stands: mid-rebalance, one member still holding partitions the other awaits.

Against a broker that does not list ConsumerGroupDescribe (the protocol switched off
after the group was formed), the client falls back to ListGroups: type and state,
members unknown, as the CLI and the console's group page say.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator

import pytest
from broker_process import BrokerProcess
from client_helpers import (
    create_topic,
    run_sluice,
    unique_group_id,
)
from console_process import running_console
from consumer_group_wire import (
    CLASSIC_ONLY,
    CONSUMER_PROTOCOL_LONG_SESSIONS,
    PARTITIONS,
    RECORDS_PER_PARTITION,
    heartbeat,
    heartbeat_request,
    rebalancing_group,
)
from kafka_wire import CLIENT_ID
from metrics_scrape import scrape, value, wait_for

import sluice
from sluice.client.groups import GroupDescription

TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The consumer group protocol enabled, and the HTTP listener for ``/metrics``."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("views") / "data",
        overrides=CONSUMER_PROTOCOL_LONG_SESSIONS,
        http_port=0,
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _described(broker: BrokerProcess, *groups: str) -> list[GroupDescription]:
    async def describe() -> list[GroupDescription]:
        async with sluice.Admin(bootstrap_servers=broker.bootstrap) as admin:
            return await admin.describe_groups(list(groups))

    return asyncio.run(asyncio.wait_for(describe(), TIMEOUT_S))


def _spelled(partitions: tuple[int, ...]) -> str:
    return ",".join(map(str, partitions))


def test_admin_describes_a_consumer_group_with_epochs_and_targets(
    broker: BrokerProcess, topic: str
) -> None:
    scene = rebalancing_group(broker, topic)
    (described,) = _described(broker, scene.group)
    assert described.members[0].client_id == CLIENT_ID
    assert described.group_type == "consumer"
    assert described.state == "Reconciling"
    assert described.is_active and described.exists and described.members_described
    assert (described.group_epoch, described.assignment_epoch) == (2, 2)
    assert described.protocol == "uniform"
    members = {m.member_id: m for m in described.members}
    assert list(members) == sorted([scene.first, scene.second])
    first, second = members[scene.first], members[scene.second]
    assert (first.member_epoch, second.member_epoch) == (1, 2)
    assert first.client_id == second.client_id == CLIENT_ID
    assert first.client_host == "/127.0.0.1"  # as Kafka spells it
    assert first.subscribed_topics == (topic,) and first.subscribed_topic_regex is None
    assert second.subscribed_topics == () and second.subscribed_topic_regex is not None
    assert first.assignment == {topic: list(range(PARTITIONS))}
    assert first.target_assignment == {topic: list(scene.first_target)}
    assert first.pending_revocation == {topic: list(scene.second_target)}
    assert second.assignment == {}
    assert second.pending_assignment == {topic: list(scene.second_target)}


def test_cli_lists_the_type_and_describes_members_epochs_and_lag(
    broker: BrokerProcess, topic: str
) -> None:
    scene = rebalancing_group(broker, topic)
    listed = run_sluice(broker.bootstrap, "groups", "list")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["GROUP", "TYPE", "STATE", "PROTOCOL", "TYPE"]
    assert [scene.group, "consumer", "Reconciling", "consumer"] in [r.split() for r in rows]
    listed_json = run_sluice(broker.bootstrap, "groups", "list", "--format", "json")
    (entry,) = [g for g in json.loads(listed_json.stdout) if g["group"] == scene.group]
    assert (entry["type"], entry["state"]) == ("consumer", "Reconciling")

    text = run_sluice(broker.bootstrap, "groups", "describe", scene.group)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert (
        "type: consumer   state: Reconciling   group epoch: 2   assignment epoch: 2   "
        "assignor: uniform   members: 2" in out
    ), out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    first = lines[scene.first]
    assert first[4:8] == ["1", topic, f"{topic}:0,1,2,3", f"{topic}:{_spelled(scene.first_target)}"]
    assert first[8] == f"-{topic}:{_spelled(scene.second_target)}", out
    second = lines[scene.second]
    assert second[4:6] == ["2", "regex"], out
    awaited = f"{topic}:{_spelled(scene.second_target)}"
    assert second[7:] == ["-", awaited, f"+{awaited}"], out
    # Offsets and lag per partition, unknown (-) where nothing was committed.
    by_partition = {
        int(cells[1]): cells for line in out.splitlines() if (cells := line.split())[:1] == [topic]
    }
    assert by_partition[0][2:5] == ["2", "5", "3"], out
    assert by_partition[1][2:5] == ["5", "5", "0"], out
    assert by_partition[2][2:5] == ["-", "5", "-"], out
    assert all(cells[5] == scene.first for cells in by_partition.values()), out
    assert "total lag: 3 (2 partition(s) without a committed offset: lag unknown)" in out

    document = json.loads(
        run_sluice(broker.bootstrap, "groups", "describe", scene.group, "--format", "json").stdout
    )
    assert (document["type"], document["group_epoch"], document["assignment_epoch"]) == (
        "consumer",
        2,
        2,
    )
    assert document["assignor"] == "uniform" and document["member_count"] == 2
    member_documents = {m["member_id"]: m for m in document["members"]}
    assert member_documents[scene.second]["pending_assignment"] == {
        topic: list(scene.second_target)
    }
    assert member_documents[scene.second]["subscribed_topic_regex"] == scene.regex
    assert member_documents[scene.first]["member_epoch"] == 1
    assert document["total_lag"] == 3
    assert document["partitions_without_committed_offset"] == 2

    members_only = run_sluice(broker.bootstrap, "groups", "describe", scene.group, "--members")
    assert scene.second in members_only.stdout and "LOG END" not in members_only.stdout


def test_metrics_count_the_members_epoch_and_lag_of_a_consumer_group(
    broker: BrokerProcess, topic: str
) -> None:
    scene = rebalancing_group(broker, topic)
    group = scene.group

    def lag_known(samples: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> bool:
        return (
            value(samples, "sluice_consumer_group_lag", group=group, topic=topic, partition=0) == 3
        )

    wait_for(broker.http_url, lag_known, f"the lag of {group}")
    samples = scrape(broker.http_url)
    assert value(samples, "sluice_consumer_group_lag", group=group, topic=topic, partition=1) == 0
    assert value(samples, "sluice_consumer_group_lag_sum", group=group) == 3
    assert value(samples, "sluice_consumer_group_members", group=group) == 2
    assert value(samples, "sluice_consumer_group_generation", group=group) == 2
    assert (
        value(samples, "sluice_consumer_group_partitions_without_committed_offset", group=group)
        == 2
    )
    for partition in range(PARTITIONS):
        assert (
            value(
                samples,
                "sluice_consumer_group_log_end_offset",
                group=group,
                topic=topic,
                partition=partition,
            )
            == RECORDS_PER_PARTITION
        )
    # (The module's other tests leave groups mid-rebalance too.)
    reconciling = value(samples, "sluice_consumer_groups", type="consumer", state="Reconciling")
    assert reconciling is not None and reconciling >= 1
    # The place the coordinator keeps a consumer group's offsets is no classic group.
    assert value(samples, "sluice_consumer_groups", type="classic", state="Empty") == 0


def test_without_consumer_group_describe_the_type_and_state_are_shown(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    enabled = broker_factory(CONSUMER_PROTOCOL_LONG_SESSIONS)
    topic = "fallback"
    create_topic(enabled.bootstrap, topic, num_partitions=1)
    group = unique_group_id()
    member = str(uuid.uuid4())
    joined = heartbeat(enabled.host, enabled.port, heartbeat_request(group, member, 0, (topic,)))
    assert joined.error_code == 0, joined
    enabled.stop()
    enabled.overrides = {**CONSUMER_PROTOCOL_LONG_SESSIONS, **CLASSIC_ONLY}
    enabled.start()

    (described,) = _described(enabled, group)
    assert (described.group_type, described.state) == ("consumer", "Stable"), described
    assert described.exists and not described.members_described and described.members == []
    shown = run_sluice(enabled.bootstrap, "groups", "describe", group)
    assert shown.returncode == 0, shown.stderr
    assert "type: consumer   state: Stable   members: unknown" in shown.stdout, shown.stdout
    assert "group.coordinator.rebalance.protocols=classic,consumer" in shown.stdout
    with running_console(enabled.bootstrap) as console:
        page = console.get(f"/groups/{group}")
    assert page.status == 200, page.text
    assert '<dd id="group-type">consumer</dd>' in page.text
    assert '<dd id="member-count">unknown</dd>' in page.text
    assert 'id="members-unknown"' in page.text
