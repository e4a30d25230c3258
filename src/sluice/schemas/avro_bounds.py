"""Bounds on an Avro value, checked before fastavro reads or writes it.

fastavro's reader and writer are compiled code that recurses once per nested value
without Python's recursion check: a value of a recursive schema nested a few thousand
deep (as many bytes) overflows the thread's stack and kills the process, and its writer
takes time growing with the square of the depth. An array of items that take no bytes
(nulls, empty records, zero-size fixed) may declare billions of items in ten bytes. So,
for a schema that allows either (recursive, nested deeper than the bound, or with such
arrays), a payload is walked first without building anything, by an explicit stack:

    pending: [(schema, depth)] ─pop─▶ read what the type's encoding takes
                 ▲                     (records push their fields, unions their branch,
                 └──── push ◀───────── arrays and maps one block marker, then its items)

and refused when it nests deeper than :data:`VALUE_DEPTH_MAX` or declares more than
:data:`ZERO_WIDTH_ITEMS_MAX` items of no bytes. Bytes the walk cannot read are left for
fastavro to refuse with its own words. A value to write is checked for its depth alone.
"""

from __future__ import annotations

from typing import Final

import avro.schema

VALUE_DEPTH_MAX: Final = 500
"""Records, arrays and maps nested inside one another in one value. fastavro's reader
overflows an 8 MiB stack at about 4,500 levels of a recursive record; its writer takes
about a second at 800."""

ZERO_WIDTH_ITEMS_MAX: Final = 1_000_000
"""Items taking no bytes (null, a record of such fields, a zero-size fixed) in the arrays
of one value: each costs fastavro a Python object and a loop turn, and nothing bounds
them but this."""

_FIXED_WIDTHS: Final = {"null": 0, "boolean": 1, "float": 4, "double": 8}
_CONTAINERS: Final = frozenset({"record", "error", "array", "map"})


def needs_checks(schema: avro.schema.Schema) -> bool:
    """Whether values of ``schema`` may be nested beyond the bound or carry arrays of
    zero-width items, so that a payload must be walked before fastavro reads it."""
    return _static_depth(schema, set()) > VALUE_DEPTH_MAX or _has_zero_width_arrays(schema)


def check_payload(schema: avro.schema.Schema, payload: bytes) -> None:
    """Raise ValueError when the value in ``payload`` exceeds a bound."""
    walk = _PayloadWalk(payload)
    try:
        walk.run(schema)
    except _Unreadable:
        return  # fastavro says what is wrong with the bytes


def check_value_depth(value: object) -> None:
    """Raise ValueError when ``value`` (dicts and lists) nests deeper than the bound."""
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, (list, tuple)):
            children = list(item)
        else:
            continue
        if depth + 1 > VALUE_DEPTH_MAX:
            raise ValueError(f"the value nests deeper than {VALUE_DEPTH_MAX} levels")
        pending.extend((child, depth + 1) for child in children)


def _kind(schema: avro.schema.Schema) -> str:
    kind: str = schema.type
    return "record" if kind == "error" else kind


def _static_depth(schema: avro.schema.Schema, visiting: set[int]) -> float:
    """How deep values of ``schema`` may nest; infinite for a recursive schema."""
    if id(schema) in visiting:
        return float("inf")
    visiting.add(id(schema))
    try:
        if isinstance(schema, avro.schema.RecordSchema):
            return 1 + max((_static_depth(f.type, visiting) for f in schema.fields), default=0)
        if isinstance(schema, avro.schema.ArraySchema):
            return 1 + _static_depth(schema.items, visiting)
        if isinstance(schema, avro.schema.MapSchema):
            return 1 + _static_depth(schema.values, visiting)
        if isinstance(schema, avro.schema.UnionSchema):
            return max((_static_depth(b, visiting) for b in schema.schemas), default=0)
        return 0
    finally:
        visiting.discard(id(schema))


def _is_zero_width(schema: avro.schema.Schema, visiting: set[int]) -> bool:
    """Whether a value of ``schema`` may take no bytes (a record met again while it is
    being decided counts as taking none, erring towards checking)."""
    if isinstance(schema, avro.schema.RecordSchema):
        if id(schema) in visiting:
            return True
        visiting.add(id(schema))
        try:
            return all(_is_zero_width(f.type, visiting) for f in schema.fields)
        finally:
            visiting.discard(id(schema))
    if isinstance(schema, avro.schema.FixedSchema):
        return bool(schema.size == 0)
    return _kind(schema) == "null"


def _has_zero_width_arrays(schema: avro.schema.Schema) -> bool:
    seen: set[int] = set()
    pending = [schema]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, avro.schema.ArraySchema):
            if _is_zero_width(current.items, set()):
                return True
            pending.append(current.items)
        elif isinstance(current, avro.schema.MapSchema):
            pending.append(current.values)
        elif isinstance(current, avro.schema.RecordSchema):
            pending.extend(f.type for f in current.fields)
        elif isinstance(current, avro.schema.UnionSchema):
            pending.extend(current.schemas)
    return False


class _Unreadable(Exception):
    """Bytes the walk cannot read: fastavro refuses them."""


class _Blocks:
    """The next block of an array's or map's items is to be read."""

    def __init__(self, schema: avro.schema.ArraySchema | avro.schema.MapSchema) -> None:
        self.schema = schema


class _Key:
    """A map entry's key is to be read."""


_KEY: Final = _Key()


class _PayloadWalk:
    def __init__(self, payload: bytes) -> None:
        self._payload = payload
        self._position = 0
        self._zero_width_items = 0

    def run(self, schema: avro.schema.Schema) -> None:
        pending: list[tuple[avro.schema.Schema | _Blocks | _Key, int]] = [(schema, 0)]
        while pending:
            current, depth = pending.pop()
            if isinstance(current, _Key):
                self._skip(self._long())
            elif isinstance(current, _Blocks):
                self._block(current.schema, depth, pending)
            elif isinstance(current, avro.schema.UnionSchema):
                index = self._long()
                if not 0 <= index < len(current.schemas):
                    raise _Unreadable
                pending.append((current.schemas[index], depth))
            elif _kind(current) in _CONTAINERS:
                if depth + 1 > VALUE_DEPTH_MAX:
                    raise ValueError(
                        f"not an Avro value this reader accepts: it nests deeper than "
                        f"{VALUE_DEPTH_MAX} levels"
                    )
                if isinstance(current, avro.schema.RecordSchema):
                    pending.extend((f.type, depth + 1) for f in reversed(current.fields))
                else:
                    assert isinstance(current, (avro.schema.ArraySchema, avro.schema.MapSchema))
                    pending.append((_Blocks(current), depth + 1))
            else:
                self._primitive(current)

    def _block(
        self,
        schema: avro.schema.ArraySchema | avro.schema.MapSchema,
        depth: int,
        pending: list[tuple[avro.schema.Schema | _Blocks | _Key, int]],
    ) -> None:
        count = self._long()
        if count == 0:
            return
        if count < 0:
            count = -count
            self._long()  # the block's size in bytes
        pending.append((_Blocks(schema), depth))
        if isinstance(schema, avro.schema.ArraySchema):
            if _is_zero_width(schema.items, set()):
                self._zero_width_items += count
                if self._zero_width_items > ZERO_WIDTH_ITEMS_MAX:
                    raise ValueError(
                        "not an Avro value this reader accepts: its arrays hold more than "
                        f"{ZERO_WIDTH_ITEMS_MAX} items of no bytes"
                    )
                pending.append((schema.items, depth))  # all alike: one is enough
                return
            items: list[avro.schema.Schema | _Key] = [schema.items]
        else:
            items = [schema.values, _KEY]
        if count > len(self._payload) - self._position:  # each item takes a byte or more
            raise _Unreadable
        for _ in range(count):
            pending.extend((item, depth) for item in items)

    def _primitive(self, schema: avro.schema.Schema) -> None:
        kind = _kind(schema)
        if kind in _FIXED_WIDTHS:
            self._skip(_FIXED_WIDTHS[kind])
        elif kind in ("int", "long", "enum"):
            self._long()
        elif kind in ("bytes", "string"):
            self._skip(self._long())
        elif isinstance(schema, avro.schema.FixedSchema):
            self._skip(int(schema.size))
        else:
            raise _Unreadable

    def _long(self) -> int:
        """A zigzag varint, as Avro writes int and long."""
        shift = 0
        accumulated = 0
        while True:
            if self._position >= len(self._payload) or shift > 63:
                raise _Unreadable
            byte = self._payload[self._position]
            self._position += 1
            accumulated |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (accumulated >> 1) ^ -(accumulated & 1)
            shift += 7

    def _skip(self, count: int) -> None:
        if count < 0 or self._position + count > len(self._payload):
            raise _Unreadable
        self._position += count
