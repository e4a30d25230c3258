"""Record headers as the producers take them (``normalize_headers``)."""

from __future__ import annotations

import pytest

from sluice.client.producer_api import normalize_headers


def test_dicts_pairs_and_none_become_name_bytes_pairs() -> None:
    assert normalize_headers(None) == ()
    assert normalize_headers({}) == ()
    assert normalize_headers({"a": b"1", "b": "2", "c": None}) == (
        ("a", b"1"),
        ("b", b"2"),
        ("c", None),
    )
    assert normalize_headers([("n", b"1"), ("n", bytearray(b"2")), ["m", memoryview(b"3")]]) == (
        ("n", b"1"),
        ("n", b"2"),
        ("m", b"3"),
    )
    assert normalize_headers(iter([("g", b"x")])) == (("g", b"x"),)


@pytest.mark.parametrize(
    ("headers", "named"),
    [
        ("a=1", "not str"),
        (b"a", "not bytes"),
        (1, "not int"),
        ([b"ab"], "(name, value) pair"),
        ([("a",)], "(name, value) pair"),
        ([(b"a", b"1")], "header name b'a' must be a str"),
        ({"a": 1.5}, "header 'a': value must be bytes, str or None, not float"),
    ],
)
def test_other_shapes_are_a_type_error_naming_the_problem(headers: object, named: str) -> None:
    with pytest.raises(TypeError) as refused:
        normalize_headers(headers)  # type: ignore[arg-type]
    assert named in str(refused.value)
