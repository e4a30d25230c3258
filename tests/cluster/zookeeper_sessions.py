"""ZooKeeper sessions made to end on the server, for tests of what a broker or a store does
when its session expires; and a cluster's ZooKeeper nodes read (or held) by the test
itself, for the fault tests."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from kazoo.client import KazooClient

from sluice.cluster.zookeeper import ZooKeeperMetadataStore, split_connect

SESSION_TIMEOUT_S = 4.0
"""The session timeout of the stores these tests open: short, so an expiry comes soon."""
CONNECT_TIMEOUT_S = 10.0


def expire_session(connect: str, store: ZooKeeperMetadataStore) -> None:
    """Expire the store's session on the server, as a long pause or a partition would:
    a second client joins the same session and closes it."""
    session_id, password = store._client.client_id
    hosts, _ = split_connect(connect)
    intruder = KazooClient(hosts=hosts, client_id=(session_id, password))
    intruder.start(timeout=CONNECT_TIMEOUT_S)
    intruder.stop()
    intruder.close()


class ClusterNodes:
    """The nodes of a cluster's metadata (``<chroot>/sluice``, see
    ``sluice.cluster.zookeeper``), read by a ZooKeeper client of the test's own."""

    def __init__(self, client: KazooClient, root: str) -> None:
        self.client = client
        self.root = root

    def path(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    def controller(self) -> dict[str, Any] | None:
        """The controller node's document ({"node_id", "epoch"}), None when there is none."""
        stat = self.client.exists(self.path("controller"))
        if stat is None:
            return None
        document: dict[str, Any] = json.loads(self.client.get(self.path("controller"))[0])
        return document

    def broker_epoch(self, node_id: int) -> int | None:
        """The broker's registration epoch (its node's czxid), None if not registered."""
        stat = self.client.exists(self.path("brokers", str(node_id)))
        return None if stat is None else int(stat.czxid)

    def registration(self, node_id: int) -> dict[str, Any] | None:
        """The broker's registration document, None if not registered."""
        path = self.path("brokers", str(node_id))
        if self.client.exists(path) is None:
            return None
        document: dict[str, Any] = json.loads(self.client.get(path)[0])
        return document

    def partition(self, topic: str, index: int) -> tuple[dict[str, Any], int]:
        """A partition's state document and when it was written (its node's mzxid)."""
        data, stat = self.client.get(self.path("topics", topic, "partitions", str(index)))
        document: dict[str, Any] = json.loads(data)
        return document, int(stat.mzxid)

    def hold_controller(self) -> int:
        """Make the current controller's node this client's (the same document, one
        transaction that fails if another controller was elected meanwhile): it stays
        while the controller's broker is down, as for a controller that hangs, until this
        client closes. Returns the controller's node id."""
        path = self.path("controller")
        data, _ = self.client.get(path)
        document = json.loads(data)
        transaction = self.client.transaction()
        transaction.check(self.path("controller_epoch"), version=int(document["epoch"]))
        transaction.delete(path)
        transaction.create(path, data, ephemeral=True)
        results = transaction.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        assert not failures, f"the controller could not be held: {results}"
        return int(document["node_id"])


@contextlib.contextmanager
def cluster_nodes(connect: str) -> Iterator[ClusterNodes]:
    """A client of the test's own on a cluster's nodes (``connect`` with the cluster's
    chroot); closed at the end, which ends what it held."""
    hosts, chroot = split_connect(connect)
    client = KazooClient(hosts=hosts)
    client.start(timeout=CONNECT_TIMEOUT_S)
    try:
        yield ClusterNodes(client, f"{chroot}/sluice")
    finally:
        client.stop()
        client.close()
