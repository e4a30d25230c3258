"""A disk that is slow to sync must not stall the broker: the flusher's checkpoint
writes (two fsyncs a file) run on a worker thread, so while one waits on the disk the
broker goes on answering every client.

The wait is real: the disk-fault shim (``disk_faults``), loaded into the broker process,
holds the fsync of the partition's ``partition.checkpoint.tmp`` inside the C library
until the test lets it go. Were the write on the event loop, the loop would be held with
it and no request below would get an answer before the deadline.
"""

from __future__ import annotations

from pathlib import Path

from client_helpers import (
    admin_client,
    consume_exactly,
    create_topic,
    produce_and_flush,
    producer_config,
    wait_until,
)
from confluent_kafka import Producer
from disk_faults import faulty_broker

from sluice.storage.checkpoint import read_offsets_checkpoint
from sluice.storage.log import PARTITION_CHECKPOINT_NAME

ANSWER_TIMEOUT_S = 20.0
"""How long each request may take while the checkpoint write is held: generous for a
loaded machine; a broker whose loop is held never answers at all."""
MESSAGES = 20


def test_the_broker_answers_while_a_checkpoint_write_waits_on_the_disk(
    tmp_path: Path, disk_faults_shim: Path, topic: str
) -> None:
    data_dir = tmp_path / "data"
    trigger = tmp_path / "hold-checkpoint-fsyncs"
    held = trigger.with_name(trigger.name + ".held")
    checkpoint = data_dir / f"{topic}-0" / PARTITION_CHECKPOINT_NAME
    broker = faulty_broker(
        data_dir,
        disk_faults_shim,
        "fsync-hold",
        trigger,
        environment={"DISK_FAULT_SUFFIX": f"/{topic}-0/{PARTITION_CHECKPOINT_NAME}.tmp"},
    )
    broker.start()
    try:
        create_topic(broker.bootstrap, topic)
        producer = Producer(producer_config(broker.bootstrap, acks="all"))
        trigger.touch()
        before = produce_and_flush(
            producer, topic, [{"value": b"before-%d" % i} for i in range(MESSAGES)]
        )
        wait_until(held.exists, "the flusher's checkpoint write waits in its fsync")

        during = produce_and_flush(
            producer,
            topic,
            [{"value": b"during-%d" % i} for i in range(MESSAGES)],
            timeout_s=ANSWER_TIMEOUT_S,
        )
        metadata = admin_client(broker.bootstrap).list_topics(topic, timeout=ANSWER_TIMEOUT_S)
        assert topic in metadata.topics
        messages = consume_exactly(
            broker.bootstrap, [(topic, 0)], 2 * MESSAGES, timeout_s=ANSWER_TIMEOUT_S
        )
        assert [m.value() for m in messages] == [d.value for d in before + during]
        assert recovery_point_on_disk(checkpoint) == 0, "the checkpoint write is held"

        trigger.unlink()
        wait_until(
            lambda: recovery_point_on_disk(checkpoint) >= MESSAGES,
            "the held checkpoint write lands once the disk lets it go",
        )
    finally:
        trigger.unlink(missing_ok=True)
        exit_code = broker.stop()
    assert exit_code == 0, broker.log_tail()
    assert recovery_point_on_disk(checkpoint) == 2 * MESSAGES


def recovery_point_on_disk(checkpoint: Path) -> int:
    return (read_offsets_checkpoint(checkpoint) or {}).get("recovery_point", 0)
