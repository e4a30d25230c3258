"""``sluice archive`` and ``sluice replay``: the Spark pipelines of :mod:`sluice.spark.pipelines`.

Both start a local Spark (``--master local[*]``) unless told another master, and need
the ``spark`` extra (``pip install 'sluice[spark]'``) and Java 17.

At a terminal both show their phase and the rows done on standard error
(:mod:`sluice.cli.progress`): ``archive`` the rows of each micro-batch as Spark reports
them, ``replay`` the rows it is about to write, counted first (one more pass over the
archive's selected rows, made only when the bar is shown).
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

import click

from sluice.cli.common import bootstrap_option
from sluice.cli.progress import Bar, progress_bar, progress_enabled, progress_option

MASTER_DEFAULT = "local[*]"
ARCHIVE_POLL_INTERVAL_S = 0.5
"""How often the archive's bar reads the query's progress."""

F = TypeVar("F", bound=Callable[..., Any])


def _master_option(function: F) -> F:
    return click.option(
        "--master",
        default=MASTER_DEFAULT,
        show_default=True,
        help="Spark master URL (local[N], spark://host:7077, yarn, k8s://...).",
    )(function)


def _pipelines(command: str) -> ModuleType:
    """``sluice.spark.pipelines``, imported only when a pipeline command runs; without
    pyspark or pyarrow, a one-line error saying how to install them."""
    try:
        from sluice.spark import pipelines  # noqa: PLC0415
    except ImportError as e:
        raise click.ClickException(
            f"sluice {command} needs pyspark and pyarrow ({e}); "
            "install the Spark extra with pip install 'sluice[spark]'"
        ) from None
    return pipelines


def _spark(master: str, app_name: str) -> object:
    return _pipelines(app_name.removeprefix("sluice-")).spark_session(master, app_name)


def _follow_archive(query: Any, bar: Bar) -> None:
    """Wait for the archive query to end, adding each finished micro-batch's rows to the
    bar (Spark keeps the recent batches' progress; a batch is counted once)."""
    rows_by_batch: dict[int, int] = {}

    def count() -> None:
        for progress in query.recentProgress:
            rows_by_batch[int(progress["batchId"])] = int(progress["numInputRows"])
        bar.update(rows=sum(rows_by_batch.values()), batches=len(rows_by_batch))

    while not query.awaitTermination(ARCHIVE_POLL_INTERVAL_S):
        count()
    count()


def _utc(value: datetime.datetime | None) -> datetime.datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=datetime.UTC)


@click.command()
@bootstrap_option
@click.option("--topic", "topics", multiple=True, help="Topic to archive (repeatable).")
@click.option("--pattern", default=None, help="Archive every topic matching this regex.")
@click.option("--output", required=True, help="Archive directory (Parquet, topic=/date=).")
@click.option(
    "--checkpoint",
    default=None,
    help="Spark checkpoint directory (default: <output>/_checkpoint).",
)
@click.option(
    "--starting-offsets",
    default="earliest",
    show_default=True,
    help="Where a new archive starts: earliest, latest or offset JSON.",
)
@click.option("--max-offsets-per-trigger", type=click.IntRange(min=1), default=None)
@click.option(
    "--until-end",
    is_flag=True,
    help="Stop once the topics' current ends are archived (Trigger.AvailableNow).",
)
@click.option(
    "--trigger-interval",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Seconds between micro-batches when running continuously.",
)
@_master_option
@progress_option
def archive(
    bootstrap_server: str,
    topics: tuple[str, ...],
    pattern: str | None,
    output: str,
    checkpoint: str | None,
    starting_offsets: str,
    max_offsets_per_trigger: int | None,
    until_end: bool,
    trigger_interval: float,
    master: str,
    no_progress: bool,
) -> None:
    """Copy topics into Parquet, exactly once, partitioned by topic and date."""
    if bool(topics) == (pattern is not None):
        raise click.UsageError("give either --topic (one or more) or --pattern")
    pipelines = _pipelines("archive")
    job = pipelines.ArchiveJob(
        bootstrap_servers=bootstrap_server,
        output=output,
        checkpoint=checkpoint or f"{output.rstrip('/')}/_checkpoint",
        topics=topics,
        pattern=pattern,
        starting_offsets=starting_offsets,
        max_offsets_per_trigger=max_offsets_per_trigger,
        until_end=until_end,
        trigger_interval_s=trigger_interval,
    )
    with progress_bar(
        "archive: starting Spark",
        enabled=progress_enabled(no_progress),
        detail="{task.fields[rows]} rows in {task.fields[batches]} batch(es)",
        rows=0,
        batches=0,
    ) as bar:
        spark = _spark(master, "sluice-archive")
        try:
            if bar.shown:
                bar.update(description="archiving")
                _follow_archive(pipelines.start_archive(spark, job), bar)
                bar.update(description="archived")
            else:
                pipelines.run_archive(spark, job)
        except KeyboardInterrupt:
            sys.exit(130)
        finally:
            spark.stop()  # type: ignore[attr-defined]


@click.command()
@bootstrap_option
@click.option("--archive", "archive_path", required=True, help="Archive directory to read.")
@click.option("--topic", required=True, help="Topic to publish into.")
@click.option("--source-topic", "source_topics", multiple=True, help="Only these archived topics.")
@click.option("--from-time", type=click.DateTime(), default=None, help="Records at or after (UTC).")
@click.option("--to-time", type=click.DateTime(), default=None, help="Records before (UTC).")
@click.option("--from-offset", type=click.IntRange(min=0), default=None)
@click.option("--to-offset", type=click.IntRange(min=0), default=None, help="Exclusive.")
@click.option(
    "--keep-partitions/--hash-keys",
    default=True,
    show_default=True,
    help="Write each record to its source partition number, or hash its key.",
)
@_master_option
@progress_option
def replay(
    bootstrap_server: str,
    archive_path: str,
    topic: str,
    source_topics: tuple[str, ...],
    from_time: datetime.datetime | None,
    to_time: datetime.datetime | None,
    from_offset: int | None,
    to_offset: int | None,
    keep_partitions: bool,
    master: str,
    no_progress: bool,
) -> None:
    """Re-publish archived records into a topic, keys, headers and order kept."""
    pipelines = _pipelines("replay")
    job = pipelines.ReplayJob(
        bootstrap_servers=bootstrap_server,
        archive=archive_path,
        topic=topic,
        source_topics=source_topics,
        from_time=_utc(from_time),
        to_time=_utc(to_time),
        from_offset=from_offset,
        to_offset=to_offset,
        keep_partitions=keep_partitions,
    )
    with progress_bar(
        "replay: starting Spark",
        enabled=progress_enabled(no_progress),
        detail="{task.fields[rows]} rows",
        rows="?",
    ) as bar:
        spark = _spark(master, "sluice-replay")
        try:
            if bar.shown:
                bar.update(description="replay: reading the archive")
                frame = pipelines.replay_frame(spark, job)
                rows = frame.count()
                bar.update(description=f"replay: writing into {topic}", total=rows, rows=rows)
                pipelines.write_replay(frame, job)
                bar.update(description="replayed", completed=rows)
            else:
                pipelines.run_replay(spark, job)
        finally:
            spark.stop()  # type: ignore[attr-defined]
