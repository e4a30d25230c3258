"""InitProducerId without a transactional id: a fresh producer id, epoch 0.

Transactional ids (and epoch bumps for them) belong to the transaction coordinator,
which does not exist yet. Until it does, everything transactional a client sends first
(FindCoordinator for a transactional id, InitProducerId with one, a Produce of
transactional batches) is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED and
:data:`TRANSACTIONS_UNSUPPORTED_MESSAGE` where the response has room for a message.

Why that code: it is the one error every client treats as fatal at that step.
librdkafka's transaction manager retries any other FindCoordinator error forever (every
500 ms, so ``init_transactions()`` would hang until its timeout); the Java client,
kafka-python and aiokafka fail at once on it (kafka-python's and Java's FindCoordinator
handlers on any non-retriable error, aiokafka's sender explicitly), and kafkajs gives up
on any error that is not one of its few retriable coordinator errors. The clients then
raise it to the application as fatal instead of retrying COORDINATOR_NOT_AVAILABLE until
their timeouts.

v3+ requests may carry the producer's current id and epoch (KIP-360). Without a
transactional id Kafka ignores them and hands out a new id, and so does Sluice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.common.errors import ErrorCode
from sluice.protocol.messages import make, response_module

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext
    from sluice.broker.services import BrokerServices

TRANSACTIONS_UNSUPPORTED_ERROR = ErrorCode.transactional_id_authorization_failed
"""The answer to transactional requests until transactions exist (module docstring)."""

TRANSACTIONS_UNSUPPORTED_MESSAGE = (
    "transactions are not supported yet: this broker has no transaction coordinator; "
    "unset transactional.id (an idempotent producer still writes each record once)"
)


async def handle_init_producer_id(
    services: BrokerServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    if request.transactional_id is not None:
        return make(
            module.InitProducerIdResponse,
            throttle_time=0,
            error_code=TRANSACTIONS_UNSUPPORTED_ERROR,
            producer_id=-1,
            producer_epoch=-1,
        )
    return make(
        module.InitProducerIdResponse,
        throttle_time=0,
        error_code=0,
        producer_id=await services.producer_ids.next_producer_id(),
        producer_epoch=0,
    )
