"""``sluice dlq``: dead-letter topics (``<group>-dlq``, see ``sluice.RetryPolicy``):
list them, show their records with where they came from and why they died, and replay
them to their original topics."""

from __future__ import annotations

import click

from sluice.cli.common import (
    bootstrap_option,
    echo_json,
    echo_table,
    format_option,
    open_cluster,
    raise_if_unknown_topic,
    run,
)
from sluice.client.dead_letters import (
    REPLAY_GROUP,
    DeadLetter,
    dead_letter_topics,
    read_dead_letters,
    replay_dead_letters,
)
from sluice.common.errors import KafkaError

SHOWN_BYTES_MAX = 60


@click.group()
def dlq() -> None:
    """Inspect and replay dead-letter topics."""


@dlq.command(name="list")
@format_option
@bootstrap_option
def list_command(*, output_format: str, bootstrap_server: str) -> None:
    """Dead-letter topics (named ...-dlq) and how many records each holds."""

    async def listed() -> dict[str, int]:
        async with open_cluster(bootstrap_server) as cluster:
            return await dead_letter_topics(cluster, bootstrap_server)

    found = run(listed)
    if output_format == "json":
        echo_json([{"topic": name, "records": count} for name, count in found.items()])
    elif found:
        echo_table([("TOPIC", "RECORDS")] + [(n, str(c)) for n, c in found.items()])


def _shown(data: bytes | None) -> str:
    if data is None:
        return "null"
    text = data.decode(errors="replace")
    return text if len(text) <= SHOWN_BYTES_MAX else text[:SHOWN_BYTES_MAX] + "…"


@dlq.command(name="show")
@click.argument("topic")
@click.option("--limit", type=click.IntRange(1, 100_000), default=20, show_default=True)
@format_option
@bootstrap_option
def show_command(*, topic: str, limit: int, output_format: str, bootstrap_server: str) -> None:
    """The dead letters of TOPIC: where each came from, after how many attempts, why."""

    async def read() -> list[DeadLetter]:
        async with open_cluster(bootstrap_server) as cluster:
            try:
                return await read_dead_letters(cluster, bootstrap_server, topic, limit=limit)
            except KafkaError as e:
                raise_if_unknown_topic(e, topic)
                raise

    letters = run(read)
    if output_format == "json":
        echo_json(
            [
                {
                    "partition": d.record.partition,
                    "offset": d.record.offset,
                    "original_topic": d.original_topic,
                    "original_partition": d.original_partition,
                    "original_offset": d.original_offset,
                    "attempts": d.attempts,
                    "error": d.error,
                    "key": None if d.record.key is None else d.record.key.decode(errors="replace"),
                    "value": None
                    if d.record.value is None
                    else d.record.value.decode(errors="replace"),
                }
                for d in letters
            ]
        )
        return
    if letters:
        echo_table(
            [("PARTITION", "OFFSET", "FROM", "ATTEMPTS", "ERROR", "VALUE")]
            + [
                (
                    str(d.record.partition),
                    str(d.record.offset),
                    f"{d.original_topic}/{d.original_partition}@{d.original_offset}",
                    str(d.attempts),
                    _shown(d.error.encode()),
                    _shown(d.record.value),
                )
                for d in letters
            ]
        )


@dlq.command(name="replay")
@click.argument("topic")
@click.option("--to", "to_topic", default=None, help="Produce here instead of each original topic.")
@click.option(
    "--group",
    "group_id",
    default=REPLAY_GROUP,
    show_default=True,
    help="The group that remembers how far replays got.",
)
@bootstrap_option
def replay_command(
    *, topic: str, to_topic: str | None, group_id: str, bootstrap_server: str
) -> None:
    """Produce the dead letters of TOPIC not replayed yet back to their original topics,
    exactly once (each with the replay group's offset, in a transaction)."""

    async def replay() -> int:
        async with open_cluster(bootstrap_server) as cluster:
            try:
                return await replay_dead_letters(
                    cluster, bootstrap_server, topic, to_topic=to_topic, group_id=group_id
                )
            except KafkaError as e:
                raise_if_unknown_topic(e, topic)
                raise

    count = run(replay)
    click.echo(f"replayed {count} record(s) from {topic}")
