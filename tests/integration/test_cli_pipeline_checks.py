"""``sluice archive`` and ``sluice replay`` refuse bad arguments before Spark starts:
one line, what was wrong and what to do, in seconds (they used to run Spark for a
minute and print pages of JVM traces), and nothing left behind. Run as a user runs them
(a subprocess) against a real broker; the archives here are Parquet files laid out as
``sluice archive`` writes them (tests/spark runs the real pipeline)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from client_helpers import create_topic

COMMAND_TIMEOUT_S = 60.0


def sluice(broker: Any, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLUICE_BOOTSTRAP_SERVER": broker.bootstrap}
    return subprocess.run(
        [sys.executable, "-m", "sluice", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def refused(result: subprocess.CompletedProcess[str]) -> str:
    """The one line of a refusal."""
    assert result.returncode != 0, result.stdout
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return lines[0]


def _archive(root: Path, topic: str, partitions: int) -> Path:
    """An archive of ``topic`` with one record in each of its ``partitions``."""
    directory = root / f"topic={topic}" / "date=2026-11-29"
    directory.mkdir(parents=True)
    table = pa.table(
        {
            "key": pa.array([b"k"] * partitions),
            "value": pa.array([b"v"] * partitions),
            "partition": pa.array(list(range(partitions)), pa.int32()),
            "offset": pa.array([0] * partitions, pa.int64()),
            "timestamp": pa.array([0] * partitions, pa.timestamp("ns")),
        }
    )
    pq.write_table(table, directory / "part-00000.parquet")
    return root


def test_archive_of_a_misspelt_topic_names_the_closest_one(
    broker: Any, topic: str, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    output = tmp_path / "archive"
    line = refused(sluice(broker, "archive", "--topic", topic[:-1], "--output", str(output)))
    assert f"topic {topic[:-1]!r} does not exist; did you mean {topic!r}?" in line
    assert not output.exists(), "no checkpoint or output left behind"


def test_archive_refuses_a_pattern_that_matches_nothing_or_does_not_compile(
    broker: Any, tmp_path: Path
) -> None:
    output = str(tmp_path / "archive")
    line = refused(sluice(broker, "archive", "--pattern", "no-such-topic-.*", "--output", output))
    assert "no topic matches --pattern 'no-such-topic-.*'" in line
    line = refused(sluice(broker, "archive", "--pattern", "(", "--output", output))
    assert "--pattern" in line and "not a regular expression" in line
    line = refused(
        sluice(broker, "archive", "--pattern", ".*", "--starting-offsets", "{", "--output", output)
    )
    assert "--starting-offsets" in line


def test_replay_refuses_what_is_no_archive_and_topics_it_does_not_hold(
    broker: Any, topic: str, tmp_path: Path
) -> None:
    line = refused(sluice(broker, "replay", "--archive", str(tmp_path / "none"), "--topic", topic))
    assert "no such directory" in line
    line = refused(sluice(broker, "replay", "--archive", str(tmp_path), "--topic", topic))
    assert "holds no archive" in line
    archive = _archive(tmp_path / "archive", "orders", 3)
    line = refused(
        sluice(
            broker,
            "replay",
            "--archive",
            str(archive),
            "--topic",
            topic,
            "--source-topic",
            "ordres",
        )
    )
    assert "'ordres' is not in the archive; did you mean 'orders'? (it holds orders)" in line
    line = refused(
        sluice(
            broker,
            "replay",
            "--archive",
            str(archive),
            "--topic",
            topic,
            "--from-offset",
            "5",
            "--to-offset",
            "5",
        )
    )
    assert "--to-offset" in line


def test_replay_keeping_partitions_refuses_a_target_with_too_few(
    broker: Any, topic: str, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    archive = _archive(tmp_path / "archive", "orders", 6)
    line = refused(sluice(broker, "replay", "--archive", str(archive), "--topic", topic))
    assert f"topic {topic!r} has 1 partition(s)" in line
    assert "at least 6 partitions, or replay with --hash-keys" in line
