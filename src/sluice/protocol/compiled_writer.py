"""kio entities serialised by a function generated for their class: kio's bytes, without
kio's walk.

kio's ``entity_writer`` serialises an entity by walking a tree of closures, one per
field, each writing to a ``BytesIO`` (a temporary one for every tagged field). That walk
is pure Python and costs about half of a small request's time in the broker. Here, the
first time a class is written, its fields are read once (with kio's own introspection:
field kinds, Kafka types, nullability, tags and their defaults) and turned into the
source of one straight-line function, compiled with ``compile``/``exec`` and cached per
class:

    class fields ──▶ statements ──▶ ``def write(e, out)`` ──▶ compile, exec ──▶ cache
                     (runs of fixed-size fields in one struct.pack; nested entities and
                      array items inlined; tagged fields sorted by tag, each skipped
                      when equal to its default or kio's implicit default)

The function appends the parts of the encoding to a list, joined once by the caller.
The bytes are exactly kio's (``tests/unit/test_compiled_writer.py`` compares them for
every entity class of every version kio ships): legacy or compact strings, bytes and
arrays by the class's flexibility; nullable strings, bytes, arrays and (KIP-893)
entities; uuids (None as the zero uuid); error codes by their value; timedeltas and
datetimes as kio rounds them to milliseconds; RequestHeader's client id always a legacy
string. Values come from our own code and are trusted, but one that does not fit its
field still raises (``struct.error``, ``TypeError``) rather than writing garbage.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any, Final

from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.static.constants import uuid_zero

from sluice.protocol.varints import ONE_BYTE, ONE_BYTE_LIMIT, uvarint_bytes

Writer = Callable[[Any, list[bytes]], None]
"""Appends the encoding of an entity to a list of parts."""

_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")


# kafka type -> (struct code, expression of the value to pack, ``{}`` standing for it)
_FIXED: Final[dict[str, tuple[str, str]]] = {
    "int8": ("b", "{}"),
    "int16": ("h", "{}"),
    "int32": ("i", "{}"),
    "int64": ("q", "{}"),
    "uint8": ("B", "{}"),
    "uint16": ("H", "{}"),
    "uint32": ("I", "{}"),
    "uint64": ("Q", "{}"),
    "float64": ("d", "{}"),
    "bool": ("?", "{}"),
    "error_code": ("h", "{}.value"),
    "timedelta_i32": ("i", "round({}.total_seconds() * 1000)"),
    "timedelta_i64": ("q", "round({}.total_seconds() * 1000)"),
    "datetime_i64": ("q", "round({}.timestamp() * 1000)"),
    "uuid": ("16s", "(_UUID_ZERO if {0} is None else {0}.bytes)"),
}
_NULLABLE_DATETIME: Final = "(-1 if {0} is None else round({0}.timestamp() * 1000))"
_VARIABLE: Final = frozenset({"string", "bytes", "records"})
# Source text of the null encodings.
_COMPACT_NULL: Final = repr(b"\x00")
_LEGACY_STRING_NULL: Final = repr(b"\xff\xff")
_LEGACY_BYTES_NULL: Final = repr(b"\xff\xff\xff\xff")
_LEGACY_ARRAY_NULL: Final = _LEGACY_BYTES_NULL


class _Source:
    """The lines of one generated function and the constants it names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = {
            "_UV1": ONE_BYTE,
            "_uv": uvarint_bytes,
            "_H": _INT16.pack,
            "_I": _INT32.pack,
            "_UUID_ZERO": uuid_zero.bytes,
        }
        self._count = 0

    def name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def constant(self, value: Any, prefix: str = "_c") -> str:
        name = self.name(prefix)
        self.namespace[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)


def _uvarint_expression(value: str) -> str:
    return f"(_UV1[{value}] if {value} < 128 else _uv({value}))"


def _emit_variable(
    source: _Source, indent: int, append: str, value: str, kind: str, flexible: bool, nullable: bool
) -> None:
    """A string, bytes or records value (a local name) written the way kio writes it."""
    body_indent = indent
    if nullable:
        if flexible:
            null = _COMPACT_NULL
        else:
            null = _LEGACY_STRING_NULL if kind == "string" else _LEGACY_BYTES_NULL
        source.emit(indent, f"if {value} is None:")
        source.emit(indent + 1, f"{append}({null})")
        source.emit(indent, "else:")
        body_indent = indent + 1
    data = source.name("b")
    if flexible:
        # kio's compact writer takes str or bytes alike, and refuses None.
        source.emit(
            body_indent, f"{data} = {value}.encode() if isinstance({value}, str) else {value}"
        )
        size = source.name("n")
        source.emit(body_indent, f"{size} = len({data}) + 1")
        source.emit(body_indent, f"{append}({_uvarint_expression(size)})")
    elif kind == "string":
        source.emit(body_indent, f"{data} = {value}.encode()")
        source.emit(body_indent, f"{append}(_H(len({data})))")
    else:
        source.emit(body_indent, f"{data} = {value}")
        source.emit(body_indent, f"{append}(_I(len({data})))")
    source.emit(body_indent, f"{append}({data})")


def _emit_array_length(
    source: _Source, indent: int, append: str, value: str, flexible: bool
) -> int:
    """The length (or null) of an array; returns the indent of the items' code."""
    source.emit(indent, f"if {value} is None:")
    null = _COMPACT_NULL if flexible else _LEGACY_ARRAY_NULL
    source.emit(indent + 1, f"{append}({null})")
    source.emit(indent, "else:")
    if flexible:
        size = source.name("n")
        source.emit(indent + 1, f"{size} = len({value}) + 1")
        source.emit(indent + 1, f"{append}({_uvarint_expression(size)})")
    else:
        source.emit(indent + 1, f"{append}(_I(len({value})))")
    return indent + 1


ARRAY_PACKERS_CACHED_COUNT_MAX: Final = 256
"""Arrays of fixed-size items up to this many items long have their packer (length and
items in one struct) cached per count; longer ones build theirs on each call."""


class _ArrayPackers(dict[int, Callable[..., bytes]]):
    """Packers of an array of ``count`` items of one struct code, its length included
    (``packers[count](length, *items)``): int32 for legacy arrays, the uvarint of
    count + 1 for compact ones."""

    def __init__(self, code: str, flexible: bool) -> None:
        super().__init__()
        self._code = code
        self._flexible = flexible

    def __missing__(self, count: int) -> Callable[..., bytes]:
        items = f"{count}{self._code}" if len(self._code) == 1 else self._code * count
        packer: Callable[..., bytes]
        if not self._flexible:
            packer = struct.Struct(">i" + items).pack
        elif count + 1 < ONE_BYTE_LIMIT:
            packer = struct.Struct(">B" + items).pack
        else:
            items_struct = struct.Struct(">" + items)

            def packer(length: int, *values: Any) -> bytes:
                return uvarint_bytes(length) + items_struct.pack(*values)

        if count <= ARRAY_PACKERS_CACHED_COUNT_MAX:
            self[count] = packer
        return packer


def _emit_fixed_array(
    source: _Source, indent: int, append: str, value: str, kind: str, flexible: bool
) -> None:
    """An array of fixed-size items: its length and items in one struct.pack."""
    code, expression = _FIXED[kind]
    packers = source.constant(_ArrayPackers(code, flexible), "_a")
    source.emit(indent, f"if {value} is None:")
    source.emit(indent + 1, f"{append}({_COMPACT_NULL if flexible else _LEGACY_ARRAY_NULL})")
    source.emit(indent, "else:")
    count = source.name("n")
    source.emit(indent + 1, f"{count} = len({value})")
    item = source.name("x")
    packed = expression.format(item)
    items = f"*{value}" if packed == item else f"*[{packed} for {item} in {value}]"
    length = f"{count} + 1" if flexible else count
    source.emit(indent + 1, f"{append}({packers}[{count}]({length}, {items}))")


def _emit_field_value(
    source: _Source,
    indent: int,
    append: str,
    value: str,
    field: dataclasses.Field[Any],
    flexible: bool,
    is_request_header: bool,
    is_tag: bool,
) -> None:
    """One field's value (held in the local ``value``), as kio's field writer writes it."""
    kind = get_schema_field_type(field) if "kafka_type" in field.metadata else ""
    if is_request_header and field.name == "client_id":
        _emit_variable(source, indent, append, value, "string", False, True)
        return
    optional = False if is_tag else is_optional(field)
    field_class = classify_field(field)
    if isinstance(field_class, PrimitiveTupleField) and kind in _FIXED:
        _emit_fixed_array(source, indent, append, value, kind, flexible)
        return
    if isinstance(field_class, EntityTupleField | PrimitiveTupleField):
        items_indent = _emit_array_length(source, indent, append, value, flexible)
        item = source.name("x")
        source.emit(items_indent, f"for {item} in {value}:")
        if isinstance(field_class, EntityTupleField):
            _emit_entity(source, items_indent + 1, append, item, field_class.type_)
        else:
            _emit_variable(source, items_indent + 1, append, item, kind, flexible, False)
        return
    if isinstance(field_class, EntityField):
        if optional:
            source.emit(indent, f"if {value} is None:")
            source.emit(indent + 1, f"{append}(b'\\xff')")
            source.emit(indent, "else:")
            source.emit(indent + 1, f"{append}(b'\\x01')")
            _emit_entity(source, indent + 1, append, value, field_class.type_)
        else:
            _emit_entity(source, indent, append, value, field_class.type_)
        return
    if kind in _VARIABLE:
        _emit_variable(source, indent, append, value, kind, flexible, optional)
        return
    code, expression = _FIXED[kind]
    if kind == "datetime_i64" and optional:
        expression = _NULLABLE_DATETIME
    struct_name = source.constant(struct.Struct(">" + code).pack, "_s")
    source.emit(indent, f"{append}({struct_name}({expression.format(value)}))")


def _fixed_part(field: dataclasses.Field[Any], is_request_header: bool) -> tuple[str, str] | None:
    """(struct code, expression) of a field written in a fixed number of bytes, or None."""
    if "tag" in field.metadata or (is_request_header and field.name == "client_id"):
        return None
    if isinstance(classify_field(field), EntityField | EntityTupleField | PrimitiveTupleField):
        return None
    kind = get_schema_field_type(field)
    if kind not in _FIXED:
        return None
    code, expression = _FIXED[kind]
    if kind == "datetime_i64" and is_optional(field):
        expression = _NULLABLE_DATETIME
    return code, expression


def _emit_entity(source: _Source, indent: int, append: str, entity: str, cls: type[Any]) -> None:
    """The statements writing the entity held in the local ``entity`` of class ``cls``."""
    flexible = bool(cls.__flexible__)
    is_request_header = cls.__name__ == "RequestHeader"
    run: list[tuple[str, str]] = []

    def flush_run() -> None:
        if not run:
            return
        packer = source.constant(struct.Struct(">" + "".join(code for code, _ in run)).pack, "_s")
        arguments = ", ".join(expression for _, expression in run if expression)
        source.emit(indent, f"{append}({packer}({arguments}))")
        run.clear()

    tagged: list[tuple[int, dataclasses.Field[Any]]] = []
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        if tag is not None:
            tagged.append((int(tag), field))
            continue
        fixed = _fixed_part(field, is_request_header)
        if fixed is not None:
            code, expression = fixed
            if "{0}" in expression:  # the value is read twice: read the attribute once
                value = source.name("v")
                flush_run()
                source.emit(indent, f"{value} = {entity}.{field.name}")
                run.append((code, expression.format(value)))
            else:
                run.append((code, expression.format(f"{entity}.{field.name}")))
            continue
        flush_run()
        value = source.name("v")
        source.emit(indent, f"{value} = {entity}.{field.name}")
        _emit_field_value(source, indent, append, value, field, flexible, is_request_header, False)
    if not flexible:
        flush_run()
        if tagged:
            raise ValueError(f"{cls.__name__} has tagged fields but is not flexible")
        return
    if not tagged:
        if run:
            run.append(("x", ""))  # no tagged fields: a zero count, struct's pad byte
            flush_run()
        else:
            source.emit(indent, f"{append}(b'\\x00')")
        return
    flush_run()
    tags = source.name("tags")
    source.emit(indent, f"{tags} = []")
    for tag_number, field in sorted(tagged, key=lambda pair: pair[0]):
        default = (
            field.default
            if field.default is not dataclasses.MISSING
            else get_tagged_field_default(field)
        )
        value = source.name("v")
        source.emit(indent, f"{value} = {entity}.{field.name}")
        source.emit(indent, f"if not ({value} == {source.constant(default, '_d')}):")
        parts = source.name("t")
        part_append = source.name("ta")
        source.emit(indent + 1, f"{parts} = []")
        source.emit(indent + 1, f"{part_append} = {parts}.append")
        _emit_field_value(
            source, indent + 1, part_append, value, field, flexible, is_request_header, True
        )
        data = source.name("b")
        source.emit(indent + 1, f"{data} = b''.join({parts})")
        tag_bytes = source.constant(uvarint_bytes(tag_number), "_tag")
        source.emit(indent + 1, f"{tags}.append({tag_bytes} + _uv(len({data})) + {data})")
    count = source.name("n")
    source.emit(indent, f"{count} = len({tags})")
    source.emit(indent, f"{append}({_uvarint_expression(count)})")
    source.emit(indent, f"{append}(b''.join({tags}))")


# One entry per kio class written: bounded by the classes kio ships (under 2,000).
_WRITERS: dict[type[Any], Writer] = {}
_ENCODERS: dict[type[Any], Callable[[Any], bytes]] = {}


def generated_source(cls: type[Any]) -> tuple[str, dict[str, Any]]:
    """The source of ``cls``'s writer and the constants it names (for reading and tests)."""
    source = _Source()
    source.emit(0, "def write(e, out):")
    source.emit(1, "ap = out.append")
    _emit_entity(source, 1, "ap", "e", cls)
    return "\n".join(source.lines) + "\n", source.namespace


def writer(cls: type[Any]) -> Writer:
    """The generated function appending the encoding of a ``cls`` to a list of parts."""
    found = _WRITERS.get(cls)
    if found is not None:
        return found
    text, namespace = generated_source(cls)
    exec(
        compile(text, f"<sluice writer for {cls.__module__}.{cls.__qualname__}>", "exec"), namespace
    )
    written: Writer = namespace["write"]
    _WRITERS[cls] = written
    return written


def encoder(cls: type[Any]) -> Callable[[Any], bytes]:
    """A function from a ``cls`` to its bytes, exactly kio's ``entity_writer``'s."""
    found = _ENCODERS.get(cls)
    if found is not None:
        return found
    write = writer(cls)

    def encode(entity: Any) -> bytes:
        parts: list[bytes] = []
        write(entity, parts)
        return b"".join(parts)

    _ENCODERS[cls] = encode
    return encode


def encode(entity: Any) -> bytes:
    """The bytes of a kio entity, exactly what kio's ``entity_writer`` writes."""
    found = _ENCODERS.get(type(entity))
    return (found or encoder(type(entity)))(entity)
