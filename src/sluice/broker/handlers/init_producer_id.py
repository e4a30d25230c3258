"""InitProducerId without a transactional id: a fresh producer id, epoch 0.

Transactional ids (and epoch bumps for them) belong to the transaction coordinator,
which does not exist yet; such requests are answered with an error saying so.

v3+ requests may carry the producer's current id and epoch (KIP-360). Without a
transactional id Kafka ignores them and hands out a new id, and so does Sluice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.broker.dispatcher import handler
from sluice.common.errors import ErrorCode
from sluice.protocol.codec import RequestHeader
from sluice.protocol.messages import make, response_module
from sluice.protocol.versions import ApiKey

if TYPE_CHECKING:
    from sluice.broker.app import Broker


@handler(ApiKey.INIT_PRODUCER_ID)
async def handle_init_producer_id(broker: Broker, header: RequestHeader, request: Any) -> Any:
    module = response_module(header.api_key, header.api_version)
    if request.transactional_id is not None:
        return make(
            module.InitProducerIdResponse,
            throttle_time=0,
            error_code=ErrorCode.invalid_request,  # no transaction coordinator yet
            producer_id=-1,
            producer_epoch=-1,
        )
    return make(
        module.InitProducerIdResponse,
        throttle_time=0,
        error_code=0,
        producer_id=broker.producer_ids.next_producer_id(),
        producer_epoch=0,
    )
