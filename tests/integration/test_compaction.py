"""Log compaction (``cleanup.policy=compact``) seen from a client: many overwrites of a
bounded key set shrink to the latest value of each key, the topic stays readable while
the background cleaner rewrites it, tombstones delete keys after
``delete.retention.ms``, and transactions: committed records are compacted like any,
aborted ones and then their markers go.

Records are produced by one idempotent producer to one fresh partition, so record ``i``
sits at offset ``i`` and its key is ``keys[i]`` from a seeded random sequence. A cleaner
pass keeps, below the end of the range it mapped (``j``), only the last record of each
key, and everything from ``j`` on; passes compose, so at any moment the log must be::

    survivors == {last offset of each key below j} ∪ [j, end)     for some j

which :func:`check_compacted` verifies exactly (and finds ``j``). The active segment is
never cleaned, so after the records under test one incompressible record of
``segment.bytes`` is appended: it rolls the segment and leaves every record under test
cleanable.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from client_helpers import CLIENT_TIMEOUT_S, admin_client, create_topic, unique_group_id
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType

from sluice.common import errors
from sluice.protocol.records.batch import parse_header

ROLL_KEY = b"~roll"
SEED = int(os.environ.get("SLUICE_TEST_SEED", "20261122"))
COMPACTION_TIMEOUT_S = 60.0
CLEANER_BYTES_PER_SECOND = 4_000_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("compaction") / "data",
        overrides={
            "log.cleaner.backoff.ms": "100",
            # slow enough that a pass over 200k records takes seconds, so reads overlap it
            "log.cleaner.io.max.bytes.per.second": str(CLEANER_BYTES_PER_SECOND),
        },
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def key_of(index: int) -> bytes:
    return f"key-{index:06d}".encode()


def value_of(offset: int) -> bytes:
    """~30 bytes that name the offset the record is expected at."""
    return f"v{offset:09d}:".encode() + b"x" * 20


def offset_in(value: bytes) -> int:
    return int(value[1:10])


def topic_configs_known(bootstrap: str) -> set[str]:
    """Names of the topic configs the broker describes (so tests use optional ones only
    where the broker supports them)."""
    probe = f"probe-{unique_group_id()}"
    create_topic(bootstrap, probe)
    resource = ConfigResource(ResourceType.TOPIC, probe)
    admin = admin_client(bootstrap)  # must outlive the future
    described = admin.describe_configs([resource])[resource]
    return set(described.result(timeout=CLIENT_TIMEOUT_S))


def create_compacted_topic(bootstrap: str, name: str, **config: str) -> bool:
    """Create a one-partition compacted topic; True when the broker also took
    ``min.cleanable.dirty.ratio`` (then passes run on every bit of dirt)."""
    settings = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0", **config}
    eager = "min.cleanable.dirty.ratio" in topic_configs_known(bootstrap)
    if eager:
        settings["min.cleanable.dirty.ratio"] = "0.01"
    create_topic(bootstrap, name, num_partitions=1, config=settings)
    return eager


def produce_log(
    bootstrap: str,
    topic: str,
    keys: list[bytes],
    values: list[bytes | None],
    segment_bytes: int,
    compression: str = "lz4",
) -> None:
    """Produce ``values[i]`` under ``keys[i]`` in order (record i lands at offset i), then
    the roll record; wait for every delivery."""
    assert len(keys) == len(values)
    failures: list[str] = []
    delivered = 0

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        nonlocal delivered
        if error is not None:
            failures.append(str(error))
        delivered += 1

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 50,
            "compression.type": compression,
            "message.timeout.ms": 60_000,
            "queue.buffering.max.messages": 500_000,
        }
    )
    for key, value in zip(keys, values, strict=True):
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: serve delivery reports
    assert producer.flush(COMPACTION_TIMEOUT_S) == 0, "records still undelivered"
    producer.produce(topic, key=ROLL_KEY, value=os.urandom(segment_bytes), partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, "the roll record was not delivered"
    assert not failures, f"{len(failures)} deliveries failed: {failures[:5]}"
    assert delivered == len(keys)


@dataclass(frozen=True)
class Record:
    offset: int
    key: bytes
    value: bytes | None


def read_all(
    bootstrap: str,
    topic: str,
    *,
    fetch_bytes: int = 1_048_576,
    isolation: str = "read_committed",
) -> list[Record]:
    """Every record from the log start to the high watermark; fails on any consumer error
    and on offsets that do not strictly increase. librdkafka reads committed records by
    default."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "isolation.level": isolation,
            "group.id": unique_group_id(),
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 100,
            "max.partition.fetch.bytes": fetch_bytes,
        }
    )
    try:
        partition = ConfluentTopicPartition(topic, 0)
        _low, high = consumer.get_watermark_offsets(partition, timeout=CLIENT_TIMEOUT_S)
        consumer.assign([ConfluentTopicPartition(topic, 0, OFFSET_BEGINNING)])
        records: list[Record] = []
        deadline = time.monotonic() + COMPACTION_TIMEOUT_S
        while high > 0 and (not records or records[-1].offset < high - 1):
            assert time.monotonic() < deadline, f"did not reach offset {high - 1} of {topic}"
            for message in consumer.consume(10_000, 0.2):
                assert message.error() is None, f"consumer error: {message.error()}"
                if records:
                    assert message.offset() > records[-1].offset, (
                        f"offset {message.offset()} after {records[-1].offset}"
                    )
                records.append(Record(message.offset(), message.key(), message.value()))
        return records
    finally:
        consumer.close()


def check_compacted(records: list[Record], keys: list[bytes], values: list) -> int:
    """Check ``records`` (a whole read) is a correctly compacted image of the produced
    log; return ``j``, the offset up to which it is compacted (0: not at all)."""
    end = len(keys)
    assert records and records[-1].key == ROLL_KEY and records[-1].offset == end, (
        f"the read must end with the roll record at offset {end}"
    )
    survivors = records[:-1]
    for record in survivors:
        assert (record.key, record.value) == (keys[record.offset], values[record.offset]), (
            f"offset {record.offset} holds {record.key!r}={record.value!r}, produced as "
            f"{keys[record.offset]!r}={values[record.offset]!r} (seed {SEED})"
        )
    kept = {record.offset for record in survivors}
    next_same_key = [end] * end
    last_seen: dict[bytes, int] = {}
    for offset in range(end - 1, -1, -1):
        next_same_key[offset] = last_seen.get(keys[offset], end)
        last_seen[keys[offset]] = offset
    suffix_start = end
    while suffix_start > 0 and suffix_start - 1 in kept:
        suffix_start -= 1
    dropped = [offset for offset in range(suffix_start) if offset not in kept]
    # A record is dropped only when a later one of its key lies below j, so j is past
    # every such later record; the smallest j allowed is the only one to try (a larger
    # j only adds conditions on the records kept below it).
    compacted_to = max([suffix_start, *(next_same_key[offset] + 1 for offset in dropped)])
    latest = {offset for offset in range(end) if next_same_key[offset] == end}
    assert latest <= kept, (
        f"latest records lost: offsets {sorted(latest - kept)[:10]} (seed {SEED})"
    )
    if dropped:
        overwritten_kept = [
            o for o in sorted(kept) if o < compacted_to and next_same_key[o] < compacted_to
        ]
        assert not overwritten_kept, (
            f"compacted up to {compacted_to} yet offsets {overwritten_kept[:10]} are kept "
            f"although their key is written again below {compacted_to} (seed {SEED})"
        )
    return compacted_to if dropped else 0


def latest_by_key(records: list[Record]) -> dict[bytes, bytes | None]:
    state: dict[bytes, bytes | None] = {}
    for record in records:
        state[record.key] = record.value
    return state


def expected_state(keys: list[bytes], values: list) -> dict[bytes, bytes | None]:
    return dict(zip(keys, values, strict=True))


def read_until_compacted(
    bootstrap: str,
    topic: str,
    keys: list[bytes],
    values: list,
    *,
    fully: bool,
    records_max: int,
    fetch_bytes: int = 65_536,
    timeout_s: float = COMPACTION_TIMEOUT_S,
) -> tuple[list[Record], int]:
    """Read the topic from the beginning again and again while the cleaner works. Each
    read must succeed and give every key its latest value; poll until a read holds at
    most ``records_max`` records (or, with ``fully``, nothing but the latest ones) and the
    next read is identical (no pass swapped segments in between). Returns that read and
    the number of reads that found the log not yet compacted that far."""
    expected = expected_state(keys, values)
    deadline = time.monotonic() + timeout_s
    reads = 0
    reads_before_compaction = 0
    previous: list[Record] | None = None
    while True:
        records = read_all(bootstrap, topic, fetch_bytes=fetch_bytes)
        reads += 1
        state = latest_by_key(records)
        del state[ROLL_KEY]
        wrong = [k for k in expected if state.get(k, b"<missing>") != expected[k]]
        assert not wrong and state.keys() == expected.keys(), (
            f"read {reads} does not give the latest value of keys {wrong[:5]} (seed {SEED})"
        )
        small_enough = len(records) <= records_max and (
            not fully or len(records) == len(expected) + 1
        )
        if small_enough and records == previous:
            return records, reads_before_compaction
        if not small_enough:
            reads_before_compaction += 1
        assert time.monotonic() < deadline, (
            f"after {timeout_s}s and {reads} reads the topic still holds {len(records)} "
            f"records for {len(expected)} keys: compaction did not run"
        )
        previous = records


def overwrites(count: int, key_count: int, rng: random.Random) -> tuple[list, list]:
    """``count`` records over ``key_count`` keys: every key written at least once (the
    first ``key_count`` records), then keys drawn at random."""
    keys = [key_of(i) for i in range(key_count)]
    keys += [key_of(rng.randrange(key_count)) for _ in range(count - key_count)]
    return keys, [value_of(offset) for offset in range(count)]


def run_overwrite_scenario(broker: BrokerProcess, topic: str, count: int, key_count: int):
    segment_bytes = 100_000
    eager = create_compacted_topic(broker.bootstrap, topic, **{"segment.bytes": str(segment_bytes)})
    keys, values = overwrites(count, key_count, random.Random(SEED))
    produce_log(broker.bootstrap, topic, keys, values, segment_bytes)

    records, reads_while_dirty = read_until_compacted(
        broker.bootstrap,
        topic,
        keys,
        values,
        fully=eager,
        records_max=count // 10,
        timeout_s=COMPACTION_TIMEOUT_S * max(1, count // 500_000),
    )
    compacted_to = check_compacted(records, keys, values)
    assert compacted_to > 0, "no record was compacted"
    if eager:
        assert compacted_to == count, f"compacted only up to {compacted_to} of {count}"
        assert len(records) == key_count + 1
    assert reads_while_dirty >= 1, (
        "every read found the log already compacted: the test did not read while cleaning"
    )


def test_many_overwrites_compact_to_the_latest_value_per_key_and_stay_readable(broker, topic):
    """200k records over 1000 keys: every read during cleaning succeeds and gives each key
    its latest value; the final log is an exact compaction of what was produced."""
    run_overwrite_scenario(broker, topic, count=200_000, key_count=1_000)


@pytest.mark.slow
def test_millions_of_overwrites_compact_to_the_latest_value_per_key(broker, topic):
    run_overwrite_scenario(broker, topic, count=1_500_000, key_count=10_000)


# ── tombstones ─────────────────────────────────────────────────────────────────────────

TOMBSTONE_SEGMENT_BYTES = 65_536
"""Large enough for the whole small log (~20 KB), so one pass cleans all of it."""


def tombstone_log(rng: random.Random) -> tuple[list, list, set[bytes]]:
    """100 keys written three times, then 40 of them deleted (null value)."""
    keys = [key_of(i % 100) for i in range(300)]
    values: list[bytes | None] = [value_of(offset) for offset in range(300)]
    deleted = {key_of(i) for i in rng.sample(range(100), 40)}
    for key in sorted(deleted):
        keys.append(key)
        values.append(None)
    return keys, values, deleted


def test_tombstones_delete_keys_after_delete_retention(broker, topic):
    segment_bytes = TOMBSTONE_SEGMENT_BYTES
    create_compacted_topic(
        broker.bootstrap,
        topic,
        **{"segment.bytes": str(segment_bytes), "delete.retention.ms": "1000"},
    )
    keys, values, deleted = tombstone_log(random.Random(SEED))
    produce_log(broker.bootstrap, topic, keys, values, segment_bytes, compression="none")
    live = {k: v for k, v in expected_state(keys, values).items() if v is not None}

    deadline = time.monotonic() + COMPACTION_TIMEOUT_S
    while True:
        records = read_all(broker.bootstrap, topic)
        state = latest_by_key(records)
        del state[ROLL_KEY]
        assert {k: v for k, v in state.items() if v is not None} == live, (
            "a read must always give the live keys their latest values"
        )
        if len(records) == len(live) + 1:
            break
        assert time.monotonic() < deadline, (
            f"{len(records)} records left; deleted keys still present: "
            f"{sorted(k for k in state if k in deleted)[:5]}"
        )
    assert not deleted & {r.key for r in records}, "deleted keys must disappear entirely"
    assert all(r.value is not None for r in records), "no tombstone is left"


def test_tombstones_stay_readable_until_delete_retention_has_passed(broker, topic):
    segment_bytes = TOMBSTONE_SEGMENT_BYTES
    create_compacted_topic(broker.bootstrap, topic, **{"segment.bytes": str(segment_bytes)})
    keys, values, deleted = tombstone_log(random.Random(SEED + 1))
    produce_log(broker.bootstrap, topic, keys, values, segment_bytes, compression="none")

    records, _reads = read_until_compacted(
        broker.bootstrap, topic, keys, values, fully=True, records_max=101
    )
    tombstones = {r.key for r in records if r.value is None}
    assert tombstones == deleted, (
        "within delete.retention.ms (default one day) a consumer reading from the start "
        f"must see every delete; missing {sorted(deleted - tombstones)[:5]}"
    )
    check_compacted(records, keys, values)


# ── transactions ───────────────────────────────────────────────────────────────────────


def control_batch_offsets(directory: Path) -> list[int] | None:
    """Offsets of the control batches (transaction markers) in a partition's segment
    files, read from disk; None when a file changed under the walk (a swap), to retry."""
    found: list[int] = []
    try:
        for path in sorted(directory.glob("*.log")):
            data = path.read_bytes()
            position = 0
            while position < len(data):
                header = parse_header(data, position)
                if header.is_control:
                    found.append(header.base_offset)
                position += header.size_bytes
    except (FileNotFoundError, errors.KafkaError):
        return None
    return found


def test_transactions_compact_and_markers_go_once_their_data_is_gone(broker, topic):
    """Committed transactional records are compacted like any others, aborted ones
    disappear even for read_uncommitted readers, the ABORT marker goes after
    delete.retention.ms, and the COMMIT marker whose record is still the latest stays."""
    segment_bytes = TOMBSTONE_SEGMENT_BYTES
    create_compacted_topic(
        broker.bootstrap,
        topic,
        **{"segment.bytes": str(segment_bytes), "delete.retention.ms": "1000"},
    )
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic}-txn"})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    for pairs, commit in (
        ([(b"a", b"committed-a"), (b"b", b"committed-b")], True),
        ([(b"a", b"aborted-a"), (b"c", b"aborted-c")], False),
    ):
        producer.begin_transaction()
        for key, value in pairs:
            producer.produce(topic, key=key, value=value, partition=0)
        if commit:
            producer.commit_transaction(CLIENT_TIMEOUT_S)
        else:
            producer.flush(CLIENT_TIMEOUT_S)
            producer.abort_transaction(CLIENT_TIMEOUT_S)
    # offsets: 0-1 committed, 2 COMMIT, 3-4 aborted, 5 ABORT, 6 plain b, 7 the roll record
    produce_log(broker.bootstrap, topic, [b"b"], [b"plain-b"], segment_bytes)
    directory = broker.data_dir / f"{topic}-0"
    assert control_batch_offsets(directory) == [2, 5]

    expected = [(0, b"a", b"committed-a"), (6, b"b", b"plain-b")]
    deadline = time.monotonic() + COMPACTION_TIMEOUT_S
    while True:
        uncommitted = read_all(broker.bootstrap, topic, isolation="read_uncommitted")
        committed = read_all(broker.bootstrap, topic)
        assert {r.key: r.value for r in committed}.items() >= {
            b"a": b"committed-a",
            b"b": b"plain-b",
        }.items(), "read_committed always gives each key its latest committed value"
        assert b"c" not in {r.key for r in committed}
        markers = control_batch_offsets(directory)
        done = [(r.offset, r.key, r.value) for r in uncommitted[:-1]] == expected
        if done and markers == [2]:
            break
        assert time.monotonic() < deadline, (
            f"not compacted: {uncommitted[:-1]}, markers at {markers}"
        )
    assert [(r.offset, r.key, r.value) for r in committed[:-1]] == expected
