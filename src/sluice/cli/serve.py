"""``sluice serve``: run one broker in the foreground until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import click
from aiohttp import web
from yarl import URL

from sluice.broker.app import ConsoleFactory, DataDirInUse
from sluice.broker.app import serve as run_broker
from sluice.broker.fatal import BrokerFatalError
from sluice.broker.meta_properties import MetaPropertiesError
from sluice.cluster.embedded import MetadataFileError
from sluice.common.config import BrokerConfig, BrokerConfigError, read_properties_file
from sluice.console import make_app

log = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if name == "asyncio":
        return None
    try:
        import uvloop  # noqa: PLC0415 - optional, imported only when asked for
    except ImportError:
        raise click.ClickException(
            "--event-loop uvloop needs the uvloop package: .venv/bin/pip install uvloop"
        ) from None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def _console_factory(config: BrokerConfig) -> ConsoleFactory | None:
    """The web console the broker serves at ``/`` of its HTTP listener (http.console).

    On a broker with SASL or ACLs the HTTP listener asks for credentials and the console
    acts as each caller, so it is served as ``http.console`` says. Its schema pages ask
    this broker's own Schema Registry (none when ``schema.registry.listeners`` is
    empty), as the same caller. On a broker whose only
    security is TLS the listener asks for none and the console would act as the broker
    (with its certificate), so it is off there unless ``http.console`` is given."""
    tls_only = not config.http_secured() and any(
        config.security_protocol(listener.name) != "PLAINTEXT"
        for listener in config.listener_list()
    )
    if tls_only and "http.console" not in config.static_names:
        log.info(
            "the web console is off on a broker whose only security is TLS: it would act "
            "as the broker for anyone reaching the HTTP port; -o http.console=read-only or "
            "=on serves it"
        )
        return None
    if config.http_console == "off":
        return None
    read_only = config.http_console == "read-only"

    def factory(
        bootstrap: str, options: dict[str, object], as_caller: bool, registry_urls: list[str]
    ) -> web.Application:
        return make_app(
            bootstrap,
            options,
            read_only=read_only,
            as_caller=as_caller,
            history_dir=config.data_dir,
            schema_registry_url=",".join(map(connectable_url, registry_urls)) or None,
        )

    return factory


def connectable_url(url: str) -> str:
    """A listener's URL as a client on this machine reaches it: a wildcard host
    (``0.0.0.0``, ``::``) as the loopback address of its family."""
    parsed = URL(url)
    if parsed.host in ("0.0.0.0", ""):
        return str(parsed.with_host("127.0.0.1"))
    if parsed.host == "::":
        return str(parsed.with_host("::1"))
    return url


def _parse_overrides(overrides: tuple[str, ...]) -> dict[str, str]:
    properties: dict[str, str] = {}
    for item in overrides:
        name, separator, value = item.partition("=")
        if not separator or not name:
            raise click.BadParameter(f"{item!r} is not name=value", param_hint="-o/--override")
        properties[name] = value
    return properties


@click.command("serve")
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    envvar="SLUICE_DATA_DIR",
    help="Where logs and metadata live.  [default: ./data]",
)
@click.option("--host", envvar="SLUICE_HOST", help="Address to listen on.  [default: 127.0.0.1]")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    envvar="SLUICE_PORT",
    help="Port to listen on (0 picks a free one).  [default: 9092]",
)
@click.option(
    "--listeners",
    envvar="SLUICE_LISTENERS",
    metavar="NAME://HOST:PORT[,...]",
    help="Kafka's listeners setting: where to listen (the first instead of --host/--port); "
    "names map to security protocols with -o listener.security.protocol.map=...",
)
@click.option(
    "--advertised-listeners",
    envvar="SLUICE_ADVERTISED_LISTENERS",
    metavar="NAME://HOST:PORT[,...]",
    help="Kafka's advertised.listeners: the addresses clients are told to connect to, "
    "by listener name.",
)
@click.option(
    "--advertised-host",
    envvar="SLUICE_ADVERTISED_HOST",
    help="The host clients are told to connect to, when not the listening one.",
)
@click.option(
    "--node-id",
    type=click.IntRange(0),
    envvar="SLUICE_NODE_ID",
    help="This broker's id in the cluster, unique among its brokers.  [default: 0]",
)
@click.option(
    "--zookeeper",
    envvar="SLUICE_ZOOKEEPER",
    metavar="HOST:PORT[,HOST:PORT...][/CHROOT]",
    help="Join the cluster whose metadata lives in this ZooKeeper (zookeeper.connect). "
    "Without it the broker is a single node with its metadata in the data directory.",
)
@click.option("--rack", envvar="SLUICE_RACK", help="This broker's rack (broker.rack).")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="SLUICE_CONFIG",
    help="A file of Kafka-style name=value broker settings.",
)
@click.option(
    "-o",
    "--override",
    "overrides",
    multiple=True,
    metavar="NAME=VALUE",
    help="A broker setting, e.g. -o num.partitions=3 -o log.retention.hours=24.",
)
@click.option(
    "--event-loop",
    type=click.Choice(["asyncio", "uvloop"]),
    default="asyncio",
    envvar="SLUICE_EVENT_LOOP",
    show_default=True,
    help="Both serve fetched records zero copy (sendfile); uvloop needs pip install "
    "uvloop. docs/performance.md has the measurement.",
)
@click.option(
    "--log-level",
    default="INFO",
    envvar="SLUICE_LOG_LEVEL",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def serve(
    data_dir: Path | None,
    host: str | None,
    port: int | None,
    listeners: str | None,
    advertised_listeners: str | None,
    advertised_host: str | None,
    node_id: int | None,
    zookeeper: str | None,
    rack: str | None,
    config_file: Path | None,
    overrides: tuple[str, ...],
    event_loop: str,
    log_level: str,
) -> None:
    """Run a broker in the foreground: a single node, or with --zookeeper one broker of
    a cluster (each with its own --node-id, --port and --data-dir).

    Settings are applied in this order, later winning: defaults, --config file,
    -o overrides, then the explicit options (--data-dir, --host, --port, --node-id,
    --advertised-host, --zookeeper, --rack).
    The address may be given as Kafka's listeners / advertised.listeners
    (NAME://host:port, comma separated; TLS settings under Kafka's ssl.* names) or as
    --host/--port, not as both.
    """
    logging.basicConfig(level=log_level.upper(), format=LOG_FORMAT, stream=sys.stderr)
    # kazoo announces every connection at INFO; the metadata store logs what matters.
    logging.getLogger("kazoo").setLevel(max(logging.WARNING, logging.getLogger().level))
    # The console served here starts with the HTTP listener, before the broker accepts
    # clients, and would say it cannot reach its own broker ("is `sluice serve`
    # running?"), which is not news: the broker's ready line follows. Its failures once
    # it has sampled are warnings and still shown.
    logging.getLogger("sluice.console.sampler").setLevel(
        max(logging.WARNING, logging.getLogger().level)
    )
    config = BrokerConfig()
    try:
        if config_file is not None:
            config.apply_properties(read_properties_file(config_file))
        config.apply_properties(_parse_overrides(overrides))
        options = {
            "listeners": listeners,
            "advertised.listeners": advertised_listeners,
            "advertised.host": advertised_host,
            "zookeeper.connect": zookeeper,
            "broker.rack": rack,
        }
        config.apply_properties({k: v for k, v in options.items() if v is not None})
        config.set_address(host, port, origin="--host/--port")
        config.check_listeners()
        config.check_share_group_bounds()
        config.check_advertised_address()
    except BrokerConfigError as e:
        raise click.ClickException(f"bad broker setting: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise click.ClickException(
            f"cannot read the --config file {config_file}: {e}; it must be UTF-8 text of "
            "name=value lines"
        ) from None
    if data_dir is not None:
        config.data_dir = data_dir
        config.static_names.add("log.dirs")
    if node_id is not None:
        config.node_id = node_id
        config.static_names.add("node.id")
    loop_factory = _loop_factory(event_loop)
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(run_broker(config, console=_console_factory(config)))
    except (DataDirInUse, BrokerFatalError, MetaPropertiesError) as e:
        raise click.ClickException(str(e)) from None
    except BrokerConfigError as e:
        raise click.ClickException(f"bad broker setting: {e}") from None
    except MetadataFileError as e:
        raise click.ClickException(f"{e}; restore it or point --data-dir elsewhere") from None
    except socket.gaierror as e:
        raise click.ClickException(
            f"cannot listen on --host {config.host}: {e.strerror}; pass an IP address "
            "(127.0.0.1, 0.0.0.0) or a name this machine resolves"
        ) from None
    except OSError as e:
        if e.errno == errno.EADDRNOTAVAIL:
            raise click.ClickException(
                f"cannot listen on --host {config.host}: no network interface of this "
                "machine has that address; pass one it has (127.0.0.1, 0.0.0.0)"
            ) from None
        if e.errno == errno.EADDRINUSE:
            raise click.ClickException(
                f"port {config.port} on {config.host} is already in use: stop what uses it "
                "or pass --port"
            ) from None
        if e.errno in (errno.EACCES, errno.EROFS):
            raise click.ClickException(
                f"cannot write the data directory {os.fspath(config.data_dir)}: {e.strerror}"
            ) from None
        raise
    except KeyboardInterrupt:
        pass
