"""CreateAcls, DescribeAcls and DeleteAcls v1-3: the ACLs in the metadata store.

As in Kafka: without the authorizer (``authorizer.enabled=false``) each answers
SECURITY_DISABLED; with it, DescribeAcls needs DESCRIBE and the other two ALTER on the
cluster (CLUSTER_AUTHORIZATION_FAILED). A creation Kafka would refuse (ANY or MATCH
pattern, ANY operation or permission, an empty name, a principal without ``type:``, an
operation the resource type does not have, a cluster not named ``kafka-cluster``) is
answered INVALID_REQUEST with the reason, and the others in the request are still made.
A filter with an UNKNOWN field is INVALID_REQUEST. DeleteAcls answers, for each filter,
the bindings it removed. ACLs reach every broker through the metadata store's image.
"""

from __future__ import annotations

from collections import defaultdict
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sluice.broker.handlers.acl_rules import CLUSTER_ALTER, CLUSTER_DESCRIBE
from sluice.broker.services import UsesAuthorizer, UsesStore
from sluice.common.authorizer import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclValidationError,
    EntryFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    validate_new_binding,
)
from sluice.common.errors import ErrorCode
from sluice.protocol.messages import make, response_module

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext


class AclsServices(UsesAuthorizer, UsesStore, Protocol):
    """What the acls handlers use of the broker."""


_E = TypeVar("_E", bound=IntEnum)

SECURITY_DISABLED_MESSAGE = "No Authorizer is configured on the broker (authorizer.enabled)"


def _enum(kind: type[_E], value: int) -> _E:
    """The enum member of a wire value; UNKNOWN (0) for a value Kafka does not define."""
    try:
        return kind(int(value))
    except ValueError:
        return kind(0)


def _filter(item: Any) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(
            _enum(ResourceType, item.resource_type_filter),
            item.resource_name_filter,
            _enum(PatternType, item.pattern_type_filter),
        ),
        EntryFilter(
            item.principal_filter,
            item.host_filter,
            _enum(Operation, item.operation),
            _enum(Permission, item.permission_type),
        ),
    )


async def handle_create_acls(services: AclsServices, context: RequestContext, request: Any) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    results: list[tuple[ErrorCode, str | None]] = []
    if not services.authorizer.enabled:
        results = [(ErrorCode.security_disabled, SECURITY_DISABLED_MESSAGE)] * len(
            request.creations
        )
    elif not services.authorizer.allows(context, CLUSTER_ALTER):
        results = [(ErrorCode.cluster_authorization_failed, None)] * len(request.creations)
    else:
        valid: list[AclBinding] = []
        for creation in request.creations:
            binding = AclBinding(
                ResourcePattern(
                    _enum(ResourceType, creation.resource_type),
                    str(creation.resource_name),
                    _enum(PatternType, creation.resource_pattern_type),
                ),
                AccessControlEntry(
                    str(creation.principal),
                    str(creation.host),
                    _enum(Operation, creation.operation),
                    _enum(Permission, creation.permission_type),
                ),
            )
            try:
                validate_new_binding(binding)
            except AclValidationError as e:
                results.append((ErrorCode.invalid_request, str(e)))
                continue
            valid.append(binding)
            results.append((ErrorCode.none, None))
        if valid:
            await services.store.create_acls(valid)
    return make(
        module.CreateAclsResponse,
        throttle_time=0,
        results=tuple(
            make(module.AclCreationResult, error_code=code, error_message=message)
            for code, message in results
        ),
    )


async def handle_describe_acls(
    services: AclsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)

    def answer(code: ErrorCode, message: str | None, found: list[AclBinding]) -> Any:
        by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = defaultdict(list)
        for binding in found:
            by_pattern[binding.pattern].append(binding.entry)
        return make(
            module.DescribeAclsResponse,
            throttle_time=0,
            error_code=code,
            error_message=message,
            resources=tuple(
                make(
                    module.DescribeAclsResource,
                    resource_type=int(pattern.resource_type),
                    resource_name=pattern.name,
                    pattern_type=int(pattern.pattern_type),
                    acls=tuple(
                        make(
                            module.AclDescription,
                            principal=entry.principal,
                            host=entry.host,
                            operation=int(entry.operation),
                            permission_type=int(entry.permission),
                        )
                        for entry in entries
                    ),
                )
                for pattern, entries in by_pattern.items()
            ),
        )

    if not services.authorizer.enabled:
        return answer(ErrorCode.security_disabled, SECURITY_DISABLED_MESSAGE, [])
    if not services.authorizer.allows(context, CLUSTER_DESCRIBE):
        return answer(ErrorCode.cluster_authorization_failed, None, [])
    acl_filter = _filter(request)
    if acl_filter.is_unknown():
        return answer(ErrorCode.invalid_request, "the filter has an UNKNOWN field", [])
    return answer(ErrorCode.none, None, services.authorizer.index().matching(acl_filter))


async def handle_delete_acls(services: AclsServices, context: RequestContext, request: Any) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    outcomes: list[tuple[ErrorCode, str | None, list[AclBinding]]] = []
    if not services.authorizer.enabled:
        outcomes = [
            (ErrorCode.security_disabled, SECURITY_DISABLED_MESSAGE, []) for _ in request.filters
        ]
    elif not services.authorizer.allows(context, CLUSTER_ALTER):
        outcomes = [(ErrorCode.cluster_authorization_failed, None, []) for _ in request.filters]
    else:
        index = services.authorizer.index()
        removed: set[AclBinding] = set()
        for item in request.filters:
            acl_filter = _filter(item)
            if acl_filter.is_unknown():
                outcomes.append((ErrorCode.invalid_request, "the filter has an UNKNOWN field", []))
                continue
            matching = index.matching(acl_filter)
            removed.update(matching)
            outcomes.append((ErrorCode.none, None, matching))
        if removed:
            await services.store.delete_acls(sorted(removed))
    return make(
        module.DeleteAclsResponse,
        throttle_time=0,
        filter_results=tuple(
            make(
                module.DeleteAclsFilterResult,
                error_code=code,
                error_message=message,
                matching_acls=tuple(
                    make(
                        module.DeleteAclsMatchingAcl,
                        error_code=ErrorCode.none,
                        error_message=None,
                        resource_type=int(b.pattern.resource_type),
                        resource_name=b.pattern.name,
                        pattern_type=int(b.pattern.pattern_type),
                        principal=b.entry.principal,
                        host=b.entry.host,
                        operation=int(b.entry.operation),
                        permission_type=int(b.entry.permission),
                    )
                    for b in found
                ),
            )
            for code, message, found in outcomes
        ),
    )
