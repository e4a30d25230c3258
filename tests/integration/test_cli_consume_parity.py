"""``sluice consume`` options that match kcat and Kafka's console consumer, run as a user
runs them (a subprocess) against a real broker: the last N records (``--offset -N``),
starting at a time (``--timestamp``), a kcat format string (``-F``) and reading as a
member of a consumer group that commits what it printed (``--group``), its commits read
back by another client."""

from __future__ import annotations

import pytest
from broker_process import BrokerProcess
from client_helpers import (
    CLIENT_TIMEOUT_S,
    admin_client,
    create_topic,
    produce_and_flush,
    producer_config,
    run_sluice,
    unique_group_id,
)
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

RECORDS_PER_PARTITION = 10
FIRST_TIMESTAMP_MS = 1_704_067_200_000
"""2024-01-01T00:00:00Z: record i of a partition is written at this plus i seconds."""


@pytest.fixture(scope="module")
def broker(fast_groups_broker: BrokerProcess) -> BrokerProcess:
    return fast_groups_broker


def topic_with_records(broker: BrokerProcess, topic: str, partitions: int = 2) -> None:
    """Record i of partition p: value "p-i", key "k-i", FIRST_TIMESTAMP_MS + i s."""
    create_topic(broker.bootstrap, topic, num_partitions=partitions)
    producer = Producer(producer_config(broker.bootstrap, acks="all"))
    produce_and_flush(
        producer,
        topic,
        (
            {
                "key": f"k-{i}".encode(),
                "value": f"{p}-{i}".encode(),
                "partition": p,
                "timestamp": FIRST_TIMESTAMP_MS + i * 1000,
            }
            for p in range(partitions)
            for i in range(RECORDS_PER_PARTITION)
        ),
    )


def values(broker: BrokerProcess, topic: str, *args: str) -> list[str]:
    result = run_sluice(broker.bootstrap, "consume", topic, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def usage_error(broker: BrokerProcess, topic: str, *args: str) -> str:
    result = run_sluice(broker.bootstrap, "consume", topic, *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stderr


def test_a_negative_offset_reads_the_last_records_of_each_partition(
    broker: BrokerProcess, topic: str
) -> None:
    topic_with_records(broker, topic)
    assert values(broker, topic, "--offset", "-3") == [
        f"{p}-{i}" for p in range(2) for i in range(7, 10)
    ]
    assert values(broker, topic, "--offset=-2", "--partition", "1") == ["1-8", "1-9"]
    assert len(values(broker, topic, "--offset", "-100")) == 2 * RECORDS_PER_PARTITION
    # Fewer records kept than asked for: from the log start.
    admin = admin_client(broker.bootstrap)  # kept: its futures end with it
    deleted = admin.delete_records([ConfluentTopicPartition(topic, 0, 8)])
    for future in deleted.values():
        future.result(timeout=CLIENT_TIMEOUT_S)
    assert values(broker, topic, "--offset", "-5", "--partition", "0") == ["0-8", "0-9"]
    assert "give one of --offset, --from-beginning" in usage_error(
        broker, topic, "--offset", "-1", "--from-beginning"
    )


def test_timestamp_starts_at_the_first_record_at_or_after_a_time(
    broker: BrokerProcess, topic: str
) -> None:
    topic_with_records(broker, topic)
    five_seconds_in = str(FIRST_TIMESTAMP_MS + 5000)
    assert values(broker, topic, "--timestamp", five_seconds_in) == [
        f"{p}-{i}" for p in range(2) for i in range(5, 10)
    ]
    assert values(broker, topic, "--timestamp", "2024-01-01T00:00:07.500Z", "--partition", "1") == [
        "1-8",
        "1-9",
    ]
    assert values(
        broker, topic, "--timestamp", "2024-01-01T02:00:08+02:00", "--partition", "1"
    ) == ["1-8", "1-9"]
    assert values(broker, topic, "--timestamp", "2023-12-31T00:00:00Z") == [
        f"{p}-{i}" for p in range(2) for i in range(RECORDS_PER_PARTITION)
    ]
    assert values(broker, topic, "--timestamp", "2024-06-01T00:00:00Z") == []  # after them all
    assert "is not a date and time" in usage_error(broker, topic, "--timestamp", "yesterday")


def test_a_format_string_prints_fields_like_kcat(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    producer = Producer(producer_config(broker.bootstrap, acks="all"))
    produce_and_flush(
        producer,
        topic,
        [
            {"key": b"k", "value": b"v", "headers": [("h1", b"a"), ("h2", b"b")], "timestamp": 7},
            {"value": b"no key", "timestamp": 8},
        ],
    )
    result = run_sluice(
        broker.bootstrap, "consume", topic, "-F", "%t|%p|%o|%k|%s|%T|%h|%K|%S|100%%\\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"{topic}|0|0|k|v|7|h1=a,h2=b|1|1|100%\n{topic}|0|1||no key|8||-1|6|100%\n"
    )
    tabbed = run_sluice(broker.bootstrap, "consume", topic, "-F", "%o\\t%s\\n", "--offset", "1")
    assert tabbed.stdout == "1\tno key\n"
    assert "unknown token %x" in usage_error(broker, topic, "-F", "%x")
    assert "unknown escape \\q" in usage_error(broker, topic, "-F", "\\q")
    assert "lone '%'" in usage_error(broker, topic, "-F", "%s%")
    assert "--format-string replaces" in usage_error(broker, topic, "-F", "%s", "--format", "json")


def committed(broker: BrokerProcess, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offsets, as another client (librdkafka) reads them."""
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        found = reader.committed(
            [ConfluentTopicPartition(topic, p) for p in range(partitions)],
            timeout=CLIENT_TIMEOUT_S,
        )
        return [tp.offset for tp in found]
    finally:
        reader.close()


def test_group_reads_from_committed_offsets_and_commits_what_it_printed(
    broker: BrokerProcess, topic: str
) -> None:
    topic_with_records(broker, topic, partitions=2)
    group = unique_group_id()
    printed = values(broker, topic, "--group", group)
    assert sorted(printed) == sorted(f"{p}-{i}" for p in range(2) for i in range(10))
    assert committed(broker, group, topic, 2) == [10, 10]
    assert values(broker, topic, "-g", group) == []  # nothing new: nothing printed

    producer = Producer(producer_config(broker.bootstrap, acks="all"))
    produce_and_flush(producer, topic, [{"value": b"later", "partition": 1}])
    assert values(broker, topic, "--group", group, "-b", broker.bootstrap) == ["later"]
    assert committed(broker, group, topic, 2) == [10, 11]


def test_group_with_max_messages_commits_only_what_it_printed(
    broker: BrokerProcess, topic: str
) -> None:
    topic_with_records(broker, topic, partitions=1)
    group = unique_group_id()
    assert values(broker, topic, "--group", group, "--max-messages", "4") == [
        f"0-{i}" for i in range(4)
    ]
    assert committed(broker, group, topic, 1) == [4]
    assert values(broker, topic, "--group", group, "--max-messages", "2") == ["0-4", "0-5"]
    assert committed(broker, group, topic, 1) == [6]
    assert "--group reads the partitions the group assigns" in usage_error(
        broker, topic, "--group", group, "--offset", "3"
    )


def test_group_on_a_missing_topic_is_a_clear_error(broker: BrokerProcess, topic: str) -> None:
    result = run_sluice(broker.bootstrap, "consume", topic, "--group", unique_group_id())
    assert result.returncode == 1
    assert f"topic {topic!r} does not exist" in result.stderr
    assert "Traceback" not in result.stderr
