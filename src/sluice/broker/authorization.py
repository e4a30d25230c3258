"""The broker's authorizer: the ACLs of the metadata image as an in-memory index, asked
by every handler through the rules of :mod:`sluice.broker.handlers.acl_rules`.

The index (:class:`sluice.common.authorizer.AclIndex`) is rebuilt only when the image's
ACLs change (the store publishes a new image after every CreateAcls and DeleteAcls, on
any broker); a check is a few dictionary lookups with no I/O. With
``authorizer.enabled=false`` (the default) everything is allowed, as in Kafka without an
authorizer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.common.authorizer import (
    SUPPORTED_OPERATIONS,
    AclIndex,
    Operation,
    ResourceType,
    parse_super_users,
)
from sluice.common.config import BrokerConfig
from sluice.common.errors import ErrorCode, for_code

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext
    from sluice.cluster.store import MetadataStore


DENIED: dict[ResourceType, ErrorCode] = {
    ResourceType.TOPIC: ErrorCode.topic_authorization_failed,
    ResourceType.GROUP: ErrorCode.group_authorization_failed,
    ResourceType.CLUSTER: ErrorCode.cluster_authorization_failed,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
}
"""The error code answering a refusal on each resource type."""

CLUSTER = "kafka-cluster"


@dataclass(frozen=True)
class Need:
    """One permission an API asks for: an operation on a resource type, and when."""

    operation: Operation
    resource_type: ResourceType
    when: str
    """Which resources, or which requests, need it."""

    @property
    def error_code(self) -> ErrorCode:
        return DENIED[self.resource_type]


class Authorizer:
    def __init__(self, config: BrokerConfig, store: MetadataStore) -> None:
        self.enabled = config.authorizer_enabled
        self._store = store
        self._super_users = parse_super_users(config.super_users)
        self._allow_if_no_acl = config.allow_everyone_if_no_acl_found
        self._source: frozenset[object] | None = None
        self._index = AclIndex([])

    def index(self) -> AclIndex:
        """The index of the image's ACLs, rebuilt when they changed (identity: an image
        keeps the same frozenset until the ACLs change)."""
        acls = self._store.image().acls
        if acls is not self._source:
            self._index = AclIndex(
                acls, super_users=self._super_users, allow_if_no_acl=self._allow_if_no_acl
            )
            self._source = acls
        return self._index

    def allows(self, context: RequestContext, need: Need, name: str = CLUSTER) -> bool:
        """May the request do what ``need`` says on the resource ``name`` (the cluster
        when not given)?"""
        if not self.enabled:
            return True
        connection = context.connection
        return self.index().authorize(
            connection.principal, connection.host, need.operation, need.resource_type, name
        )

    def require(self, context: RequestContext, need: Need, name: str = CLUSTER) -> None:
        """Raise the refusal's error (a KafkaError) unless the request may do ``need``."""
        if not self.allows(context, need, name):
            raise for_code(need.error_code)(f"{need.operation.name} on {name!r} is not allowed")

    def allowed(self, context: RequestContext, need: Need, names: Iterable[str]) -> set[str]:
        """The names among ``names`` the request may do ``need`` on."""
        return {n for n in names if self.allows(context, need, n)}

    def allows_any(self, context: RequestContext, need: Need) -> bool:
        """Kafka's ``authorizeByResourceType``: may the principal do the operation on some
        resource of the type (an ALLOW not overridden by a DENY covering it)?"""
        if not self.enabled:
            return True
        connection = context.connection
        return self.index().authorize_any(
            connection.principal, connection.host, need.operation, need.resource_type
        )

    def operations(self, context: RequestContext, resource_type: ResourceType, name: str) -> int:
        """The ``authorized_operations`` bit field of the resource for this request; for
        the cluster, none without DESCRIBE on it (Kafka's rule)."""
        if not self.enabled:
            return sum(1 << int(op) for op in SUPPORTED_OPERATIONS[resource_type])
        connection = context.connection
        if resource_type is ResourceType.CLUSTER and not self.index().authorize(
            connection.principal, connection.host, Operation.DESCRIBE, resource_type, CLUSTER
        ):
            return 0
        return self.index().authorized_operations(
            connection.principal, connection.host, resource_type, name
        )
