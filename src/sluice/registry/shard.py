"""The registry as a coordinator shard of ``_schemas``-0: every call of Confluent's API
comes in through :meth:`RegistryShard.handle` and leaves as effects.

::

    handle(call) ─route─▶ read ─────────────────────────────────▶ Reply (at once)
                        ├▶ parsed read (lookup, compatibility, format=serialized)
                        │     ─▶ Task(CheckWork) … task_completed ─▶ Reply
                        └▶ write ─▶ FIFO of writes, one at a time:
                              register ─▶ Task(CheckWork) … task_completed ─┐
                              delete, config, mode ─────────────────────────┤
                                  Append(records) … append_completed ───────┤
                                      committed: apply the records, Reply   │
                                      failed: Reply 50001 (50003 not leader),
                                              Reload; the shard is *stale* ─┘─▶ next write

The state changes only when records are applied: while loading (:meth:`replay`) and
once the shard's own records are committed, never before. Writes run one at a time in
arrival order, so each sees every earlier write's records applied and two registrations
never take the same id or version; a write's parse runs off the event loop and, should
the state have changed meanwhile (it cannot while writes are serialized; checked all
the same), runs again. Reads do not wait for writes: they see what is committed.

A failed append leaves the shard not knowing what its partition holds: an append that
timed out waiting for its replicas is in the leader's log and may still be committed
(as Confluent's registry, which reads its topic back, would then see it). Applying
nothing and going on would give its id and version to the next registration, and two
schemas one id. So the shard turns **stale**: it answers the failed write (50001, or
50003 when the partition's leadership moved, so the broker looks for the leader
again), refuses every later write with 50001 (queued ones too), and returns a
:class:`~sluice.coordinator.api.Reload`; the runtime replays the partition, failed
records included, into a new shard, which goes on from what the log holds. Reads are
answered meanwhile, from what was committed.
"""

from __future__ import annotations

import collections
import itertools
from dataclasses import dataclass, replace

from sluice.common.errors import CorruptMessage, ErrorCode
from sluice.coordinator.api import Append, Effect, Reload, Reply, RequestToken, Task
from sluice.registry import errors, reads
from sluice.registry.api import Answer, Call
from sluice.registry.checks import CheckResult, CheckWork, Prior, SchemaText
from sluice.registry.config import PARSES_IN_FLIGHT_MAX, WRITES_WAITING_MAX, RegistryConfig
from sluice.registry.errors import RegistryError, answer_for
from sluice.registry.operations import (
    LATEST,
    CheckCompatibility,
    DeleteConfig,
    DeleteMode,
    DeleteSubject,
    DeleteVersion,
    GetSchemaById,
    GetVersion,
    LookUp,
    Operation,
    Register,
    SchemaRequest,
    SetConfig,
    SetMode,
    Write,
)
from sluice.registry.records import (
    ConfigKey,
    ConfigValue,
    DeleteSubjectKey,
    DeleteSubjectValue,
    Key,
    ModeKey,
    ModeValue,
    SchemaKey,
    SchemaValue,
    Value,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from sluice.registry.routes import route
from sluice.registry.state import RegistryState
from sluice.schemas.api import SchemaType

_WRITES = (Register, DeleteSubject, DeleteVersion, SetConfig, DeleteConfig, SetMode, DeleteMode)
_NOT_LEADER_ERRORS = (ErrorCode.not_leader_or_follower, ErrorCode.not_coordinator)

DecodedRecord = tuple[Key, Value | None]


@dataclass(frozen=True, slots=True)
class _Check:
    """A task out: whom it answers, for which operation, on which state."""

    token: RequestToken
    operation: Operation
    revision: int
    subject_versions: tuple[SchemaValue, ...] = ()
    """The versions the work names (by position in ``existing``)."""


@dataclass(frozen=True, slots=True)
class _Pending:
    """An append out: whom it answers and with what once committed."""

    token: RequestToken
    records: tuple[DecodedRecord, ...]
    answer: Answer


def _context_note(subject: str) -> str:
    return f"Subject {subject} in context {reads.DEFAULT_CONTEXT}"


class RegistryShard:
    """The registry's state and operations over the one ``_schemas`` partition."""

    def __init__(self, config: RegistryConfig | None = None) -> None:
        self.config = config or RegistryConfig()
        self.state = RegistryState()
        self._append_ids = itertools.count(1)
        self._task_ids = itertools.count(1)
        self._checks: dict[int, _Check] = {}
        self._appends: dict[int, _Pending] = {}
        self._writes: collections.deque[tuple[RequestToken, Write]] = collections.deque()
        """Writes waiting for the one in flight."""
        self._writing = False
        self._stale: str | None = None
        """Why the shard waits to be reloaded (an append failed); None: it is not."""

    # ============================================================= the shard API

    def replay(self, key: bytes, value: bytes | None) -> None:
        decoded = decode_key(key)
        self.state.apply(decoded, decode_value(decoded, value))

    def replay_transactional(self, producer_id: int, key: bytes, value: bytes | None) -> None:
        raise CorruptMessage("the registry never writes transactional records to _schemas")

    def replay_marker(self, producer_id: int, committed: bool) -> None:
        pass

    def load_completed(self, now_ms: int) -> None:
        pass

    def next_deadline_ms(self) -> int | None:
        return None

    def poll(self, now_ms: int) -> list[Effect]:
        return []

    def append_completed(
        self, now_ms: int, append_id: int, error: ErrorCode | None
    ) -> list[Effect]:
        pending = self._appends.pop(append_id)
        if error is None:
            for key, value in pending.records:
                self.state.apply(key, value)
            return [Reply(pending.token, pending.answer), *self._write_done()]
        if error in _NOT_LEADER_ERRORS:
            answer = answer_for(errors.forwarding_failed())
        else:
            answer = answer_for(errors.store_error())
        self._stale = f"a write to the registry's topic failed ({error.name})"
        effects: list[Effect] = [Reply(pending.token, answer)]
        self._writing = False
        while self._writes:
            token, _operation = self._writes.popleft()
            effects.append(Reply(token, answer_for(self._stale_error())))
        effects.append(Reload(self._stale))
        return effects

    def _stale_error(self) -> RegistryError:
        return errors.store_error(
            f"Error in the backend data store: {self._stale}; "
            "reading it back before the next write, retry"
        )

    def task_completed(self, now_ms: int, task_id: int, result: object) -> list[Effect]:
        check = self._checks.pop(task_id)
        assert isinstance(result, CheckResult), "the registry's tasks run checks.run"
        operation = check.operation
        if isinstance(operation, Register):
            if check.revision != self.state.revision:
                effects = self._start_write(check.token, operation)
                return effects if self._writing else [*effects, *self._next_write()]
            try:
                effects = self._register_checked(check, operation, result)
            except RegistryError as e:
                return [Reply(check.token, answer_for(e)), *self._write_done()]
            if not any(isinstance(effect, Append) for effect in effects):
                effects.extend(self._write_done())
            return effects
        try:
            return [Reply(check.token, self._parsed_answer(check, result))]
        except RegistryError as e:
            return [Reply(check.token, answer_for(e))]

    # ============================================================= calls

    def handle(self, now_ms: int, token: RequestToken, call: Call) -> list[Effect]:
        """Take one call; its answer is a :class:`Reply` with an :class:`Answer`, now
        or once its parse or its records are done."""
        try:
            operation = route(call)
            if isinstance(operation, _WRITES):
                if self._stale is not None:
                    raise self._stale_error()
                if len(self._writes) >= WRITES_WAITING_MAX:
                    raise errors.operation_timeout(
                        f"More than {WRITES_WAITING_MAX} writes are waiting; retry later"
                    )
                self._writes.append((token, operation))
                return self._next_write()
            if isinstance(operation, (LookUp, CheckCompatibility)):
                return self._start_parsed_read(token, operation)
            if isinstance(operation, (GetSchemaById, GetVersion)) and operation.serialized:
                serialized = self._start_serialized_read(token, operation)
                if serialized is not None:
                    return serialized
            assert not isinstance(operation, (*_WRITES, LookUp, CheckCompatibility))
            return [Reply(token, reads.answer(self.state, self.config, operation))]
        except RegistryError as e:
            return [Reply(token, answer_for(e))]

    # ============================================================= tasks

    def _task(self, check: _Check, work: CheckWork) -> list[Effect]:
        if len(self._checks) >= PARSES_IN_FLIGHT_MAX:
            raise errors.operation_timeout(
                f"More than {PARSES_IN_FLIGHT_MAX} schemas are being parsed; retry later"
            )
        task_id = next(self._task_ids)
        self._checks[task_id] = check
        return [Task(task_id, work)]

    def _candidate(self, schema: SchemaRequest) -> SchemaText:
        if len(schema.text.encode()) > self.config.schema_max_bytes:
            raise errors.schema_too_large(self.config.schema_max_bytes)
        return SchemaText(
            schema.schema_type,
            schema.text,
            reads.resolve_references(self.state, schema.references),
        )

    def _prior(self, value: SchemaValue) -> Prior:
        return Prior(
            value.version,
            SchemaText(
                value.schema_type,
                value.schema,
                reads.resolve_references(self.state, value.references),
            ),
        )

    def _against(self, level: str, versions: list[SchemaValue]) -> tuple[Prior, ...]:
        """The versions a level checks a candidate with: all for ``_TRANSITIVE``, else
        the latest."""
        chosen = versions if level.endswith("_TRANSITIVE") else versions[-1:]
        return tuple(self._prior(value) for value in chosen)

    def _start_parsed_read(
        self, token: RequestToken, operation: LookUp | CheckCompatibility
    ) -> list[Effect]:
        candidate = self._candidate(operation.schema)
        revision = self.state.revision
        if isinstance(operation, LookUp):
            versions = reads.existing_versions(
                self.state, operation.subject, deleted=operation.deleted
            )
            work = CheckWork(
                candidate, operation.normalize, tuple(self._prior(v) for v in versions)
            )
            return self._task(_Check(token, operation, revision, tuple(versions)), work)
        level = self.state.level(operation.subject, self.config.compatibility_level)
        if operation.version is not None:
            value = reads.find_version(
                self.state, operation.subject, operation.version, deleted=False
            )
            against: tuple[Prior, ...] = (self._prior(value),)
            level = level.removesuffix("_TRANSITIVE")
        else:
            against = self._against(level, self.state.versions(operation.subject))
        work = CheckWork(candidate, operation.normalize, level=level, against=against)
        return self._task(_Check(token, operation, revision), work)

    def _start_serialized_read(
        self, token: RequestToken, operation: GetSchemaById | GetVersion
    ) -> list[Effect] | None:
        """A Protobuf schema asked ``format=serialized`` (None: no parse needed)."""
        if isinstance(operation, GetSchemaById):
            value = self.state.schema_by_id(operation.schema_id)
        else:
            value = reads.find_version(
                self.state, operation.subject, operation.version, deleted=operation.deleted
            )
        if value is None or value.schema_type is not SchemaType.PROTOBUF:
            return None
        work = CheckWork(self._prior(value).schema, serialized=True)
        return self._task(_Check(token, operation, self.state.revision, (value,)), work)

    def _parsed_answer(self, check: _Check, result: CheckResult) -> Answer:
        operation = check.operation
        if result.invalid is not None:
            raise errors.invalid_schema(result.invalid)
        match operation:
            case LookUp():
                if not result.same_as:
                    raise errors.schema_not_found()
                newest = max(result.same_as)
                value = next(v for v in check.subject_versions if v.version == newest)
                return Answer(200, reads.version_document(value))
            case CheckCompatibility():
                body: dict[str, object] = {"is_compatible": not result.incompatibilities}
                if operation.verbose:
                    body["messages"] = list(result.incompatibilities)
                return Answer(200, body)
            case GetSchemaById():
                (value,) = check.subject_versions
                return Answer(200, reads.schema_document(value, result.serialized))
            case GetVersion():
                (value,) = check.subject_versions
                return Answer(200, reads.version_document(value, result.serialized))
        raise AssertionError(f"no parsed answer for {operation!r}")

    # ============================================================= writes

    def _next_write(self) -> list[Effect]:
        effects: list[Effect] = []
        while not self._writing and self._writes:
            token, operation = self._writes.popleft()
            self._writing = True
            started = self._start_write(token, operation)
            effects.extend(started)
        return effects

    def _write_done(self) -> list[Effect]:
        self._writing = False
        return self._next_write()

    def _start_write(self, token: RequestToken, operation: Write) -> list[Effect]:
        """Begin ``operation`` (``self._writing`` is set): a task, an append, or a
        reply that ends it at once."""
        try:
            match operation:
                case Register():
                    return self._start_register(token, operation)
                case DeleteSubject():
                    records, answer = self._delete_subject(operation)
                case DeleteVersion():
                    records, answer = self._delete_version(operation)
                case SetConfig(subject, level):
                    records = [(ConfigKey(subject), ConfigValue(subject, level))]
                    answer = Answer(200, {"compatibility": level})
                case DeleteConfig(subject):
                    records, answer = self._delete_config(subject)
                case SetMode():
                    records, answer = self._set_mode(operation)
                case DeleteMode(subject):
                    records, answer = self._delete_mode(subject)
        except RegistryError as e:
            self._writing = False
            return [Reply(token, answer_for(e))]
        return self._append(token, records, answer)

    def _append(
        self, token: RequestToken, records: list[DecodedRecord], answer: Answer
    ) -> list[Effect]:
        append_id = next(self._append_ids)
        self._appends[append_id] = _Pending(token, tuple(records), answer)
        encoded = tuple(
            (encode_key(key), None if value is None else encode_value(value))
            for key, value in records
        )
        return [Append(append_id, encoded)]

    def _refuse_read_only(self, subject: str) -> None:
        if self.state.mode(subject).startswith("READONLY"):
            raise errors.operation_not_permitted(f"{_context_note(subject)} is in read-only mode")

    # ------------------------------------------------------------- register

    def _start_register(self, token: RequestToken, operation: Register) -> list[Effect]:
        subject, schema = operation.subject, operation.schema
        self._refuse_read_only(subject)
        mode = self.state.mode(subject)
        if schema.id is not None and mode != "IMPORT":
            raise errors.operation_not_permitted(f"{_context_note(subject)} is not in import mode")
        if schema.id is None and mode != "READWRITE":
            raise errors.operation_not_permitted(
                f"{_context_note(subject)} is not in read-write mode"
            )
        candidate = self._candidate(schema)
        live = self.state.versions(subject)
        level = (
            "NONE"
            if mode == "IMPORT"
            else self.state.level(subject, self.config.compatibility_level)
        )
        work = CheckWork(
            candidate,
            operation.normalize,
            existing=tuple(self._prior(value) for value in live),
            level=level,
            against=self._against(level, live) if level != "NONE" else (),
        )
        return self._task(_Check(token, operation, self.state.revision, tuple(live)), work)

    def _register_checked(
        self, check: _Check, operation: Register, result: CheckResult
    ) -> list[Effect]:
        subject, schema = operation.subject, operation.schema
        if result.invalid is not None:
            raise errors.invalid_schema(result.invalid)
        importing = self.state.mode(subject) == "IMPORT"
        for value in sorted(check.subject_versions, key=lambda v: -v.version):
            if value.version in result.same_as and schema.id in (None, value.id):
                return [Reply(check.token, Answer(200, self._registered(value)))]
        if result.incompatibilities:
            raise errors.incompatible_schema(subject, list(result.incompatibilities))
        every_version = self.state.versions(subject, deleted=True)
        next_version = every_version[-1].version + 1 if every_version else 1
        version = next_version
        if schema.version is not None:
            if importing:
                version = schema.version
            elif schema.version != next_version:
                raise errors.invalid_schema("Version is not one more than previous version")
        candidate = SchemaValue(
            subject, version, 0, result.canonical, schema.schema_type, schema.references
        )
        known_id = self.state.find_id(candidate)
        if schema.id is not None:
            same = self.state.schema_by_id(schema.id)
            if same is not None and (same.schema, same.schema_type, same.references) != (
                candidate.schema,
                candidate.schema_type,
                candidate.references,
            ):
                raise errors.operation_not_permitted(
                    f"Overwrite new schema with id {schema.id} in context "
                    f"{reads.DEFAULT_CONTEXT} is not permitted."
                )
            schema_id = schema.id
        else:
            schema_id = known_id if known_id is not None else self.state.max_id + 1
        existing = self.state.version(subject, version)
        if existing is not None and existing.id != schema_id:
            raise errors.operation_not_permitted(
                f"Overwrite new schema with version {version} of subject {subject} "
                "is not permitted."
            )
        value = replace(candidate, id=schema_id)
        records: list[DecodedRecord] = []
        for old in every_version:
            if (
                old.deleted
                and old.id == schema_id
                and old.version < version
                and not self.state.referenced_by(subject, old.version, deleted=True)
            ):
                records.append((SchemaKey(subject, old.version), None))
        records.append((SchemaKey(subject, version), value))
        return self._append(check.token, records, Answer(200, self._registered(value)))

    @staticmethod
    def _registered(value: SchemaValue) -> dict[str, object]:
        """What registering answers: the id (all confluent-kafka reads), and, as
        Confluent's newer versions do, the version and the schema."""
        return {"id": value.id, **reads.version_document(value)}

    # ------------------------------------------------------------- deletes

    def _delete_subject(self, operation: DeleteSubject) -> tuple[list[DecodedRecord], Answer]:
        subject = operation.subject
        self._refuse_read_only(subject)
        every_version = self.state.versions(subject, deleted=True)
        if not every_version:
            raise errors.subject_not_found(subject)
        if not operation.permanent:
            live = [value for value in every_version if not value.deleted]
            if not live:
                raise errors.subject_soft_deleted(subject)
            for value in live:
                self._refuse_referenced(subject, value.version, deleted=False)
            record = DeleteSubjectValue(subject, live[-1].version)
            return [(DeleteSubjectKey(subject), record)], Answer(200, [v.version for v in live])
        if any(not value.deleted for value in every_version):
            raise errors.subject_not_soft_deleted(subject)
        for value in every_version:
            self._refuse_referenced(subject, value.version, deleted=True)
        records: list[DecodedRecord] = [
            (SchemaKey(subject, value.version), None) for value in reversed(every_version)
        ]
        records.extend(self._subject_settings_removed(subject))
        return records, Answer(200, [value.version for value in every_version])

    def _refuse_referenced(self, subject: str, version: int, *, deleted: bool) -> None:
        referrers = self.state.referenced_by(subject, version, deleted=deleted)
        if any(referrer.subject != subject for referrer in referrers):
            raise errors.reference_exists(subject, version)

    def _subject_settings_removed(self, subject: str) -> list[DecodedRecord]:
        """Tombstones for a subject's own level and mode, once its last version is gone."""
        records: list[DecodedRecord] = []
        if subject in self.state.levels:
            records.append((ConfigKey(subject), None))
        if subject in self.state.modes:
            records.append((ModeKey(subject), None))
        return records

    def _delete_version(self, operation: DeleteVersion) -> tuple[list[DecodedRecord], Answer]:
        subject, permanent = operation.subject, operation.permanent
        self._refuse_read_only(subject)
        every_version = self.state.versions(subject, deleted=True)
        if not every_version:
            raise errors.subject_not_found(subject)
        if operation.version == LATEST:
            value = reads.find_version(self.state, subject, LATEST, deleted=permanent)
        else:
            found = self.state.version(subject, operation.version)
            if found is None:
                raise errors.version_not_found(operation.version)
            value = found
        if not permanent and value.deleted:
            raise errors.version_soft_deleted(subject, value.version)
        if permanent and not value.deleted:
            raise errors.version_not_soft_deleted(subject, value.version)
        if self.state.referenced_by(subject, value.version, deleted=permanent):
            raise errors.reference_exists(subject, value.version)
        key = SchemaKey(subject, value.version)
        if not permanent:
            return [(key, replace(value, deleted=True))], Answer(200, value.version)
        records: list[DecodedRecord] = [(key, None)]
        if len(every_version) == 1:
            records.extend(self._subject_settings_removed(subject))
        return records, Answer(200, value.version)

    # ------------------------------------------------------------- config, mode

    def _delete_config(self, subject: str | None) -> tuple[list[DecodedRecord], Answer]:
        if subject is not None and subject not in self.state.levels:
            raise errors.subject_not_found(subject)
        old = self.state.level(subject, self.config.compatibility_level)
        return [(ConfigKey(subject), None)], Answer(200, {"compatibilityLevel": old})

    def _set_mode(self, operation: SetMode) -> tuple[list[DecodedRecord], Answer]:
        subject, mode = operation.subject, operation.mode
        if mode == "IMPORT" and not operation.force:
            occupied = (
                bool(self.state.versions(subject, deleted=True))
                if subject is not None
                else bool(self.state.subjects)
            )
            if occupied:
                raise errors.operation_not_permitted("Cannot import since found existing subjects")
        return [(ModeKey(subject), ModeValue(subject, mode))], Answer(200, {"mode": mode})

    def _delete_mode(self, subject: str | None) -> tuple[list[DecodedRecord], Answer]:
        if subject is not None and subject not in self.state.modes:
            raise errors.subject_not_found(subject)
        old = self.state.mode(subject)
        return [(ModeKey(subject), None)], Answer(200, {"mode": old})
