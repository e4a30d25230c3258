"""What the client classes say about options they do not take, and the argument checks
of ``sluice.client.arguments`` (no broker: nothing connects before these checks)."""

from __future__ import annotations

from typing import Any

import pytest

import sluice
import sluice.sync
from sluice.client.arguments import record_bytes, record_timestamp_ms, topic_names

CLIENTS: list[tuple[str, Any, tuple[str, ...], dict[str, Any]]] = [
    ("Producer", sluice.Producer, (), {}),
    ("Consumer", sluice.Consumer, (), {}),
    ("ShareConsumer", sluice.ShareConsumer, ("orders",), {"group_id": "g"}),
    ("Admin", sluice.Admin, (), {}),
    ("Producer", sluice.sync.Producer, (), {}),
    ("Consumer", sluice.sync.Consumer, (), {}),
    ("ShareConsumer", sluice.sync.ShareConsumer, ("orders",), {"group_id": "g"}),
    ("Admin", sluice.sync.Admin, (), {}),
]


@pytest.mark.parametrize(("owner", "client", "topics", "required"), CLIENTS)
def test_a_misspelt_option_is_named_with_the_closest_option(
    owner: str, client: Any, topics: tuple[str, ...], required: dict[str, Any]
) -> None:
    with pytest.raises(
        TypeError,
        match=rf"unknown option 'request_timeout' for {owner}; did you mean 'request_timeout_ms'\?",
    ):
        client(*topics, request_timeout=5, **required)
    with pytest.raises(TypeError, match=r"did you mean 'client_id'\?"):
        client(*topics, **{"client.id": "x"}, **required)
    with pytest.raises(TypeError, match=r"did you mean 'ssl_cafile'\?"):
        client(*topics, ssl_ca_file="ca.pem", **required)
    with pytest.raises(TypeError, match=r"unknown option .zzz. for .*; its options are .*client"):
        client(*topics, zzz=1, **required)


def test_the_producer_suggests_its_own_option_names() -> None:
    with pytest.raises(
        TypeError, match=r"^unknown option 'lingerms' for Producer; did you mean 'linger_ms'\?$"
    ):
        sluice.Producer(lingerms=5)
    with pytest.raises(TypeError, match=r"did you mean 'linger_ms'\?"):
        sluice.Producer(**{"linger.ms": 5})
    with pytest.raises(TypeError, match=r"did you mean 'value_serializer'\?"):
        sluice.Producer(value_serialiser=str.encode)
    with pytest.raises(TypeError, match=r"did you mean 'group_id'\?"):
        sluice.Consumer("orders", group="g")


def test_record_bytes_takes_bytes_like_and_none_and_explains_the_rest() -> None:
    assert record_bytes("value", b"x") == b"x"
    assert record_bytes("value", bytearray(b"x")) == b"x"
    assert record_bytes("value", memoryview(b"x")) == b"x"
    assert record_bytes("value", None) is None
    with pytest.raises(
        TypeError,
        match=r"^value must be bytes, bytearray, memoryview or None, not str: "
        r"encode it \(value.encode\(\)\) or give the Producer a value_serializer$",
    ):
        record_bytes("value", "text")
    with pytest.raises(TypeError, match=r"key must be .* not int: serialize it"):
        record_bytes("key", 5)


def test_record_timestamps_are_non_negative_int64s() -> None:
    assert record_timestamp_ms(None) is None
    assert record_timestamp_ms(1_700_000_000_000) == 1_700_000_000_000
    with pytest.raises(TypeError, match="timestamp_ms must be an int"):
        record_timestamp_ms(1.5)
    with pytest.raises(TypeError, match="timestamp_ms must be an int"):
        record_timestamp_ms(True)
    with pytest.raises(ValueError, match=r"timestamp_ms must be in 0\.\."):
        record_timestamp_ms(-1)
    with pytest.raises(ValueError, match=r"timestamp_ms must be in 0\.\."):
        record_timestamp_ms(2**63)


def test_topic_names_as_users_pass_them() -> None:
    assert topic_names(("a", "b"), "Consumer") == ["a", "b"]
    assert topic_names((["a", "b"],), "Consumer") == ["a", "b"]
    assert topic_names((("a",), {"b"}), "Consumer") == ["a", "b"]
    assert topic_names("a", "subscribe()") == ["a"]
    with pytest.raises(TypeError, match=r"Consumer takes topic names \(str\), or one list"):
        topic_names((5,), "Consumer")
    with pytest.raises(TypeError, match="topic must be a topic name"):
        topic_names(([b"a"],), "Consumer")
    with pytest.raises(ValueError, match="for the broker's address pass bootstrap_servers="):
        topic_names(("127.0.0.1:9092",), "Consumer")
    with pytest.raises(ValueError, match="must not be empty"):
        topic_names(("",), "Consumer")


def test_every_public_name_of_sluice_is_listed_and_loads() -> None:
    public = set(sluice.__all__) - {"__version__", "sync"}
    assert public == set(sluice._PUBLIC_NAMES)
    for name in public - {"Headers"}:  # Headers is a type alias, not a class
        assert getattr(sluice, name).__name__ == name
    assert sluice.Headers is not None
    with pytest.raises(AttributeError, match="has no attribute 'Producr'"):
        _ = sluice.Producr  # type: ignore[attr-defined]
