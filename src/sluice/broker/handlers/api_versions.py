"""ApiVersions: the ranges in ``protocol.versions.SUPPORTED``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.broker.dispatcher import api_versions_response, handler
from sluice.protocol.codec import RequestHeader
from sluice.protocol.versions import ApiKey

if TYPE_CHECKING:
    from sluice.broker.app import Broker


@handler(ApiKey.API_VERSIONS)
async def handle_api_versions(broker: Broker, header: RequestHeader, request: Any) -> Any:
    return api_versions_response(header.api_version)
