"""What the ``_schemas`` records add up to: subjects and their versions, schemas by id,
compatibility levels and modes, and the next id.

::

    subjects:  subject ─▶ version ─▶ SchemaValue (id, text, type, references, deleted)
    by id:     id ─▶ {(subject, version), …}      (every version holding that schema)
    levels:    None (global) | subject ─▶ compatibility level
    modes:     None (global) | subject ─▶ mode
    max id:    the largest id any record named, so a new schema takes max + 1

:meth:`RegistryState.apply` takes one decoded record, in log order; it is the only way
the state changes (loading replays the partition through it, and the shard applies its
own records once they are committed). A schema's id keeps naming its text as long as
some version, soft-deleted or not, holds it; hard-deleting the last one forgets it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

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
from sluice.schemas.api import Reference

DEFAULT_MODE = "READWRITE"


class RegistryState:
    """The registry's contents, as the records applied so far leave them."""

    def __init__(self) -> None:
        self.subjects: dict[str, dict[int, SchemaValue]] = {}
        self.versions_by_id: dict[int, set[tuple[str, int]]] = {}
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
        if old is not None:
            holders = self.versions_by_id[old.id]
            holders.discard((subject, version))
            if not holders:
                del self.versions_by_id[old.id]
        if value is not None:
            versions[version] = value
            self.versions_by_id.setdefault(value.id, set()).add((subject, version))
            self.max_id = max(self.max_id, value.id)
        if not versions:
            del self.subjects[subject]

    def check_invariants(self) -> None:
        """Assert the indexes agree with the subjects (tests call it after each step)."""
        seen: dict[int, set[tuple[str, int]]] = {}
        for subject, versions in self.subjects.items():
            assert versions, f"subject {subject!r} is kept with no versions"
            for version, value in versions.items():
                assert (value.subject, value.version) == (subject, version)
                assert value.id <= self.max_id
                seen.setdefault(value.id, set()).add((subject, version))
        assert seen == self.versions_by_id, "the id index disagrees with the subjects"
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
        """The id of a schema with the same text, type and references, if one exists."""
        for other in self.all_versions():
            if (other.schema, other.schema_type, other.references) == (
                value.schema,
                value.schema_type,
                value.references,
            ):
                return other.id
        return None

    def referenced_by(
        self, subject: str, version: int, *, deleted: bool = False
    ) -> list[SchemaValue]:
        """The versions whose references name ``subject`` ``version``."""
        target = (subject, version)
        return [
            value
            for value in self.all_versions()
            if (deleted or not value.deleted)
            and any((ref.subject, ref.version) == target for ref in value.references)
        ]

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
