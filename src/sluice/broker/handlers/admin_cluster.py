"""DescribeCluster v0-2, DescribeLogDirs v1-4, ListConfigResources v0-1: the cluster as
admin tools see it.

- **DescribeCluster** answers like a Kafka broker's listener: the live brokers, this
  broker as the controller, the cluster id. Endpoint type 2 (controllers, KIP-919) is
  refused with MISMATCHED_ENDPOINT_TYPE (INVALID_REQUEST at v0) as a broker refuses it;
  unknown types with UNSUPPORTED_ENDPOINT_TYPE. A client asking for the cluster's
  authorized operations gets those its principal may do (none without DESCRIBE on the
  cluster; every one when the authorizer is off), as Kafka answers. No broker is ever
  fenced.
- **DescribeLogDirs** describes the one data directory: each hosted partition's size
  (the bytes of its segment files), its offset lag (high watermark minus log end offset,
  never negative: 0 on a leader) and, from v4, the volume's total and usable bytes. A null
  topic list means every hosted partition; partitions this broker does not host are left
  out, as Kafka does. A directory that cannot be read answers KAFKA_STORAGE_ERROR.
- **ListConfigResources** (KIP-1142; v0 was ListClientMetricsResources) lists config
  resources by type: topics (2), brokers (4), groups with stored configs (32) and
  client-metrics subscriptions (16, which Sluice has none of: it serves no telemetry).
  No types means all of those; asking for any other type (broker loggers, 8, which
  Sluice cannot describe) answers UNSUPPORTED_VERSION, Kafka's answer for a type it does
  not list.

With the authorizer on, DescribeLogDirs needs DESCRIBE and ListConfigResources
DESCRIBE_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED, no results).
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.authorization import CLUSTER
from sluice.broker.handlers.acl_rules import CLUSTER_DESCRIBE, CLUSTER_DESCRIBE_CONFIGS
from sluice.broker.services import UsesAuthorizer, UsesConfig, UsesReplicas, UsesStore, UsesTopics
from sluice.common.acls import AUTHORIZED_OPERATIONS_OMITTED
from sluice.common.authorizer import ResourceType as AclResourceType
from sluice.common.errors import ErrorCode
from sluice.protocol.messages import has_field, make, response_module

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext


class AdminClusterServices(
    UsesAuthorizer, UsesConfig, UsesReplicas, UsesStore, UsesTopics, Protocol
):
    """What the admin cluster handlers use of the broker."""


log = logging.getLogger(__name__)


class EndpointType(IntEnum):
    """DescribeCluster v1+ ``endpoint_type`` (KIP-919)."""

    BROKER = 1
    CONTROLLER = 2


class ConfigResourceType(IntEnum):
    """Kafka's ``ConfigResource.Type`` ids."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


LISTED_CONFIG_RESOURCE_TYPES = frozenset(
    {
        ConfigResourceType.TOPIC,
        ConfigResourceType.BROKER,
        ConfigResourceType.CLIENT_METRICS,
        ConfigResourceType.GROUP,
    }
)
"""The types ListConfigResources v1 lists; v0 lists client-metrics resources only."""


# ── DescribeCluster ────────────────────────────────────────────────────────────────────


async def handle_describe_cluster(
    services: AdminClusterServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    endpoint_type = int(getattr(request, "endpoint_type", EndpointType.BROKER))

    def refused(v1_code: ErrorCode, message: str) -> Any:
        code = ErrorCode.invalid_request if context.header.api_version == 0 else v1_code
        return make(
            module.DescribeClusterResponse,
            throttle_time=0,
            error_code=code,
            error_message=message,
            endpoint_type=endpoint_type,
            cluster_id="",
            brokers=(),
        )

    if endpoint_type not in tuple(EndpointType):
        return refused(
            ErrorCode.unsupported_endpoint_type, f"Unsupported endpoint type {endpoint_type}"
        )
    if endpoint_type != EndpointType.BROKER:
        return refused(
            ErrorCode.mismatched_endpoint_type,
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint "
            "of type CONTROLLER",
        )
    image = services.topics.image
    live = image.live_brokers()
    controller = image.controller
    controller_id = (
        -1
        if controller is None or controller.node_id not in image.brokers
        else (controller.node_id)
    )
    return make(
        module.DescribeClusterResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=EndpointType.BROKER,
        cluster_id=image.cluster_id,
        controller_id=controller_id,
        brokers=tuple(
            make(
                module.DescribeClusterBroker,
                broker_id=b.node_id,
                host=b.address(context.connection.listener_name)[0],
                port=b.address(context.connection.listener_name)[1],
                rack=b.rack,
                is_fenced=False,
            )
            for b in live
        ),
        cluster_authorized_operations=(
            services.authorizer.operations(context, AclResourceType.CLUSTER, CLUSTER)
            if request.include_cluster_authorized_operations
            else AUTHORIZED_OPERATIONS_OMITTED
        ),
    )


# ── DescribeLogDirs ────────────────────────────────────────────────────────────────────


def _volume_bytes(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding ``path``, as Java's
    ``FileStore.getTotalSpace``/``getUsableSpace`` count them."""
    stats = os.statvfs(path)
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize


async def handle_describe_log_dirs(
    services: AdminClusterServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    if not services.authorizer.allows(context, CLUSTER_DESCRIBE):
        return make(
            module.DescribeLogDirsResponse,
            throttle_time=0,
            error_code=CLUSTER_DESCRIBE.error_code,
            results=(),
        )
    wanted: set[tuple[str, int]] | None = None
    if request.topics is not None:
        wanted = {
            (requested.topic, int(index))
            for requested in request.topics
            for index in requested.partitions
        }
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for partition in sorted(services.replicas, key=lambda p: p.topic_partition):
        topic, index = partition.topic_partition
        if wanted is not None and (topic, index) not in wanted:
            continue
        by_topic[topic].append(
            make(
                module.DescribeLogDirsPartition,
                partition_index=index,
                partition_size=partition.log.size_bytes(),
                offset_lag=max(partition.high_watermark - partition.log.log_end_offset, 0),
                is_future_key=False,
            )
        )
    log_dir = str(services.config.data_dir.resolve())
    try:
        total_bytes, usable_bytes = _volume_bytes(log_dir)
    except OSError as e:
        log.warning("cannot describe log directory %s: %s", log_dir, e)
        result = make(
            module.DescribeLogDirsResult,
            error_code=ErrorCode.kafka_storage_error,
            log_dir=log_dir,
            topics=(),
        )
    else:
        result = make(
            module.DescribeLogDirsResult,
            error_code=ErrorCode.none,
            log_dir=log_dir,
            topics=tuple(
                make(module.DescribeLogDirsTopic, name=name, partitions=tuple(partitions))
                for name, partitions in sorted(by_topic.items())
            ),
            total_bytes=total_bytes,
            usable_bytes=usable_bytes,
            is_cordoned=False,
        )
    return make(
        module.DescribeLogDirsResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        results=(result,),
    )


# ── ListConfigResources ────────────────────────────────────────────────────────────────


def _group_config_names(services: AdminClusterServices) -> list[str]:
    """Groups that have stored config overrides (Kafka lists those, whether or not the
    group exists), from the metadata image."""
    return sorted(services.store.image().group_configs)


async def handle_list_config_resources(
    services: AdminClusterServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)

    def answer(error_code: ErrorCode, listed: list[tuple[str, ConfigResourceType]]) -> Any:
        return make(
            module.ListConfigResourcesResponse,
            throttle_time=0,
            error_code=error_code,
            config_resources=tuple(
                make(module.ConfigResource, resource_name=name, resource_type=int(kind))
                for name, kind in listed
            ),
        )

    if not services.authorizer.allows(context, CLUSTER_DESCRIBE_CONFIGS):
        return answer(CLUSTER_DESCRIBE_CONFIGS.error_code, [])
    if not has_field(type(request), "resource_types"):
        # v0 is ListClientMetricsResources: client-metrics subscriptions only, and Sluice
        # has none (it serves no client telemetry).
        return answer(ErrorCode.none, [])
    requested = {int(kind) for kind in request.resource_types}
    if not requested:
        requested = {int(kind) for kind in LISTED_CONFIG_RESOURCE_TYPES}
    if not requested <= LISTED_CONFIG_RESOURCE_TYPES:
        return answer(ErrorCode.unsupported_version, [])
    listed: list[tuple[str, ConfigResourceType]] = []
    if ConfigResourceType.GROUP in requested:
        listed += [(name, ConfigResourceType.GROUP) for name in _group_config_names(services)]
    if ConfigResourceType.BROKER in requested:
        listed += [
            (str(b.node_id), ConfigResourceType.BROKER)
            for b in services.topics.image.live_brokers()
        ]
    if ConfigResourceType.TOPIC in requested:
        listed += [(name, ConfigResourceType.TOPIC) for name in sorted(services.topics.all())]
    return answer(ErrorCode.none, listed)
