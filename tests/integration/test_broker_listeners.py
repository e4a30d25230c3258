"""Broker configs under Kafka's names: ``listeners`` / ``advertised.listeners`` accepted
by ``sluice serve`` in Kafka's syntax, Metadata advertising the
advertised listener, one-line errors for what is not served or contradicts itself, and
DescribeConfigs on the broker listing Kafka's names with their sources, read-only flags
and synonyms."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from broker_process import HOST, BrokerProcess, free_port
from client_helpers import CLIENT_TIMEOUT_S, admin_client, round_trip_one_message
from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KafkaPythonConfigResource
from kafka.admin import ConfigResourceType
from kafka_wire import KafkaConnection, metadata_request
from kio.schema.describe_configs.v3 import request as describe_configs_v3
from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest

from sluice.common.dynamic_config import DYNAMIC_BROKER_CONFIGS

STATIC = ConfigSource.STATIC_BROKER_CONFIG.value
DEFAULT = ConfigSource.DEFAULT_CONFIG.value
BROKER_RESOURCE = 4


class ListenersOnlyBroker(BrokerProcess):
    """A broker started with --listeners instead of --host/--port."""

    def __init__(self, data_dir: Path, listeners: str, *extra: str) -> None:
        super().__init__(data_dir)
        self.listeners = listeners.replace("{port}", str(self.port))
        self.extra = list(extra)

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "sluice",
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--listeners",
            self.pin_ports(self.listeners),
            "-o",
            "http.port=0",
            "-o",
            "schema.registry.listeners=",
            *self.extra,
        ]


def _advertised_brokers(host: str, port: int) -> list[tuple[int, str, int]]:
    with KafkaConnection(host, port) as connection:
        response = connection.request(metadata_request([]))
    return [(int(b.node_id), b.host, int(b.port)) for b in response.brokers]


def _serve_fails(tmp_path: Path, *arguments: str) -> str:
    """Run ``sluice serve`` expecting it to refuse its settings: its one-line error."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sluice",
            "serve",
            "--data-dir",
            str(tmp_path / "d"),
            "-o",
            "http.port=0",
            "-o",
            "schema.registry.listeners=",
            *arguments,
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    stderr = result.stderr.decode()
    assert result.returncode != 0, stderr
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def test_listeners_alone_set_where_the_broker_listens_and_what_it_advertises(tmp_path):
    broker = ListenersOnlyBroker(tmp_path / "data", "PLAINTEXT://127.0.0.1:{port}")
    broker.start()
    try:
        assert _advertised_brokers(broker.host, broker.port) == [(0, HOST, broker.port)]
        round_trip_one_message(broker.bootstrap)
    finally:
        broker.stop()


def test_a_listener_without_host_binds_every_interface_and_advertises_the_host_name(
    tmp_path,
):
    broker = ListenersOnlyBroker(tmp_path / "data", "PLAINTEXT://:{port}")
    broker.start()  # reached on 127.0.0.1: every interface includes loopback
    try:
        assert _advertised_brokers(broker.host, broker.port) == [(0, socket.getfqdn(), broker.port)]
    finally:
        broker.stop()


def test_metadata_advertises_the_advertised_listener(broker_factory):
    other_port = free_port()
    broker = broker_factory({"advertised.listeners": f"PLAINTEXT://localhost:{other_port}"})
    assert _advertised_brokers(broker.host, broker.port) == [(0, "localhost", other_port)]
    with KafkaConnection(broker.host, broker.port) as connection:
        coordinator = connection.request(FindCoordinatorRequest(key="g", key_type=0))
    assert (coordinator.host, int(coordinator.port)) == ("localhost", other_port)


def test_advertised_listener_on_the_same_port_serves_clients(tmp_path):
    broker = BrokerProcess(tmp_path / "adv", port=free_port())
    broker.overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{broker.port}",  # agrees with --host/--port
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker.port}",
    }
    broker.start()
    try:
        assert _advertised_brokers(broker.host, broker.port) == [(0, HOST, broker.port)]
        round_trip_one_message(broker.bootstrap)
    finally:
        broker.stop()


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            ["-o", "listeners=SASL_SSL://127.0.0.1:9093"],
            "has no certificate: set ssl.keystore.location",
        ),
        (["-o", "listeners=SSL://127.0.0.1:9093"], "has no certificate: set ssl.keystore.location"),
        (
            ["-o", "listeners=PLAINTEXT://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9094"],
            "the listener name PLAINTEXT is given twice",
        ),
        (
            ["-o", "listeners=INTERNAL://127.0.0.1:9093"],
            "listener INTERNAL has no security protocol",
        ),
        (
            [
                "-o",
                "listeners=PLAINTEXT://127.0.0.1:9093,CLIENTS://127.0.0.1:9094",
                "-o",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CLIENTS:PLAINTEXT",
                "-o",
                "inter.broker.listener.name=INTERNAL",
            ],
            "inter.broker.listener.name=INTERNAL names no listener",
        ),
        (
            [
                "-o",
                "listeners=PLAINTEXT://127.0.0.1:9093",
                "-o",
                "advertised.listeners=SSL://127.0.0.1:9093",
            ],
            "advertised.listeners names SSL, which is not among the listeners",
        ),
        (["-o", "listeners=127.0.0.1:9093"], "is not NAME://host:port"),
        (
            ["--port", "9095", "--listeners", "PLAINTEXT://127.0.0.1:9093"],
            "--host/--port (127.0.0.1:9095) disagree with listeners=PLAINTEXT://127.0.0.1:9093",
        ),
        (
            ["-o", "port=9095", "-o", "listeners=PLAINTEXT://127.0.0.1:9093"],
            "disagree with listeners",
        ),
        (["--listeners", "PLAINTEXT://0.0.0.0:9093"], "set advertised.listeners"),
        (
            ["--advertised-listeners", "PLAINTEXT://0.0.0.0:9093"],
            "nonroutable meta-address 0.0.0.0",
        ),
    ],
    ids=[
        "sasl",
        "ssl-no-keystore",
        "same-name",
        "unmapped",
        "inter-broker",
        "advertised-unknown",
        "no-protocol",
        "option-conflict",
        "setting-conflict",
        "any",
        "adv-any",
    ],
)
def test_listener_settings_sluice_cannot_serve_are_one_line_errors(tmp_path, arguments, expected):
    line = _serve_fails(tmp_path, *arguments)
    assert expected in line, line
    assert line.startswith("Error: bad broker setting:"), line


def _broker_configs(bootstrap: str) -> dict:
    admin = admin_client(bootstrap)
    resource = ConfigResource(ResourceType.BROKER, "0")
    return admin.describe_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)


def test_describe_broker_configs_lists_kafka_names_with_their_sources(broker_factory):
    broker = broker_factory({"num.partitions": "1", "log.retention.hours": "24"})
    configs = _broker_configs(broker.bootstrap)
    for kafka_name in (
        "listeners",
        "advertised.listeners",
        "node.id",
        "log.dirs",
        "num.partitions",
        "default.replication.factor",
        "auto.create.topics.enable",
        "log.retention.ms",
        "group.initial.rebalance.delay.ms",
        "offsets.topic.num.partitions",
    ):
        assert kafka_name in configs, kafka_name
    for sluice_name in ("host", "port", "data.dir"):  # Sluice's own names stay beside them
        assert sluice_name in configs, sluice_name

    def seen(name: str) -> tuple[str | None, int]:
        return configs[name].value, configs[name].source

    # --host/--port (the test harness passes them) are this broker's listener, as given:
    # port 0 at a first start (the kernel picks the port), which Kafka too reports as 0.
    assert seen("listeners") == (f"PLAINTEXT://{HOST}:0", STATIC)
    assert seen("advertised.listeners") == (None, DEFAULT)
    # Given explicitly, even at its default value: static, as Kafka reports it.
    assert seen("num.partitions") == ("1", STATIC)
    assert seen("log.retention.ms") == (str(24 * 3_600_000), STATIC)
    assert seen("default.replication.factor") == ("1", DEFAULT)
    assert seen("log.dirs") == (str(broker.data_dir), STATIC)
    # What Kafka lets AlterConfigs change at run time is writable; the rest is read-only.
    assert {name for name, entry in configs.items() if not entry.is_read_only} == {
        name for name in configs if name in DYNAMIC_BROKER_CONFIGS
    }
    assert not configs["log.retention.ms"].is_read_only
    assert configs["listeners"].is_read_only


def test_describe_broker_configs_synonyms_with_a_raw_request(broker_factory):
    broker = broker_factory({"advertised.listeners": "PLAINTEXT://localhost:9999"})
    request = describe_configs_v3.DescribeConfigsRequest(
        resources=(
            describe_configs_v3.DescribeConfigsResource(
                resource_type=BROKER_RESOURCE,
                resource_name="0",
                configuration_keys=("advertised.listeners", "num.partitions"),
            ),
        ),
        include_synonyms=True,
        include_documentation=True,
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        (result,) = connection.request(request).results
    entries = {entry.name: entry for entry in result.configs}
    assert set(entries) == {"advertised.listeners", "num.partitions"}
    advertised = entries["advertised.listeners"]
    assert (advertised.value, int(advertised.config_source), advertised.read_only) == (
        "PLAINTEXT://localhost:9999",
        STATIC,
        True,
    )
    assert [(s.name, s.value, int(s.source)) for s in advertised.synonyms] == [
        ("advertised.listeners", "PLAINTEXT://localhost:9999", STATIC),
        ("advertised.listeners", None, DEFAULT),
    ]
    assert [(s.value, int(s.source)) for s in entries["num.partitions"].synonyms] == [
        ("1", DEFAULT)
    ]
    assert advertised.documentation


def test_kafka_python_describes_the_broker_listeners(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000)
    try:
        described = admin.describe_configs(
            [KafkaPythonConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all"
        )
    finally:
        admin.close()
    # As given: the harness starts a broker on port 0 (Kafka too reports the setting).
    assert f"PLAINTEXT://{HOST}:0" in repr(described), described
