"""Streaming reads into Parquet: checkpointed offsets, rate limits, AvailableNow, restarts,
and the archive → replay pipeline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import create_topic, produce

from sluice.spark.pipelines import ArchiveJob, ReplayJob, run_archive, run_replay, start_archive

pytestmark = pytest.mark.slow

QUERY_TIMEOUT_S = 120.0


def _rows(start: int, count: int, partitions: int) -> list[Any]:
    return [
        (i % partitions, f"k{i}".encode(), f"v{i}".encode(), (("i", str(i).encode()),), None)
        for i in range(start, start + count)
    ]


def _stream(
    spark: Any, bootstrap: str, topic: str, output: Path, checkpoint: Path, cap: int
) -> Any:
    return (
        spark.readStream.format("sluice")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(cap))
        .load()
        .writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_stopped_mid_way_and_restarted_has_no_duplicate_and_no_gap(
    spark: Any, broker: Any, topic: str, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, _rows(0, 600, 2))
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    query = _stream(spark, broker.bootstrap, topic, output, checkpoint, cap=50)
    deadline = time.monotonic() + QUERY_TIMEOUT_S
    while query.isActive and len(query.recentProgress) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)  # polling the query's progress, bounded by the deadline
    query.stop()
    first_run = spark.read.parquet(str(output)).count()
    assert 0 < first_run < 600, "the first run should have stopped part-way"

    produce(broker.bootstrap, topic, _rows(600, 100, 2))
    query = _stream(spark, broker.bootstrap, topic, output, checkpoint, cap=50)
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    progress = [p["numInputRows"] for p in query.recentProgress]
    assert progress and max(progress) <= 50, f"batches above maxOffsetsPerTrigger: {progress}"

    rows = spark.read.parquet(str(output)).select("partition", "offset", "value").collect()
    by_partition: dict[int, list[int]] = {0: [], 1: []}
    for row in rows:
        by_partition[row.partition].append(row.offset)
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(350)), "duplicates or gaps after the restart"
    assert sorted(int(bytes(r.value)[1:]) for r in rows) == list(range(700))


def test_archive_then_replay_reproduces_the_topic(
    spark: Any, broker: Any, topic: str, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, topic, 3)
    produce(broker.bootstrap, topic, _rows(0, 900, 3))
    archive = tmp_path / "archive"
    job = ArchiveJob(
        bootstrap_servers=broker.bootstrap,
        output=str(archive),
        checkpoint=str(tmp_path / "checkpoint"),
        topics=[topic],
        until_end=True,
        max_offsets_per_trigger=400,
    )
    run_archive(spark, job)
    assert (archive / f"topic={topic}").is_dir()
    assert spark.read.parquet(str(archive)).count() == 900

    # Running again archives nothing twice (the checkpoint has the offsets).
    produce(broker.bootstrap, topic, _rows(900, 30, 3))
    run_archive(spark, job)
    assert spark.read.parquet(str(archive)).count() == 930

    target = f"{topic}-replayed"
    create_topic(broker.bootstrap, target, 3)
    run_replay(spark, ReplayJob(broker.bootstrap, str(archive), target, source_topics=[topic]))

    def read(name: str) -> list[tuple[int, int, bytes, bytes, list[tuple[str, bytes]]]]:
        frame = (
            spark.read.format("sluice")
            .option("bootstrap.servers", broker.bootstrap)
            .option("subscribe", name)
            .option("includeHeaders", "true")
            .load()
        )
        return sorted(
            (
                r.partition,
                r.offset,
                bytes(r.key),
                bytes(r.value),
                [(h.key, bytes(h.value)) for h in r.headers],
            )
            for r in frame.collect()
        )

    assert read(target) == read(topic)


def test_replay_of_an_offset_range(spark: Any, broker: Any, topic: str, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, _rows(0, 50, 1))
    archive = tmp_path / "archive"
    run_archive(
        spark,
        ArchiveJob(
            broker.bootstrap, str(archive), str(tmp_path / "cp"), topics=[topic], until_end=True
        ),
    )
    target = f"{topic}-range"
    create_topic(broker.bootstrap, target, 1)
    run_replay(
        spark, ReplayJob(broker.bootstrap, str(archive), target, from_offset=10, to_offset=20)
    )
    frame = (
        spark.read.format("sluice")
        .option("bootstrap.servers", broker.bootstrap)
        .option("subscribe", target)
        .load()
    )
    assert [bytes(r.value) for r in frame.orderBy("offset").collect()] == [
        f"v{i}".encode() for i in range(10, 20)
    ]


def test_streaming_query_picks_up_new_records(
    spark: Any, broker: Any, topic: str, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    query = start_archive(
        spark,
        ArchiveJob(
            broker.bootstrap,
            str(tmp_path / "archive"),
            str(tmp_path / "cp"),
            topics=[topic],
            trigger_interval_s=0.5,
        ),
    )
    try:
        produce(broker.bootstrap, topic, _rows(0, 20, 1))
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        archived = 0
        while archived < 20 and time.monotonic() < deadline:
            time.sleep(0.5)  # polling the query's progress, bounded by the deadline
            archived = sum(p["numInputRows"] for p in query.recentProgress)
        assert archived == 20
        assert query.lastProgress["sources"][0]["latestOffset"] is not None
    finally:
        query.stop()


def test_archive_process_killed_and_restarted_archives_each_record_once(
    spark: Any, broker: Any, topic: str, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, _rows(0, 2000, 2))
    archive, checkpoint = tmp_path / "archive", tmp_path / "checkpoint"
    command = [
        str(Path(sys.executable).with_name("sluice")),
        "archive",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--output",
        str(archive),
        "--checkpoint",
        str(checkpoint),
        "--max-offsets-per-trigger",
        "100",
        "--until-end",
        "--master",
        "local[1]",
    ]
    first = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    try:
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        commits = checkpoint / "commits"
        while time.monotonic() < deadline and first.poll() is None:
            if commits.is_dir() and len([p for p in commits.iterdir() if p.name.isdigit()]) >= 3:
                break
            time.sleep(0.1)  # polling the checkpoint, bounded by the deadline
        assert first.poll() is None, "the archive finished before it could be killed"
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the sluice process and its Spark JVM
        first.wait()
    partial = spark.read.parquet(str(archive)).count()
    assert 0 < partial < 2000

    finished = subprocess.run(
        command,
        capture_output=True,
        timeout=QUERY_TIMEOUT_S,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        check=False,
    )
    assert finished.returncode == 0, finished.stderr.decode()[-3000:]
    rows = spark.read.parquet(str(archive)).select("partition", "offset").collect()
    for partition in (0, 1):
        offsets = sorted(r.offset for r in rows if r.partition == partition)
        assert offsets == list(range(1000)), "duplicates or gaps after the kill"
