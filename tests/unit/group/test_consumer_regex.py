"""Regex subscriptions use RE2's syntax (Kafka's RE2/J): whole-name matches, RE2's
refusals with its reason, a bound on the pattern's length, and linear-time matching
of patterns that make a backtracking engine explode."""

from __future__ import annotations

import pytest

from sluice.group.consumer_regex import (
    SUBSCRIBED_TOPIC_REGEX_BYTES_MAX,
    InvalidRegularExpression,
    check,
    matching_topics,
)


def test_a_pattern_matches_whole_topic_names() -> None:
    names = ["orders", "orders-eu", "old-orders", "payments"]
    assert matching_topics("orders.*", names) == {"orders", "orders-eu"}
    assert matching_topics("order", names) == set()
    assert matching_topics(r"\p{L}+", ["ordres", "t1"]) == {"ordres"}


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(a)\\1", "invalid escape sequence"),
        ("(?=a)a", "invalid perl operator"),
        ("(?<!a)b", "invalid perl operator"),
        ("(unclosed", "missing )"),
    ],
)
def test_what_re2_refuses_is_refused_with_its_reason(pattern: str, reason: str) -> None:
    with pytest.raises(InvalidRegularExpression, match="Invalid regular expression") as error:
        check(pattern)
    assert reason in str(error.value)


def test_a_pattern_longer_than_the_limit_is_refused() -> None:
    with pytest.raises(InvalidRegularExpression, match="longer than"):
        check("a" * (SUBSCRIBED_TOPIC_REGEX_BYTES_MAX + 1))


def test_a_catastrophic_pattern_for_backtracking_engines_matches_in_linear_time() -> None:
    # Python's re takes exponential time here (2^40 steps); RE2 answers at once.
    assert matching_topics("(a+)+b", ["a" * 40]) == set()
