"""``sluice schemas``: the subjects and schemas of a Schema Registry (Sluice's, which every
broker serves, or any registry speaking Confluent's REST API), through
:mod:`sluice.client.schema_registry`.

::

    sluice schemas register orders-value order.avsc
    sluice schemas check orders-value order-v2.avsc
    sluice schemas list
    sluice schemas get orders-value --version 2
    sluice schemas config orders-value --set FULL
    sluice schemas delete orders-value --permanent

Every subcommand takes ``--registry URL`` (env SLUICE_SCHEMA_REGISTRY_URL; several
comma-separated URLs are tried in turn), ``--registry-user USER:PASSWORD`` (env
SLUICE_SCHEMA_REGISTRY_USER: HTTP basic auth, on Sluice a SCRAM user) and
``--registry-ca-file PATH`` (env SLUICE_SCHEMA_REGISTRY_CA_LOCATION: the CA of an
``https`` registry, else the system's CAs are trusted). A registry's refusal is printed
as one line with its error code and a hint; the exit code is 1 (``check`` also exits 1
when the schema is incompatible, for scripts and CI).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Coroutine, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Any, Final, TypeVar

import click

from sluice.cli.common import echo_json, echo_table, format_option, run
from sluice.client.schema_registry import (
    DEFAULT_REGISTRY_URL,
    RegisteredSchema,
    Schema,
    SchemaRegistryClient,
    SchemaRegistryError,
)
from sluice.client.tls import TlsSettings
from sluice.common.config import SCHEMA_COMPATIBILITY_LEVELS
from sluice.registry.errors import ErrorCode
from sluice.registry.records import MODES
from sluice.schemas.api import Reference, SchemaType

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

REGISTRY_ENV_VAR: Final = "SLUICE_SCHEMA_REGISTRY_URL"
REGISTRY_USER_ENV_VAR: Final = "SLUICE_SCHEMA_REGISTRY_USER"
REGISTRY_CA_ENV_VAR: Final = "SLUICE_SCHEMA_REGISTRY_CA_LOCATION"

SCHEMA_FILE_BYTES_MAX: Final = 16 * 1024 * 1024
"""The largest schema file read (a registry keeps schemas far smaller)."""

SUBJECTS_DESCRIBED_AT_ONCE: Final = 16
"""Requests ``list`` keeps in flight while it asks each subject's latest version."""


TYPES_BY_EXTENSION: Final = {
    ".avsc": SchemaType.AVRO,
    ".json": SchemaType.JSON,
    ".proto": SchemaType.PROTOBUF,
}
TYPE_NAMES: Final = {
    "avro": SchemaType.AVRO,
    "json": SchemaType.JSON,
    "protobuf": SchemaType.PROTOBUF,
}

_INCOMPATIBLE_HINT: Final = (
    "see why with `sluice schemas check SUBJECT FILE`, or change the "
    "subject's level with `sluice schemas config SUBJECT --set LEVEL`"
)
_HINTS: Final[dict[int, str]] = {
    ErrorCode.SUBJECT_NOT_FOUND: "list subjects with `sluice schemas list`",
    ErrorCode.VERSION_NOT_FOUND: "see the subject's versions with `sluice schemas list`",
    ErrorCode.INCOMPATIBLE_SCHEMA: _INCOMPATIBLE_HINT,
    HTTPStatus.CONFLICT: _INCOMPATIBLE_HINT,  # the status (and Confluent 7.x's code)
    ErrorCode.INVALID_SCHEMA: "check the file, its --type and its --reference options",
    HTTPStatus.UNAUTHORIZED: "give a user with --registry-user USER:PASSWORD",
    HTTPStatus.FORBIDDEN: "the user may not do this: ask for the ACL on the subject's topic",
}
"""Hints by Confluent's error code (:class:`~sluice.registry.errors.ErrorCode`, the
registry's one table), else by HTTP status."""


# ── options and running ────────────────────────────────────────────────────────────────


def registry_options(function: F) -> F:
    """``--registry``, ``--registry-user`` and ``--registry-ca-file``, with their
    environment variables, as the keywords ``registry``, ``registry_user`` and
    ``registry_ca_file``."""
    for option in reversed(
        (
            click.option(
                "--registry",
                envvar=REGISTRY_ENV_VAR,
                default=DEFAULT_REGISTRY_URL,
                show_default=True,
                show_envvar=True,
                metavar="URL",
                help="The Schema Registry (every Sluice broker serves one); "
                "several URLs comma-separated are tried in turn.",
            ),
            click.option(
                "--registry-user",
                envvar=REGISTRY_USER_ENV_VAR,
                show_envvar=True,
                metavar="USER:PASSWORD",
                help="HTTP basic credentials for the registry (on Sluice: a SCRAM user).",
            ),
            click.option(
                "--registry-ca-file",
                envvar=REGISTRY_CA_ENV_VAR,
                show_envvar=True,
                metavar="PATH",
                help="CA certificate(s) (PEM) an https registry's certificate is checked "
                "against (default: the system's).",
            ),
        )
    ):
        function = option(function)
    return function


def open_registry(
    registry: str, registry_user: str | None, registry_ca_file: str | None
) -> SchemaRegistryClient:
    """The client the options describe; a usage error saying which option is wrong."""
    try:
        tls = TlsSettings(cafile=registry_ca_file) if registry_ca_file else None
    except ValueError as e:
        raise click.UsageError(f"--registry-ca-file: {e}") from None
    try:
        return SchemaRegistryClient(registry, user_info=registry_user, tls=tls)
    except ValueError as e:
        name = "--registry-user" if "user:password" in str(e) else "--registry"
        raise click.UsageError(f"{name}: {e}") from None


def registry_failure(error: SchemaRegistryError) -> click.ClickException:
    """A registry's failure as one line, with a hint when one helps."""
    if error.status is None and error.error_code is None:
        return click.ClickException(
            f"{error} (is a broker running with schema.registry.listeners? "
            f"point --registry or {REGISTRY_ENV_VAR} at it)"
        )
    hint = _HINTS.get(error.error_code or 0) or _HINTS.get(error.status or 0)
    details = [f"error code {error.error_code}"] if error.error_code is not None else []
    if hint:
        details.append(hint)
    return click.ClickException(
        f"{error.message} ({'; '.join(details)})" if details else error.message
    )


def run_registry(coroutine_function: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a command's coroutine; a registry's failure is one line and exit code 1."""

    async def guarded() -> T:
        try:
            return await coroutine_function()
        except SchemaRegistryError as e:
            raise registry_failure(e) from None

    return run(guarded)


def _parse_reference(text: str) -> Reference:
    name, separator, target = text.rpartition("=")
    subject, colon, version = target.rpartition(":")
    if not separator or not name or not colon or not subject or not version.isdigit():
        raise click.UsageError(
            f"--reference expects NAME=SUBJECT:VERSION, got {text!r} "
            "(e.g. --reference com.example.Address=address-value:1)"
        )
    return Reference(name, subject, int(version))


def read_schema(path: str, type_name: str | None, references: Sequence[str]) -> Schema:
    """The schema in the file at ``path`` ('-': standard input), of ``--type`` or of
    the type its extension names."""
    if type_name is not None:
        schema_type = TYPE_NAMES[type_name.lower()]
    elif Path(path).suffix.lower() in TYPES_BY_EXTENSION:
        schema_type = TYPES_BY_EXTENSION[Path(path).suffix.lower()]
    else:
        raise click.UsageError(
            f"cannot tell the schema type of {path!r} from its name: give --type avro, json "
            "or protobuf (or name it .avsc, .json or .proto)"
        )
    try:
        if path == "-":
            data = sys.stdin.buffer.read(SCHEMA_FILE_BYTES_MAX + 1)
        else:
            with open(path, "rb") as file:
                data = file.read(SCHEMA_FILE_BYTES_MAX + 1)
    except OSError as e:
        raise click.UsageError(f"cannot read the schema file {path!r}: {e.strerror}") from None
    if len(data) > SCHEMA_FILE_BYTES_MAX:
        raise click.UsageError(f"{path!r} is larger than {SCHEMA_FILE_BYTES_MAX} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise click.UsageError(f"{path!r} is not UTF-8 text (byte {e.start})") from None
    if not text.strip():
        raise click.UsageError(f"{path!r} is empty")
    return Schema(text, schema_type, tuple(_parse_reference(r) for r in references))


def pretty_schema_text(schema: Schema) -> str:
    """The schema as a person reads it: JSON (Avro, JSON Schema) indented, Protobuf's
    ``.proto`` text as it is."""
    if schema.schema_type is SchemaType.PROTOBUF:
        return schema.text.rstrip("\n")
    try:
        return json.dumps(json.loads(schema.text), indent=2, ensure_ascii=False)
    except ValueError:
        return schema.text


def _references_document(schema: Schema) -> list[dict[str, Any]]:
    return [{"name": r.name, "subject": r.subject, "version": r.version} for r in schema.references]


def _version_document(found: RegisteredSchema) -> dict[str, Any]:
    return {
        "subject": found.subject,
        "version": found.version,
        "id": found.schema_id,
        "schema_type": found.schema.schema_type.value,
        "references": _references_document(found.schema),
        "schema": found.schema.text,
    }


def _check_version(
    _context: click.Context, _parameter: click.Parameter, value: str | None
) -> str | None:
    if value is None or value == "latest" or value.isdigit() or value == "-1":
        return value
    raise click.BadParameter(f"{value!r} is not a version number or 'latest'")


schema_file_argument = click.argument("schema_file", metavar="FILE")
type_option = click.option(
    "--type",
    "type_name",
    type=click.Choice(list(TYPE_NAMES), case_sensitive=False),
    help="The schema's type (default: from FILE's extension, .avsc, .json or .proto).",
)
reference_option = click.option(
    "--reference",
    "references",
    multiple=True,
    metavar="NAME=SUBJECT:VERSION",
    help="A schema the file references, as it names it (an Avro type's full name, a JSON "
    "Schema $ref, a Protobuf import); repeatable.",
)
normalize_option = click.option(
    "--normalize", is_flag=True, help="Have the registry normalize the schema first."
)


@click.group()
def schemas() -> None:
    """Register, check, list, show and delete schemas in the Schema Registry; set
    compatibility levels and modes."""


# ── list ───────────────────────────────────────────────────────────────────────────────


@schemas.command(name="list")
@click.option("--prefix", metavar="PREFIX", help="Only subjects starting with PREFIX.")
@click.option("--deleted", is_flag=True, help="Include soft-deleted subjects and versions.")
@format_option
@registry_options
def list_subjects(
    *,
    prefix: str | None,
    deleted: bool,
    output_format: str,
    registry: str,
    registry_user: str | None,
    registry_ca_file: str | None,
) -> None:
    """List subjects with their versions and latest schema."""

    async def described() -> list[tuple[str, list[int], RegisteredSchema | None]]:
        async with open_registry(registry, registry_user, registry_ca_file) as client:
            names = sorted(await client.subjects(prefix=prefix, deleted=deleted))
            limit = asyncio.Semaphore(SUBJECTS_DESCRIBED_AT_ONCE)

            async def describe(name: str) -> tuple[str, list[int], RegisteredSchema | None]:
                async with limit:
                    try:
                        versions = await client.versions(name, deleted=deleted)
                        latest = await client.version(name, "latest", deleted=deleted)
                    except SchemaRegistryError as e:
                        if e.error_code not in (
                            ErrorCode.SUBJECT_NOT_FOUND,
                            ErrorCode.VERSION_NOT_FOUND,
                        ):
                            raise
                        return name, [], None  # deleted meanwhile
                    return name, versions, latest

            return list(await asyncio.gather(*(describe(name) for name in names)))

    listed = [row for row in run_registry(described) if row[2] is not None]
    if output_format == "json":
        echo_json(
            [
                {
                    "subject": name,
                    "versions": versions,
                    "latest_version": latest.version,
                    "id": latest.schema_id,
                    "schema_type": latest.schema.schema_type.value,
                }
                for name, versions, latest in listed
                if latest is not None
            ]
        )
        return
    if not listed:
        click.echo("No subjects." if prefix is None else f"No subject starts with {prefix!r}.")
        return
    rows = [["SUBJECT", "TYPE", "VERSIONS", "LATEST", "ID"]]
    for name, versions, latest in listed:
        assert latest is not None
        rows.append(
            [
                name,
                latest.schema.schema_type.value,
                ",".join(map(str, versions)),
                str(latest.version),
                str(latest.schema_id),
            ]
        )
    echo_table(rows)


# ── get ────────────────────────────────────────────────────────────────────────────────


@schemas.command()
@click.argument("subject", required=False)
@click.option(
    "--version",
    metavar="N|latest",
    callback=_check_version,
    help="The subject's version to show.  [default: latest]",
)
@click.option("--id", "schema_id", type=click.IntRange(min=0), help="Show the schema with this id.")
@click.option("--deleted", is_flag=True, help="Also find a soft-deleted version.")
@click.option(
    "--schema-only", is_flag=True, help="Print only the schema's text, as stored (for a file)."
)
@format_option
@registry_options
def get(
    *,
    subject: str | None,
    version: str | None,
    schema_id: int | None,
    deleted: bool,
    schema_only: bool,
    output_format: str,
    registry: str,
    registry_user: str | None,
    registry_ca_file: str | None,
) -> None:
    """Show a version of SUBJECT (its latest by default), or the schema with --id."""
    if (subject is None) == (schema_id is None):
        raise click.UsageError("give a SUBJECT or --id ID (one of them)")
    if schema_id is not None and (version is not None or deleted):
        raise click.UsageError("--id names one schema: it takes no --version or --deleted")

    async def found() -> tuple[Schema, dict[str, Any]]:
        async with open_registry(registry, registry_user, registry_ca_file) as client:
            if schema_id is not None:
                schema = await client.schema(schema_id)
                holders = await client.subject_versions(schema_id)
                return schema, {
                    "id": schema_id,
                    "schema_type": schema.schema_type.value,
                    "references": _references_document(schema),
                    "subjects": [{"subject": h.subject, "version": h.version} for h in holders],
                    "schema": schema.text,
                }
            assert subject is not None
            registered = await client.version(subject, version or "latest", deleted=deleted)
            return registered.schema, _version_document(registered)

    schema, document = run_registry(found)
    if schema_only:
        click.echo(schema.text.rstrip("\n"))
        return
    if output_format == "json":
        echo_json(document)
        return
    if "subject" in document:
        click.echo(f"Subject: {document['subject']}")
        click.echo(f"Version: {document['version']}")
    click.echo(f"Id: {document['id']}")
    click.echo(f"Type: {schema.schema_type.value}")
    for holder in document.get("subjects", []):
        click.echo(f"Registered as: {holder['subject']} version {holder['version']}")
    for reference in schema.references:
        click.echo(f"Reference: {reference.name} = {reference.subject} version {reference.version}")
    click.echo("")
    click.echo(pretty_schema_text(schema))


# ── register and check ─────────────────────────────────────────────────────────────────


@schemas.command()
@click.argument("subject")
@schema_file_argument
@type_option
@reference_option
@normalize_option
@format_option
@registry_options
def register(
    *,
    subject: str,
    schema_file: str,
    type_name: str | None,
    references: Sequence[str],
    normalize: bool,
    output_format: str,
    registry: str,
    registry_user: str | None,
    registry_ca_file: str | None,
) -> None:
    """Register the schema in FILE ('-': standard input) under SUBJECT. Registering a
    schema the subject holds already answers its version again."""
    schema = read_schema(schema_file, type_name, references)

    async def registered() -> tuple[int, int | None, bool]:
        async with open_registry(registry, registry_user, registry_ca_file) as client:
            try:
                before = set(await client.versions(subject))
            except SchemaRegistryError as e:
                if e.error_code != ErrorCode.SUBJECT_NOT_FOUND:
                    raise
                before = set()
            schema_id = await client.register(subject, schema, normalize=normalize)
            try:
                version = (await client.lookup(subject, schema, normalize=normalize)).version
            except SchemaRegistryError:
                return schema_id, None, False  # registered; only its version is unknown
            return schema_id, version, version in before

    schema_id, version, existed = run_registry(registered)
    if output_format == "json":
        echo_json({"subject": subject, "id": schema_id, "version": version, "new": not existed})
        return
    shown = f"version {version}" if version is not None else "a version"
    if existed:
        click.echo(f"{subject} already holds this schema as {shown} (id {schema_id}).")
    else:
        click.echo(f"Registered {subject} {shown} with id {schema_id}.")


@schemas.command()
@click.argument("subject")
@schema_file_argument
@type_option
@reference_option
@click.option(
    "--version",
    metavar="N|latest",
    callback=_check_version,
    help="Check against this version only (default: the versions the level says).",
)
@normalize_option
@format_option
@registry_options
def check(
    *,
    subject: str,
    schema_file: str,
    type_name: str | None,
    references: Sequence[str],
    version: str | None,
    normalize: bool,
    output_format: str,
    registry: str,
    registry_user: str | None,
    registry_ca_file: str | None,
) -> None:
    """Check whether the schema in FILE could be registered under SUBJECT, as its
    compatibility level says; exit 1 when it could not, printing why."""
    schema = read_schema(schema_file, type_name, references)

    async def checked() -> tuple[bool, tuple[str, ...]]:
        async with open_registry(registry, registry_user, registry_ca_file) as client:
            outcome = await client.check_compatibility(
                subject, schema, version=version, normalize=normalize
            )
            return outcome.is_compatible, outcome.messages

    compatible, messages = run_registry(checked)
    if output_format == "json":
        echo_json({"subject": subject, "is_compatible": compatible, "messages": list(messages)})
    elif compatible:
        click.echo(f"Compatible with {subject}.")
    else:
        click.echo(f"Incompatible with {subject}:")
        for message in messages or ("(the registry gave no reason)",):
            click.echo(f"  {message}")
    if not compatible:
        sys.exit(1)


# ── delete ─────────────────────────────────────────────────────────────────────────────


@schemas.command()
@click.argument("subject")
@click.option(
    "--version",
    metavar="N|latest",
    callback=_check_version,
    help="Delete only this version (default: every version of SUBJECT).",
)
@click.option(
    "--permanent",
    is_flag=True,
    help="Delete for good (soft-deleting first where needed); the ids are freed of "
    "this subject but never reused.",
)
@registry_options
def delete(
    *,
    subject: str,
    version: str | None,
    permanent: bool,
    registry: str,
    registry_user: str | None,
    registry_ca_file: str | None,
) -> None:
    """Delete SUBJECT, or one --version of it: soft (readers with --deleted still see
    it, and its ids keep decoding) unless --permanent."""

    async def deleted() -> list[int]:
        async with open_registry(registry, registry_user, registry_ca_file) as client:

            async def delete_once(for_good: bool) -> list[int]:
                if version is None:
                    return await client.delete_subject(subject, permanent=for_good)
                return [await client.delete_version(subject, version, permanent=for_good)]

            if not permanent:
                return await delete_once(False)
            try:
                return await delete_once(True)
            except SchemaRegistryError as e:
                if e.error_code not in (
                    ErrorCode.SUBJECT_NOT_SOFT_DELETED,
                    ErrorCode.VERSION_NOT_SOFT_DELETED,
                ):
                    raise
            # The registry deletes for good only what was soft-deleted first.
            await delete_once(False)
            return await delete_once(True)

    versions = run_registry(deleted)
    listed = ", ".join(map(str, versions)) or "none"
    if permanent:
        click.echo(f"Deleted {subject} for good: version(s) {listed}.")
    else:
        click.echo(
            f"Soft-deleted {subject}: version(s) {listed} (see them with --deleted; "
            "remove them for good with --permanent)."
        )


# ── config and mode ────────────────────────────────────────────────────────────────────


@schemas.command()
@click.argument("subject", required=False)
@click.option(
    "--set",
    "level",
    type=click.Choice(sorted(SCHEMA_COMPATIBILITY_LEVELS), case_sensitive=False),
    help="Set the compatibility level (of SUBJECT, else the registry's default).",
)
@click.option(
    "--delete",
    "remove",
    is_flag=True,
    help="Remove SUBJECT's own level: it follows the registry's default again.",
)
@format_option
@registry_options
def config(
    *,
    subject: str | None,
    level: str | None,
    remove: bool,
    output_format: str,
    registry: str,
    registry_user: str | None,
    registry_ca_file: str | None,
) -> None:
    """Show or set the compatibility level of SUBJECT, or the registry's default."""
    if remove and (subject is None or level is not None):
        raise click.UsageError("--delete needs a SUBJECT and no --set")

    async def configured() -> tuple[str, bool]:
        """(the level, whether it is the subject's own)"""
        async with open_registry(registry, registry_user, registry_ca_file) as client:
            if level is not None:
                return await client.set_compatibility_level(level.upper(), subject), True
            if remove:
                assert subject is not None
                return await client.delete_compatibility_level(subject), True
            return await _own_or_registrys(
                subject, client.compatibility_level, ErrorCode.SUBJECT_COMPATIBILITY_NOT_CONFIGURED
            )

    found, own = run_registry(configured)
    scope = "the registry's default" if subject is None else subject
    if output_format == "json":
        echo_json({"subject": subject, "compatibility_level": found, "own": own})
    elif level is not None:
        click.echo(f"Set the compatibility level of {scope} to {found}.")
    elif remove:
        click.echo(f"Removed {subject}'s own level ({found}); it follows the default again.")
    elif own:
        click.echo(f"{scope}: {found}")
    else:
        click.echo(f"{scope}: {found} (the registry's default; it has no level of its own)")


async def _own_or_registrys(
    subject: str | None,
    read: Callable[[str | None], Coroutine[Any, Any, str]],
    not_configured: ErrorCode,
) -> tuple[str, bool]:
    """SUBJECT's own compatibility level or mode, else the registry's, and whether it was
    the subject's own (the registry answers ``not_configured`` for a subject without one)."""
    if subject is None:
        return await read(None), True
    try:
        return await read(subject), True
    except SchemaRegistryError as e:
        if e.error_code != not_configured:
            raise
    return await read(None), False


@schemas.command()
@click.argument("subject", required=False)
@click.option(
    "--set",
    "new_mode",
    type=click.Choice(MODES, case_sensitive=False),
    help="Set the mode (of SUBJECT, else of the registry).",
)
@click.option("--delete", "remove", is_flag=True, help="Remove SUBJECT's own mode.")
@click.option("--force", is_flag=True, help="IMPORT even though schemas exist already.")
@format_option
@registry_options
def mode(
    *,
    subject: str | None,
    new_mode: str | None,
    remove: bool,
    force: bool,
    output_format: str,
    registry: str,
    registry_user: str | None,
    registry_ca_file: str | None,
) -> None:
    """Show or set the mode (READWRITE, READONLY, IMPORT) of SUBJECT or the registry."""
    if remove and (subject is None or new_mode is not None):
        raise click.UsageError("--delete needs a SUBJECT and no --set")

    async def moded() -> tuple[str, bool]:
        async with open_registry(registry, registry_user, registry_ca_file) as client:
            if new_mode is not None:
                return await client.set_mode(new_mode.upper(), subject, force=force), True
            if remove:
                assert subject is not None
                return await client.delete_mode(subject), True
            return await _own_or_registrys(
                subject, client.mode, ErrorCode.SUBJECT_MODE_NOT_CONFIGURED
            )

    found, own = run_registry(moded)
    scope = "the registry" if subject is None else subject
    if output_format == "json":
        echo_json({"subject": subject, "mode": found, "own": own})
    elif new_mode is not None:
        click.echo(f"Set the mode of {scope} to {found}.")
    elif remove:
        click.echo(f"Removed {subject}'s own mode ({found}).")
    elif own:
        click.echo(f"{scope}: {found}")
    else:
        click.echo(f"{scope}: {found} (the registry's; it has no mode of its own)")
