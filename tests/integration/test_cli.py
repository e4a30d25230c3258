"""The ``sluice`` command, run as a user runs it (a subprocess) against a real broker."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from broker_process import BrokerProcess, free_port

from sluice.client.partitioner import partition_for_key

COMMAND_TIMEOUT_S = 60.0


def sluice(
    broker: BrokerProcess | None,
    *args: str,
    stdin: bytes = b"",
    bootstrap: str | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m sluice ARGS`` with the broker's address in the environment."""
    env = dict(os.environ)
    env["SLUICE_BOOTSTRAP_SERVER"] = bootstrap or (broker.bootstrap if broker else "")
    return subprocess.run(
        [sys.executable, "-m", "sluice", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def one_line_error(result: subprocess.CompletedProcess[bytes]) -> str:
    """The error message of a failed command, checked to be one line and no traceback."""
    assert result.returncode != 0, result.stdout.decode()
    stderr = result.stderr.decode()
    assert "Traceback" not in stderr, stderr
    error_lines = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    assert len(error_lines) == 1, stderr
    return error_lines[0]


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_topic_lifecycle(broker: BrokerProcess, topic: str) -> None:
    created = ok(
        sluice(
            broker,
            "topics",
            "create",
            topic,
            "--partitions",
            "3",
            "--config",
            "retention.ms=3600000",
        )
    )
    assert topic in created
    assert topic in ok(sluice(broker, "topics", "list")).splitlines()

    described = ok(sluice(broker, "topics", "describe", topic))
    assert f"Topic: {topic}" in described
    assert "partitions: 3" in described
    table = described.split("Configs:")[0]
    for partition in range(3):
        assert any(line.split()[:1] == [str(partition)] for line in table.splitlines())
    assert "retention.ms" in described and "3600000" in described

    ok(
        sluice(
            broker,
            "topics",
            "alter-config",
            topic,
            "--set",
            "retention.ms=120000",
            "--set",
            "segment.ms=60000",
        )
    )
    described = ok(sluice(broker, "topics", "describe", topic))
    configs = {
        line.split("=")[0].strip(): line.split("=")[1].split()[0]
        for line in described.split("Configs:")[1].splitlines()
        if "=" in line
    }
    assert configs["retention.ms"] == "120000"
    assert configs["segment.ms"] == "60000"

    ok(sluice(broker, "topics", "alter-config", topic, "--delete", "retention.ms"))
    described = ok(sluice(broker, "topics", "describe", topic))
    # The names are padded to the longest config name, which new configs change.
    (retention,) = [
        line for line in described.splitlines() if line.split("=")[0].strip() == "retention.ms"
    ]
    assert retention.split("=")[1].split() == ["604800000", "(default)"]

    ok(sluice(broker, "topics", "delete", topic))
    assert topic not in ok(sluice(broker, "topics", "list")).splitlines()
    error = one_line_error(sluice(broker, "topics", "describe", topic))
    assert f"topic {topic!r} does not exist" in error


def test_creating_a_topic_twice_says_it_exists(broker: BrokerProcess, topic: str) -> None:
    ok(sluice(broker, "topics", "create", topic))
    error = one_line_error(sluice(broker, "topics", "create", topic))
    assert f"topic {topic!r} already exists" in error
    ok(sluice(broker, "topics", "create", topic, "--if-not-exists"))


def test_produced_keys_headers_and_values_come_back_in_text_and_json(
    broker: BrokerProcess, topic: str
) -> None:
    partitions = 4
    ok(sluice(broker, "topics", "create", topic, "--partitions", str(partitions)))
    lines = [f"user-{n % 5}:event {n}" for n in range(20)]
    ok(
        sluice(
            broker,
            "produce",
            topic,
            "--key-separator",
            ":",
            "--header",
            "source=cli",
            "--header",
            "trace=a=b",
            stdin="\n".join(lines).encode() + b"\n",
        )
    )

    records = json_lines(ok(sluice(broker, "consume", topic, "--format", "json")))
    assert len(records) == len(lines)
    for record in records:
        assert record["topic"] == topic
        assert record["headers"] == [
            {"key": "source", "value": "cli"},
            {"key": "trace", "value": "a=b"},
        ]
        assert record["timestamp"] > 0
        # The Java client's partitioner: murmur2 of the key.
        assert record["partition"] == partition_for_key(record["key"].encode(), partitions)
    by_key: dict[str, list[tuple[int, str]]] = {}
    for record in records:
        by_key.setdefault(record["key"], []).append((record["offset"], record["value"]))
    for key, events in by_key.items():
        expected = [line.split(":", 1)[1] for line in lines if line.startswith(f"{key}:")]
        assert [value for _, value in sorted(events)] == expected  # in order within a key

    text = ok(sluice(broker, "consume", topic, "--print-key")).splitlines()
    assert sorted(text) == sorted(line.replace(":", "\t", 1) for line in lines)
    values_only = ok(sluice(broker, "consume", topic)).splitlines()
    assert sorted(values_only) == sorted(line.split(":", 1)[1] for line in lines)


def test_values_that_are_not_utf8_are_base64_in_json(broker: BrokerProcess, topic: str) -> None:
    ok(sluice(broker, "topics", "create", topic))
    ok(sluice(broker, "produce", topic, stdin=b"\xff\xfe binary\nplain\n"))
    first, second = json_lines(ok(sluice(broker, "consume", topic, "--format", "json")))
    assert first["value_encoding"] == "base64"
    assert base64.b64decode(first["value"]) == b"\xff\xfe binary"
    assert first["key"] is None
    assert second["value"] == "plain" and "value_encoding" not in second


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_round_trip(broker: BrokerProcess, topic: str, compression: str) -> None:
    ok(sluice(broker, "topics", "create", topic))
    lines = [f"line {n} " + "x" * n for n in range(50)]
    ok(
        sluice(
            broker, "produce", topic, "--compression", compression, stdin="\n".join(lines).encode()
        )
    )
    assert ok(sluice(broker, "consume", topic)).splitlines() == lines


def test_acks_zero_and_one(broker: BrokerProcess, topic: str) -> None:
    ok(sluice(broker, "topics", "create", topic))
    ok(sluice(broker, "produce", topic, "--acks", "1", stdin=b"first\n"))
    ok(sluice(broker, "produce", topic, "--acks", "0", stdin=b"second\n"))
    # acks=0 has no answer to wait for, but the broker handles requests of a
    # connection in order, and the next command's fetch comes after it.
    ok(sluice(broker, "produce", topic, "--acks", "all", stdin=b"third\n"))
    assert ok(sluice(broker, "consume", topic)).splitlines() == ["first", "second", "third"]


def test_consume_max_messages_offset_and_partition(broker: BrokerProcess, topic: str) -> None:
    ok(sluice(broker, "topics", "create", topic, "--partitions", "2"))
    ok(sluice(broker, "produce", topic, "--partition", "1", stdin=b"a\nb\nc\nd\n"))
    assert ok(sluice(broker, "consume", topic, "--max-messages", "2")).splitlines() == ["a", "b"]
    assert ok(
        sluice(broker, "consume", topic, "--partition", "1", "--offset", "2")
    ).splitlines() == [
        "c",
        "d",
    ]
    assert ok(sluice(broker, "consume", topic, "--partition", "0")) == ""
    error = one_line_error(sluice(broker, "consume", topic, "--partition", "1", "--offset", "9"))
    assert "--offset 9 is outside partition" in error
    error = one_line_error(sluice(broker, "consume", topic, "--partition", "5"))
    assert "has no partition 5" in error


def test_follow_waits_for_records_produced_later(broker: BrokerProcess, topic: str) -> None:
    ok(sluice(broker, "topics", "create", topic))
    ok(sluice(broker, "produce", topic, stdin=b"before\n"))
    env = {**os.environ, "SLUICE_BOOTSTRAP_SERVER": broker.bootstrap}
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sluice",
            "consume",
            topic,
            "--follow",
            "--offset",
            "1",
            "--max-messages",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as follower:
        # Whenever the follower gets to its first fetch, offsets 1 and 2 are either
        # there already or arrive while it long-polls: it must print both and stop.
        ok(sluice(broker, "produce", topic, stdin=b"later 1\nlater 2\n"))
        stdout, stderr = follower.communicate(timeout=COMMAND_TIMEOUT_S)
    assert follower.returncode == 0, stderr.decode()
    assert stdout.decode().splitlines() == ["later 1", "later 2"]


def test_missing_topic_is_a_clear_error(broker: BrokerProcess, topic: str) -> None:
    for command in (
        ["consume", topic],
        ["topics", "describe", topic],
        ["topics", "delete", topic],
        ["topics", "alter-config", topic, "--set", "retention.ms=1000"],
    ):
        error = one_line_error(sluice(broker, *command))
        assert f"topic {topic!r} does not exist" in error, command
        assert "sluice topics create" in error


def test_bad_arguments_are_clear_errors(broker: BrokerProcess, topic: str) -> None:
    error = one_line_error(sluice(broker, "topics", "create", topic, "--config", "retention.ms"))
    assert "--config expects key=value, got 'retention.ms'" in error
    error = one_line_error(sluice(broker, "topics", "create", topic, "--config", "retention.mss=5"))
    assert (
        "unknown topic config 'retention.mss'" in error and "did you mean 'retention.ms'" in error
    )
    error = one_line_error(
        sluice(broker, "topics", "create", topic, "--config", "retention.ms=soon")
    )
    assert "retention.ms" in error and "'soon' is not an integer" in error
    error = one_line_error(sluice(broker, "produce", topic, "--header", "no-equals-sign"))
    assert "--header expects key=value" in error
    ok(sluice(broker, "topics", "create", topic))
    error = one_line_error(
        sluice(broker, "produce", topic, "--key-separator", ":", stdin=b"k:v\nno separator\n")
    )
    assert "line 2 has no key separator ':'" in error


def test_unreachable_broker_says_how_to_start_one() -> None:
    address = f"127.0.0.1:{free_port()}"
    for command in (["topics", "list"], ["consume", "anything"], ["produce", "anything"]):
        error = one_line_error(sluice(None, *command, bootstrap=address))
        assert f"cannot reach broker at {address}: is `sluice serve` running?" in error
    result = sluice(None, "topics", "list", "--bootstrap-server", "no-port-here")
    assert result.returncode == 2
    assert "is not host:port" in result.stderr.decode()
