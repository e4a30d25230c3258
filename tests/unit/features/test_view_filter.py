"""The view filter language: what it matches, and bad filters refused with a pointer."""

from __future__ import annotations

import pytest

from sluice.features.view_filter import FilterError, parse_filter

RED = [("x-sluice-tag", b"red")]
RED_EU = [("x-sluice-tag", b"red"), ("region", b"eu")]
BLUE_US = [("x-sluice-tag", b"blue"), ("region", b"us")]
TWO_TAGS = [("x-sluice-tag", b"green"), ("x-sluice-tag", b"red")]
NONE: list[tuple[str, bytes | None]] = []
NULL_REGION = [("region", None)]


@pytest.mark.parametrize(
    ("text", "matching"),
    [
        ("tag = 'red'", {"RED", "RED_EU", "TWO_TAGS"}),
        ("tag != 'red'", {"BLUE_US", "NONE", "NULL_REGION"}),
        ("tag in ('red', 'blue')", {"RED", "RED_EU", "BLUE_US", "TWO_TAGS"}),
        ("tag not in ('red', 'blue')", {"NONE", "NULL_REGION"}),
        ("header.region = 'eu'", {"RED_EU"}),
        ("tag = 'red' and header.region = 'eu'", {"RED_EU"}),
        ("tag = 'blue' or header.region = 'eu'", {"RED_EU", "BLUE_US"}),
        ("not tag = 'red'", {"BLUE_US", "NONE", "NULL_REGION"}),
        ("not (tag = 'red' or tag = 'blue')", {"NONE", "NULL_REGION"}),
        ("tag = 'red' and (header.region = 'eu' or header.region = 'us')", {"RED_EU"}),
        ("header.region exists", {"RED_EU", "BLUE_US"}),
        ("not header.region exists", {"RED", "TWO_TAGS", "NONE", "NULL_REGION"}),
        ("TAG = 'red' AND NOT header.region EXISTS", {"RED", "TWO_TAGS"}),
        # and binds tighter than or
        ("tag = 'blue' or tag = 'red' and header.region = 'eu'", {"RED_EU", "BLUE_US"}),
    ],
)
def test_what_a_filter_matches(text: str, matching: set[str]) -> None:
    records = {
        "RED": RED,
        "RED_EU": RED_EU,
        "BLUE_US": BLUE_US,
        "TWO_TAGS": TWO_TAGS,
        "NONE": NONE,
        "NULL_REGION": NULL_REGION,
    }
    view_filter = parse_filter(text)
    assert {name for name, headers in records.items() if view_filter.matches_record(headers)} == (
        matching
    )


def test_quotes_inside_strings_and_header_names_with_punctuation() -> None:
    view_filter = parse_filter("header.x-app.kind:v2 = 'it''s'")
    assert view_filter.matches_record([("x-app.kind:v2", b"it's")])
    assert view_filter.headers == {"x-app.kind:v2"}
    assert parse_filter("tag = 'a' or header.b exists").headers == {"x-sluice-tag", "b"}


@pytest.mark.parametrize(
    ("text", "position", "problem"),
    [
        ("", 0, "the filter is empty"),
        ("tag = red", 6, "expected a string in quotes, found 'red'"),
        ("tag = 'red", 6, "a string is not closed"),
        ("colour = 'red'", 0, "unknown field 'colour'"),
        ("tag == 'red'", 5, "expected a string in quotes, found '='"),
        ("tag = 'red' and", 15, "expected tag, header.<name>, 'not' or '(', found the end"),
        ("(tag = 'red'", 12, "expected ')', found the end"),
        ("tag in 'red'", 7, "expected '(' and a list of strings"),
        ("tag in ('red' 'blue')", 14, "expected ',' or ')'"),
        ("tag = 'a' tag = 'b'", 10, "expected 'and', 'or' or the end, found 'tag'"),
        ("tag ~ 'a'", 4, "unexpected '~'"),
        ("tag like 'a'", 4, "expected '=', '!=', 'in', 'not in' or 'exists'"),
    ],
)
def test_a_bad_filter_is_refused_pointing_at_the_problem(
    text: str, position: int, problem: str
) -> None:
    with pytest.raises(FilterError) as caught:
        parse_filter(text)
    assert caught.value.position == position, str(caught.value)
    assert problem in str(caught.value)
    caret_line = str(caught.value).splitlines()[-1]
    assert caret_line.index("^") == 2 + position


def test_a_filter_too_long_is_refused() -> None:
    with pytest.raises(FilterError, match="longer than 4096 bytes"):
        parse_filter("tag = '" + "x" * 5000 + "'")
