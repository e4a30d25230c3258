"""The message browser's schema-aware view: keys and values a schema-aware serializer
wrote (Confluent's framing: the magic byte 0, a four-byte schema id, the payload) are
decoded with their schema from the Schema Registry and shown as pretty JSON, with a
badge naming the schema id and the subject (and version) that holds it.

A page asks the registry once per schema id it shows (the client caches schemas by id
across pages; the subjects of an id are asked once per page). A key or value that
starts with the magic byte but cannot be decoded (an id the registry does not know, a
payload its schema does not read, no registry answering) is shown as before, with a
note saying why. Once the registry cannot be reached, the rest of the page does not ask
it again.

Decoded bytes (Avro ``bytes`` and ``fixed``) are written as Avro's JSON encoding writes
them (one code point U+0000-U+00FF per byte), logical types (decimals, dates,
timestamps, UUIDs) as their text, as ``sluice consume --decode-schemas`` prints them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import quote

from sluice.client.schema_registry import (
    SchemaRegistryClient,
    SchemaRegistryError,
    SubjectVersion,
    encode_bytes_as_avro_json,
)
from sluice.console import formatting
from sluice.schemas.api import InvalidSchema
from sluice.schemas.wire import NotFramed, schema_id_of

Part = Literal["key", "value"]

SCHEMA_IDS_PER_PAGE_MAX: Final = 64
"""Distinct schema ids one page asks the registry about; bytes that only look framed
(a binary key starting with 0x00) must not make a page ask about hundreds of ids."""


@dataclass(frozen=True, slots=True)
class Undecodable:
    reason: str


class PageDecoder:
    """Decodes the framed keys and values of one page of records."""

    def __init__(self, registry: SchemaRegistryClient | None, topic: str) -> None:
        self._registry = registry
        self._topic = topic
        self._subjects: dict[int, list[SubjectVersion]] = {}
        self._failures: dict[int, str] = {}
        self._unreachable: str | None = None

    async def show(
        self, data: bytes | None, part: Part, wanted: formatting.ValueFormat
    ) -> formatting.FormattedValue:
        """``data`` decoded when it is framed, else as :func:`formatting.format_bytes`
        shows it (hex: the bytes as stored, never decoded)."""
        shown = formatting.format_bytes(data, wanted)
        if data is None or wanted == "hex":
            return shown
        try:
            schema_id = schema_id_of(data)
        except NotFramed:
            return shown
        decoded = await self._decode(schema_id, data)
        if isinstance(decoded, Undecodable):
            note = f"schema id {schema_id}: {decoded.reason}; shown as stored"
            if shown.note:
                note += f" ({shown.note})"
            return formatting.FormattedValue(shown.text, shown.shown_as, note)
        subject = self._subject(schema_id, part)
        badge = f"schema id {schema_id}"
        href = ""
        if subject is not None:
            badge += f" · {subject.subject} v{subject.version}"
            href = f"/schemas/subjects/{quote(subject.subject)}#version-{subject.version}"
        return formatting.FormattedValue(decoded, "json", badge=badge, badge_href=href)

    async def _decode(self, schema_id: int, data: bytes) -> str | Undecodable:
        """The value's pretty JSON, or why it cannot be decoded."""
        if self._registry is None:
            return Undecodable("no Schema Registry to ask")
        if self._unreachable is not None:
            return Undecodable(self._unreachable)
        failure = self._failures.get(schema_id)
        if failure is not None:
            return Undecodable(failure)
        if schema_id not in self._subjects and len(self._subjects) >= SCHEMA_IDS_PER_PAGE_MAX:
            return Undecodable(f"more than {SCHEMA_IDS_PER_PAGE_MAX} schema ids on one page")
        try:
            decoded = await self._registry.decode(data)
            if schema_id not in self._subjects:
                self._subjects[schema_id] = await self._subjects_of(schema_id)
        except SchemaRegistryError as e:
            if e.status is None:
                self._unreachable = str(e)
                return Undecodable(self._unreachable)
            self._failures[schema_id] = str(e)
            return Undecodable(str(e))
        except InvalidSchema as e:
            self._failures[schema_id] = f"its schema does not parse: {e}"
            return Undecodable(self._failures[schema_id])
        except ValueError as e:  # the payload does not fit its schema
            return Undecodable(f"does not decode with its schema: {e}")
        # default=str: logical types (decimals, dates, timestamps, UUIDs) as their text.
        return json.dumps(
            encode_bytes_as_avro_json(decoded.value), indent=2, ensure_ascii=False, default=str
        )

    async def _subjects_of(self, schema_id: int) -> list[SubjectVersion]:
        """The subjects and versions holding the id; none when the registry will not
        say (the badge then names the id alone)."""
        assert self._registry is not None
        try:
            return await self._registry.subject_versions(schema_id)
        except SchemaRegistryError as e:
            if e.status is None:
                raise
            return []

    def _subject(self, schema_id: int, part: Part) -> SubjectVersion | None:
        """The subject holding the id: the topic's own (``<topic>-key``/``-value``,
        TopicNameStrategy) when it does, else the first."""
        held = self._subjects.get(schema_id, [])
        own = f"{self._topic}-{part}"
        return next((s for s in held if s.subject == own), held[0] if held else None)
