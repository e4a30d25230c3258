"""Configuration definitions: topic configs under Kafka's names and defaults, and the
broker's own settings.

A topic's effective configuration is the broker default for each key, overridden by the
topic's own entries. Values arrive as strings (CreateTopics, AlterConfigs, the CLI) and
are parsed and range-checked here, so a bad value is refused where it enters with
INVALID_CONFIG and a message that says which key and why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.common import errors

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


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"{text!r} is not one of {', '.join(allowed)}")
        return text

    return parse


def _cleanup_policy(text: str) -> str:
    parts = sorted(p.strip() for p in text.split(",") if p.strip())
    if not parts or any(p not in ("compact", "delete") for p in parts):
        raise ValueError(f"{text!r} is not 'delete', 'compact' or 'compact,delete'")
    return ",".join(parts)


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{value} is outside [0, 1]")
    return value


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError(f"{text!r} is not 'true' or 'false'")
    return text.lower() == "true"


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

    @property
    def fsync_every_append(self) -> bool:
        """True when an acknowledgement must wait for fsync (flush.ms=0 or flush.messages=1)."""
        return self.flush_ms == 0 or self.flush_messages == 1

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy


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


@dataclass
class BrokerConfig:
    """Settings of one broker process (``sluice serve``), under Kafka's property names
    where Kafka has one (``BROKER_PROPERTIES`` lists them)."""

    node_id: int = 0
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    data_dir: Path = Path("./data")
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    log_flush_scheduler_interval_ms: int = 200
    """How often the flusher looks for partitions whose flush.ms has passed."""
    log_retention_check_interval_ms: int = 300_000
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 1
    offsets_topic_segment_bytes: int = 104_857_600
    log_cleaner_io_max_bytes_per_second: int = 50 * 1024 * 1024
    """Budget of the background log cleaner (reads plus writes), so compaction never
    starves produce and fetch of disk bandwidth."""
    log_cleaner_backoff_ms: int = 15_000
    """How often the cleaner looks for compacted partitions worth cleaning."""
    max_broker_partitions: int = 20_000
    """Partitions this broker may host, all topics together (``__consumer_offsets``
    included). Creating more is refused with POLICY_VIOLATION. Each partition keeps one
    file open and some memory, and is opened at every start; the limit (the name KIP-578
    proposed) keeps one request from taking the broker past what it can serve."""
    topic_defaults: dict[str, str] = field(default_factory=lambda: dict(SLUICE_TOPIC_DEFAULTS))
    """Broker-wide defaults of topic configs, by topic config name (``retention.ms``)."""
    group_properties: dict[str, str] = field(default_factory=dict)
    """Group-coordinator settings (``GROUP_PROPERTY_NAMES``), checked by the coordinator."""

    def apply_properties(self, properties: Mapping[str, str]) -> None:
        """Set values from Kafka-style ``name=value`` properties. Raises BrokerConfigError."""
        for name, text in properties.items():
            try:
                self._apply(name.strip(), text.strip())
            except BrokerConfigError:
                raise
            except ValueError as e:
                raise BrokerConfigError(f"{name}: {e}") from None

    def _apply(self, name: str, text: str) -> None:
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
            _long(0)(text)
            self.group_properties[name] = text
            return
        setting = BROKER_PROPERTIES.get(name)
        if setting is None:
            raise BrokerConfigError(
                f"unknown broker setting {name!r}; known settings: "
                + ", ".join(
                    sorted([*BROKER_PROPERTIES, *BROKER_TOPIC_DEFAULTS, *GROUP_PROPERTY_NAMES])
                )
            )
        attribute, parse = setting
        setattr(self, attribute, parse(text))


def _port(text: str) -> int:
    return _long(0, 65535)(text)


BROKER_PROPERTIES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "node.id": ("node_id", _long(0, 2**31 - 1)),
    "broker.id": ("node_id", _long(0, 2**31 - 1)),
    "host": ("host", str),
    "port": ("port", _port),
    "advertised.host": ("advertised_host", str),
    "log.dirs": ("data_dir", Path),
    "data.dir": ("data_dir", Path),
    "num.partitions": ("num_partitions", _long(1, 10_000)),
    "default.replication.factor": ("default_replication_factor", _long(1, 32)),
    "auto.create.topics.enable": ("auto_create_topics_enable", _bool),
    "log.flush.scheduler.interval.ms": ("log_flush_scheduler_interval_ms", _long(10)),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", _long(10)),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", _long(1, 1000)),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", _long(1, 32)),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", _long(14, 2**31 - 1)),
    "log.cleaner.io.max.bytes.per.second": ("log_cleaner_io_max_bytes_per_second", _long(1)),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", _long(10)),
    "max.broker.partitions": ("max_broker_partitions", _long(1, 2**31 - 1)),
}

GROUP_PROPERTY_NAMES = frozenset(
    {
        "group.initial.rebalance.delay.ms",
        "group.min.session.timeout.ms",
        "group.max.session.timeout.ms",
        "group.max.size",
        "offsets.retention.minutes",
        "offsets.retention.check.interval.ms",
        "offset.metadata.max.bytes",
    }
)
"""Names the group coordinator reads (``sluice.group.config``); kept here so the broker
can refuse unknown names at start-up without importing a higher layer."""


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
