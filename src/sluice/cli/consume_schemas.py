"""``sluice consume --decode-schemas``: keys and values written by a schema-aware
serializer (Confluent's wire format: the magic byte 0, a four-byte schema id, the
payload) printed as JSON, decoded with their schema from the Schema Registry.

Before a fetch's records are printed, :meth:`SchemaDecoding.prepare` asks the registry
for the schemas of the ids it has not seen (each id once: ids never change meaning),
then each record is decoded as it is formatted:

- ``text`` and ``--format-string``: a decoded key or value is printed as compact JSON.
- ``json``: ``key``/``value`` hold the decoded JSON, and ``key_schema_id`` /
  ``value_schema_id`` the id it was decoded with.

Bytes (Avro ``bytes`` and ``fixed``) print as Avro's JSON encoding writes them, one code
point U+0000-U+00FF per byte. A key or value that is not framed is printed as it is
stored; one that is framed but cannot be decoded (an id the registry does not know, a
payload its schema does not read) too, with the reason in ``value_schema_error`` (json)
or once per reason on standard error (text). A registry that cannot be reached, or that
refuses (no credentials), stops the command.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Final

import click

from sluice.client.consumer import ConsumedRecord
from sluice.client.schema_registry import (
    DecodedValue,
    SchemaRegistryClient,
    SchemaRegistryError,
    encode_bytes_as_avro_json,
)
from sluice.schemas.api import InvalidSchema, ParsedSchema, format_for
from sluice.schemas.wire import NotFramed, schema_id_of, unframe

SCHEMA_NOT_FOUND: Final = 40403
"""Confluent's error code for an id no schema has."""

FAILED_IDS_REMEMBERED_MAX: Final = 10_000
"""Ids known to have no usable schema, kept so each is asked once; past this the
memory is cleared (a topic of random bytes must not grow it without bound)."""

Formatter = Callable[[ConsumedRecord, bool], bytes]


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A framed key or value that could not be decoded, and why."""

    schema_id: int
    reason: str


class SchemaDecoding:
    """Decodes the framed keys and values of records with their registry's schemas."""

    def __init__(self, registry: SchemaRegistryClient) -> None:
        self.registry = registry
        self._schemas: dict[int, ParsedSchema] = {}
        self._failed: dict[int, str] = {}
        self._warned: set[str] = set()

    async def prepare(self, records: Iterable[ConsumedRecord]) -> None:
        """Fetch and parse the schemas of the ids these records' keys and values name
        that have not been seen yet. Raises :class:`SchemaRegistryError` when the
        registry cannot be reached or refuses for another reason than an unknown id."""
        wanted: set[int] = set()
        for record in records:
            for data in (record.key, record.value):
                if data is None:
                    continue
                try:
                    schema_id = schema_id_of(data)
                except NotFramed:
                    continue
                if schema_id not in self._schemas and schema_id not in self._failed:
                    wanted.add(schema_id)
        if wanted:
            await asyncio.gather(*(self._fetch(schema_id) for schema_id in sorted(wanted)))

    async def _fetch(self, schema_id: int) -> None:
        try:
            self._schemas[schema_id] = await self.registry.parsed_schema(schema_id)
        except SchemaRegistryError as e:
            if e.error_code != SCHEMA_NOT_FOUND:
                raise
            self._fail(schema_id, f"schema id {schema_id} is not in the registry")
        except InvalidSchema as e:
            self._fail(schema_id, f"schema id {schema_id} does not parse: {e}")

    def _fail(self, schema_id: int, reason: str) -> None:
        if len(self._failed) >= FAILED_IDS_REMEMBERED_MAX:
            self._failed.clear()
        self._failed[schema_id] = reason

    def decode(self, data: bytes | None) -> DecodedValue | Undecodable | None:
        """``data`` decoded (after :meth:`prepare` saw it); None when it is not framed."""
        if data is None:
            return None
        try:
            framed = unframe(data)
        except NotFramed:
            return None
        schema = self._schemas.get(framed.schema_id)
        if schema is None:
            reason = self._failed.get(framed.schema_id, f"schema id {framed.schema_id} unknown")
            return Undecodable(framed.schema_id, reason)
        try:
            value = format_for(schema.schema_type).decode(schema, bytes(framed.payload))
        except ValueError as e:
            return Undecodable(
                framed.schema_id, f"does not decode with schema id {framed.schema_id}: {e}"
            )
        return DecodedValue(framed.schema_id, value)

    def _warn(self, record: ConsumedRecord, name: str, failure: Undecodable) -> None:
        if failure.reason not in self._warned:
            self._warned.add(failure.reason)
            click.echo(
                f"warning: {name} at {record.topic}-{record.partition}@{record.offset} "
                f"printed as stored: {failure.reason}",
                err=True,
            )

    def as_text(self, record: ConsumedRecord) -> ConsumedRecord:
        """``record`` with its decoded key and value as compact JSON text."""
        key, value = self.decode(record.key), self.decode(record.value)
        if key is None and value is None:
            return record
        for name, decoded in (("key", key), ("value", value)):
            if isinstance(decoded, Undecodable):
                self._warn(record, name, decoded)
        return replace(
            record,
            key=_json_text(key.value) if isinstance(key, DecodedValue) else record.key,
            value=_json_text(value.value) if isinstance(value, DecodedValue) else record.value,
        )

    def text_formatter(self, formatter: Formatter) -> Formatter:
        """``formatter`` (text or --format-string) printing decoded keys and values."""
        return lambda record, print_key: formatter(self.as_text(record), print_key)

    def json_formatter(self, document_of: Callable[[ConsumedRecord], dict[str, Any]]) -> Formatter:
        """The json format's line, decoded keys and values in place of their bytes."""

        def line(record: ConsumedRecord, _print_key: bool) -> bytes:
            document = document_of(record)
            for name, data in (("key", record.key), ("value", record.value)):
                decoded = self.decode(data)
                if isinstance(decoded, DecodedValue):
                    document[name] = encode_bytes_as_avro_json(decoded.value)
                    document.pop(f"{name}_encoding", None)
                    document[f"{name}_schema_id"] = decoded.schema_id
                elif isinstance(decoded, Undecodable):
                    document[f"{name}_schema_id"] = decoded.schema_id
                    document[f"{name}_schema_error"] = decoded.reason
            return json.dumps(document, ensure_ascii=False, default=str).encode() + b"\n"

        return line


def _json_text(value: object) -> bytes:
    # default=str: logical types (decimals, dates, timestamps, UUIDs) as their text.
    return json.dumps(encode_bytes_as_avro_json(value), ensure_ascii=False, default=str).encode()
