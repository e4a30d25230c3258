"""The sink's deliveryGuarantee=exactly-once: each micro-batch committed in transactions
keyed by the query's checkpoint, so a read_committed reader of the output sees every
input record once, whether the query runs through, its driver stops while committing,
or the whole query process is killed and restarted."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import create_topic, produce

import sluice
from sluice.common.bookkeeping_groups import BOOKKEEPING_METADATA
from sluice.common.ids import TopicPartition
from sluice.spark.options import SluiceOptionError, parse_sink_options
from sluice.spark.sink import _end_batch, _produce, progress_group

QUERY_TIMEOUT_S = 180.0
QUERY = Path(__file__).with_name("exactly_once_query.py")


def _rows(count: int, partitions: int) -> list[Any]:
    return [(i % partitions, None, f"r{i}".encode(), (), None) for i in range(count)]


def read_committed(bootstrap: str, topic: str, partitions: int, count: int) -> list[bytes]:
    """The output as a read_committed reader sees it, up to ``count`` records or the
    ``end`` record of a final committed transaction in each partition."""

    async def main() -> list[bytes]:
        async with sluice.Producer(bootstrap, transactional_id=f"closer-{topic}") as closer:
            await closer.begin_transaction()
            for partition in range(partitions):
                await closer.send(topic, b"end", partition=partition)
            await closer.commit_transaction()
        values: list[bytes] = []
        ends = 0
        async with sluice.Consumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
        ) as consumer:
            consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
            async with asyncio.timeout(QUERY_TIMEOUT_S):
                while ends < partitions:
                    for records in (await consumer.getmany(timeout_ms=200)).values():
                        for record in records:
                            if record.value == b"end":
                                ends += 1
                            elif record.value is not None:
                                values.append(record.value)
        return values

    return asyncio.run(main())


def test_exactly_once_is_for_streaming_writes_with_a_checkpoint() -> None:
    options = {"bootstrap.servers": "127.0.0.1:9092", "deliveryGuarantee": "exactly-once"}
    with pytest.raises(SluiceOptionError, match="for streaming writes"):
        parse_sink_options(options)
    with pytest.raises(SluiceOptionError, match="needs a checkpointLocation"):
        parse_sink_options(options, streaming=True)
    parsed = parse_sink_options({**options, "checkpointLocation": "/tmp/cp"}, streaming=True)
    again = parse_sink_options({**options, "checkpointLocation": "/tmp/cp"}, streaming=True)
    assert parsed.exactly_once
    assert parsed.transactional_id_prefix == again.transactional_id_prefix
    other = parse_sink_options({**options, "checkpointLocation": "/tmp/cp2"}, streaming=True)
    assert other.transactional_id_prefix != parsed.transactional_id_prefix


def test_a_streaming_query_copies_exactly_once(
    spark: Any, broker: Any, topic: str, tmp_path: Path
) -> None:
    source, sink = f"{topic}-in", f"{topic}-out"
    create_topic(broker.bootstrap, source, 2)
    create_topic(broker.bootstrap, sink, 2)
    produce(broker.bootstrap, source, _rows(300, 2))
    query = (
        spark.readStream.format("sluice")
        .option("bootstrap.servers", broker.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
        .select("value")
        .writeStream.format("sluice")
        .option("bootstrap.servers", broker.bootstrap)
        .option("topic", sink)
        .option("deliveryGuarantee", "exactly-once")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert len(query.recentProgress) >= 3, "the input should span several micro-batches"
    values = read_committed(broker.bootstrap, sink, 2, 300)
    assert sorted(values) == sorted(f"r{i}".encode() for i in range(300))
    # The progress groups say they are bookkeeping, so no tool shows them as lagging.
    with sluice.sync.Admin(bootstrap_servers=broker.bootstrap) as admin:
        progress = [
            g.group_id for g in admin.list_groups() if g.group_id.startswith("sluice-spark-")
        ]
        assert progress
        for group_id in progress:
            committed = admin.list_group_offsets(group_id)
            assert {value.metadata for value in committed.values()} == {BOOKKEEPING_METADATA}


def test_a_driver_stopped_while_committing_a_batch_repeats_nothing(
    broker: Any, topic: str, tmp_path: Path
) -> None:
    """Batch 7 is written by tasks 0 and 1; the driver commits task 0's transaction and
    stops. Spark runs batch 7 again: both tasks write again, and the driver aborts task
    0's new transaction (its progress says batch 7 is in) and commits task 1's."""
    create_topic(broker.bootstrap, topic, 2)
    options = parse_sink_options(
        {
            "bootstrap.servers": broker.bootstrap,
            "topic": topic,
            "deliveryGuarantee": "exactly-once",
            "checkpointLocation": str(tmp_path / "checkpoint"),
        },
        streaming=True,
    )

    class Row:
        def __init__(self, value: bytes, partition: int) -> None:
            self.fields = {"value": value, "partition": partition}

        def asDict(self, recursive: bool = False) -> dict[str, Any]:
            return self.fields

    def task_rows(task: int) -> list[Row]:
        return [Row(b"t%d-%d" % (task, i), task) for i in range(5)]

    async def run_batch(tasks: list[int], committing: list[int]) -> None:
        messages = [await _produce(options, iter(task_rows(t)), t, None) for t in tasks]
        await _end_batch(options, [m for m in messages if m.task in committing], 7)

    asyncio.run(run_batch([0, 1], committing=[0]))  # the driver stops after task 0
    asyncio.run(run_batch([0, 1], committing=[0, 1]))  # the batch runs again
    values = read_committed(broker.bootstrap, topic, 2, 10)
    assert sorted(values) == sorted(b"t%d-%d" % (t, i) for t in (0, 1) for i in range(5))

    async def progress(task: int) -> int | None:
        async with sluice.Consumer(
            bootstrap_servers=broker.bootstrap, group_id=progress_group(options, task)
        ) as consumer:
            return await consumer.committed(TopicPartition(topic, 0))

    assert [asyncio.run(progress(t)) for t in (0, 1)] == [8, 8]


@pytest.mark.slow
def test_a_killed_query_restarted_neither_loses_nor_repeats(
    spark: Any, broker: Any, topic: str, tmp_path: Path
) -> None:
    """The query runs in a process of its own, killed once it committed a few batches
    (somewhere inside the next), then runs again from its checkpoint in this process's
    Spark session (one JVM start fewer) until everything is copied."""
    from exactly_once_query import start_query  # noqa: PLC0415 (needs pyspark, as spark does)

    seed = int(os.environ.get("SLUICE_SPARK_EOS_SEED", random.randrange(2**32)))
    print(f"seed {seed} (SLUICE_SPARK_EOS_SEED={seed} reproduces when the query is killed)")
    source, sink = f"{topic}-in", f"{topic}-out"
    create_topic(broker.bootstrap, source, 2)
    create_topic(broker.bootstrap, sink, 2)
    produce(broker.bootstrap, source, _rows(600, 2))
    checkpoint = tmp_path / "checkpoint"
    command = [sys.executable, str(QUERY), broker.bootstrap, source, sink, str(checkpoint)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    query = subprocess.Popen([*command, "run"], env=env, stdout=subprocess.PIPE)
    try:
        commits = checkpoint / "commits"
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        wanted = random.Random(seed).randint(2, 6)
        while time.monotonic() < deadline:
            done = len(list(commits.glob("[0-9]*"))) if commits.is_dir() else 0
            if done >= wanted:
                break
            assert query.poll() is None, "the query stopped by itself"
            time.sleep(0.1)  # polling the checkpoint directory, bounded by the deadline
        else:
            raise AssertionError("the query committed nothing in time")
        time.sleep(random.Random(seed + 1).uniform(0, 0.6))  # somewhere inside a batch
        query.send_signal(signal.SIGKILL)
        query.wait(QUERY_TIMEOUT_S)
    finally:
        if query.poll() is None:
            query.kill()
            query.wait(QUERY_TIMEOUT_S)
    finished = start_query(spark, broker.bootstrap, source, sink, str(checkpoint), "until-end")
    try:
        assert finished.awaitTermination(QUERY_TIMEOUT_S), "the restarted query did not end"
        assert finished.exception() is None, finished.exception()
    finally:
        finished.stop()
    values = read_committed(broker.bootstrap, sink, 2, 600)
    assert sorted(values) == sorted(f"r{i}".encode() for i in range(600)), f"seed {seed}"
