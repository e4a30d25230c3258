"""The message browser's filter and its merge of several partitions into one page."""

from __future__ import annotations

import pytest

from sluice.client.consumer import ConsumedRecord
from sluice.common.ids import TopicPartition
from sluice.console.message_filter import FilterError, RecordFilter, merge_page


def _record(
    partition: int, offset: int, time_ms: int, key: bytes | None = None, value: bytes | None = None
) -> ConsumedRecord:
    return ConsumedRecord("t", partition, offset, time_ms, key, value)


def test_substring_is_case_insensitive_and_regex_is_searched() -> None:
    substring = RecordFilter.parse("Refund", "substring", "both")
    assert substring is not None
    assert substring.matches(_record(0, 0, 0, value=b'{"kind": "REFUND"}'))
    assert not substring.matches(_record(0, 0, 0, key=b"sale", value=None))
    regex = RecordFilter.parse(r"^user-\d$", "regex", "key")
    assert regex is not None
    assert regex.matches(_record(0, 0, 0, key=b"user-7", value=b"user-77"))
    assert not regex.matches(_record(0, 0, 0, key=b"user-77", value=b"user-7"))
    assert regex.matches(_record(0, 0, 0, key=b"\xffuser-1"[1:]))
    assert RecordFilter.parse("", "regex", "key") is None


@pytest.mark.parametrize(
    ("text", "mode", "where", "says"),
    [
        ("(", "regex", "both", "not valid"),
        ("x" * 201, "substring", "both", "at most 200"),
        ("x", "glob", "both", "match must be"),
        ("x", "substring", "headers", "search must be"),
    ],
)
def test_bad_filters_say_why(text: str, mode: str, where: str, says: str) -> None:
    with pytest.raises(FilterError, match=says):
        RecordFilter.parse(text, mode, where)


def test_a_page_of_several_partitions_is_in_time_order_and_the_next_starts_after_it() -> None:
    p0, p1 = TopicPartition("t", 0), TopicPartition("t", 1)
    matched = {
        p0: [_record(0, 5, 100), _record(0, 6, 300)],
        p1: [_record(1, 9, 200), _record(1, 10, 400)],
    }
    shown, positions = merge_page(matched, {p0: 7, p1: 11}, limit=2)
    assert [(r.partition, r.offset) for r in shown] == [(0, 5), (1, 9)]
    assert positions == {p0: 6, p1: 10}
    newest, after = merge_page(matched, {p0: 7, p1: 11}, limit=2, newest=True)
    assert [(r.partition, r.offset) for r in newest] == [(0, 6), (1, 10)]
    assert after == {p0: 7, p1: 11}
