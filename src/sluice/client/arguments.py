"""Checks of what a program hands the client, made where it hands it over.

Every public entry point (``Producer``, ``Consumer``, ``ShareConsumer``, ``Admin``,
their ``sluice.sync`` facades, ``Producer.send``, ``Consumer.subscribe``) checks its
arguments here before anything is buffered or sent, so a mistake raises at once in the
caller, with a message that says what was given and what is accepted, instead of
failing later inside the sender, the partitioner or the encoder:

    unknown option ``lingerms``    TypeError: unknown option 'lingerms' for Producer;
                                   did you mean 'linger_ms'?
    ``send("t", "text")``          TypeError: value must be bytes, bytearray, memoryview
                                   or None, not str: ...
    ``Consumer(["a", "b"])``       the topics "a" and "b" (a list is taken as topics)
    ``Consumer(5)``                TypeError: topics must be topic names (str) ...

No I/O and no state: plain functions of their arguments.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable

RECORD_BYTES_TYPES = (bytes, bytearray, memoryview)
"""What a record's key and value may be (besides None), as kafka-python and aiokafka
take them."""

TIMESTAMP_MS_MAX = 2**63 - 1
"""A record timestamp is an int64 of milliseconds since the epoch."""


def check_option_names(owner: str, given: Iterable[str], accepted: Collection[str]) -> None:
    """Raise TypeError for the first of ``given`` that ``owner`` does not take, naming
    it and the closest accepted name (Kafka's dotted spelling ``linger.ms`` is
    recognised as ``linger_ms``)."""
    for name in given:
        if name in accepted:
            continue
        raise TypeError(unknown_option_message(owner, name, accepted))


def unknown_option_message(owner: str, name: str, accepted: Collection[str]) -> str:
    """``unknown option 'lingerms' for Producer; did you mean 'linger_ms'?``"""
    underscored = name.replace(".", "_").replace("-", "_").lower()
    if underscored in accepted:
        suggestion: str | None = underscored
    else:
        close = difflib.get_close_matches(underscored, sorted(accepted), n=1, cutoff=0.6)
        suggestion = close[0] if close else None
    if suggestion is not None:
        return f"unknown option {name!r} for {owner}; did you mean {suggestion!r}?"
    return (
        f"unknown option {name!r} for {owner}; its options are "
        f"{', '.join(sorted(accepted))} (see docs/client.md)"
    )


def record_bytes(field: str, value: object) -> bytes | None:
    """A record's key or value as bytes (``field`` names it in the error): bytes,
    bytearray and memoryview are taken, None is None, anything else is a TypeError
    that says how to turn it into bytes."""
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, RECORD_BYTES_TYPES):
        return bytes(value)
    hint = (
        f"encode it ({field}.encode()) or give the Producer a {field}_serializer"
        if isinstance(value, str)
        else f"serialize it to bytes first, or give the Producer a {field}_serializer"
    )
    raise TypeError(
        f"{field} must be bytes, bytearray, memoryview or None, not {type(value).__name__}: {hint}"
    )


def record_timestamp_ms(timestamp_ms: object) -> int | None:
    """A record's timestamp: None (the producer stamps it) or an int of milliseconds
    since the epoch, in 0..TIMESTAMP_MS_MAX."""
    if timestamp_ms is None:
        return None
    if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int):
        raise TypeError(
            f"timestamp_ms must be an int (milliseconds since the epoch) or None, "
            f"not {type(timestamp_ms).__name__}"
        )
    if not 0 <= timestamp_ms <= TIMESTAMP_MS_MAX:
        raise ValueError(
            f"timestamp_ms must be in 0..{TIMESTAMP_MS_MAX} (milliseconds since the epoch), "
            f"not {timestamp_ms}"
        )
    return timestamp_ms


def topic_name(value: object, what: str = "topic") -> str:
    """A topic name: a non-empty str (TypeError or ValueError otherwise)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a topic name (str), not {type(value).__name__} {value!r}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    if ":" in value:  # never in a topic name (Kafka allows [a-zA-Z0-9._-])
        raise ValueError(
            f"{value!r} is not a topic name; for the broker's address pass "
            f"bootstrap_servers={value!r}"
        )
    return value


def topic_names(topics: Iterable[object] | str, owner: str) -> list[str]:
    """Topic names as users naturally pass them: names (``"a", "b"``), one list, tuple
    or set of names (``["a", "b"]``), or one name where a list was expected
    (``subscribe("a")``). Anything else is a TypeError that says what is expected."""
    if isinstance(topics, str):
        return [topic_name(topics)]
    names: list[str] = []
    for item in topics:
        if isinstance(item, list | tuple | set | frozenset):
            names.extend(topic_name(name) for name in item)
        elif isinstance(item, str):
            names.append(topic_name(item))
        else:
            raise TypeError(
                f"{owner} takes topic names (str), or one list of them, "
                f"not {type(item).__name__} {item!r}"
            )
    return names


def optional_str(option: str, owner: str, value: object) -> str | None:
    """An option that is a str or None (``group_id``, ``client_id``...)."""
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{owner} option {option} must be a str, not {type(value).__name__} {value!r}")
