"""The fast path for the hot requests and responses, behind one seam.

``decode_request(header, frame, body_offset)`` decodes a Produce (v3-13) or Fetch
(v4-17) request body, and ``encode_response(correlation_id, response)`` writes a
Produce response; each returns None for anything it does not handle, and the caller
(:mod:`sluice.protocol.codec`, which every decode and encode goes through) then takes the
general path: the schema walk of :mod:`sluice.protocol.bounds`, then kio.

Where the time went, measured (``bench/codecs.py``): kio's reader is native and builds
its objects faster than any Python can, while the schema walk that must run before it
(so that a hostile count cannot make kio allocate without bound) is a chain of Python
closures costing as much again or more. So a request here is checked by a hand-written
walk of its one API (``produce_codec``, ``fetch_request_codec``: a few steps per topic
and partition, partitions of a fixed size in one step), which accepts only bodies the
schema walk accepts and finds no unknown tagged field in, and is then read by kio's
native reader. Everything else, malformed bodies included, goes the general path, which
answers with its precise error. Building kio's objects by hand was tried and measured
slower (about 0.6 µs per Fetch partition against kio's 0.2 µs).

Responses are the other way round: kio's writer is pure Python, so the Produce response
is written by hand (``produce_codec.encode_response``), byte for byte what kio writes.
The Fetch response is already framed by hand (``fetch_response``); the follower's side,
decoding its leader's Fetch responses, gets a hand-written check in front of kio's reader
as requests do (``fetch_response_codec``, through ``codec.decode_response``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import cache
from typing import Any, Protocol

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader
from kio.serial.errors import SerialError

from sluice.protocol import fetch_request_codec, fetch_response_codec, produce_codec


class Header(Protocol):
    """What the seam needs of a request header (``codec.RequestHeader``)."""

    @property
    def api_key(self) -> int: ...

    @property
    def api_version(self) -> int: ...


BodyEnd = Callable[[int, bytes, int], "int | None"]


def _body_check(api_key: int, version: int) -> BodyEnd | None:
    if api_key == produce_codec.PRODUCE_API_KEY:
        handled = produce_codec.FIRST_VERSION <= version <= produce_codec.LAST_VERSION
        return produce_codec.request_body_end if handled else None
    if api_key == fetch_request_codec.FETCH_API_KEY:
        handled = fetch_request_codec.FIRST_VERSION <= version <= fetch_request_codec.LAST_VERSION
        return fetch_request_codec.request_body_end if handled else None
    return None


@cache
def _reader(api_key: int, version: int) -> Callable[[bytes, int], tuple[Any, int]]:
    reader: Callable[[bytes, int], tuple[Any, int]] = entity_reader(
        load_request_schema(api_key, version)
    )
    return reader


def handles_request(api_key: int, version: int) -> bool:
    """Whether :func:`decode_request` has a fast path for this request."""
    return _body_check(api_key, version) is not None


def decode_request(header: Header, frame: bytes, body_offset: int) -> Any | None:
    """The kio request whose body is ``frame[body_offset:]``, or None when the fast path
    does not handle it (another API or version, or a body it leaves to the general path,
    which reads or refuses it)."""
    api_key, version = header.api_key, header.api_version
    body_end = _body_check(api_key, version)
    if body_end is None or body_end(version, frame, body_offset) != len(frame):
        return None
    try:
        payload, size = _reader(api_key, version)(frame, body_offset)
    except (SerialError, ValueError, TypeError, LookupError, OverflowError, struct.error):
        return None  # e.g. a name that is not UTF-8: the general path says so
    if body_offset + size != len(frame):
        return None
    return payload


@cache
def _response_reader(api_key: int, version: int) -> Callable[[bytes, int], tuple[Any, int]]:
    reader: Callable[[bytes, int], tuple[Any, int]] = entity_reader(
        load_response_schema(api_key, version)
    )
    return reader


def decode_response_body(api_key: int, version: int, frame: bytes, body_offset: int) -> Any | None:
    """The kio response whose body is ``frame[body_offset:]`` (a Fetch response, as a
    follower reads its leader's), or None when the fast path does not handle it."""
    if api_key != fetch_response_codec.FETCH_API_KEY or not (
        fetch_response_codec.FIRST_VERSION <= version <= fetch_response_codec.LAST_VERSION
    ):
        return None
    if fetch_response_codec.response_body_end(version, frame, body_offset) != len(frame):
        return None
    try:
        payload, size = _response_reader(api_key, version)(frame, body_offset)
    except (SerialError, ValueError, TypeError, LookupError, OverflowError, struct.error):
        return None
    if body_offset + size != len(frame):
        return None
    return payload


def encode_response(correlation_id: int, response: Any) -> bytes | None:
    """The whole frame of ``response`` (size prefix, header, body), or None when the fast
    path does not write it."""
    if int(response.__api_key__) == produce_codec.PRODUCE_API_KEY:
        return produce_codec.encode_response(correlation_id, response)
    return None
