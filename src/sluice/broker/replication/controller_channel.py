"""Where a partition leader's AlterPartition goes: the controller the metadata image
names, over the inter-broker connection (:class:`~sluice.broker.network.peers.Peers`),
or by a plain call when this broker is the controller. No controller in the image is
answered NOT_CONTROLLER, as a broker that is not the controller would answer."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from sluice.broker.network.peers import Peers
from sluice.broker.replication.alter_partition_messages import (
    parse_response,
    request_message,
)
from sluice.cluster.alter_partition import AlterPartitionRequest, AlterPartitionResponse, refused
from sluice.cluster.image import MetadataImage
from sluice.cluster.model import PartitionState, TopicId
from sluice.common.errors import ErrorCode
from sluice.protocol.messages import request_module
from sluice.protocol.versions import ApiKey

ALTER_PARTITION_TIMEOUT_S = 5.0
"""How long a leader waits for the controller's answer before asking again."""


class LocalController(Protocol):
    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse: ...


class ControllerChannel:
    def __init__(
        self,
        node_id: int,
        image: Callable[[], MetadataImage],
        peers: Callable[[], Peers | None],
        local: Callable[[], LocalController | None],
    ) -> None:
        """``peers`` and ``local``: read at each request (they exist once the broker's
        services have started)."""
        self._node_id = node_id
        self._image = image
        self._peers = peers
        self._local = local

    async def alter_partition(
        self,
        request: AlterPartitionRequest,
        proposed_from: Mapping[tuple[TopicId, int], PartitionState],
    ) -> AlterPartitionResponse:
        """The controller's answer. Raises PeerUnavailable or ProtocolError when the
        controller cannot be reached or answers nonsense."""
        controller = self._image().controller
        local = self._local()
        peers = self._peers()
        if controller is None or local is None or peers is None:
            return refused(request, ErrorCode.not_controller)
        if controller.node_id == self._node_id:
            return await local.alter_partition(request)
        message = await peers.request(
            controller.node_id,
            ApiKey.ALTER_PARTITION,
            lambda version: request_message(
                request_module(ApiKey.ALTER_PARTITION, version), request, version
            ),
            ALTER_PARTITION_TIMEOUT_S,
        )
        return parse_response(message, proposed_from)
