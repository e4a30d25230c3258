"""DescribeConfigs v1-3, AlterConfigs v0-1, IncrementalAlterConfigs v0: topic and broker
configuration.

A topic config's effective value comes from the first of these that has it; that one is
its ``config_source``, and with ``include_synonyms`` the whole chain is listed, most
specific first, as Kafka does::

    topic override (retention.ms)                 DYNAMIC_TOPIC_CONFIG   1
      └─▶ broker setting (log.retention.ms)       STATIC_BROKER_CONFIG   4  (-o, --config)
            └─▶ built-in default                  DEFAULT_CONFIG         5

A broker default is "set" when it differs from the one a fresh ``BrokerConfig`` has, so
Sluice's own defaults (``flush.ms``, see ``SLUICE_TOPIC_DEFAULTS``) count as defaults and
clients show them as such (``is_default``).

Broker configs (resource type 4) are static: DescribeConfigs lists them read-only and
both alter APIs refuse them. Topic configs (type 2) change through the metadata store:
AlterConfigs replaces the topic's whole override set with the given entries (Kafka's
legacy semantics: keys left out go back to their defaults); IncrementalAlterConfigs
applies SET / DELETE / APPEND / SUBTRACT to single keys, the last two only on list-valued
keys. Every value is checked with :func:`~sluice.common.config.parse_topic_configs`
before anything is written, so a bad entry changes nothing (INVALID_CONFIG).
``validate_only`` checks everything and writes nothing.

The logic is in plain functions over mappings (``describe_topic_configs``,
``describe_broker_configs``, ``replaced_overrides``, ``incrementally_altered_overrides``);
the handlers only translate between them and kio messages.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.broker.dispatcher import handler
from sluice.common import errors
from sluice.common.config import (
    BROKER_PROPERTIES,
    BROKER_TOPIC_DEFAULTS,
    TOPIC_CONFIG_KEYS,
    BrokerConfig,
    ConfigKey,
    parse_topic_configs,
)
from sluice.common.errors import KafkaError
from sluice.protocol.codec import RequestHeader
from sluice.protocol.messages import make, response_module
from sluice.protocol.versions import ApiKey

if TYPE_CHECKING:
    from types import ModuleType

    from sluice.broker.app import Broker


class ResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4


class ConfigSource(IntEnum):
    DYNAMIC_TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(IntEnum):
    """DescribeConfigs v3 ``config_type`` (Kafka's ConfigDef types)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    LIST = 7


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

STATIC_BROKER_CONFIGS_MESSAGE = "broker configs are static; restart with -o key=value"

_INT32_MAX = 2**31 - 1

_BROKER_PROPERTY_DOCS: dict[str, str] = {
    "node.id": "this broker's id in the cluster",
    "broker.id": "this broker's id in the cluster (the older name of node.id)",
    "host": "the address the broker listens on",
    "port": "the port the broker listens on",
    "advertised.host": "the address given to clients, when it differs from host",
    "log.dirs": "the directory holding partition logs and metadata",
    "data.dir": "the directory holding partition logs and metadata",
    "num.partitions": "partitions of a topic created without a partition count",
    "default.replication.factor": "replicas of a topic created without a replication factor",
    "auto.create.topics.enable": "create a missing topic when a client asks for it",
    "log.flush.scheduler.interval.ms": "how often the flusher looks for partitions to fsync",
    "log.retention.check.interval.ms": "how often retention deletes old segments",
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


def _broker_level_synonyms(key: ConfigKey, config: BrokerConfig) -> list[Synonym]:
    """The broker setting for topic config ``key`` (if set) and the built-in default."""
    built_in = BrokerConfig().topic_defaults.get(key.name, key.default)
    broker_value = config.topic_defaults.get(key.name, built_in)
    broker_name = BROKER_NAME_OF_TOPIC_KEY.get(key.name, key.name)
    synonyms = []
    if broker_value != built_in:
        synonyms.append(Synonym(broker_name, broker_value, ConfigSource.STATIC_BROKER_CONFIG))
    synonyms.append(Synonym(broker_name, built_in, ConfigSource.DEFAULT_CONFIG))
    return synonyms


def describe_topic_configs(
    overrides: Mapping[str, str], config: BrokerConfig, names: Collection[str] | None = None
) -> list[DescribedConfig]:
    """Every topic config (or those in ``names``) with its effective value and source."""
    described = []
    for name, key in TOPIC_CONFIG_KEYS.items():
        if names is not None and name not in names:
            continue
        synonyms = _broker_level_synonyms(key, config)
        if name in overrides:
            synonyms.insert(0, Synonym(name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
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
    return str(value)


def _broker_property_type(name: str, value: object) -> ConfigType:
    if isinstance(value, bool):
        return ConfigType.BOOLEAN
    if isinstance(value, int):
        return ConfigType.LONG if name.endswith(".ms") else ConfigType.INT
    return ConfigType.STRING


def describe_broker_configs(
    config: BrokerConfig, names: Collection[str] | None = None
) -> list[DescribedConfig]:
    """The broker's settings (or those in ``names``), read-only: its own properties, then
    the defaults it gives topic configs, under Kafka's broker names."""
    built_in = BrokerConfig()
    described = []
    for name, (attribute, _) in BROKER_PROPERTIES.items():
        if names is not None and name not in names:
            continue
        value, default = getattr(config, attribute), getattr(built_in, attribute)
        synonyms = [Synonym(name, _text(default), ConfigSource.DEFAULT_CONFIG)]
        if value != default:
            synonyms.insert(0, Synonym(name, _text(value), ConfigSource.STATIC_BROKER_CONFIG))
        effective = synonyms[0]
        described.append(
            DescribedConfig(
                name=name,
                value=effective.value,
                source=effective.source,
                read_only=True,
                sensitive=False,
                config_type=_broker_property_type(name, default),
                documentation=_BROKER_PROPERTY_DOCS.get(name),
                synonyms=tuple(synonyms),
            )
        )
    for broker_name, topic_key in BROKER_TOPIC_DEFAULTS.items():
        if names is not None and broker_name not in names:
            continue
        key = TOPIC_CONFIG_KEYS[topic_key]
        described.append(
            _described(
                broker_name,
                key,
                _broker_level_synonyms(key, config),
                read_only=True,
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


def _list_items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


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
            items, given = _list_items(effective), _list_items(value)
            if operation == AlterConfigOp.APPEND:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            altered[name] = ",".join(items)
        else:
            raise errors.InvalidRequest(f"unknown config operation {operation} for {name!r}")
    return parse_topic_configs(altered)


# ── handlers ───────────────────────────────────────────────────────────────────────────


def _unsupported_resource_type(resource_type: int) -> KafkaError:
    return errors.InvalidRequest(
        f"resource type {resource_type} is not supported; Sluice has topic (2) and "
        "broker (4) configs"
    )


def _check_broker_name(broker: Broker, resource_name: str) -> None:
    """A broker resource names this broker's id, or is empty (the cluster default)."""
    if resource_name not in ("", str(broker.config.node_id)):
        raise errors.InvalidRequest(
            f"this is broker {broker.config.node_id}, not {resource_name!r}; ask that broker"
        )


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


def _describe_resource(broker: Broker, resource: Any) -> list[DescribedConfig]:
    resource_type = int(resource.resource_type)
    names = resource.configuration_keys
    if resource_type == ResourceType.TOPIC:
        topic = broker.topics.require(resource.resource_name)
        return describe_topic_configs(topic.configs, broker.config, names)
    if resource_type == ResourceType.BROKER:
        _check_broker_name(broker, resource.resource_name)
        return describe_broker_configs(broker.config, names)
    raise _unsupported_resource_type(resource_type)


@handler(ApiKey.DESCRIBE_CONFIGS)
async def handle_describe_configs(broker: Broker, header: RequestHeader, request: Any) -> Any:
    module = response_module(header.api_key, header.api_version)
    results = []
    for resource in request.resources:
        failure: KafkaError | None = None
        described: list[DescribedConfig] = []
        try:
            described = _describe_resource(broker, resource)
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


def _alter_resource(broker: Broker, resource: Any, validate_only: bool, incremental: bool) -> None:
    resource_type = int(resource.resource_type)
    if resource_type == ResourceType.BROKER:
        raise errors.InvalidRequest(STATIC_BROKER_CONFIGS_MESSAGE)
    if resource_type != ResourceType.TOPIC:
        raise _unsupported_resource_type(resource_type)
    topic = broker.topics.require(resource.resource_name)
    if incremental:
        overrides = incrementally_altered_overrides(
            topic.configs,
            broker.config,
            [(c.name, int(c.config_operation), c.value) for c in resource.configs],
        )
    else:
        overrides = replaced_overrides([(c.name, c.value) for c in resource.configs])
    broker.topics.set_configs(topic.name, overrides, validate_only=validate_only)


def _alter(broker: Broker, header: RequestHeader, request: Any, *, incremental: bool) -> Any:
    module = response_module(header.api_key, header.api_version)
    repeated = Counter((int(r.resource_type), r.resource_name) for r in request.resources)
    responses = []
    for resource in request.resources:
        failure: KafkaError | None = None
        try:
            if repeated[int(resource.resource_type), resource.resource_name] > 1:
                raise errors.InvalidRequest(
                    f"resource {resource.resource_name!r} appears more than once in the request"
                )
            _alter_resource(broker, resource, bool(request.validate_only), incremental)
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


@handler(ApiKey.ALTER_CONFIGS)
async def handle_alter_configs(broker: Broker, header: RequestHeader, request: Any) -> Any:
    return _alter(broker, header, request, incremental=False)


@handler(ApiKey.INCREMENTAL_ALTER_CONFIGS)
async def handle_incremental_alter_configs(
    broker: Broker, header: RequestHeader, request: Any
) -> Any:
    return _alter(broker, header, request, incremental=True)
