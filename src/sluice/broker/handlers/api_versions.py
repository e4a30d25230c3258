"""ApiVersions: the ranges in ``protocol.versions.SUPPORTED``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.broker.dispatcher import handler
from sluice.protocol.codec import RequestHeader
from sluice.protocol.messages import make, response_module
from sluice.protocol.versions import SUPPORTED, ApiKey

if TYPE_CHECKING:
    from sluice.broker.app import Broker


@handler(ApiKey.API_VERSIONS)
async def handle_api_versions(broker: Broker, header: RequestHeader, request: Any) -> Any:
    module = response_module(header.api_key, header.api_version)
    return make(
        module.ApiVersionsResponse,
        error_code=0,
        api_keys=tuple(
            make(
                module.ApiVersion,
                api_key=int(key),
                min_version=r.min_version,
                max_version=r.max_version,
            )
            for key, r in sorted(SUPPORTED.items())
        ),
        throttle_time=0,
    )
