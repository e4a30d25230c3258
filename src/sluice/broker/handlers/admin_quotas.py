"""DescribeClientQuotas and AlterClientQuotas (KIP-546), v0-1: the client quotas of
users and client ids (:mod:`sluice.broker.quotas`).

An entity is a user, a client id, or both; a null entity name is ``<default>``. Describe
filters by components as Kafka does: EXACT (0) a given name (null: the default), DEFAULT
(1) the default entity, SPECIFIED (2) any name but the default; with ``strict`` only
entities naming exactly the filter's entity types match. Alter applies each entry's set
and remove operations to the entity's stored values; ``ip`` entities (connection-rate
quotas) and quota keys Sluice does not enforce are refused with INVALID_REQUEST.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import CLUSTER_ALTER_CONFIGS, CLUSTER_DESCRIBE_CONFIGS
from sluice.broker.services import UsesAuthorizer, UsesQuotas
from sluice.common.errors import ErrorCode
from sluice.common.quotas import (
    CLIENT_ID,
    DEFAULT,
    ENTITY_TYPES,
    USER,
    QuotaEntity,
    parse_quota_value,
)
from sluice.protocol.messages import make, response_module

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext
    from sluice.broker.quotas import ClientQuotas


class AdminQuotasServices(UsesAuthorizer, UsesQuotas, Protocol):
    """What the admin quotas handlers use of the broker."""


MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2


class InvalidQuotaRequest(ValueError):
    pass


class _NotAuthorized(Exception):
    pass


def _entity_of(components: Any) -> QuotaEntity:
    names: dict[str, str] = {}
    for component in components:
        entity_type = str(component.entity_type)
        if entity_type not in ENTITY_TYPES:
            raise InvalidQuotaRequest(f"unsupported quota entity type {entity_type!r}")
        if entity_type in names:
            raise InvalidQuotaRequest(f"entity type {entity_type!r} given twice")
        name = component.entity_name
        names[entity_type] = DEFAULT if name is None else str(name)
    if not names:
        raise InvalidQuotaRequest("a quota entity names a user, a client id, or both")
    return QuotaEntity(names.get(USER), names.get(CLIENT_ID))


def _entity_parts(entity: QuotaEntity) -> list[tuple[str, str | None]]:
    parts: list[tuple[str, str | None]] = []
    for entity_type, name in ((USER, entity.user), (CLIENT_ID, entity.client_id)):
        if name is not None:
            parts.append((entity_type, None if name == DEFAULT else name))
    return parts


def _matches(entity: QuotaEntity, components: Any, strict: bool) -> bool:
    named = dict(_entity_parts(entity))
    for component in components:
        entity_type = str(component.entity_type)
        if entity_type not in named:
            return False
        name = named[entity_type]
        match_type = int(component.match_type)
        if match_type == MATCH_EXACT and name != component.match:
            return False
        if match_type == MATCH_DEFAULT and name is not None:
            return False
        if match_type == MATCH_SPECIFIED and name is None:
            return False
    return not strict or len(named) == len(components)


def _quotas(services: AdminQuotasServices) -> ClientQuotas:
    assert services.quotas is not None, "the broker enforces quotas"
    return services.quotas


async def handle_describe_client_quotas(
    services: AdminQuotasServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    quotas = _quotas(services)
    if not services.authorizer.allows(context, CLUSTER_DESCRIBE_CONFIGS):
        return make(
            module.DescribeClientQuotasResponse,
            throttle_time=0,
            error_code=CLUSTER_DESCRIBE_CONFIGS.error_code,
            error_message=None,
            entries=None,
        )
    for component in request.components:
        if str(component.entity_type) not in ENTITY_TYPES or int(component.match_type) not in (
            MATCH_EXACT,
            MATCH_DEFAULT,
            MATCH_SPECIFIED,
        ):
            return make(
                module.DescribeClientQuotasResponse,
                throttle_time=0,
                error_code=ErrorCode.invalid_request,
                error_message=f"unsupported filter component {component.entity_type!r}",
                entries=None,
            )
    entries = tuple(
        make(
            module.EntryData,
            entity=tuple(
                make(module.EntityData, entity_type=entity_type, entity_name=name)
                for entity_type, name in _entity_parts(entity)
            ),
            values=tuple(
                make(module.ValueData, key=key, value=value)
                for key, value in sorted(values.items())
            ),
        )
        for entity, values in sorted(quotas.quotas.items(), key=lambda item: item[0].key)
        if _matches(entity, request.components, bool(request.strict))
    )
    return make(
        module.DescribeClientQuotasResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        entries=entries,
    )


async def handle_alter_client_quotas(
    services: AdminQuotasServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    quotas = _quotas(services)
    allowed = services.authorizer.allows(context, CLUSTER_ALTER_CONFIGS)
    answers = []
    for entry in request.entries:
        error, message = ErrorCode.none, None
        try:
            if not allowed:
                raise _NotAuthorized
            entity = _entity_of(entry.entity)
            values = dict(quotas.quotas.get(entity, {}))
            for op in entry.ops:
                if op.remove:
                    values.pop(str(op.key), None)
                else:
                    values[str(op.key)] = parse_quota_value(str(op.key), float(op.value))
            if not request.validate_only:
                await quotas.store(entity, values)
        except _NotAuthorized:
            error = ErrorCode(CLUSTER_ALTER_CONFIGS.error_code)
        except (InvalidQuotaRequest, ValueError) as e:
            error, message = ErrorCode.invalid_request, str(e)
        answers.append(
            make(
                module.EntryData,
                error_code=error,
                error_message=message,
                entity=tuple(
                    make(module.EntityData, entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity
                ),
            )
        )
    return make(module.AlterClientQuotasResponse, throttle_time=0, entries=tuple(answers))
