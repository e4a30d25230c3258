"""AlterPartition v2-3 (KIP-497): a partition leader asks the controller to change its
ISR. Served by every broker, answered by the controller
(:meth:`sluice.cluster.controller.Controller.alter_partition`): a broker that is not the
controller answers NOT_CONTROLLER, and the leader asks the one its image names next.

An inter-broker API, as in Kafka: never advertised in ApiVersions, and with the
authorizer on it needs CLUSTER_ACTION on the cluster (the brokers' principal is a super
user); others are answered CLUSTER_AUTHORIZATION_FAILED for the whole request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import CLUSTER_ACTION
from sluice.broker.replication.alter_partition_messages import parse_request, response_message
from sluice.broker.services import UsesAuthorizer, UsesController
from sluice.cluster.alter_partition import refused
from sluice.protocol.messages import response_module

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext


class AlterPartitionServices(UsesAuthorizer, UsesController, Protocol):
    """What the alter partition handlers use of the broker."""


async def handle_alter_partition(
    services: AlterPartitionServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    parsed = parse_request(request)
    if not services.authorizer.allows(context, CLUSTER_ACTION):
        return response_message(module, refused(parsed, CLUSTER_ACTION.error_code))
    return response_message(module, await services.controller.alter_partition(parsed))
