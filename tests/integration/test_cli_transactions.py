"""``sluice transactions`` run as a user runs it (a subprocess) against a real broker:
an open transaction listed and described with its partitions, then shown committed;
an unknown id refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from client_helpers import create_topic
from confluent_kafka import Producer

COMMAND_TIMEOUT_S = 60.0
TIMEOUT_S = 30.0


def sluice(broker: Any, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "SLUICE_BOOTSTRAP_SERVER": broker.bootstrap}
    return subprocess.run(
        [sys.executable, "-m", "sluice", "transactions", *args],
        capture_output=True,
        env=env,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def json_of(result: subprocess.CompletedProcess[bytes]) -> Any:
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def test_an_open_transaction_is_listed_described_and_then_shown_committed(
    broker, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 2)
    transactional_id = f"cli-{topic}"
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id}
    )
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"one", partition=1)
    producer.flush(TIMEOUT_S)

    listed = json_of(sluice(broker, "list", "--state", "Ongoing", "--format", "json"))
    assert {"transactional_id": transactional_id, "state": "Ongoing"}.items() <= next(
        t for t in listed if t["transactional_id"] == transactional_id
    ).items()
    (described,) = json_of(sluice(broker, "describe", transactional_id, "--format", "json"))
    assert described["state"] == "Ongoing"
    assert described["partitions"] == [f"{topic}-1"]
    assert described["start_ms"] > 0

    producer.commit_transaction(TIMEOUT_S)
    text = sluice(broker, "describe", transactional_id)
    assert text.returncode == 0, text.stderr.decode()
    assert "CompleteCommit" in text.stdout.decode()
    assert not [
        t
        for t in json_of(sluice(broker, "list", "--state", "Ongoing", "--format", "json"))
        if t["transactional_id"] == transactional_id
    ]


def test_an_unknown_transactional_id_is_one_line_of_error(broker) -> None:
    result = sluice(broker, "describe", "no-such-transactional-id")
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert "Traceback" not in stderr, stderr
    assert "no-such-transactional-id" in stderr, stderr
