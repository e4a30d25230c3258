"""Dynamic broker configs: the broker settings that change at run time, without a
restart, through AlterConfigs / IncrementalAlterConfigs on a BROKER resource.

They are kept in the metadata store at two levels, as Kafka keeps them::

    resource name     level                      DescribeConfigs source
    "<node id>"       one broker                 DYNAMIC_BROKER_CONFIG          2
    ""                every broker (default)     DYNAMIC_DEFAULT_BROKER_CONFIG  3

and a broker's setting comes from the first of these that has it::

    per-broker dynamic ─▶ cluster-wide dynamic ─▶ static (file, -o) ─▶ built-in default

Which settings may change is Kafka's rule (its DynamicBrokerConfig), limited to what
Sluice has: every broker default of a topic config (``log.retention.ms``,
``message.max.bytes``, ``min.insync.replicas``, ...: the names of
``BROKER_TOPIC_DEFAULTS``), the log cleaner's budget and back-off, and the connection
limits. Anything else is refused with INVALID_REQUEST and Kafka's message ("Cannot
update these configs dynamically: ..."); a bad value is refused with INVALID_REQUEST
too, as Kafka does for broker configs (its ConfigException becomes an
InvalidRequestException), with a message naming the setting and the value.

The logic here is pure: :func:`checked_dynamic_configs` checks one level's settings,
:func:`effective_config` lays the levels over the static config.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from sluice.common import errors
from sluice.common.config import (
    BROKER_PROPERTIES,
    BROKER_TOPIC_DEFAULTS,
    BrokerConfig,
    BrokerConfigError,
)

CLUSTER_DEFAULT = ""
"""The resource name of the cluster-wide default level."""

DYNAMIC_BROKER_PROPERTIES = frozenset(
    {
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.backoff.ms",
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
    }
)
"""Broker settings besides the topic defaults that Kafka lets change at run time and
Sluice reads each time it uses them (the cleaner) or applies to its listeners."""

DYNAMIC_BROKER_CONFIGS = frozenset(BROKER_TOPIC_DEFAULTS) | DYNAMIC_BROKER_PROPERTIES
"""Every setting AlterConfigs may change on a BROKER resource, by Kafka's name."""

LIST_VALUED_BROKER_CONFIGS = frozenset({"log.cleanup.policy"})
"""Dynamic settings whose value is a list (APPEND and SUBTRACT apply)."""

CONNECTION_LIMIT_CONFIGS = frozenset(
    {"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"}
)
"""Dynamic settings the listeners apply to the connections they accept next."""


def _set_text(names: list[str]) -> str:
    """Names as Kafka's messages list them (a Scala set)."""
    return "Set(" + ", ".join(names) + ")"


def checked_dynamic_configs(entries: Mapping[str, str | None]) -> dict[str, str]:
    """One level's dynamic settings, checked by name and value and normalised. Raises
    InvalidRequest naming what cannot change at run time or does not parse."""
    null = sorted(name for name, value in entries.items() if value is None)
    if null:
        raise errors.InvalidRequest("Null value not supported for : " + ", ".join(null))
    refused = sorted(name for name in entries if name not in DYNAMIC_BROKER_CONFIGS)
    if refused:
        raise errors.InvalidRequest(
            f"Cannot update these configs dynamically: {_set_text(refused)}"
        )
    checked: dict[str, str] = {}
    for name, text in sorted(entries.items()):
        assert text is not None
        probe = BrokerConfig()
        try:
            probe.apply_dynamic({name: text})
        except (BrokerConfigError, ValueError) as e:
            reason = str(e).removeprefix(f"{name}: ")
            raise errors.InvalidRequest(
                f"Invalid value {text} for configuration {name}: {reason}"
            ) from None
        checked[name] = _normalised(probe, name, text)
    return checked


def _normalised(parsed: BrokerConfig, name: str, text: str) -> str:
    """The stored form of a value: a topic default as the topic config keeps it (so
    ``True`` is ``true``), any other setting as given, trimmed."""
    topic_key = BROKER_TOPIC_DEFAULTS.get(name)
    if topic_key is not None:
        return parsed.topic_defaults[topic_key]
    return text.strip()


def effective_config(
    static: BrokerConfig, cluster_default: Mapping[str, str], per_broker: Mapping[str, str]
) -> BrokerConfig:
    """A copy of ``static`` with the cluster-wide dynamic settings applied, then this
    broker's own (which win). The levels were checked when written; a value that no
    longer parses (written by a newer version) raises BrokerConfigError."""
    effective = copy.deepcopy(static)
    effective.apply_dynamic(
        {name: value for name, value in cluster_default.items() if name in DYNAMIC_BROKER_CONFIGS}
    )
    effective.apply_dynamic(
        {name: value for name, value in per_broker.items() if name in DYNAMIC_BROKER_CONFIGS}
    )
    return effective


def adopt(live: BrokerConfig, effective: BrokerConfig) -> None:
    """Copy the dynamic settings of ``effective`` into ``live``, the config object the
    broker's parts hold (the topic defaults in place: the replica manager and the
    controller share that dict)."""
    if live.topic_defaults != effective.topic_defaults:
        live.topic_defaults.clear()
        live.topic_defaults.update(effective.topic_defaults)
    for name in DYNAMIC_BROKER_PROPERTIES:
        attribute, _ = BROKER_PROPERTIES[name]
        setattr(live, attribute, copy.deepcopy(getattr(effective, attribute)))
