"""The records of the ``_schemas`` topic, in Confluent's layouts, so a topic written by
Confluent's Schema Registry loads here and one written here loads there.

Keys and values are compact JSON objects in UTF-8 (Jackson's output: no spaces, fields
in Confluent's order, nulls and empty lists left out). Keys are compared as parsed
JSON, never as bytes (older Confluent versions wrote ``"subject":null``, newer ones
leave it out)::

    key                                                      value (None: tombstone)
    {"keytype":"SCHEMA","subject":S,"version":V,"magic":1}   {"subject":S,"version":V,"id":I,
                                                              "schemaType":T (not for AVRO),
                                                              "references":[{"name","subject",
                                                              "version"}] (if any),
                                                              "schema":TEXT,"deleted":B}
                                                             tombstone: V hard-deleted
    {"keytype":"CONFIG","subject":S,"magic":0}               {"subject":S,"compatibilityLevel":L}
      (no subject: the global level)                         tombstone: the level removed
    {"keytype":"MODE","subject":S,"magic":0}                 {"subject":S,"mode":M}
    {"keytype":"DELETE_SUBJECT","subject":S,"magic":0}       {"subject":S,"version":V}
                                                             (versions 1..V soft-deleted)
    {"keytype":"CLEAR_SUBJECT","subject":S,"magic":0}        {"subject":S}
                                                             (soft-deleted versions dropped)
    {"keytype":"NOOP","magic":0}                             (Confluent's leader marker)

Confluent also writes ``CONTEXT`` and ``ASSOC`` records (schema contexts and topic
associations, which Sluice does not have); they decode as :class:`IgnoredKey` and
change nothing. Fields Confluent may add to a value that Sluice does not use (a
schema's ``md5``, ``metadata``, ``ruleSet``; a config's ``normalize``, ``alias``, …)
are kept in ``extra`` and written back when the record is rewritten (a soft delete),
so nothing of Confluent's is lost. Anything else (not JSON, not an object, a field of
the wrong type, an unknown ``keytype``) is not a record of ours: ``CorruptMessage``.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from sluice.common.config import SCHEMA_COMPATIBILITY_LEVELS
from sluice.common.errors import CorruptMessage
from sluice.schemas.api import Reference, SchemaType

JSON = Any


class KeyType(enum.StrEnum):
    SCHEMA = "SCHEMA"
    CONFIG = "CONFIG"
    MODE = "MODE"
    DELETE_SUBJECT = "DELETE_SUBJECT"
    CLEAR_SUBJECT = "CLEAR_SUBJECT"
    NOOP = "NOOP"


IGNORED_KEY_TYPES = frozenset({"CONTEXT", "ASSOC"})
"""Confluent's key types for features Sluice does not have; loaded as no-ops."""

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
"""The modes Sluice has (Confluent's ``FORWARD`` is not one: a record setting it is
skipped as not ours)."""

SCHEMA_KEY_MAGIC = 1
OTHER_KEY_MAGIC = 0


@dataclass(frozen=True, slots=True)
class SchemaKey:
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class ConfigKey:
    subject: str | None
    """None: the global compatibility level."""


@dataclass(frozen=True, slots=True)
class ModeKey:
    subject: str | None
    """None: the global mode."""


@dataclass(frozen=True, slots=True)
class DeleteSubjectKey:
    subject: str


@dataclass(frozen=True, slots=True)
class ClearSubjectKey:
    subject: str


@dataclass(frozen=True, slots=True)
class NoopKey:
    pass


@dataclass(frozen=True, slots=True)
class IgnoredKey:
    keytype: str


Key = SchemaKey | ConfigKey | ModeKey | DeleteSubjectKey | ClearSubjectKey | NoopKey | IgnoredKey


@dataclass(frozen=True, slots=True)
class SchemaValue:
    subject: str
    version: int
    id: int
    schema: str
    schema_type: SchemaType = SchemaType.AVRO
    references: tuple[Reference, ...] = ()
    deleted: bool = False
    extra: dict[str, JSON] = field(default_factory=dict, compare=True)
    """Confluent's fields Sluice does not use (``md5``, ``metadata``, ``ruleSet``…)."""


@dataclass(frozen=True, slots=True)
class ConfigValue:
    subject: str | None
    compatibility_level: str | None
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModeValue:
    subject: str | None
    mode: str


@dataclass(frozen=True, slots=True)
class DeleteSubjectValue:
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class ClearSubjectValue:
    subject: str


Value = SchemaValue | ConfigValue | ModeValue | DeleteSubjectValue | ClearSubjectValue


def _dumps(document: dict[str, JSON]) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


# ================================================================== encoding


def encode_key(key: Key) -> bytes:
    """The key's bytes, as Confluent writes them."""
    match key:
        case SchemaKey(subject, version):
            return _dumps(
                {
                    "keytype": "SCHEMA",
                    "subject": subject,
                    "version": version,
                    "magic": SCHEMA_KEY_MAGIC,
                }
            )
        case ConfigKey(subject) | ModeKey(subject):
            keytype = "CONFIG" if isinstance(key, ConfigKey) else "MODE"
            document: dict[str, JSON] = {"keytype": keytype}
            if subject is not None:
                document["subject"] = subject
            document["magic"] = OTHER_KEY_MAGIC
            return _dumps(document)
        case DeleteSubjectKey(subject) | ClearSubjectKey(subject):
            keytype = "DELETE_SUBJECT" if isinstance(key, DeleteSubjectKey) else "CLEAR_SUBJECT"
            return _dumps({"keytype": keytype, "subject": subject, "magic": OTHER_KEY_MAGIC})
        case NoopKey():
            return _dumps({"keytype": "NOOP", "magic": OTHER_KEY_MAGIC})
        case IgnoredKey():
            raise AssertionError("Sluice never writes a record of a key type it ignores")


_SCHEMA_VALUE_EXTRA_BEFORE_TYPE = ("md5",)
_SCHEMA_VALUE_EXTRA_BEFORE_SCHEMA = ("metadata", "ruleSet")


def encode_value(value: Value) -> bytes:
    """The value's bytes, as Confluent writes them (fields in Jackson's order)."""
    match value:
        case SchemaValue():
            document: dict[str, JSON] = {
                "subject": value.subject,
                "version": value.version,
                "id": value.id,
            }
            for name in _SCHEMA_VALUE_EXTRA_BEFORE_TYPE:
                if name in value.extra:
                    document[name] = value.extra[name]
            if value.schema_type is not SchemaType.AVRO:
                document["schemaType"] = value.schema_type.value
            if value.references:
                document["references"] = [
                    {"name": ref.name, "subject": ref.subject, "version": ref.version}
                    for ref in value.references
                ]
            for name in _SCHEMA_VALUE_EXTRA_BEFORE_SCHEMA:
                if name in value.extra:
                    document[name] = value.extra[name]
            document["schema"] = value.schema
            document["deleted"] = value.deleted
            placed = {*_SCHEMA_VALUE_EXTRA_BEFORE_TYPE, *_SCHEMA_VALUE_EXTRA_BEFORE_SCHEMA}
            for name, extra in value.extra.items():
                if name not in placed:
                    document[name] = extra
            return _dumps(document)
        case ConfigValue():
            document = {} if value.subject is None else {"subject": value.subject}
            document.update(value.extra)
            if value.compatibility_level is not None:
                document["compatibilityLevel"] = value.compatibility_level
            return _dumps(document)
        case ModeValue():
            document = {} if value.subject is None else {"subject": value.subject}
            document["mode"] = value.mode
            return _dumps(document)
        case DeleteSubjectValue():
            return _dumps({"subject": value.subject, "version": value.version})
        case ClearSubjectValue():
            return _dumps({"subject": value.subject})


# ================================================================== decoding


def _object(raw: bytes, what: str) -> dict[str, JSON]:
    try:
        document = json.loads(raw)
        # JSON's escapes can spell lone surrogates, which could never be written back.
        json.dumps(document, ensure_ascii=False).encode()
    except (UnicodeError, ValueError) as e:
        raise CorruptMessage(f"_schemas {what} is not JSON: {e}") from None
    if not isinstance(document, dict):
        raise CorruptMessage(f"_schemas {what} is not a JSON object")
    return document


def _int(document: dict[str, JSON], name: str, what: str) -> int:
    found = document.get(name)
    if not isinstance(found, int) or isinstance(found, bool):
        raise CorruptMessage(f"_schemas {what}: {name!r} is not an integer")
    return found


def _str(document: dict[str, JSON], name: str, what: str) -> str:
    found = document.get(name)
    if not isinstance(found, str):
        raise CorruptMessage(f"_schemas {what}: {name!r} is not a string")
    return found


def _optional_subject(document: dict[str, JSON], what: str) -> str | None:
    """A config or mode key's subject: absent, null or empty (Confluent's default
    context) mean the global one."""
    found = document.get("subject")
    if found is None or found == "":
        return None
    if not isinstance(found, str):
        raise CorruptMessage(f"_schemas {what}: 'subject' is not a string")
    return found


def decode_key(raw: bytes) -> Key:
    """The key in ``raw``. Raises CorruptMessage for bytes that are not one of ours."""
    document = _object(raw, "key")
    keytype = document.get("keytype")
    if not isinstance(keytype, str):
        raise CorruptMessage("_schemas key has no keytype")
    if keytype in IGNORED_KEY_TYPES:
        return IgnoredKey(keytype)
    try:
        kind = KeyType(keytype)
    except ValueError:
        raise CorruptMessage(f"_schemas key type {keytype!r} is not ours") from None
    magic = document.get("magic", OTHER_KEY_MAGIC)
    if not isinstance(magic, int) or isinstance(magic, bool) or magic not in (0, 1):
        raise CorruptMessage(f"_schemas {keytype} key: magic {magic!r} is not 0 or 1")
    what = f"{keytype} key"
    match kind:
        case KeyType.SCHEMA:
            version = _int(document, "version", what)
            if version < 1:
                raise CorruptMessage(f"_schemas {what}: version {version} is below 1")
            return SchemaKey(_str(document, "subject", what), version)
        case KeyType.CONFIG:
            return ConfigKey(_optional_subject(document, what))
        case KeyType.MODE:
            return ModeKey(_optional_subject(document, what))
        case KeyType.DELETE_SUBJECT:
            return DeleteSubjectKey(_str(document, "subject", what))
        case KeyType.CLEAR_SUBJECT:
            return ClearSubjectKey(_str(document, "subject", what))
        case KeyType.NOOP:
            return NoopKey()


def _references(document: dict[str, JSON], what: str) -> tuple[Reference, ...]:
    found = document.get("references")
    if found is None:
        return ()
    if not isinstance(found, list):
        raise CorruptMessage(f"_schemas {what}: 'references' is not a list")
    references = []
    for item in found:
        if not isinstance(item, dict):
            raise CorruptMessage(f"_schemas {what}: a reference is not an object")
        references.append(
            Reference(
                _str(item, "name", what), _str(item, "subject", what), _int(item, "version", what)
            )
        )
    return tuple(references)


_SCHEMA_VALUE_FIELDS = frozenset(
    {"subject", "version", "id", "schemaType", "references", "schema", "deleted"}
)


def _schema_value(key: SchemaKey, document: dict[str, JSON]) -> SchemaValue:
    what = "SCHEMA value"
    subject = _str(document, "subject", what)
    version = _int(document, "version", what)
    if subject != key.subject or version != key.version:
        raise CorruptMessage(
            f"_schemas {what} names subject {subject!r} version {version} under the key of "
            f"subject {key.subject!r} version {key.version}"
        )
    schema_id = _int(document, "id", what)
    if schema_id < 0:
        raise CorruptMessage(f"_schemas {what}: id {schema_id} is negative")
    type_name = document.get("schemaType")
    if type_name is None:
        schema_type = SchemaType.AVRO
    elif isinstance(type_name, str) and type_name in SchemaType.__members__:
        schema_type = SchemaType(type_name)
    else:
        raise CorruptMessage(f"_schemas {what}: schemaType {type_name!r} is not one Sluice knows")
    deleted = document.get("deleted", False)
    if not isinstance(deleted, bool):
        raise CorruptMessage(f"_schemas {what}: 'deleted' is not a boolean")
    extra = {k: v for k, v in document.items() if k not in _SCHEMA_VALUE_FIELDS}
    return SchemaValue(
        subject,
        version,
        schema_id,
        _str(document, "schema", what),
        schema_type,
        _references(document, what),
        deleted,
        extra,
    )


def decode_value(key: Key, raw: bytes | None) -> Value | None:
    """The value of ``key`` in ``raw`` (None: a tombstone, or a record that carries
    nothing Sluice uses). Raises CorruptMessage for bytes that are not one of ours."""
    if raw is None:
        return None
    match key:
        case SchemaKey():
            return _schema_value(key, _object(raw, "SCHEMA value"))
        case ConfigKey():
            document = _object(raw, "CONFIG value")
            level = document.get("compatibilityLevel")
            if level is not None and (
                not isinstance(level, str) or level.upper() not in SCHEMA_COMPATIBILITY_LEVELS
            ):
                raise CorruptMessage(f"_schemas CONFIG value: compatibilityLevel {level!r}")
            extra = {
                k: v for k, v in document.items() if k not in ("subject", "compatibilityLevel")
            }
            return ConfigValue(key.subject, level, extra)
        case ModeKey():
            document = _object(raw, "MODE value")
            mode = _str(document, "mode", "MODE value")
            if mode.upper() not in MODES:
                raise CorruptMessage(f"_schemas MODE value: mode {mode!r} is not one Sluice has")
            return ModeValue(key.subject, mode)
        case DeleteSubjectKey():
            document = _object(raw, "DELETE_SUBJECT value")
            return DeleteSubjectValue(
                key.subject, _int(document, "version", "DELETE_SUBJECT value")
            )
        case ClearSubjectKey():
            _object(raw, "CLEAR_SUBJECT value")
            return ClearSubjectValue(key.subject)
        case NoopKey() | IgnoredKey():
            return None
