"""From a call of Confluent's API (method, path, query, body) to the operation it asks,
with every part checked: an unknown path is 404, a known path with another method 405,
a bad version 42202, a body of the wrong shape 400, a bad level 42203, a bad mode
42204 (:mod:`~sluice.registry.errors`).

Query flags are read as Jersey reads a Java ``boolean``: ``true`` in any case is true,
anything else false (confluent-kafka's Python client sends ``True``/``False``). Listings
take Confluent's ``offset`` and ``limit`` (a limit of 0 or less: no limit; one that is
not an integer is 404, as Jersey answers it).

The broker also asks which subject a call is about (:func:`subject_of`, None for the
global config and mode and for calls about ids) and whether it changes anything
(:func:`is_write`), to authorize it before it is forwarded or answered.
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice.common.config import SCHEMA_COMPATIBILITY_LEVELS
from sluice.registry import errors
from sluice.registry.api import JSON, Call
from sluice.registry.operations import (
    LATEST,
    NO_LIMIT,
    CheckCompatibility,
    DeleteConfig,
    DeleteMode,
    DeleteSubject,
    DeleteVersion,
    GetConfig,
    GetContexts,
    GetMode,
    GetReferencedBy,
    GetRoot,
    GetSchemaById,
    GetSchemaTypes,
    GetVersion,
    ListSchemas,
    ListSubjects,
    ListVersions,
    LookUp,
    Operation,
    Register,
    SchemaRequest,
    SetConfig,
    SetMode,
)
from sluice.registry.records import MODES
from sluice.schemas.api import Reference, SchemaType

VERSION_MAX = 2**31 - 1
ID_MAX = 2**31 - 1
"""Ids and versions are Java ints in Confluent's registry and its clients."""
RESERVED_SUBJECTS = frozenset({"__GLOBAL", "__EMPTY"})
"""Names Confluent keeps for the global and the empty context's settings."""
ALL_SUBJECTS_PREFIX = ":*:"
"""Confluent's ``subjectPrefix`` default: every subject of every context."""


def _flag(query: Mapping[str, str], name: str) -> bool:
    return query.get(name, "").strip().lower() == "true"


def _int_query(query: Mapping[str, str], name: str, default: int) -> int:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise errors.unknown_path() from None  # as Jersey answers a bad int parameter


def parse_version(raw: str) -> int:
    """A path's version: ``latest``, ``-1`` (:data:`LATEST`) or 1 … 2^31-1 (42202)."""
    if raw.lower() == "latest":
        return LATEST
    try:
        version = int(raw)
    except ValueError:
        raise errors.invalid_version(raw) from None
    if version == LATEST:
        return LATEST
    if not 1 <= version <= VERSION_MAX:
        raise errors.invalid_version(raw)
    return version


def _optional_int(body: Mapping[str, JSON], name: str) -> int | None:
    found = body.get(name)
    if found is None:
        return None
    if not isinstance(found, int) or isinstance(found, bool) or found > ID_MAX:
        raise errors.wrong_shape(f"'{name}' must be an integer up to {ID_MAX}")
    return found


def _is_utf8(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (JSON may carry lone surrogates)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def writable_subject(subject: str) -> str:
    """A subject a write may name (42208 otherwise): not empty, no control characters,
    not one of Confluent's reserved names, UTF-8."""
    if (
        not subject
        or subject in RESERVED_SUBJECTS
        or any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in subject)
        or not _is_utf8(subject)
    ):
        raise errors.invalid_subject(subject.encode(errors="backslashreplace").decode())
    return subject


def parse_schema_request(body: JSON) -> SchemaRequest:
    """The schema in a register, lookup or compatibility body (none: an empty schema)."""
    if body is None:
        raise errors.invalid_schema("Empty schema")
    if not isinstance(body, dict):
        raise errors.wrong_shape("The request body must be a JSON object with a schema")
    text = body.get("schema")
    if text is None or text == "":
        raise errors.invalid_schema("Empty schema")
    if not isinstance(text, str):
        raise errors.wrong_shape("'schema' must be a string")
    if not _is_utf8(text):
        raise errors.invalid_schema("Invalid schema: the text is not valid Unicode")
    type_name = body.get("schemaType")
    if type_name is None:
        schema_type = SchemaType.AVRO
    elif isinstance(type_name, str) and type_name.upper() in SchemaType.__members__:
        schema_type = SchemaType(type_name.upper())
    else:
        raise errors.invalid_schema(f"Invalid schema type {type_name}")
    raw_references = body.get("references")
    if raw_references is None:
        raw_references = []
    if not isinstance(raw_references, list):
        raise errors.wrong_shape("'references' must be a list")
    references = []
    for item in raw_references:
        if not isinstance(item, dict):
            raise errors.wrong_shape("Each reference must be an object")
        name, subject, version = item.get("name"), item.get("subject"), item.get("version")
        if not isinstance(name, str) or not name:
            raise errors.invalid_schema("Invalid schema: a reference has no name")
        if not isinstance(subject, str) or not subject:
            raise errors.invalid_schema(f"Invalid schema: reference {name} has no subject")
        if not isinstance(version, int) or isinstance(version, bool):
            raise errors.invalid_schema(f"Invalid schema: reference {name} has no version")
        if not (_is_utf8(name) and _is_utf8(subject)):
            raise errors.invalid_schema("Invalid schema: a reference is not valid Unicode")
        references.append(Reference(name, subject, version))
    schema_id = _optional_int(body, "id")
    version = _optional_int(body, "version")
    return SchemaRequest(
        schema_type,
        text,
        tuple(references),
        None if schema_id is None or schema_id < 0 else schema_id,
        None if version is None or version <= 0 else version,
    )


def _level(body: JSON) -> str:
    """A config update's level: ``compatibility``, or ``compatibilityLevel`` as some
    clients send it."""
    found = None
    if isinstance(body, dict):
        found = body.get("compatibility", body.get("compatibilityLevel"))
    if not isinstance(found, str) or found.upper() not in SCHEMA_COMPATIBILITY_LEVELS:
        raise errors.invalid_compatibility_level()
    return found.upper()


def _mode(body: JSON) -> str:
    found = body.get("mode") if isinstance(body, dict) else None
    if not isinstance(found, str):
        raise errors.invalid_mode()
    if found.upper() == "FORWARD":
        raise errors.invalid_mode("Sluice does not have FORWARD mode")
    if found.upper() not in MODES:
        raise errors.invalid_mode()
    return found.upper()


def _methods(call: Call, **by_method: Operation | None) -> Operation:
    """The operation for the call's method among those the path has (405 otherwise)."""
    if call.method not in by_method:
        raise errors.method_not_allowed()
    operation = by_method[call.method]
    assert operation is not None
    return operation


def route(call: Call) -> Operation:
    """The operation ``call`` asks. Raises RegistryError (404, 405, 42201, 42202 …)."""
    segments, query, method = call.segments, call.query, call.method
    deleted = _flag(query, "deleted")
    match segments:
        case ():
            return _methods(call, GET=GetRoot())
        case ("schemas",):
            if method != "GET":
                raise errors.method_not_allowed()
            return ListSchemas(
                query.get("subjectPrefix", ""),
                deleted,
                _flag(query, "latestOnly"),
                _int_query(query, "offset", 0),
                _int_query(query, "limit", NO_LIMIT),
            )
        case ("schemas", "types"):
            return _methods(call, GET=GetSchemaTypes())
        case ("schemas", "ids", raw_id, *rest) if len(rest) <= 1:
            part = rest[0] if rest else "full"
            if part not in ("full", "schema", "subjects", "versions") or (rest and part == "full"):
                raise errors.unknown_path()
            if method != "GET":
                raise errors.method_not_allowed()
            try:
                schema_id = int(raw_id)
            except ValueError:
                raise errors.unknown_path() from None
            return GetSchemaById(
                schema_id,
                part,
                query.get("subject") or None,
                query.get("format", "").lower() == "serialized",
                deleted,
                _int_query(query, "offset", 0),
                _int_query(query, "limit", NO_LIMIT),
            )
        case ("subjects",):
            if method != "GET":
                raise errors.method_not_allowed()
            return ListSubjects(
                query.get("subjectPrefix", ""),
                deleted,
                _flag(query, "deletedOnly"),
                _int_query(query, "offset", 0),
                _int_query(query, "limit", NO_LIMIT),
            )
        case ("subjects", subject):
            if method == "POST":
                return LookUp(
                    subject, parse_schema_request(call.body), _flag(query, "normalize"), deleted
                )
            if method == "DELETE":
                return DeleteSubject(subject, _flag(query, "permanent"))
            raise errors.method_not_allowed()
        case ("subjects", subject, "versions"):
            if method == "GET":
                return ListVersions(
                    subject,
                    deleted,
                    _flag(query, "deletedOnly"),
                    _int_query(query, "offset", 0),
                    _int_query(query, "limit", NO_LIMIT),
                )
            if method == "POST":
                return Register(
                    writable_subject(subject),
                    parse_schema_request(call.body),
                    _flag(query, "normalize"),
                )
            raise errors.method_not_allowed()
        case ("subjects", subject, "versions", raw_version):
            if method == "GET":
                return GetVersion(
                    subject,
                    parse_version(raw_version),
                    deleted,
                    serialized=query.get("format", "").lower() == "serialized",
                )
            if method == "DELETE":
                return DeleteVersion(subject, parse_version(raw_version), _flag(query, "permanent"))
            raise errors.method_not_allowed()
        case ("subjects", subject, "versions", raw_version, "schema"):
            if method != "GET":
                raise errors.method_not_allowed()
            return GetVersion(subject, parse_version(raw_version), deleted, schema_only=True)
        case ("subjects", subject, "versions", raw_version, "referencedby"):
            if method != "GET":
                raise errors.method_not_allowed()
            return GetReferencedBy(subject, parse_version(raw_version))
        case ("compatibility", "subjects", subject, "versions", *rest) if len(rest) <= 1:
            if method != "POST":
                raise errors.method_not_allowed()
            return CheckCompatibility(
                subject,
                parse_version(rest[0]) if rest else None,
                parse_schema_request(call.body),
                _flag(query, "normalize"),
                _flag(query, "verbose"),
            )
        case ("config",) | ("config", _):
            scope = segments[1] if len(segments) == 2 else None
            if method == "GET":
                return GetConfig(scope, _flag(query, "defaultToGlobal"))
            if method == "PUT":
                return SetConfig(
                    None if scope is None else writable_subject(scope), _level(call.body)
                )
            if method == "DELETE":
                return DeleteConfig(scope)
            raise errors.method_not_allowed()
        case ("mode",) | ("mode", _):
            scope = segments[1] if len(segments) == 2 else None
            if method == "GET":
                return GetMode(scope, _flag(query, "defaultToGlobal"))
            if method == "PUT":
                mode = _mode(call.body)
                return SetMode(
                    None if scope is None else writable_subject(scope), mode, _flag(query, "force")
                )
            if method == "DELETE":
                return DeleteMode(scope)
            raise errors.method_not_allowed()
        case ("contexts",):
            return _methods(call, GET=GetContexts())
    raise errors.unknown_path()


def subject_of(call: Call) -> str | None:
    """The subject ``call`` reads or changes; None for global config and mode, ids,
    listings and anything that is not a valid call."""
    segments = call.segments
    if len(segments) >= 2 and segments[0] in ("subjects", "config", "mode"):
        return segments[1]
    if len(segments) >= 3 and segments[:2] == ("compatibility", "subjects"):
        return segments[2]
    return None


def is_write(call: Call) -> bool:
    """Whether ``call`` would change the registry (register, delete, set a config or
    mode), judged by method and path alone, so a write with a bad body is still
    authorized as a write. Lookups and compatibility checks are reads."""
    segments = call.segments
    if call.method == "DELETE":
        return True
    if call.method == "PUT":
        return segments[:1] in (("config",), ("mode",))
    if call.method == "POST":
        return len(segments) == 3 and segments[0] == "subjects" and segments[2] == "versions"
    return False
