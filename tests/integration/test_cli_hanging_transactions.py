"""``sluice transactions describe-producers``, ``find-hanging`` and ``abort`` against real
brokers, with confluent-kafka as the transactional producer and the read_committed
consumer: an open transaction aborted by its start offset lets read_committed readers
past it; a transaction whose coordinator state was lost (its __transaction_state data
removed while the broker was down) is found hanging, aborted, and then no longer found."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from typing import Any

from broker_process import BrokerProcess
from client_helpers import (
    CLIENT_TIMEOUT_S,
    consume_exactly,
    create_topic,
    produce_and_flush,
    producer_config,
    run_sluice,
)
from confluent_kafka import Producer


def ok(result: Any) -> str:
    assert result.returncode == 0, result.stderr
    return str(result.stdout)


def open_transaction(broker: BrokerProcess, topic: str, transactional_id: str) -> Producer:
    """A producer with a transaction open on partition 0 of ``topic``: three records,
    the first at offset 1 (offset 0 holds a committed, non-transactional record)."""
    plain = Producer(producer_config(broker.bootstrap, acks="all"))
    produce_and_flush(plain, topic, [{"value": b"before", "partition": 0}])
    producer = Producer(producer_config(broker.bootstrap, **{"transactional.id": transactional_id}))
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    for index in range(3):
        producer.produce(topic, value=f"open-{index}".encode(), partition=0)
    producer.flush(CLIENT_TIMEOUT_S)
    return producer


def read_committed_values(broker: BrokerProcess, topic: str, count: int) -> list[bytes]:
    messages = consume_exactly(
        broker.bootstrap,
        [(topic, 0)],
        count,
        extra_wait_s=0.5,
        **{"isolation.level": "read_committed"},
    )
    return [message.value() for message in messages]


def producers(broker: BrokerProcess, topic: str) -> list[dict[str, Any]]:
    document: list[dict[str, Any]] = json.loads(
        ok(
            run_sluice(
                broker.bootstrap,
                "transactions",
                "describe-producers",
                "--topic",
                topic,
                "--partition",
                "0",
                "--format",
                "json",
            )
        )
    )
    return document


def hanging(broker: BrokerProcess, topic: str) -> list[dict[str, Any]]:
    arguments = ("--topic", topic, "--max-transaction-timeout", "0", "--format", "json")
    document: list[dict[str, Any]] = json.loads(
        ok(run_sluice(broker.bootstrap, "transactions", "find-hanging", *arguments))
    )
    return document


def test_an_open_transaction_aborted_by_its_start_offset_lets_readers_past(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic)
    producer = open_transaction(broker, topic, f"abort-{topic}")
    (state,) = [p for p in producers(broker, topic) if p["transaction_start_offset"] is not None]
    assert state["transaction_start_offset"] == 1
    # Open and known to its coordinator, which holds the partition: not hanging.
    assert hanging(broker, topic) == []

    refused = run_sluice(
        broker.bootstrap,
        "transactions",
        "abort",
        "--topic",
        topic,
        "--partition",
        "0",
        "--start-offset",
        "2",
    )
    assert refused.returncode == 1
    assert "no open transaction starts at offset 2" in refused.stderr
    assert "open ones start at 1" in refused.stderr

    aborted = run_sluice(
        broker.bootstrap,
        "transactions",
        "abort",
        "--topic",
        topic,
        "--partition",
        "0",
        "--start-offset",
        "1",
    )
    assert f"Aborted the transaction of producer {state['producer_id']}" in ok(aborted)
    assert all(p["transaction_start_offset"] is None for p in producers(broker, topic))
    plain = Producer(producer_config(broker.bootstrap, acks="all"))
    produce_and_flush(plain, topic, [{"value": b"after", "partition": 0}])
    assert read_committed_values(broker, topic, 2) == [b"before", b"after"]
    producer.abort_transaction(CLIENT_TIMEOUT_S)  # the producer still works


def test_a_transaction_its_coordinator_lost_is_found_hanging_and_aborted(
    broker_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    broker = broker_factory({"transaction.state.log.num.partitions": "1"})
    create_topic(broker.bootstrap, topic)
    producer = open_transaction(broker, topic, f"lost-{topic}")
    assert hanging(broker, topic) == []
    # The coordinator's state is lost: the partition keeps the open transaction.
    del producer
    broker.stop()
    for directory in broker.data_dir.glob("__transaction_state-*"):
        shutil.rmtree(directory)
    broker.start()

    (found,) = hanging(broker, topic)
    assert (found["topic"], found["partition"], found["transaction_start_offset"]) == (topic, 0, 1)
    text = run_sluice(
        broker.bootstrap,
        "transactions",
        "find-hanging",
        "--topic",
        topic,
        "--max-transaction-timeout",
        "0",
    )
    assert "--partition 0 --start-offset 1" in text.stderr
    row = ok(text).splitlines()[1].split()
    assert row[:3] == [topic, "0", str(found["producer_id"])]
    # Older than the default limit (15 minutes) it is not yet.
    assert "No hanging transaction found." in ok(
        run_sluice(broker.bootstrap, "transactions", "find-hanging", "--topic", topic)
    )

    ok(
        run_sluice(
            broker.bootstrap,
            "transactions",
            "abort",
            "--topic",
            topic,
            "--partition",
            "0",
            "--producer-id",
            str(found["producer_id"]),
            "--producer-epoch",
            str(found["producer_epoch"]),
            "--coordinator-epoch",
            str(found["coordinator_epoch"]),
        )
    )
    assert hanging(broker, topic) == []
    plain = Producer(producer_config(broker.bootstrap, acks="all"))
    produce_and_flush(plain, topic, [{"value": b"after", "partition": 0}])
    assert read_committed_values(broker, topic, 2) == [b"before", b"after"]


def test_find_hanging_and_abort_refuse_bad_usage(broker: BrokerProcess, topic: str) -> None:
    nowhere = run_sluice(broker.bootstrap, "transactions", "find-hanging")
    assert nowhere.returncode == 2 and "give --topic TOPIC or --broker ID" in nowhere.stderr
    unnamed = run_sluice(
        broker.bootstrap, "transactions", "abort", "--topic", topic, "--partition", "0"
    )
    assert unnamed.returncode == 2 and "name the transaction with --start-offset" in unnamed.stderr
    missing = run_sluice(
        broker.bootstrap,
        "transactions",
        "abort",
        "--topic",
        topic,
        "--partition",
        "0",
        "--start-offset",
        "0",
    )
    assert missing.returncode == 1 and f"topic {topic!r} does not exist" in missing.stderr
