"""SluiceSchemaRegistryCall v0 (a Sluice API, see :mod:`sluice.protocol.private`): a
Schema Registry call another broker received over HTTP, authenticated and authorized,
and forwards here because this broker leads the registry's partition.

Between brokers only (it skips the registry's own sign-in and authorization): with the
authorizer on it needs CLUSTER_ACTION on the cluster (the brokers' principal is a super
user), like Kafka's inter-broker requests; with it off, a connection on the
inter-broker listener, signed in as the brokers' inter-broker user when that listener
uses SASL. Anyone else is answered 40301. A body
that is not the documented object closes the connection, as a malformed Kafka request
does. A broker that does not host the registry answers 50003 (50002 while it loads the
registry's topic) and says so (``"elsewhere"``), so the sender looks for its leader
again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import CLUSTER_ACTION
from sluice.broker.registry.answers import error_answer
from sluice.broker.services import UsesAuthorizer, UsesConfig, UsesSchemaRegistry
from sluice.common.config import SASL_PROTOCOLS
from sluice.common.errors import ProtocolError
from sluice.registry.api import Call
from sluice.registry.errors import ErrorCode

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext


class SchemaRegistryServices(UsesAuthorizer, UsesConfig, UsesSchemaRegistry, Protocol):
    """What the forwarded registry call uses of the broker."""


async def handle_schema_registry_call(
    services: SchemaRegistryServices, context: RequestContext, body: dict[str, Any]
) -> dict[str, Any]:
    document, principal = body.get("call"), body.get("principal")
    if not isinstance(document, dict) or not (principal is None or isinstance(principal, str)):
        raise ProtocolError("SluiceSchemaRegistryCall: needs a 'call' object and a 'principal'")
    try:
        call = Call.from_json(document)
    except ValueError as e:
        raise ProtocolError(f"SluiceSchemaRegistryCall: {e}") from None
    refused = _refusal(services, context)
    if refused is not None:
        return error_answer(ErrorCode.USER_NOT_AUTHORIZED, refused).to_json()
    return await services.schema_registry.answer_here(call, principal)


def _refusal(services: SchemaRegistryServices, context: RequestContext) -> str | None:
    """Why the connection may not forward registry calls (None: it may). The call skips
    the registry's own sign-in and authorization, so only a broker may send it."""
    connection = context.connection
    if services.authorizer.enabled:
        if services.authorizer.allows(context, CLUSTER_ACTION):
            return None
        return f"{connection.principal} may not forward registry calls"
    config = services.config
    inter_broker = config.inter_broker_listener()
    if connection.listener_name != inter_broker:
        return (
            f"registry calls are forwarded between brokers only, on the inter-broker "
            f"listener {inter_broker}, not on {connection.listener_name}"
        )
    if config.security_protocol(inter_broker) in SASL_PROTOCOLS:
        username = config.inter_broker_sasl_username
        if username is None or connection.principal != f"User:{username}":
            return f"{connection.principal} is not the brokers' inter-broker user"
    return None
