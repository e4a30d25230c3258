"""``sluice groups``: parsing of --to-datetime and --topic, the reset arithmetic, and the
usage errors refused before anything is sent."""

from __future__ import annotations

import datetime

import pytest
from click.testing import CliRunner

from sluice.cli.groups import (
    ResetKind,
    ResetTarget,
    clamp,
    merge_topic_specs,
    new_offset,
    parse_datetime_ms,
    parse_topic_spec,
)
from sluice.cli.main import main

JAN_1_2024_UTC_MS = 1_704_067_200_000


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [
        ("2024-01-01T00:00:00Z", JAN_1_2024_UTC_MS),
        ("2024-01-01T00:00:00+00:00", JAN_1_2024_UTC_MS),
        ("2024-01-01T02:00:00+02:00", JAN_1_2024_UTC_MS),
        ("2023-12-31T19:00:00-0500", JAN_1_2024_UTC_MS),
        ("2024-01-01T00:00:00.250Z", JAN_1_2024_UTC_MS + 250),
        ("2024-01-01T00:00Z", JAN_1_2024_UTC_MS),
    ],
)
def test_datetimes_with_a_zone(text: str, expected_ms: int) -> None:
    assert parse_datetime_ms(text) == expected_ms


def test_a_datetime_without_a_zone_is_local_time() -> None:
    local = datetime.datetime(2024, 6, 1, 12, 30, 5).astimezone()
    assert parse_datetime_ms("2024-06-01T12:30:05") == int(local.timestamp() * 1000)


@pytest.mark.parametrize(
    "text",
    ["2024-01-01", "yesterday", "2024-01-01 00:00:00", "2024-13-01T00:00:00", "1704067200000"],
)
def test_bad_datetimes_say_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match=repr(text).replace("(", r"\(")):
        parse_datetime_ms(text)


def test_topic_specs() -> None:
    assert parse_topic_spec("orders") == ("orders", None)
    assert parse_topic_spec("orders:2") == ("orders", [2])
    assert parse_topic_spec("orders:3,0, 1") == ("orders", [0, 1, 3])
    assert parse_topic_spec("orders:0-2,5,1") == ("orders", [0, 1, 2, 5])


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("orders:", "no partitions after ':'"),
        ("orders:x", "'x' in 'orders:x' is not a partition number"),
        ("orders:-1", "not a partition number or range"),
        ("orders:3-1", "'3-1' in 'orders:3-1' is not a valid partition range"),
        ("orders:0-99999", "beyond the 10000 partitions"),
        ("bad/topic:0", "characters other than"),
        (":0", "topic name is empty"),
    ],
)
def test_bad_topic_specs_name_the_problem(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_topic_spec(text)


def test_repeated_topics_merge_and_a_whole_topic_wins() -> None:
    assert merge_topic_specs(["a:1", "b", "a:0", "c:2", "c"]) == {
        "a": [0, 1],
        "b": None,
        "c": None,
    }
    assert merge_topic_specs(["c", "c:2"]) == {"c": None}


# ── where a reset goes ───────────────────────────────────────────────────────────────────


def _offset(target: ResetTarget, current: int | None = 50, at_time: int = -1) -> int:
    return new_offset(
        target,
        current_offset=current,
        log_start_offset=10,
        log_end_offset=100,
        offset_at_time=at_time,
    )


def test_reset_targets() -> None:
    assert _offset(ResetTarget(ResetKind.EARLIEST)) == 10
    assert _offset(ResetTarget(ResetKind.LATEST)) == 100
    assert _offset(ResetTarget(ResetKind.DATETIME, 0), at_time=42) == 42
    assert _offset(ResetTarget(ResetKind.OFFSET, 70)) == 70
    assert _offset(ResetTarget(ResetKind.SHIFT_BY, -5)) == 45
    assert _offset(ResetTarget(ResetKind.SHIFT_BY, 5)) == 55


def test_a_time_after_the_last_record_goes_to_the_log_end() -> None:
    assert _offset(ResetTarget(ResetKind.DATETIME, 0), at_time=-1) == 100


def test_offsets_outside_the_log_are_clamped_like_kafka() -> None:
    assert _offset(ResetTarget(ResetKind.OFFSET, 3)) == 10
    assert _offset(ResetTarget(ResetKind.OFFSET, 1000)) == 100
    assert _offset(ResetTarget(ResetKind.SHIFT_BY, -1000)) == 10
    assert _offset(ResetTarget(ResetKind.SHIFT_BY, 1000)) == 100
    assert clamp(5, 5, 5) == 5


def test_shifting_needs_a_committed_offset() -> None:
    with pytest.raises(ValueError, match="no committed offset"):
        _offset(ResetTarget(ResetKind.SHIFT_BY, 1), current=None)
    assert _offset(ResetTarget(ResetKind.OFFSET, 20), current=None) == 20


# ── usage errors, before any connection ──────────────────────────────────────────────────

UNREACHABLE = "127.0.0.1:1"


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (["g", "--to-earliest"], "give --topic TOPIC[:PARTITIONS] (repeatable) or --all-topics"),
        (["g", "--topic", "t", "--all-topics", "--to-earliest"], "or --all-topics"),
        (["g", "--topic", "t"], "give exactly one of --to-earliest"),
        (["g", "--topic", "t", "--to-earliest", "--shift-by", "1"], "exactly one of"),
        (["g", "--topic", "t:x", "--to-earliest"], "'x' in 't:x' is not a partition number"),
        (["g", "--topic", "t", "--to-datetime", "soon"], "'soon' is not a date and time"),
        (["g", "--topic", "t", "--to-offset", "-1"], "-1 is not in the range x>=0"),
        (["", "--topic", "t", "--to-latest"], "a group id cannot be empty"),
    ],
)
def test_reset_usage_errors(arguments: list[str], problem: str) -> None:
    result = CliRunner().invoke(
        main, ["groups", "reset-offsets", *arguments, "--bootstrap-server", UNREACHABLE]
    )
    assert result.exit_code == 2, result.output
    assert problem in result.output


def test_an_unreachable_broker_is_one_line() -> None:
    result = CliRunner().invoke(main, ["groups", "list", "--bootstrap-server", UNREACHABLE])
    assert result.exit_code == 1
    assert result.output.startswith("Error: cannot reach broker at 127.0.0.1:1")
    assert "Traceback" not in result.output
