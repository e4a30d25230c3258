"""A compiled Protobuf file (``FileDescriptorProto``) written back as ``.proto`` text.

Confluent's registry stores and answers a Protobuf schema as ``.proto`` text, whatever
the client sent: text from Java clients and ``sluice schemas register``, a base64
``FileDescriptorProto`` from confluent-kafka-python's ``ProtobufSerializer``. This module
writes that text from the compiled descriptor, laid out as Confluent's registry lays it
out (syntax, package, imports, file options, messages then enums, extensions, services;
two-space indents), so a schema compiles back to the same descriptor: the round trip
text → protoc → descriptor → text → protoc gives the descriptor it started from.

Type names are written fully qualified (``.pkg.Message``), as the compiler resolved them,
so the text means the same wherever it is read. Options, custom ones included, are
written from the option messages; a custom option is readable only through a descriptor
pool that holds its definition, so :func:`render` takes that pool, and refuses (with
:class:`UnrenderableOption`) an option it cannot name rather than drop it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from google.protobuf import descriptor_pb2, message_factory, text_encoding, text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

FieldProto = descriptor_pb2.FieldDescriptorProto
INDENT = "  "
# The largest field number Protobuf allows (2**29 - 1); ranges ending there say ``max``.
FIELD_NUMBER_MAX = 536_870_911

_SCALAR_NAMES = {
    FieldProto.TYPE_DOUBLE: "double",
    FieldProto.TYPE_FLOAT: "float",
    FieldProto.TYPE_INT64: "int64",
    FieldProto.TYPE_UINT64: "uint64",
    FieldProto.TYPE_INT32: "int32",
    FieldProto.TYPE_FIXED64: "fixed64",
    FieldProto.TYPE_FIXED32: "fixed32",
    FieldProto.TYPE_BOOL: "bool",
    FieldProto.TYPE_STRING: "string",
    FieldProto.TYPE_BYTES: "bytes",
    FieldProto.TYPE_UINT32: "uint32",
    FieldProto.TYPE_SFIXED32: "sfixed32",
    FieldProto.TYPE_SFIXED64: "sfixed64",
    FieldProto.TYPE_SINT32: "sint32",
    FieldProto.TYPE_SINT64: "sint64",
}
_LABEL_NAMES = {
    FieldProto.LABEL_OPTIONAL: "optional",
    FieldProto.LABEL_REQUIRED: "required",
    FieldProto.LABEL_REPEATED: "repeated",
}
# Options the syntax itself says, so they are not written as options.
_IMPLIED_OPTIONS = {"google.protobuf.MessageOptions": {"map_entry"}}


class UnrenderableOption(ValueError):
    """An option whose definition the descriptor pool given does not hold."""


def render(file: descriptor_pb2.FileDescriptorProto, pool: DescriptorPool | None) -> str:
    """``file`` as ``.proto`` text. ``pool`` holds the definitions of the custom options
    it uses (with ``google/protobuf/descriptor.proto``); None when it uses none."""
    return _Renderer(file, pool).file()


def escape_string(value: str) -> str:
    """A string literal's inside, escaped as protoc reads it."""
    escaped: str = text_encoding.CEscape(value, as_utf8=True)
    return escaped


def default_json_name(field_name: str) -> str:
    """The JSON name protoc gives a field that names none: underscores removed, the
    letter after each one upper-cased."""
    parts: list[str] = []
    upper_next = False
    for char in field_name:
        if char == "_":
            upper_next = True
        elif upper_next:
            parts.append(char.upper())
            upper_next = False
        else:
            parts.append(char)
    return "".join(parts)


class _Renderer:
    def __init__(self, file: descriptor_pb2.FileDescriptorProto, pool: DescriptorPool | None):
        self._file = file
        self._pool = pool
        self._syntax = file.syntax or "proto2"

    # -- the file --------------------------------------------------------------------

    def file(self) -> str:
        file = self._file
        lines: list[str] = []
        if self._syntax == "editions":
            edition = descriptor_pb2.Edition.Name(file.edition).removeprefix("EDITION_")
            lines.append(f'edition = "{edition}";')
        else:
            lines.append(f'syntax = "{self._syntax}";')
        if file.package:
            lines.append(f"package {file.package};")
        if file.dependency:
            lines.append("")
            public = set(file.public_dependency)
            weak = set(file.weak_dependency)
            for index, dependency in enumerate(file.dependency):
                modifier = "public " if index in public else "weak " if index in weak else ""
                lines.append(f'import {modifier}"{escape_string(dependency)}";')
        options = self._option_statements(file.options)
        if options:
            lines.append("")
            lines.extend(options)
        body: list[str] = []
        for message in file.message_type:
            body.extend(self._message(message))
        for enum in file.enum_type:
            body.extend(self._enum(enum))
        body.extend(self._extends(file.extension))
        for service in file.service:
            body.extend(self._service(service))
        if body:
            lines.append("")
            lines.extend(body)
        return "\n".join(lines) + "\n"

    # -- messages ----------------------------------------------------------------------

    def _message(self, message: descriptor_pb2.DescriptorProto) -> list[str]:
        lines = [f"message {message.name} {{"]
        lines.extend(_indented(self._message_body(message)))
        lines.append("}")
        return lines

    def _message_body(self, message: descriptor_pb2.DescriptorProto) -> list[str]:
        lines: list[str] = []
        lines.extend(
            self._reserved(message.reserved_range, message.reserved_name, end_exclusive=True)
        )
        lines.extend(self._option_statements(message.options))
        nested_by_name = {nested.name: nested for nested in message.nested_type}
        skipped_nested: set[str] = set()
        real_oneofs = {
            index
            for field in message.field
            if field.HasField("oneof_index") and not field.proto3_optional
            for index in [field.oneof_index]
        }
        written_oneofs: set[int] = set()
        for field in message.field:
            if field.HasField("oneof_index") and field.oneof_index in real_oneofs:
                if field.oneof_index in written_oneofs:
                    continue
                written_oneofs.add(field.oneof_index)
                lines.extend(
                    self._oneof(message, field.oneof_index, nested_by_name, skipped_nested)
                )
                continue
            lines.extend(self._field(field, nested_by_name, skipped_nested, in_oneof=False))
        for index, oneof in enumerate(message.oneof_decl):
            if index not in written_oneofs and not any(
                field.HasField("oneof_index") and field.oneof_index == index
                for field in message.field
            ):
                # A oneof with no fields; protoc refuses it, but write what was given.
                lines.append(f"oneof {oneof.name} {{")
                lines.extend(_indented(self._option_statements(oneof.options)))
                lines.append("}")
        for extension_range in message.extension_range:
            end = extension_range.end - 1
            upper = "max" if end >= FIELD_NUMBER_MAX else str(end)
            span = (
                str(extension_range.start)
                if end == extension_range.start
                else f"{extension_range.start} to {upper}"
            )
            bracket = self._bracketed_options(extension_range.options, ())
            lines.append(f"extensions {span}{bracket};")
        lines.extend(self._extends(message.extension))
        for nested in message.nested_type:
            if nested.name not in skipped_nested:
                lines.extend(self._message(nested))
        for enum in message.enum_type:
            lines.extend(self._enum(enum))
        return lines

    def _oneof(
        self,
        message: descriptor_pb2.DescriptorProto,
        oneof_index: int,
        nested_by_name: dict[str, descriptor_pb2.DescriptorProto],
        skipped_nested: set[str],
    ) -> list[str]:
        oneof = message.oneof_decl[oneof_index]
        lines = [f"oneof {oneof.name} {{"]
        body = self._option_statements(oneof.options)
        for field in message.field:
            if field.HasField("oneof_index") and field.oneof_index == oneof_index:
                body.extend(self._field(field, nested_by_name, skipped_nested, in_oneof=True))
        lines.extend(_indented(body))
        lines.append("}")
        return lines

    def _field(
        self,
        field: descriptor_pb2.FieldDescriptorProto,
        nested_by_name: dict[str, descriptor_pb2.DescriptorProto],
        skipped_nested: set[str],
        *,
        in_oneof: bool,
    ) -> list[str]:
        bracket = self._field_bracket(field)
        entry = self._map_entry(field, nested_by_name)
        if entry is not None:
            skipped_nested.add(entry.name)
            key, value = self._type_name(entry.field[0]), self._type_name(entry.field[1])
            return [f"map<{key}, {value}> {field.name} = {field.number}{bracket};"]
        label = self._label(field, in_oneof=in_oneof)
        if field.type == FieldProto.TYPE_GROUP:
            group_name = field.type_name.rsplit(".", 1)[-1]
            group = nested_by_name.get(group_name)
            if group is not None:
                skipped_nested.add(group_name)
                lines = [f"{label}group {group_name} = {field.number}{bracket} {{"]
                lines.extend(_indented(self._message_body(group)))
                lines.append("}")
                return lines
        return [f"{label}{self._type_name(field)} {field.name} = {field.number}{bracket};"]

    def _map_entry(
        self,
        field: descriptor_pb2.FieldDescriptorProto,
        nested_by_name: dict[str, descriptor_pb2.DescriptorProto],
    ) -> descriptor_pb2.DescriptorProto | None:
        if field.label != FieldProto.LABEL_REPEATED or field.type != FieldProto.TYPE_MESSAGE:
            return None
        entry = nested_by_name.get(field.type_name.rsplit(".", 1)[-1])
        if entry is None or not entry.options.map_entry or len(entry.field) != 2:
            return None
        return entry

    def _label(self, field: descriptor_pb2.FieldDescriptorProto, *, in_oneof: bool) -> str:
        if in_oneof:
            return ""
        if field.label == FieldProto.LABEL_REPEATED:
            return "repeated "
        if self._syntax == "proto2":
            return _LABEL_NAMES[field.label] + " "
        if self._syntax == "proto3" and field.proto3_optional:
            return "optional "
        return ""

    def _type_name(self, field: descriptor_pb2.FieldDescriptorProto) -> str:
        if field.type in _SCALAR_NAMES:
            return _SCALAR_NAMES[field.type]
        name: str = field.type_name
        return name

    def _field_bracket(self, field: descriptor_pb2.FieldDescriptorProto) -> str:
        special: list[str] = []
        if field.HasField("default_value"):
            special.append(f"default = {self._default_value(field)}")
        if field.HasField("json_name") and field.json_name != default_json_name(field.name):
            special.append(f'json_name = "{escape_string(field.json_name)}"')
        return self._bracketed_options(field.options, special)

    def _default_value(self, field: descriptor_pb2.FieldDescriptorProto) -> str:
        value: str = field.default_value
        if field.type == FieldProto.TYPE_STRING:
            return f'"{escape_string(value)}"'
        if field.type == FieldProto.TYPE_BYTES:
            return f'"{value}"'  # the descriptor holds bytes defaults already escaped
        return value

    # -- enums, extensions, services -----------------------------------------------------

    def _enum(self, enum: descriptor_pb2.EnumDescriptorProto) -> list[str]:
        lines = [f"enum {enum.name} {{"]
        body = self._reserved(enum.reserved_range, enum.reserved_name, end_exclusive=False)
        body.extend(self._option_statements(enum.options))
        for value in enum.value:
            bracket = self._bracketed_options(value.options, ())
            body.append(f"{value.name} = {value.number}{bracket};")
        lines.extend(_indented(body))
        lines.append("}")
        return lines

    def _extends(self, extensions: Sequence[descriptor_pb2.FieldDescriptorProto]) -> list[str]:
        lines: list[str] = []
        index = 0
        while index < len(extensions):
            extendee = extensions[index].extendee
            group: list[descriptor_pb2.FieldDescriptorProto] = []
            while index < len(extensions) and extensions[index].extendee == extendee:
                group.append(extensions[index])
                index += 1
            lines.append(f"extend {extendee} {{")
            body: list[str] = []
            for field in group:
                body.extend(self._field(field, {}, set(), in_oneof=False))
            lines.extend(_indented(body))
            lines.append("}")
        return lines

    def _service(self, service: descriptor_pb2.ServiceDescriptorProto) -> list[str]:
        lines = [f"service {service.name} {{"]
        body = self._option_statements(service.options)
        for method in service.method:
            request = ("stream " if method.client_streaming else "") + method.input_type
            response = ("stream " if method.server_streaming else "") + method.output_type
            head = f"rpc {method.name} ({request}) returns ({response})"
            options = self._option_statements(method.options)
            if options:
                body.append(head + " {")
                body.extend(_indented(options))
                body.append("}")
            else:
                body.append(head + ";")
        lines.extend(_indented(body))
        lines.append("}")
        return lines

    def _reserved(
        self,
        ranges: Sequence[
            descriptor_pb2.DescriptorProto.ReservedRange
            | descriptor_pb2.EnumDescriptorProto.EnumReservedRange
        ],
        names: Sequence[str],
        *,
        end_exclusive: bool,
    ) -> list[str]:
        lines: list[str] = []
        for reserved in ranges:
            end = reserved.end - 1 if end_exclusive else reserved.end
            if end == reserved.start:
                lines.append(f"reserved {reserved.start};")
            else:
                upper = "max" if end_exclusive and end >= FIELD_NUMBER_MAX else str(end)
                if not end_exclusive and end == 2**31 - 1:
                    upper = "max"
                lines.append(f"reserved {reserved.start} to {upper};")
        for name in names:
            lines.append(f'reserved "{escape_string(name)}";')
        return lines

    # -- options -----------------------------------------------------------------------

    def _option_statements(self, options: Message) -> list[str]:
        return [f"option {name} = {value};" for name, value in self._options(options)]

    def _bracketed_options(self, options: Message, special: Sequence[str]) -> str:
        entries = [*special, *(f"{name} = {value}" for name, value in self._options(options))]
        return f" [{', '.join(entries)}]" if entries else ""

    def _options(self, options: Message) -> Iterator[tuple[str, str]]:
        full_name = options.DESCRIPTOR.full_name
        readable = self._readable(options)
        implied = _IMPLIED_OPTIONS.get(full_name, set())
        for field, value in readable.ListFields():
            if field.name in implied and not field.is_extension:
                continue
            name = f"({field.full_name})" if field.is_extension else field.name
            values = list(value) if field.is_repeated else [value]
            for one in values:
                yield name, _option_value(field, one)

    def _readable(self, options: Message) -> Message:
        """``options`` parsed again through the pool, so custom options (extensions the
        generated option classes do not know) read as fields."""
        if len(UnknownFieldSet(options)) == 0:
            return options
        if self._pool is not None:
            try:
                descriptor = self._pool.FindMessageTypeByName(options.DESCRIPTOR.full_name)
            except KeyError:
                descriptor = None
            if descriptor is not None:
                readable: Message = message_factory.GetMessageClass(descriptor).FromString(
                    options.SerializeToString()
                )
                if len(UnknownFieldSet(readable)) == 0:
                    return readable
        numbers = sorted({field.field_number for field in UnknownFieldSet(options)})
        raise UnrenderableOption(
            f"{options.DESCRIPTOR.name} has custom options numbered {numbers} whose definitions "
            "are not among the schema and its references"
        )


def _option_value(field: FieldDescriptor, value: object) -> str:
    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        assert isinstance(value, Message)
        inner = text_format.MessageToString(value, as_one_line=True)
        return "{ " + inner + " }" if inner else "{}"
    if field.type == FieldDescriptor.TYPE_ENUM:
        assert isinstance(value, int)
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else str(value)
    if field.type == FieldDescriptor.TYPE_STRING:
        assert isinstance(value, str)
        return f'"{escape_string(value)}"'
    if field.type == FieldDescriptor.TYPE_BYTES:
        assert isinstance(value, bytes)
        return f'"{text_encoding.CEscape(value, as_utf8=False)}"'
    if field.type == FieldDescriptor.TYPE_BOOL:
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    return str(value)


def _indented(lines: Sequence[str]) -> list[str]:
    return [INDENT + line if line else line for line in lines]
