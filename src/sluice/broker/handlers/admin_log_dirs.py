"""AlterReplicaLogDirs v1-2: moving replicas between a broker's log directories.

A Sluice broker has one log directory, its data directory, so there is nowhere to move a
replica to: a request naming that directory for a partition hosted here is already
satisfied, and succeeds without touching anything, as Kafka's answer for a replica that
is already in the destination. Per partition, as Kafka's ``ReplicaManager`` answers:

- a path that is not the broker's log directory: LOG_DIR_NOT_FOUND (57). The directory
  is named by its absolute path as DescribeLogDirs reports it, or as it was configured
  (``log.dirs`` / ``--data-dir``), made absolute;
- a partition this broker does not host: REPLICA_NOT_AVAILABLE (9), which Kafka keeps
  for this API in place of NOT_LEADER_OR_FOLLOWER;
- otherwise NONE.

A partition named twice is answered once, for the last directory named, as Kafka's map
of partitions to directories keeps it. With the authorizer on the request needs ALTER on
the cluster; without it every partition is answered CLUSTER_AUTHORIZATION_FAILED (31).
v0 was removed in Kafka 4.0.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import CLUSTER_ALTER
from sluice.broker.services import UsesAuthorizer, UsesConfig, UsesReplicas
from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.protocol.messages import make, response_module

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext


class AdminLogDirsServices(UsesAuthorizer, UsesConfig, UsesReplicas, Protocol):
    """What the admin log dirs handlers use of the broker."""


def log_dir_names(services: AdminLogDirsServices) -> frozenset[str]:
    """The names a request may give the broker's one log directory."""
    data_dir = services.config.data_dir
    return frozenset({str(data_dir.resolve()), os.path.abspath(data_dir)})


def _partition_error(services: AdminLogDirsServices, path: str, partition: TopicPartition) -> int:
    if path not in log_dir_names(services):
        return ErrorCode.log_dir_not_found
    if services.replicas.find(partition) is None:
        return ErrorCode.replica_not_available
    return ErrorCode.none


async def handle_alter_replica_log_dirs(
    services: AdminLogDirsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    allowed = services.authorizer.allows(context, CLUSTER_ALTER)
    destinations: dict[TopicPartition, str] = {}
    for log_dir in request.dirs:
        for topic in log_dir.topics:
            for index in topic.partitions:
                destinations[TopicPartition(topic.name, int(index))] = log_dir.path
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for partition, path in destinations.items():
        error = _partition_error(services, path, partition) if allowed else CLUSTER_ALTER.error_code
        by_topic[partition.topic].append(
            make(
                module.AlterReplicaLogDirPartitionResult,
                partition_index=partition.partition,
                error_code=error,
            )
        )
    return make(
        module.AlterReplicaLogDirsResponse,
        throttle_time=0,
        results=tuple(
            make(
                module.AlterReplicaLogDirTopicResult,
                topic_name=topic,
                partitions=tuple(partitions),
            )
            for topic, partitions in by_topic.items()
        ),
    )
