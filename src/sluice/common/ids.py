"""Identifiers used across layers."""

from __future__ import annotations

import re
from typing import NamedTuple

NodeId = int
ProducerId = int

TOPIC_NAME_LENGTH_MAX = 249
"""Kafka's limit: a topic name becomes a directory name with a partition suffix."""

_LEGAL_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")


class TopicPartition(NamedTuple):
    """One partition of one topic."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def topic_name_problem(name: str) -> str | None:
    """Return why ``name`` is not a legal topic name, or None when it is."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        return f"topic name is longer than {TOPIC_NAME_LENGTH_MAX} characters"
    if not _LEGAL_TOPIC_NAME.match(name):
        return f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'"
    return None
