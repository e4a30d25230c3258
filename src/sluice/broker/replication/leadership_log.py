"""One log line per metadata change for the partitions this broker began or stopped
leading, instead of one per partition.

A broker's first start makes the 50 partitions of ``__consumer_offsets``, and a restart
leads every partition it hosts again: a line per partition buried what the start had to
say. The replica manager notes each change here (:meth:`LeadershipLog.note`) as it
applies partition states, and the metadata task says them once an image is applied
(:meth:`LeadershipLog.say`)::

    broker 0 now leads 50 partition(s) (leads 50 of 53 hosted): __consumer_offsets 0-49

Each partition's own transition stays in the log at DEBUG
(:mod:`sluice.broker.replication.partition`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable

from sluice.common.ids import TopicPartition

log = logging.getLogger(__name__)

TOPICS_NAMED_MAX = 5
"""Topics a summary line names; the rest are counted ("and 3 more topic(s)")."""


def describe_partitions(partitions: Iterable[TopicPartition]) -> str:
    """``t 0-3,7; u 1`` for partitions 0, 1, 2, 3 and 7 of ``t`` and 1 of ``u``: topics
    in name order, consecutive partitions as ranges, at most :data:`TOPICS_NAMED_MAX`
    topics named."""
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic_partition in partitions:
        by_topic[topic_partition.topic].append(topic_partition.partition)
    named = []
    for topic in sorted(by_topic)[:TOPICS_NAMED_MAX]:
        named.append(f"{topic} {_ranges(sorted(by_topic[topic]))}")
    text = "; ".join(named)
    if len(by_topic) > TOPICS_NAMED_MAX:
        text += f"; and {len(by_topic) - TOPICS_NAMED_MAX} more topic(s)"
    return text


def _ranges(numbers: list[int]) -> str:
    parts: list[str] = []
    start = previous = numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if number is not None:
            start = previous = number
    return ",".join(parts)


class LeadershipLog:
    """The partitions that began or stopped being led here since the last :meth:`say`."""

    def __init__(self, node_id: int) -> None:
        self._node_id = node_id
        self._began: set[TopicPartition] = set()
        self._stopped: set[TopicPartition] = set()

    def note(self, topic_partition: TopicPartition, *, leads: bool) -> None:
        """``topic_partition`` became led here (``leads``) or stopped being."""
        began, stopped = (self._began, self._stopped) if leads else (self._stopped, self._began)
        if topic_partition in stopped:
            stopped.discard(topic_partition)  # and back again: no change to say
        else:
            began.add(topic_partition)

    def say(self, led: int, hosted: int) -> None:
        """Log what changed since the last call (nothing when nothing did), with the
        ``led`` and ``hosted`` counts as they are now."""
        counts = f"(leads {led} of {hosted} hosted)"
        if self._began:
            log.info(
                "broker %d now leads %d partition(s) %s: %s",
                self._node_id,
                len(self._began),
                counts,
                describe_partitions(self._began),
            )
        if self._stopped:
            log.info(
                "broker %d no longer leads %d partition(s) %s: %s",
                self._node_id,
                len(self._stopped),
                counts,
                describe_partitions(self._stopped),
            )
        self._began.clear()
        self._stopped.clear()
