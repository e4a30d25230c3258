"""``sluice archive`` and ``sluice replay``: the Spark pipelines of :mod:`sluice.spark.pipelines`.

Both start a local Spark (``--master local[*]``) unless told another master, and need
the ``spark`` extra (``pip install 'sluice[spark]'``) and Java 17.

Before Spark starts, both check their arguments against the cluster and the archive
(:mod:`sluice.cli.pipeline_checks`: one-line errors in a second, not JVM traces after a
minute). Spark's own output (its JVM's warnings and logs) goes to a file, kept and named
when the pipeline fails, removed when it succeeds, so it never runs through the progress
bar. A failure inside Spark is one line too: its first line and where the log is.

At a terminal both show their phase and the rows done on standard error
(:mod:`sluice.cli.progress`): ``archive`` the rows of each micro-batch as Spark reports
them (with ``--until-end``, out of the offsets there are to archive), ``replay`` the
rows it writes, counted from the archive's files before Spark starts. Both end with a
summary line on standard error: the rows, where they went, how long it took.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import click

from sluice.cli.common import bootstrap_option, open_cluster, run
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


@contextlib.contextmanager
def _spark(master: str, command: str) -> Iterator[Any]:
    """A Spark session for ``command``, its JVM's output in a log file (see the module
    docstring), stopped at the end. A failure inside becomes one line."""
    pipelines = _pipelines(command)
    descriptor, name = tempfile.mkstemp(prefix=f"sluice-{command}-", suffix=".spark.log")
    log_path = Path(name)
    try:
        with _jvm_output_to(descriptor):
            spark = pipelines.spark_session(master, f"sluice-{command}")
    except Exception as e:
        raise _spark_failure(command, e, log_path) from None
    finally:
        os.close(descriptor)
    try:
        yield spark
    except (click.ClickException, KeyboardInterrupt):
        raise
    except Exception as e:
        raise _spark_failure(command, e, log_path) from None
    else:
        log_path.unlink(missing_ok=True)
    finally:
        spark.stop()


@contextlib.contextmanager
def _jvm_output_to(descriptor: int) -> Iterator[None]:
    """While Spark's JVM starts (it inherits file descriptor 2), file descriptor 2 is
    the log file; this process's own standard error (``sys.stderr``: the progress bar,
    errors) goes on to the terminal through a duplicate. Restored once the JVM runs."""
    sys.stderr.flush()
    terminal = os.dup(2)
    saved = sys.stderr
    sys.stderr = os.fdopen(os.dup(terminal), "w", buffering=1)
    os.dup2(descriptor, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)
        os.close(terminal)
        sys.stderr.close()
        sys.stderr = saved


def _spark_failure(command: str, error: BaseException, log_path: Path) -> click.ClickException:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    first = lines[0] if lines else type(error).__name__
    return click.ClickException(f"{command} failed in Spark: {first} (Spark's log: {log_path})")


def _follow_archive(query: Any, bar: Bar) -> int:
    """Wait for the archive query to end, adding each finished micro-batch's rows to the
    bar (Spark keeps the recent batches' progress; a batch is counted once); the rows
    archived."""
    rows_by_batch: dict[int, int] = {}

    def count() -> None:
        for progress in query.recentProgress:
            rows_by_batch[int(progress["batchId"])] = int(progress["numInputRows"])
        bar.update(
            completed=sum(rows_by_batch.values()),
            rows=sum(rows_by_batch.values()),
            batches=len(rows_by_batch),
        )

    while not query.awaitTermination(ARCHIVE_POLL_INTERVAL_S):
        count()
    count()
    return sum(rows_by_batch.values())


def _summary(text: str, started: float) -> None:
    click.echo(f"{text} in {time.monotonic() - started:.1f} s", err=True)


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
    from sluice.cli import pipeline_checks  # noqa: PLC0415  (needs the Spark extra)

    checkpoint = checkpoint or f"{output.rstrip('/')}/_checkpoint"

    async def plan() -> pipeline_checks.ArchivePlan:
        async with open_cluster(bootstrap_server) as cluster:
            return await pipeline_checks.plan_archive(
                cluster,
                bootstrap_server,
                topics=topics,
                pattern=pattern,
                starting_offsets=starting_offsets,
                checkpoint=checkpoint,
                until_end=until_end,
            )

    checked = run(plan)
    job = pipelines.ArchiveJob(
        bootstrap_servers=bootstrap_server,
        output=output,
        checkpoint=checkpoint,
        topics=topics,
        pattern=pattern,
        starting_offsets=starting_offsets,
        max_offsets_per_trigger=max_offsets_per_trigger,
        until_end=until_end,
        trigger_interval_s=trigger_interval,
    )
    started = time.monotonic()
    topic_count = len({tp.topic for tp in checked.partitions})
    with progress_bar(
        "archive: starting Spark",
        enabled=progress_enabled(no_progress),
        total=checked.offsets_to_archive,
        detail="{task.fields[rows]} rows in {task.fields[batches]} batch(es)",
        rows=0,
        batches=0,
    ) as bar:
        try:
            with _spark(master, "archive") as spark:
                bar.update(description="archiving")
                rows = _follow_archive(pipelines.start_archive(spark, job), bar)
                bar.update(description="archived")
        except KeyboardInterrupt:
            sys.exit(130)
    _summary(f"archived {rows} rows of {topic_count} topic(s) into {output}", started)


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
    from sluice.cli import pipeline_checks  # noqa: PLC0415  (needs the Spark extra)

    from_time, to_time = _utc(from_time), _utc(to_time)

    async def plan() -> pipeline_checks.ReplayPlan | None:
        async with open_cluster(bootstrap_server) as cluster:
            return await pipeline_checks.plan_replay(
                cluster,
                archive=archive_path,
                topic=topic,
                source_topics=source_topics,
                from_time=from_time,
                to_time=to_time,
                from_offset=from_offset,
                to_offset=to_offset,
                keep_partitions=keep_partitions,
            )

    checked = run(plan)
    if checked is not None and checked.rows == 0:
        click.echo(
            "replay: the archive holds no records in that selection; nothing to do", err=True
        )
        return
    if checked is not None and checked.created:
        click.echo(
            f"replay: created topic {topic} with {checked.partitions_needed} partition(s), "
            "as many as the archived records come from",
            err=True,
        )
    job = pipelines.ReplayJob(
        bootstrap_servers=bootstrap_server,
        archive=archive_path,
        topic=topic,
        source_topics=source_topics,
        from_time=from_time,
        to_time=to_time,
        from_offset=from_offset,
        to_offset=to_offset,
        keep_partitions=keep_partitions,
    )
    rows = None if checked is None else checked.rows
    started = time.monotonic()
    with progress_bar(
        "replay: starting Spark",
        enabled=progress_enabled(no_progress),
        total=rows,
        detail="{task.fields[rows]} rows",
        rows="?" if rows is None else rows,
    ) as bar:
        try:
            with _spark(master, "replay") as spark:
                bar.update(description=f"replay: writing into {topic}")
                pipelines.run_replay(spark, job)
                bar.update(description="replayed", completed=rows)
        except KeyboardInterrupt:
            sys.exit(130)
    counted = "the selected" if rows is None else str(rows)
    _summary(f"replayed {counted} rows into {topic}", started)
