"""Keys and values framed with Schema Registry ids (``valueSchema=registry``), in Spark.

Reading: the driver asks the registry for the subject's schema (the version
``schemaVersion``, default latest) when Spark plans the query; its Spark type
(:mod:`sluice.spark.schema_columns`) becomes the type of the ``value`` (``key``)
column. Each task decodes every record with the schema its own id names (the *writer*
schema) into that planned *reader* schema::

    value bytes ─► magic byte + id ─► writer schema (by id, cached per task)
                                  ─► Avro: read with the writer schema into the reader
                                     schema (Avro's schema resolution: defaults filled,
                                     removed fields dropped, promotions)
                                     JSON Schema, Protobuf: decoded with the writer
                                     schema, fields taken by name into the reader's
                                     columns
                                  ─► the column's value

A record that cannot be decoded (not framed, an unknown id, bytes that are not a value
of their schema, a writer schema the reader schema cannot read, a JSON value of the
wrong type) gets null in the column and the reason in ``_decode_error`` (``mode``
PERMISSIVE, the default), or fails the query (FAILFAST). A null key or value (a
tombstone) stays null and is no error.

Writing: the driver takes the subject's latest schema, or with ``autoRegister=true``
registers the Avro schema of the DataFrame's ``value`` (``key``) column type; each task
encodes each row with it behind the wire header (:mod:`sluice.schemas.wire`).
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import fastavro
import pyarrow as pa
from pyspark.sql.types import DataType, StringType, StructField, StructType

from sluice.client.consumer import ConsumedRecord
from sluice.client.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError
from sluice.schemas.api import (
    ParsedSchema,
    ResolvedReference,
    SchemaType,
    format_for,
)
from sluice.schemas.avro import AvroSchema
from sluice.schemas.avro_bounds import check_payload
from sluice.schemas.wire import NotFramed, frame, unframe
from sluice.spark.options import RegistryOptions, SluiceOptionError
from sluice.spark.schema_columns import (
    ColumnPlan,
    UnsupportedSchema,
    avro_schema_for,
    column_for,
    format_value,
)

DECODE_ERROR_COLUMN: Final = "_decode_error"

DECODE_ERROR_TEXT_MAX_CHARS: Final = 1000
"""The longest reason put in ``_decode_error`` (a schema's own words may be long)."""


class MalformedRecord(ValueError):
    """A record that cannot be decoded, under ``mode=FAILFAST``."""


@dataclass(frozen=True, slots=True)
class PlannedSchema:
    """One subject's schema as planned on the driver (plain, picklable data)."""

    subject: str
    schema_id: int
    version: int | None
    text: str
    schema_type: SchemaType
    references: tuple[ResolvedReference, ...]

    def parse(self) -> ParsedSchema:
        return format_for(self.schema_type).parse(self.text, self.references)


@dataclass(frozen=True, slots=True)
class RegistryPlan:
    """The planned schemas of keys and values (None: that part stays bytes)."""

    options: RegistryOptions
    value: PlannedSchema | None
    key: PlannedSchema | None

    def parts(self) -> list[tuple[str, PlannedSchema]]:
        return [
            (part, planned)
            for part, planned in (("key", self.key), ("value", self.value))
            if planned is not None
        ]


def registry_client(options: RegistryOptions) -> SchemaRegistryClient:
    try:
        return SchemaRegistryClient(options.url, user_info=options.user_info)
    except ValueError as error:
        raise SluiceOptionError(f"option schemaRegistryUrl: {error}") from None


def _option_error(subject: str, options: RegistryOptions, error: Exception) -> SluiceOptionError:
    return SluiceOptionError(
        f"subject {subject!r} of the schema registry at {options.url}: {error}"
    )


async def _planned(client: SchemaRegistryClient, subject: str, version: str) -> PlannedSchema:
    registered = await client.version(subject, version)
    references = await client.resolve_references(registered.schema)
    return PlannedSchema(
        subject,
        registered.schema_id,
        registered.version,
        registered.schema.text,
        registered.schema.schema_type,
        tuple(references),
    )


def plan_read(options: RegistryOptions) -> RegistryPlan:
    """The schemas to read into (driver). Raises :class:`SluiceOptionError` naming the
    subject when the registry has no such subject or version, or cannot be reached."""

    async def main() -> RegistryPlan:
        async with registry_client(options) as client:
            found: dict[str, PlannedSchema | None] = {"value": None, "key": None}
            for part, subject, version in (
                ("value", options.value_subject, options.value_version),
                ("key", options.key_subject, "latest"),
            ):
                if subject is None:
                    continue
                try:
                    found[part] = await _planned(client, subject, version)
                except SchemaRegistryError as error:
                    raise _option_error(subject, options, error) from None
            return RegistryPlan(options, found["value"], found["key"])

    return asyncio.run(main())


def _column(planned: PlannedSchema) -> ColumnPlan:
    try:
        return column_for(planned.parse())
    except (UnsupportedSchema, ValueError) as error:
        raise SluiceOptionError(
            f"subject {planned.subject!r} (schema id {planned.schema_id}): {error}"
        ) from None


def decoded_schema(base: StructType, plan: RegistryPlan) -> StructType:
    """``base`` (the source's columns) with the decoded parts' types, and
    ``_decode_error`` last unless FAILFAST."""
    types: dict[str, DataType] = {
        part: _column(planned).data_type for part, planned in plan.parts()
    }
    fields = [
        StructField(f.name, types.get(f.name, f.dataType), nullable=True) for f in base.fields
    ]
    if not plan.options.fail_fast:
        fields.append(StructField(DECODE_ERROR_COLUMN, StringType(), nullable=True))
    return StructType(fields)


# ── executors: decoding ───────────────────────────────────────────────────────────────


class _PartDecoder:
    """Decodes one part (key or value) of records into its planned column."""

    def __init__(self, part: str, planned: PlannedSchema, client: SchemaRegistryClient) -> None:
        self.part = part
        self.planned = planned
        self.reader = planned.parse()
        self.column = column_for(self.reader)
        self.client = client
        self._unreadable: dict[int, str | None] = {}
        """Writer schema id → why the reader schema cannot read it (None: it can)."""

    async def decode(self, data: bytes) -> Any:
        """The column's value; raises ValueError saying why it cannot be decoded."""
        framed = unframe(data)
        schema_id = framed.schema_id
        payload = bytes(framed.payload)
        if schema_id == self.planned.schema_id:
            value = format_for(self.reader.schema_type).decode(self.reader, payload)
            return self.column.value_of(value)
        try:
            writer = await self.client.parsed_schema(schema_id)
        except SchemaRegistryError as error:
            if error.status is None or error.status >= 500:
                raise  # the registry is unreachable or broken: not this record's fault
            raise ValueError(f"schema id {schema_id}: {error}") from None
        if writer.schema_type is not self.reader.schema_type:
            raise ValueError(
                f"written with schema id {schema_id}, a {writer.schema_type.value} schema, "
                f"not {self.reader.schema_type.value} like subject {self.planned.subject!r}"
            )
        if isinstance(writer, AvroSchema):
            value = self._read_avro(schema_id, writer, payload)
        else:
            value = format_for(writer.schema_type).decode(writer, payload)
        return self.column.value_of(value)

    def _read_avro(self, schema_id: int, writer: AvroSchema, payload: bytes) -> Any:
        """Avro schema resolution: ``payload`` written with ``writer``, read as the
        planned reader schema."""
        reader = self.reader
        assert isinstance(reader, AvroSchema)
        if schema_id not in self._unreadable:
            reasons = format_for(SchemaType.AVRO).compatibility_errors(reader, writer)
            self._unreadable[schema_id] = "; ".join(reasons) if reasons else None
        unreadable = self._unreadable[schema_id]
        if unreadable is not None:
            raise ValueError(
                f"written with schema id {schema_id}, which version "
                f"{self.planned.version} of {self.planned.subject!r} cannot read: {unreadable}"
            )
        if writer.checks_values:
            check_payload(writer.model, payload)
        stream = io.BytesIO(payload)
        try:
            value = fastavro.schemaless_reader(stream, writer.writer_schema, reader.writer_schema)
        except Exception as error:
            raise ValueError(f"not an Avro value of schema id {schema_id}: {error}") from None
        if stream.tell() != len(payload):
            raise ValueError(
                f"not an Avro value of schema id {schema_id}: "
                f"{len(payload) - stream.tell()} bytes left after the value"
            )
        return value


class RecordDecoder:
    """Decodes the key and value columns of a task's records (one per task; it holds a
    registry client bound to the task's event loop)."""

    def __init__(self, plan: RegistryPlan) -> None:
        self.plan = plan
        self.client = registry_client(plan.options)
        self.parts = [_PartDecoder(part, planned, self.client) for part, planned in plan.parts()]

    async def close(self) -> None:
        await self.client.close()

    async def columns(
        self, records: Sequence[ConsumedRecord], schema: pa.Schema
    ) -> dict[str, pa.Array]:
        """The decoded columns (``key``/``value``, and ``_decode_error`` unless
        FAILFAST) of ``records``, as Arrow arrays of ``schema``'s types. Raises
        :class:`MalformedRecord` under FAILFAST."""
        found: dict[str, list[Any]] = {decoder.part: [] for decoder in self.parts}
        reasons: list[list[str]] = []
        for record in records:
            reasons_of_record: list[str] = []
            for decoder in self.parts:
                data = record.key if decoder.part == "key" else record.value
                value = None
                if data is not None:
                    try:
                        value = await decoder.decode(data)
                    except (NotFramed, ValueError, TypeError, KeyError) as error:
                        reasons_of_record.append(f"{decoder.part}: {error}")
                found[decoder.part].append(value)
            reasons.append(reasons_of_record)
        arrays = {
            part: _arrow_column(part, values, schema.field(part).type, reasons)
            for part, values in found.items()
        }
        errors: list[str | None] = []
        for record, reasons_of_record in zip(records, reasons, strict=True):
            reason = (
                "; ".join(reasons_of_record)[:DECODE_ERROR_TEXT_MAX_CHARS]
                if reasons_of_record
                else None
            )
            if reason is not None and self.plan.options.fail_fast:
                raise MalformedRecord(
                    f"{record.topic}-{record.partition} offset {record.offset} cannot be "
                    f"decoded ({reason}); mode is FAILFAST: set mode=PERMISSIVE to read such "
                    f"records with the reason in {DECODE_ERROR_COLUMN}"
                )
            errors.append(reason)
        if not self.plan.options.fail_fast:
            arrays[DECODE_ERROR_COLUMN] = pa.array(errors, type=pa.string())
        return arrays


_ARROW_REFUSALS: Final = (pa.ArrowException, OverflowError, TypeError, ValueError)


def _arrow_column(
    part: str, values: list[Any], arrow_type: pa.DataType, reasons: list[list[str]]
) -> pa.Array:
    """``values`` as an Arrow array; a value that does not fit its column (a decimal wider
    than the reader schema's precision, say) becomes null, its reason added to the
    record's ``reasons``."""
    try:
        return pa.array(values, type=arrow_type)
    except _ARROW_REFUSALS:
        pass
    fitting: list[Any] = []
    for value, reasons_of_record in zip(values, reasons, strict=True):
        try:
            pa.array([value], type=arrow_type)
        except _ARROW_REFUSALS as error:
            reasons_of_record.append(f"{part}: does not fit its column ({arrow_type}): {error}")
            fitting.append(None)
        else:
            fitting.append(value)
    return pa.array(fitting, type=arrow_type)


# ── writing ───────────────────────────────────────────────────────────────────────────


def plan_write(options: RegistryOptions, schema: StructType) -> RegistryPlan:
    """The schemas to encode with (driver): each subject's latest, or, with
    autoRegister, the Avro schema of the column's type, registered."""
    types = {f.name: f.dataType for f in schema.fields}

    async def one(client: SchemaRegistryClient, part: str, subject: str) -> PlannedSchema:
        if not options.auto_register:
            return await _planned(client, subject, "latest")
        text = json.dumps(avro_schema_for(types[part]), separators=(",", ":"))
        schema_id = await client.register(subject, Schema(text, SchemaType.AVRO))
        return PlannedSchema(subject, schema_id, None, text, SchemaType.AVRO, ())

    async def main() -> RegistryPlan:
        async with registry_client(options) as client:
            found: dict[str, PlannedSchema | None] = {"value": None, "key": None}
            for part, subject in (("value", options.value_subject), ("key", options.key_subject)):
                if subject is None:
                    continue
                if part not in types:
                    raise SluiceOptionError(
                        f"{part}Schema=registry but the DataFrame has no {part} column"
                    )
                try:
                    planned = await one(client, part, subject)
                except (SchemaRegistryError, UnsupportedSchema) as error:
                    raise _option_error(subject, options, error) from None
                _check_fields(part, types[part], planned)
                found[part] = planned
            return RegistryPlan(options, found["value"], found["key"])

    return asyncio.run(main())


def _check_fields(part: str, data_type: DataType, planned: PlannedSchema) -> None:
    """Refuse a struct column with fields the schema does not have: written, they would
    be dropped without a word."""
    if not isinstance(data_type, StructType):
        return
    schema_type = _column(planned).data_type
    if not isinstance(schema_type, StructType):
        return
    unknown = [name for name in data_type.fieldNames() if name not in schema_type.fieldNames()]
    if unknown:
        raise SluiceOptionError(
            f"column {part} has fields {unknown} that subject {planned.subject!r} (schema id "
            f"{planned.schema_id}) does not have; its fields are {schema_type.fieldNames()}"
        )


class RowEncoder:
    """Encodes the key and value of rows with their planned schemas (one per task)."""

    def __init__(self, plan: RegistryPlan, schema: StructType) -> None:
        types = {f.name: f.dataType for f in schema.fields}
        self._parts = {
            part: (planned, planned.parse(), types[part]) for part, planned in plan.parts()
        }

    def encodes(self, part: str) -> bool:
        return part in self._parts

    def encode(self, part: str, value: Any) -> bytes | None:
        """``value`` (a Spark value of the part's column) framed; ValueError when it
        does not fit the schema."""
        if value is None:
            return None
        planned, parsed, data_type = self._parts[part]
        if hasattr(value, "asDict"):
            value = value.asDict(recursive=True)
        converted = format_value(data_type, value, parsed.schema_type)
        try:
            payload = format_for(parsed.schema_type).encode(parsed, converted)
        except ValueError as error:
            raise ValueError(
                f"a row's {part} does not fit subject {planned.subject!r} "
                f"(schema id {planned.schema_id}): {error}"
            ) from None
        return frame(planned.schema_id, payload)
