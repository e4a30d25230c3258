"""``sluice schemas`` and ``sluice consume --decode-schemas``, run as a user runs them (a
subprocess) against a real broker's Schema Registry, with confluent-kafka's own
registry client and serializers on the other side."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from broker_process import BrokerProcess
from client_helpers import create_topic, producer_config, unique_group_id, unique_topic_name
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from test_sasl import USERS as SASL_USERS
from test_sasl import sasl_broker_process

COMMAND_TIMEOUT_S = 60.0

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "string"}, {"name": "cents", "type": "long"}],
}
ORDER_V2_COMPATIBLE = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "note", "type": "string", "default": ""}],
}
ORDER_V2_INCOMPATIBLE = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "customer", "type": "string"}],
}


def registry_url(broker: BrokerProcess) -> str:
    url = broker.schema_registry_url
    assert url is not None, "the broker serves no Schema Registry"
    return url


def sluice(
    broker: BrokerProcess, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m sluice ARGS`` with the broker and its registry in the environment."""
    environment = dict(os.environ)
    environment["SLUICE_BOOTSTRAP_SERVER"] = broker.bootstrap
    environment["SLUICE_SCHEMA_REGISTRY_URL"] = registry_url(broker)
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "sluice", *args],
        capture_output=True,
        env=environment,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def one_line_error(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode != 0, result.stdout.decode()
    stderr = result.stderr.decode()
    assert "Traceback" not in stderr, stderr
    error_lines = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    assert len(error_lines) == 1, stderr
    return error_lines[0]


def write_schema(directory: Path, name: str, document: dict[str, Any]) -> str:
    path = directory / name
    path.write_text(json.dumps(document))
    return str(path)


def test_a_subjects_life_register_evolve_refuse_show_list_and_delete(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    subject = f"{unique_topic_name('orders')}-value"
    v1 = write_schema(tmp_path, "v1.avsc", ORDER_V1)
    v2 = write_schema(tmp_path, "v2.avsc", ORDER_V2_COMPATIBLE)
    bad = write_schema(tmp_path, "bad.avsc", ORDER_V2_INCOMPATIBLE)

    registered = json.loads(
        ok(sluice(broker, "schemas", "register", subject, v1, "--format", "json"))
    )
    assert registered["version"] == 1 and registered["new"] is True
    again = ok(sluice(broker, "schemas", "register", subject, v1))
    assert f"already holds this schema as version 1 (id {registered['id']})" in again

    assert (
        ok(sluice(broker, "schemas", "check", subject, v2)).strip() == f"Compatible with {subject}."
    )
    refused = sluice(broker, "schemas", "check", subject, bad)
    assert refused.returncode == 1
    assert refused.stdout.decode().startswith(f"Incompatible with {subject}:\n  ")
    error = one_line_error(sluice(broker, "schemas", "register", subject, bad))
    assert "error code 409" in error and "sluice schemas check" in error

    second = json.loads(ok(sluice(broker, "schemas", "register", subject, v2, "--format", "json")))
    assert second["version"] == 2

    # confluent-kafka's own client sees what the CLI registered.
    confluent = ConfluentRegistryClient({"url": registry_url(broker)})
    assert confluent.get_versions(subject) == [1, 2]
    assert confluent.get_latest_version(subject).schema_id == second["id"]

    listed = json.loads(ok(sluice(broker, "schemas", "list", "--format", "json")))
    assert {
        "subject": subject,
        "versions": [1, 2],
        "latest_version": 2,
        "id": second["id"],
        "schema_type": "AVRO",
    } in listed

    shown = json.loads(
        ok(sluice(broker, "schemas", "get", subject, "--version", "1", "--format", "json"))
    )
    assert (shown["version"], shown["id"], shown["schema_type"]) == (1, registered["id"], "AVRO")
    assert json.loads(shown["schema"]) == ORDER_V1
    by_id = ok(sluice(broker, "schemas", "get", "--id", str(second["id"])))
    assert f"Registered as: {subject} version 2" in by_id

    assert (
        ok(sluice(broker, "schemas", "config", subject))
        .strip()
        .endswith("(the registry's default; it has no level of its own)")
    )
    ok(sluice(broker, "schemas", "config", subject, "--set", "none"))
    assert ok(sluice(broker, "schemas", "config", subject)).strip() == f"{subject}: NONE"
    third = json.loads(ok(sluice(broker, "schemas", "register", subject, bad, "--format", "json")))
    assert third["version"] == 3

    assert (
        ok(sluice(broker, "schemas", "mode", subject))
        .strip()
        .endswith("READWRITE (the registry's; it has no mode of its own)")
    )
    ok(sluice(broker, "schemas", "mode", subject, "--set", "readonly"))
    assert ok(sluice(broker, "schemas", "mode", subject)).strip() == f"{subject}: READONLY"
    refused = one_line_error(sluice(broker, "schemas", "register", subject, bad))
    assert "error code 42205" in refused
    ok(sluice(broker, "schemas", "mode", subject, "--delete"))

    assert "version(s) 1, 2, 3" in ok(sluice(broker, "schemas", "delete", subject))
    error = one_line_error(sluice(broker, "schemas", "get", subject))
    assert "error code 40401" in error
    assert "version(s) 1, 2, 3" in ok(sluice(broker, "schemas", "delete", subject, "--permanent"))
    assert subject not in ok(sluice(broker, "schemas", "list", "--deleted"))


def test_consume_decodes_what_confluents_serializer_wrote_and_passes_the_rest_through(
    broker: BrokerProcess,
) -> None:
    topic = unique_topic_name("decoded")
    create_topic(broker.bootstrap, topic)
    confluent = ConfluentRegistryClient({"url": registry_url(broker)})
    serializer = AvroSerializer(confluent, json.dumps(ORDER_V1))
    producer = Producer(producer_config(broker.bootstrap))
    value = serializer(
        {"id": "o-1", "cents": 1250}, SerializationContext(topic, MessageField.VALUE)
    )
    assert value is not None
    producer.produce(topic, key=b"o-1", value=value)
    producer.produce(topic, key=b"plain", value=b"not framed")
    assert producer.flush(30) == 0

    printed = ok(sluice(broker, "consume", topic, "--decode-schemas", "--format", "json"))
    records = [json.loads(line) for line in printed.splitlines()]
    assert records[0]["value"] == {"id": "o-1", "cents": 1250}
    assert records[0]["value_schema_id"] == confluent.get_latest_version(f"{topic}-value").schema_id
    assert records[0]["key"] == "o-1" and "key_schema_id" not in records[0]
    assert records[1]["value"] == "not framed" and "value_schema_id" not in records[1]

    as_text = ok(sluice(broker, "consume", topic, "--decode-schemas", "--print-key"))
    assert as_text.splitlines() == ['o-1\t{"id": "o-1", "cents": 1250}', "plain\tnot framed"]

    # As a group member too, and through a kcat-style template.
    in_group = ok(
        sluice(
            broker,
            "consume",
            topic,
            "--group",
            unique_group_id(),
            "--decode-schemas",
            "-F",
            "%o %s\\n",
        )
    )
    assert in_group.splitlines() == ['0 {"id": "o-1", "cents": 1250}', "1 not framed"]


def test_a_registry_that_is_not_there_is_a_clear_error(broker: BrokerProcess) -> None:
    # A bound socket that does not listen: connections are refused, and no other
    # process can take the port while the test holds it.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        error = one_line_error(sluice(broker, "schemas", "list", "--registry", url))
    assert f"cannot reach the schema registry at {url}" in error
    assert "schema.registry.listeners" in error


def test_protobuf_with_a_reference_registered_from_files_and_deleted_for_good_at_once(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    prefix = unique_topic_name("shop")
    common = tmp_path / "money.proto"
    common.write_text(
        'syntax = "proto3";\npackage shop;\n'
        "message Money { string currency = 1; int64 cents = 2; }\n"
    )
    order = tmp_path / "order.proto"
    order.write_text(
        'syntax = "proto3";\npackage shop;\nimport "money.proto";\n'
        "message Order { string id = 1; Money total = 2; }\n"
    )
    ok(sluice(broker, "schemas", "register", f"{prefix}-money", str(common)))
    missing = one_line_error(sluice(broker, "schemas", "register", f"{prefix}-value", str(order)))
    assert "error code 42201" in missing and "--reference" in missing
    ok(
        sluice(
            broker,
            "schemas",
            "register",
            f"{prefix}-value",
            str(order),
            "--reference",
            f"money.proto={prefix}-money:1",
        )
    )
    shown = ok(sluice(broker, "schemas", "get", f"{prefix}-value"))
    assert "Type: PROTOBUF" in shown
    assert f"Reference: money.proto = {prefix}-money version 1" in shown
    assert "message Order" in shown

    # Still referenced: the registry refuses, and says so.
    error = one_line_error(sluice(broker, "schemas", "delete", f"{prefix}-money"))
    assert "error code 42206" in error

    # --permanent soft-deletes first, as the registry asks.
    assert "version(s) 1" in ok(
        sluice(broker, "schemas", "delete", f"{prefix}-value", "--permanent")
    )
    listed = ok(sluice(broker, "schemas", "list", "--deleted", "--prefix", prefix))
    assert f"{prefix}-value" not in listed and f"{prefix}-money" in listed


def test_on_a_sasl_broker_the_cli_signs_in_as_a_scram_user(tmp_path: Path) -> None:
    broker = sasl_broker_process(
        tmp_path / "data", {"authorizer.enabled": "true", "super.users": "User:alice"}
    )
    broker.start()
    try:
        schema = write_schema(tmp_path, "order.avsc", ORDER_V1)
        error = one_line_error(sluice(broker, "schemas", "list"))
        assert "error code 401" in error and "--registry-user USER:PASSWORD" in error
        alice = f"alice:{SASL_USERS['alice']}"
        registered = ok(
            sluice(broker, "schemas", "register", "orders-value", schema, "--registry-user", alice)
        )
        assert registered.strip() == "Registered orders-value version 1 with id 1."
        bob = f"bob:{SASL_USERS['bob']}"
        error = one_line_error(
            sluice(broker, "schemas", "register", "orders-value", schema, "--registry-user", bob)
        )
        assert "error code 40301" in error and "ACL" in error
        listed = sluice(broker, "schemas", "list", env={"SLUICE_SCHEMA_REGISTRY_USER": alice})
        assert "orders-value" in ok(listed)
    finally:
        broker.stop()
