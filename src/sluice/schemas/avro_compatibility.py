"""Can a reader with one Avro schema read what a writer wrote with another? Avro's rules.

These are the rules of Avro's ``SchemaCompatibility`` (the Java class Confluent's registry
asks; the apache ``avro`` package's ``avro.compatibility`` is its Python port), walked
over schemas parsed by the apache ``avro`` package, keeping each incompatibility with
its own place: the Python port merges the places and messages of all incompatibilities
into unordered sets, which cannot say which rule broke where. Its verdict is the same as
this one's (tests/unit/test_schemas_avro.py checks both on the same pairs).

The rules: same types match (arrays by items, maps by values, records field by field,
enums and fixed by name, or the reader's aliases naming the writer's, and by symbols or
size); a reader field absent from the writer (by name or the reader field's aliases)
needs a default; promotions int → long → float → double and string ↔ bytes; a writer
union needs each branch readable, a reader union one branch that reads the writer. A
recursive pair under check counts as compatible.

Each incompatibility has Java's type name, a JSON Pointer to the place in the reader
schema (``/fields/1/type``), and is written as Confluent's verbose messages write it
(its ``Difference``), with "reader" and "writer" where Confluent says "new" or "old".
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import avro.schema

from sluice.schemas.avro_text import Name

_ROOT_TOKEN: Final = ""


class IncompatibilityType(enum.StrEnum):
    """Java's ``SchemaCompatibility.SchemaIncompatibilityType``."""

    NAME_MISMATCH = "NAME_MISMATCH"
    FIXED_SIZE_MISMATCH = "FIXED_SIZE_MISMATCH"
    MISSING_ENUM_SYMBOLS = "MISSING_ENUM_SYMBOLS"
    READER_FIELD_MISSING_DEFAULT_VALUE = "READER_FIELD_MISSING_DEFAULT_VALUE"
    TYPE_MISMATCH = "TYPE_MISMATCH"
    MISSING_UNION_BRANCH = "MISSING_UNION_BRANCH"


class AmbiguousField(ValueError):
    """A reader field whose name and aliases match more than one writer field."""


@dataclass(frozen=True, slots=True)
class Incompatibility:
    """One rule broken: its type, where (a JSON Pointer into the reader schema), and
    Java's detail (``additionalInfo``)."""

    kind: IncompatibilityType
    location: str
    detail: str

    def message(self) -> str:
        """Confluent's verbose message for it."""
        return (
            f"{{errorType:'{self.kind}', description:'{self._description()}', "
            f"additionalInfo:'{self.detail}'}}"
        )

    def _description(self) -> str:
        path = self.location
        match self.kind:
            case IncompatibilityType.FIXED_SIZE_MISMATCH:
                return (
                    f"The size of FIXED type field at path '{path}' in the reader schema "
                    "does not match with the writer schema"
                )
            case IncompatibilityType.TYPE_MISMATCH:
                return (
                    f"The type (path '{path}') of a field in the reader schema does not "
                    "match with the writer schema"
                )
            case IncompatibilityType.NAME_MISMATCH:
                return f"The name of the schema has changed (path '{path}')"
            case IncompatibilityType.MISSING_ENUM_SYMBOLS:
                return (
                    f"The reader schema is missing enum symbols '{self.detail}' at path "
                    f"'{path}' in the writer schema"
                )
            case IncompatibilityType.MISSING_UNION_BRANCH:
                return (
                    "The reader schema is missing a type inside a union field at path "
                    f"'{path}' in the writer schema"
                )
            case IncompatibilityType.READER_FIELD_MISSING_DEFAULT_VALUE:
                return (
                    f"The field '{self.detail}' at path '{path}' in the reader schema has "
                    "no default value and is missing in the writer schema"
                )


def incompatibilities(
    reader: avro.schema.Schema, writer: avro.schema.Schema
) -> list[Incompatibility]:
    """Why ``reader`` cannot read what ``writer`` wrote; empty when it can. Raises
    :class:`AmbiguousField` where Java throws."""
    return _Checker().check(_ROOT_TOKEN, reader, writer, [])


def _kind(schema: avro.schema.Schema) -> str:
    kind: str = schema.type
    return "record" if kind == "error" else kind


def _java_type(schema: avro.schema.Schema) -> str:
    return _kind(schema).upper()


def _pointer(location: Sequence[str]) -> str:
    """A JSON Pointer of the tokens after the root's."""
    return "/" + "/".join(token.replace("~", "~0").replace("/", "~1") for token in location[1:])


class _Checker:
    """One check, memoizing each (reader, writer) pair met so recursion ends."""

    def __init__(self) -> None:
        # None: the pair's check is in progress (compatible unless proven otherwise)
        self._memo: dict[tuple[int, int], list[Incompatibility] | None] = {}
        self._alive: list[avro.schema.Schema] = []  # keeps the ids in the memo unique

    def check(
        self,
        token: str,
        reader: avro.schema.Schema,
        writer: avro.schema.Schema,
        location: list[str],
    ) -> list[Incompatibility]:
        here = [*location, token]
        pair = (id(reader), id(writer))
        if pair in self._memo:
            return self._memo[pair] or []
        self._alive += (reader, writer)
        self._memo[pair] = None
        found = self._calculate(reader, writer, here)
        self._memo[pair] = found
        return found

    def _calculate(
        self, reader: avro.schema.Schema, writer: avro.schema.Schema, location: list[str]
    ) -> list[Incompatibility]:
        reader_kind, writer_kind = _kind(reader), _kind(writer)
        if reader_kind == writer_kind:
            return self._same_kind(reader, writer, location)
        if isinstance(writer, avro.schema.UnionSchema):
            found: list[Incompatibility] = []
            for index, branch in enumerate(writer.schemas):
                found += self.check(str(index), reader, branch, location)
            return found
        promotions = {
            "long": {"int"},
            "float": {"int", "long"},
            "double": {"int", "long", "float"},
            "bytes": {"string"},
            "string": {"bytes"},
        }
        if writer_kind in promotions.get(reader_kind, ()):
            return []
        if isinstance(reader, avro.schema.UnionSchema):
            for branch in reader.schemas:
                if not self.check(_ROOT_TOKEN, branch, writer, []):
                    return []
            detail = f"reader union lacking writer type: {_java_type(writer)}"
            return [_incompatible(IncompatibilityType.MISSING_UNION_BRANCH, location, detail)]
        return [_type_mismatch(reader, writer, location)]

    def _same_kind(
        self, reader: avro.schema.Schema, writer: avro.schema.Schema, location: list[str]
    ) -> list[Incompatibility]:
        if isinstance(reader, avro.schema.ArraySchema):
            assert isinstance(writer, avro.schema.ArraySchema)
            return self.check("items", reader.items, writer.items, location)
        if isinstance(reader, avro.schema.MapSchema):
            assert isinstance(writer, avro.schema.MapSchema)
            return self.check("values", reader.values, writer.values, location)
        if isinstance(reader, avro.schema.FixedSchema):
            assert isinstance(writer, avro.schema.FixedSchema)
            found = _check_names(reader, writer, location)
            if reader.size != writer.size:
                detail = f"expected: {writer.size}, found: {reader.size}"
                found.append(
                    _incompatible(
                        IncompatibilityType.FIXED_SIZE_MISMATCH, [*location, "size"], detail
                    )
                )
            return found
        if isinstance(reader, avro.schema.EnumSchema):
            assert isinstance(writer, avro.schema.EnumSchema)
            return _check_names(reader, writer, location) + _check_symbols(reader, writer, location)
        if isinstance(reader, avro.schema.RecordSchema):
            assert isinstance(writer, avro.schema.RecordSchema)
            return _check_names(reader, writer, location) + self._check_fields(
                reader, writer, location
            )
        if isinstance(reader, avro.schema.UnionSchema):
            assert isinstance(writer, avro.schema.UnionSchema)
            found = []
            for index, branch in enumerate(writer.schemas):
                if self.check(_ROOT_TOKEN, reader, branch, []):
                    detail = f"reader union lacking writer type: {_java_type(branch)}"
                    found.append(
                        _incompatible(
                            IncompatibilityType.MISSING_UNION_BRANCH,
                            [*location, str(index)],
                            detail,
                        )
                    )
            return found
        return []  # the same primitive

    def _check_fields(
        self,
        reader: avro.schema.RecordSchema,
        writer: avro.schema.RecordSchema,
        location: list[str],
    ) -> list[Incompatibility]:
        found: list[Incompatibility] = []
        for index, reader_field in enumerate(reader.fields):
            here = [*location, "fields", str(index)]
            writer_field = _writer_field(writer, reader_field)
            if writer_field is not None:
                found += self.check("type", reader_field.type, writer_field.type, here)
            elif not reader_field.has_default:
                if _kind(reader_field.type) == "enum" and _enum_default(reader_field.type):
                    # Java compares the enum with the writer's record here (a mismatch)
                    found += self.check("type", reader_field.type, writer, here)
                else:
                    found.append(
                        _incompatible(
                            IncompatibilityType.READER_FIELD_MISSING_DEFAULT_VALUE,
                            here,
                            reader_field.name,
                        )
                    )
        return found


def _incompatible(
    kind: IncompatibilityType, location: Sequence[str], detail: str
) -> Incompatibility:
    return Incompatibility(kind, _pointer(location), detail)


def _type_mismatch(
    reader: avro.schema.Schema, writer: avro.schema.Schema, location: list[str]
) -> Incompatibility:
    detail = (
        f"reader type: {_java_type(reader)} not compatible with writer type: {_java_type(writer)}"
    )
    return _incompatible(IncompatibilityType.TYPE_MISMATCH, location, detail)


def _check_names(
    reader: avro.schema.NamedSchema, writer: avro.schema.NamedSchema, location: list[str]
) -> list[Incompatibility]:
    # Java compares the unqualified names, then the reader's aliases with the writer's
    # full name
    if reader.name == writer.name or writer.fullname in _type_aliases(reader):
        return []
    detail = f"expected: {writer.fullname}"
    return [_incompatible(IncompatibilityType.NAME_MISMATCH, [*location, "name"], detail)]


def _type_aliases(schema: avro.schema.NamedSchema) -> set[str]:
    aliases = schema.props.get("aliases")
    if not isinstance(aliases, list):
        return set()
    space = Name.of(schema.fullname, None).space
    return {Name.of(alias, space).full for alias in aliases if isinstance(alias, str)}


def _enum_default(schema: avro.schema.Schema) -> str | None:
    default = schema.props.get("default")
    return default if isinstance(default, str) else None


def _check_symbols(
    reader: avro.schema.EnumSchema, writer: avro.schema.EnumSchema, location: list[str]
) -> list[Incompatibility]:
    missing = sorted(set(writer.symbols) - set(reader.symbols))
    if not missing:
        return []
    default = _enum_default(reader)
    if default is not None and default in reader.symbols:
        return []
    detail = "[" + ", ".join(missing) + "]"
    return [_incompatible(IncompatibilityType.MISSING_ENUM_SYMBOLS, [*location, "symbols"], detail)]


def _writer_field(
    writer: avro.schema.RecordSchema, reader_field: avro.schema.Field
) -> avro.schema.Field | None:
    """The writer's field the reader field reads: by name, else by the reader field's
    aliases."""
    by_name = {field.name: field for field in writer.fields}
    aliases = reader_field.props.get("aliases")
    names = [reader_field.name, *(aliases if isinstance(aliases, list) else [])]
    matches: list[avro.schema.Field] = []
    for name in names:
        field = by_name.get(name)
        if field is not None and all(field is not other for other in matches):
            matches.append(field)
    if len(matches) > 1:
        raise AmbiguousField(
            f"Reader field {reader_field.name} matches multiple fields in writer: "
            + ", ".join(field.name for field in matches)
        )
    return matches[0] if matches else None
