"""The Protobuf format: ``.proto`` schemas compiled by protoc, Confluent's compatibility
rules, and values behind Confluent's message indexes.

A schema arrives as ``.proto`` text (Java clients, ``sluice schemas register``) or as a
base64 serialized ``FileDescriptorProto`` (confluent-kafka-python's
``ProtobufSerializer``). Either way it is compiled by the official compiler that
grpcio-tools bundles, in a private temporary directory holding the schema and its
references under their import names (``google/protobuf/*.proto`` come with the
compiler); a descriptor is first written back as text (:mod:`.protobuf_text`). The
compiler's errors, with line and column, become :class:`~sluice.schemas.api.InvalidSchema`.
Each parsed schema has its own descriptor pool, so schemas never clash over names.

The canonical text is the compiled file written back as ``.proto`` text (comments and
layout gone, names fully qualified), so the same schema sent as text or as a descriptor
is stored once. ``serialized()`` is the base64 ``FileDescriptorProto`` Confluent answers
for ``format=serialized``.

A value's payload (after :mod:`~sluice.schemas.wire`'s 5-byte header) names which message
of the file it holds::

    +--------------------------------+-----------------------------+
    | message indexes                | the message's Protobuf bytes|
    | zig-zag varint count, then     |                             |
    | that many zig-zag varints;     |                             |
    | the single byte 0x00 = [0]     |                             |
    +--------------------------------+-----------------------------+

``[2, 0]`` is the first message nested in the file's third top-level message.
"""

from __future__ import annotations

import base64
import binascii
import importlib.resources
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Final

from google.protobuf import descriptor_pb2, json_format, message_factory
from google.protobuf.descriptor import Descriptor
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message import DecodeError, Message
from grpc_tools import _protoc_compiler, protoc

from sluice.schemas.api import InvalidSchema, ParsedSchema, ResolvedReference, SchemaType
from sluice.schemas.protobuf_compatibility import protobuf_differences
from sluice.schemas.protobuf_text import UnrenderableOption, render

# How many message indexes a payload may name (Confluent's readers refuse more than
# this many too): bounds the work a malformed payload can ask for.
MESSAGE_INDEXES_MAX: Final = 100_000
# The file name a schema's own text gets beside its references.
SCHEMA_FILE_NAME: Final = "default.proto"
_WELL_KNOWN_TYPES_DIR: Final = str(importlib.resources.files("grpc_tools") / "_proto")
# The well-known types the Protobuf runtime carries, for reading custom options in
# descriptors before they are compiled.
_WELL_KNOWN_MODULES: Final = tuple(
    f"google.protobuf.{name}_pb2"
    for name in (
        # Each after the files it imports.
        "descriptor",
        "any",
        "source_context",
        "type",
        "api",
        "duration",
        "empty",
        "field_mask",
        "struct",
        "timestamp",
        "wrappers",
    )
)
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
# protoc's command line runs with the process's standard error redirected: one at a time.
_PROTOC_LOCK = threading.Lock()
_STANDARD_ERROR_FD: Final = 2


class ProtobufSchema:
    """A compiled ``.proto`` file with the files it imports. Immutable."""

    __slots__ = ("_canonical", "_file", "_files", "_pool", "_references")

    def __init__(
        self,
        file: descriptor_pb2.FileDescriptorProto,
        files: Sequence[descriptor_pb2.FileDescriptorProto],
        references: Sequence[ResolvedReference],
    ):
        self._file = file
        self._files = tuple(files)
        self._references = tuple(references)
        self._pool = DescriptorPool()
        for one in self._files:
            self._pool.Add(one)
        try:
            self._canonical = render(file, self._pool)
        except UnrenderableOption as error:
            raise InvalidSchema(str(error)) from error

    @property
    def schema_type(self) -> SchemaType:
        return SchemaType.PROTOBUF

    @property
    def file(self) -> descriptor_pb2.FileDescriptorProto:
        """The schema's own compiled file (do not modify it)."""
        return self._file

    @property
    def files(self) -> tuple[descriptor_pb2.FileDescriptorProto, ...]:
        """Every compiled file, imports first, the schema's own last."""
        return self._files

    def canonical(self) -> str:
        return self._canonical

    def serialized(self) -> str:
        """The compiled file as base64 ``FileDescriptorProto`` bytes: Confluent's
        ``format=serialized`` answer, which confluent-kafka-python's deserializers ask."""
        return base64.standard_b64encode(self._file.SerializeToString()).decode("ascii")

    def normalized(self) -> ProtobufSchema:
        """Confluent's normal form: imports sorted, fields and each oneof's fields by
        number, oneofs by their first field's number, enum constants by number then
        name, reserved ranges and names sorted. Messages keep their order: the message
        indexes in values count on it."""
        file = descriptor_pb2.FileDescriptorProto()
        file.CopyFrom(self._file)
        _normalize_file(file)
        return FORMAT.parse(render(file, self._pool), self._references)

    def record_names(self) -> list[str]:
        prefix = f"{self._file.package}." if self._file.package else ""
        return [prefix + message.name for message in self._file.message_type]

    def message_descriptor(self, indexes: Sequence[int]) -> Descriptor:
        """The message ``indexes`` name: the first index counts the file's top-level
        messages, each next one the previous message's nested messages. Raises
        ValueError when there is no such message."""
        if not indexes:
            raise ValueError("no message index")
        found: descriptor_pb2.DescriptorProto | None = None
        path = self._file.package
        messages: Sequence[descriptor_pb2.DescriptorProto] = self._file.message_type
        for depth, index in enumerate(indexes):
            if not 0 <= index < len(messages):
                where = "the file" if depth == 0 else f"message {path}"
                raise ValueError(
                    f"message index {index} out of range: {where} has {len(messages)} message(s)"
                )
            found = messages[index]
            path = f"{path}.{found.name}" if path else found.name
            messages = found.nested_type
        descriptor: Descriptor = self._pool.FindMessageTypeByName(path)
        return descriptor

    def message_class(self, indexes: Sequence[int]) -> type[Message]:
        """The generated class of the message ``indexes`` name."""
        found: type[Message] = message_factory.GetMessageClass(self.message_descriptor(indexes))
        return found

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProtobufSchema) and other._canonical == self._canonical

    def __hash__(self) -> int:
        return hash(self._canonical)

    def __repr__(self) -> str:
        return f"ProtobufSchema({self.record_names()[:1]!r})"


class ProtobufFormat:
    """Protobuf as Confluent's registry and serializers use it."""

    @property
    def schema_type(self) -> SchemaType:
        return SchemaType.PROTOBUF

    def parse(self, text: str, references: Sequence[ResolvedReference] = ()) -> ProtobufSchema:
        for reference in references:
            _check_import_name(reference.name)
        given = [(reference.name, reference.text) for reference in references]
        schema_name = SCHEMA_FILE_NAME
        while any(name == schema_name for name, _ in given):
            schema_name = "_" + schema_name
        given.append((schema_name, text))
        descriptors = {name: _as_descriptor(name, one) for name, one in given}
        options_pool = _options_pool(
            descriptor for descriptor in descriptors.values() if descriptor is not None
        )
        sources = {
            name: _as_text(name, one, descriptors[name], options_pool) for name, one in given
        }
        files = _compile(sources, schema_name)
        return ProtobufSchema(files[-1], files, references)

    def compatibility_errors(self, reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
        if not isinstance(reader, ProtobufSchema) or not isinstance(writer, ProtobufSchema):
            return ["Incompatible because of different schema type"]
        return protobuf_differences(original=writer.files, update=reader.files)

    def decode(self, schema: ParsedSchema, payload: bytes) -> object:
        assert isinstance(schema, ProtobufSchema), schema
        indexes, offset = read_message_indexes(payload)
        message_class = schema.message_class(indexes)
        try:
            message = message_class.FromString(bytes(payload[offset:]))
        except DecodeError as error:
            raise ValueError(f"not a {message_class.DESCRIPTOR.full_name}: {error}") from error
        decoded: dict[str, object] = json_format.MessageToDict(
            message, preserving_proto_field_name=True
        )
        return decoded

    def encode(self, schema: ParsedSchema, value: object) -> bytes:
        """``value`` as the schema's first message, behind the index list ``[0]``."""
        return self.encode_message(schema, value, [0])

    def encode_message(self, schema: ParsedSchema, value: object, indexes: Sequence[int]) -> bytes:
        """``value`` (a dict in Protobuf's JSON mapping, field names or JSON names) as
        the message ``indexes`` name, behind those indexes."""
        assert isinstance(schema, ProtobufSchema), schema
        message_class = schema.message_class(indexes)
        if not isinstance(value, dict):
            name = message_class.DESCRIPTOR.full_name
            raise ValueError(f"a {name} is written from a dict, not {type(value).__name__}")
        try:
            message = json_format.ParseDict(value, message_class())
        except json_format.ParseError as error:
            raise ValueError(str(error)) from error
        body: bytes = message.SerializeToString()
        return write_message_indexes(indexes) + body


FORMAT: Final = ProtobufFormat()


# -- message indexes ---------------------------------------------------------------------


def write_message_indexes(indexes: Sequence[int]) -> bytes:
    """Confluent's message-index list: ``[0]`` as the single byte 0, otherwise the count
    then each index, all zig-zag varints."""
    if list(indexes) == [0]:
        return b"\x00"
    out = bytearray()
    for number in (len(indexes), *indexes):
        _write_zigzag(out, number)
    return bytes(out)


def read_message_indexes(payload: bytes | memoryview) -> tuple[list[int], int]:
    """The message indexes at the start of ``payload`` and where the message starts.
    Raises ValueError on a truncated, negative or oversized list."""
    count, offset = _read_zigzag(payload, 0)
    if count < 0 or count > MESSAGE_INDEXES_MAX:
        raise ValueError(f"message index count {count} is outside 0..{MESSAGE_INDEXES_MAX}")
    if count == 0:
        return [0], offset
    indexes: list[int] = []
    for _ in range(count):
        index, offset = _read_zigzag(payload, offset)
        indexes.append(index)
    return indexes, offset


def _write_zigzag(out: bytearray, number: int) -> None:
    value = (number << 1) ^ (number >> 63)
    value &= (1 << 64) - 1
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


# A varint of a 64-bit number takes at most ten bytes.
_VARINT_BYTES_MAX: Final = 10


def _read_zigzag(payload: bytes | memoryview, offset: int) -> tuple[int, int]:
    value = 0
    for shift_index in range(_VARINT_BYTES_MAX):
        if offset >= len(payload):
            raise ValueError("message indexes end before their last varint")
        byte: int = payload[offset]
        offset += 1
        value |= (byte & 0x7F) << (7 * shift_index)
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), offset
    raise ValueError(f"a message index varint is longer than {_VARINT_BYTES_MAX} bytes")


# -- parsing -------------------------------------------------------------------------------


def _as_descriptor(name: str, text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """``text`` decoded when it is a base64 ``FileDescriptorProto``, named ``name``."""
    stripped = text.strip()
    if not _BASE64.fullmatch(stripped):
        return None
    try:
        data = base64.b64decode(stripped, validate=True)
        descriptor = descriptor_pb2.FileDescriptorProto()
        descriptor.ParseFromString(data)
    except (binascii.Error, DecodeError):
        return None
    descriptor.name = name
    return descriptor


def _options_pool(descriptors: Iterable[descriptor_pb2.FileDescriptorProto]) -> DescriptorPool:
    """A pool that defines what it can of the custom options the given descriptors use:
    the well-known types (``descriptor.proto`` among them) and those descriptors that
    load on them and on each other."""
    pool = DescriptorPool()
    for module in _WELL_KNOWN_MODULES:
        pool.AddSerializedFile(importlib.import_module(module).DESCRIPTOR.serialized_pb)
    pending = list(descriptors)
    while pending:
        still_pending = []
        for descriptor in pending:
            try:
                pool.Add(descriptor)
            except (TypeError, KeyError, ValueError):
                still_pending.append(descriptor)
        if len(still_pending) == len(pending):
            break  # the rest import what is not here: their custom options stay unknown
        pending = still_pending
    return pool


def _as_text(
    name: str,
    text: str,
    descriptor: descriptor_pb2.FileDescriptorProto | None,
    options_pool: DescriptorPool,
) -> str:
    if descriptor is None:
        return text
    try:
        return render(descriptor, options_pool)
    except UnrenderableOption as error:
        raise InvalidSchema(f"{name}: {error}") from error


def _check_import_name(name: str) -> None:
    parts = name.split("/")
    if (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\x00" in name
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise InvalidSchema(
            f"reference name {name!r} is not a relative import path such as 'dir/file.proto'"
        )


def _compile(sources: dict[str, str], main: str) -> list[descriptor_pb2.FileDescriptorProto]:
    """``sources`` (import name → text) compiled; ``main``'s file and everything it
    imports, imports first. Raises InvalidSchema with the compiler's errors."""
    with tempfile.TemporaryDirectory(prefix="sluice-proto-") as directory:
        for name, text in sources.items():
            path = os.path.join(directory, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as file:
                file.write(text)
        include = [directory.encode(), _WELL_KNOWN_TYPES_DIR.encode()]
        output = os.path.join(directory, "descriptor-set.bin")
        arguments = [
            "protoc",
            f"--proto_path={directory}",
            f"--proto_path={_WELL_KNOWN_TYPES_DIR}",
            "--include_imports",
            f"--descriptor_set_out={output}",
            main,
        ]
        said: list[str] = []
        with _compiler_output_kept(said, (directory, *sources)):
            try:
                # Reports the schema's errors as data, with lines and columns.
                _protoc_compiler.get_protos(main.encode(), include)
            except _protoc_compiler.ProtocErrors as errors:
                raise InvalidSchema(_error_text(errors.errors())) from None
            status: int = protoc.main(arguments)
        if status != 0:
            detail = "; ".join(line.replace(directory + os.sep, "") for line in said)
            raise InvalidSchema(f"the Protobuf compiler refused the schema: {detail}")
        with open(output, "rb") as file:
            descriptor_set = descriptor_pb2.FileDescriptorSet.FromString(file.read())
    return list(descriptor_set.file)


# The line the compiler's logging library writes before its first message.
_LOG_PREAMBLE: Final = "before absl::InitializeLog() is called"


@contextmanager
def _compiler_output_kept(said: list[str], markers: Sequence[str]) -> Iterator[None]:
    """Keeps what the compiler writes to the process's standard error about the schema
    (warnings such as an unused import or a missing ``syntax``, naming its temporary
    directory or files: lines holding one of ``markers``) out of the broker's log, in
    ``said``. Meanwhile file descriptor 2 points at a temporary file (one compilation
    at a time, under a lock); whatever else the process wrote there is passed on after.
    """
    with _PROTOC_LOCK, tempfile.TemporaryFile() as capture:
        sys.stderr.flush()
        saved = os.dup(_STANDARD_ERROR_FD)
        try:
            os.dup2(capture.fileno(), _STANDARD_ERROR_FD)
            try:
                yield
            finally:
                os.dup2(saved, _STANDARD_ERROR_FD)
        finally:
            os.close(saved)
            capture.seek(0)
            written = capture.read().decode("utf-8", "replace").splitlines(keepends=True)
            others: list[str] = []
            for line in written:
                if _LOG_PREAMBLE in line or any(marker in line for marker in markers):
                    said.append(line.rstrip("\n"))
                else:
                    others.append(line)
            if others:
                os.write(_STANDARD_ERROR_FD, "".join(others).encode("utf-8"))


def _error_text(errors: Sequence[_protoc_compiler.ProtocError]) -> str:
    lines = []
    for error in errors:
        filename = _text(error.filename)
        if filename == SCHEMA_FILE_NAME:
            filename = "schema"
        # protoc counts lines and columns from zero; people count from one.
        lines.append(f"{filename}:{error.line + 1}:{error.column + 1}: {_text(error.message)}")
    return "; ".join(lines)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


# -- normal form ---------------------------------------------------------------------------


def _normalize_file(file: descriptor_pb2.FileDescriptorProto) -> None:
    public = {file.dependency[index] for index in file.public_dependency}
    weak = {file.dependency[index] for index in file.weak_dependency}
    dependencies = sorted(set(file.dependency))
    del file.dependency[:]
    file.dependency.extend(dependencies)
    del file.public_dependency[:]
    file.public_dependency.extend(
        index for index, name in enumerate(dependencies) if name in public
    )
    del file.weak_dependency[:]
    file.weak_dependency.extend(index for index, name in enumerate(dependencies) if name in weak)
    for message in file.message_type:
        _normalize_message(message)
    for enum in file.enum_type:
        _normalize_enum(enum)


def _normalize_message(message: descriptor_pb2.DescriptorProto) -> None:
    def first_number(field: descriptor_pb2.FieldDescriptorProto) -> int:
        if field.HasField("oneof_index") and not field.proto3_optional:
            numbers: list[int] = [
                one.number
                for one in message.field
                if one.HasField("oneof_index") and one.oneof_index == field.oneof_index
            ]
            return min(numbers)
        number: int = field.number
        return number

    fields = sorted(message.field, key=lambda field: (first_number(field), field.number))
    _replace(message.field, fields)
    _replace(
        message.reserved_range, sorted(message.reserved_range, key=lambda one: (one.start, one.end))
    )
    names = sorted(message.reserved_name)
    del message.reserved_name[:]
    message.reserved_name.extend(names)
    for nested in message.nested_type:
        _normalize_message(nested)
    for enum in message.enum_type:
        _normalize_enum(enum)


def _normalize_enum(enum: descriptor_pb2.EnumDescriptorProto) -> None:
    _replace(enum.value, sorted(enum.value, key=lambda value: (value.number, value.name)))
    _replace(enum.reserved_range, sorted(enum.reserved_range, key=lambda one: (one.start, one.end)))
    names = sorted(enum.reserved_name)
    del enum.reserved_name[:]
    enum.reserved_name.extend(names)


def _replace(container: object, items: Sequence[Message]) -> None:
    copies = [type(item)() for item in items]
    for copy, item in zip(copies, items, strict=True):
        copy.CopyFrom(item)
    del container[:]  # type: ignore[attr-defined]
    container.extend(copies)  # type: ignore[attr-defined]
