"""One line per metadata change for the partitions led here
(sluice.broker.replication.leadership_log)."""

from __future__ import annotations

import logging

import pytest

from sluice.broker.replication.leadership_log import (
    TOPICS_NAMED_MAX,
    LeadershipLog,
    describe_partitions,
)
from sluice.common.ids import TopicPartition


def test_partitions_are_described_by_topic_with_ranges() -> None:
    partitions = [TopicPartition("t", p) for p in (3, 0, 1, 2, 7, 9, 10)]
    partitions.append(TopicPartition("a", 5))
    assert describe_partitions(partitions) == "a 5; t 0-3,7,9-10"


def test_past_the_named_topics_the_rest_are_counted() -> None:
    partitions = [TopicPartition(f"t{i:02d}", 0) for i in range(TOPICS_NAMED_MAX + 3)]
    assert describe_partitions(partitions).endswith("; and 3 more topic(s)")


def test_one_line_per_change_and_nothing_when_nothing_changed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sluice.broker.replication.leadership_log")
    leadership = LeadershipLog(0)
    for partition in range(50):
        leadership.note(TopicPartition("__consumer_offsets", partition), leads=True)
    leadership.note(TopicPartition("orders", 1), leads=True)
    leadership.note(TopicPartition("orders", 1), leads=False)  # and back: no change
    leadership.say(led=50, hosted=53)
    leadership.say(led=50, hosted=53)
    assert [r.getMessage() for r in caplog.records] == [
        "broker 0 now leads 50 partition(s) (leads 50 of 53 hosted): __consumer_offsets 0-49"
    ]
