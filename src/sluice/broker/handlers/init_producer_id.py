"""InitProducerId v0–5: a producer id and epoch.

Without a transactional id: a fresh producer id, epoch 0 (an idempotent producer). v3+
requests may carry the producer's current id and epoch (KIP-360); without a
transactional id Kafka ignores them and hands out a new id, and so does Sluice.

With a transactional id: the transaction coordinator's answer (see
:mod:`sluice.broker.handlers.transactions`): the id's producer id with its epoch
bumped, fencing earlier instances, after aborting what they left open.

With the authorizer on: a transactional id needs WRITE on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer IDEMPOTENT_WRITE on the
cluster or WRITE on some topic (CLUSTER_AUTHORIZATION_FAILED), Kafka 3's rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import IDEMPOTENT_WRITE, TOPIC_WRITE, TRANSACTIONAL_WRITE
from sluice.broker.handlers.transactions import init_transactional_producer
from sluice.broker.services import UsesAuthorizer, UsesProducerIds, UsesTransactions
from sluice.common.errors import ErrorCode
from sluice.protocol.messages import make, response_module

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext


class InitProducerIdServices(UsesAuthorizer, UsesProducerIds, UsesTransactions, Protocol):
    """What the init producer id handlers use of the broker."""


def _refusal(
    services: InitProducerIdServices, context: RequestContext, transactional_id: str | None
) -> ErrorCode | None:
    authorizer = services.authorizer
    if transactional_id is not None:
        if authorizer.allows(context, TRANSACTIONAL_WRITE, transactional_id):
            return None
        return TRANSACTIONAL_WRITE.error_code
    if authorizer.allows(context, IDEMPOTENT_WRITE) or authorizer.allows_any(context, TOPIC_WRITE):
        return None
    return IDEMPOTENT_WRITE.error_code


async def handle_init_producer_id(
    services: InitProducerIdServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    refusal = _refusal(services, context, request.transactional_id)
    if refusal is not None:
        return make(
            module.InitProducerIdResponse,
            throttle_time=0,
            error_code=refusal,
            producer_id=-1,
            producer_epoch=-1,
        )
    if request.transactional_id is not None:
        answer = await init_transactional_producer(services, context, request)
        return make(
            module.InitProducerIdResponse,
            throttle_time=0,
            error_code=answer.error,
            producer_id=answer.producer_id,
            producer_epoch=answer.producer_epoch,
        )
    return make(
        module.InitProducerIdResponse,
        throttle_time=0,
        error_code=0,
        producer_id=await services.producer_ids.next_producer_id(),
        producer_epoch=0,
    )
