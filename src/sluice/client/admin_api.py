"""``sluice.Admin``: topics, configs, offsets, records and consumer groups, asyncio.

::

    async with sluice.Admin(bootstrap_servers="127.0.0.1:9092") as admin:
        await admin.create_topics([NewTopic("orders", partitions=3)])
        await admin.create_partitions({"orders": 6})
        print(await admin.describe_cluster())

It is :class:`sluice.client.admin.Admin` (every method is documented there) owning its
own :class:`~sluice.client.cluster.Cluster`: :meth:`Admin.start` connects to a bootstrap
broker, :meth:`Admin.close` closes every connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Unpack

from sluice.client import admin
from sluice.client.cluster import DEFAULT_BOOTSTRAP, Cluster
from sluice.client.groups import COORDINATOR_TIMEOUT_S_DEFAULT
from sluice.client.security import SecurityOptions, option_names, security_for

__all__ = ["Admin"]

REQUEST_TIMEOUT_MS_DEFAULT = 30_000
"""How long one request (or opening a connection) may take before it fails."""

DEFAULT_API_TIMEOUT_MS_DEFAULT = int(COORDINATOR_TIMEOUT_S_DEFAULT * 1000)
"""How long group requests keep retrying while the group's coordinator is unavailable,
loading or moving."""


class Admin(admin.Admin):
    """An asyncio admin client. Options are named after Kafka's (``client.id`` →
    ``client_id``); a bad value raises ``ValueError`` naming the option.

    Use it as ``async with Admin(...) as admin`` or call :meth:`start` and
    :meth:`close`. Errors the broker answers with are raised as the matching
    :class:`~sluice.common.errors.KafkaError` (``TopicAlreadyExists``,
    ``InvalidPartitions``, ...), naming the topic, partition or group.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = DEFAULT_BOOTSTRAP,
        *,
        client_id: str = "sluice-admin",
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        default_api_timeout_ms: int = DEFAULT_API_TIMEOUT_MS_DEFAULT,
        **security: Unpack[SecurityOptions],
    ) -> None:
        """Check the options (and parse ``bootstrap_servers``); connect in :meth:`start`.
        ``security`` holds ``security_protocol`` and its ``ssl_*``/``sasl_*`` options
        (:mod:`sluice.client.security`)."""
        tls, sasl = security_for("Admin", security, _OPTIONS)
        if request_timeout_ms <= 0:
            raise ValueError(
                f"admin option request_timeout_ms must be positive, not {request_timeout_ms}"
            )
        if default_api_timeout_ms <= 0:
            raise ValueError(
                "admin option default_api_timeout_ms must be positive, "
                f"not {default_api_timeout_ms}"
            )
        self.bootstrap_servers = bootstrap_servers
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.default_api_timeout_ms = default_api_timeout_ms
        request_timeout_s = request_timeout_ms / 1000
        super().__init__(
            Cluster(
                bootstrap_servers,
                client_id=client_id,
                connect_timeout_s=request_timeout_s,
                request_timeout_s=request_timeout_s,
                sasl=sasl,
                tls=tls,
            ),
            coordinator_timeout_s=default_api_timeout_ms / 1000,
        )
        self._started = False
        self._closed = False

    async def start(self) -> None:
        """Connect to the first bootstrap broker that answers and read the cluster's
        metadata.

        Raises :class:`~sluice.client.errors.BrokerUnreachableError` ("cannot reach
        broker at …") when none does (at once when they refuse connections, after a
        few quick retries: :meth:`Cluster.bootstrap`); the admin client is closed then.
        """
        assert not self._closed, "the Admin is closed"
        if self._started:
            return
        try:
            await self.cluster.bootstrap()
        except BaseException:
            await self.close()
            raise
        self._started = True

    async def close(self) -> None:
        """Close every connection. Idempotent; the client cannot be used afterwards."""
        if self._closed:
            return
        self._closed = True
        await self.cluster.close()

    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


_OPTIONS = option_names(Admin.__init__)
