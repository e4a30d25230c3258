"""``sluice cluster configs BROKER`` on a two-broker cluster, bootstrapped through the
other broker: a broker's configs are asked of that broker, which alone answers for them,
and changed through it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from client_helpers import run_sluice
from cluster_processes import running_cluster

import sluice.sync
from sluice.cli.local_zookeeper import LocalZooKeeper
from sluice.client.admin import RESOURCE_TYPE_BROKER, AlterConfigOp, ConfigSource

pytestmark = pytest.mark.integration


def test_each_broker_answers_for_its_own_configs(zookeeper: LocalZooKeeper, tmp_path: Path) -> None:
    with running_cluster(tmp_path, zookeeper.connect, 2) as cluster:
        via = cluster.broker(0).bootstrap
        for node_id in (0, 1):
            result = run_sluice(via, "cluster", "configs", str(node_id), "--format", "json")
            assert result.returncode == 0, result.stderr
            document = json.loads(result.stdout)
            assert document["broker"] == node_id
            assert document["configs"]["node.id"]["value"] == str(node_id)
        # A broker's dynamic config is changed through that broker too, whichever one
        # the client was given (Kafka's admin client routes both requests so).
        with sluice.sync.Admin(bootstrap_servers=via) as admin:
            admin.incremental_alter_configs(
                RESOURCE_TYPE_BROKER,
                "1",
                [AlterConfigOp.set("log.retention.ms", "3600000")],
            )
            entry = admin.describe_configs(RESOURCE_TYPE_BROKER, "1")["log.retention.ms"]
        assert (entry.value, entry.source) == ("3600000", ConfigSource.DYNAMIC_BROKER)
