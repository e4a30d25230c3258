"""Schema validation at Produce: a topic with ``confluent.value.schema.validation=true``
(or ``confluent.key.schema.validation``) accepts a batch only if every record's value
(key) carries the id of a schema registered, not deleted, under the subject its
strategy names (:mod:`sluice.schemas.validation`). A batch with one bad record is
refused whole with INVALID_RECORD, each bad record named in ``record_errors``.

The registry is asked through the broker's registry calls (answered here when this
broker hosts ``_schemas``-0, else forwarded to the broker that does)::

    batch ── schema_ids_of_records (one walk, 5 bytes of each key/value)
          ── each distinct id ──▶ cached (subject, id) still fresh? ── yes ──▶ accepted
                                   │ no
                                   ▼
               GET /schemas/ids/{id}/versions   (one call per id at a time: concurrent
                                                 batches with the same id share it)
               RecordNameStrategy & co.: GET /schemas/ids/{id} (+ its references),
               parsed in a check thread for its record name (cached per id: an id's
               schema never changes)

A batch's ids the cache does not know are looked up together, at most
``SCHEMA_VALIDATION_LOOKUPS_PER_BATCH_MAX`` of them (the records with more are refused,
saying so), all within ``SCHEMA_VALIDATION_LOOKUP_TIMEOUT_MS``: a batch holds its
partition's append turn while it waits. Positive answers are cached per (subject, id),
at most ``SCHEMA_VALIDATION_CACHE_ENTRIES_MAX`` of them, each for
``SCHEMA_VALIDATION_CACHE_TTL_MS``: a schema registered a moment ago is accepted at
once, and a version deleted (soft or hard) is refused at the latest that long after. An
id the registry does not know is remembered as such for
``SCHEMA_VALIDATION_UNKNOWN_TTL_MS``, so a producer repeating a bad id does not ask the
registry with every batch.
A topic without validation pays one attribute test per batch. A batch whose ids the
cache knows is decided on the event loop without an ``await``
(:meth:`SchemaValidation.refusals_now`) and appended at once like any small batch; only
a miss goes through :meth:`SchemaValidation.refusals`, while the batch keeps its place
in its partition's append queue.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Protocol, TypeVar

from sluice.broker.produce_checks import ProduceChecks
from sluice.common import errors
from sluice.common.clock import Clock
from sluice.common.config import TopicConfig
from sluice.common.limits import (
    DECOMPRESSED_BYTES_CHECKED_ON_EVENT_LOOP_MAX,
    RECORD_ERRORS_PER_PARTITION_MAX,
    RECORDS_CHECKED_ON_EVENT_LOOP_MAX,
)
from sluice.registry.api import Answer, Call
from sluice.schemas.api import (
    InvalidSchema,
    Reference,
    ResolvedReference,
    SchemaType,
    format_for,
)
from sluice.schemas.references import FetchedSchema, resolve_async
from sluice.schemas.validation import (
    FieldId,
    FieldIds,
    needs_record_name,
    schema_ids_of_records,
    subject_name,
)

log = logging.getLogger(__name__)

SCHEMA_VALIDATION_CACHE_ENTRIES_MAX: Final = 10_000
"""(subject, schema id) pairs known to be registered, kept per broker; past this the
least recently used is dropped (and asked again when next seen)."""
SCHEMA_VALIDATION_CACHE_TTL_MS: Final = 30_000
"""How long a (subject, schema id) pair found registered is trusted without asking the
registry again: a deleted version is still accepted for at most this long."""
SCHEMA_VALIDATION_UNKNOWN_TTL_MS: Final = 1_000
"""How long an id the registry answered unknown is refused without asking again (ids
are only ever handed out once committed, so an unknown id rarely becomes known)."""
SCHEMA_VALIDATION_LOOKUPS_PER_BATCH_MAX: Final = 32
"""Schema ids of one batch the registry is asked about (those the cache does not know);
the records carrying more are refused, saying why."""
SCHEMA_VALIDATION_LOOKUP_TIMEOUT_MS: Final = 10_000
"""How long a batch waits for the registry's answers about its ids, all together, before
it is refused with REQUEST_TIMED_OUT (retriable): below the producers' default
request.timeout.ms (30 s), and the batch holds its partition's append turn meanwhile."""
SCHEMA_RECORD_NAMES_CACHE_ENTRIES_MAX: Final = 10_000
"""Schema ids whose record names (RecordNameStrategy, TopicRecordNameStrategy) are kept."""

_NOT_FOUND_STATUS: Final = 404
T = TypeVar("T")


class RegistryAnswers(Protocol):
    """What the validation asks of the registry: Confluent's REST API as calls, answered
    on this broker or forwarded to the one hosting the registry."""

    async def answer(self, call: Call, principal: str | None) -> Answer: ...


class SchemaLookup(Protocol):
    """What the validation needs to know about a schema id (None: no such id)."""

    async def versions_of(self, schema_id: int) -> list[tuple[str, int]] | None:
        """The (subject, version) pairs the id is registered under, deleted ones left
        out."""
        ...

    async def record_names_of(self, schema_id: int) -> list[str] | None:
        """The full names of the records the id's schema defines, first one first."""
        ...


class RegistryUnavailable(Exception):
    """The registry did not answer (no leader, still loading, unreachable)."""


def _record_names(schema_type: str, text: str, references: Sequence[ResolvedReference]) -> Any:
    """Parse a schema for its record names (in a check thread: parsing may run protoc)."""
    try:
        return format_for(SchemaType(schema_type)).parse(text, references).record_names()
    except (InvalidSchema, ValueError) as e:
        return f"does not parse: {e}"


class RegistrySchemaLookup:
    """:class:`SchemaLookup` over the registry's REST API."""

    def __init__(self, registry: RegistryAnswers, checks: ProduceChecks) -> None:
        self._registry = registry
        self._checks = checks

    async def _get(self, *segments: str) -> Any:
        answer = await self._registry.answer(Call("GET", segments), None)
        if answer.status == _NOT_FOUND_STATUS:
            return None
        if answer.status != 200:
            body = answer.body
            message = body.get("message") if isinstance(body, dict) else body
            raise RegistryUnavailable(f"the Schema Registry answered {answer.status}: {message}")
        return answer.body

    async def versions_of(self, schema_id: int) -> list[tuple[str, int]] | None:
        body = await self._get("schemas", "ids", str(schema_id), "versions")
        if body is None:
            return None
        try:
            return [(str(entry["subject"]), int(entry["version"])) for entry in body]
        except (TypeError, KeyError, ValueError):
            raise RegistryUnavailable(
                f"the Schema Registry answered {body!r} for the versions of id {schema_id}"
            ) from None

    async def record_names_of(self, schema_id: int) -> list[str] | None:
        body = await self._get("schemas", "ids", str(schema_id))
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            return None
        try:
            references = await self._resolved_references(body.get("references") or [])
        except InvalidSchema as e:  # a reference missing, or too many: as if unparsable
            log.warning("schema id %d does not parse: %s", schema_id, e)
            return []
        found = await self._checks.run(
            _record_names, str(body.get("schemaType", "AVRO")), body["schema"], references
        )
        if isinstance(found, str):
            log.warning("schema id %d %s", schema_id, found)
            return []
        names: list[str] = found
        return names

    async def _resolved_references(self, references: list[Any]) -> list[ResolvedReference]:
        """Every schema ``references`` bring in, dependencies first (as ``parse`` wants
        them), each once (:mod:`sluice.schemas.references`). Raises InvalidSchema."""

        async def fetch(reference: Reference) -> FetchedSchema | None:
            body = await self._get(
                "subjects", reference.subject, "versions", str(reference.version)
            )
            if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
                return None
            return FetchedSchema(body["schema"], _references_of(body.get("references") or []))

        return list(await resolve_async(_references_of(references), fetch))


def _references_of(items: list[Any]) -> list[Reference]:
    try:
        return [Reference(str(i["name"]), str(i["subject"]), int(i["version"])) for i in items]
    except (TypeError, KeyError, ValueError):
        raise RegistryUnavailable(f"a schema has references {items!r}") from None


class _Coalesced:
    """At most one lookup per key at a time: later askers wait for the one running. A
    waiter cancelled does not cancel it for the others. It owns its lookups: their
    errors reach every waiter, and :meth:`close` ends those still running."""

    def __init__(self) -> None:
        self._running: dict[object, asyncio.Task[Any]] = {}

    async def run(self, key: object, lookup: Callable[[], Awaitable[T]]) -> T:
        task = self._running.get(key)
        if task is None:
            task = asyncio.create_task(_awaited(lookup))
            self._running[key] = task
            task.add_done_callback(lambda done: self._finished(key, done))
        result: T = await asyncio.shield(task)
        return result

    async def close(self) -> None:
        """Cancel the lookups still running and wait for them to end."""
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    def _finished(self, key: object, task: asyncio.Task[Any]) -> None:
        if self._running.get(key) is task:
            del self._running[key]
        if not task.cancelled():
            task.exception()  # retrieved: every waiter may have gone


async def _awaited(lookup: Callable[[], Awaitable[T]]) -> T:
    return await lookup()


class SchemaValidation:
    """The broker's schema validation: which records of a batch its topic refuses."""

    def __init__(
        self,
        clock: Clock,
        lookup: SchemaLookup,
        *,
        entries_max: int = SCHEMA_VALIDATION_CACHE_ENTRIES_MAX,
        ttl_ms: int = SCHEMA_VALIDATION_CACHE_TTL_MS,
        lookup_timeout_ms: int = SCHEMA_VALIDATION_LOOKUP_TIMEOUT_MS,
    ) -> None:
        self._lookup = lookup
        """Where schema ids are looked up: the registry, wherever it is hosted (every
        broker reaches it)."""
        self._clock = clock
        self._entries_max = entries_max
        self._ttl_ms = ttl_ms
        self._lookup_timeout_ms = lookup_timeout_ms
        self._registered: OrderedDict[tuple[str, int], int] = OrderedDict()
        """(subject, id) found registered → when that stops being trusted (ms)."""
        self._unknown: OrderedDict[int, int] = OrderedDict()
        """Ids the registry does not know → when to ask again (ms)."""
        self._record_names: OrderedDict[int, list[str]] = OrderedDict()
        self._versions_lookups = _Coalesced()
        self._names_lookups = _Coalesced()

    def ids_now(
        self, config: TopicConfig, section: tuple[bytes, int], count: int
    ) -> FieldIds | None:
        """The batch's schema ids, read here when the batch is small enough for the
        event loop; None when it is not (:meth:`refusals` reads them in a thread)."""
        data, start = section
        if count > RECORDS_CHECKED_ON_EVENT_LOOP_MAX or (
            len(data) - start > DECOMPRESSED_BYTES_CHECKED_ON_EVENT_LOOP_MAX
        ):
            return None
        return schema_ids_of_records(
            data,
            count,
            start,
            keys=config.confluent_key_schema_validation,
            values=config.confluent_value_schema_validation,
        )

    def refusals_now(
        self, topic: str, config: TopicConfig, ids: FieldIds
    ) -> list[tuple[int, str]] | None:
        """The records refused, decided from the cache alone (every id seen recently,
        the usual case: no ``await``); None when the registry must be asked."""
        key_verdicts: dict[int, str | None] = {}
        value_verdicts: dict[int, str | None] = {}
        sides = (
            (ids.keys, key_verdicts, config.confluent_key_subject_name_strategy, True),
            (ids.values, value_verdicts, config.confluent_value_subject_name_strategy, False),
        )
        for side_ids, verdicts, strategy, is_key in sides:
            for schema_id in _schema_ids(side_ids):
                verdict = self._cached_verdict(topic, schema_id, strategy, is_key)
                if isinstance(verdict, _Miss):
                    return None
                verdicts[schema_id] = verdict
        return _refused(ids, key_verdicts, value_verdicts)

    async def refusals(
        self,
        topic: str,
        config: TopicConfig,
        section: tuple[bytes, int],
        count: int,
        checks: ProduceChecks,
        ids: FieldIds | None = None,
    ) -> list[tuple[int, str]]:
        """The records of a batch (``section``: its records' bytes and where they start;
        ``count`` of them; ``ids``: its schema ids if already read) that ``topic``
        refuses, as (index in the batch, reason), asking the registry what the cache
        does not know. Raises RequestTimedOut when the registry does not answer."""
        if ids is None:
            ids = self.ids_now(config, section, count)
        if ids is None:
            data, start = section
            keys = config.confluent_key_schema_validation
            values = config.confluent_value_schema_validation
            ids = await checks.run(_ids_of, data, count, start, keys, values)
        key_verdicts: dict[int, str | None] = {}
        value_verdicts: dict[int, str | None] = {}
        sides = (
            (ids.keys, key_verdicts, config.confluent_key_subject_name_strategy, True),
            (ids.values, value_verdicts, config.confluent_value_subject_name_strategy, False),
        )
        misses: list[tuple[dict[int, str | None], int, str, bool]] = []
        for side_ids, verdicts, strategy, is_key in sides:
            for schema_id in _schema_ids(side_ids):
                cached = self._cached_verdict(topic, schema_id, strategy, is_key)
                if not isinstance(cached, _Miss):
                    verdicts[schema_id] = cached
                elif len(misses) < SCHEMA_VALIDATION_LOOKUPS_PER_BATCH_MAX:
                    misses.append((verdicts, schema_id, strategy, is_key))
                else:
                    verdicts[schema_id] = _too_many(schema_id)
        await self._look_up(topic, misses)
        return _refused(ids, key_verdicts, value_verdicts)

    async def _look_up(
        self, topic: str, misses: list[tuple[dict[int, str | None], int, str, bool]]
    ) -> None:
        """Ask the registry about every miss at once, within the lookup timeout, and put
        each verdict in its dict. Raises RequestTimedOut."""
        if not misses:
            return

        async def decide(verdicts: dict[int, str | None], schema_id: int, *side: Any) -> None:
            verdicts[schema_id] = await self._verdict(topic, schema_id, *side)

        failure = None
        try:
            async with asyncio.timeout(self._lookup_timeout_ms / 1000):
                async with asyncio.TaskGroup() as lookups:
                    for verdicts, schema_id, strategy, is_key in misses:
                        lookups.create_task(decide(verdicts, schema_id, strategy, is_key))
        except* RegistryUnavailable as group:
            failure = str(group.exceptions[0])
        except* TimeoutError:
            failure = (
                f"no answer about {len(misses)} schema id(s) within {self._lookup_timeout_ms} ms"
            )
        if failure is not None:
            raise errors.RequestTimedOut(
                f"the records of {topic} could not be checked against the Schema Registry: "
                f"{failure}"
            )

    def _subject(
        self, topic: str, schema_id: int, strategy: str, is_key: bool
    ) -> str | _Miss | _NoRecord:
        """The subject ``schema_id`` must be registered under; ``_NO_RECORD`` when the
        strategy needs a record name and the schema has none, ``_MISS`` when its record
        names are not cached."""
        record_name = None
        if needs_record_name(strategy):
            names = self._record_names.get(schema_id)
            if names is None:
                return _MISS
            self._record_names.move_to_end(schema_id)
            if not names:
                return _NO_RECORD
            record_name = names[0]
        return subject_name(strategy, topic, is_key=is_key, record_name=record_name)

    def _cached_verdict(
        self, topic: str, schema_id: int, strategy: str, is_key: bool
    ) -> str | _Miss | None:
        """:meth:`_verdict` from the cache, or ``_MISS``."""
        unknown_until_ms = self._unknown.get(schema_id)
        if unknown_until_ms is not None:
            if self._clock.monotonic_ms() < unknown_until_ms:
                return _unknown(schema_id)
            del self._unknown[schema_id]
        subject = self._subject(topic, schema_id, strategy, is_key)
        if isinstance(subject, _Miss):
            return subject
        if isinstance(subject, _NoRecord):
            return _no_record(schema_id)
        key = (subject, schema_id)
        expiry_ms = self._registered.get(key)
        if expiry_ms is None or self._clock.monotonic_ms() >= expiry_ms:
            return _MISS
        self._registered.move_to_end(key)
        return None

    async def _verdict(self, topic: str, schema_id: int, strategy: str, is_key: bool) -> str | None:
        """Why schema ``schema_id`` may not be used for this side of ``topic``; None if
        it may."""
        cached = self._cached_verdict(topic, schema_id, strategy, is_key)
        if not isinstance(cached, _Miss):
            return cached
        if (
            needs_record_name(strategy)
            and schema_id not in self._record_names
            and await self._record_names_of(schema_id) is None
        ):
            return self._remember_unknown(schema_id)
        subject = self._subject(topic, schema_id, strategy, is_key)
        if isinstance(subject, _NoRecord):
            return _no_record(schema_id)
        assert isinstance(subject, str), "record names were just looked up"
        lookup = self._lookup
        versions = await self._versions_lookups.run(
            schema_id, lambda: lookup.versions_of(schema_id)
        )
        if versions is None:
            return self._remember_unknown(schema_id)
        expiry_ms = self._clock.monotonic_ms() + self._ttl_ms
        for registered_subject, _ in versions:
            self._remember((registered_subject, schema_id), expiry_ms)
        if any(registered_subject == subject for registered_subject, _ in versions):
            return None
        return f"has schema id {schema_id}, which is not registered under subject {subject!r}"

    async def _record_names_of(self, schema_id: int) -> list[str] | None:
        names = self._record_names.get(schema_id)
        if names is not None:
            self._record_names.move_to_end(schema_id)
            return names
        lookup = self._lookup
        found = await self._names_lookups.run(schema_id, lambda: lookup.record_names_of(schema_id))
        if found is not None:
            self._record_names[schema_id] = found
            while len(self._record_names) > SCHEMA_RECORD_NAMES_CACHE_ENTRIES_MAX:
                self._record_names.popitem(last=False)
        return found

    def _remember_unknown(self, schema_id: int) -> str:
        self._unknown[schema_id] = self._clock.monotonic_ms() + SCHEMA_VALIDATION_UNKNOWN_TTL_MS
        self._unknown.move_to_end(schema_id)
        while len(self._unknown) > self._entries_max:
            self._unknown.popitem(last=False)
        return _unknown(schema_id)

    async def close(self) -> None:
        """End the registry lookups still running (the broker is stopping)."""
        await self._versions_lookups.close()
        await self._names_lookups.close()

    def _remember(self, key: tuple[str, int], expiry_ms: int) -> None:
        self._registered[key] = expiry_ms
        self._registered.move_to_end(key)
        while len(self._registered) > self._entries_max:
            self._registered.popitem(last=False)


class _Miss:
    """What a cache-only decision returns when the registry must be asked."""


class _NoRecord:
    """The subject of a record strategy for a schema that names no record."""


_MISS: Final = _Miss()
_NO_RECORD: Final = _NoRecord()


def _unknown(schema_id: int) -> str:
    return f"has schema id {schema_id}, which is unknown to the Schema Registry"


def _too_many(schema_id: int) -> str:
    return (
        f"has schema id {schema_id}, not checked: the batch brings more than "
        f"{SCHEMA_VALIDATION_LOOKUPS_PER_BATCH_MAX} schema ids this broker has not seen "
        "lately (send such records in smaller batches)"
    )


def _no_record(schema_id: int) -> str:
    return f"has schema id {schema_id}, whose schema names no record"


def _schema_ids(side_ids: list[FieldId]) -> list[int]:
    """The distinct schema ids among a side's fields (set-built: C speed per record)."""
    return [field for field in set(side_ids) if type(field) is int]


def _refused(
    ids: FieldIds, key_verdicts: dict[int, str | None], value_verdicts: dict[int, str | None]
) -> list[tuple[int, str]]:
    """(index, reason) of each refused record, in order; a record refused for its key
    is not also named for its value. Walks the records only when one is refused."""
    refused: dict[int, str] = {}
    sides = (("key", ids.keys, key_verdicts), ("value", ids.values, value_verdicts))
    for side, side_ids, verdicts in sides:
        if not side_ids:
            continue
        bad_ids = any(verdict is not None for verdict in verdicts.values())
        if not bad_ids and not any(type(field) is str for field in set(side_ids)):
            continue
        for index, field in enumerate(side_ids):
            if field is None or index in refused:
                continue
            reason = field if isinstance(field, str) else verdicts[field]
            if reason is not None:
                refused[index] = f"{side} {reason}"
    return sorted(refused.items())


def _ids_of(data: bytes, count: int, start: int, keys: bool, values: bool) -> FieldIds:
    """:func:`schema_ids_of_records` in a check thread."""
    return schema_ids_of_records(data, count, start, keys=keys, values=values)


def refusal_message(topic: str, refused: list[tuple[int, str]]) -> str:
    """The partition's error message for refused records: how many, and the first."""
    index, reason = refused[0]
    more = len(refused) - 1
    return (
        f"{len(refused)} record(s) rejected by the schema validation of {topic}: record "
        f"{index} of the batch: {reason}" + (f" (and {more} more)" if more else "")
    )


def record_errors(refused: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """``record_errors`` of the response: the first ``RECORD_ERRORS_PER_PARTITION_MAX``."""
    return refused[:RECORD_ERRORS_PER_PARTITION_MAX]
