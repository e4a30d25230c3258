"""``sluice quotas``: client quotas of users and client ids (Kafka's ``kafka-configs
--entity-type users|clients``): list, set and remove byte rates and request percentages.

An entity is ``--user NAME`` and/or ``--client-id NAME``; ``--user-default`` and
``--client-id-default`` stand for ``<default>`` (every user or client id without a quota
of its own)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from sluice.cli.common import (
    bootstrap_option,
    echo_json,
    echo_table,
    format_option,
    open_cluster,
    run,
)
from sluice.client.admin_quotas import (
    QuotaEntry,
    alter_client_quotas,
    describe_client_quotas,
    describe_entity,
)

F = TypeVar("F", bound=Callable[..., Any])
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")


def _entity_options(function: F) -> F:
    for option in (
        click.option("--user", help="A user (the principal's name: alice for User:alice)."),
        click.option("--user-default", is_flag=True, help="The default user (<default>)."),
        click.option("--client-id", help="A client id."),
        click.option("--client-id-default", is_flag=True, help="The default client id."),
    ):
        function = option(function)
    return function


def _entity(
    user: str | None, user_default: bool, client_id: str | None, client_id_default: bool
) -> dict[str, str | None]:
    entity: dict[str, str | None] = {}
    if user is not None and user_default:
        raise click.UsageError("--user and --user-default exclude each other")
    if client_id is not None and client_id_default:
        raise click.UsageError("--client-id and --client-id-default exclude each other")
    if user is not None or user_default:
        entity["user"] = user
    if client_id is not None or client_id_default:
        entity["client-id"] = client_id
    return entity


@click.group()
def quotas() -> None:
    """List, set and remove client quotas (byte rates, request percentage)."""


@quotas.command("list")
@bootstrap_option
@_entity_options
@format_option
def list_quotas(
    *,
    bootstrap_server: str,
    user: str | None,
    user_default: bool,
    client_id: str | None,
    client_id_default: bool,
    output_format: str,
) -> None:
    """Show the quotas set (those of one entity when one is named)."""
    entity = _entity(user, user_default, client_id, client_id_default)

    async def gather() -> list[QuotaEntry]:
        async with open_cluster(bootstrap_server) as cluster:
            return await describe_client_quotas(cluster, entity or None)

    entries = run(gather)
    if output_format == "json":
        echo_json([{"entity": e.entity, "values": e.values} for e in entries])
        return
    if not entries:
        click.echo("No client quotas.")
        return
    rows = [["ENTITY", "QUOTA", "VALUE"]]
    for entry in entries:
        for key, value in sorted(entry.values.items()):
            rows.append([describe_entity(entry.entity), key, f"{value:.15g}"])
    echo_table(rows)


@quotas.command("set")
@bootstrap_option
@_entity_options
@click.argument("values", nargs=-1, required=True, metavar="KEY=VALUE...")
def set_quotas(
    *,
    bootstrap_server: str,
    user: str | None,
    user_default: bool,
    client_id: str | None,
    client_id_default: bool,
    values: tuple[str, ...],
) -> None:
    """Set quotas of an entity, e.g. ``producer_byte_rate=1048576``."""
    entity = _entity(user, user_default, client_id, client_id_default)
    if not entity:
        raise click.UsageError("name a user and/or a client id")
    parsed: dict[str, float] = {}
    for item in values:
        key, separator, text = item.partition("=")
        if not separator or key not in QUOTA_KEYS:
            raise click.UsageError(
                f"{item!r}: expected KEY=VALUE with KEY one of {', '.join(QUOTA_KEYS)}"
            )
        try:
            parsed[key] = float(text)
        except ValueError:
            raise click.UsageError(f"{item!r}: {text!r} is not a number") from None

    async def alter() -> None:
        async with open_cluster(bootstrap_server) as cluster:
            await alter_client_quotas(cluster, entity, set_values=parsed)

    run(alter)
    click.echo(f"Set {', '.join(values)} for {describe_entity(entity)}.")


@quotas.command("remove")
@bootstrap_option
@_entity_options
@click.argument("keys", nargs=-1, metavar="[KEY]...")
def remove_quotas(
    *,
    bootstrap_server: str,
    user: str | None,
    user_default: bool,
    client_id: str | None,
    client_id_default: bool,
    keys: tuple[str, ...],
) -> None:
    """Remove quotas of an entity (all of them when no KEY is named)."""
    entity = _entity(user, user_default, client_id, client_id_default)
    if not entity:
        raise click.UsageError("name a user and/or a client id")

    async def alter() -> list[str]:
        async with open_cluster(bootstrap_server) as cluster:
            removed = list(keys)
            if not removed:
                found = await describe_client_quotas(cluster, entity)
                removed = sorted({k for e in found if e.entity == dict(entity) for k in e.values})
            if removed:
                await alter_client_quotas(cluster, entity, remove=removed)
            return removed

    removed = run(alter)
    if removed:
        click.echo(f"Removed {', '.join(removed)} for {describe_entity(entity)}.")
    else:
        click.echo(f"No quotas set for {describe_entity(entity)}.")
