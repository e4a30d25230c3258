"""The answers the registry gives from its state alone, and the JSON documents it writes
for a schema (Confluent's layouts: ``schemaType`` left out for AVRO, ``references``
left out when there are none)."""

from __future__ import annotations

from typing import TypeVar

from sluice.registry import errors
from sluice.registry.api import JSON, Answer
from sluice.registry.config import RegistryConfig
from sluice.registry.operations import (
    LATEST,
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
    Read,
)
from sluice.registry.records import SchemaValue
from sluice.registry.routes import ALL_SUBJECTS_PREFIX
from sluice.registry.state import RegistryState
from sluice.schemas.api import InvalidSchema, Reference, ResolvedReference, SchemaType
from sluice.schemas.references import FetchedSchema, resolve

_T = TypeVar("_T")

SCHEMA_TYPES = ["JSON", "PROTOBUF", "AVRO"]
"""``GET /schemas/types``, in Confluent's order."""
DEFAULT_CONTEXT = "."


def _type_and_references(value: SchemaValue, document: dict[str, JSON]) -> None:
    if value.schema_type is not SchemaType.AVRO:
        document["schemaType"] = value.schema_type.value
    if value.references:
        document["references"] = [
            {"name": ref.name, "subject": ref.subject, "version": ref.version}
            for ref in value.references
        ]


def version_document(value: SchemaValue, text: str | None = None) -> dict[str, JSON]:
    """A subject's version as Confluent answers it."""
    document: dict[str, JSON] = {
        "subject": value.subject,
        "version": value.version,
        "id": value.id,
    }
    _type_and_references(value, document)
    document["schema"] = value.schema if text is None else text
    return document


def schema_document(value: SchemaValue, text: str | None = None) -> dict[str, JSON]:
    """A schema by id as Confluent answers it."""
    document: dict[str, JSON] = {}
    _type_and_references(value, document)
    document["schema"] = value.schema if text is None else text
    return document


def page(items: list[_T], offset: int, limit: int) -> list[_T]:
    """``items`` past the first ``offset``, at most ``limit`` of them (0 or less: all),
    as Confluent's listings page them."""
    rest = items[max(offset, 0) :]
    return rest if limit <= 0 else rest[:limit]


def _listed(values: list[SchemaValue], *, deleted: bool, deleted_only: bool) -> list[SchemaValue]:
    """Live versions; with ``deleted`` also the soft-deleted; with ``deleted_only`` only
    those (it wins, as in Confluent's registry)."""
    if deleted_only:
        return [value for value in values if value.deleted]
    return values if deleted else [value for value in values if not value.deleted]


def _matches_prefix(subject: str, prefix: str) -> bool:
    return prefix in ("", ALL_SUBJECTS_PREFIX) or subject.startswith(prefix)


def existing_versions(state: RegistryState, subject: str, *, deleted: bool) -> list[SchemaValue]:
    """The subject's versions, or 40401 when it has none (none live unless ``deleted``)."""
    versions = state.versions(subject, deleted=deleted)
    if not versions:
        raise errors.subject_not_found(subject)
    return versions


def find_version(state: RegistryState, subject: str, version: int, *, deleted: bool) -> SchemaValue:
    """One version (:data:`LATEST`: the newest), or 40401/40402."""
    versions = existing_versions(state, subject, deleted=deleted)
    if version == LATEST:
        return versions[-1]
    for value in versions:
        if value.version == version:
            return value
    raise errors.version_not_found(version)


def _fetch(state: RegistryState, reference: Reference) -> FetchedSchema | None:
    if reference.version == LATEST:
        live = state.versions(reference.subject)
        target = live[-1] if live else None
    else:
        target = state.version(reference.subject, reference.version)
    return None if target is None else FetchedSchema(target.schema, target.references)


def resolve_references(
    state: RegistryState, references: tuple[Reference, ...]
) -> tuple[ResolvedReference, ...]:
    """Every schema ``references`` names, directly or not, dependencies first (what a
    format's ``parse`` takes): each version once (:mod:`sluice.schemas.references`). A
    reference to a version that does not exist, or too many of them, is 42201."""
    try:
        return resolve(references, lambda reference: _fetch(state, reference))
    except InvalidSchema as e:
        raise errors.invalid_schema(str(e)) from None


def answer(state: RegistryState, config: RegistryConfig, read: Read) -> Answer:
    """The answer to ``read``. Raises RegistryError."""
    match read:
        case GetRoot():
            return Answer(200, {})
        case GetSchemaTypes():
            return Answer(200, list(SCHEMA_TYPES))
        case GetContexts():
            return Answer(200, [DEFAULT_CONTEXT])
        case GetSchemaById(schema_id, part, _subject, _serialized, deleted, offset, limit):
            value = state.schema_by_id(schema_id)
            if value is None:
                raise errors.schema_not_found(schema_id)
            if part == "schema":
                return Answer(200, value.schema)
            if part == "subjects":
                holders = state.holders(schema_id, deleted=deleted)
                holding: list[JSON] = sorted({holder.subject for holder in holders})
                return Answer(200, page(holding, offset, limit))
            if part == "versions":
                holders = page(state.holders(schema_id, deleted=deleted), offset, limit)
                return Answer(200, [{"subject": h.subject, "version": h.version} for h in holders])
            return Answer(200, schema_document(value))
        case ListSchemas(prefix, deleted, latest_only, offset, limit):
            found: list[JSON] = []
            for subject in sorted(state.subjects):
                if not _matches_prefix(subject, prefix):
                    continue
                versions = state.versions(subject, deleted=deleted)
                if latest_only:
                    versions = versions[-1:]
                found.extend(version_document(value) for value in versions)
            return Answer(200, page(found, offset, limit))
        case ListSubjects(prefix, deleted, deleted_only, offset, limit):
            listed_subjects: list[JSON] = [
                subject
                for subject in sorted(state.subjects)
                if _matches_prefix(subject, prefix)
                and _listed(
                    state.versions(subject, deleted=True),
                    deleted=deleted,
                    deleted_only=deleted_only,
                )
            ]
            return Answer(200, page(listed_subjects, offset, limit))
        case ListVersions(subject, deleted, deleted_only, offset, limit):
            listed = _listed(
                state.versions(subject, deleted=True), deleted=deleted, deleted_only=deleted_only
            )
            if not listed:
                raise errors.subject_not_found(subject)
            numbers: list[JSON] = [value.version for value in listed]
            return Answer(200, page(numbers, offset, limit))
        case GetVersion(subject, version, deleted, schema_only, _serialized):
            value = find_version(state, subject, version, deleted=deleted)
            return Answer(200, value.schema if schema_only else version_document(value))
        case GetReferencedBy(subject, version):
            value = find_version(state, subject, version, deleted=False)
            referrers = state.referenced_by(subject, value.version)
            return Answer(200, sorted({referrer.id for referrer in referrers}))
        case GetConfig(subject, default_to_global):
            if subject is not None and subject not in state.levels and not default_to_global:
                raise errors.subject_compatibility_not_configured(subject)
            return Answer(
                200, {"compatibilityLevel": state.level(subject, config.compatibility_level)}
            )
        case GetMode(subject, default_to_global):
            if subject is not None and subject not in state.modes and not default_to_global:
                raise errors.subject_mode_not_configured(subject)
            return Answer(200, {"mode": state.mode(subject)})
