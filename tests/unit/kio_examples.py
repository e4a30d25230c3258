"""Random but valid kio messages of any API and version, and mutations of their bytes.

The fuzz tests start from real encodings: a random instance of a request class, encoded
by kio's own writer, is valid by construction; flipping, inserting, deleting and
overwriting bytes of it reaches the corners a decoder must survive (huge counts, nulls,
truncations) far more often than random bytes do.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import random
import struct
import uuid
from types import EllipsisType, NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from sluice.protocol import codec
from sluice.protocol.versions import SUPPORTED, ApiKey, request_is_flexible

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

_INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}


def served_versions() -> list[tuple[int, int]]:
    """Every (api key, version) the broker advertises, from the one version table."""
    return [
        (int(key), version)
        for key, supported in sorted(SUPPORTED.items())
        for version in range(supported.min_version, supported.max_version + 1)
    ]


def request_class(api_key: int, version: int) -> tuple[type[Any], int]:
    """(kio class, bytes to strip from its encoding) for a request version. Produce v0-2
    bodies are v3 bodies without the leading null transactional id."""
    if api_key == ApiKey.PRODUCE and version < 3:
        schema = codec.request_schema(api_key, 3)
        strip = 2
    else:
        schema = codec.request_schema(api_key, version)
        strip = 0
    assert schema is not None, (api_key, version)
    return schema, strip


def _nullable(annotation: Any) -> bool:
    return get_origin(annotation) in (UnionType, Union) and NoneType in get_args(annotation)


def _inner(annotation: Any) -> Any:
    if get_origin(annotation) in (UnionType, Union):
        (inner,) = (a for a in get_args(annotation) if a is not NoneType)
        return inner
    return annotation


def _small_int(rng: random.Random, low: int, high: int) -> int:
    choice = rng.random()
    if choice < 0.6:
        return max(low, min(high, rng.randrange(-1, 8)))
    if choice < 0.8:
        return rng.choice([low, high])
    return rng.randint(low, high)


_WIDE_ALPHABET = "aZ-_.09 éß€😀\u0000"
"""Characters of wide examples' strings: one, two, three and four UTF-8 bytes, and NUL."""


def _primitive(kafka_type: str, rng: random.Random, nullable: bool, wide: bool = False) -> Any:
    if nullable and rng.random() < 0.2:
        return None
    if kafka_type in _INT_RANGES:
        if wide and rng.random() < 0.3:
            return rng.choice(_INT_RANGES[kafka_type])
        return _small_int(rng, *_INT_RANGES[kafka_type])
    if kafka_type == "bool":
        return rng.random() < 0.5
    if kafka_type == "float64":
        return rng.uniform(-1e6, 1e6)
    if kafka_type == "error_code":
        return rng.choice([ErrorCode.none, ErrorCode.unknown_server_error])
    if kafka_type == "timedelta_i32":
        return datetime.timedelta(milliseconds=_small_int(rng, -1, 2**31 - 1))
    if kafka_type == "timedelta_i64":
        return datetime.timedelta(milliseconds=_small_int(rng, -1, 2**40))
    if kafka_type == "datetime_i64":
        return _EPOCH + datetime.timedelta(milliseconds=rng.randrange(0, 2**41))
    if kafka_type == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if kafka_type == "string":
        if wide:
            length = rng.choice([0, 1, 5, 40, 200])
            return "".join(rng.choice(_WIDE_ALPHABET) for _ in range(length))
        return "".join(rng.choice("abcxyz-_.0123") for _ in range(rng.randrange(0, 12)))
    if kafka_type in ("bytes", "records"):
        return rng.randbytes(rng.choice([0, 3, 40, 300]) if wide else rng.randrange(0, 40))
    raise NotImplementedError(kafka_type)


def example(cls: type[Any], rng: random.Random, depth: int = 0, wide: bool = False) -> Any:
    """A random instance of kio class ``cls`` that kio's writer accepts. A ``wide`` one
    also has the extreme ints of each type, long multi-byte strings and longer arrays."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        tagged = "tag" in field.metadata
        has_default = (
            field.default is not dataclasses.MISSING
            or field.default_factory is not dataclasses.MISSING
        )
        if tagged and has_default and rng.random() < 0.5:
            continue  # leave the default: the tag is not written
        annotation = field.type
        nullable = _nullable(annotation) and not tagged
        inner = _inner(annotation)
        if get_origin(inner) is tuple:
            element_type, ellipsis = get_args(inner)
            assert isinstance(ellipsis, EllipsisType)
            element_type = _inner(element_type)
            if nullable and rng.random() < 0.2:
                values[field.name] = None
                continue
            count = rng.randrange(0, (4 if depth < 2 else 2) + (3 if wide else 0))
            if dataclasses.is_dataclass(element_type):
                values[field.name] = tuple(
                    example(element_type, rng, depth + 1, wide)  # type: ignore[arg-type]
                    for _ in range(count)
                )
            else:
                values[field.name] = tuple(
                    _primitive(field.metadata["kafka_type"], rng, nullable=False, wide=wide)
                    for _ in range(count)
                )
        elif dataclasses.is_dataclass(inner):
            if _nullable(annotation) and rng.random() < 0.2:
                values[field.name] = None
            else:
                values[field.name] = example(inner, rng, depth + 1, wide)  # type: ignore[arg-type]
        else:
            value = _primitive(field.metadata["kafka_type"], rng, nullable=nullable, wide=wide)
            if value is None and tagged and has_default:
                continue
            values[field.name] = value
    return cls(**values)


def encode(instance: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(instance))(buffer, instance)
    return buffer.getvalue()


def valid_body(api_key: int, version: int, rng: random.Random) -> bytes:
    """A random valid request body of that version."""
    schema, strip = request_class(api_key, version)
    return encode(example(schema, rng))[strip:]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to four random edits: overwrite, insert, delete, truncate, or plant a count or
    length that claims far more than the message holds (-1, 2^31-1, 2^32 as a varint)."""
    out = bytearray(data)
    for _ in range(rng.randrange(1, 5)):
        # Many bodies start with an array: edit the first bytes more often.
        position = 0 if rng.random() < 0.25 else rng.randrange(len(out) + 1)
        kind = rng.choice([0, 1, 2, 3, 4, 4, 4, 5])
        if kind == 0 and out:
            out[min(position, len(out) - 1)] = rng.randrange(256)
        elif kind == 1:
            out[position:position] = rng.randbytes(rng.randrange(1, 5))
        elif kind == 2 and out:
            del out[position : position + rng.randrange(1, 5)]
        elif kind == 3:
            del out[position:]
        elif kind == 4:
            planted = rng.choice(
                [
                    struct.pack(">i", -1),
                    struct.pack(">i", 2**31 - 1),
                    struct.pack(">i", -(2**31)),
                    struct.pack(">h", -1),
                    struct.pack(">h", 2**15 - 1),
                    b"\xff\xff\xff\xff\x0f",  # uvarint 2^32 - 1
                    b"\x80\x80\x80\x80\x08",  # uvarint 2^31
                    b"\x00",  # compact null
                ]
            )
            out[position : position + len(planted)] = planted
        else:
            out[position:position] = b"\xff\xff\xff\x7f"
    return bytes(out)


def with_huge_first_count(body: bytes, flexible: bool) -> bytes:
    """``body`` with its first bytes replaced by a count far beyond its size (compact
    2^32 - 1, or int32 2^31 - 1): the shape of CVE-2022-34917 for bodies that start with
    an array."""
    planted = b"\xff\xff\xff\xff\x0f" if flexible else struct.pack(">i", 2**31 - 1)
    return planted + body[len(planted) :]


def request_frame(api_key: int, version: int, body: bytes, correlation_id: int = 1) -> bytes:
    """A whole request frame (size prefix, header of the right shape, body)."""
    client_id = b"fuzz"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    if request_is_flexible(api_key, version):
        header += b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload
