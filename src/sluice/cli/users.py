"""``sluice users``: SCRAM users (create, list, passwd, delete) through
AlterUserScramCredentials and DescribeUserScramCredentials, as Kafka's ``kafka-configs
--entity-type users`` manages them. The password is read from standard input
(``--password-stdin``) or prompted for, salted and hashed here, and never sent."""

from __future__ import annotations

import sys

import click

from sluice.cli.common import (
    bootstrap_option,
    echo_json,
    echo_table,
    format_option,
    open_cluster,
    run,
)
from sluice.client.admin_users import (
    ScramCredentialInfo,
    delete_credential,
    describe_users,
    set_password,
)
from sluice.common import errors
from sluice.protocol.sasl import (
    SCRAM_ITERATIONS_DEFAULT,
    SCRAM_ITERATIONS_MAX,
    SCRAM_ITERATIONS_MIN,
    ScramMechanism,
)

MECHANISM_NAMES = [mechanism.mechanism_name for mechanism in ScramMechanism]

mechanism_option = click.option(
    "--mechanism",
    "mechanisms",
    type=click.Choice(MECHANISM_NAMES, case_sensitive=False),
    multiple=True,
    help="SCRAM mechanism; repeatable. create: SCRAM-SHA-512 unless given; passwd and "
    "delete: every mechanism the user has unless given.",
)
password_stdin_option = click.option(
    "--password-stdin",
    is_flag=True,
    help="Read the password from the first line of standard input (else it is prompted for).",
)
iterations_option = click.option(
    "--iterations",
    type=click.IntRange(SCRAM_ITERATIONS_MIN, SCRAM_ITERATIONS_MAX),
    default=SCRAM_ITERATIONS_DEFAULT,
    show_default=True,
    help="PBKDF2 rounds of the stored credential.",
)


@click.group()
def users() -> None:
    """Create, list, change and delete SCRAM users (SASL SCRAM-SHA-256/512 and PLAIN)."""


def _password(from_stdin: bool) -> str:
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise click.UsageError("the password is empty")
    return password


def _mechanisms(names: tuple[str, ...]) -> list[ScramMechanism]:
    return [ScramMechanism.by_name(name.upper()) for name in dict.fromkeys(names)]


async def _existing(bootstrap_server: str, name: str) -> list[ScramMechanism]:
    async with open_cluster(bootstrap_server) as cluster:
        try:
            described = await describe_users(cluster, [name])
        except errors.ResourceNotFound:
            return []
    return [ScramMechanism.by_name(info.mechanism) for info in described.get(name, [])]


@users.command()
@click.argument("name")
@mechanism_option
@password_stdin_option
@iterations_option
@bootstrap_option
def create(
    *,
    name: str,
    mechanisms: tuple[str, ...],
    password_stdin: bool,
    iterations: int,
    bootstrap_server: str,
) -> None:
    """Create user NAME with a password (refused if NAME already has that mechanism)."""
    wanted = _mechanisms(mechanisms) or [ScramMechanism.SCRAM_SHA_512]
    password = _password(password_stdin)

    async def create_user() -> None:
        existing = await _existing(bootstrap_server, name)
        taken = [m.mechanism_name for m in wanted if m in existing]
        if taken:
            raise click.ClickException(
                f"user {name!r} already has {', '.join(taken)} credentials "
                f"(change the password with `sluice users passwd {name}`)"
            )
        async with open_cluster(bootstrap_server) as cluster:
            for mechanism in wanted:
                await set_password(cluster, name, password, mechanism, iterations=iterations)

    run(create_user)
    click.echo(f"created user {name} ({', '.join(m.mechanism_name for m in wanted)})")


@users.command()
@click.argument("name")
@mechanism_option
@password_stdin_option
@iterations_option
@bootstrap_option
def passwd(
    *,
    name: str,
    mechanisms: tuple[str, ...],
    password_stdin: bool,
    iterations: int,
    bootstrap_server: str,
) -> None:
    """Change the password of existing user NAME."""
    password = _password(password_stdin)

    async def change() -> list[ScramMechanism]:
        existing = await _existing(bootstrap_server, name)
        if not existing:
            raise click.ClickException(
                f"user {name!r} does not exist (create it with `sluice users create {name}`)"
            )
        wanted = _mechanisms(mechanisms) or existing
        async with open_cluster(bootstrap_server) as cluster:
            for mechanism in wanted:
                await set_password(cluster, name, password, mechanism, iterations=iterations)
        return wanted

    changed = run(change)
    click.echo(f"changed the password of {name} ({', '.join(m.mechanism_name for m in changed)})")


@users.command()
@click.argument("name")
@mechanism_option
@bootstrap_option
def delete(*, name: str, mechanisms: tuple[str, ...], bootstrap_server: str) -> None:
    """Delete user NAME's credentials (all of them unless --mechanism is given)."""

    async def remove() -> list[ScramMechanism]:
        existing = await _existing(bootstrap_server, name)
        wanted = _mechanisms(mechanisms) or existing
        missing = [m.mechanism_name for m in wanted if m not in existing]
        if not existing or missing:
            what = f"{', '.join(missing)} credentials" if existing else "credentials"
            raise click.ClickException(f"user {name!r} has no {what}")
        async with open_cluster(bootstrap_server) as cluster:
            for mechanism in wanted:
                await delete_credential(cluster, name, mechanism)
        return wanted

    removed = run(remove)
    click.echo(f"deleted user {name} ({', '.join(m.mechanism_name for m in removed)})")


@users.command(name="list")
@format_option
@bootstrap_option
def list_command(*, output_format: str, bootstrap_server: str) -> None:
    """List every SCRAM user with its mechanisms and iterations."""

    async def listing() -> dict[str, list[ScramCredentialInfo]]:
        async with open_cluster(bootstrap_server) as cluster:
            return await describe_users(cluster)

    described = run(listing)
    if output_format == "json":
        echo_json(
            {
                user: [{"mechanism": i.mechanism, "iterations": i.iterations} for i in infos]
                for user, infos in described.items()
            }
        )
        return
    if not described:
        click.echo("no users")
        return
    rows = [["USER", "MECHANISM", "ITERATIONS"]]
    for user, infos in described.items():
        rows.extend([user, info.mechanism, str(info.iterations)] for info in infos)
    echo_table(rows)
