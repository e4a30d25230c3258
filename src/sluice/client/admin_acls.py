"""ACLs as an administrator sees them: CreateAcls, DescribeAcls and DeleteAcls (what
``sluice acls`` does, and Kafka's ``kafka-acls.sh``). ACLs live in the cluster's metadata,
so any broker answers; the request needs ALTER (create, delete) or DESCRIBE (describe) on
the cluster."""

from __future__ import annotations

from collections.abc import Sequence

from sluice.client.cluster import Cluster
from sluice.client.messages import Request
from sluice.common import errors
from sluice.common.authorizer import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from sluice.common.errors import ErrorCode
from sluice.protocol.versions import ApiKey


def _raise_for(code: int, message: str | None, what: str) -> None:
    if code != ErrorCode.none:
        raise errors.for_code(code)(f"{what}: {message}" if message else what)


def _filter_fields(acl_filter: AclBindingFilter) -> dict[str, object]:
    pattern, entry = acl_filter.pattern, acl_filter.entry
    return {
        "resource_type_filter": int(pattern.resource_type),
        "resource_name_filter": pattern.name,
        "pattern_type_filter": int(pattern.pattern_type),
        "principal_filter": entry.principal,
        "host_filter": entry.host,
        "operation": int(entry.operation),
        "permission_type": int(entry.permission),
    }


def _binding(resource: object, acl: object) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            ResourceType(int(resource.resource_type)),  # type: ignore[attr-defined]
            str(resource.resource_name),  # type: ignore[attr-defined]
            PatternType(int(resource.pattern_type)),  # type: ignore[attr-defined]
        ),
        AccessControlEntry(
            str(acl.principal),  # type: ignore[attr-defined]
            str(acl.host),  # type: ignore[attr-defined]
            Operation(int(acl.operation)),  # type: ignore[attr-defined]
            Permission(int(acl.permission_type)),  # type: ignore[attr-defined]
        ),
    )


async def create_acls(cluster: Cluster, bindings: Sequence[AclBinding]) -> None:
    """Create the bindings; raises the first refusal (e.g. InvalidRequest naming why,
    ClusterAuthorizationFailed, SecurityDisabled)."""
    connection = await cluster.any_connection()
    response = await connection.request(
        Request(
            ApiKey.CREATE_ACLS,
            {
                "creations": [
                    {
                        "resource_type": int(b.pattern.resource_type),
                        "resource_name": b.pattern.name,
                        "resource_pattern_type": int(b.pattern.pattern_type),
                        "principal": b.entry.principal,
                        "host": b.entry.host,
                        "operation": int(b.entry.operation),
                        "permission_type": int(b.entry.permission),
                    }
                    for b in bindings
                ]
            },
        )
    )
    for binding, result in zip(bindings, response.results, strict=True):
        _raise_for(result.error_code, result.error_message, f"creating {binding}")


async def describe_acls(cluster: Cluster, acl_filter: AclBindingFilter) -> list[AclBinding]:
    """The bindings matching the filter, sorted."""
    connection = await cluster.any_connection()
    response = await connection.request(Request(ApiKey.DESCRIBE_ACLS, _filter_fields(acl_filter)))
    _raise_for(response.error_code, response.error_message, "describing ACLs")
    return sorted(
        _binding(resource, acl) for resource in response.resources for acl in resource.acls
    )


async def delete_acls(cluster: Cluster, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
    """Delete every binding matching one of the filters; returns those deleted."""
    connection = await cluster.any_connection()
    response = await connection.request(
        Request(ApiKey.DELETE_ACLS, {"filters": [_filter_fields(f) for f in filters]})
    )
    deleted: set[AclBinding] = set()
    for result in response.filter_results:
        _raise_for(result.error_code, result.error_message, "deleting ACLs")
        for acl in result.matching_acls:
            _raise_for(acl.error_code, acl.error_message, "deleting an ACL")
            deleted.add(_binding(acl, acl))
    return sorted(deleted)
