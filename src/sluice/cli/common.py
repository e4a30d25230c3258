"""What every client subcommand shares: the bootstrap option, running a coroutine, and
turning failures into one-line messages with a non-zero exit code (never a traceback).

Exit codes: 0 success, 1 an operation failed (broker down, topic missing, refused),
2 bad usage (click's own, also used for malformed ``k=v`` and unknown configs),
130 interrupted with Ctrl-C.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import os
import sys
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import click

from sluice.client.cluster import DEFAULT_BOOTSTRAP, Cluster, TopicMetadata, parse_bootstrap
from sluice.client.connection import SaslSettings
from sluice.client.errors import ClientError
from sluice.client.security import SecurityOptions, security_from_options
from sluice.client.tls import TlsSettings
from sluice.common import errors
from sluice.common.config import TOPIC_CONFIG_KEYS, parse_topic_configs
from sluice.common.errors import ErrorCode, KafkaError

BOOTSTRAP_ENV_VAR = "SLUICE_BOOTSTRAP_SERVER"
EXIT_INTERRUPTED = 130
"""Shell convention for a process ended by SIGINT (128 + 2)."""

CLIENT_ID = "sluice-cli"

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def _check_bootstrap(_context: click.Context, _parameter: click.Parameter, value: str) -> str:
    try:
        parse_bootstrap(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    return value


def bootstrap_option(function: F) -> F:
    """``--bootstrap-server``/``-b host:port[,host:port...]`` (env SLUICE_BOOTSTRAP_SERVER);
    ``-b`` as kcat and rpk spell it."""
    return click.option(
        "--bootstrap-server",
        "-b",
        "bootstrap_server",
        envvar=BOOTSTRAP_ENV_VAR,
        default=DEFAULT_BOOTSTRAP,
        show_default=True,
        show_envvar=True,
        metavar="HOST:PORT",
        callback=_check_bootstrap,
        help="Broker(s) to connect to first, comma-separated.",
    )(function)


SASL_ENV_VARS = ("SLUICE_SASL_MECHANISM", "SLUICE_SASL_USERNAME", "SLUICE_SASL_PASSWORD")
"""With these set, every command authenticates (SASL_PLAINTEXT, or SASL_SSL)."""

SECURITY_ENV_VARS = {
    "security_protocol": "SLUICE_SECURITY_PROTOCOL",
    "ssl_cafile": "SLUICE_SSL_CA_LOCATION",
    "ssl_certfile": "SLUICE_SSL_CERTIFICATE_LOCATION",
    "ssl_keyfile": "SLUICE_SSL_KEY_LOCATION",
    "ssl_password": "SLUICE_SSL_KEY_PASSWORD",
    "ssl_check_hostname": "SLUICE_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM",
    "sasl_mechanism": "SLUICE_SASL_MECHANISM",
    "sasl_plain_username": "SLUICE_SASL_USERNAME",
    "sasl_plain_password": "SLUICE_SASL_PASSWORD",
}
"""The client's security options and the variables that set them for every command
(named after librdkafka's properties: ``security.protocol``, ``ssl.ca.location``, ...)."""


def security_options_from_environment() -> SecurityOptions:
    """The client's security keywords (``security_protocol``, ``ssl_*``, ``sasl_*``) as
    the SLUICE_SECURITY_PROTOCOL, SLUICE_SSL_* and SLUICE_SASL_* variables give them; a
    usage error naming the variable when they do not fit together. Without
    SLUICE_SECURITY_PROTOCOL, the SASL variables alone mean SASL_PLAINTEXT and no
    variables PLAINTEXT."""
    values = {option: os.environ.get(name) or None for option, name in SECURITY_ENV_VARS.items()}
    mechanism, username, password = (os.environ.get(name) or None for name in SASL_ENV_VARS)
    if (mechanism or username or password) and not (mechanism and username and password):
        raise click.UsageError(f"SASL needs all of {', '.join(SASL_ENV_VARS)}")
    protocol = values.pop("security_protocol") or ("SASL_PLAINTEXT" if mechanism else "PLAINTEXT")
    identification = (values.pop("ssl_check_hostname") or "https").lower()
    if identification not in ("https", "none"):
        raise click.UsageError(
            f"{SECURITY_ENV_VARS['ssl_check_hostname']} must be https (check the broker's "
            f"certificate names its host) or none, not {identification!r}"
        )
    options: SecurityOptions = {
        "security_protocol": protocol,
        "ssl_cafile": values["ssl_cafile"],
        "ssl_certfile": values["ssl_certfile"],
        "ssl_keyfile": values["ssl_keyfile"],
        "ssl_password": values["ssl_password"],
        "ssl_check_hostname": identification == "https",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": username,
        "sasl_plain_password": password,
    }
    security_settings(options)  # refuse options that do not fit together now
    return options


def security_settings(options: SecurityOptions) -> tuple[TlsSettings | None, SaslSettings | None]:
    """The TLS and SASL settings of ``options``; a usage error naming the variable that
    sets a bad one."""
    try:
        return security_from_options(**options)
    except ValueError as e:
        message = str(e)
        for option, name in SECURITY_ENV_VARS.items():
            message = message.replace(option, name)
        raise click.UsageError(message) from None


def security_from_environment() -> tuple[TlsSettings | None, SaslSettings | None]:
    """The TLS and SASL settings the SLUICE_SECURITY_PROTOCOL, SLUICE_SSL_* and
    SLUICE_SASL_* variables give (:func:`security_options_from_environment`)."""
    return security_settings(security_options_from_environment())


def open_cluster(bootstrap_server: str) -> Cluster:
    """A :class:`Cluster` for the CLI (lazy: nothing connects until first used),
    with TLS and SASL as the SLUICE_SECURITY_PROTOCOL, SLUICE_SSL_* and SLUICE_SASL_*
    variables say."""
    tls, sasl = security_from_environment()
    return Cluster(bootstrap_server, client_id=CLIENT_ID, sasl=sasl, tls=tls)


# ── k=v options ────────────────────────────────────────────────────────────────────────


def parse_key_value(text: str, option: str) -> tuple[str, str]:
    """Split ``k=v`` (the value may contain '='); a usage error names the bad entry."""
    key, separator, value = text.partition("=")
    if not separator or not key:
        raise click.UsageError(
            f"{option} expects key=value, got {text!r} (e.g. {option} retention.ms=60000)"
        )
    return key, value


def parse_key_values(texts: Iterable[str], option: str) -> dict[str, str]:
    """Parse repeated ``k=v`` options into a dict (later entries win)."""
    return dict(parse_key_value(text, option) for text in texts)


def unknown_config_message(name: str) -> str:
    """Why ``name`` is not a topic config, with the closest names as suggestions."""
    close = difflib.get_close_matches(name, TOPIC_CONFIG_KEYS, n=1)
    if close:
        hint = f"did you mean {close[0]!r}?"
    else:
        hint = "known configs: " + ", ".join(sorted(TOPIC_CONFIG_KEYS))
    return f"unknown topic config {name!r} ({hint})"


def check_topic_config_names(names: Iterable[str]) -> None:
    """Refuse names that are not topic configs, before anything is sent."""
    for name in names:
        if name not in TOPIC_CONFIG_KEYS:
            raise click.UsageError(unknown_config_message(name))


def check_topic_configs(configs: Mapping[str, str]) -> None:
    """Refuse unknown names and values out of range, before anything is sent."""
    check_topic_config_names(configs)
    try:
        parse_topic_configs(configs)
    except KafkaError as e:
        detail = str(e).removeprefix(f"{e.code.name.upper()}: ")
        raise click.UsageError(f"bad topic config {detail}") from None


# ── running and failing ────────────────────────────────────────────────────────────────


def error_message(error: BaseException) -> str:
    """A one-line explanation of a failure, with a hint when one helps."""
    if isinstance(error, ClientError):
        return str(error)
    if isinstance(error, KafkaError):
        detail = str(error).removeprefix(f"{error.code.name.upper()}: ")
        code = error.code
        if code == ErrorCode.unknown_topic_or_partition:
            return f"{detail} (list topics with `sluice topics list`)"
        if code == ErrorCode.topic_already_exists:
            return f"{detail} (see it with `sluice topics describe`)"
        if code == ErrorCode.invalid_config:
            return f"invalid config: {detail}"
        if code == ErrorCode.offset_out_of_range:
            return f"{detail} (use --from-beginning, or an offset inside the partition)"
        if code in (ErrorCode.invalid_partitions, ErrorCode.invalid_replication_factor):
            return f"{code.name.replace('_', ' ')}: {detail}"
        return f"broker refused: {error}"
    return f"{type(error).__name__}: {error}"


def fail(error: BaseException) -> click.ClickException:
    """The click exception that prints ``error`` as one line and exits with status 1."""
    return click.ClickException(error_message(error))


def run(coroutine_function: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the command's coroutine; print failures as one line, never a traceback."""
    try:
        return asyncio.run(coroutine_function())
    except (ClientError, KafkaError) as e:
        raise fail(e) from None
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        # The reader of our output went away (e.g. `| head`): stop quietly, and keep
        # Python from complaining while flushing stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)


def topic_missing(name: str) -> click.ClickException:
    """The error for a topic that does not exist."""
    return click.ClickException(
        f"topic {name!r} does not exist (create it with `sluice topics create {name}`, "
        "or list topics with `sluice topics list`)"
    )


def raise_if_unknown_topic(error: KafkaError, name: str) -> None:
    """Re-raise an UnknownTopicOrPartition about ``name`` as :func:`topic_missing`."""
    if isinstance(error, errors.UnknownTopicOrPartition):
        raise topic_missing(name) from None


def check_partition(metadata: TopicMetadata, partition: int | None) -> None:
    """Refuse a ``--partition`` the topic does not have."""
    if partition is None or any(p.partition == partition for p in metadata.partitions):
        return
    count = len(metadata.partitions)
    raise click.ClickException(
        f"topic {metadata.name!r} has no partition {partition} "
        f"(it has {count} partition(s), numbered 0-{count - 1})"
    )


def echo_table(rows: Sequence[Sequence[str]]) -> None:
    """Rows of cells as aligned columns, indented by two spaces."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        click.echo(
            "  "
            + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def echo_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))


format_option = click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: a table; json: one JSON document.",
)
