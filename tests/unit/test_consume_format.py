"""``sluice consume -F``: format strings compiled once, tokens and escapes as kcat's -f
has them, anything else refused with what is wrong."""

from __future__ import annotations

import pytest

from sluice.cli.consume_format import FORMAT_STRING_BYTES_MAX, FormatStringError, compile_format
from sluice.client.consumer import ConsumedRecord

RECORD = ConsumedRecord("orders", 3, 42, 1_700_000_000_123, b"k\xff", b"value", (("h", b"1"),))


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("%t %p %o %T", b"orders 3 42 1700000000123"),
        ("%k=%s\\n", b"k\xff=value\n"),
        ("%K %S", b"2 5"),
        ("[%h]", b"[h=1]"),
        ("100%% \\\\ \\t\\r", b"100% \\ \t\r"),
        ("", b""),
        ("plain é", "plain é".encode()),
    ],
)
def test_tokens_and_escapes(template: str, expected: bytes) -> None:
    assert compile_format(template)(RECORD) == expected


def test_null_key_value_and_header_value() -> None:
    record = ConsumedRecord("t", 0, 0, 0, None, None, (("a", None), ("b", b"")))
    assert compile_format("<%k|%s|%K|%S|%h>")(record) == b"<||-1|-1|a=,b=>"


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("%x", "unknown token %x"),
        ("\\x", "unknown escape \\x"),
        ("abc%", "ends with a lone '%'"),
        ("abc\\", "ends with a lone '\\\\'"),
        ("%" * (FORMAT_STRING_BYTES_MAX + 1), "longer than"),
    ],
)
def test_bad_templates_are_refused(template: str, problem: str) -> None:
    with pytest.raises(FormatStringError, match=problem.replace("%", "%").replace("\\", "\\\\")):
        compile_format(template)
