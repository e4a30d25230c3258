"""Broker-side schema validation's logic: the subject each strategy names, the schema
ids read from a batch's keys and values (compressed batches through the produce check's
kept records), the strategy configs, and the cache of positive lookups (bound, time to
live, coalesced lookups, nothing negative remembered)."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from sluice.broker.produce_checks import ProduceChecks
from sluice.broker.schema_validation import (
    SCHEMA_VALIDATION_LOOKUPS_PER_BATCH_MAX,
    SCHEMA_VALIDATION_UNKNOWN_TTL_MS,
    RegistrySchemaLookup,
    SchemaValidation,
    record_errors,
    refusal_message,
)
from sluice.common import errors
from sluice.common.clock import ManualClock
from sluice.common.config import (
    RECORD_NAME_STRATEGY,
    TOPIC_NAME_STRATEGY,
    TOPIC_RECORD_NAME_STRATEGY,
    TopicConfig,
    parse_topic_configs,
)
from sluice.common.limits import RECORD_ERRORS_PER_PARTITION_MAX
from sluice.protocol.records.batch import Compression, parse_header
from sluice.protocol.records.builder import RecordInput, build_batch
from sluice.protocol.records.produced import ProducedRecordsCheck
from sluice.registry.api import Answer, Call
from sluice.schemas.validation import needs_record_name, schema_ids_of_records, subject_name
from sluice.schemas.wire import frame


def test_topic_name_strategy_names_the_topic_and_side() -> None:
    assert subject_name(TOPIC_NAME_STRATEGY, "orders", is_key=False, record_name=None) == (
        "orders-value"
    )
    assert subject_name(TOPIC_NAME_STRATEGY, "orders", is_key=True, record_name=None) == (
        "orders-key"
    )
    assert not needs_record_name(TOPIC_NAME_STRATEGY)


def test_record_strategies_name_the_record() -> None:
    name = "com.example.Order"
    assert subject_name(RECORD_NAME_STRATEGY, "orders", is_key=False, record_name=name) == name
    assert subject_name(RECORD_NAME_STRATEGY, "orders", is_key=True, record_name=name) == name
    assert (
        subject_name(TOPIC_RECORD_NAME_STRATEGY, "orders", is_key=False, record_name=name)
        == "orders-com.example.Order"
    )
    assert needs_record_name(RECORD_NAME_STRATEGY)
    assert needs_record_name(TOPIC_RECORD_NAME_STRATEGY)


def test_strategy_configs_take_short_and_full_names_and_refuse_others() -> None:
    checked = parse_topic_configs(
        {
            "confluent.value.subject.name.strategy": "RecordNameStrategy",
            "confluent.key.subject.name.strategy": TOPIC_RECORD_NAME_STRATEGY,
            "confluent.value.schema.validation": "TRUE",
        }
    )
    assert checked == {
        "confluent.value.subject.name.strategy": RECORD_NAME_STRATEGY,
        "confluent.key.subject.name.strategy": TOPIC_RECORD_NAME_STRATEGY,
        "confluent.value.schema.validation": "true",
    }
    with pytest.raises(errors.InvalidConfig, match=r"confluent\.value\.subject\.name\.strategy"):
        parse_topic_configs({"confluent.value.subject.name.strategy": "SubjectStrategy"})
    with pytest.raises(errors.InvalidConfig, match=r"confluent\.key\.schema\.validation"):
        parse_topic_configs({"confluent.key.schema.validation": "yes"})
    defaults = TopicConfig.from_entries({})
    assert not defaults.schema_validation
    assert defaults.confluent_value_subject_name_strategy == TOPIC_NAME_STRATEGY


RECORDS = [
    RecordInput(frame(7, b"payload"), frame(8, b"\x02")),
    RecordInput(None, None),
    RecordInput(b"plain key", b'{"not": "framed"}'),
    RecordInput(b"", b"\x00\x00"),
]


def _kept_section(compression: Compression) -> tuple[bytes, int, int]:
    batch = build_batch(RECORDS, compression=compression)
    header = parse_header(batch)
    check = ProducedRecordsCheck(batch, header, max_message_bytes=1 << 20, keep_records=True)
    assert check.advance()
    assert check.records_section is not None
    data, start = check.records_section
    return data, start, header.records_count


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP, Compression.ZSTD])
def test_schema_ids_of_keys_and_values(compression: Compression) -> None:
    data, start, count = _kept_section(compression)
    ids = schema_ids_of_records(data, count, start, keys=True, values=True)
    assert ids.keys[0] == 7 and ids.values[0] == 8
    assert ids.keys[1] is None and ids.values[1] is None, "null stays null"
    assert isinstance(ids.keys[2], str) and "no magic byte" in ids.keys[2]
    assert isinstance(ids.values[2], str) and "0x7b" in ids.values[2]
    assert isinstance(ids.keys[3], str) and "shorter than the 5-byte header" in ids.keys[3]
    assert isinstance(ids.values[3], str) and "2 bytes" in ids.values[3]
    only_values = schema_ids_of_records(data, count, start, keys=False, values=True)
    assert only_values.keys == [] and only_values.values == ids.values


def test_records_kept_across_a_check_advanced_in_steps() -> None:
    """A compressed batch checked partly on the event loop and finished in a thread
    keeps every decompressed chunk, in order."""
    many = [RecordInput(None, frame(index, b"x" * 500)) for index in range(400)]
    batch = build_batch(many, compression=Compression.GZIP)
    header = parse_header(batch)
    check = ProducedRecordsCheck(batch, header, max_message_bytes=1 << 20, keep_records=True)
    steps = 0
    while not check.advance(1024):
        steps += 1
    assert steps >= 1, "the check took more than one step"
    assert check.records_section is not None
    data, start = check.records_section
    ids = schema_ids_of_records(data, header.records_count, start, keys=False, values=True)
    assert ids.values == list(range(400))


def test_a_value_longer_than_its_record_is_refused_not_read_past() -> None:
    batch = bytearray(build_batch([RecordInput(None, frame(1, b""))]))
    value_length_at = 61 + 1 + 1 + 1 + 1 + 1  # length, attributes, deltas, key length
    assert batch[value_length_at] == 2 * 5  # zig-zag 5
    batch[value_length_at] = 2 * 40
    ids = schema_ids_of_records(bytes(batch), 1, 61, keys=False, values=True)
    assert ids.values == ["runs past its record (40 bytes, 6 left)"]


def test_the_check_keeps_no_records_unless_asked() -> None:
    batch = build_batch(RECORDS, compression=Compression.GZIP)
    check = ProducedRecordsCheck(batch, parse_header(batch), max_message_bytes=1 << 20)
    assert check.advance()
    assert check.records_section is None


class FakeLookup:
    """A registry's answers as a dict, counting the questions (the cache under test is
    in front of it; the real registry is tested in the integration tests)."""

    def __init__(self) -> None:
        self.versions: dict[int, list[tuple[str, int]]] = {}
        self.names: dict[int, list[str]] = {}
        self.asked: list[int] = []
        self.gate: asyncio.Event | None = None

    async def versions_of(self, schema_id: int) -> list[tuple[str, int]] | None:
        self.asked.append(schema_id)
        if self.gate is not None:
            await self.gate.wait()
        return self.versions.get(schema_id)

    async def record_names_of(self, schema_id: int) -> list[str] | None:
        return self.names.get(schema_id)


def in_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test on its own event loop."""

    @functools.wraps(test)
    def run(*arguments: Any, **keywords: Any) -> None:
        asyncio.run(test(*arguments, **keywords))

    return run


@pytest.fixture
def checks() -> Iterator[ProduceChecks]:
    pool = ProduceChecks(threads=1)
    yield pool
    pool.close()


VALUES_VALIDATED = TopicConfig.from_entries({"confluent.value.schema.validation": "true"})


def _section(*values: bytes | None) -> tuple[tuple[bytes, int], int]:
    batch = build_batch([RecordInput(None, value) for value in values])
    return (batch, 61), len(values)


@in_loop
async def test_refusals_name_each_record_and_why(checks: ProduceChecks) -> None:
    lookup = FakeLookup()
    lookup.versions = {1: [("t-value", 1)], 2: [("other-value", 1)]}
    validation = SchemaValidation(ManualClock(), lookup)
    section, count = _section(frame(1, b""), b"raw", frame(2, b""), frame(3, b""), None)
    refused = await validation.refusals("t", VALUES_VALIDATED, section, count, checks)
    assert [index for index, _ in refused] == [1, 2, 3]
    reasons = dict(refused)
    assert reasons[1].startswith("value has no magic byte")
    assert "not registered under subject 't-value'" in reasons[2]
    assert "schema id 3, which is unknown" in reasons[3]
    message = refusal_message("t", refused)
    assert message.startswith("3 record(s) rejected") and "record 1 of the batch" in message


@in_loop
async def test_positive_answers_are_cached_until_their_time_to_live(
    checks: ProduceChecks,
) -> None:
    lookup = FakeLookup()
    lookup.versions = {1: [("t-value", 1)]}
    clock = ManualClock()
    validation = SchemaValidation(clock, lookup, ttl_ms=1000)
    section, count = _section(frame(1, b"a"), frame(1, b"b"))
    assert await validation.refusals("t", VALUES_VALIDATED, section, count, checks) == []
    assert await validation.refusals("t", VALUES_VALIDATED, section, count, checks) == []
    assert lookup.asked == [1], "one question for both records and both batches"
    lookup.versions = {1: []}  # the version was deleted
    clock.advance(999)
    assert await validation.refusals("t", VALUES_VALIDATED, section, count, checks) == []
    clock.advance(1)
    refused = await validation.refusals("t", VALUES_VALIDATED, section, count, checks)
    assert [index for index, _ in refused] == [0, 1], "deletion seen once the entry expired"


@in_loop
async def test_ids_seen_recently_are_decided_without_the_registry(checks: ProduceChecks) -> None:
    lookup = FakeLookup()
    lookup.versions = {1: [("t-value", 1)], 2: [("u-value", 1)]}
    clock = ManualClock()
    validation = SchemaValidation(clock, lookup, ttl_ms=1000)
    section, count = _section(frame(1, b""), frame(2, b""), b"raw")
    ids = validation.ids_now(VALUES_VALIDATED, section, count)
    assert ids is not None
    assert validation.refusals_now("t", VALUES_VALIDATED, ids) is None, "nothing cached yet"
    asked = await validation.refusals("t", VALUES_VALIDATED, section, count, checks, ids)
    assert [index for index, _ in asked] == [1, 2]
    assert validation.refusals_now("t", VALUES_VALIDATED, ids) is None, "id 2: negative"
    only_good = validation.ids_now(VALUES_VALIDATED, *_section(frame(1, b""), b"raw"))
    assert only_good is not None
    [(index, reason)] = validation.refusals_now("t", VALUES_VALIDATED, only_good) or []
    assert (index, reason.split(":")[0]) == (1, "value has no magic byte")
    clock.advance(1000)
    assert validation.refusals_now("t", VALUES_VALIDATED, only_good) is None, "expired"


@in_loop
async def test_unknown_ids_are_remembered_briefly(checks: ProduceChecks) -> None:
    lookup = FakeLookup()
    clock = ManualClock()
    validation = SchemaValidation(clock, lookup)
    section, count = _section(frame(5, b""))
    assert await validation.refusals("t", VALUES_VALIDATED, section, count, checks)
    ids = validation.ids_now(VALUES_VALIDATED, section, count)
    assert ids is not None
    assert validation.refusals_now("t", VALUES_VALIDATED, ids), "decided without asking"
    assert await validation.refusals("t", VALUES_VALIDATED, section, count, checks)
    assert lookup.asked == [5], "a repeated unknown id is not asked again at once"
    lookup.versions = {5: [("t-value", 1)]}
    clock.advance(SCHEMA_VALIDATION_UNKNOWN_TTL_MS)
    assert await validation.refusals("t", VALUES_VALIDATED, section, count, checks) == []
    assert lookup.asked == [5, 5]


@in_loop
async def test_a_batch_s_new_ids_are_looked_up_together_and_bounded(
    checks: ProduceChecks,
) -> None:
    over = 3
    count_ids = SCHEMA_VALIDATION_LOOKUPS_PER_BATCH_MAX + over
    lookup = FakeLookup()
    lookup.versions = {i: [("t-value", 1)] for i in range(1, count_ids + 1)}
    lookup.gate = asyncio.Event()
    validation = SchemaValidation(ManualClock(), lookup)
    section, count = _section(*(frame(i, b"") for i in range(1, count_ids + 1)))
    batch = asyncio.ensure_future(
        validation.refusals("t", VALUES_VALIDATED, section, count, checks)
    )
    for _ in range(100 * SCHEMA_VALIDATION_LOOKUPS_PER_BATCH_MAX):  # bounded: loop turns
        if len(lookup.asked) >= SCHEMA_VALIDATION_LOOKUPS_PER_BATCH_MAX or batch.done():
            break
        await asyncio.sleep(0)
    # Every lookup started before any was answered: they run together.
    assert len(lookup.asked) == SCHEMA_VALIDATION_LOOKUPS_PER_BATCH_MAX, lookup.asked
    lookup.gate.set()
    refused = await batch
    assert len(lookup.asked) == SCHEMA_VALIDATION_LOOKUPS_PER_BATCH_MAX
    assert len(refused) == over
    assert all("not checked" in reason for _, reason in refused), refused


@in_loop
async def test_a_registry_that_does_not_answer_in_time_is_a_retriable_error(
    checks: ProduceChecks,
) -> None:
    lookup = FakeLookup()
    lookup.gate = asyncio.Event()  # never set: the registry never answers
    validation = SchemaValidation(ManualClock(), lookup, lookup_timeout_ms=50)
    section, count = _section(frame(1, b""), frame(2, b""))
    with pytest.raises(errors.RequestTimedOut, match="no answer about 2 schema id"):
        await asyncio.wait_for(
            validation.refusals("t", VALUES_VALIDATED, section, count, checks), 30
        )
    await validation.close()  # the lookups still running are ended, not left behind
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


@in_loop
async def test_the_cache_is_bounded(checks: ProduceChecks) -> None:
    lookup = FakeLookup()
    lookup.versions = {i: [("t-value", 1)] for i in range(1, 4)}
    validation = SchemaValidation(ManualClock(), lookup, entries_max=2)
    for schema_id in (1, 2, 3, 1):
        section, count = _section(frame(schema_id, b""))
        assert await validation.refusals("t", VALUES_VALIDATED, section, count, checks) == []
    assert lookup.asked == [1, 2, 3, 1], "1 was dropped when 3 came in"


@in_loop
async def test_concurrent_lookups_of_one_id_coalesce(checks: ProduceChecks) -> None:
    lookup = FakeLookup()
    lookup.versions = {9: [("t-value", 1)]}
    lookup.gate = asyncio.Event()
    validation = SchemaValidation(ManualClock(), lookup)
    section, count = _section(frame(9, b""))
    batches = [
        asyncio.ensure_future(validation.refusals("t", VALUES_VALIDATED, section, count, checks))
        for _ in range(5)
    ]
    while not lookup.asked:
        await asyncio.sleep(0)
    lookup.gate.set()
    assert await asyncio.gather(*batches) == [[]] * 5
    assert lookup.asked == [9]


@in_loop
async def test_record_name_strategy_uses_the_schemas_record_name(
    checks: ProduceChecks,
) -> None:
    lookup = FakeLookup()
    lookup.names = {4: ["com.example.Order"], 6: []}
    lookup.versions = {4: [("com.example.Order", 1)], 6: [("t-value", 1)]}
    config = TopicConfig.from_entries(
        {
            "confluent.value.schema.validation": "true",
            "confluent.value.subject.name.strategy": "RecordNameStrategy",
        }
    )
    validation = SchemaValidation(ManualClock(), lookup)
    section, count = _section(frame(4, b""), frame(6, b""))
    refused = await validation.refusals("t", config, section, count, checks)
    assert refused == [(1, "value has schema id 6, whose schema names no record")]
    topic_record = TopicConfig.from_entries(
        {
            "confluent.value.schema.validation": "true",
            "confluent.value.subject.name.strategy": "TopicRecordNameStrategy",
        }
    )
    section, count = _section(frame(4, b""))
    [(_, reason)] = await validation.refusals("t", topic_record, section, count, checks)
    assert "subject 't-com.example.Order'" in reason


def test_record_errors_are_bounded() -> None:
    refused = [(i, "value has no magic byte") for i in range(RECORD_ERRORS_PER_PARTITION_MAX + 5)]
    assert len(record_errors(refused)) == RECORD_ERRORS_PER_PARTITION_MAX
    assert "(and 104 more)" in refusal_message("t", refused)


class Answers:
    """Fixed answers of the registry's REST API by path (what the broker's registry
    calls return; the real registry answers in the integration tests)."""

    def __init__(self, answers: dict[tuple[str, ...], Answer]) -> None:
        self.answers = answers

    async def answer(self, call: Call, principal: str | None) -> Answer:
        return self.answers.get(call.segments, Answer(404, {"error_code": 40403}))


@in_loop
async def test_registry_answers_become_verdicts_or_a_retriable_error(
    checks: ProduceChecks,
) -> None:
    answers = Answers(
        {
            ("schemas", "ids", "1", "versions"): Answer(
                200, [{"subject": "t-value", "version": 3}]
            ),
            ("schemas", "ids", "2", "versions"): Answer(200, [{"subject": "t-value"}]),
            ("schemas", "ids", "3", "versions"): Answer(
                500, {"error_code": 50003, "message": "Error while forwarding"}
            ),
        }
    )
    validation = SchemaValidation(ManualClock(), RegistrySchemaLookup(answers, checks))
    section, count = _section(frame(1, b""), frame(4, b""))
    refused = await validation.refusals("t", VALUES_VALIDATED, section, count, checks)
    assert refused == [(1, "value has schema id 4, which is unknown to the Schema Registry")]
    for schema_id, why in ((2, "answered"), (3, "Error while forwarding")):
        section, count = _section(frame(schema_id, b""))
        with pytest.raises(errors.RequestTimedOut, match=why):
            await validation.refusals("t", VALUES_VALIDATED, section, count, checks)


@in_loop
async def test_record_names_come_from_the_parsed_schema_with_its_references(
    checks: ProduceChecks,
) -> None:
    inner = {"type": "record", "name": "Inner", "namespace": "com.example", "fields": []}
    outer = {
        "type": "record",
        "name": "Outer",
        "namespace": "com.example",
        "fields": [{"name": "inner", "type": "com.example.Inner"}],
    }
    reference = {"name": "com.example.Inner", "subject": "inner", "version": 1}
    answers = Answers(
        {
            ("schemas", "ids", "5"): Answer(
                200, {"schema": json.dumps(outer), "references": [reference]}
            ),
            ("subjects", "inner", "versions", "1"): Answer(
                200, {"subject": "inner", "version": 1, "id": 4, "schema": json.dumps(inner)}
            ),
        }
    )
    lookup = RegistrySchemaLookup(answers, checks)
    assert await lookup.record_names_of(5) == ["com.example.Outer"]
    assert await lookup.record_names_of(6) is None
