"""Configuration definitions: topic configs under Kafka's names and defaults, and the
broker's own settings.

A topic's effective configuration is the broker default for each key, overridden by the
topic's own entries. Values arrive as strings (CreateTopics, AlterConfigs, the CLI) and
are parsed and range-checked here, so a bad value is refused where it enters with
INVALID_CONFIG and a message that says which key and why.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.common import errors
from sluice.common.ids import topic_name_problem

_LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class ConfigKey:
    """One topic config: Kafka name, default (as a string), parser, documentation."""

    name: str
    default: str
    parse: Callable[[str], Any]
    doc: str
    sensitive: bool = False


def _long(low: int, high: int = _LONG_MAX) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise ValueError(f"{value} is outside [{low}, {high}]")
        return value

    return parse


HTTP_METRICS_BEARER_TOKEN_CHARS_MIN = 16
"""The shortest ``http.metrics.bearer.token``: a token is a secret, not a password a
person types (``openssl rand -hex 32`` makes a good one)."""


def _bearer_token(text: str) -> str:
    if len(text) < HTTP_METRICS_BEARER_TOKEN_CHARS_MIN:
        raise ValueError(
            f"a token of {len(text)} characters is too easy to guess: give at least "
            f"{HTTP_METRICS_BEARER_TOKEN_CHARS_MIN} (e.g. openssl rand -hex 32)"
        )
    if any(c.isspace() or not c.isprintable() or not c.isascii() for c in text):
        raise ValueError("a token is printable ASCII without spaces (it goes in an HTTP header)")
    return text


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"{text!r} is not one of {', '.join(allowed)}")
        return text

    return parse


def list_items(text: str) -> list[str]:
    """A LIST config's items as Kafka splits them: trimmed, split on commas with the
    spaces around them; an empty or blank value is the empty list. Empty items ("a,,b")
    are kept so the caller can refuse them."""
    stripped = text.strip()
    return [] if not stripped else [item.strip() for item in stripped.split(",")]


CLEANUP_POLICIES = ("compact", "delete")


def _cleanup_policy(text: str) -> str:
    """``delete``, ``compact``, both in the order given, or empty (Kafka 4.2+: neither
    compaction nor time/size deletion, i.e. keep everything). Duplicates and empty items
    are refused, as Kafka's ValidList does."""
    items = list_items(text)
    if any(item not in CLEANUP_POLICIES for item in items):
        raise ValueError(f"{text!r}: each item must be one of {', '.join(CLEANUP_POLICIES)}")
    if len(set(items)) != len(items):
        raise ValueError(f"{text!r}: values must not be duplicated")
    return ",".join(items)


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{value} is outside [0, 1]")
    return value


def _bool_text(text: str) -> str:
    """A boolean setting kept as text (group configs are strings)."""
    return str(_bool(text)).lower()


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError(f"{text!r} is not 'true' or 'false'")
    return text.lower() == "true"


SUBJECT_NAME_STRATEGY_PACKAGE = "io.confluent.kafka.serializers.subject."
"""Where Confluent's subject name strategies live; their topic configs name them in full."""
TOPIC_NAME_STRATEGY = SUBJECT_NAME_STRATEGY_PACKAGE + "TopicNameStrategy"
RECORD_NAME_STRATEGY = SUBJECT_NAME_STRATEGY_PACKAGE + "RecordNameStrategy"
TOPIC_RECORD_NAME_STRATEGY = SUBJECT_NAME_STRATEGY_PACKAGE + "TopicRecordNameStrategy"
SUBJECT_NAME_STRATEGIES = (TOPIC_NAME_STRATEGY, RECORD_NAME_STRATEGY, TOPIC_RECORD_NAME_STRATEGY)
"""The subject name strategies a topic's schema validation may use (Confluent's three)."""


def _subject_name_strategy(text: str) -> str:
    """One of Confluent's strategies, by its class name; the short name
    (``RecordNameStrategy``) is taken too and stored in full."""
    name = text.strip()
    full = (
        name
        if name.startswith(SUBJECT_NAME_STRATEGY_PACKAGE)
        else (SUBJECT_NAME_STRATEGY_PACKAGE + name)
    )
    if full not in SUBJECT_NAME_STRATEGIES:
        raise ValueError(f"{text!r} is not one of {', '.join(SUBJECT_NAME_STRATEGIES)}")
    return full


TOPIC_CONFIG_KEYS: dict[str, ConfigKey] = {
    key.name: key
    for key in [
        ConfigKey(
            "cleanup.policy",
            "delete",
            _cleanup_policy,
            "delete old segments, or compact to the last value per key",
        ),
        ConfigKey(
            "retention.ms",
            "604800000",
            _long(-1),
            "delete segments whose newest record is older than this; -1 keeps forever",
        ),
        ConfigKey(
            "retention.bytes",
            "-1",
            _long(-1),
            "delete oldest segments while a partition is larger; -1 means no limit",
        ),
        ConfigKey(
            "segment.bytes",
            "1073741824",
            _long(14, 2**31 - 1),
            "roll to a new segment file at this size",
        ),
        ConfigKey(
            "segment.ms",
            "604800000",
            _long(1),
            "roll to a new segment when the active one is this old",
        ),
        ConfigKey(
            "segment.index.bytes",
            "10485760",
            _long(4096, 2**31 - 1),
            "largest offset index file per segment",
        ),
        ConfigKey(
            "index.interval.bytes",
            "4096",
            _long(0, 2**31 - 1),
            "bytes of log between two offset index entries",
        ),
        ConfigKey(
            "max.message.bytes",
            "1048588",
            _long(0, 2**31 - 1),
            "largest record batch accepted, after compression",
        ),
        ConfigKey(
            "min.insync.replicas",
            "1",
            _long(1, 2**31 - 1),
            "replicas that must have a batch before acks=all is answered",
        ),
        ConfigKey(
            "message.timestamp.type",
            "CreateTime",
            _choice("CreateTime", "LogAppendTime"),
            "keep the producer's timestamps, or stamp the broker's append time",
        ),
        ConfigKey(
            "flush.ms",
            str(_LONG_MAX),
            _long(0),
            "fsync a partition at least this often; 0 fsyncs before every acknowledgement",
        ),
        ConfigKey(
            "flush.messages",
            str(_LONG_MAX),
            _long(1),
            "fsync after this many messages; 1 fsyncs before every acknowledgement",
        ),
        ConfigKey(
            "delete.retention.ms",
            "86400000",
            _long(0),
            "how long tombstones stay in a compacted topic",
        ),
        ConfigKey(
            "min.compaction.lag.ms", "0", _long(0), "youngest record age the cleaner may compact"
        ),
        ConfigKey(
            "min.cleanable.dirty.ratio",
            "0.5",
            _ratio,
            "share of the log not yet compacted that makes the cleaner compact it",
        ),
        ConfigKey(
            "file.delete.delay.ms", "60000", _long(0), "how long a deleted segment stays on disk"
        ),
        ConfigKey(
            "compression.type",
            "producer",
            _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
            "stored as produced ('producer'); other values are accepted for tooling",
        ),
        ConfigKey(
            "unclean.leader.election.enable",
            "false",
            _bool,
            "allow an out-of-sync replica to become leader (loses data)",
        ),
        ConfigKey(
            "reassignment.throttled.rate",
            "0",
            _long(0),
            "bytes per second at which each broker copies this topic's partitions it is "
            "being added to by a reassignment; 0: unthrottled (set by sluice topics "
            "reassign --throttle)",
        ),
        ConfigKey(
            "sluice.delivery.delay.ms",
            "0",
            _long(0),
            "Sluice: every record produced to this topic becomes visible to consumers "
            "this long after the broker accepts it (a record's x-sluice-deliver-at or "
            "x-sluice-delay-ms header wins); 0: at once",
        ),
        ConfigKey(
            "sluice.view.source",
            "",
            str,
            "Sluice: makes this topic a read-only view of the named topic, showing the "
            "records its sluice.view.filter matches at their source offsets; set at "
            "creation only",
        ),
        ConfigKey(
            "sluice.view.filter",
            "",
            str,
            "Sluice: the filter of a view, over the x-sluice-tag header and other headers "
            "(tag = 'red', tag in ('red', 'blue'), header.region = 'eu', and/or/not)",
        ),
        ConfigKey(
            "confluent.key.schema.validation",
            "false",
            _bool,
            "refuse a produced batch unless each record's key carries the id of a schema "
            "registered under its subject in the Schema Registry (Confluent Server's name)",
        ),
        ConfigKey(
            "confluent.value.schema.validation",
            "false",
            _bool,
            "refuse a produced batch unless each record's value carries the id of a "
            "schema registered under its subject in the Schema Registry (Confluent "
            "Server's name)",
        ),
        ConfigKey(
            "confluent.key.subject.name.strategy",
            TOPIC_NAME_STRATEGY,
            _subject_name_strategy,
            "the subject a key's schema id must be registered under when keys are "
            "validated: TopicNameStrategy (<topic>-key), RecordNameStrategy (the "
            "record's full name) or TopicRecordNameStrategy (<topic>-<record name>)",
        ),
        ConfigKey(
            "confluent.value.subject.name.strategy",
            TOPIC_NAME_STRATEGY,
            _subject_name_strategy,
            "the subject a value's schema id must be registered under when values are "
            "validated: TopicNameStrategy (<topic>-value), RecordNameStrategy (the "
            "record's full name) or TopicRecordNameStrategy (<topic>-<record name>)",
        ),
    ]
}


def parse_topic_configs(entries: Mapping[str, str | None]) -> dict[str, str]:
    """Check topic config overrides; return them normalised. Raises InvalidConfig."""
    checked: dict[str, str] = {}
    for name, text in entries.items():
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None:
            raise errors.InvalidConfig(f"unknown topic config {name!r}")
        if text is None:
            raise errors.InvalidConfig(f"topic config {name!r} has no value")
        try:
            value = key.parse(text)
        except ValueError as e:
            raise errors.InvalidConfig(f"{name}: {e}") from None
        checked[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return checked


@dataclass(frozen=True)
class TopicConfig:
    """A topic's effective configuration, typed. Built from defaults plus overrides."""

    cleanup_policy: str = "delete"
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    segment_bytes: int = 1_073_741_824
    segment_ms: int = 604_800_000
    segment_index_bytes: int = 10_485_760
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1_048_588
    min_insync_replicas: int = 1
    message_timestamp_type: str = "CreateTime"
    flush_ms: int = _LONG_MAX
    flush_messages: int = _LONG_MAX
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    min_cleanable_dirty_ratio: float = 0.5
    file_delete_delay_ms: int = 60_000
    compression_type: str = "producer"
    unclean_leader_election_enable: bool = False
    reassignment_throttled_rate: int = 0
    sluice_delivery_delay_ms: int = 0
    sluice_view_source: str = ""
    sluice_view_filter: str = ""
    confluent_key_schema_validation: bool = False
    confluent_value_schema_validation: bool = False
    confluent_key_subject_name_strategy: str = TOPIC_NAME_STRATEGY
    confluent_value_subject_name_strategy: str = TOPIC_NAME_STRATEGY

    @classmethod
    def from_entries(
        cls, overrides: Mapping[str, str], defaults: Mapping[str, str] | None = None
    ) -> TopicConfig:
        merged = {name: key.default for name, key in TOPIC_CONFIG_KEYS.items()}
        merged.update(defaults or {})
        merged.update(overrides)
        values = {
            name.replace(".", "_"): TOPIC_CONFIG_KEYS[name].parse(text)
            for name, text in merged.items()
        }
        return cls(**values)

    @functools.cached_property
    def schema_validation(self) -> bool:
        """Whether produced records' keys or values are checked against the Schema
        Registry (read on every produce: one attribute test when neither is)."""
        return self.confluent_key_schema_validation or self.confluent_value_schema_validation

    @property
    def fsync_every_append(self) -> bool:
        """True when an acknowledgement must wait for fsync (flush.ms=0 or flush.messages=1)."""
        return self.flush_ms == 0 or self.flush_messages == 1

    @functools.cached_property
    def compact(self) -> bool:
        """The cleaner compacts this log (``compact`` among the cleanup policies). Read
        on every produce, so parsed once per config."""
        return "compact" in list_items(self.cleanup_policy)

    @property
    def delete(self) -> bool:
        """Retention deletes old segments by time and size (``delete`` among the cleanup
        policies; an empty policy keeps everything)."""
        return "delete" in list_items(self.cleanup_policy)


assert {f.name for f in dataclasses.fields(TopicConfig)} == {
    n.replace(".", "_") for n in TOPIC_CONFIG_KEYS
}, "TopicConfig fields and TOPIC_CONFIG_KEYS must name the same configs"


# Broker properties that set a topic config's default, under Kafka's broker names.
BROKER_TOPIC_DEFAULTS: dict[str, str] = {
    "log.cleanup.policy": "cleanup.policy",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "message.max.bytes": "max.message.bytes",
    "min.insync.replicas": "min.insync.replicas",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.flush.interval.ms": "flush.ms",
    "log.flush.interval.messages": "flush.messages",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "compression.type": "compression.type",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}

SLUICE_TOPIC_DEFAULTS: dict[str, str] = {"flush.ms": "1000"}
"""Where Sluice's defaults differ from Kafka's. Kafka never fsyncs by default and relies
on replicas for durability; a single node has none, so Sluice fsyncs every partition
with new data at least once a second unless told otherwise."""


class BrokerConfigError(ValueError):
    """A broker setting that is unknown or has a bad value; the message says which."""


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""Kafka's security protocols, each also a listener name that maps to itself."""

SERVED_SECURITY_PROTOCOLS: set[str] = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}
"""Security protocols a listener may use in this build: the one place that says so."""

SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
"""Listeners whose clients must authenticate with SASL before anything but ApiVersions."""

SASL_MECHANISMS_SERVED = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
"""Sluice's default of ``sasl.enabled.mechanisms`` (Kafka's is GSSAPI, not served)."""


def _sasl_mechanisms(text: str) -> tuple[str, ...]:
    names = tuple(item.upper() for item in list_items(text))
    unknown = [name for name in names if name not in SASL_MECHANISMS_SERVED]
    if unknown or not names:
        raise ValueError(
            f"{', '.join(unknown) or 'an empty list'}: the mechanisms served are "
            + ", ".join(SASL_MECHANISMS_SERVED)
        )
    return names


REBALANCE_PROTOCOLS_SERVED = ("classic", "consumer", "share")
"""The values ``group.coordinator.rebalance.protocols`` takes: Kafka's classic protocol,
the consumer protocol (KIP-848), and ``share``, which changes nothing (share groups are
always served). Kafka's ``streams`` (KIP-1071) is not served."""


def _rebalance_protocols(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(item.lower() for item in list_items(text)))
    if "streams" in names:
        raise ValueError("streams groups (KIP-1071) are not served: leave streams out")
    unknown = [name for name in names if name not in REBALANCE_PROTOCOLS_SERVED]
    if unknown:
        raise ValueError(
            f"{', '.join(unknown)}: the protocols are " + ", ".join(REBALANCE_PROTOCOLS_SERVED)
        )
    if "classic" not in names:
        raise ValueError("classic cannot be disabled: give classic or classic,consumer")
    return names


SCHEMA_COMPATIBILITY_LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
"""The values of ``schema.compatibility.level`` (Confluent's compatibility levels): the
one list the broker's settings, the registry and the CLI take."""

SCHEMA_COMPATIBILITY_LEVEL_DEFAULT = "BACKWARD"
"""Confluent's default for ``schema.compatibility.level``."""

SCHEMA_REGISTRY_DEFAULT_PORT = 8081
"""Confluent's Schema Registry port, the default of ``schema.registry.listeners``."""

SCHEMA_MAX_BYTES_MAX = 1_048_576
"""The largest ``schema.registry.schema.max.bytes``, and its default: a registration is
forwarded to the broker hosting the registry in one request of Sluice's private API,
and stored as one record of ``_schemas`` (Kafka's default ``max.message.bytes`` is
about one MiB)."""


@dataclass(frozen=True)
class HttpEndpoint:
    """One of ``schema.registry.listeners``: ``http://host:port`` (an empty host: every
    interface; port 0: one of the kernel's choice)."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


_HTTP_ENDPOINT = re.compile(r"http://(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>\d+)/?")


def _http_endpoints(text: str) -> tuple[HttpEndpoint, ...]:
    """``schema.registry.listeners``: comma-separated ``http://host:port``; empty: none
    (the registry is off)."""
    endpoints: list[HttpEndpoint] = []
    for item in list_items(text):
        if item.lower().startswith("https://"):
            raise ValueError(
                f"{item}: HTTPS is not served; listen on loopback with http:// and put a "
                "TLS proxy in front"
            )
        match = _HTTP_ENDPOINT.fullmatch(item)
        if match is None:
            raise ValueError(f"{item!r} is not http://host:port, e.g. http://127.0.0.1:8081")
        endpoint = HttpEndpoint(match["host"].strip("[]"), _port(match["port"]))
        if endpoint.port and any(other.port == endpoint.port for other in endpoints):
            raise ValueError(f"{text}: each listener needs a port of its own")
        endpoints.append(endpoint)
    return tuple(endpoints)


def _schema_registry_topic(text: str) -> str:
    problem = topic_name_problem(text)
    if problem is not None:
        raise ValueError(problem)
    return text


def _sasl_mechanism(text: str) -> str:
    names = _sasl_mechanisms(text)
    if len(names) != 1:
        raise ValueError("give one mechanism")
    return names[0]


TLS_SECURITY_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
"""Protocols whose connections are wrapped in TLS."""

DEFAULT_SECURITY_PROTOCOL_MAP = {protocol: protocol for protocol in SECURITY_PROTOCOLS}
"""Kafka's default ``listener.security.protocol.map``: each protocol name to itself."""

LISTENER_SECURITY_SETTINGS: dict[str, Callable[[str], Any]] = {
    "ssl.keystore.type": lambda text: _choice("PEM")(text.upper()),
    "ssl.keystore.location": str,
    "ssl.key.password": str,
    "ssl.truststore.type": lambda text: _choice("PEM")(text.upper()),
    "ssl.truststore.location": str,
    "ssl.client.auth": lambda text: _choice("none", "requested", "required")(text.lower()),
    "ssl.endpoint.identification.algorithm": lambda text: _choice("", "https")(text.lower()),
    "ssl.enabled.protocols": lambda text: ",".join(
        _choice("TLSv1.2", "TLSv1.3")(item) for item in list_items(text)
    ),
    "ssl.cipher.suites": str,
    "sasl.enabled.mechanisms": lambda text: ",".join(_sasl_mechanisms(text)),
}
"""Security settings under Kafka's names, given globally (``ssl.keystore.location``) or
for one listener (``listener.name.<listener>.ssl.keystore.location``, the listener name
in lower case as Kafka writes it), each with its parser. Only PEM key and trust stores
are read: ``ssl.keystore.location`` names one PEM file with the private key and the
certificate chain (the key encrypted under ``ssl.key.password`` or not), and
``ssl.truststore.location`` a PEM bundle of CA certificates."""

SENSITIVE_SECURITY_SETTINGS = frozenset({"ssl.key.password"})
"""Never shown by DescribeConfigs."""

NON_ROUTABLE_HOSTS = frozenset({"0.0.0.0", "::"})

_LISTENER = re.compile(
    r"(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[0-9A-Fa-f:.]+\]|[^:/\[\]\s]*):(?P<port>\d+)"
)
_LISTENER_PREFIX = re.compile(r"listener\.name\.(?P<name>[A-Za-z0-9_]+)\.(?P<key>.+)")


@dataclass(frozen=True)
class Listener:
    """One entry of Kafka's ``listeners`` / ``advertised.listeners``:
    ``NAME://host:port``, where the name is a security protocol (``SSL``) or a name that
    ``listener.security.protocol.map`` maps to one (``INTERNAL``). An empty host means
    every interface (and, advertised, this machine's name), as in Kafka."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_listeners(setting: str, text: str) -> tuple[Listener, ...]:
    """The listeners in ``text`` (comma separated). Raises BrokerConfigError for bad
    syntax, an empty list or a name given twice (which protocol each name has, and
    whether it is served, is checked by :meth:`BrokerConfig.check_listeners` once every
    setting is in)."""
    items = list_items(text)
    example = "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093"
    if not items:
        raise BrokerConfigError(f"{setting} is empty; give listeners such as {example}")
    listeners: list[Listener] = []
    for item in items:
        match = _LISTENER.fullmatch(item)
        if match is None:
            raise BrokerConfigError(
                f"{setting}={item} is not NAME://host:port; for example {example}"
            )
        try:
            port = _port(match["port"])
        except ValueError as e:
            raise BrokerConfigError(f"{setting}={item}: port {e}") from None
        listener = Listener(match["name"].upper(), match["host"].strip("[]"), port)
        if any(other.name == listener.name for other in listeners):
            raise BrokerConfigError(
                f"{setting}={text}: the listener name {listener.name} is given twice; "
                "each listener needs a name of its own"
            )
        listeners.append(listener)
    return tuple(listeners)


def _security_protocol_map(text: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in list_items(text):
        name, colon, protocol = item.partition(":")
        if not colon or not name.strip() or protocol.strip().upper() not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"{item!r} is not NAME:PROTOCOL with PROTOCOL one of "
                f"{', '.join(SECURITY_PROTOCOLS)}, e.g. INTERNAL:SSL,EXTERNAL:SASL_SSL"
            )
        mapping[name.strip().upper()] = protocol.strip().upper()
    return mapping


@dataclass
class BrokerConfig:
    """Settings of one broker process (``sluice serve``), under Kafka's property names
    where Kafka has one (``BROKER_PROPERTIES`` lists them)."""

    node_id: int = 0
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    rack: str | None = None
    """broker.rack: replicas of a partition are placed on different racks where the
    cluster has several."""
    zookeeper_connect: str | None = None
    """zookeeper.connect (``host:port[,host:port…][/chroot]``): the cluster's metadata
    lives in this ZooKeeper ensemble. None: a single node with the embedded store."""
    zookeeper_session_timeout_ms: int = 6_000
    """A broker that ZooKeeper has not heard from for this long loses its registration
    (and the controller role): its partitions move or go offline. Kafka's default is
    18 s; 6 s moves leadership off a dead broker sooner, and needs a ZooKeeper that is
    not starved (its tickTime at most a third of this)."""
    zookeeper_connection_timeout_ms: int = 15_000
    """How long the broker tries to reach ZooKeeper at start before it gives up with an
    error (Kafka's zookeeper.connection.timeout.ms)."""
    data_dir: Path = Path("./data")
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    log_flush_scheduler_interval_ms: int = 200
    """How often the flusher looks for partitions whose flush.ms has passed."""
    log_retention_check_interval_ms: int = 300_000
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    """Replicas of each ``__consumer_offsets`` partition (and of later internal topics),
    as in Kafka; a cluster with fewer live brokers gets one replica per broker."""
    offsets_topic_segment_bytes: int = 104_857_600
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    """Replicas of each ``__transaction_state`` partition (one per live broker when
    fewer, as for ``__consumer_offsets``)."""
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 104_857_600
    share_coordinator_state_topic_num_partitions: int = 50
    share_coordinator_state_topic_replication_factor: int = 3
    """Replicas of each ``__share_group_state`` partition (one per live broker when
    fewer, as for ``__transaction_state``)."""
    share_coordinator_state_topic_min_isr: int = 2
    share_coordinator_state_topic_segment_bytes: int = 104_857_600
    transaction_max_timeout_ms: int = 900_000
    """The longest transaction.timeout.ms a producer may ask for."""
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    """How often the transaction coordinator looks for transactions past their
    timeout (and aborts them)."""
    share_record_lock_duration_ms: int = 30_000
    """group.share.record.lock.duration.ms: how long a share consumer holds the records
    it fetched, unless its group sets share.record.lock.duration.ms."""
    share_record_lock_duration_ms_min: int = 15_000
    """group.share.min.record.lock.duration.ms: the shortest share.record.lock.duration.ms
    a group may set."""
    share_record_lock_duration_ms_max: int = 60_000
    """group.share.max.record.lock.duration.ms: the longest one a group may set."""
    share_delivery_count_limit: int = 5
    """group.share.delivery.count.limit: deliveries of a record to a share group before
    it is archived (and sent to the group's dead-letter topic), unless the group sets
    share.delivery.count.limit."""
    share_delivery_count_limit_min: int = 2
    """group.share.min.delivery.count.limit: the lowest share.delivery.count.limit a
    group may set."""
    share_delivery_count_limit_max: int = 10
    """group.share.max.delivery.count.limit: the highest one a group may set."""
    share_partition_max_record_locks: int = 2_000
    """group.share.partition.max.record.locks: the in-flight window of a share group on
    one partition (records handed out but not finished, and those after them), unless
    the group sets share.partition.max.record.locks."""
    share_partition_max_record_locks_min: int = 100
    """group.share.min.partition.max.record.locks: the smallest window a group may set."""
    share_partition_max_record_locks_max: int = 4_000
    """group.share.max.partition.max.record.locks: the largest window a group may set."""
    share_max_share_sessions: int = 2_000
    """group.share.max.share.sessions: share sessions a broker keeps; a new one past
    this is refused with SHARE_SESSION_LIMIT_REACHED."""
    share_dead_letter_topic_prefix: str = "dlq."
    """errors.deadletterqueue.topic.name.prefix: a share group's dead-letter topic must
    start with this, so a group cannot be pointed at an ordinary topic (KIP-1191)."""
    log_cleaner_io_max_bytes_per_second: int = 50 * 1024 * 1024
    """Budget of the background log cleaner (reads plus writes), so compaction never
    starves produce and fetch of disk bandwidth."""
    log_cleaner_backoff_ms: int = 15_000
    """How often the cleaner looks for compacted partitions worth cleaning."""
    auto_leader_rebalance_enable: bool = True
    """Move partition leadership back to preferred replicas when brokers return."""
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    """A broker leads too few of the partitions it is preferred for when more than this
    share is led elsewhere: the controller moves them back."""
    replica_lag_time_max_ms: int = 30_000
    """A follower that has not caught up with the leader's log end for this long leaves
    the ISR (Kafka's replica.lag.time.max.ms)."""
    replica_fetch_max_bytes: int = 1_048_576
    """Record bytes a follower asks for per partition in one fetch (the first batch
    comes whole even when larger)."""
    replica_fetch_response_max_bytes: int = 10_485_760
    """Record bytes a follower asks for in one fetch, all partitions together."""
    replica_fetch_wait_max_ms: int = 500
    """How long a follower's fetch waits at the leader for new records."""
    replica_fetch_backoff_ms: int = 1_000
    """How long a follower waits before fetching again after an error."""
    max_incremental_fetch_session_cache_slots: int = 1_000
    """Incremental fetch sessions (KIP-227) the broker keeps at most, followers' and
    consumers' together (0: none; fetchers then always fetch in full)."""
    fetch_max_bytes: int = 57_671_680
    """Most record bytes in one fetch response, whatever the request's max_bytes (Kafka's
    fetch.max.bytes, 55 MiB); the first batch is returned even when larger (KIP-74)."""
    connections_max_idle_ms: int = 600_000
    """A connection with no bytes moving for this long, or holding an incomplete request
    frame for this long, is closed (Kafka's connections.max.idle.ms)."""
    max_connections: int = 10_000
    """Open client connections at most; further ones are closed at once. 10,000 is far
    above what one broker process serves well, and keeps the worst case of what
    connections may hold (each is bounded, see ``common.limits``) and of file descriptors
    finite."""
    max_connections_per_ip: int = 1_000
    """Open connections from one IP address at most; further ones are closed at once. A
    client opens one connection per broker plus a bootstrap one, so 1,000 leaves room for
    hundreds of clients behind one NAT address while a runaway program on one host
    cannot take every slot of ``max.connections``."""
    authorizer_enabled: bool = False
    """authorizer.enabled: every request is authorized against the ACLs (Kafka's
    ``authorizer.class.name`` set to its StandardAuthorizer); off, everyone may do
    everything and the ACL APIs answer SECURITY_DISABLED."""
    super_users: str = ""
    """super.users: principals that may do everything, separated by ``;``
    (``User:admin;User:broker``). The brokers' own principal belongs here."""
    allow_everyone_if_no_acl_found: bool = False
    """allow.everyone.if.no.acl.found: a resource no ACL applies to is open to everyone
    (false, Kafka's default: denied to all but super users)."""
    max_broker_partitions: int = 20_000
    """Partitions this broker may host, all topics together (``__consumer_offsets``
    included). Creating more is refused with POLICY_VIOLATION. Each partition keeps one
    file open and some memory, and is opened at every start; the limit (the name KIP-578
    proposed) keeps one request from taking the broker past what it can serve."""
    max_connections_per_ip_overrides: dict[str, int] = field(default_factory=dict)
    """``max.connections.per.ip.overrides`` (Kafka's ``host:count,…``): a per-address
    limit instead of ``max.connections.per.ip`` (0 refuses the address)."""
    listener_max_connections: dict[str, int] = field(default_factory=dict)
    """``listener.name.<name>.max.connections``: open connections of one listener at
    most (upper-case listener name), within ``max.connections``."""
    socket_request_max_bytes: int = 104_857_600
    """Largest request frame (Kafka's socket.request.max.bytes): a larger length prefix
    closes the connection before its body is read."""
    shutdown_timeout_ms: int = 25_000
    """sluice.shutdown.timeout.ms: from SIGTERM (or SIGINT) to the end of a ``sluice
    serve`` process, at most; past it the process ends without closing its logs (the
    next start recovers them). Sluice's own: Kafka's controlled.shutdown.* bound only the
    controller's part, and a Kafka broker can wait on an unreachable ZooKeeper for as
    long as it retries. The default ends under Kubernetes' 30 s grace period."""
    request_max_partitions: int = 100_000
    """Topics and partitions one request may name (``sluice.request.max.partitions``;
    Kafka has no such limit): more closes the connection before the request is handled,
    so one frame cannot make the broker walk millions of partitions."""
    produce_max_decompressed_bytes: int = 134_217_728
    """Most bytes a compressed produced batch's records may inflate to
    (``sluice.produce.max.decompressed.bytes``; also at most 64 times the topic's
    ``max.message.bytes``): past it the batch is refused with MESSAGE_TOO_LARGE as soon
    as the decompression gets there. 128 MiB, what Sluice consumers decompress, is also
    the most it may be set to."""
    quota_window_num: int = 11
    """Samples a client quota's rate is measured over (Kafka's quota.window.num)."""
    quota_window_size_seconds: int = 1
    """Length of one sample (Kafka's quota.window.size.seconds). One throttle lasts at
    most the whole window, ``quota.window.num`` samples."""
    sasl_plain_insecure_allow: bool = False
    """sluice.sasl.plain.insecure.allow: offer PLAIN on a SASL_PLAINTEXT listener too,
    where the password crosses the network in the clear."""
    sasl_server_max_receive_size: int = 524_288
    """sasl.server.max.receive.size: the largest request frame before authentication."""
    connection_failed_authentication_delay_ms: int = 100
    """connection.failed.authentication.delay.ms: how long the answer to a failed SASL
    authentication (and the close that follows it) waits, so a client guessing passwords
    gets at most one guess per connection per delay. Kafka's default and bounds (0 turns
    it off); it must be below ``connections.max.idle.ms``, as Kafka requires."""
    http_host: str | None = None
    """http.host: where the HTTP listener (``/metrics``, ``/health``, ``/ready``, the web
    console) listens; None: the host of the first Kafka listener, or loopback
    (127.0.0.1) on a broker with SASL or ACLs (:meth:`http_secured`)."""
    http_port: int = 8080
    """http.port: the HTTP listener's port; 0 turns the listener off."""
    http_console: str = "on"
    """http.console: the web console at ``/`` of the HTTP listener when the broker runs
    as ``sluice serve``: ``on``, ``read-only`` (no test produce) or ``off`` (metrics,
    health and readiness only)."""
    http_metrics_bearer_token: str | None = None
    """http.metrics.bearer.token (sensitive: never described): on a broker with SASL or
    ACLs, ``Authorization: Bearer <this>`` may read ``/metrics`` (and nothing else), for
    a scraper that has no user of its own. None: only users may."""
    connections_max_reauth_ms: int = 0
    """connections.max.reauth.ms (KIP-368): a SASL session's lifetime; the client must
    authenticate again on the same connection before it ends, or the connection is
    closed at its next request. 0: sessions never end."""
    sasl_mechanism_inter_broker_protocol: str = "SCRAM-SHA-512"
    """sasl.mechanism.inter.broker.protocol: how this broker authenticates to the SASL
    listeners of other brokers."""
    inter_broker_sasl_username: str | None = None
    """sluice.inter.broker.sasl.username: the user this broker authenticates as."""
    inter_broker_sasl_password: str | None = None
    """sluice.inter.broker.sasl.password (sensitive: never described)."""
    topic_defaults: dict[str, str] = field(default_factory=lambda: dict(SLUICE_TOPIC_DEFAULTS))
    """Broker-wide defaults of topic configs, by topic config name (``retention.ms``)."""
    group_coordinator_rebalance_protocols: tuple[str, ...] = ("classic", "consumer")
    """group.coordinator.rebalance.protocols: the group protocols served. With
    ``consumer`` (the default), ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848)
    are listed in ApiVersions with the ``group.version`` feature at 1, and served; without
    it they are answered UNSUPPORTED_VERSION, as Kafka does. Kafka 4.3's default also
    lists ``streams``, which Sluice does not serve."""
    schema_registry_listeners: tuple[HttpEndpoint, ...] = (
        HttpEndpoint("127.0.0.1", SCHEMA_REGISTRY_DEFAULT_PORT),
    )
    """schema.registry.listeners: where the Schema Registry's REST API is served
    (``http://host:port``, comma separated; port 0: a free port, logged and named in the
    ready line). Empty: no REST API on this broker, which still hosts the registry while
    it leads its partition, so the other brokers can forward calls to it."""
    schema_registry_topic: str = "_schemas"
    """schema.registry.topic: the compacted one-partition topic holding the schemas
    (Confluent's ``kafkastore.topic``)."""
    schema_registry_topic_replication_factor: int = 3
    """schema.registry.topic.replication.factor: replicas of that topic (one per live
    broker when fewer, as for the other internal topics)."""
    schema_compatibility_level: str = SCHEMA_COMPATIBILITY_LEVEL_DEFAULT
    """schema.compatibility.level: the registry's global compatibility level until one
    is set with ``PUT /config`` (Confluent's setting and default)."""
    schema_registry_schema_max_bytes: int = SCHEMA_MAX_BYTES_MAX
    """schema.registry.schema.max.bytes: the longest schema text registered (UTF-8
    bytes); a longer one is refused with 422 (error code 42209)."""
    group_properties: dict[str, str] = field(default_factory=dict)
    """Group-coordinator settings (``GROUP_PROPERTY_NAMES``), checked by the coordinator."""
    listeners: tuple[Listener, ...] = ()
    """``listeners`` when given: the first one set ``host`` and ``port`` (an empty host is
    0.0.0.0). Empty: one PLAINTEXT listener on ``host``/``port``."""
    advertised_listeners: tuple[Listener, ...] = ()
    """``advertised.listeners`` when given: the addresses Metadata hands to clients, by
    listener name (a listener not named here is advertised as it listens)."""
    advertised_port: int | None = None
    """The port clients are told, when it differs from ``port`` (single listener)."""
    listener_security_protocol_map: dict[str, str] = field(
        default_factory=lambda: dict(DEFAULT_SECURITY_PROTOCOL_MAP)
    )
    """``listener.security.protocol.map``: listener name → security protocol."""
    inter_broker_listener_name: str | None = None
    """``inter.broker.listener.name``: the listener other brokers connect to (their
    replica fetchers and requests); None: the first listener."""
    security_settings: dict[str, str] = field(default_factory=dict)
    """``ssl.*`` / ``sasl.enabled.mechanisms`` given for every listener."""
    listener_security_settings: dict[str, dict[str, str]] = field(default_factory=dict)
    """``listener.name.<name>.ssl.*``: per listener name (upper case), winning over
    ``security_settings``."""
    static_names: set[str] = field(default_factory=set)
    """Settings given in the config file, with -o or as options (STATIC_BROKER_CONFIG in
    DescribeConfigs), by Kafka's name where there is one."""
    _given_address: tuple[str | None, int | None] = field(default=(None, None), repr=False)
    """host and port given by --host/--port or the host/port settings (not by listeners)."""

    def sasl_mechanisms_offered(
        self, listener_name: str, security_protocol: str
    ) -> tuple[str, ...]:
        """What SaslHandshake offers on a listener: its ``sasl.enabled.mechanisms``
        (``listener.name.<name>.`` or global; all three served by default), PLAIN only
        over TLS unless ``sluice.sasl.plain.insecure.allow`` (PLAIN sends the password
        itself)."""
        enabled = self.listener_setting(listener_name, "sasl.enabled.mechanisms")
        names = _sasl_mechanisms(enabled) if enabled else SASL_MECHANISMS_SERVED
        plain_allowed = security_protocol == "SASL_SSL" or self.sasl_plain_insecure_allow
        return tuple(name for name in names if name != "PLAIN" or plain_allowed)

    def set_address(self, host: str | None, port: int | None, *, origin: str) -> None:
        """Listen on ``host`` / ``port`` (``--host``/``--port`` or the ``host``/``port``
        settings). Raises BrokerConfigError when ``listeners`` says otherwise."""
        given_host, given_port = self._given_address
        if host is not None:
            self.host = given_host = host
            self.static_names.add("host")
        if port is not None:
            self.port = given_port = port
            self.static_names.add("port")
        self._given_address = (given_host, given_port)
        self._check_address(origin)

    def _check_address(self, origin: str) -> None:
        if not self.listeners:
            return
        listener = self.listeners[0]
        given_host, given_port = self._given_address
        if given_host is None and given_port is None:
            return
        if (given_host is not None and given_host != (listener.host or "0.0.0.0")) or (
            given_port is not None and given_port != listener.port
        ):
            given = f"{given_host or listener.host}:{given_port or listener.port}"
            raise BrokerConfigError(
                f"{origin} ({given}) disagree with listeners={listener}; give the address "
                "once, either as listeners or as --host/--port"
            )

    def listener_list(self) -> tuple[Listener, ...]:
        """The listeners the broker serves: ``listeners``, or one PLAINTEXT listener on
        ``host``/``port``."""
        return self.listeners or (Listener("PLAINTEXT", self.host, self.port),)

    def security_protocol(self, listener_name: str) -> str:
        """The security protocol of a listener (``listener.security.protocol.map``).
        Raises BrokerConfigError for a name the map lacks."""
        protocol = self.listener_security_protocol_map.get(listener_name.upper())
        if protocol is None:
            raise BrokerConfigError(
                f"listener {listener_name} has no security protocol: add it to "
                f"listener.security.protocol.map, e.g. {listener_name}:SSL"
            )
        return protocol

    def http_secured(self) -> bool:
        """Whether the HTTP listener asks for credentials and binds to loopback unless
        ``http.host`` says otherwise: on a broker with a SASL listener or the authorizer
        enabled."""
        return self.authorizer_enabled or any(
            self.security_protocol(listener.name) in SASL_PROTOCOLS
            for listener in self.listener_list()
        )

    def inter_broker_listener(self) -> str:
        """The listener name other brokers use: inter.broker.listener.name, else the
        first listener (PLAINTEXT by default, as in Kafka)."""
        return self.inter_broker_listener_name or self.listener_list()[0].name

    def listener_setting(self, listener_name: str, key: str) -> str | None:
        """A security setting for one listener: its ``listener.name.<name>.`` form,
        else the global one, else None."""
        own = self.listener_security_settings.get(listener_name.upper(), {})
        if key in own:
            return own[key]
        return self.security_settings.get(key)

    def check_listeners(self) -> None:
        """Refuse listener settings that cannot be served, once every setting is in:
        a name without a security protocol, a protocol this build does not serve, a TLS
        listener without a keystore, advertised listeners or an inter-broker listener
        that name no listener. Raises BrokerConfigError with what to change."""
        listeners = self.listener_list()
        names = [listener.name for listener in listeners]
        ports = [listener.port for listener in listeners if listener.port != 0]
        if len(set(ports)) != len(ports):
            raise BrokerConfigError(
                f"listeners={','.join(map(str, listeners))}: each listener needs a port of its own"
            )
        for listener in listeners:
            protocol = self.security_protocol(listener.name)
            if protocol not in SERVED_SECURITY_PROTOCOLS:
                raise BrokerConfigError(
                    f"listener {listener}: {protocol} listeners are not served by this "
                    "broker; use " + " or ".join(sorted(SERVED_SECURITY_PROTOCOLS))
                )
            if protocol in TLS_SECURITY_PROTOCOLS and not self.listener_setting(
                listener.name, "ssl.keystore.location"
            ):
                raise BrokerConfigError(
                    f"listener {listener} uses {protocol} but has no certificate: set "
                    f"ssl.keystore.location (or listener.name.{listener.name.lower()}."
                    "ssl.keystore.location) to a PEM file with the private key and the "
                    "certificate chain"
                )
        for advertised in self.advertised_listeners:
            if advertised.name not in names:
                raise BrokerConfigError(
                    f"advertised.listeners names {advertised.name}, which is not among "
                    f"the listeners ({', '.join(names)})"
                )
        for name in self.listener_security_settings:
            if name not in names:
                raise BrokerConfigError(
                    f"listener.name.{name.lower()}.* is set but no listener is named {name} "
                    f"(listeners: {', '.join(names)})"
                )
        if self.inter_broker_listener() not in names:
            raise BrokerConfigError(
                f"inter.broker.listener.name={self.inter_broker_listener_name} names no "
                f"listener (listeners: {', '.join(names)})"
            )
        inter_broker = self.inter_broker_listener()
        if (
            self.zookeeper_connect
            and self.security_protocol(inter_broker) in SASL_PROTOCOLS
            and not (self.inter_broker_sasl_username and self.inter_broker_sasl_password)
        ):
            raise BrokerConfigError(
                f"the inter-broker listener {inter_broker} uses SASL: set "
                "sluice.inter.broker.sasl.username and sluice.inter.broker.sasl.password "
                f"(a user with {self.sasl_mechanism_inter_broker_protocol} credentials)"
            )

    def check_share_group_bounds(self) -> None:
        """Refuse share-group defaults outside their own bounds, once every setting is
        in (Kafka's ShareGroupConfig checks): e.g. group.share.record.lock.duration.ms
        must lie within group.share.min/max.record.lock.duration.ms. Raises
        BrokerConfigError."""
        for group_name, (default_name, min_name, max_name) in SHARE_GROUP_BOUNDS.items():
            low, high = share_group_bounds(self, group_name)
            value = getattr(self, BROKER_PROPERTIES[default_name][0])
            if not low <= value <= high:
                raise BrokerConfigError(
                    f"{default_name}={value} is outside {min_name}={low} and {max_name}={high}"
                )

    def check_advertised_address(self) -> None:
        """Refuse to hand clients a non-routable address taken from a listener setting,
        as Kafka does. (``--host 0.0.0.0`` without listeners keeps advertising it.)"""
        for advertised in self.advertised_listeners:
            if advertised.host in NON_ROUTABLE_HOSTS:
                raise BrokerConfigError(
                    "advertised.listeners cannot use the nonroutable meta-address "
                    f"{advertised.host}. Use a routable IP address."
                )
        advertised_names = {listener.name for listener in self.advertised_listeners}
        for listener in self.listeners:
            if (
                listener.host in NON_ROUTABLE_HOSTS
                and listener.name not in advertised_names
                and not self.advertised_host
            ):
                raise BrokerConfigError(
                    f"listeners={listener} binds every interface; set "
                    "advertised.listeners to the address clients should use, e.g. "
                    f"advertised.listeners={listener.name}://broker1.example:{listener.port}"
                )

    def apply_properties(self, properties: Mapping[str, str]) -> None:
        """Set values from Kafka-style ``name=value`` properties (static: given in the
        file, with -o or as options). Raises BrokerConfigError."""
        for name, text in properties.items():
            self._apply_one(name, text)
            self.static_names.add(name.strip())
        self._check_failed_authentication_delay()

    def apply_dynamic(self, properties: Mapping[str, str]) -> None:
        """Set values as :meth:`apply_properties` does, without counting them as static
        (dynamic broker configs laid over the static ones). Raises BrokerConfigError."""
        for name, text in properties.items():
            self._apply_one(name, text)
        self._check_failed_authentication_delay()

    def _apply_one(self, name: str, text: str) -> None:
        try:
            self._apply(name.strip(), text.strip())
        except BrokerConfigError:
            raise
        except ValueError as e:
            raise BrokerConfigError(f"{name}: {e}") from None

    def _check_failed_authentication_delay(self) -> None:
        """Kafka's rule: a failed authentication's delayed answer must come before the
        connection counts as idle."""
        delay_ms = self.connection_failed_authentication_delay_ms
        if delay_ms >= self.connections_max_idle_ms:
            raise BrokerConfigError(
                f"connection.failed.authentication.delay.ms={delay_ms} must be less than "
                f"connections.max.idle.ms={self.connections_max_idle_ms}, or the delayed "
                "answer to a failed authentication would time out"
            )

    def _apply(self, name: str, text: str) -> None:
        if name == "listeners":
            listeners = parse_listeners(name, text)
            self.listeners = listeners
            self.host = listeners[0].host or "0.0.0.0"
            self.port = listeners[0].port
            self._check_address("the host/port settings")
            return
        if name == "advertised.listeners":
            self.advertised_listeners = parse_listeners(name, text)
            return
        if name == "listener.security.protocol.map":
            self.listener_security_protocol_map = _security_protocol_map(text)
            return
        if name == "inter.broker.listener.name":
            if not text:
                raise ValueError("is empty; name one of the listeners")
            self.inter_broker_listener_name = text.upper()
            return
        if name in LISTENER_SECURITY_SETTINGS:
            self.security_settings[name] = LISTENER_SECURITY_SETTINGS[name](text)
            return
        prefixed = _LISTENER_PREFIX.fullmatch(name)
        if prefixed is not None and prefixed["key"] in LISTENER_SECURITY_SETTINGS:
            key = prefixed["key"]
            own = self.listener_security_settings.setdefault(prefixed["name"].upper(), {})
            own[key] = LISTENER_SECURITY_SETTINGS[key](text)
            return
        if prefixed is not None and prefixed["key"] == "max.connections":
            listener = prefixed["name"].upper()
            self.listener_max_connections[listener] = _long(0, 2**31 - 1)(text)
            return
        if name in ("host", "port"):
            host = text if name == "host" else None
            port = _port(text) if name == "port" else None
            self.set_address(host, port, origin="the host/port settings")
            return
        if name in BROKER_TOPIC_DEFAULTS:
            topic_name = BROKER_TOPIC_DEFAULTS[name]
            parsed = TOPIC_CONFIG_KEYS[topic_name].parse(text)
            self.topic_defaults[topic_name] = (
                str(parsed).lower() if isinstance(parsed, bool) else str(parsed)
            )
            return
        if name == "log.retention.hours":
            self._apply("log.retention.ms", str(_long(-1)(text) * 3_600_000))
            return
        if name == "log.retention.minutes":
            self._apply("log.retention.ms", str(_long(-1)(text) * 60_000))
            return
        if name in GROUP_PROPERTY_NAMES:
            if name not in GROUP_TEXT_PROPERTY_NAMES:
                _long(0)(text)
            self.group_properties[name] = text
            return
        setting = BROKER_PROPERTIES.get(name)
        if setting is None:
            raise BrokerConfigError(
                f"unknown broker setting {name!r}; known settings: "
                + ", ".join(
                    sorted(
                        [
                            *BROKER_PROPERTIES,
                            *BROKER_TOPIC_DEFAULTS,
                            *GROUP_PROPERTY_NAMES,
                            *LISTENER_SETTINGS,
                        ]
                    )
                )
            )
        attribute, parse = setting
        setattr(self, attribute, parse(text))


def _per_host_counts(text: str) -> dict[str, int]:
    """Kafka's ``max.connections.per.ip.overrides``: ``host:count`` items, comma
    separated (an IPv6 address keeps its colons: the count is after the last one)."""
    counts: dict[str, int] = {}
    for item in list_items(text):
        host, separator, count = item.rpartition(":")
        if not separator or not host:
            raise ValueError(f"{item!r} is not host:count")
        counts[host] = _long(0, 2**31 - 1)(count)
    return counts


def _port(text: str) -> int:
    return _long(0, 65535)(text)


BROKER_PROPERTIES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "node.id": ("node_id", _long(0, 2**31 - 1)),
    "broker.id": ("node_id", _long(0, 2**31 - 1)),
    "host": ("host", str),
    "port": ("port", _port),
    "advertised.host": ("advertised_host", str),
    "broker.rack": ("rack", str),
    "zookeeper.connect": ("zookeeper_connect", str),
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", _long(1_000, 600_000)),
    "zookeeper.connection.timeout.ms": (
        "zookeeper_connection_timeout_ms",
        _long(100, 600_000),
    ),
    "log.dirs": ("data_dir", Path),
    "data.dir": ("data_dir", Path),
    "num.partitions": ("num_partitions", _long(1, 10_000)),
    "group.coordinator.rebalance.protocols": (
        "group_coordinator_rebalance_protocols",
        _rebalance_protocols,
    ),
    "default.replication.factor": ("default_replication_factor", _long(1, 32)),
    "auto.create.topics.enable": ("auto_create_topics_enable", _bool),
    "log.flush.scheduler.interval.ms": ("log_flush_scheduler_interval_ms", _long(10)),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", _long(10)),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", _long(1, 1000)),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", _long(1, 32)),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", _long(14, 2**31 - 1)),
    "transaction.state.log.num.partitions": (
        "transaction_state_log_num_partitions",
        _long(1, 1000),
    ),
    "transaction.state.log.replication.factor": (
        "transaction_state_log_replication_factor",
        _long(1, 32),
    ),
    "transaction.state.log.min.isr": ("transaction_state_log_min_isr", _long(1, 32)),
    "transaction.state.log.segment.bytes": (
        "transaction_state_log_segment_bytes",
        _long(14, 2**31 - 1),
    ),
    "share.coordinator.state.topic.num.partitions": (
        "share_coordinator_state_topic_num_partitions",
        _long(1, 1000),
    ),
    "share.coordinator.state.topic.replication.factor": (
        "share_coordinator_state_topic_replication_factor",
        _long(1, 32),
    ),
    "share.coordinator.state.topic.min.isr": (
        "share_coordinator_state_topic_min_isr",
        _long(1, 32),
    ),
    "share.coordinator.state.topic.segment.bytes": (
        "share_coordinator_state_topic_segment_bytes",
        _long(14, 2**31 - 1),
    ),
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", _long(1, 2**31 - 1)),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
        _long(1, 2**31 - 1),
    ),
    "group.share.record.lock.duration.ms": (
        "share_record_lock_duration_ms",
        _long(1_000, 3_600_000),
    ),
    "group.share.min.record.lock.duration.ms": (
        "share_record_lock_duration_ms_min",
        _long(1_000, 30_000),
    ),
    "group.share.max.record.lock.duration.ms": (
        "share_record_lock_duration_ms_max",
        _long(30_000, 3_600_000),
    ),
    "group.share.delivery.count.limit": ("share_delivery_count_limit", _long(2, 10)),
    "group.share.min.delivery.count.limit": ("share_delivery_count_limit_min", _long(2, 5)),
    "group.share.max.delivery.count.limit": ("share_delivery_count_limit_max", _long(5, 25)),
    "group.share.partition.max.record.locks": (
        "share_partition_max_record_locks",
        _long(100, 10_000),
    ),
    "group.share.min.partition.max.record.locks": (
        "share_partition_max_record_locks_min",
        _long(100, 2_000),
    ),
    "group.share.max.partition.max.record.locks": (
        "share_partition_max_record_locks_max",
        _long(2_000, 10_000),
    ),
    "group.share.max.share.sessions": ("share_max_share_sessions", _long(1, 1_000_000)),
    "errors.deadletterqueue.topic.name.prefix": ("share_dead_letter_topic_prefix", str),
    "log.cleaner.io.max.bytes.per.second": ("log_cleaner_io_max_bytes_per_second", _long(1)),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", _long(10)),
    "auto.leader.rebalance.enable": ("auto_leader_rebalance_enable", _bool),
    "leader.imbalance.check.interval.seconds": (
        "leader_imbalance_check_interval_seconds",
        _long(1, 2**31 - 1),
    ),
    "leader.imbalance.per.broker.percentage": (
        "leader_imbalance_per_broker_percentage",
        _long(0, 100),
    ),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", _long(100, 2**31 - 1)),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", _long(1024, 2**31 - 1)),
    "replica.fetch.response.max.bytes": (
        "replica_fetch_response_max_bytes",
        _long(1024, 2**31 - 1),
    ),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", _long(1, 60_000)),
    "replica.fetch.backoff.ms": ("replica_fetch_backoff_ms", _long(1, 600_000)),
    "max.incremental.fetch.session.cache.slots": (
        "max_incremental_fetch_session_cache_slots",
        _long(0, 2**31 - 1),
    ),
    "fetch.max.bytes": ("fetch_max_bytes", _long(1024, 2**31 - 1)),
    "connections.max.idle.ms": ("connections_max_idle_ms", _long(1)),
    "max.connections": ("max_connections", _long(1, 2**31 - 1)),
    "max.connections.per.ip": ("max_connections_per_ip", _long(1, 2**31 - 1)),
    "max.broker.partitions": ("max_broker_partitions", _long(1, 2**31 - 1)),
    "max.connections.per.ip.overrides": (
        "max_connections_per_ip_overrides",
        _per_host_counts,
    ),
    "socket.request.max.bytes": ("socket_request_max_bytes", _long(1024, 2**31 - 1)),
    "sluice.request.max.partitions": ("request_max_partitions", _long(1, 2**31 - 1)),
    "sluice.shutdown.timeout.ms": ("shutdown_timeout_ms", _long(1000, 3_600_000)),
    "sluice.produce.max.decompressed.bytes": (
        "produce_max_decompressed_bytes",
        _long(1024, 134_217_728),
    ),
    "quota.window.num": ("quota_window_num", _long(2, 1000)),
    "quota.window.size.seconds": ("quota_window_size_seconds", _long(1, 3600)),
    "authorizer.enabled": ("authorizer_enabled", _bool),
    "super.users": ("super_users", str),
    "allow.everyone.if.no.acl.found": ("allow_everyone_if_no_acl_found", _bool),
    "sluice.sasl.plain.insecure.allow": ("sasl_plain_insecure_allow", _bool),
    "sasl.server.max.receive.size": ("sasl_server_max_receive_size", _long(1024, 2**31 - 1)),
    "connection.failed.authentication.delay.ms": (
        "connection_failed_authentication_delay_ms",
        _long(0, 2**31 - 1),
    ),
    "schema.registry.listeners": ("schema_registry_listeners", _http_endpoints),
    "schema.registry.topic": ("schema_registry_topic", _schema_registry_topic),
    "schema.registry.topic.replication.factor": (
        "schema_registry_topic_replication_factor",
        _long(1, 32),
    ),
    "schema.compatibility.level": (
        "schema_compatibility_level",
        lambda text: _choice(*SCHEMA_COMPATIBILITY_LEVELS)(text.upper()),
    ),
    "schema.registry.schema.max.bytes": (
        "schema_registry_schema_max_bytes",
        _long(1024, SCHEMA_MAX_BYTES_MAX),
    ),
    "http.host": ("http_host", str),
    "http.port": ("http_port", _long(0, 65535)),
    "http.console": ("http_console", _choice("on", "read-only", "off")),
    "http.metrics.bearer.token": ("http_metrics_bearer_token", _bearer_token),
    "connections.max.reauth.ms": ("connections_max_reauth_ms", _long(0)),
    "sasl.mechanism.inter.broker.protocol": (
        "sasl_mechanism_inter_broker_protocol",
        _sasl_mechanism,
    ),
    "sluice.inter.broker.sasl.username": ("inter_broker_sasl_username", str),
    "sluice.inter.broker.sasl.password": ("inter_broker_sasl_password", str),
}

SENSITIVE_BROKER_PROPERTIES = frozenset(
    {"sluice.inter.broker.sasl.password", "http.metrics.bearer.token"}
)
"""Broker settings DescribeConfigs never shows the value of."""

LISTENER_SETTINGS = (
    "listeners",
    "advertised.listeners",
    "listener.security.protocol.map",
    "inter.broker.listener.name",
    *LISTENER_SECURITY_SETTINGS,
)
"""Kafka's listener settings, applied by :meth:`BrokerConfig._apply` itself (one setting
sets both host and port; the security settings also take Kafka's
``listener.name.<name>.`` prefix)."""

GROUP_PROPERTY_NAMES = frozenset(
    {
        "group.initial.rebalance.delay.ms",
        "group.min.session.timeout.ms",
        "group.max.session.timeout.ms",
        "group.max.size",
        "offsets.retention.minutes",
        "offsets.retention.check.interval.ms",
        "offset.metadata.max.bytes",
        "group.share.session.timeout.ms",
        "group.share.min.session.timeout.ms",
        "group.share.max.session.timeout.ms",
        "group.share.heartbeat.interval.ms",
        "group.share.min.heartbeat.interval.ms",
        "group.share.max.heartbeat.interval.ms",
        "group.share.max.size",
        "group.consumer.session.timeout.ms",
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
        "group.consumer.max.size",
        "group.consumer.assignors",
        "group.consumer.migration.policy",
    }
)
"""Names the group coordinator reads (``sluice.group.config``); kept here so the broker
can refuse unknown names at start-up without importing a higher layer."""

GROUP_TEXT_PROPERTY_NAMES = frozenset(
    {"group.consumer.assignors", "group.consumer.migration.policy"}
)
"""The group properties that are names, not integers: a comma-separated list of
assignors, a migration policy (the coordinator checks them)."""


def read_properties_file(path: Path) -> dict[str, str]:
    """``name=value`` lines; ``#`` comments and blank lines ignored."""
    properties: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "!")):
            continue
        name, separator, value = stripped.partition("=")
        if not separator:
            raise BrokerConfigError(f"{path}:{number}: expected name=value, got {stripped!r}")
        properties[name.strip()] = value.strip()
    return properties


# ── group configs (config resource type GROUP, KIP-848/KIP-932) ───────────────────────

GROUP_CONFIG_KEYS: dict[str, ConfigKey] = {
    key.name: key
    for key in [
        ConfigKey(
            "consumer.session.timeout.ms",
            "45000",
            _long(1, 2**31 - 1),
            "session timeout of a consumer group member (new consumer protocol)",
        ),
        ConfigKey(
            "consumer.heartbeat.interval.ms",
            "5000",
            _long(1, 2**31 - 1),
            "heartbeat interval of a consumer group member (new consumer protocol)",
        ),
        ConfigKey(
            "share.session.timeout.ms",
            "45000",
            _long(45_000, 60_000),
            "session timeout of a share group member",
        ),
        ConfigKey(
            "share.heartbeat.interval.ms",
            "5000",
            _long(5_000, 15_000),
            "heartbeat interval of a share group member",
        ),
        ConfigKey(
            "share.record.lock.duration.ms",
            "30000",
            _long(1_000, 2**31 - 1),
            "how long a share group member holds the records it fetched",
        ),
        ConfigKey(
            "share.delivery.count.limit",
            "5",
            _long(2, 2**31 - 1),
            "deliveries of a record to the group before it is archived (dead-lettered)",
        ),
        ConfigKey(
            "share.partition.max.record.locks",
            "2000",
            _long(100, 2**31 - 1),
            "records of one partition the group may have in flight (KIP-1240)",
        ),
        ConfigKey(
            "share.isolation.level",
            "read_uncommitted",
            _choice("read_uncommitted", "read_committed"),
            "whether the group sees records of open and aborted transactions",
        ),
        ConfigKey(
            "errors.deadletterqueue.topic.name",
            "",
            str,
            "topic the group's rejected and archived records are copied to (KIP-1191)",
        ),
        ConfigKey(
            "errors.deadletterqueue.copy.record.enable",
            "false",
            _bool_text,
            "copy the record's key and value to the dead-letter topic, not only its origin",
        ),
        ConfigKey(
            "share.auto.offset.reset",
            "latest",
            _choice("latest", "earliest"),
            "where a share group starts reading a partition it has no position in",
        ),
    ]
}
"""Per-group settings under Kafka's names (GroupConfig), with Kafka's defaults. The
ranges of the share session and heartbeat settings are Kafka's default broker bounds
(group.share.min/max.session.timeout.ms and the like), which Sluice does not apply to
groups yet; the consumer settings of :data:`CONSUMER_GROUP_BOUNDS` and the share
settings of :data:`SHARE_GROUP_BOUNDS` are bounded by the broker's settings, as in
Kafka."""

CONSUMER_GROUP_BOUNDS: dict[str, tuple[str, int, str, int]] = {
    "consumer.session.timeout.ms": (
        "group.consumer.min.session.timeout.ms",
        45_000,
        "group.consumer.max.session.timeout.ms",
        60_000,
    ),
    "consumer.heartbeat.interval.ms": (
        "group.consumer.min.heartbeat.interval.ms",
        5_000,
        "group.consumer.max.heartbeat.interval.ms",
        15_000,
    ),
}
"""Consumer group configs (KIP-848) bounded by the group coordinator's broker settings:
the minimum's name and Kafka's default, the maximum's name and Kafka's default (the
coordinator's settings live in ``group_properties``, checked by ``sluice.group``)."""


def consumer_group_bounds(config: BrokerConfig, group_name: str) -> tuple[int, int]:
    """The lowest and highest value a group may set for ``group_name`` (a key of
    :data:`CONSUMER_GROUP_BOUNDS`) on this broker."""
    min_name, min_default, max_name, max_default = CONSUMER_GROUP_BOUNDS[group_name]
    low = config.group_properties.get(min_name)
    high = config.group_properties.get(max_name)
    return (
        min_default if low is None else int(low),
        max_default if high is None else int(high),
    )


SHARE_GROUP_BOUNDS: dict[str, tuple[str, str, str]] = {
    "share.record.lock.duration.ms": (
        "group.share.record.lock.duration.ms",
        "group.share.min.record.lock.duration.ms",
        "group.share.max.record.lock.duration.ms",
    ),
    "share.delivery.count.limit": (
        "group.share.delivery.count.limit",
        "group.share.min.delivery.count.limit",
        "group.share.max.delivery.count.limit",
    ),
    "share.partition.max.record.locks": (
        "group.share.partition.max.record.locks",
        "group.share.min.partition.max.record.locks",
        "group.share.max.partition.max.record.locks",
    ),
}
"""Group configs bounded by broker settings: the broker's default, minimum and maximum."""


def share_group_bounds(config: BrokerConfig, group_name: str) -> tuple[int, int]:
    """The lowest and highest value a group may set for ``group_name`` (a key of
    :data:`SHARE_GROUP_BOUNDS`) on this broker."""
    _, min_name, max_name = SHARE_GROUP_BOUNDS[group_name]
    low = getattr(config, BROKER_PROPERTIES[min_name][0])
    high = getattr(config, BROKER_PROPERTIES[max_name][0])
    return int(low), int(high)


def group_config_default(config: BrokerConfig, group_name: str) -> str:
    """What a group config is when the group does not set it: the broker setting it
    defaults to (:data:`BROKER_NAME_OF_GROUP_KEY`) as this broker has it, else Kafka's
    default."""
    key = GROUP_CONFIG_KEYS[group_name]
    broker_name = BROKER_NAME_OF_GROUP_KEY.get(group_name)
    if broker_name is None:
        return key.default
    if broker_name in config.group_properties:
        return config.group_properties[broker_name]
    setting = BROKER_PROPERTIES.get(broker_name)
    return key.default if setting is None else str(getattr(config, setting[0]))


BROKER_NAME_OF_GROUP_KEY: dict[str, str] = {
    "consumer.session.timeout.ms": "group.consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms": "group.consumer.heartbeat.interval.ms",
    "share.session.timeout.ms": "group.share.session.timeout.ms",
    "share.heartbeat.interval.ms": "group.share.heartbeat.interval.ms",
    "share.record.lock.duration.ms": "group.share.record.lock.duration.ms",
    "share.auto.offset.reset": "group.share.auto.offset.reset",
    "share.delivery.count.limit": "group.share.delivery.count.limit",
    "share.partition.max.record.locks": "group.share.partition.max.record.locks",
}
"""The broker setting each group config defaults to (its synonym in DescribeConfigs)."""


def parse_group_configs(
    entries: Mapping[str, str | None], broker: BrokerConfig | None = None
) -> dict[str, str]:
    """Check a group's whole override set; return it normalised. Raises InvalidConfig
    for an unknown name, a value out of range (for :data:`SHARE_GROUP_BOUNDS` and
    :data:`CONSUMER_GROUP_BOUNDS`, out of the bounds ``broker`` sets, Kafka's defaults
    without one), or a session timeout not above the heartbeat interval, either of them
    the broker's when the group does not set it (Kafka's GroupConfig.validate)."""
    bounds = broker if broker is not None else BrokerConfig()
    checked: dict[str, str] = {}
    for name, text in entries.items():
        key = GROUP_CONFIG_KEYS.get(name)
        if key is None:
            raise errors.InvalidConfig(f"Unknown group config name: {name}")
        if text is None:
            raise errors.InvalidConfig(f"group config {name!r} has no value")
        try:
            checked[name] = str(key.parse(text.strip()))
        except ValueError as e:
            raise errors.InvalidConfig(f"{name}: {e}") from None
        if name in SHARE_GROUP_BOUNDS:
            low, high = share_group_bounds(bounds, name)
            _, min_name, max_name = SHARE_GROUP_BOUNDS[name]
        elif name in CONSUMER_GROUP_BOUNDS:
            low, high = consumer_group_bounds(bounds, name)
            min_name, _, max_name, _ = CONSUMER_GROUP_BOUNDS[name]
        else:
            continue
        if not low <= int(checked[name]) <= high:
            raise errors.InvalidConfig(
                f"{name} must be in the range {low} to {high} inclusive "
                f"({min_name} to {max_name}), not {checked[name]}"
            )
    defaults = {name: group_config_default(bounds, name) for name in GROUP_CONFIG_KEYS}
    effective = defaults | checked
    for kind in ("consumer", "share"):
        session, heartbeat = f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms"
        if int(effective[session]) <= int(effective[heartbeat]):
            raise errors.InvalidConfig(f"{session} must be greater than {heartbeat}")
    return checked
