"""Every fenced block of README.md is run by a test, or is listed here with the reason no
test can run it; a block added without either fails this module.

A block is named by its key (``readme_blocks.Block.key``: its nearest heading, then its
first line with spaces collapsed), so editing a block's body keeps its entry, while a new
block, or a changed first line, needs one. ``text`` blocks that show what the block
above them prints are listed with the test that compares them. The inventory below is
the table: key, then the test (``path::function``) or the reason.
"""

from __future__ import annotations

import re

from readme_blocks import README, readme_blocks

ROOT = README.parent

RUN_BY: dict[str, str] = {
    # Quick start
    "Quick start | sluice topics create orders --partitions 6 --config rete":
        "tests/integration/test_readme_examples.py::test_readme_blocks_run_in_order_on_a_fresh_broker",
    "Quick start | Created topic orders with 6 partition(s).":
        "tests/integration/test_readme_examples.py::test_readme_blocks_run_in_order_on_a_fresh_broker",
    'Quick start | echo "hello" | kcat -b 127.0.0.1:9092 -t greetings -P':
        "tests/integration/test_readme_examples.py::test_readme_blocks_run_in_order_on_a_fresh_broker",
    "Quick start | hello":
        "tests/integration/test_readme_examples.py::test_readme_blocks_run_in_order_on_a_fresh_broker",
    # Running a broker: the ACL commands, as the administrator of the secured broker
    "Access control (ACLs) | sluice serve -o authorizer.enabled=true -o 'super.users=":
        "tests/integration/test_securing_readme.py::test_the_securing_walkthrough_runs",
    "Access control (ACLs) | RESOURCE TYPE NAME PATTERN PRINCIPAL HOST OPERATION PERM":
        "tests/integration/test_securing_readme.py::test_the_securing_walkthrough_runs",
    # Securing Sluice
    "Securing Sluice | openssl req -x509 -newkey rsa:2048 -nodes -days 365 -sub":
        "tests/integration/test_securing_readme.py::test_the_securing_walkthrough_runs",
    "Securing Sluice | listeners=ADMIN://127.0.0.1:9092,CLIENTS://127.0.0.1:909":
        "tests/integration/test_securing_readme.py::test_the_securing_walkthrough_runs",
    "Securing Sluice | echo admin-secret | sluice users create admin --mechanis":
        "tests/integration/test_securing_readme.py::test_the_securing_walkthrough_runs",
    "Securing Sluice | export SLUICE_SASL_MECHANISM=SCRAM-SHA-512 SLUICE_SASL_U":
        "tests/integration/test_securing_readme.py::test_the_securing_walkthrough_runs",
    "Securing Sluice | export SLUICE_SECURITY_PROTOCOL=SASL_SSL SLUICE_SSL_CA_L":
        "tests/integration/test_securing_readme.py::test_the_securing_walkthrough_runs",
    "Securing Sluice | created user admin (SCRAM-SHA-512)":
        "tests/integration/test_securing_readme.py::test_the_securing_walkthrough_runs",
    "Securing Sluice | Created topic payments with 3 partition(s).":
        "tests/integration/test_securing_readme.py::test_the_securing_walkthrough_runs",
    "Securing Sluice | Topic: payments":
        "tests/integration/test_securing_readme.py::test_the_securing_walkthrough_runs",
    "Securing Sluice | from confluent_kafka import KafkaException, Producer":
        "tests/integration/test_securing_readme.py::test_the_securing_walkthrough_runs",
    # Schema Registry
    "Schema Registry | from confluent_kafka import Consumer, Producer":
        "tests/integration/test_schema_registry_confluent.py::test_the_readme_example_runs_as_written",
    "Schema Registry | {'id': 'p-1', 'amount': 9.5}":
        "tests/integration/test_schema_registry_confluent.py::test_the_readme_example_runs_as_written",
    # Observing Sluice
    "Observing Sluice | curl -s http://127.0.0.1:8080/ready":
        "tests/integration/test_observing_readme.py::test_the_metrics_and_top_commands_print_what_the_readme_shows",
    'Observing Sluice | {"status": "ready"}':
        "tests/integration/test_observing_readme.py::test_the_metrics_and_top_commands_print_what_the_readme_shows",
    "Observing Sluice | sluice top --iterations 1":
        "tests/integration/test_observing_readme.py::test_the_metrics_and_top_commands_print_what_the_readme_shows",
    "Observing Sluice | cluster YxNHS-cRQn-YkeEhgdk2LA · 1 broker(s) · 11:08:58":
        "tests/integration/test_observing_readme.py::test_the_metrics_and_top_commands_print_what_the_readme_shows",
    "Running a broker | INFO sluice.broker.app: new data directory data":
        "tests/integration/test_serve_start_errors.py::test_a_new_brokers_start_prints_what_the_readme_shows",
    # Python client
    "Python client | import asyncio":
        "tests/integration/test_readme_examples.py::test_readme_blocks_run_in_order_on_a_fresh_broker",
    "Python client | import sluice.sync":
        "tests/integration/test_readme_examples.py::test_readme_blocks_run_in_order_on_a_fresh_broker",
    "Delivery semantics | import asyncio":
        "tests/integration/test_readme_examples.py::test_readme_blocks_run_in_order_on_a_fresh_broker",
    "Delivery semantics | import asyncio (2)":
        "tests/integration/test_readme_examples.py::test_readme_blocks_run_in_order_on_a_fresh_broker",
    # Consumer groups: the commands, then what each block prints
    "Consumer groups | sluice groups list # every group, its type, state and pr":
        "tests/integration/test_readme_examples.py::test_the_consumer_group_commands_print_what_the_readme_shows",
    "Consumer groups | GROUP TYPE STATE PROTOCOL TYPE":
        "tests/integration/test_readme_examples.py::test_the_consumer_group_commands_print_what_the_readme_shows",
    "Consumer groups | sluice groups reset-offsets billing --all-topics --to-ea":
        "tests/integration/test_readme_examples.py::test_the_consumer_group_commands_print_what_the_readme_shows",
    "Consumer groups | TOPIC PARTITION CURRENT OFFSET NEW OFFSET":
        "tests/integration/test_readme_examples.py::test_the_consumer_group_commands_print_what_the_readme_shows",
    "Consumer groups | sluice groups delete-offsets billing --topic orders # fo":
        "tests/integration/test_readme_examples.py::test_the_consumer_group_commands_print_what_the_readme_shows",
    "Consumer groups | Deleted the committed offsets of group billing for order":
        "tests/integration/test_readme_examples.py::test_the_consumer_group_commands_print_what_the_readme_shows",
    # Delayed delivery, views, retries and dead letters
    "Delayed and scheduled delivery | echo 'stretch your legs' | kcat -b 127.0.0.1:9092 -P -t":
        "tests/integration/test_delayed_delivery.py::test_the_readme_examples_run",
    "Delayed and scheduled delivery | from confluent_kafka import Producer":
        "tests/integration/test_delayed_delivery.py::test_the_readme_examples_run",
    "Tag-filtered views | sluice topics create purchases --partitions 3":
        "tests/integration/test_views.py::test_the_readme_example_runs",
    "Retry and dead-letter topics | import asyncio":
        "tests/integration/test_retries_and_dead_letters.py::test_the_readme_example_runs",
    "Retry and dead-letter topics | kcat -b 127.0.0.1:9092 -C -t billing-dlq -e -q -f 'from":
        "tests/integration/test_retries_and_dead_letters.py::test_the_readme_example_runs",
    "Retry and dead-letter topics | from x-sluice-original-topic=payments,x-sluice-original-":
        "tests/integration/test_retries_and_dead_letters.py::test_the_readme_example_runs",
    "Retry and dead-letter topics | sluice dlq list":
        "tests/integration/test_retries_and_dead_letters.py::test_the_readme_example_runs",
    "Retry and dead-letter topics | TOPIC RECORDS":
        "tests/integration/test_retries_and_dead_letters.py::test_the_readme_example_runs",
    # Share groups
    "Queues on a topic: share groups | sluice topics create jobs --partitions 1":
        "tests/integration/test_share_groups_readme.py::test_the_share_group_section_runs",
    "Queues on a topic: share groups | import threading":
        "tests/integration/test_share_groups_readme.py::test_the_share_group_section_runs",
    "Queues on a topic: share groups | import asyncio":
        "tests/integration/test_share_groups_readme.py::test_the_share_group_section_runs",
    "Queues on a topic: share groups | sluice share-groups list":
        "tests/integration/test_share_groups_readme.py::test_the_share_group_section_runs",
    "Queues on a topic: share groups | GROUP STATE":
        "tests/integration/test_share_groups_readme.py::test_the_share_group_section_runs",
    # Testing your code
    "Testing your code against Sluice | import confluent_kafka":
        "tests/integration/test_observing_readme.py::test_the_pytest_example_passes_with_the_installed_plugin",
}  # fmt: skip
"""Blocks a test runs, by key: the test that runs it (and compares its output)."""

NOT_RUN: dict[str, str] = {
    "Quick start | make serve # sets up .venv with what serving needs (seco":
        "starts a foreground broker and runs the whole suite; tests/unit/test_makefile.py "
        "checks what each target plans (make -n)",
    "Dynamic broker configs | kafka-configs --bootstrap-server localhost:9092 --alter":
        "Kafka's own tool (a JDK and Kafka's distribution); the same AlterConfigs requests are "
        "sent by tests/integration/test_dynamic_broker_configs.py and "
        "tests/cluster/test_dynamic_broker_configs_cluster.py",
    "Listeners | sluice serve --listeners PLAINTEXT://0.0.0.0:9092 \\":
        "foreground brokers on fixed ports, one on every interface; the same options are "
        "tested on free ports by tests/integration/test_broker_listeners.py",
    "Listeners | listeners=PLAINTEXT://:9092,SSL://:9093,INTERNAL://:9094":
        "names hosts (broker1.example) and files under /etc that a test machine lacks; "
        "tests/unit/test_listener_config.py::"
        "test_several_listeners_with_custom_names_map_to_security_protocols parses such "
        "settings and tests/cluster/test_tls_cluster.py serves them",
    "Running a cluster | sluice dev-cluster --brokers 3":
        "a foreground cluster with ZooKeeper on fixed ports 9092-9094; "
        "tests/cluster/test_dev_cluster.py::test_dev_cluster_from_start_to_ctrl_c runs it",
    "Running a cluster | $ sluice topics create events --partitions 12 --bootstra":
        "needs the dev cluster above; tests/cluster/test_dev_cluster.py::"
        "test_dev_cluster_from_start_to_ctrl_c creates a topic through it and reads it back",
    "Failover drills | $ sluice topics create orders --partitions 6 --replicati":
        "needs the dev cluster; tests/cluster/test_dev_cluster.py::"
        "test_a_broker_killed_leaves_the_others_serving_and_the_drills_work runs the drill",
    "Failover drills | broker 1 died (killed by SIGKILL); the other brokers kee":
        "needs the dev cluster; tests/cluster/test_dev_cluster.py::"
        "test_a_broker_killed_leaves_the_others_serving_and_the_drills_work checks the line",
    "Failover drills | sluice serve --zookeeper zk1:2181,zk2:2181,zk3:2181/slui":
        "names a ZooKeeper ensemble and hosts of a real deployment; tests/cluster start "
        "their brokers with these options on a private ZooKeeper",
    "Failover drills | $ sluice topics reassign --generate --topics events --br":
        "needs a four-broker cluster; tests/cluster/test_reassignment.py::"
        "test_reassign_moves_data_to_other_brokers_and_decommission_empties_one runs these",
    "Data pipelines on Spark | from pyspark.sql import SparkSession":
        "needs Java and Spark (make test installs them); tests/spark/test_batch.py::"
        "test_batch_write_then_read_back reads and writes the same way",
    "Data pipelines on Spark | sluice archive --topic orders --output /archive --checkp":
        "needs Java and Spark and writes under /archive; tests/spark/test_streaming.py::"
        "test_archive_then_replay_reproduces_the_topic runs both commands",
}  # fmt: skip
"""Blocks no test here runs as written, by key: why, and where the same is tested."""

TEST_REFERENCE = re.compile(r"(tests/[\w/]+\.py)::(test_\w+)")


def test_every_readme_block_is_run_or_says_why_not() -> None:
    keys = [block.key for block in readme_blocks()]
    assert len(keys) == len(set(keys)), "two README blocks have one key"
    unlisted = [key for key in keys if key not in RUN_BY and key not in NOT_RUN]
    assert not unlisted, (
        "README blocks that no test runs and the inventory does not list: run each in a "
        "test and add it to RUN_BY, or add it to NOT_RUN with the reason\n" + "\n".join(unlisted)
    )
    stale = sorted((set(RUN_BY) | set(NOT_RUN)) - set(keys))
    assert not stale, "the inventory lists blocks the README no longer has:\n" + "\n".join(stale)
    assert not set(RUN_BY) & set(NOT_RUN)


def test_every_test_the_inventory_names_exists() -> None:
    named = "\n".join([*RUN_BY.values(), *NOT_RUN.values()])
    for path, function in TEST_REFERENCE.findall(named):
        source = (ROOT / path).read_text()
        assert re.search(rf"^def {function}\(", source, re.MULTILINE), f"{path} has no {function}"


def test_each_run_block_is_taken_from_the_readme_by_its_test() -> None:
    """The module of the test named for a block reads the README's blocks itself (it
    does not carry a copy)."""
    for reference in RUN_BY.values():
        path = reference.split("::")[0]
        assert "from readme_blocks import" in (ROOT / path).read_text(), path
