"""The Schema Registry on one broker, put together: the coordinator runtime hosting the
registry's shard while this broker leads ``_schemas``-0 (its hosting follows
leadership as the other coordinators' does), the calls answered here or forwarded,
and the HTTP listener.

The shard's parsing and compatibility checks (``Task``) run in a worker thread
(``run_check``), never on the event loop: parsing a Protobuf schema runs protoc. The
threads are a pool of ``REGISTRY_CHECK_THREADS`` the registry owns (closed at shutdown),
apart from asyncio's default executor, which the HTTP sign-ins' password checks, the
metadata applier and ZooKeeper use: a burst of registrations cannot hold those up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

from sluice.broker.coordination.coordinator_hosting import CoordinatorHosting
from sluice.broker.coordination.coordinator_log import PartitionCoordinatorLog
from sluice.broker.network.peers import Peers
from sluice.broker.observability.http_auth import HttpAuthenticator
from sluice.broker.registry.access import SubjectAccess
from sluice.broker.registry.forwarding import RegistryCalls, RegistryShard
from sluice.broker.registry.http_listener import RegistryListener
from sluice.broker.replication.purgatory import Purgatory
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.cluster.image import MetadataImage
from sluice.common.clock import Clock
from sluice.common.config import BrokerConfig
from sluice.coordinator.api import Task
from sluice.coordinator.runtime import CoordinatorRuntime
from sluice.registry.api import Call

REGISTRY_WRITE_TIMEOUT_MS: Final = 10_000
"""How long a write to the registry's topic may wait for its in-sync replicas."""
REGISTRY_CHECK_THREADS: Final = 2
"""Threads parsing schemas and checking compatibility for the shard; more parses wait
for one (the shard bounds how many may wait). Protobuf's parses take a process-wide
lock anyway, so more threads would mostly wait on it."""
REGISTRY_PARTITIONS: Final = 1
"""Confluent's ``_schemas`` has one partition: one writer orders every id."""


@dataclass(frozen=True)
class RegistryCore:
    """The registry's own logic (:mod:`sluice.registry`) that the broker runs: a new
    shard for the broker's settings, the checks a shard's ``Task`` asks for (run in a
    worker thread), and what a call touches, for authorization."""

    new_shard: Callable[[BrokerConfig], Callable[[], RegistryShard]]
    run_check: Callable[[object], object]
    subject_of: Callable[[Call], str | None]
    is_write: Callable[[Call], bool]


class SchemaRegistry:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        replicas: ReplicaManager,
        purgatory: Purgatory,
        clock: Clock,
        image: Callable[[], MetadataImage],
        peers: Peers,
        ensure_topic: Callable[[], Awaitable[object]],
        core: RegistryCore,
        authenticator: HttpAuthenticator | None,
        access: SubjectAccess | None,
    ) -> None:
        topic = config.schema_registry_topic
        executor = self._executor = ThreadPoolExecutor(
            max_workers=REGISTRY_CHECK_THREADS, thread_name_prefix="sluice-registry-check"
        )

        async def run_task(_partition: int, task: Task) -> object:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(executor, core.run_check, task.work)

        self.runtime: CoordinatorRuntime[RegistryShard] = CoordinatorRuntime(
            PartitionCoordinatorLog(
                topic, replicas, purgatory, clock, REGISTRY_PARTITIONS, REGISTRY_WRITE_TIMEOUT_MS
            ),
            core.new_shard(config),
            clock,
            run_task,
        )
        self.hosting = CoordinatorHosting(topic, self.runtime, replicas)
        self.peers = peers
        """The registry's own connections to the other brokers (forwarded calls)."""
        self.calls = RegistryCalls(config.node_id, topic, image, self.runtime, peers, ensure_topic)
        self.listener = RegistryListener(
            config.schema_registry_listeners,
            self.calls.answer,
            schema_max_bytes=config.schema_registry_schema_max_bytes,
            subject_of=core.subject_of,
            is_write=core.is_write,
            authenticator=authenticator,
            access=access,
        )

    async def close(self) -> None:
        """Close its connections to the other brokers and stop the check threads;
        checks not started are dropped, running ones finish (the runtime, stopped
        first, no longer waits for them)."""
        await self.peers.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def urls(self) -> list[str]:
        """Where the REST API listens (once started)."""
        return self.listener.urls
