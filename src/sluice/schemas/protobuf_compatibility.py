"""Confluent's compatibility rules for Protobuf, on compiled descriptors.

Confluent's registry compares an *original* schema with an *update* and lists the
differences; some kinds of difference are compatible, the rest make the update refuse.
BACKWARD asks whether the update (the reader) reads what the original (the writer)
wrote, so a reader/writer question is ``differences(original=writer, update=reader)``.

The rules, as Confluent's registry applies them (messages are matched by name at each
level, fields by number, over the whole message whatever oneof they sit in):

    incompatible                         compatible
    ------------------------------------ ---------------------------------------------
    PACKAGE_CHANGED                      MESSAGE_ADDED, MESSAGE_MOVED (indexes are per id)
    MESSAGE_REMOVED                      ENUM_ADDED/REMOVED, ENUM_CONST_ADDED/CHANGED/REMOVED
    FIELD_KIND_CHANGED (scalar/message/map) FIELD_ADDED, FIELD_REMOVED, FIELD_NAME_CHANGED
    FIELD_SCALAR_KIND_CHANGED (wire group) FIELD_STRING_OR_BYTES_LABEL_CHANGED
    FIELD_NAMED_TYPE_CHANGED             ONEOF_ADDED, ONEOF_REMOVED, ONEOF_FIELD_ADDED
    FIELD_NUMERIC_LABEL_CHANGED          ONEOF_FIELD_MOVED_TO_TOP_LEVEL
    REQUIRED_FIELD_ADDED/REMOVED
    ONEOF_FIELD_REMOVED
    MULTIPLE_FIELDS_MOVED_TO_ONEOF, FIELD_MOVED_TO_EXISTING_ONEOF

Scalars are grouped by how they look on the wire: int32, int64, uint32, uint64, bool and
enums; sint32 and sint64; string and bytes; fixed32 and sfixed32; fixed64 and sfixed64;
float; double. A field's type changing within its group is compatible. Labels are
compared as ``.proto`` text writes them: proto3's plain singular fields have none, so
only a change between two written labels counts. Each message is one line,
``{errorType:"TYPE", description:"..."}``, as Confluent's registry words them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from google.protobuf import descriptor_pb2

FieldProto = descriptor_pb2.FieldDescriptorProto


class Difference(enum.Enum):
    PACKAGE_CHANGED = (
        "The package at '{path}'"
        " in the {update} schema does not match the package in the {original} schema"
    )
    MESSAGE_REMOVED = (
        "The {update} schema is missing a MESSAGE type at path '{path}' in the {original} schema"
    )
    FIELD_KIND_CHANGED = (
        "The type of a field at path '{path}'"
        " in the {update} schema does not match the {original} schema"
    )
    FIELD_SCALAR_KIND_CHANGED = (
        "The kind of a SCALAR field at path '{path}'"
        " in the {update} schema does not match its kind in the {original} schema"
    )
    FIELD_NAMED_TYPE_CHANGED = (
        "The type of a MESSAGE field at path '{path}'"
        " in the {update} schema does not match its type in the {original} schema"
    )
    FIELD_NUMERIC_LABEL_CHANGED = (
        "The label for a NUMERIC field at path '{path}'"
        " in the {update} schema does not match its label in the {original} schema"
    )
    REQUIRED_FIELD_ADDED = (
        "A required field at path '{path}'"
        " in the {update} schema is missing in the {original} schema"
    )
    REQUIRED_FIELD_REMOVED = (
        "The {update} schema is missing a required field at path '{path}' in the {original} schema"
    )
    ONEOF_FIELD_REMOVED = (
        "The {update} schema is missing a oneof field at path '{path}' in the {original} schema"
    )
    MULTIPLE_FIELDS_MOVED_TO_ONEOF = (
        "Multiple fields in the oneof at path '{path}'"
        " in the {update} schema are outside a oneof in the {original} schema"
    )
    FIELD_MOVED_TO_EXISTING_ONEOF = (
        "A field in the oneof at path '{path}'"
        " in the {update} schema is outside an existing oneof in the {original} schema"
    )


# The original is the schema data was written with, the update the one that reads it.
_ORIGINAL_ROLE = "writer"
_UPDATE_ROLE = "reader"


class _Kind(enum.Enum):
    SCALAR = "scalar"
    MESSAGE = "message"
    MAP = "map"


_SCALAR_GROUPS = {
    FieldProto.TYPE_INT32: "number",
    FieldProto.TYPE_INT64: "number",
    FieldProto.TYPE_UINT32: "number",
    FieldProto.TYPE_UINT64: "number",
    FieldProto.TYPE_BOOL: "number",
    FieldProto.TYPE_ENUM: "number",
    FieldProto.TYPE_SINT32: "signed",
    FieldProto.TYPE_SINT64: "signed",
    FieldProto.TYPE_STRING: "string_or_bytes",
    FieldProto.TYPE_BYTES: "string_or_bytes",
    FieldProto.TYPE_FIXED32: "fixed32",
    FieldProto.TYPE_SFIXED32: "fixed32",
    FieldProto.TYPE_FIXED64: "fixed64",
    FieldProto.TYPE_SFIXED64: "fixed64",
    FieldProto.TYPE_FLOAT: "float",
    FieldProto.TYPE_DOUBLE: "double",
}


@dataclass(frozen=True, slots=True)
class _Message:
    proto: descriptor_pb2.DescriptorProto
    package: str
    syntax: str


class _Types:
    """Every message of a schema and its imports by full name (no leading dot)."""

    def __init__(self, files: Sequence[descriptor_pb2.FileDescriptorProto]):
        self.messages: dict[str, _Message] = {}
        for file in files:
            syntax = file.syntax or "proto2"
            for message in file.message_type:
                self._add(message, file.package, file.package, syntax)

    def _add(
        self, message: descriptor_pb2.DescriptorProto, prefix: str, package: str, syntax: str
    ) -> None:
        name = f"{prefix}.{message.name}" if prefix else message.name
        self.messages[name] = _Message(message, package, syntax)
        for nested in message.nested_type:
            self._add(nested, name, package, syntax)

    def message(self, type_name: str) -> _Message | None:
        return self.messages.get(type_name.lstrip("."))


@dataclass
class _Context:
    original: _Types
    update: _Types
    original_syntax: str
    update_syntax: str
    path: list[str] = field(default_factory=lambda: ["#"])
    found: list[tuple[Difference, str]] = field(default_factory=list)
    visiting: set[tuple[str, str]] = field(default_factory=set)

    @contextmanager
    def enter(self, *names: str) -> Iterator[None]:
        self.path.extend(names)
        try:
            yield
        finally:
            del self.path[len(self.path) - len(names) :]

    def add(self, difference: Difference) -> None:
        entry = (difference, "/".join(self.path))
        if entry not in self.found:
            self.found.append(entry)


def protobuf_differences(
    *,
    original: Sequence[descriptor_pb2.FileDescriptorProto],
    update: Sequence[descriptor_pb2.FileDescriptorProto],
) -> list[str]:
    """The incompatible differences from ``original`` to ``update`` (each a schema's
    compiled files, imports first, its own last), one message each."""
    before, after = original[-1], update[-1]
    context = _Context(
        _Types(original), _Types(update), before.syntax or "proto2", after.syntax or "proto2"
    )
    if before.package != after.package:
        context.add(Difference.PACKAGE_CHANGED)
    _compare_types(context, before.message_type, after.message_type, before.package, after.package)
    return [
        '{errorType:"%s", description:"%s"}'  # noqa: UP031 - Confluent's layout, braces and all
        % (
            difference.name,
            difference.value.format(path=path, original=_ORIGINAL_ROLE, update=_UPDATE_ROLE),
        )
        for difference, path in context.found
    ]


def _compare_types(
    context: _Context,
    original: Sequence[descriptor_pb2.DescriptorProto],
    update: Sequence[descriptor_pb2.DescriptorProto],
    original_prefix: str,
    update_prefix: str,
) -> None:
    updates = {message.name: message for message in update}
    for message in original:
        if message.options.map_entry:
            continue
        with context.enter(message.name):
            counterpart = updates.get(message.name)
            if counterpart is None:
                context.add(Difference.MESSAGE_REMOVED)
                continue
            _compare_message(
                context,
                message,
                counterpart,
                _join(original_prefix, message.name),
                _join(update_prefix, counterpart.name),
            )


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _real_oneof(field: descriptor_pb2.FieldDescriptorProto) -> bool:
    return field.HasField("oneof_index") and not field.proto3_optional


def _compare_message(
    context: _Context,
    original: descriptor_pb2.DescriptorProto,
    update: descriptor_pb2.DescriptorProto,
    original_name: str,
    update_name: str,
) -> None:
    key = (original_name, update_name)
    if key in context.visiting:
        return  # a recursive type: being compared further up
    context.visiting.add(key)
    try:
        _compare_fields(context, original, update)
        _compare_types(
            context, original.nested_type, update.nested_type, original_name, update_name
        )
    finally:
        context.visiting.discard(key)


def _compare_fields(
    context: _Context,
    original: descriptor_pb2.DescriptorProto,
    update: descriptor_pb2.DescriptorProto,
) -> None:
    original_by_number = {one.number: one for one in original.field}
    update_by_number = {one.number: one for one in update.field}
    original_oneof = {
        one.number: original.oneof_decl[one.oneof_index].name
        for one in original.field
        if _real_oneof(one)
    }
    update_oneof = {
        one.number: update.oneof_decl[one.oneof_index].name
        for one in update.field
        if _real_oneof(one)
    }
    update_oneof_names = set(update_oneof.values())
    # A oneof gone with every one of its fields is a deletion, which is compatible.
    deleted_oneofs = {
        name
        for name in set(original_oneof.values())
        if name not in update_oneof_names
        and not any(
            number in update_by_number for number, owner in original_oneof.items() if owner == name
        )
    }
    for oneof_name in sorted(update_oneof_names):
        groups: set[str] = set()
        moved_in = 0
        for number, owner in update_oneof.items():
            if owner != oneof_name:
                continue
            if number in original_oneof:
                groups.add("oneof:" + original_oneof[number])
            elif number in original_by_number:
                groups.add(f"field:{number}")
                moved_in += 1
        if len(groups) > 1:
            with context.enter(oneof_name):
                context.add(
                    Difference.MULTIPLE_FIELDS_MOVED_TO_ONEOF
                    if moved_in > 1
                    else Difference.FIELD_MOVED_TO_EXISTING_ONEOF
                )
    for number in sorted(original_by_number.keys() | update_by_number.keys()):
        before = original_by_number.get(number)
        after = update_by_number.get(number)
        if after is None:
            assert before is not None
            owner = original_oneof.get(number)
            if owner is not None:
                if owner not in deleted_oneofs:
                    with context.enter(owner, str(number)):
                        context.add(Difference.ONEOF_FIELD_REMOVED)
            elif before.label == FieldProto.LABEL_REQUIRED:
                with context.enter(str(number)):
                    context.add(Difference.REQUIRED_FIELD_REMOVED)
        elif before is None:
            if number not in update_oneof and after.label == FieldProto.LABEL_REQUIRED:
                with context.enter(str(number)):
                    context.add(Difference.REQUIRED_FIELD_ADDED)
        else:
            where = (
                (update_oneof[number], str(number)) if number in update_oneof else (str(number),)
            )
            with context.enter(*where):
                _compare_field(context, before, after, original, update)


def _label(field: descriptor_pb2.FieldDescriptorProto, syntax: str, in_oneof: bool) -> str | None:
    """The label as ``.proto`` text writes it (None: written without one)."""
    if in_oneof:
        return None
    if field.label == FieldProto.LABEL_REPEATED:
        return "repeated"
    if field.label == FieldProto.LABEL_REQUIRED:
        return "required"
    if syntax == "proto2" or field.proto3_optional:
        return "optional"
    return None


def _compare_field(
    context: _Context,
    original: descriptor_pb2.FieldDescriptorProto,
    update: descriptor_pb2.FieldDescriptorProto,
    original_message: descriptor_pb2.DescriptorProto,
    update_message: descriptor_pb2.DescriptorProto,
) -> None:
    original_label = _label(original, context.original_syntax, _real_oneof(original))
    update_label = _label(update, context.update_syntax, _real_oneof(update))
    _compare_types_of(context, original, update, original_label, update_label)


def _kind(types: _Types, field: descriptor_pb2.FieldDescriptorProto) -> _Kind:
    if field.type in _SCALAR_GROUPS:
        return _Kind.SCALAR
    found = types.message(field.type_name)
    if found is not None and found.proto.options.map_entry:
        return _Kind.MAP
    return _Kind.MESSAGE


def _compare_types_of(
    context: _Context,
    original: descriptor_pb2.FieldDescriptorProto,
    update: descriptor_pb2.FieldDescriptorProto,
    original_label: str | None,
    update_label: str | None,
) -> None:
    original_kind = _kind(context.original, original)
    update_kind = _kind(context.update, update)
    if original_kind != update_kind:
        context.add(Difference.FIELD_KIND_CHANGED)
        return
    if original_kind is _Kind.SCALAR:
        group = _SCALAR_GROUPS[original.type]
        if group != _SCALAR_GROUPS[update.type]:
            context.add(Difference.FIELD_SCALAR_KIND_CHANGED)
        elif (
            original_label is not None
            and update_label is not None
            and original_label != update_label
            and group != "string_or_bytes"
        ):
            context.add(Difference.FIELD_NUMERIC_LABEL_CHANGED)
    elif original_kind is _Kind.MAP:
        original_entry = context.original.message(original.type_name)
        update_entry = context.update.message(update.type_name)
        assert original_entry is not None and update_entry is not None
        for before, after in zip(
            original_entry.proto.field, update_entry.proto.field, strict=False
        ):
            _compare_types_of(context, before, after, None, None)
    else:
        _compare_message_types(context, original.type_name, update.type_name)


def _compare_message_types(context: _Context, original_type: str, update_type: str) -> None:
    original = context.original.message(original_type)
    update = context.update.message(update_type)
    if original is None or update is None:
        if original_type.lstrip(".") != update_type.lstrip("."):
            context.add(Difference.FIELD_NAMED_TYPE_CHANGED)
        return
    original_local = _local_name(original_type.lstrip("."), original.package)
    update_local = _local_name(update_type.lstrip("."), update.package)
    if original_local != update_local:
        context.add(Difference.FIELD_NAMED_TYPE_CHANGED)
        return
    inner = _Context(
        context.original,
        context.update,
        original.syntax,
        update.syntax,
        ["#", *original_local.split(".")],
    )
    inner.visiting = context.visiting
    _compare_message(
        inner, original.proto, update.proto, original_type.lstrip("."), update_type.lstrip(".")
    )
    for difference, path in inner.found:
        if (difference, path) not in context.found:
            context.found.append((difference, path))
    if inner.found:
        context.add(Difference.FIELD_NAMED_TYPE_CHANGED)


def _local_name(full_name: str, package: str) -> str:
    return (
        full_name[len(package) + 1 :]
        if package and full_name.startswith(package + ".")
        else full_name
    )
