"""``sluice`` commands that match Kafka's tools, rpk and kcat, run as a user runs them (a
subprocess) against a real broker: growing a topic, topics as JSON, a broker's configs
with their sources, and ``-b`` for ``--bootstrap-server``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from broker_process import BrokerProcess, free_port
from client_helpers import (
    CLIENT_TIMEOUT_S,
    admin_client,
    create_topic,
    produce_and_flush,
    producer_config,
    run_sluice,
)
from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

STATIC_SETTING = ("group.initial.rebalance.delay.ms", "0")
"""Given to the module's broker at start (fast_groups_broker): shown as static."""


@pytest.fixture(scope="module")
def broker(fast_groups_broker: BrokerProcess) -> BrokerProcess:
    return fast_groups_broker


def ok(result: Any) -> str:
    assert result.returncode == 0, result.stderr
    return str(result.stdout)


def error_line(result: Any) -> str:
    """The one ``Error:`` line of a failed command (no traceback)."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    return str(line)


def test_b_is_short_for_bootstrap_server_on_every_command(
    broker: BrokerProcess, topic: str
) -> None:
    nobody = f"127.0.0.1:{free_port()}"  # the environment's address: nothing listens
    ok(run_sluice(nobody, "topics", "create", topic, "-b", broker.bootstrap))
    assert topic in ok(run_sluice(nobody, "topics", "list", "-b", broker.bootstrap)).split()
    assert "Brokers: 1" in ok(run_sluice(nobody, "cluster", "describe", "-b", broker.bootstrap))


def test_alter_partitions_grows_a_topic_and_refuses_to_shrink_it(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=2)
    grown = ok(run_sluice(broker.bootstrap, "topics", "alter", topic, "--partitions", "5"))
    assert f"Topic {topic} now has 5 partition(s) (was 2)." in grown
    # Another client sees the new partitions and can write to them.
    metadata = admin_client(broker.bootstrap).list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2, 3, 4]
    producer = Producer(producer_config(broker.bootstrap, acks="all"))
    (delivered,) = produce_and_flush(producer, topic, [{"value": b"new", "partition": 4}])
    assert delivered.partition == 4

    for smaller_or_same in ("5", "3"):
        refused = run_sluice(
            broker.bootstrap, "topics", "alter", topic, "--partitions", smaller_or_same
        )
        assert error_line(refused) == (
            f"Error: topic {topic!r} already has 5 partition(s); --partitions must be "
            "larger (partitions can be added, never removed)"
        )
    missing = run_sluice(broker.bootstrap, "topics", "alter", f"{topic}-x", "--partitions", "3")
    assert f"topic '{topic}-x' does not exist" in error_line(missing)
    assert run_sluice(broker.bootstrap, "topics", "alter", topic).returncode == 2  # usage


def test_topics_list_and_describe_as_json_have_stable_keys(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=2, config={"retention.ms": "3600000"})
    producer = Producer(producer_config(broker.bootstrap, acks="all"))
    produce_and_flush(producer, topic, [{"value": b"v", "partition": 1}] * 3)

    listed = json.loads(ok(run_sluice(broker.bootstrap, "topics", "list", "--format", "json")))
    assert {"name": topic, "partitions": 2, "replication_factor": 1, "internal": False} in listed
    assert [entry["name"] for entry in listed] == sorted(entry["name"] for entry in listed)

    described = json.loads(
        ok(run_sluice(broker.bootstrap, "topics", "describe", topic, "--format", "json"))
    )
    assert list(described) == [
        "name",
        "internal",
        "partition_count",
        "replication_factor",
        "partitions",
        "configs",
    ]
    assert (described["name"], described["partition_count"]) == (topic, 2)
    first, second = described["partitions"]
    assert list(first) == [
        "partition",
        "leader",
        "leader_epoch",
        "replicas",
        "isr",
        "log_start_offset",
        "log_end_offset",
    ]
    assert (first["partition"], first["log_start_offset"], first["log_end_offset"]) == (0, 0, 0)
    assert (second["partition"], second["log_end_offset"]) == (1, 3)
    assert second["replicas"] == second["isr"] == [second["leader"]]
    assert described["configs"]["retention.ms"] == {
        "value": "3600000",
        "source": "topic",
        "sensitive": False,
        "read_only": False,
    }
    assert described["configs"]["segment.bytes"]["source"] == "default"


def test_cluster_configs_shows_each_setting_with_its_source(broker: BrokerProcess) -> None:
    status = json.loads(ok(run_sluice(broker.bootstrap, "cluster", "status", "--format", "json")))
    (node,) = [b["node_id"] for b in status["brokers"]]
    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(
        ResourceType.BROKER,
        str(node),
        incremental_configs=[
            ConfigEntry(
                "log.retention.ms", "604800001", incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=CLIENT_TIMEOUT_S)
    try:
        document = json.loads(
            ok(run_sluice(broker.bootstrap, "cluster", "configs", "--format", "json"))
        )
        assert document["broker"] == node
        configs = document["configs"]
        assert configs["log.retention.ms"]["value"] == "604800001"
        assert configs["log.retention.ms"]["source"] == "dynamic_broker"
        assert configs[STATIC_SETTING[0]]["value"] == STATIC_SETTING[1]
        assert configs[STATIC_SETTING[0]]["source"] == "static_broker"
        assert configs["num.partitions"]["source"] == "default"

        text = ok(run_sluice(broker.bootstrap, "cluster", "configs", str(node)))
        rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()[2:]}
        assert rows["log.retention.ms"][:2] == ["604800001", "dynamic"]
        assert rows[STATIC_SETTING[0]][:2] == [STATIC_SETTING[1], "static"]
        assert rows["num.partitions"][1] == "default"
        changed = ok(run_sluice(broker.bootstrap, "cluster", "configs", "--changed"))
        assert "log.retention.ms" in changed and "num.partitions" not in changed
    finally:
        resource = ConfigResource(
            ResourceType.BROKER,
            str(node),
            incremental_configs=[
                ConfigEntry(
                    "log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE
                )
            ],
        )
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(timeout=CLIENT_TIMEOUT_S)

    missing = run_sluice(broker.bootstrap, "cluster", "configs", str(node + 7))
    assert error_line(missing) == (
        f"Error: the cluster has no broker {node + 7} (its brokers: {node}; see "
        "`sluice cluster describe`)"
    )
