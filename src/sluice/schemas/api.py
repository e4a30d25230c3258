"""The interface every schema format implements, and the choice of format by type.

A *format* (Avro, JSON Schema, Protobuf) turns a schema's text, with the texts of the
schemas it references, into a :class:`ParsedSchema`, or refuses it with
:class:`InvalidSchema` saying what is wrong. Compatibility is asked as Avro asks it:
can a reader using one schema read data written with another? The registry's levels
are made of that one question (BACKWARD: the new schema reads the old ones; FORWARD:
the old ones read the new; FULL: both; ``_TRANSITIVE``: against every version, not only
the latest).

Parsing a large schema costs milliseconds (Protobuf's runs a compiler), so callers on an
event loop run it in a worker thread; the objects are immutable once built and may be
shared between threads.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class SchemaType(enum.StrEnum):
    """Confluent's ``schemaType`` names; AVRO when a request names none."""

    AVRO = "AVRO"
    JSON = "JSON"
    PROTOBUF = "PROTOBUF"


class InvalidSchema(ValueError):
    """A schema text that does not parse, or names what its references do not define.
    The message says what is wrong, for the registry's 42201 answer."""


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema's reference to another registered schema, as Confluent's API writes it:
    ``name`` is how the referring schema names it (an Avro full type name, a JSON
    Schema ``$ref`` URL, a Protobuf import path)."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class ResolvedReference:
    """A reference with the text of the schema it names, for parsing."""

    name: str
    text: str


class ParsedSchema(Protocol):
    """A schema that parsed, with what it referenced. Immutable."""

    @property
    def schema_type(self) -> SchemaType: ...

    def canonical(self) -> str:
        """The text the registry stores and answers with, and compares to find a schema
        already registered (Confluent's canonical string: for Avro, Avro's own compact
        JSON; for JSON Schema, compact JSON; for Protobuf, the ``.proto`` text)."""
        ...

    def normalized(self) -> ParsedSchema:
        """The schema put in a normal form (``normalize=true``): two schemas that mean
        the same compare equal once both are normalized."""
        ...

    def record_names(self) -> list[str]:
        """The fully qualified names of the records (Avro records, Protobuf messages,
        a JSON Schema's ``title``) it defines at top level, first one first: what the
        RecordNameStrategy subject names take."""
        ...


class SchemaFormat(Protocol):
    """One of the formats: parsing, compatibility, and values."""

    @property
    def schema_type(self) -> SchemaType: ...

    def parse(self, text: str, references: Sequence[ResolvedReference] = ()) -> ParsedSchema:
        """Parse ``text``. ``references`` holds every schema it references, directly or
        not, dependencies before the schemas that use them. Raises
        :class:`InvalidSchema`."""
        ...

    def compatibility_errors(self, reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
        """Why a reader using ``reader`` cannot read data written with ``writer``; empty
        when it can. Each message names the place in the schema and the rule broken."""
        ...

    def decode(self, schema: ParsedSchema, payload: bytes) -> object:
        """A value written with ``schema``: the bytes after the wire header
        (:mod:`sluice.schemas.wire`), as JSON-like Python data (dicts, lists, str, int,
        float, bool, None; bytes for Avro bytes and fixed). Raises ValueError when the
        bytes are not such a value."""
        ...

    def encode(self, schema: ParsedSchema, value: object) -> bytes:
        """``value`` written with ``schema`` (the bytes after the wire header). Raises
        ValueError when the value does not fit the schema."""
        ...


_FORMAT_MODULES = {
    SchemaType.AVRO: "sluice.schemas.avro",
    SchemaType.JSON: "sluice.schemas.json_schema",
    SchemaType.PROTOBUF: "sluice.schemas.protobuf",
}


def format_for(schema_type: SchemaType) -> SchemaFormat:
    """The format of ``schema_type``. Each format's module (and its library) is imported
    on first use, so a process that never sees Protobuf never loads its compiler."""
    module = importlib.import_module(_FORMAT_MODULES[schema_type])
    found: SchemaFormat = module.FORMAT
    return found
