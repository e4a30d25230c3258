"""What an archive written by ``sluice archive`` holds, read without Spark.

``sluice replay`` checks its arguments against this before it starts Spark (seconds
saved, and one-line errors instead of a JVM's traces): which topics are archived, and,
of the rows a replay selects, how many there are and the highest source partition
number (the target topic needs more partitions than that to keep them).

An archive is Parquet files under ``topic=<t>/date=<d>/``, and the file sink's log in
``_spark_metadata/``: one file per micro-batch (``<batch>``, or ``<batch>.compact``
holding every earlier entry too), a ``v1`` line then one JSON entry per file
(``{"path": "file:///…", "action": "add"}``). Files a failed micro-batch left behind are
not in the log, and readers (Spark's and this one) do not see them. An archive without
the log (Parquet written otherwise) is read as every ``.parquet`` file under it.

pyarrow reads only the ``partition``, ``offset`` and ``timestamp`` columns of the files of
the topics selected. Local archives only: a URL (``hdfs://``, ``s3a://``) is left to
Spark.
"""

from __future__ import annotations

import datetime
import json
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

TOPIC_DIRECTORY_PREFIX = "topic="
METADATA_DIRECTORY = "_spark_metadata"


@dataclass(frozen=True, slots=True)
class Selection:
    """The rows of an archive a replay reads (:class:`~sluice.spark.pipelines.ReplayJob`'s
    filters): ``rows`` of them, from source partitions up to ``highest_partition``
    (None when there are no rows)."""

    rows: int
    highest_partition: int | None


def is_local(archive: str) -> bool:
    """Whether ``archive`` names a local directory (not a URL such as ``s3a://…``)."""
    return "://" not in archive or archive.startswith("file://")


def local_path(archive: str) -> Path:
    if archive.startswith("file://"):
        return Path(urllib.parse.urlparse(archive).path)
    return Path(archive)


def archived_topics(archive: Path) -> list[str]:
    """The topics with a ``topic=`` directory in ``archive``, sorted."""
    return sorted(
        entry.name.removeprefix(TOPIC_DIRECTORY_PREFIX)
        for entry in archive.iterdir()
        if entry.is_dir() and entry.name.startswith(TOPIC_DIRECTORY_PREFIX)
    )


def committed_files(archive: Path) -> list[Path] | None:
    """The Parquet files the file sink's log says are committed, or None when the
    archive has no such log."""
    log_directory = archive / METADATA_DIRECTORY
    if not log_directory.is_dir():
        return None
    batches: list[tuple[int, Path]] = []
    for entry in log_directory.iterdir():
        number = entry.name.removesuffix(".compact")
        if number.isdigit():
            batches.append((int(number), entry))
    files: dict[str, None] = {}
    for _, batch in sorted(batches):
        for line in batch.read_text().splitlines()[1:]:
            if not line.strip():
                continue
            entry = json.loads(line)
            path = urllib.parse.unquote(urllib.parse.urlparse(entry["path"]).path)
            if entry.get("action", "add") == "delete":
                files.pop(path, None)
            else:
                files[path] = None
    return [Path(path) for path in files]


def select(
    archive: Path,
    topics: Sequence[str],
    *,
    from_time: datetime.datetime | None = None,
    to_time: datetime.datetime | None = None,
    from_offset: int | None = None,
    to_offset: int | None = None,
) -> Selection:
    """Count the rows of ``topics`` (every archived topic when empty) in ``archive``
    within the ranges (``to_*`` exclusive), and find their highest source partition."""
    from pyarrow import compute, dataset  # noqa: PLC0415

    wanted = set(topics or archived_topics(archive))
    files = committed_files(archive)
    if files is None:
        files = sorted(archive.glob(f"{TOPIC_DIRECTORY_PREFIX}*/**/*.parquet"))
    chosen = [str(f) for f in files if _topic_of(f, archive) in wanted]
    if not chosen:
        return Selection(0, None)
    data = dataset.dataset(chosen, format="parquet")
    condition = None
    for test in (
        dataset.field("timestamp") >= _instant(from_time) if from_time is not None else None,
        dataset.field("timestamp") < _instant(to_time) if to_time is not None else None,
        dataset.field("offset") >= from_offset if from_offset is not None else None,
        dataset.field("offset") < to_offset if to_offset is not None else None,
    ):
        if test is not None:
            condition = test if condition is None else condition & test
    table = data.to_table(columns=["partition"], filter=condition)
    if table.num_rows == 0:
        return Selection(0, None)
    return Selection(table.num_rows, int(compute.max(table.column("partition")).as_py()))


def _instant(moment: datetime.datetime) -> datetime.datetime:
    """``moment`` as the archive's timestamps hold it: UTC, without a zone (the
    archive's session time zone is UTC, ``pipelines.spark_session``); a naive
    ``moment`` is taken as UTC, as the replay command does."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.UTC).replace(tzinfo=None)
    return moment


def _topic_of(file: Path, archive: Path) -> str | None:
    try:
        first = file.relative_to(archive).parts[0]
    except (ValueError, IndexError):
        return None
    if not first.startswith(TOPIC_DIRECTORY_PREFIX):
        return None
    return first.removeprefix(TOPIC_DIRECTORY_PREFIX)
