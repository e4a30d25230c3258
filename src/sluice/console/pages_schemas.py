"""The Schema Registry's pages: its subjects, one subject's versions, and the difference
between two versions of a subject. Read-only; everything comes from the registry's REST
API through :class:`~sluice.client.schema_registry.SchemaRegistryClient` (the
signed-in user's, behind a secured broker), so it works against any
Confluent-compatible registry.

::

    /schemas                          subjects: latest version, type, compatibility
                                      level, versions (?deleted=true: soft-deleted too)
    /schemas/subjects/<subject>       each version: id, type, references, its schema
                                      pretty-printed
    /schemas/diff/<subject>?from=V&to=W
                                      a unified diff of the two versions' pretty-printed
                                      texts, and the newer checked against the older
                                      under the subject's compatibility level

A registry that cannot be reached (or none configured) is an error page saying so
(:func:`registry_of` and the app's error pages), never a 500.
"""

from __future__ import annotations

import asyncio
import difflib
import json
from dataclasses import dataclass
from typing import Final

from aiohttp import web

from sluice.client.schema_registry import (
    Compatibility,
    RegisteredSchema,
    SchemaRegistryClient,
    SchemaRegistryError,
)
from sluice.console.keys import CLIENTS_KEY
from sluice.console.rendering import int_query, render

SUBJECTS_SHOWN_MAX: Final = 200
"""Subjects listed on one page (each costs three requests to the registry); a prefix
narrows the list."""
VERSIONS_SHOWN_MAX: Final = 100
"""Versions of one subject shown on its page, newest first."""
REGISTRY_REQUESTS_IN_FLIGHT_MAX: Final = 16
"""Subjects (three requests each) or versions one page asks the registry about at once."""
TOPIC_SUBJECTS_WAIT_S: Final = 5.0
"""How long a topic's page waits for the registry to list the topic's subjects; a
registry slower than this leaves the links out rather than the page waiting."""
SUBJECT_NOT_FOUND: Final = 40401
COMPATIBILITY_NOT_CONFIGURED: Final = 40408


class NoRegistry(Exception):
    """The console was started without a Schema Registry to ask."""


@dataclass(frozen=True, slots=True)
class SubjectRow:
    name: str
    latest: RegisteredSchema | None
    versions: int | None
    level: str | None
    soft_deleted: bool
    error: str = ""


def registry_of(request: web.Request) -> SchemaRegistryClient:
    """The registry client acting for this request. Raises :class:`NoRegistry`."""
    registry = request[CLIENTS_KEY].registry
    if registry is None:
        raise NoRegistry
    return registry


async def topic_subjects(registry: SchemaRegistryClient | None, topic: str) -> list[str]:
    """The topic's subjects under TopicNameStrategy (``<topic>-key``, ``<topic>-value``)
    that the registry holds; none when there is no registry or it does not answer."""
    if registry is None:
        return []
    try:
        async with asyncio.timeout(TOPIC_SUBJECTS_WAIT_S):
            held = set(await registry.subjects(prefix=topic))
    except (SchemaRegistryError, TimeoutError):
        return []
    return [subject for subject in (f"{topic}-key", f"{topic}-value") if subject in held]


def pretty_schema(text: str) -> str:
    """A schema's text for reading: Avro and JSON Schema indented, Protobuf as it is."""
    try:
        document = json.loads(text)
    except ValueError:
        return text
    return json.dumps(document, indent=2, ensure_ascii=False)


def unified_diff(older: RegisteredSchema, newer: RegisteredSchema) -> list[str]:
    """The unified diff of two versions' pretty-printed texts (no line endings)."""
    return list(
        difflib.unified_diff(
            pretty_schema(older.schema.text).splitlines(),
            pretty_schema(newer.schema.text).splitlines(),
            fromfile=f"{older.subject} version {older.version} (id {older.schema_id})",
            tofile=f"{newer.subject} version {newer.version} (id {newer.schema_id})",
            lineterm="",
        )
    )


async def subjects_page(request: web.Request) -> web.Response:
    registry = registry_of(request)
    with_deleted = request.query.get("deleted", "") == "true"
    prefix = request.query.get("prefix", "").strip()
    live = await registry.subjects(prefix=prefix or None)
    listed = await registry.subjects(prefix=prefix or None, deleted=True) if with_deleted else live
    names = sorted(listed)
    capped = len(names) > SUBJECTS_SHOWN_MAX
    shown = names[:SUBJECTS_SHOWN_MAX]
    live_names = set(live)
    limit = asyncio.Semaphore(REGISTRY_REQUESTS_IN_FLIGHT_MAX)
    rows = await asyncio.gather(
        *(_subject_row(registry, name, name not in live_names, limit) for name in shown)
    )
    return render(
        request,
        "schemas.html",
        subjects=rows,
        with_deleted=with_deleted,
        prefix=prefix,
        capped=capped,
        shown_max=SUBJECTS_SHOWN_MAX,
        global_level=await _global_level(registry),
    )


async def _global_level(registry: SchemaRegistryClient) -> str | None:
    try:
        return await registry.compatibility_level()
    except SchemaRegistryError as e:
        if e.status is None:
            raise
        return None


async def _subject_row(
    registry: SchemaRegistryClient, name: str, soft_deleted: bool, limit: asyncio.Semaphore
) -> SubjectRow:
    """One subject's row; a refusal for this subject alone (say, by ACLs) is shown in
    the row rather than failing the page."""
    async with limit:
        try:
            versions, latest, level = await asyncio.gather(
                registry.versions(name, deleted=soft_deleted),
                registry.version(name, "latest", deleted=soft_deleted),
                _level(registry, name),
            )
        except SchemaRegistryError as e:
            if e.status is None:
                raise
            return SubjectRow(name, None, None, None, soft_deleted, str(e))
    return SubjectRow(name, latest, len(versions), level, soft_deleted)


async def _level(registry: SchemaRegistryClient, subject: str) -> str | None:
    """The subject's compatibility level (its own, else the global one)."""
    try:
        return await registry.compatibility_level(subject, default_to_global=True)
    except SchemaRegistryError as e:
        if e.error_code != COMPATIBILITY_NOT_CONFIGURED:
            raise
        return None


async def subject_page(request: web.Request) -> web.Response:
    registry = registry_of(request)
    subject = request.match_info["subject"]
    with_deleted = request.query.get("deleted", "") == "true"
    numbers = await _versions(registry, subject, with_deleted)
    newest_first = sorted(numbers, reverse=True)
    shown = newest_first[:VERSIONS_SHOWN_MAX]
    limit = asyncio.Semaphore(REGISTRY_REQUESTS_IN_FLIGHT_MAX)

    async def version(number: int) -> RegisteredSchema:
        async with limit:
            return await registry.version(subject, number, deleted=True)

    versions, level = await asyncio.gather(
        asyncio.gather(*(version(n) for n in shown)), _level(registry, subject)
    )
    return render(
        request,
        "subject.html",
        subject=subject,
        versions=[(v, pretty_schema(v.schema.text)) for v in versions],
        level=level,
        total=len(numbers),
        capped=len(numbers) > len(shown),
        with_deleted=with_deleted,
    )


async def _versions(registry: SchemaRegistryClient, subject: str, deleted: bool) -> list[int]:
    """The subject's versions; a subject that is only soft-deleted shows its deleted ones."""
    try:
        return await registry.versions(subject, deleted=deleted)
    except SchemaRegistryError as e:
        if e.error_code != SUBJECT_NOT_FOUND or deleted:
            raise
    return await registry.versions(subject, deleted=True)


async def diff_page(request: web.Request) -> web.Response:
    registry = registry_of(request)
    subject = request.match_info["subject"]
    numbers = await _versions(registry, subject, deleted=False)
    if not numbers:
        raise web.HTTPNotFound
    newest = max(numbers)
    to_version = int_query(request, "to", newest)
    from_version = int_query(request, "from", _previous(numbers, to_version))
    assert to_version is not None and from_version is not None
    older_number, newer_number = sorted((from_version, to_version))
    older, newer = await asyncio.gather(  # an unknown version is a 404
        registry.version(subject, older_number, deleted=True),
        registry.version(subject, newer_number, deleted=True),
    )
    level, compatibility = await asyncio.gather(
        _level(registry, subject), _compatibility(registry, older, newer)
    )
    return render(
        request,
        "schema_diff.html",
        subject=subject,
        older=older,
        newer=newer,
        versions=sorted(numbers),
        diff=unified_diff(older, newer),
        level=level,
        compatibility=compatibility,
    )


def _previous(numbers: list[int], version: int | None) -> int:
    """The version before ``version`` (itself when it is the first)."""
    earlier = [n for n in numbers if version is not None and n < version]
    return max(earlier) if earlier else min(numbers)


async def _compatibility(
    registry: SchemaRegistryClient, older: RegisteredSchema, newer: RegisteredSchema
) -> Compatibility | str:
    """The newer version checked against the older under the subject's level, or why
    the registry would not check (a soft-deleted version, say)."""
    if older.version == newer.version:
        return Compatibility(True)
    try:
        return await registry.check_compatibility(
            newer.subject, newer.schema, version=older.version
        )
    except SchemaRegistryError as e:
        if e.status is None:
            raise
        return str(e)
