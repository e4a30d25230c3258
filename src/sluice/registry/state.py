"""What the ``_schemas`` records add up to: subjects and their versions, schemas by id,
compatibility levels and modes, and the next id.

::

    subjects:  subject ─▶ version ─▶ SchemaValue (id, text, type, references, deleted)
    by id:     id ─▶ {(subject, version), …}      (every version holding that schema)
    by content: (text, type, references) ─▶ {(subject, version), …}
    referrers: (subject, version) ─▶ {(subject, version), …}   (versions referencing it)
    levels:    None (global) | subject ─▶ compatibility level
    modes:     None (global) | subject ─▶ mode
    max id:    the largest id any record named, so a new schema takes max + 1

:meth:`RegistryState.apply` takes one decoded record, in log order; it is the only way
the state changes (loading replays the partition through it, and the shard applies its
own records once they are committed). A schema's id keeps naming its text as long as
some version, soft-deleted or not, holds it; hard-deleting the last one forgets it.
The indexes are kept as each version is put or dropped, so finding a schema's id or a
version's referrers never scans every version (a registration asks both).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TypeVar

from sluice.common.config import SCHEMA_COMPATIBILITY_LEVELS
from sluice.registry.records import (
    ClearSubjectKey,
    ClearSubjectValue,
    ConfigKey,
    ConfigValue,
    DeleteSubjectKey,
    DeleteSubjectValue,
    IgnoredKey,
    Key,
    ModeKey,
    ModeValue,
    NoopKey,
    SchemaKey,
    SchemaValue,
    Value,
)
from sluice.schemas.api import Reference, SchemaType

DEFAULT_MODE = "READWRITE"

Content = tuple[str, SchemaType, tuple[Reference, ...]]
"""What makes two versions the same schema: text, type and references."""
Place = tuple[str, int]
"""A version: (subject, version)."""
_K = TypeVar("_K")


def _content(value: SchemaValue) -> Content:
    return (value.schema, value.schema_type, value.references)


class RegistryState:
    """The registry's contents, as the records applied so far leave them."""

    def __init__(self) -> None:
        self.subjects: dict[str, dict[int, SchemaValue]] = {}
        self.versions_by_id: dict[int, set[Place]] = {}
        self._by_content: dict[Content, set[Place]] = {}
        self._referrers: dict[Place, set[Place]] = {}
        self.levels: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}
        self.max_id = 0
        self.revision = 0
        """Counts the records applied: a change between two looks shows as a new value."""

    # ================================================================== applying

    def apply(self, key: Key, value: Value | None) -> None:
        """One record, decoded (value None: a tombstone)."""
        self.revision += 1
        match key:
            case SchemaKey(subject, version):
                assert value is None or isinstance(value, SchemaValue)
                self._put_version(subject, version, value)
            case ConfigKey(subject):
                assert value is None or isinstance(value, ConfigValue)
                if value is None or value.compatibility_level is None:
                    self.levels.pop(subject, None)
                else:
                    self.levels[subject] = value.compatibility_level.upper()
            case ModeKey(subject):
                assert value is None or isinstance(value, ModeValue)
                if value is None:
                    self.modes.pop(subject, None)
                else:
                    self.modes[subject] = value.mode.upper()
            case DeleteSubjectKey(subject):
                assert value is None or isinstance(value, DeleteSubjectValue)
                if value is not None:
                    for version, stored in list(self.subjects.get(subject, {}).items()):
                        if version <= value.version and not stored.deleted:
                            self._put_version(subject, version, replace(stored, deleted=True))
            case ClearSubjectKey(subject):
                assert value is None or isinstance(value, ClearSubjectValue)
                if value is not None:
                    for version, stored in list(self.subjects.get(subject, {}).items()):
                        if stored.deleted:
                            self._put_version(subject, version, None)
            case NoopKey() | IgnoredKey():
                pass

    def _put_version(self, subject: str, version: int, value: SchemaValue | None) -> None:
        versions = self.subjects.setdefault(subject, {})
        old = versions.pop(version, None)
        place = (subject, version)
        if old is not None:
            _discard(self.versions_by_id, old.id, place)
            _discard(self._by_content, _content(old), place)
            for reference in old.references:
                _discard(self._referrers, (reference.subject, reference.version), place)
        if value is not None:
            versions[version] = value
            self.versions_by_id.setdefault(value.id, set()).add(place)
            self._by_content.setdefault(_content(value), set()).add(place)
            for reference in value.references:
                self._referrers.setdefault((reference.subject, reference.version), set()).add(place)
            self.max_id = max(self.max_id, value.id)
        if not versions:
            del self.subjects[subject]

    def check_invariants(self) -> None:
        """Assert the indexes agree with the subjects (tests call it after each step)."""
        seen: dict[int, set[Place]] = {}
        contents: dict[Content, set[Place]] = {}
        referrers: dict[Place, set[Place]] = {}
        for subject, versions in self.subjects.items():
            assert versions, f"subject {subject!r} is kept with no versions"
            for version, value in versions.items():
                assert (value.subject, value.version) == (subject, version)
                assert value.id <= self.max_id
                seen.setdefault(value.id, set()).add((subject, version))
                contents.setdefault(_content(value), set()).add((subject, version))
                for ref in value.references:
                    referrers.setdefault((ref.subject, ref.version), set()).add((subject, version))
        assert seen == self.versions_by_id, "the id index disagrees with the subjects"
        assert contents == self._by_content, "the content index disagrees with the subjects"
        assert referrers == self._referrers, "the referrers disagree with the subjects"
        assert all(level in SCHEMA_COMPATIBILITY_LEVELS for level in self.levels.values())

    # ================================================================== reading

    def versions(self, subject: str, *, deleted: bool = False) -> list[SchemaValue]:
        """The subject's versions, oldest first (soft-deleted ones only if ``deleted``)."""
        found = self.subjects.get(subject, {})
        return [found[v] for v in sorted(found) if deleted or not found[v].deleted]

    def version(self, subject: str, version: int) -> SchemaValue | None:
        return self.subjects.get(subject, {}).get(version)

    def schema_by_id(self, schema_id: int) -> SchemaValue | None:
        """A version holding ``schema_id`` (live ones first), or None."""
        holders = self.versions_by_id.get(schema_id)
        if not holders:
            return None
        values = [self.subjects[s][v] for s, v in sorted(holders)]
        return min(values, key=lambda value: value.deleted)

    def holders(self, schema_id: int, *, deleted: bool = False) -> list[SchemaValue]:
        """Every version holding ``schema_id``, by subject then version."""
        values = [self.subjects[s][v] for s, v in sorted(self.versions_by_id.get(schema_id, ()))]
        return [value for value in values if deleted or not value.deleted]

    def all_versions(self) -> Iterator[SchemaValue]:
        for subject in sorted(self.subjects):
            yield from self.versions(subject, deleted=True)

    def find_id(self, value: SchemaValue) -> int | None:
        """The id of a schema with the same text, type and references, if one exists
        (the first such version's, by subject then version)."""
        holders = self._by_content.get(_content(value))
        if not holders:
            return None
        subject, version = min(holders)
        return self.subjects[subject][version].id

    def referenced_by(
        self, subject: str, version: int, *, deleted: bool = False
    ) -> list[SchemaValue]:
        """The versions whose references name ``subject`` ``version``, by subject then
        version."""
        values = [
            self.subjects[s][v] for s, v in sorted(self._referrers.get((subject, version), ()))
        ]
        return [value for value in values if deleted or not value.deleted]

    def level(self, subject: str | None, default: str) -> str:
        """The compatibility level in force for ``subject`` (None: the global one)."""
        if subject is not None and subject in self.levels:
            return self.levels[subject]
        return self.levels.get(None, default)

    def mode(self, subject: str | None) -> str:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        return self.modes.get(None, DEFAULT_MODE)

    def reference_exists(self, reference: Reference) -> bool:
        found = self.version(reference.subject, reference.version)
        return found is not None


def _discard(index: dict[_K, set[Place]], key: _K, place: Place) -> None:
    """Take ``place`` out of ``index[key]``, and the key once nothing is left."""
    places = index[key]
    places.discard(place)
    if not places:
        del index[key]
