"""The registry's parsing work, done outside the shard: a pure function of plain data.

Parsing a schema may take milliseconds (Protobuf's runs a compiler), so the shard never
parses inside an operation. It hands the runtime a :class:`~sluice.coordinator.api.Task`
whose ``work`` is a :class:`CheckWork`; the broker runs :func:`run` in a worker thread
and the shard continues with the :class:`CheckResult`. :func:`run` never raises for a
schema's fault: what is wrong comes back in the result.

One run answers everything a registration, a lookup, a compatibility check or a
``format=serialized`` read needs of the candidate:

- its canonical text (normalized when asked), or why it is invalid;
- which of the subject's versions (``existing``) are the same schema (canonical texts
  equal, each normalized too when asked), for lookups and for registering a schema
  again;
- why it is incompatible with ``against`` under ``level``: BACKWARD asks whether the
  candidate reads data written with each of them, FORWARD whether each reads the
  candidate's data, FULL both; the shard picks ``against`` (the latest version, or all
  of them for ``_TRANSITIVE`` levels, or the one version asked);
- for Protobuf, the serialized descriptor when asked.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from sluice.schemas.api import (
    InvalidSchema,
    ParsedSchema,
    ResolvedReference,
    SchemaType,
    format_for,
)


@dataclass(frozen=True, slots=True)
class SchemaText:
    """A schema to parse: its text, type, and every schema it references (resolved,
    dependencies first)."""

    schema_type: SchemaType
    text: str
    references: tuple[ResolvedReference, ...] = ()


@dataclass(frozen=True, slots=True)
class Prior:
    """A registered version the candidate is compared with."""

    version: int
    schema: SchemaText


@dataclass(frozen=True, slots=True)
class CheckWork:
    candidate: SchemaText
    normalize: bool = False
    existing: tuple[Prior, ...] = ()
    """Versions to find the candidate among (by canonical text)."""
    level: str = "NONE"
    against: tuple[Prior, ...] = ()
    """Versions to check compatibility with, oldest first."""
    serialized: bool = False
    """Also give the candidate's serialized form (Protobuf's ``format=serialized``)."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    invalid: str | None = None
    """Why the candidate does not parse (the 42201 message); None when it does."""
    canonical: str = ""
    same_as: tuple[int, ...] = ()
    """The versions of ``existing`` that are the same schema."""
    incompatibilities: tuple[str, ...] = ()
    serialized: str | None = None


PARSED_SCHEMAS_CACHED_BYTES_MAX = 32 * 1024 * 1024
"""Parsed schemas kept between runs, bounded by the bytes of their texts (each with the
texts it references; a parsed schema's own size grows with them). A registration
compares the candidate with every version of its subject, so without them each one
would parse the whole subject again (with Protobuf's compiler, tens of milliseconds per
version). Only registered versions are kept, never a candidate a client sends (which
would let lookups and compatibility checks push out what is registered); a version
larger than the whole bound is parsed each time. Parsed schemas are immutable and
shared between threads (:mod:`sluice.schemas.api`)."""


def _parse(schema: SchemaText, normalize: bool) -> ParsedSchema:
    parsed = format_for(schema.schema_type).parse(schema.text, schema.references)
    return parsed.normalized() if normalize else parsed


def text_bytes(schema: SchemaText) -> int:
    """What a schema counts against :data:`PARSED_SCHEMAS_CACHED_BYTES_MAX`."""
    return len(schema.text.encode()) + sum(
        len(reference.name.encode()) + len(reference.text.encode())
        for reference in schema.references
    )


class ParsedCache:
    """Parsed registered versions, least recently used dropped first once their texts
    add up to more than ``bytes_max``. Thread-safe (runs go on worker threads); two
    threads parsing the same version at once both parse it, and one result is kept."""

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self._entries: OrderedDict[tuple[SchemaText, bool], tuple[ParsedSchema, int]] = (
            OrderedDict()
        )
        self.bytes = 0
        self._lock = threading.Lock()

    def parse(self, schema: SchemaText, normalize: bool) -> ParsedSchema:
        key = (schema, normalize)
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found[0]
        parsed = _parse(schema, normalize)
        size = text_bytes(schema)
        if size > self.bytes_max:
            return parsed
        with self._lock:
            if key not in self._entries:
                self._entries[key] = (parsed, size)
                self.bytes += size
            while self.bytes > self.bytes_max:
                _key, (_parsed, dropped) = self._entries.popitem(last=False)
                self.bytes -= dropped
        return parsed

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0


PARSED = ParsedCache(PARSED_SCHEMAS_CACHED_BYTES_MAX)
"""The registered versions parsed, shared by every run in the process."""


def _incompatibilities(
    candidate: ParsedSchema, level: str, against: tuple[Prior, ...], normalize: bool
) -> list[str]:
    if level == "NONE" or not against:
        return []
    schema_format = format_for(candidate.schema_type)
    backward = level.startswith(("BACKWARD", "FULL"))
    forward = level.startswith(("FORWARD", "FULL"))
    messages: list[str] = []
    for prior in against:
        try:
            old = PARSED.parse(prior.schema, normalize)
        except Exception as e:  # reported as an incompatibility
            messages.append(f"version {prior.version} does not parse: {e}")
            continue
        if old.schema_type is not candidate.schema_type:
            messages.append(
                f"Incompatible because of different schema type "
                f"(version {prior.version} is {old.schema_type.value})"
            )
            continue
        if backward:
            for message in schema_format.compatibility_errors(candidate, old):
                messages.append(f"{message} (the new schema reads version {prior.version})")
        if forward:
            for message in schema_format.compatibility_errors(old, candidate):
                messages.append(f"{message} (version {prior.version} reads the new schema)")
    return messages


def run(work: object) -> CheckResult:
    """Do ``work`` (a :class:`CheckWork`: the runtime's task runner hands on the work of
    any task the shard returned). Pure: the same work gives the same result, on any
    thread.

    A format library failing on input it should have refused (any exception, not only
    :class:`InvalidSchema`) is the client's bad schema, answered as invalid: no schema
    a client sends may take the broker's task group down."""
    assert isinstance(work, CheckWork), f"the registry's tasks are CheckWork, not {work!r}"
    try:
        return _run(work)
    except Exception as e:  # see the docstring
        detail = str(e) if isinstance(e, InvalidSchema) else f"{type(e).__name__}: {e}"
        return CheckResult(invalid=f"Invalid schema: {detail}")


def _run(work: CheckWork) -> CheckResult:
    candidate = _parse(work.candidate, work.normalize)
    canonical = candidate.canonical()
    same_as = []
    for prior in work.existing:
        if prior.schema.schema_type is not work.candidate.schema_type:
            continue
        if prior.schema.text == canonical and prior.schema.references == (
            work.candidate.references
        ):
            same_as.append(prior.version)
            continue
        try:
            old = PARSED.parse(prior.schema, work.normalize)
        except Exception:  # a stored version that no longer parses matches nothing
            continue
        if old.canonical() == canonical and prior.schema.references == work.candidate.references:
            same_as.append(prior.version)
    serialized = None
    if work.serialized:
        to_serialized = getattr(candidate, "serialized", None)
        serialized = to_serialized() if callable(to_serialized) else None
    return CheckResult(
        canonical=canonical,
        same_as=tuple(same_as),
        incompatibilities=tuple(
            _incompatibilities(candidate, work.level, work.against, work.normalize)
        ),
        serialized=serialized,
    )
