"""The broker's background tasks (the flusher, retention) running while requests change
the same partitions. An error in one partition's background work must never stop the
broker; these tests make the races frequent by flushing every 10 ms."""

from __future__ import annotations

import datetime
import time

from kafka_wire import (
    EARLIEST_TIMESTAMP,
    KafkaConnection,
    Record,
    create_topics_request,
    encode_batch,
    list_offsets_request,
    metadata_request,
    only_partition,
    produce_request,
)
from kio.schema.delete_topics.v3 import request as delete_topics_v3

EAGER_FLUSHER = {
    "log.flush.scheduler.interval.ms": "10",  # look for due partitions every 10 ms
    "log.flush.interval.ms": "0",  # and every partition with new data is due
}
ROUNDS = 5
TOPICS_PER_ROUND = 20


def delete_topics_request(names: list[str]) -> delete_topics_v3.DeleteTopicsRequest:
    return delete_topics_v3.DeleteTopicsRequest(
        topic_names=tuple(names), timeout=datetime.timedelta(seconds=10)
    )


def assert_alive_and_serving(broker) -> None:
    assert broker.is_running, f"the broker exited with code {broker.stop()}"
    with KafkaConnection(broker.host, broker.port) as connection:
        assert connection.request(metadata_request(None)).brokers


def test_deleting_topics_while_the_flusher_runs_keeps_the_broker_up(broker_factory):
    broker = broker_factory(EAGER_FLUSHER)
    with KafkaConnection(broker.host, broker.port) as connection:
        for round_number in range(ROUNDS):
            names = [f"flush-race-{round_number}-{i}" for i in range(TOPICS_PER_ROUND)]
            for name in names:
                (created,) = connection.request(create_topics_request(name)).topics
                assert created.error_code == 0
                batch = encode_batch([Record(None, b"x" * 10_000)])
                result = only_partition(connection.request(produce_request(name, 0, batch)))
                assert result.error_code == 0
            deleted = connection.request(delete_topics_request(names)).responses
            assert [r.error_code for r in deleted] == [0] * len(names)
    assert_alive_and_serving(broker)


def test_retention_deleting_segments_while_the_flusher_runs_keeps_the_broker_up(
    broker_factory,
):
    broker = broker_factory({**EAGER_FLUSHER, "log.retention.check.interval.ms": "10"})
    hour_ago_ms = int(time.time() * 1000) - 3_600_000
    with KafkaConnection(broker.host, broker.port) as connection:
        for round_number in range(ROUNDS):
            name = f"retention-race-{round_number}"
            (created,) = connection.request(
                create_topics_request(
                    name,
                    configs={
                        "segment.bytes": "1000",
                        "retention.ms": "60000",
                        "file.delete.delay.ms": "0",
                    },
                )
            ).topics
            assert created.error_code == 0
            for i in range(50):
                batch = encode_batch([Record(None, b"%03d" % i * 100, timestamp_ms=hour_ago_ms)])
                result = only_partition(connection.request(produce_request(name, 0, batch)))
                assert result.error_code == 0
            earliest = only_partition(
                connection.request(list_offsets_request(name, 0, EARLIEST_TIMESTAMP))
            )
            assert earliest.error_code == 0
    assert_alive_and_serving(broker)
