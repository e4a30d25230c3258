"""How a README ``text`` block is compared with what its command printed
(``readme_blocks.assert_shows``): exact lines, widened columns, varying parts the test
names and ``…`` for left-out lines, and a real difference still fails."""

from __future__ import annotations

import pytest
from readme_blocks import Block, assert_shows

TABLE = "  GROUP    STATE\n  billing  Empty\n"


def test_the_same_text_matches_trailing_spaces_aside() -> None:
    assert_shows("  GROUP    STATE  \n  billing  Empty\n", TABLE)


def test_a_wider_column_matches() -> None:
    assert_shows(
        "  GROUP       STATE\n  billing-eu  Empty\n", "  GROUP       STATE\n  billing-eu  Empty\n"
    )
    assert_shows("  GROUP            STATE\n  billing  Empty\n", TABLE)


def test_a_different_value_fails() -> None:
    with pytest.raises(AssertionError, match="the README shows"):
        assert_shows("  GROUP    STATE\n  billing  Stable\n", TABLE)
    with pytest.raises(AssertionError):
        assert_shows(TABLE + "  audit  Empty\n", TABLE)  # a line more
    with pytest.raises(AssertionError):
        assert_shows("  GROUP STATE\n  billing Empty\n", TABLE)  # one space is not a gap


def test_varying_parts_match_what_the_test_names_only() -> None:
    shown = "state: Empty   group epoch: 8\n"
    varying = [r"(?<=group epoch: )\d+"]
    assert_shows("state: Empty   group epoch: 12\n", shown, varying)
    with pytest.raises(AssertionError):
        assert_shows("state: Stable   group epoch: 12\n", shown, varying)


def test_an_ellipsis_line_stands_for_any_lines() -> None:
    shown = "Configs:\n  a = 1\n…\n  z = 26\n"
    assert_shows("Configs:\n  a = 1\n  b = 2\n  c = 3\n  z = 26\n", shown)
    assert_shows("Configs:\n  a = 1\n  z = 26\n", shown)
    with pytest.raises(AssertionError):
        assert_shows("Configs:\n  a = 1\n  b = 2\n", shown)


def test_a_block_key_survives_edits_of_its_body() -> None:
    before = Block("Quick start", "sh", "sluice topics create orders\nsluice consume\n", 1, 1)
    after = Block("Quick start", "sh", "sluice topics create orders\nsluice  produce\n", 9, 1)
    assert before.key == after.key == "Quick start | sluice topics create orders"
    second = Block("Delivery semantics", "python", "import asyncio\n", 5, 2)
    assert second.key == "Delivery semantics | import asyncio (2)"
