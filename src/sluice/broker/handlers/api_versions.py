"""ApiVersions: the ranges of ``protocol.versions.advertised`` for the rebalance protocols
the broker enables (the internal, broker-to-broker APIs are served but not listed).

v3+ requests name the client software (KIP-511); it is kept on the connection for the
life of the connection and logged at debug level. A v3+ answer lists one feature,
``transaction.version``, finalized at 2, and ``group.version`` at 1 when the consumer
protocol (KIP-848) is enabled (see ``broker.dispatcher``).

As in Kafka, a name or version that is not letters, digits, ``-`` and ``.`` (starting and
ending with a letter or digit) is answered with INVALID_REQUEST and no ranges.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.dispatcher import api_versions_response
from sluice.broker.services import UsesConfig
from sluice.common.errors import ErrorCode
from sluice.protocol.messages import has_field

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext

log = logging.getLogger(__name__)

_CLIENT_SOFTWARE_PATTERN = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
"""Kafka's rule for ``client_software_name`` and ``client_software_version``."""


def _is_valid_software_label(text: str | None) -> bool:
    return text is not None and _CLIENT_SOFTWARE_PATTERN.fullmatch(text) is not None


class ApiVersionsServices(UsesConfig, Protocol):
    """What ApiVersions uses of the broker: the rebalance protocols it enables."""


async def handle_api_versions(
    services: ApiVersionsServices, context: RequestContext, request: Any
) -> Any:
    protocols = services.config.group_coordinator_rebalance_protocols
    if not has_field(type(request), "client_software_name"):
        return api_versions_response(context.header.api_version, protocols)
    name, version = request.client_software_name, request.client_software_version
    if not (_is_valid_software_label(name) and _is_valid_software_label(version)):
        log.debug("ApiVersions with an invalid client software %r %r", name, version)
        return api_versions_response(
            context.header.api_version,
            protocols,
            error_code=ErrorCode.invalid_request,
            with_ranges=False,
        )
    connection = context.connection
    connection.client_software_name = name
    connection.client_software_version = version
    log.debug(
        "connection from %s: client %s %s (client id %r)",
        connection.peer,
        name,
        version,
        context.header.client_id,
    )
    return api_versions_response(context.header.api_version, protocols)
