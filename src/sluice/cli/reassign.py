"""``sluice topics reassign`` and ``sluice cluster decommission``: move partition replicas
between brokers, as kafka-reassign-partitions does.

A plan is Kafka's reassignment JSON, so plans move between the tools::

    {"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [1, 2, 3]}]}

``--generate`` proposes a plan for topics over a list of brokers (printed with the current
assignment, to roll back with, as ``{"current": …, "proposed": …}``; a plan file may be
that whole document, and then its proposed plan is the one used); ``--execute`` submits
one (the added replicas copy the partitions, the old ones leave once the new ones are in
sync); ``--verify`` says, per partition, whether the move is complete, and exits with
status 1 until all are; ``--cancel`` puts partitions back where they were. With
``--wait``, ``--execute`` and ``--verify`` first wait while any move of the plan is in
progress (at a terminal, with a progress bar of the partitions moved on standard error).
``decommission`` plans the moves that empty one broker, writes the plan (with the
current assignment) to a file for ``--verify`` and ``--cancel``, and submits it with
``--execute``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from random import Random
from typing import Any

import click

from sluice.cli.common import bootstrap_option, echo_json, echo_table, open_cluster, run
from sluice.cli.progress import progress_bar, progress_enabled, progress_option
from sluice.client.admin import Admin, AlterConfigOp
from sluice.cluster import moves
from sluice.cluster.model import BrokerInfo
from sluice.common import errors
from sluice.common.ids import TopicPartition

PLAN_VERSION = 1
THROTTLE_CONFIG = "reassignment.throttled.rate"
"""The topic config ``--throttle`` sets (Kafka keeps its throttle rates as broker
configs; Sluice's broker configs are static, so the rate lives with the topic)."""
WAIT_POLL_INTERVAL_S = 1.0
"""How often ``--wait`` asks which moves are still in progress."""


def plan_document(assignment: Mapping[TopicPartition, Sequence[int]]) -> dict[str, Any]:
    """Kafka's reassignment JSON for an assignment."""
    return {
        "version": PLAN_VERSION,
        "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}
            for tp, replicas in sorted(assignment.items())
        ],
    }


def read_plan(path: Path) -> dict[TopicPartition, tuple[int, ...]]:
    """A plan file, checked; a click error saying what is wrong otherwise."""
    try:
        document = json.loads(path.read_text())
    except OSError as e:
        raise click.ClickException(f"cannot read the plan {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise click.ClickException(f"the plan {path} is not JSON: {e}") from None
    if isinstance(document, dict) and isinstance(document.get("proposed"), dict):
        document = document["proposed"]  # what --generate prints, saved whole
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise click.ClickException(
            f"the plan {path} has no partitions; expected "
            '{"version": 1, "partitions": [{"topic": T, "partition": N, "replicas": [..]}]} '
            "(make one with --generate)"
        )
    plan: dict[TopicPartition, tuple[int, ...]] = {}
    for number, entry in enumerate(entries, start=1):
        try:
            topic_partition = TopicPartition(str(entry["topic"]), int(entry["partition"]))
            replicas = tuple(int(r) for r in entry["replicas"])
        except (KeyError, TypeError, ValueError):
            raise click.ClickException(
                f"the plan {path}: entry {number} needs a topic, a partition number and a "
                f"list of broker ids as replicas, not {json.dumps(entry)}"
            ) from None
        if topic_partition in plan:
            raise click.ClickException(f"the plan {path} names {topic_partition} twice")
        plan[topic_partition] = replicas
    return plan


async def _current(
    admin: Admin, topics: Sequence[str] | None = None
) -> dict[TopicPartition, tuple[int, ...]]:
    listed = await admin.list_topics(include_internal=True)
    names = {t.name for t in listed}
    for name in topics or ():
        if name not in names:
            raise click.ClickException(
                f"topic {name!r} does not exist (list topics with `sluice topics list`)"
            )
    return {
        TopicPartition(t.name, p.partition): tuple(p.replica_ids)
        for t in listed
        if topics is None or t.name in topics
        for p in t.partitions
    }


def _assignment_and_brokers(
    bootstrap_server: str, topics: Sequence[str] | None = None
) -> tuple[dict[TopicPartition, tuple[int, ...]], list[BrokerInfo]]:
    """The replicas of ``topics``' partitions (None: every topic's) and the brokers."""

    async def gather() -> tuple[dict[TopicPartition, tuple[int, ...]], list[BrokerInfo]]:
        async with open_cluster(bootstrap_server) as connected:
            admin = Admin(connected)
            described = await admin.describe_cluster()
            brokers = [BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in described.brokers]
            return await _current(admin, topics), brokers

    return run(gather)


def _comma_list(text: str, what: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise click.BadParameter(f"give at least one {what}, comma-separated")
    return items


@click.command()
@click.option("--generate", "action", flag_value="generate", help="Propose a plan.")
@click.option("--execute", "action", flag_value="execute", help="Start the plan's moves.")
@click.option("--verify", "action", flag_value="verify", help="Check the plan's progress.")
@click.option("--cancel", "action", flag_value="cancel", help="Stop the plan's moves.")
@click.option("--topics", "topic_list", metavar="T1,T2", help="--generate: the topics to move.")
@click.option(
    "--brokers", "broker_list", metavar="0,1,2", help="--generate: the brokers to place them on."
)
@click.option(
    "--plan",
    "plan_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="--execute/--verify/--cancel: the plan file (Kafka's reassignment JSON).",
)
@click.option(
    "--throttle",
    "throttle_bytes_per_s",
    type=click.IntRange(1),
    metavar="BYTES_PER_S",
    help="--execute: copy to each added replica at most this fast (per topic and broker); "
    "--verify removes the throttle once every move is complete.",
)
@click.option(
    "--wait",
    is_flag=True,
    help="--execute/--verify: wait while any move of the plan is in progress.",
)
@progress_option
@bootstrap_option
def reassign(
    *,
    action: str | None,
    topic_list: str | None,
    broker_list: str | None,
    plan_path: Path | None,
    throttle_bytes_per_s: int | None,
    wait: bool,
    no_progress: bool,
    bootstrap_server: str,
) -> None:
    """Move partition replicas between brokers (like kafka-reassign-partitions).

    \b
    sluice topics reassign --generate --topics orders --brokers 0,1,2,3 > plan.json
    sluice topics reassign --execute --plan plan.json
    sluice topics reassign --verify --plan plan.json
    sluice topics reassign --verify --wait --plan plan.json
    """
    if action is None:
        raise click.UsageError("give one of --generate, --execute, --verify or --cancel")
    if action == "generate":
        if topic_list is None or broker_list is None:
            raise click.UsageError("--generate needs --topics and --brokers")
        _generate(_comma_list(topic_list, "topic"), _broker_ids(broker_list), bootstrap_server)
        return
    if plan_path is None:
        raise click.UsageError(f"--{action} needs --plan FILE (make one with --generate)")
    plan = read_plan(plan_path)
    if throttle_bytes_per_s is not None and action != "execute":
        raise click.UsageError("--throttle goes with --execute")
    if wait and action not in ("execute", "verify"):
        raise click.UsageError("--wait goes with --execute or --verify")
    if action == "execute":
        if throttle_bytes_per_s is not None:
            _set_throttle(sorted({tp.topic for tp in plan}), throttle_bytes_per_s, bootstrap_server)
        _submit(plan, bootstrap_server, plan_path)
        if wait:
            _wait_for_moves(plan, bootstrap_server, progress_enabled(no_progress))
            _verify(plan, bootstrap_server)
    elif action == "cancel":
        _submit(dict.fromkeys(plan), bootstrap_server)
    else:
        if wait:
            _wait_for_moves(plan, bootstrap_server, progress_enabled(no_progress))
        _verify(plan, bootstrap_server)


def _set_throttle(topics: Sequence[str], rate: int | None, bootstrap_server: str) -> None:
    """Set (or, with None, remove) the topics' reassignment.throttled.rate."""
    operation = (
        AlterConfigOp.delete(THROTTLE_CONFIG)
        if rate is None
        else AlterConfigOp.set(THROTTLE_CONFIG, str(rate))
    )

    async def alter() -> None:
        async with open_cluster(bootstrap_server) as connected:
            admin = Admin(connected)
            for topic in topics:
                await admin.alter_topic_configs(topic, [operation])

    run(alter)
    if rate is None:
        click.echo(f"No throttle left on {', '.join(topics)}.")
    else:
        click.echo(f"Throttled copying to added replicas at {rate} bytes/s per topic and broker.")


def _broker_ids(text: str) -> list[int]:
    try:
        return [int(item) for item in _comma_list(text, "broker id")]
    except ValueError:
        raise click.BadParameter(f"{text!r}: broker ids are numbers, e.g. 0,1,2") from None


def _generate(topics: list[str], broker_ids: list[int], bootstrap_server: str) -> None:
    current, brokers = _assignment_and_brokers(bootstrap_server, topics)
    known = {b.node_id: b for b in brokers}
    unknown = [b for b in broker_ids if b not in known]
    if unknown:
        raise click.ClickException(
            f"broker(s) {unknown} are not in the cluster (see `sluice cluster status`)"
        )
    try:
        proposed = moves.balanced(current, [known[b] for b in broker_ids], Random())
    except moves.MoveImpossible as e:
        raise click.ClickException(str(e)) from None
    echo_json({"current": plan_document(current), "proposed": plan_document(proposed)})
    click.echo(
        "Save the proposed plan to a file (keep the current one to roll back with) and run "
        "`sluice topics reassign --execute --plan FILE`.",
        err=True,
    )


def _submit(
    targets: Mapping[TopicPartition, Sequence[int] | None],
    bootstrap_server: str,
    plan_path: Path | None = None,
) -> None:
    async def submit() -> dict[TopicPartition, errors.KafkaError | None]:
        async with open_cluster(bootstrap_server) as connected:
            return await Admin(connected).alter_partition_reassignments(targets)

    outcomes = run(submit)
    failed = {tp: e for tp, e in outcomes.items() if e is not None}
    cancelling = all(target is None for target in targets.values())
    for topic_partition, error in sorted(failed.items()):
        click.echo(f"  {topic_partition}: {error}", err=True)
    verb = "Cancelled" if cancelling else "Started moving"
    click.echo(f"{verb} {len(outcomes) - len(failed)} of {len(outcomes)} partition(s).")
    if not cancelling and len(failed) < len(outcomes):
        shown = "FILE" if plan_path is None else shlex.quote(str(plan_path))
        click.echo(f"Follow it with `sluice topics reassign --verify --plan {shown}`.")
    if failed:
        raise click.exceptions.Exit(1)


async def _moves_state(
    admin: Admin, plan: Mapping[TopicPartition, tuple[int, ...]]
) -> tuple[dict[TopicPartition, tuple[int, ...]], set[TopicPartition]]:
    """Every partition's replicas now, and the plan's partitions still moving."""
    ongoing = await admin.list_partition_reassignments(list(plan))
    return await _current(admin), set(ongoing)


def _wait_for_moves(
    plan: Mapping[TopicPartition, tuple[int, ...]], bootstrap_server: str, show_bar: bool
) -> None:
    """Return once no partition of the plan is being moved (complete, or never started:
    a partition that is not moving will not complete by waiting)."""

    async def wait() -> None:
        async with open_cluster(bootstrap_server) as connected:
            admin = Admin(connected)
            with progress_bar("moving partitions", enabled=show_bar, total=len(plan)) as bar:
                while True:
                    current, ongoing = await _moves_state(admin, plan)
                    done = sum(
                        1
                        for tp, target in plan.items()
                        if tp not in ongoing and current.get(tp) == target
                    )
                    bar.update(completed=done)
                    if not ongoing:
                        return
                    await asyncio.sleep(WAIT_POLL_INTERVAL_S)  # until the next look

    run(wait)


def _verify(plan: Mapping[TopicPartition, tuple[int, ...]], bootstrap_server: str) -> None:
    async def gather() -> tuple[dict[TopicPartition, tuple[int, ...]], set[TopicPartition]]:
        async with open_cluster(bootstrap_server) as connected:
            return await _moves_state(Admin(connected), plan)

    current, ongoing = run(gather)
    rows = [["PARTITION", "TARGET", "NOW", "STATE"]]
    done = 0
    for topic_partition, target in sorted(plan.items()):
        now = current.get(topic_partition)
        if topic_partition in ongoing:
            state = "in progress"
        elif now == target:
            state = "complete"
            done += 1
        elif now is None:
            state = "no such partition"
        else:
            state = "not started (or cancelled)"
        rows.append(
            [
                str(topic_partition),
                ",".join(map(str, target)),
                "-" if now is None else ",".join(map(str, now)),
                state,
            ]
        )
    echo_table(rows)
    click.echo(f"{done} of {len(plan)} partition(s) complete.")
    if done < len(plan):
        raise click.exceptions.Exit(1)
    _set_throttle(sorted({tp.topic for tp in plan}), None, bootstrap_server)


def write_plan_file(path: Path, document: Mapping[str, Any]) -> None:
    """Write a plan document to ``path`` whole or not at all (a temporary file renamed
    over it). An existing file with another plan is refused rather than replaced: it
    may hold the assignment to roll back to; the same plan is left as it is."""
    text = json.dumps(document, indent=2) + "\n"
    try:
        existing = path.read_text()
    except FileNotFoundError:
        existing = None
    except OSError as e:
        raise click.ClickException(f"cannot read {path}: {e.strerror or e}") from None
    if existing is not None:
        try:
            same = json.loads(existing).get("proposed") == document["proposed"]
        except (json.JSONDecodeError, AttributeError):
            same = False
        if same:
            return
        raise click.ClickException(
            f"{path} already holds another plan; move it away or name another file with --plan FILE"
        )
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        temporary.write_text(text)
        os.replace(temporary, path)
    except OSError as e:
        temporary.unlink(missing_ok=True)
        raise click.ClickException(f"cannot write the plan to {path}: {e.strerror or e}") from None


@click.command()
@click.argument("broker", type=int)
@click.option("--execute", is_flag=True, help="Submit the moves (default: only print them).")
@click.option(
    "--plan",
    "plan_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the plan here.  [default: decommission-broker-BROKER.json]",
)
@bootstrap_option
def decommission(
    *, broker: int, execute: bool, plan_path: Path | None, bootstrap_server: str
) -> None:
    """Move every replica off BROKER, to the other brokers.

    Prints the plan and writes it (with the current assignment, to roll back with) to
    --plan FILE, which `sluice topics reassign --verify --plan FILE` follows and
    `--cancel --plan FILE` stops; with --execute, submits it.
    """
    path = plan_path if plan_path is not None else Path(f"decommission-broker-{broker}.json")
    current, brokers = _assignment_and_brokers(bootstrap_server)
    try:
        moved = moves.without_broker(current, broker, brokers)
    except moves.MoveImpossible as e:
        raise click.ClickException(str(e)) from None
    if not moved:
        click.echo(f"Broker {broker} holds no replica: nothing to move.", err=True)
        return
    document = {
        "current": plan_document({tp: current[tp] for tp in moved}),
        "proposed": plan_document(moved),
    }
    write_plan_file(path, document)
    echo_json(document["proposed"])
    click.echo(f"Wrote the plan to {path}.", err=True)
    if execute:
        _submit(moved, bootstrap_server, path)
    else:
        click.echo(
            f"{len(moved)} partition(s) to move; run again with --execute to move them.",
            err=True,
        )
