"""The JSON documents of ``sluice topics list --format json`` and ``sluice topics
describe --format json``. Their keys are stable (scripts read them; docs/cli.md lists
them): new keys may be added, none renamed or removed.

``topics list``: an array, sorted by name, of::

    {"name": "orders", "partitions": 3, "replication_factor": 1, "internal": false}

``topics describe``: one object::

    {"name": "orders", "internal": false, "partition_count": 3, "replication_factor": 1,
     "partitions": [{"partition": 0, "leader": 1, "leader_epoch": 0, "replicas": [1],
                     "isr": [1], "log_start_offset": 0, "log_end_offset": 42}, ...],
     "configs": {"retention.ms": {"value": "604800000", "source": "default",
                                  "sensitive": false, "read_only": false}, ...}}

``leader`` is null when the partition has none; a sensitive config's ``value`` is null;
``source`` is Kafka's config source in lower case (:func:`config_source_name`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluice.client.admin import ConfigEntry, ConfigSource
from sluice.client.cluster import NO_LEADER, TopicMetadata
from sluice.common.ids import TopicPartition


def config_source_name(source: ConfigSource) -> str:
    """``topic``, ``dynamic_broker``, ``dynamic_default_broker``, ``static_broker``,
    ``default``, ``dynamic_broker_logger`` or ``unknown`` (DescribeConfigs' sources)."""
    return source.name.lower()


def config_document(entry: ConfigEntry) -> dict[str, Any]:
    return {
        "value": None if entry.is_sensitive else entry.value,
        "source": config_source_name(entry.source),
        "sensitive": entry.is_sensitive,
        "read_only": entry.read_only,
    }


def topic_listing_document(topic: TopicMetadata) -> dict[str, Any]:
    return {
        "name": topic.name,
        "partitions": len(topic.partitions),
        "replication_factor": topic.replication_factor,
        "internal": topic.is_internal,
    }


def topic_description_document(
    metadata: TopicMetadata,
    offsets: Mapping[TopicPartition, tuple[int, int]],
    configs: Mapping[str, ConfigEntry],
) -> dict[str, Any]:
    """The topic, each partition's leader, replicas and (log start, log end) offsets,
    and every config."""
    partitions = []
    for partition in metadata.partitions:
        start, end = offsets[partition.topic_partition]
        partitions.append(
            {
                "partition": partition.partition,
                "leader": None if partition.leader_id == NO_LEADER else partition.leader_id,
                "leader_epoch": partition.leader_epoch,
                "replicas": list(partition.replica_ids),
                "isr": list(partition.isr_ids),
                "log_start_offset": start,
                "log_end_offset": end,
            }
        )
    return {
        "name": metadata.name,
        "internal": metadata.is_internal,
        "partition_count": len(metadata.partitions),
        "replication_factor": metadata.replication_factor,
        "partitions": partitions,
        "configs": {name: config_document(configs[name]) for name in sorted(configs)},
    }
