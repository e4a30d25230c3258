"""The Avro format: Avro schemas parsed, compared, and used to read and write values.

A schema is checked by both Avro libraries it is used with, so that what either refuses
is refused at registration with the library's own words: fastavro (which writes and
reads values: unknown types, defaults that do not fit their type, names defined twice,
enum symbols) and the apache ``avro`` package (names Avro does not allow, duplicate
fields and union branches; its parsed schema is what compatibility walks). A reference
is an Avro schema whose named types the schema uses by full name; references come
dependencies first, and each one's types are known to those after it.

Values nested deeper than fastavro's compiled code can take, or arrays of items that
take no bytes, are refused before fastavro reads them (:mod:`sluice.schemas.avro_bounds`).

The texts the registry keeps (canonical, normalized) are Confluent's
(:mod:`sluice.schemas.avro_text`); compatibility is Avro's
(:mod:`sluice.schemas.avro_compatibility`).

Values are read and written by fastavro without the wire header. A decoded value is
fastavro's: records as dicts, bytes and fixed as bytes, enums as their symbol, and
logical types as Python objects (``decimal.Decimal``, ``datetime.date``,
``datetime.datetime`` in UTC, ``datetime.time``, ``uuid.UUID``), which a display renders.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import avro.name
import avro.schema
import fastavro

from sluice.schemas.api import InvalidSchema, ParsedSchema, ResolvedReference, SchemaType
from sluice.schemas.avro_bounds import check_payload, check_value_depth, needs_checks
from sluice.schemas.avro_compatibility import AmbiguousField, incompatibilities
from sluice.schemas.avro_defaults import field_of_refused_default
from sluice.schemas.avro_text import (
    PRIMITIVE_TYPES,
    Definition,
    Json,
    canonical_text,
    collect_definitions,
    normalized_text,
    top_level_name,
    without_repeated_definitions,
)

_RECORD_TYPES: Final = frozenset({"record", "error"})


@dataclass(frozen=True, slots=True, eq=False)
class AvroSchema:
    """A parsed Avro schema with the references it was parsed with. Immutable."""

    text: str
    references: tuple[ResolvedReference, ...]
    canonical_text: str
    normalized_text: str
    names: tuple[str, ...]
    # fastavro's parsed schema (a dict it never changes), for values
    writer_schema: Any
    # the apache avro package's, for compatibility and value bounds
    model: avro.schema.Schema
    # whether a value may nest beyond the bounds of :mod:`~sluice.schemas.avro_bounds`
    checks_values: bool

    @property
    def schema_type(self) -> SchemaType:
        return SchemaType.AVRO

    def canonical(self) -> str:
        return self.canonical_text

    def normalized(self) -> ParsedSchema:
        if self.normalized_text == self.text:
            return self
        return FORMAT.parse(self.normalized_text, self.references)

    def record_names(self) -> list[str]:
        return list(self.names)


class AvroFormat:
    """Avro, as Confluent's registry and serializers use it."""

    @property
    def schema_type(self) -> SchemaType:
        return SchemaType.AVRO

    def parse(self, text: str, references: Sequence[ResolvedReference] = ()) -> AvroSchema:
        try:
            return _parse(text, tuple(references))
        except RecursionError:
            raise InvalidSchema("Invalid Avro schema: nested too deeply") from None

    def compatibility_errors(self, reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
        if not isinstance(reader, AvroSchema) or not isinstance(writer, AvroSchema):
            return ["Incompatible because of different schema type"]
        try:
            found = incompatibilities(reader.model, writer.model)
        except AmbiguousField as error:
            return [f"Unexpected exception during compatibility check: {error}"]
        return [incompatibility.message() for incompatibility in found]

    def decode(self, schema: ParsedSchema, payload: bytes) -> object:
        assert isinstance(schema, AvroSchema)
        if schema.checks_values:
            check_payload(schema.model, payload)
        stream = io.BytesIO(payload)
        try:
            value: object = fastavro.schemaless_reader(stream, schema.writer_schema, None)
        except EOFError:
            raise ValueError("not an Avro value of this schema: the bytes end inside it") from None
        except Exception as error:
            raise ValueError(f"not an Avro value of this schema: {_describe(error)}") from None
        trailing = len(payload) - stream.tell()
        if trailing:
            raise ValueError(
                f"not an Avro value of this schema: {trailing} bytes left after the value"
            )
        return value

    def encode(self, schema: ParsedSchema, value: object) -> bytes:
        assert isinstance(schema, AvroSchema)
        if schema.checks_values:
            check_value_depth(value)
        stream = io.BytesIO()
        try:
            fastavro.schemaless_writer(stream, schema.writer_schema, value)
        except Exception as error:
            raise ValueError(f"the value does not fit the schema: {_describe(error)}") from None
        return stream.getvalue()


FORMAT: Final = AvroFormat()


def _describe(error: Exception) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _load(text: str, what: str) -> Json:
    def refuse_constant(name: str) -> Json:
        raise InvalidSchema(f"Invalid Avro schema: {what}: {name} is not JSON")

    try:
        loaded: Json = json.loads(text, parse_constant=refuse_constant)
    except json.JSONDecodeError as error:
        raise InvalidSchema(f"Invalid Avro schema: {what} is not JSON: {error}") from None
    return loaded


def _parse(text: str, references: tuple[ResolvedReference, ...]) -> AvroSchema:
    fastavro_named: dict[str, Any] = {}
    avro_names = avro.name.Names(validate_names=True)
    definitions: dict[str, Definition] = {}
    defined: dict[str, str] = {}  # full name → definition, for repeated definitions
    referenced_names: list[str] = []
    seen_texts: set[str] = set()
    for reference in references:
        if reference.text in seen_texts:  # one schema reached by two paths
            continue
        seen_texts.add(reference.text)
        what = f"reference {reference.name!r}"
        node = _load(reference.text, what)
        collect_definitions(node, None, definitions)
        _check(_unrepeated(node, what, definitions, defined), what, fastavro_named, avro_names)
        name = top_level_name(node)
        if name is not None:
            referenced_names.append(name)
    node = _load(text, "the schema")
    collect_definitions(node, None, definitions)
    unrepeated = _unrepeated(node, "the schema", definitions, defined)
    writer_schema, model = _check(unrepeated, "the schema", fastavro_named, avro_names)
    canonical = canonical_text(node, definitions, referenced_names)
    normalized = normalized_text(node, definitions, referenced_names)
    try:
        canonical.encode()
    except UnicodeEncodeError:
        raise InvalidSchema("Invalid Avro schema: a string is not Unicode text") from None
    return AvroSchema(
        text=text,
        references=references,
        canonical_text=canonical,
        normalized_text=normalized,
        names=tuple(_record_names(node, definitions)),
        writer_schema=writer_schema,
        model=model,
        checks_values=needs_checks(model),
    )


def _unrepeated(
    node: Json, what: str, definitions: dict[str, Definition], defined: dict[str, str]
) -> Json:
    try:
        return without_repeated_definitions(node, None, definitions, defined)
    except InvalidSchema as error:
        raise InvalidSchema(f"Invalid Avro schema: {what}: {error}") from None


def _check(
    node: Json, what: str, fastavro_named: dict[str, Any], avro_names: avro.name.Names
) -> tuple[Any, avro.schema.Schema]:
    """``node`` parsed by both libraries, its named types added to those both know."""
    if node is None or isinstance(node, (bool, int, float)):
        raise InvalidSchema(f"Invalid Avro schema: {what}: {json.dumps(node)} is not a schema")
    named_before = dict(fastavro_named)
    try:
        writer_schema = fastavro.parse_schema(node, fastavro_named)
    except Exception as error:
        where = ""
        if str(error).startswith("Default value <"):
            field = field_of_refused_default(node, named_before)
            if field is not None:
                where = f"the default of the field at {field}: "
        raise InvalidSchema(
            f"Invalid Avro schema: {what}: {where}{_describe_parse(error)}"
        ) from None
    model: avro.schema.Schema | None
    try:
        if isinstance(node, str) and node not in PRIMITIVE_TYPES:
            model = avro_names.get_name(node, None)
        else:
            model = avro.schema.make_avsc_object(node, avro_names)
    except Exception as error:
        raise InvalidSchema(f"Invalid Avro schema: {what}: {_describe_parse(error)}") from None
    if model is None:
        raise InvalidSchema(f"Invalid Avro schema: {what}: unknown type {node!r}")
    return writer_schema, model


def _describe_parse(error: Exception) -> str:
    if isinstance(error, fastavro.schema.UnknownType):
        return f"unknown type {error.name!r}"
    if isinstance(error, KeyError) and error.args:
        return f"an attribute Avro requires is missing: {error.args[0]!r}"
    if isinstance(error, (KeyError, TypeError, AttributeError)):
        return f"malformed schema ({_describe(error)})"
    return str(error) or type(error).__name__


def _record_names(node: Json, definitions: dict[str, Definition]) -> list[str]:
    """The records the schema is: itself, or the records among a union's branches."""
    branches = node if isinstance(node, list) else [node]
    names: list[str] = []
    for branch in branches:
        if isinstance(branch, dict) and branch.get("type") in _RECORD_TYPES:
            name = top_level_name(branch)
            if name is not None:
                names.append(name)
        elif isinstance(branch, str) and branch not in PRIMITIVE_TYPES:
            definition = definitions.get(branch)
            if definition is not None and definition.kind in _RECORD_TYPES:
                names.append(definition.name.full)
    return names
