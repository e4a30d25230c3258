"""Check every count and length in a message body against the bytes that remain, before
kio decodes it.

kio's native reader reserves ``count × 8`` bytes for an array before it reads a single
element, so a four-byte count of 2^31 (or a compact count of 2^32) aborts the whole
process with a failed allocation: no Python exception, no chance to answer. Kafka fixed
the same class of bug in CVE-2022-34917. This module walks a body by its kio schema, the
way kio's reader will, and refuses (:class:`~sluice.common.errors.ProtocolError`)

- an array whose count × the smallest possible size of one element exceeds the bytes
  left in the message,
- a string or bytes field whose length exceeds the bytes left,
- a null (-1) where the schema's field is not nullable (kio would hand the handler a
  ``None`` where it expects a tuple),
- a tagged field whose value does not fill exactly the size it declares or runs past
  the end of the message (known tag or not),
- a tagged field whose tag the schema does not know inside the value of a known tagged
  field (removing it would change the sizes around it),

so that kio only ever sees a body whose allocations are bounded by its own size.

Tagged fields whose tag the schema does not know are skipped, as Kafka's decoders skip
them (KIP-482: a newer client may send a tag the broker's version does not define). kio
refuses them, so the walk records each one (:class:`UnknownTaggedFields`) and
:func:`checked_body` hands back a copy of the body without them, each section's count
rewritten; a body without unknown tags (nearly every one) is returned as it is. The
walk reads lengths and skips payloads; it builds no objects. A walker is compiled once
per kio class (:func:`body_walker`, cached) into a chain of small closures, with runs
of fixed-size fields merged into one skip, so the cost on a Produce request is a few
steps per partition and does not depend on the size of the record batches.

The walk mirrors kio 0.6's reader (``rust/src/schema.rs``): non-flexible classes use
int16-length strings, int32-length bytes and int32-counted arrays (-1 is null);
flexible classes use unsigned-varint lengths and counts offset by one (0 is null) and
end with tagged fields; a nullable struct (KIP-893) starts with an int8 marker, -1 for
null. Array elements and tagged primitive fields are read as not nullable, as kio does.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from dataclasses import dataclass
from types import EllipsisType, NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from sluice.common.errors import ProtocolError
from sluice.protocol.varints import uvarint_bytes

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

_FIXED_SIZE_BYTES: dict[str, int] = {
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_LENGTH_PREFIXED = frozenset({"string", "bytes", "records"})
_UVARINT_BYTES_MAX = 5

Sections = list["UnknownTaggedFields"]
"""Where a walk records the tagged-field sections holding tags the schema does not know."""

Step = Callable[[bytes, int, int, Sections], int]
"""``step(data, position, end, unknown) -> position after the field``; raises
ProtocolError, and appends to ``unknown`` each tagged-field section with unknown tags."""


@dataclass(frozen=True, slots=True)
class UnknownTaggedFields:
    """A tagged-field section holding tags its schema does not know: where its count
    sits (``count_start`` to ``count_end``), the count of the tags that stay, and the
    byte spans ``(start, end)`` of the unknown fields (tag, size and value)."""

    count_start: int
    count_end: int
    known_count: int
    spans: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Walker:
    """How to walk one value: its step, the fewest bytes it can take on the wire, and
    its exact size when that never varies (so arrays of it are skipped in one step)."""

    step: Step
    min_size_bytes: int
    fixed_size_bytes: int | None


def _fail(message: str) -> ProtocolError:
    return ProtocolError(message)


def _read_uvarint(data: bytes, position: int, end: int) -> tuple[int, int]:
    if position < end and data[position] < 0x80:  # one byte: nearly every count
        return data[position], position + 1
    result = 0
    shift = 0
    for _ in range(_UVARINT_BYTES_MAX):
        if position >= end:
            raise _fail("unsigned varint runs past the end of the message")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7
    raise _fail("unsigned varint is longer than 5 bytes")


def _skip(size_bytes: int, what: str) -> Step:
    def step(data: bytes, position: int, end: int, unknown: Sections) -> int:
        position += size_bytes
        if position > end:
            raise _fail(f"{what} runs past the end of the message")
        return position

    return step


def _length_prefixed(name: str, flexible: bool, nullable: bool, kafka_type: str) -> Walker:
    if flexible:

        def compact(data: bytes, position: int, end: int, unknown: Sections) -> int:
            length_plus_one, position = _read_uvarint(data, position, end)
            if length_plus_one == 0:
                if nullable:
                    return position
                raise _fail(f"{name} is null but not nullable")
            position += length_plus_one - 1
            if position > end:
                raise _fail(
                    f"{name} claims {length_plus_one - 1} bytes, more than the message holds"
                )
            return position

        return Walker(compact, 1, None)
    prefix = 2 if kafka_type == "string" else 4
    unpack = (_INT16 if prefix == 2 else _INT32).unpack_from

    def legacy(data: bytes, position: int, end: int, unknown: Sections) -> int:
        if position + prefix > end:
            raise _fail(f"{name}'s length runs past the end of the message")
        (length,) = unpack(data, position)
        position += prefix
        if length < 0:
            if length == -1 and nullable:
                return position
            raise _fail(
                f"{name} is null but not nullable"
                if length == -1
                else f"{name} has a negative length {length}"
            )
        position += length
        if position > end:
            raise _fail(f"{name} claims {length} bytes, more than the message holds")
        return position

    return Walker(legacy, prefix, None)


def _array(name: str, flexible: bool, nullable: bool, element: Walker) -> Walker:
    element_min = max(element.min_size_bytes, 1)
    element_fixed = element.fixed_size_bytes
    element_step = element.step

    def walk_elements(data: bytes, position: int, end: int, unknown: Sections, count: int) -> int:
        if count * element_min > end - position:
            raise _fail(
                f"{name} claims {count} elements of at least {element_min} bytes, "
                f"but {end - position} bytes remain"
            )
        if element_fixed is not None:
            return position + count * element_fixed
        for _ in range(count):
            position = element_step(data, position, end, unknown)
        return position

    if flexible:

        def compact(data: bytes, position: int, end: int, unknown: Sections) -> int:
            count_plus_one, position = _read_uvarint(data, position, end)
            if count_plus_one == 0:
                if nullable:
                    return position
                raise _fail(f"{name} is null but not nullable")
            return walk_elements(data, position, end, unknown, count_plus_one - 1)

        return Walker(compact, 1, None)

    def legacy(data: bytes, position: int, end: int, unknown: Sections) -> int:
        if position + 4 > end:
            raise _fail(f"{name}'s count runs past the end of the message")
        (count,) = _INT32.unpack_from(data, position)
        position += 4
        if count < 0:
            if count == -1 and nullable:
                return position
            raise _fail(
                f"{name} is null but not nullable"
                if count == -1
                else f"{name} has a negative count {count}"
            )
        return walk_elements(data, position, end, unknown, count)

    return Walker(legacy, 4, None)


def _is_nullable(annotation: Any) -> bool:
    """True for ``X | None`` at the top level (a nullable array is ``tuple[...] | None``;
    ``tuple[X | None, ...]`` is an array of nullable elements, not a nullable array)."""
    return get_origin(annotation) in (UnionType, Union) and NoneType in get_args(annotation)


def _without_none(annotation: Any) -> Any:
    if get_origin(annotation) in (UnionType, Union):
        (inner,) = (a for a in get_args(annotation) if a is not NoneType)
        return inner
    return annotation


def _field_walker(owner: type[Any], field: dataclasses.Field[Any], tagged: bool) -> Walker:
    name = f"{owner.__name__}.{field.name}"
    flexible = bool(owner.__flexible__)
    annotation = field.type
    assert not isinstance(annotation, str), f"{name}: kio classes carry real annotations"
    nullable = _is_nullable(annotation)
    inner = _without_none(annotation)
    if get_origin(inner) is tuple:
        element_type, ellipsis = get_args(inner)
        assert isinstance(ellipsis, EllipsisType), f"{name}: arrays are tuple[X, ...]"
        element_type = _without_none(element_type)
        if isinstance(element_type, type) and dataclasses.is_dataclass(element_type):
            element = _entity_walker(element_type, nullable=False)
        else:
            element = _primitive_walker(name, field, flexible, nullable=False)
        return _array(name, flexible, nullable, element)
    if isinstance(inner, type) and dataclasses.is_dataclass(inner):
        # kio reads a struct's null marker whenever the annotation allows None,
        # tagged or not.
        return _entity_walker(inner, nullable=nullable)
    return _primitive_walker(name, field, flexible, nullable=nullable and not tagged)


def _primitive_walker(
    name: str, field: dataclasses.Field[Any], flexible: bool, nullable: bool
) -> Walker:
    kafka_type = field.metadata.get("kafka_type")
    if kafka_type in _FIXED_SIZE_BYTES:
        size = _FIXED_SIZE_BYTES[kafka_type]
        return Walker(_skip(size, name), size, size)
    if kafka_type in _LENGTH_PREFIXED:
        return _length_prefixed(name, flexible, nullable, kafka_type)
    # Every kafka_type in kio's schemas has a rule above (a unit test compiles the walker
    # of every request and response kio knows); a new one in a later kio is a bug here.
    raise AssertionError(f"{name}: no size rule for kafka_type {kafka_type!r}")


def _tagged_fields_step(owner: type[Any], tagged: dict[int, Walker]) -> Step:
    owner_name = owner.__name__

    def step(data: bytes, position: int, end: int, unknown: Sections) -> int:
        if position < end and data[position] == 0:  # no tagged fields: nearly always
            return position + 1
        count_start = position
        count, position = _read_uvarint(data, position, end)
        if count * 2 > end - position:
            raise _fail(f"{owner_name} claims {count} tagged fields, more than the message holds")
        count_end = position
        spans: list[tuple[int, int]] = []
        for _ in range(count):
            field_start = position
            tag, position = _read_uvarint(data, position, end)
            size, position = _read_uvarint(data, position, end)
            field_end = position + size
            if field_end > end:
                raise _fail(f"{owner_name} tagged field {tag} runs past the end of the message")
            walker = tagged.get(tag)
            if walker is None:
                # A tag this version does not know (KIP-482): skipped, as Kafka does.
                spans.append((field_start, field_end))
                position = field_end
                continue
            sections_before = len(unknown)
            if walker.step(data, position, field_end, unknown) != field_end:
                raise _fail(f"{owner_name} tagged field {tag} does not fill its {size} bytes")
            if len(unknown) != sections_before:
                # Removing the inner unknown fields would shrink this field's value, so
                # its declared size (and the sizes of any enclosing tagged fields) would
                # need rewriting too; that is refused rather than rewritten, as no client
                # is known to send it.
                raise _fail(
                    f"{owner_name} tagged field {tag} holds tagged fields this version "
                    "does not know"
                )
            position = field_end
        if spans:
            unknown.append(
                UnknownTaggedFields(count_start, count_end, count - len(spans), tuple(spans))
            )
        return position

    return step


def _chain(steps: list[Step | int], what: str) -> Step:
    """One step running ``steps`` in order; an int is a fixed-size run to skip.

    The plan is pairs of (bytes to skip, then a step or None), and the common short
    shapes get their own closure: this runs once per array element, so it is the hot
    path of the walk.
    """
    pairs: list[tuple[int, Step | None]] = []
    skip = 0
    for part in steps:
        if isinstance(part, int):
            skip += part
        else:
            pairs.append((skip, part))
            skip = 0
    if skip or not pairs:
        pairs.append((skip, None))
    message = f"{what} runs past the end of the message"

    if len(pairs) == 1:
        ((only_skip, only_step),) = pairs
        if only_step is None:
            return _skip(only_skip, what)
        if only_skip == 0:
            return only_step

        def skip_then_step(data: bytes, position: int, end: int, unknown: Sections) -> int:
            position += only_skip
            if position > end:
                raise _fail(message)
            return only_step(data, position, end, unknown)

        return skip_then_step

    plan = tuple(pairs)

    def step(data: bytes, position: int, end: int, unknown: Sections) -> int:
        for skip_bytes, then in plan:
            position += skip_bytes
            if position > end:
                raise _fail(message)
            if then is not None:
                position = then(data, position, end, unknown)
        return position

    return step


_WALKERS: dict[tuple[type[Any], bool], Walker] = {}


def _entity_walker(entity: type[Any], nullable: bool) -> Walker:
    """The walker of a kio class, compiled on first use and cached."""
    key = (entity, nullable)
    walker = _WALKERS.get(key)
    if walker is None:
        walker = _WALKERS[key] = _compile_entity(entity, nullable)
    return walker


def _compile_entity(entity: type[Any], nullable: bool) -> Walker:
    flexible = bool(entity.__flexible__)
    steps: list[Step | int] = []
    min_size = 0
    fixed = True
    tagged: dict[int, Walker] = {}
    for field in dataclasses.fields(entity):
        tag = field.metadata.get("tag")
        walker = _field_walker(entity, field, tagged=tag is not None)
        if tag is not None:
            tagged[int(tag)] = walker
            continue
        min_size += walker.min_size_bytes
        if walker.fixed_size_bytes is not None:
            if steps and isinstance(steps[-1], int):
                steps[-1] += walker.fixed_size_bytes
            else:
                steps.append(walker.fixed_size_bytes)
        else:
            fixed = False
            steps.append(walker.step)
    if flexible:
        steps.append(_tagged_fields_step(entity, tagged))
        min_size += 1
        fixed = False
    body = (
        _chain(steps, entity.__name__) if steps else (lambda data, position, end, unknown: position)
    )
    if not nullable:
        return Walker(body, min_size, min_size if fixed else None)

    def nullable_step(data: bytes, position: int, end: int, unknown: Sections) -> int:
        if position >= end:
            raise _fail(f"{entity.__name__}'s null marker runs past the end of the message")
        position += 1
        if data[position - 1] == 0xFF:  # int8 -1: null
            return position
        return body(data, position, end, unknown)

    return Walker(nullable_step, 1, None)


def body_walker(schema: type[Any]) -> Step:
    """The compiled walk for a kio request or response class (cached per class)."""
    return _entity_walker(schema, nullable=False).step


def check_body(schema: type[Any], data: bytes, offset: int, unknown: Sections | None = None) -> int:
    """Walk the body of ``schema`` at ``data[offset:]``; return where it ends.

    Raises ProtocolError for a count or length the remaining bytes cannot hold, a null
    where the schema forbids one, or a malformed tagged field. Tagged fields with tags
    the schema does not know are appended (per section) to ``unknown`` when given.
    """
    return body_walker(schema)(data, offset, len(data), [] if unknown is None else unknown)


def without_unknown_tagged_fields(data: bytes, unknown: Sections) -> bytes:
    """A copy of ``data`` without the unknown tagged fields ``unknown`` records, each
    section's count rewritten to the fields that stay (so kio, which refuses unknown
    tags, reads the rest)."""
    edits: list[tuple[int, int, bytes]] = []
    for section in unknown:
        edits.append((section.count_start, section.count_end, uvarint_bytes(section.known_count)))
        edits.extend((start, end, b"") for start, end in section.spans)
    edits.sort()
    parts: list[bytes] = []
    position = 0
    for start, end, replacement in edits:
        parts.append(data[position:start])
        parts.append(replacement)
        position = end
    parts.append(data[position:])
    return b"".join(parts)


def checked_body(schema: type[Any], data: bytes, offset: int) -> tuple[bytes, int]:
    """:func:`check_body`, then the bytes for kio: ``data`` itself (nearly always), or a
    copy without the tagged fields the schema does not know; and where the body ends in
    the bytes returned."""
    unknown: Sections = []
    end = body_walker(schema)(data, offset, len(data), unknown)
    if not unknown:
        return data, end
    stripped = without_unknown_tagged_fields(data, unknown)
    return stripped, end - (len(data) - len(stripped))
