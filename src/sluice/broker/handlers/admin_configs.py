"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs: topic, broker and group
configuration.

A topic config's effective value comes from the first of these that has it; that one is
its ``config_source``, and with ``include_synonyms`` the whole chain is listed, most
specific first, as Kafka does::

    topic override (retention.ms)                 DYNAMIC_TOPIC_CONFIG           1
      └─▶ this broker's dynamic log.retention.ms  DYNAMIC_BROKER_CONFIG          2
        └─▶ the cluster's dynamic default         DYNAMIC_DEFAULT_BROKER_CONFIG  3
          └─▶ broker setting (log.retention.ms)   STATIC_BROKER_CONFIG           4  (-o, --config)
            └─▶ built-in default                  DEFAULT_CONFIG                 5

A broker default is "set" when it differs from the one a fresh ``BrokerConfig`` has, so
Sluice's own defaults (``flush.ms``, see ``SLUICE_TOPIC_DEFAULTS``) count as defaults and
clients show them as such (``is_default``).

Broker configs (resource type 4): DescribeConfigs of ``"<node id>"`` lists every
setting, those that may change at run time (:mod:`sluice.common.dynamic_config`) not
read-only, each with the chain above (the broker's dynamic value, the cluster's, the
static one, the default); of ``""`` only the cluster-wide dynamic settings, as Kafka
answers. Both alter APIs change one level in the metadata store: ``""`` the cluster
default, ``"<node id>"`` (this broker's id only) the broker's own; AlterConfigs replaces
the level's whole set, IncrementalAlterConfigs SETs, DELETEs, APPENDs or SUBTRACTs
(``log.cleanup.policy``) single settings. A setting that cannot change at run time or a
bad value is refused with INVALID_REQUEST, as Kafka refuses them. Every broker applies
what applies to it once it sees the change (:mod:`sluice.broker.dynamic_config`); the
request is answered once this broker has. Topic configs (type 2) change through the metadata store:
AlterConfigs replaces the topic's whole override set with the given entries (Kafka's
legacy semantics: keys left out go back to their defaults); IncrementalAlterConfigs
applies SET / DELETE / APPEND / SUBTRACT to single keys, the last two only on list-valued
keys. Every value is checked with :func:`~sluice.common.config.parse_topic_configs`
before anything is written, so a bad entry changes nothing (INVALID_CONFIG).
``validate_only`` checks everything and writes nothing.

List configs (``cleanup.policy``) keep the order given: APPEND adds the missing items
at the end, SUBTRACT removes items, and the empty list is a value (Kafka 4.2+: for
``cleanup.policy``, keep everything).

Group configs (resource type 32, Kafka's GroupConfig names: ``consumer.*`` and
``share.*``) are per group id, whether or not the group exists. IncrementalAlterConfigs
SETs and DELETEs them, checked by name and range as a whole
(:func:`~sluice.common.config.parse_group_configs`), stored in the metadata store and
answered once this broker's metadata image holds them (every broker reads a group's
configs from its image, so the group's next request here runs with them);
DescribeConfigs shows the group's value (GROUP_CONFIG, 8) or Kafka's default
(DEFAULT_CONFIG), with the broker setting it defaults to as a synonym. The legacy
AlterConfigs refuses groups (INVALID_REQUEST), as it predates them.

The logic is in plain functions over mappings (``describe_topic_configs``,
``describe_broker_configs``, ``replaced_overrides``, ``incrementally_altered_overrides``);
the handlers only translate between them and kio messages.

With the authorizer on: DESCRIBE_CONFIGS (describe) or ALTER_CONFIGS (alter) on the topic,
the group, or the cluster for a broker's configs; a refused resource is answered
TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.authorization import CLUSTER, Need
from sluice.broker.handlers.acl_rules import (
    CLUSTER_ALTER_CONFIGS,
    CLUSTER_DESCRIBE_CONFIGS,
    GROUP_ALTER_CONFIGS,
    GROUP_DESCRIBE_CONFIGS,
    TOPIC_ALTER_CONFIGS,
    TOPIC_DESCRIBE_CONFIGS,
)
from sluice.broker.services import (
    UsesAuthorizer,
    UsesConfig,
    UsesStaticConfig,
    UsesStore,
    UsesTopics,
)
from sluice.cluster.store import MetadataStoreError
from sluice.common import errors
from sluice.common.authorizer import ResourceType as AclResourceType
from sluice.common.config import (
    BROKER_NAME_OF_GROUP_KEY,
    BROKER_PROPERTIES,
    BROKER_TOPIC_DEFAULTS,
    GROUP_CONFIG_KEYS,
    LISTENER_SECURITY_SETTINGS,
    SENSITIVE_BROKER_PROPERTIES,
    SENSITIVE_SECURITY_SETTINGS,
    TOPIC_CONFIG_KEYS,
    BrokerConfig,
    ConfigKey,
    Listener,
    group_config_default,
    list_items,
    parse_group_configs,
    parse_topic_configs,
)
from sluice.common.dynamic_config import (
    CLUSTER_DEFAULT,
    DYNAMIC_BROKER_CONFIGS,
    LIST_VALUED_BROKER_CONFIGS,
    checked_dynamic_configs,
)
from sluice.common.errors import KafkaError
from sluice.group.config import CONSUMER_ASSIGNORS_PROPERTY, GROUP_PROPERTIES, GroupConfig
from sluice.protocol.messages import make, response_module

if TYPE_CHECKING:
    from types import ModuleType

    from sluice.broker.context import RequestContext
    from sluice.cluster.model import TopicMetadata


class AdminConfigsServices(
    UsesAuthorizer, UsesConfig, UsesStaticConfig, UsesStore, UsesTopics, Protocol
):
    """What the admin configs handlers use of the broker."""


class ResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4
    GROUP = 32


class ConfigSource(IntEnum):
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8


class ConfigType(IntEnum):
    """DescribeConfigs v3 ``config_type`` (Kafka's ConfigDef types)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    LIST = 7
    PASSWORD = 9


class AlterConfigOp(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


LIST_VALUED_KEYS = frozenset({"cleanup.policy"})
"""Topic configs whose value is a comma-separated list (APPEND and SUBTRACT apply)."""

BROKER_NAME_OF_TOPIC_KEY: dict[str, str] = {
    topic_key: broker_name for broker_name, topic_key in BROKER_TOPIC_DEFAULTS.items()
}

_INT32_MAX = 2**31 - 1

_BROKER_PROPERTY_DOCS: dict[str, str] = {
    "node.id": "this broker's id in the cluster",
    "broker.id": "this broker's id in the cluster (the older name of node.id)",
    "host": "the address the broker listens on (Sluice's name; Kafka's is listeners)",
    "port": "the port the broker listens on (Sluice's name; Kafka's is listeners)",
    "advertised.host": "the address given to clients (Sluice's; see advertised.listeners)",
    "log.dirs": "the directory holding partition logs and metadata (one directory)",
    "data.dir": "the directory holding partition logs and metadata (Sluice's name)",
    "num.partitions": "partitions of a topic created without a partition count",
    "default.replication.factor": "replicas of a topic created without a replication factor",
    "auto.create.topics.enable": "create a missing topic when a client asks for it",
    "log.flush.scheduler.interval.ms": "how often the flusher looks for partitions to fsync",
    "log.retention.check.interval.ms": "how often retention deletes old segments",
    "schema.registry.listeners": "where the Schema Registry's REST API listens (empty: off)",
    "schema.registry.topic": "the compacted topic holding the Schema Registry's schemas",
    "schema.registry.topic.replication.factor": "replicas of the Schema Registry's topic",
    "schema.compatibility.level": "the Schema Registry's default compatibility level",
    "schema.registry.schema.max.bytes": "the longest schema text the registry accepts",
}


@dataclass(frozen=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class DescribedConfig:
    """One config entry of a DescribeConfigs answer, independent of the version."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    config_type: ConfigType
    documentation: str | None
    synonyms: tuple[Synonym, ...]
    """The chain of places a value can come from, the one in effect first."""


# ── describing ─────────────────────────────────────────────────────────────────────────


def _topic_config_type(key: ConfigKey) -> ConfigType:
    if key.name in LIST_VALUED_KEYS:
        return ConfigType.LIST
    if key.default in ("true", "false"):
        return ConfigType.BOOLEAN
    try:
        int(key.default)
    except ValueError:
        return ConfigType.STRING
    # Integer keys are INT when their parser stops at the int32 maximum, LONG otherwise.
    try:
        key.parse(str(_INT32_MAX + 1))
    except ValueError:
        return ConfigType.INT
    return ConfigType.LONG


def _described(
    name: str,
    key: ConfigKey,
    synonyms: list[Synonym],
    *,
    read_only: bool,
    documentation: str,
    config_type: ConfigType,
) -> DescribedConfig:
    if key.sensitive:
        synonyms = [Synonym(s.name, None, s.source) for s in synonyms]
    effective = synonyms[0]
    return DescribedConfig(
        name=name,
        value=effective.value,
        source=effective.source,
        read_only=read_only,
        sensitive=key.sensitive,
        config_type=config_type,
        documentation=documentation,
        synonyms=tuple(synonyms),
    )


@dataclass(frozen=True)
class BrokerLevels:
    """Where a broker setting can come from besides its default: the static config and
    the dynamic levels (cluster default, this broker's own)."""

    static: BrokerConfig
    cluster_default: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    per_broker: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def dynamic_synonyms(self, name: str) -> list[Synonym]:
        """The dynamic values of broker setting ``name``, the one that wins first."""
        synonyms = []
        if name in self.per_broker:
            synonyms.append(
                Synonym(name, self.per_broker[name], ConfigSource.DYNAMIC_BROKER_CONFIG)
            )
        if name in self.cluster_default:
            synonyms.append(
                Synonym(
                    name, self.cluster_default[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
                )
            )
        return synonyms


def _levels(config: BrokerConfig | BrokerLevels) -> BrokerLevels:
    return config if isinstance(config, BrokerLevels) else BrokerLevels(config)


def _broker_level_synonyms(key: ConfigKey, levels: BrokerLevels) -> list[Synonym]:
    """The broker setting for topic config ``key``: its dynamic values, the static one
    (if set) and the built-in default."""
    config = levels.static
    built_in = BrokerConfig().topic_defaults.get(key.name, key.default)
    broker_value = config.topic_defaults.get(key.name, built_in)
    broker_name = BROKER_NAME_OF_TOPIC_KEY.get(key.name, key.name)
    synonyms = levels.dynamic_synonyms(broker_name)
    if broker_value != built_in or _given(config, broker_name):
        synonyms.append(Synonym(broker_name, broker_value, ConfigSource.STATIC_BROKER_CONFIG))
    synonyms.append(Synonym(broker_name, built_in, ConfigSource.DEFAULT_CONFIG))
    return synonyms


def describe_topic_configs(
    overrides: Mapping[str, str],
    config: BrokerConfig | BrokerLevels,
    names: Collection[str] | None = None,
) -> list[DescribedConfig]:
    """Every topic config (or those in ``names``) with its effective value and source
    (``config``: the static config, or it with the dynamic levels)."""
    levels = _levels(config)
    return _describe_keys(
        TOPIC_CONFIG_KEYS,
        overrides,
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
        lambda name, key: _broker_level_synonyms(key, levels),
        names,
    )


def describe_group_configs(
    overrides: Mapping[str, str],
    names: Collection[str] | None = None,
    config: BrokerConfig | None = None,
) -> list[DescribedConfig]:
    """Every group config (or those in ``names``): the group's override if it has one
    (GROUP_CONFIG), else the broker setting it comes from as ``config`` has it (Kafka's
    default without one), listed under that setting's name (under its own name when no
    broker setting gives it: the dead-letter settings)."""
    broker = config if config is not None else BrokerConfig()
    return _describe_keys(
        GROUP_CONFIG_KEYS,
        overrides,
        ConfigSource.GROUP_CONFIG,
        lambda name, key: [
            Synonym(
                BROKER_NAME_OF_GROUP_KEY.get(name, name),
                group_config_default(broker, name),
                ConfigSource.DEFAULT_CONFIG,
            )
        ],
        names,
    )


def _describe_keys(
    keys: Mapping[str, ConfigKey],
    overrides: Mapping[str, str],
    override_source: ConfigSource,
    defaults: Callable[[str, ConfigKey], list[Synonym]],
    names: Collection[str] | None,
) -> list[DescribedConfig]:
    """``keys`` (or those in ``names``), each with its synonyms: its override first
    (with ``override_source``), then where its default comes from (``defaults``)."""
    described = []
    for name, key in keys.items():
        if names is not None and name not in names:
            continue
        synonyms = defaults(name, key)
        if name in overrides:
            synonyms.insert(0, Synonym(name, overrides[name], override_source))
        described.append(
            _described(
                name,
                key,
                synonyms,
                read_only=False,
                documentation=key.doc,
                config_type=_topic_config_type(key),
            )
        )
    return described


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Path):
        return os.fspath(value)
    if isinstance(value, dict):  # max.connections.per.ip.overrides: Kafka's host:count list
        return ",".join(f"{key}:{count}" for key, count in value.items())
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def _broker_property_type(name: str, value: object) -> ConfigType:
    if isinstance(value, bool):
        return ConfigType.BOOLEAN
    if isinstance(value, int):
        return ConfigType.LONG if name.endswith(".ms") else ConfigType.INT
    if isinstance(value, tuple):
        return ConfigType.LIST
    if name in SENSITIVE_BROKER_PROPERTIES:
        return ConfigType.PASSWORD
    return ConfigType.STRING


_SETTING_ALIASES: dict[str, frozenset[str]] = {
    "node.id": frozenset({"broker.id"}),
    "broker.id": frozenset({"node.id"}),
    "log.dirs": frozenset({"data.dir"}),
    "data.dir": frozenset({"log.dirs"}),
    "listeners": frozenset({"host", "port"}),
    "host": frozenset({"listeners"}),
    "port": frozenset({"listeners"}),
    "advertised.listeners": frozenset({"advertised.host"}),
    "advertised.host": frozenset({"advertised.listeners"}),
    "log.retention.ms": frozenset({"log.retention.hours", "log.retention.minutes"}),
}
"""Settings that set the same value under another name (given either way, both are
static)."""


def _given(config: BrokerConfig, name: str) -> bool:
    """Whether ``name`` (or an alias of it) was set in the file, with -o or an option."""
    return bool({name, *_SETTING_ALIASES.get(name, ())} & config.static_names)


def _static_synonyms(
    name: str, value: str | None, default: str | None, given: bool
) -> list[Synonym]:
    synonyms = [Synonym(name, default, ConfigSource.DEFAULT_CONFIG)]
    if given or value != default:
        synonyms.insert(0, Synonym(name, value, ConfigSource.STATIC_BROKER_CONFIG))
    return synonyms


def _listener_settings(config: BrokerConfig) -> list[tuple[str, str | None, str | None, str]]:
    """(name, value, default, documentation) of Kafka's listener settings. The global
    security settings are listed (``ssl.key.password`` never: its value is hidden as
    Kafka hides sensitive ones, so it is left out)."""
    built_in = BrokerConfig()
    listeners = ",".join(map(str, config.listener_list()))
    default_listeners = str(Listener("PLAINTEXT", built_in.host, built_in.port))
    advertised: str | None = None
    if config.advertised_listeners:
        advertised = ",".join(map(str, config.advertised_listeners))
    elif config.advertised_host or config.advertised_port:
        advertised = str(
            Listener(
                "PLAINTEXT",
                config.advertised_host or config.host,
                config.advertised_port or config.port,
            )
        )

    def protocol_map(mapping: dict[str, str]) -> str:
        return ",".join(f"{name}:{protocol}" for name, protocol in mapping.items())

    rows: list[tuple[str, str | None, str | None, str]] = [
        ("listeners", listeners, default_listeners, "where the broker listens"),
        (
            "advertised.listeners",
            advertised,
            None,
            "the addresses clients are told to use; when null, the listeners'",
        ),
        (
            "listener.security.protocol.map",
            protocol_map(config.listener_security_protocol_map),
            protocol_map(built_in.listener_security_protocol_map),
            "the security protocol of each listener name",
        ),
        (
            "inter.broker.listener.name",
            config.inter_broker_listener(),
            None,
            "the listener other brokers connect to",
        ),
    ]
    for name in LISTENER_SECURITY_SETTINGS:
        if name not in SENSITIVE_SECURITY_SETTINGS:
            rows.append((name, config.security_settings.get(name), None, "a TLS or SASL setting"))
    return rows


def _group_coordinator_settings(config: BrokerConfig) -> list[tuple[str, str, str]]:
    """(name, value, default) of the group coordinator's broker settings."""
    built_in = GroupConfig()
    rows = []
    for name, (attribute, scale) in GROUP_PROPERTIES.items():
        default = str(getattr(built_in, attribute) // scale)
        rows.append((name, config.group_properties.get(name, default), default))
    default = ",".join(built_in.consumer_assignors)
    assignors = config.group_properties.get(CONSUMER_ASSIGNORS_PROPERTY, default)
    rows.append((CONSUMER_ASSIGNORS_PROPERTY, assignors, default))
    return rows


def describe_broker_configs(
    config: BrokerConfig | BrokerLevels, names: Collection[str] | None = None
) -> list[DescribedConfig]:
    """The broker's settings (or those in ``names``): Kafka's names, including
    ``listeners`` and ``advertised.listeners``, with Sluice-only names (``host``,
    ``port``, ``data.dir``, ``advertised.host``) beside them; then the defaults it gives
    topic configs, under Kafka's broker names. A setting given in the config file, with
    -o or as an option is STATIC_BROKER_CONFIG, even when it equals the default; a
    dynamic value wins over it (DYNAMIC_BROKER_CONFIG, then
    DYNAMIC_DEFAULT_BROKER_CONFIG). Settings that cannot change at run time are
    read-only."""
    levels = _levels(config)
    config = levels.static
    built_in = BrokerConfig()
    described = []

    def add(
        name: str,
        value: str | None,
        default: str | None,
        config_type: ConfigType,
        documentation: str | None,
    ) -> None:
        if names is not None and name not in names:
            return
        synonyms = levels.dynamic_synonyms(name) + _static_synonyms(
            name, value, default, _given(config, name)
        )
        sensitive = name in SENSITIVE_BROKER_PROPERTIES
        if sensitive:
            synonyms = [Synonym(s.name, None, s.source) for s in synonyms]
        effective = synonyms[0]
        described.append(
            DescribedConfig(
                name=name,
                value=effective.value,
                source=effective.source,
                read_only=name not in DYNAMIC_BROKER_CONFIGS,
                sensitive=sensitive,
                config_type=config_type,
                documentation=documentation,
                synonyms=tuple(synonyms),
            )
        )

    for name, value, default, documentation in _listener_settings(config):
        add(name, value, default, ConfigType.STRING, documentation)
    for name, (attribute, _) in BROKER_PROPERTIES.items():
        value, default = getattr(config, attribute), getattr(built_in, attribute)
        add(
            name,
            _text(value),
            _text(default),
            _broker_property_type(name, default),
            _BROKER_PROPERTY_DOCS.get(name),
        )
    for name, value, default in _group_coordinator_settings(config):
        config_type = ConfigType.LONG if name.endswith(".ms") else ConfigType.INT
        add(name, value, default, config_type, "a setting of the group coordinator")
    for broker_name, topic_key in BROKER_TOPIC_DEFAULTS.items():
        if names is not None and broker_name not in names:
            continue
        key = TOPIC_CONFIG_KEYS[topic_key]
        described.append(
            _described(
                broker_name,
                key,
                _broker_level_synonyms(key, levels),
                read_only=broker_name not in DYNAMIC_BROKER_CONFIGS,
                documentation=f"default of the topic config {topic_key}: {key.doc}",
                config_type=_topic_config_type(key),
            )
        )
    return described


# ── altering ───────────────────────────────────────────────────────────────────────────


def _refuse_duplicate_names(names: Sequence[str]) -> None:
    repeated = sorted(name for name, count in Counter(names).items() if count > 1)
    if repeated:
        raise errors.InvalidRequest(f"config {repeated[0]!r} is given more than once")


def replaced_overrides(entries: Sequence[tuple[str, str | None]]) -> dict[str, str]:
    """AlterConfigs: the new override set is exactly ``entries``, checked."""
    _refuse_duplicate_names([name for name, _ in entries])
    return parse_topic_configs(dict(entries))


def incrementally_altered_overrides(
    overrides: Mapping[str, str],
    config: BrokerConfig,
    changes: Sequence[tuple[str, int, str | None]],
) -> dict[str, str]:
    """IncrementalAlterConfigs: ``overrides`` with each (name, operation, value) applied,
    checked. APPEND and SUBTRACT start from the effective value when no override exists."""
    _refuse_duplicate_names([name for name, _, _ in changes])
    altered = dict(overrides)
    for name, operation, value in changes:
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None:
            raise errors.InvalidConfig(f"unknown topic config {name!r}")
        if operation == AlterConfigOp.SET:
            if value is None:
                raise errors.InvalidConfig(f"topic config {name!r} has no value")
            altered[name] = value
        elif operation == AlterConfigOp.DELETE:
            altered.pop(name, None)
        elif operation in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
            if name not in LIST_VALUED_KEYS:
                raise errors.InvalidConfig(
                    f"{name} is not a list: APPEND and SUBTRACT apply only to "
                    + ", ".join(sorted(LIST_VALUED_KEYS))
                )
            if value is None:
                raise errors.InvalidConfig(f"topic config {name!r} has no value")
            effective = altered.get(name, config.topic_defaults.get(name, key.default))
            altered[name] = _list_altered(effective, value, operation)
        else:
            raise errors.InvalidRequest(f"unknown config operation {operation} for {name!r}")
    return parse_topic_configs(altered)


def describe_cluster_default_configs(
    levels: BrokerLevels, names: Collection[str] | None = None
) -> list[DescribedConfig]:
    """DescribeConfigs of the broker resource ``""``: only the cluster-wide dynamic
    settings (DYNAMIC_DEFAULT_BROKER_CONFIG), as Kafka answers it, each with the static
    value and the default under it."""
    wanted = set(levels.cluster_default)
    if names is not None:
        wanted &= set(names)
    without_own = BrokerLevels(levels.static, levels.cluster_default)
    return [entry for entry in describe_broker_configs(without_own, wanted) if entry.name in wanted]


def incrementally_altered_broker_configs(
    stored: Mapping[str, str],
    effective: BrokerConfig,
    changes: Sequence[tuple[str, int, str | None]],
) -> dict[str, str]:
    """IncrementalAlterConfigs on a broker level: ``stored`` (that level's dynamic
    settings) with each change applied, then checked as a whole. APPEND and SUBTRACT
    (list settings only) start from the level's value, else the value in effect."""
    _refuse_duplicate_names([name for name, _, _ in changes])
    null = [name for name, operation, value in changes if value is None and operation != 1]
    if null:
        raise errors.InvalidRequest("Null value not supported for : " + ", ".join(null))
    altered: dict[str, str | None] = dict(stored)
    for name, operation, value in changes:
        if operation == AlterConfigOp.SET:
            altered[name] = value
        elif operation == AlterConfigOp.DELETE:
            altered.pop(name, None)
        elif operation in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
            if name not in LIST_VALUED_BROKER_CONFIGS:
                raise errors.InvalidConfig(
                    f"Config value {AlterConfigOp(operation).name.lower()} is not allowed for "
                    f"config key: {name}"
                )
            assert value is not None
            topic_key = BROKER_TOPIC_DEFAULTS[name]
            current = altered.get(name)
            if current is None:
                current = effective.topic_defaults.get(
                    topic_key, TOPIC_CONFIG_KEYS[topic_key].default
                )
            altered[name] = _list_altered(current, value, operation)
        else:
            raise errors.InvalidRequest(f"Unknown operations type {operation}")
    return checked_dynamic_configs(altered)


def replaced_broker_configs(entries: Sequence[tuple[str, str | None]]) -> dict[str, str]:
    """AlterConfigs on a broker level: the level's new set is exactly ``entries``."""
    _refuse_duplicate_names([name for name, _ in entries])
    return checked_dynamic_configs(dict(entries))


def incrementally_altered_group_configs(
    overrides: Mapping[str, str],
    changes: Sequence[tuple[str, int, str | None]],
    config: BrokerConfig | None = None,
) -> dict[str, str]:
    """IncrementalAlterConfigs on a group: SET and DELETE (no group config is a list),
    the result checked as a whole (Kafka's GroupConfig.validate), the share settings
    within the bounds ``config`` sets."""
    _refuse_duplicate_names([name for name, _, _ in changes])
    altered = dict(overrides)
    for name, operation, value in changes:
        if name not in GROUP_CONFIG_KEYS:
            raise errors.InvalidConfig(f"Unknown group config name: {name}")
        if operation == AlterConfigOp.SET:
            if value is None:
                raise errors.InvalidConfig(f"group config {name!r} has no value")
            altered[name] = value
        elif operation == AlterConfigOp.DELETE:
            altered.pop(name, None)
        elif operation in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
            raise errors.InvalidConfig(
                f"Can't {AlterConfigOp(operation).name} to key {name} because its type is not LIST."
            )
        else:
            raise errors.InvalidRequest(f"unknown config operation {operation} for {name!r}")
    return parse_group_configs(altered, config)


# ── handlers ───────────────────────────────────────────────────────────────────────────


def _unsupported_resource_type(resource_type: int) -> KafkaError:
    return errors.InvalidRequest(
        f"resource type {resource_type} is not supported; Sluice has topic (2), broker (4) "
        "and group (32) configs"
    )


def _check_group_name(group_id: str | None) -> str:
    if not group_id:
        raise errors.InvalidRequest("Group name must not be empty")
    return group_id


def _check_broker_name(services: AdminConfigsServices, resource_name: str) -> None:
    """A broker resource names this broker's id, or is empty (the cluster default);
    refused with Kafka's messages otherwise."""
    if resource_name == CLUSTER_DEFAULT:
        return
    try:
        node_id = int(resource_name)
    except ValueError:
        raise errors.InvalidRequest(
            f"Node id must be an integer, but it is: {resource_name}"
        ) from None
    if node_id != services.config.node_id:
        raise errors.InvalidRequest(
            f"Unexpected broker id, expected {services.config.node_id}, but received "
            f"{resource_name}"
        )


def _broker_levels(services: AdminConfigsServices) -> BrokerLevels:
    """This broker's static config and the dynamic levels that apply to it."""
    cluster_default, per_broker = services.store.image().dynamic_broker_configs(
        services.config.node_id
    )
    return BrokerLevels(services.static_config or services.config, cluster_default, per_broker)


def _config_entry(module: ModuleType, entry: DescribedConfig, request: Any) -> Any:
    include_synonyms = bool(getattr(request, "include_synonyms", False))
    include_documentation = bool(getattr(request, "include_documentation", False))
    return make(
        module.DescribeConfigsResourceResult,
        name=entry.name,
        value=entry.value,
        read_only=entry.read_only,
        config_source=int(entry.source),
        is_sensitive=entry.sensitive,
        synonyms=tuple(
            make(module.DescribeConfigsSynonym, name=s.name, value=s.value, source=int(s.source))
            for s in entry.synonyms
        )
        if include_synonyms
        else (),
        config_type=int(entry.config_type),
        documentation=entry.documentation if include_documentation else None,
    )


_DESCRIBE_NEEDS: dict[int, Need] = {
    ResourceType.TOPIC: TOPIC_DESCRIBE_CONFIGS,
    ResourceType.BROKER: CLUSTER_DESCRIBE_CONFIGS,
    ResourceType.GROUP: GROUP_DESCRIBE_CONFIGS,
}
_ALTER_NEEDS: dict[int, Need] = {
    ResourceType.TOPIC: TOPIC_ALTER_CONFIGS,
    ResourceType.BROKER: CLUSTER_ALTER_CONFIGS,
    ResourceType.GROUP: GROUP_ALTER_CONFIGS,
}


def _authorize(
    services: AdminConfigsServices, context: RequestContext, resource: Any, needs: dict[int, Need]
) -> None:
    """Raise the refusal for a config resource the request may not read or change (a
    broker's configs are the cluster's: Kafka authorizes them on the cluster)."""
    need = needs.get(int(resource.resource_type))
    if need is None:
        return  # refused as unsupported
    name = CLUSTER if need.resource_type is AclResourceType.CLUSTER else resource.resource_name
    services.authorizer.require(context, need, name or "")


async def _describe_resource(
    services: AdminConfigsServices, resource: Any
) -> list[DescribedConfig]:
    resource_type = int(resource.resource_type)
    names = resource.configuration_keys
    if resource_type == ResourceType.TOPIC:
        topic = services.topics.require(resource.resource_name)
        return describe_topic_configs(topic.configs, _broker_levels(services), names)
    if resource_type == ResourceType.BROKER:
        _check_broker_name(services, resource.resource_name)
        if resource.resource_name == CLUSTER_DEFAULT:
            return describe_cluster_default_configs(_broker_levels(services), names)
        return describe_broker_configs(_broker_levels(services), names)
    if resource_type == ResourceType.GROUP:
        group_id = _check_group_name(resource.resource_name)
        return describe_group_configs(
            services.store.image().group_overrides(group_id), names, services.config
        )
    raise _unsupported_resource_type(resource_type)


async def handle_describe_configs(
    services: AdminConfigsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    results = []
    for resource in request.resources:
        failure: KafkaError | None = None
        described: list[DescribedConfig] = []
        try:
            _authorize(services, context, resource, _DESCRIBE_NEEDS)
            described = await _describe_resource(services, resource)
        except KafkaError as e:
            failure = e
        results.append(
            make(
                module.DescribeConfigsResult,
                error_code=0 if failure is None else failure.code,
                error_message=None if failure is None else failure.message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=tuple(_config_entry(module, entry, request) for entry in described),
            )
        )
    return make(module.DescribeConfigsResponse, throttle_time=0, results=tuple(results))


async def _alter_resource(
    services: AdminConfigsServices, resource: Any, validate_only: bool, incremental: bool
) -> None:
    resource_type = int(resource.resource_type)
    if resource_type == ResourceType.BROKER:
        await _alter_broker_level(services, resource, validate_only, incremental)
        return
    if resource_type == ResourceType.GROUP and incremental:
        await _alter_group(services, resource, validate_only)
        return
    if resource_type == ResourceType.GROUP:
        raise errors.InvalidRequest(
            "group configs change through IncrementalAlterConfigs, not AlterConfigs"
        )
    if resource_type != ResourceType.TOPIC:
        raise _unsupported_resource_type(resource_type)

    def overrides(topic: TopicMetadata) -> dict[str, str]:
        """The new overrides, decided from the topic as stored (again if it changed)."""
        if incremental:
            return incrementally_altered_overrides(
                topic.configs,
                services.config,
                [(c.name, int(c.config_operation), c.value) for c in resource.configs],
            )
        return replaced_overrides([(c.name, c.value) for c in resource.configs])

    topic = services.topics.require(resource.resource_name)
    await services.topics.set_configs(topic.name, overrides, validate_only=validate_only)


async def _alter_group(services: AdminConfigsServices, resource: Any, validate_only: bool) -> None:
    """Change a group's config overrides; answered once this broker's image holds them,
    so the group's next request here (a ShareFetch) runs with them (the other brokers
    apply them when their store shows them)."""
    group_id = _check_group_name(resource.resource_name)
    stored = services.store.image().group_overrides(group_id)
    altered = incrementally_altered_group_configs(
        stored,
        [(c.name, int(c.config_operation), c.value) for c in resource.configs],
        services.config,
    )
    if validate_only or altered == dict(stored):
        return
    try:
        await services.store.set_group_configs(group_id, altered)
    except OSError as e:
        raise errors.KafkaStorageError(f"cannot store the group configs: {e}") from e
    except MetadataStoreError as e:
        raise errors.RequestTimedOut(f"cannot store the group configs: {e}") from e
    await services.topics.wait_applied(
        lambda applied: dict(applied.group_overrides(group_id)) == altered
    )


async def _alter_broker_level(
    services: AdminConfigsServices, resource: Any, validate_only: bool, incremental: bool
) -> None:
    """Change one level of dynamic broker configs; answered once this broker runs with
    it (the others apply it when their store shows it)."""
    name = resource.resource_name
    _check_broker_name(services, name)
    image = services.store.image()
    stored = image.broker_configs.get(name, {})
    if incremental:
        altered = incrementally_altered_broker_configs(
            stored,
            services.config,
            [(c.name, int(c.config_operation), c.value) for c in resource.configs],
        )
    else:
        altered = replaced_broker_configs([(c.name, c.value) for c in resource.configs])
    if validate_only or altered == dict(stored):
        return
    try:
        await services.store.set_broker_configs(name, altered)
    except OSError as e:
        raise errors.KafkaStorageError(f"cannot store the broker configs: {e}") from e
    except MetadataStoreError as e:
        raise errors.RequestTimedOut(f"cannot store the broker configs: {e}") from e
    await services.topics.wait_applied(
        lambda applied: dict(applied.broker_configs.get(name, {})) == altered
    )


async def _alter(
    services: AdminConfigsServices, context: RequestContext, request: Any, *, incremental: bool
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    repeated = Counter((int(r.resource_type), r.resource_name) for r in request.resources)
    responses = []
    for resource in request.resources:
        failure: KafkaError | None = None
        try:
            if repeated[int(resource.resource_type), resource.resource_name] > 1:
                raise errors.InvalidRequest(
                    f"resource {resource.resource_name!r} appears more than once in the request"
                )
            _authorize(services, context, resource, _ALTER_NEEDS)
            await _alter_resource(services, resource, bool(request.validate_only), incremental)
        except KafkaError as e:
            failure = e
        responses.append(
            make(
                module.AlterConfigsResourceResponse,
                error_code=0 if failure is None else failure.code,
                error_message=None if failure is None else failure.message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    response_class = (
        module.IncrementalAlterConfigsResponse if incremental else module.AlterConfigsResponse
    )
    return make(response_class, throttle_time=0, responses=tuple(responses))


async def handle_alter_configs(
    services: AdminConfigsServices, context: RequestContext, request: Any
) -> Any:
    return await _alter(services, context, request, incremental=False)


async def handle_incremental_alter_configs(
    services: AdminConfigsServices, context: RequestContext, request: Any
) -> Any:
    return await _alter(services, context, request, incremental=True)


def _list_altered(current: str, value: str, operation: int) -> str:
    """A list-valued config after IncrementalAlterConfigs' APPEND (items not yet there,
    in order) or SUBTRACT (every item given removed)."""
    items = [item for item in list_items(current) if item]
    given = [item for item in list_items(value) if item]
    if operation == AlterConfigOp.APPEND:
        items += [item for item in given if item not in items]
    else:
        items = [item for item in items if item not in given]
    return ",".join(items)
