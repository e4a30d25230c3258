"""The message browser's filter and how it merges the records of several partitions
into one page. Pure: records in, records out.

A filter is a substring (case-insensitive) or a regular expression (Python's ``re``,
searched), over the key, the value or either, each read as UTF-8 (bytes that are not
are replaced). Only the first ``FILTER_TEXT_CHARS_MAX`` characters of a key or value
are searched, and a pattern is at most ``FILTER_PATTERN_CHARS_MAX`` characters, so one
page's matching has a bound.

A page of several partitions is their matching records in timestamp order (ties by
partition, then offset); the next page starts each partition where this one left it:
after its last record shown, or at its first matching record not shown, or where its
scan stopped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from sluice.client.consumer import ConsumedRecord
from sluice.common.ids import TopicPartition

FILTER_PATTERN_CHARS_MAX = 200
"""Longest filter a user may type."""
FILTER_TEXT_CHARS_MAX = 16 * 1024
"""Characters of each key and value searched (16 Ki)."""

Where = Literal["both", "key", "value"]
WHERE = ("both", "key", "value")
MODES = ("substring", "regex")


class FilterError(ValueError):
    """A filter that cannot be used; the message says why, for the user."""


@dataclass(frozen=True, slots=True)
class RecordFilter:
    text: str
    regex: bool
    where: Where
    _pattern: re.Pattern[str]

    @classmethod
    def parse(cls, text: str, mode: str, where: str) -> RecordFilter | None:
        """The filter the form asks for; None for an empty one."""
        if not text:
            return None
        if len(text) > FILTER_PATTERN_CHARS_MAX:
            raise FilterError(
                f"the filter is {len(text)} characters; at most {FILTER_PATTERN_CHARS_MAX}"
            )
        if mode not in MODES:
            raise FilterError(f"match must be one of {', '.join(MODES)}, not {mode!r}")
        if where not in WHERE:
            raise FilterError(f"search must be one of {', '.join(WHERE)}, not {where!r}")
        regex = mode == "regex"
        try:
            pattern = re.compile(text if regex else re.escape(text), 0 if regex else re.I)
        except re.error as e:
            raise FilterError(f"the regular expression {text!r} is not valid: {e}") from None
        return cls(text, regex, where, pattern)  # type: ignore[arg-type]

    def matches(self, record: ConsumedRecord) -> bool:
        fields = []
        if self.where != "value":
            fields.append(record.key)
        if self.where != "key":
            fields.append(record.value)
        return any(
            data is not None
            and self._pattern.search(
                data[: FILTER_TEXT_CHARS_MAX * 4].decode("utf-8", "replace")[:FILTER_TEXT_CHARS_MAX]
            )
            is not None
            for data in fields
        )


def merge_page(
    matched: Mapping[TopicPartition, Sequence[ConsumedRecord]],
    scanned_to: Mapping[TopicPartition, int],
    limit: int,
    *,
    newest: bool = False,
) -> tuple[list[ConsumedRecord], dict[TopicPartition, int]]:
    """One page of at most ``limit`` of the ``matched`` records (each partition's in
    offset order, found before ``scanned_to``) in timestamp order, and where each
    partition's next page starts. With ``newest`` the page is the last ``limit``
    records instead of the first (the next page then starts after the scan)."""
    every = sorted(
        (record for records in matched.values() for record in records),
        key=lambda r: (r.timestamp_ms, r.topic, r.partition, r.offset),
    )
    shown = every[-limit:] if newest else every[:limit]
    next_positions = dict(scanned_to)
    if not newest:
        for record in every[limit:]:
            tp = TopicPartition(record.topic, record.partition)
            next_positions[tp] = min(next_positions[tp], record.offset)
    return shown, next_positions
