"""ZooKeeper sessions made to end on the server, for tests of what a broker or a store does
when its session expires."""

from __future__ import annotations

from kazoo.client import KazooClient

from sluice.cluster.zookeeper import ZooKeeperMetadataStore, split_connect

SESSION_TIMEOUT_S = 4.0
"""The session timeout of the stores these tests open: short, so an expiry comes soon."""


def expire_session(connect: str, store: ZooKeeperMetadataStore) -> None:
    """Expire the store's session on the server, as a long pause or a partition would:
    a second client joins the same session and closes it."""
    session_id, password = store._client.client_id
    hosts, _ = split_connect(connect)
    intruder = KazooClient(hosts=hosts, client_id=(session_id, password))
    intruder.start(timeout=10)
    intruder.stop()
    intruder.close()
