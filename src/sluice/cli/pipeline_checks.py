"""What ``sluice archive`` and ``sluice replay`` check before Spark starts.

Starting Spark takes tens of seconds and a mistake found inside it ends in pages of JVM
traces; these checks take a round trip to the broker and a look at the archive, and end
in one line saying what was wrong and what to do::

    archive   --pattern a regular expression, --starting-offsets earliest, latest or
              JSON; every --topic exists (or the closest name is suggested); a
              --pattern matches some topic. With --until-end: how many offsets there are
              to archive (from the checkpoint's last committed offsets when it has some,
              else from --starting-offsets), the progress bar's total.
    replay    ranges that are not empty; a local --archive is a directory holding
              topic=… directories and every --source-topic among them; how many rows the
              replay selects and their highest source partition (without Spark:
              :mod:`sluice.spark.archive_contents`); the target topic is created with
              that many partitions (and the broker's default replication factor) when
              it does not exist, and refused when it has
              fewer than --keep-partitions needs.
"""

from __future__ import annotations

import datetime
import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from sluice.client.admin import Admin, NewTopic
from sluice.client.cluster import Cluster
from sluice.common.ids import TopicPartition
from sluice.spark import archive_contents
from sluice.spark.options import OffsetChoice, SluiceOptionError, parse_source_options
from sluice.spark.planning import partition_bounds, resolve_offset

CHECKPOINT_OFFSETS = "offsets"
CHECKPOINT_COMMITS = "commits"


@dataclass(frozen=True, slots=True)
class ArchivePlan:
    partitions: list[TopicPartition]
    offsets_to_archive: int | None
    """Offsets between where the archive resumes or starts and the ends now (None
    without --until-end or when unknown): records, and any transaction markers."""


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    rows: int
    partitions_needed: int
    created: bool
    """Whether the target topic was created (with ``partitions_needed`` partitions)."""


def _closest(name: str, names: Sequence[str]) -> str:
    found = difflib.get_close_matches(name, names, n=1)
    return f"; did you mean {found[0]!r}?" if found else ""


async def plan_archive(
    cluster: Cluster,
    bootstrap_server: str,
    *,
    topics: Sequence[str],
    pattern: str | None,
    starting_offsets: str,
    checkpoint: str,
    until_end: bool,
) -> ArchivePlan:
    """Check an archive's arguments against the cluster (module docstring)."""
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as e:
            raise click.BadParameter(
                f"not a regular expression: {e}", param_hint="--pattern"
            ) from None
    options = {"bootstrap.servers": bootstrap_server, "startingOffsets": starting_offsets}
    if pattern is not None:
        options["subscribePattern"] = pattern
    else:
        options["subscribe"] = ",".join(topics)
    try:
        source = parse_source_options(options, streaming=True)
    except SluiceOptionError as e:
        message = str(e).replace("option startingOffsets", "--starting-offsets")
        raise click.ClickException(message) from None
    listed = await Admin(cluster).list_topics()
    by_name = {topic.name: topic for topic in listed}
    if pattern is not None:
        matcher = re.compile(pattern)
        chosen = [name for name in sorted(by_name) if matcher.fullmatch(name)]
        if not chosen:
            raise click.ClickException(
                f"no topic matches --pattern {pattern!r} (the whole name must match; "
                "list topics with `sluice topics list`)"
            )
    else:
        for name in topics:
            if name not in by_name:
                raise click.ClickException(
                    f"topic {name!r} does not exist{_closest(name, sorted(by_name))} "
                    "(list topics with `sluice topics list`)"
                )
        chosen = list(topics)
    partitions = sorted(
        TopicPartition(name, p.partition) for name in chosen for p in by_name[name].partitions
    )
    if not until_end:
        return ArchivePlan(partitions, None)
    return ArchivePlan(
        partitions, await _offsets_to_archive(cluster, partitions, source.starting, checkpoint)
    )


async def _offsets_to_archive(
    cluster: Cluster,
    partitions: list[TopicPartition],
    starting: OffsetChoice,
    checkpoint: str,
) -> int | None:
    bounds = await partition_bounds(cluster, partitions)
    resumed = _checkpoint_offsets(Path(checkpoint))
    total = 0
    for tp, bound in bounds.items():
        if resumed is not None:
            start = resumed.get(tp.topic, {}).get(str(tp.partition), bound.log_start_offset)
        else:
            try:
                start = resolve_offset(
                    starting.for_partition(tp),
                    bound,
                    tp,
                    option="--starting-offsets",
                )
            except SluiceOptionError as e:
                raise click.ClickException(str(e)) from None
        total += max(bound.high_watermark - max(start, bound.log_start_offset), 0)
    return total


def _checkpoint_offsets(checkpoint: Path) -> dict[str, dict[str, int]] | None:
    """The source offsets of the checkpoint's last committed micro-batch (Spark's
    offset log: a version line, a metadata line, then each source's offset JSON), or
    None when the checkpoint has none or cannot be read."""
    commits = checkpoint / CHECKPOINT_COMMITS
    if not commits.is_dir():
        return None
    committed = [int(entry.name) for entry in commits.iterdir() if entry.name.isdigit()]
    if not committed:
        return None
    try:
        lines = (checkpoint / CHECKPOINT_OFFSETS / str(max(committed))).read_text().splitlines()
        offsets = json.loads(lines[2])
    except (OSError, IndexError, ValueError):
        return None
    return offsets if isinstance(offsets, dict) else None


async def plan_replay(
    cluster: Cluster,
    *,
    archive: str,
    topic: str,
    source_topics: Sequence[str],
    from_time: datetime.datetime | None,
    to_time: datetime.datetime | None,
    from_offset: int | None,
    to_offset: int | None,
    keep_partitions: bool,
) -> ReplayPlan | None:
    """Check a replay's arguments (module docstring) and make its target ready; None
    for an archive Spark must read (a URL), which is not looked into here."""
    if from_time is not None and to_time is not None and from_time >= to_time:
        raise click.BadParameter("must be after --from-time", param_hint="--to-time")
    if from_offset is not None and to_offset is not None and from_offset >= to_offset:
        raise click.BadParameter("must be above --from-offset", param_hint="--to-offset")
    if not archive_contents.is_local(archive):
        return None
    path = archive_contents.local_path(archive)
    if not path.is_dir():
        raise click.ClickException(f"--archive {archive}: no such directory")
    archived = archive_contents.archived_topics(path)
    if not archived:
        raise click.ClickException(
            f"--archive {archive} holds no archive (no topic=… directories); write one "
            "with `sluice archive --output`"
        )
    for source in source_topics:
        if source not in archived:
            raise click.ClickException(
                f"--source-topic {source!r} is not in the archive{_closest(source, archived)} "
                f"(it holds {', '.join(archived)})"
            )
    selection = archive_contents.select(
        path,
        source_topics,
        from_time=from_time,
        to_time=to_time,
        from_offset=from_offset,
        to_offset=to_offset,
    )
    needed = 1 if selection.highest_partition is None else selection.highest_partition + 1
    admin = Admin(cluster)
    existing = {t.name: t for t in await admin.list_topics()}.get(topic)
    if existing is None:
        if selection.rows:
            await admin.create_topics([NewTopic(topic, needed, -1)])
        return ReplayPlan(selection.rows, needed, created=selection.rows > 0)
    if keep_partitions and len(existing.partitions) < needed:
        raise click.ClickException(
            f"topic {topic!r} has {len(existing.partitions)} partition(s), and the archived "
            f"records come from partitions up to {needed - 1}: give it at least {needed} "
            "partitions, or replay with --hash-keys"
        )
    return ReplayPlan(selection.rows, needed, created=False)
