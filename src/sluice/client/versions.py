"""Which API versions this client speaks.

The client's code is written once against the fields of each API, not per version; the
ranges below are the versions whose fields that code understands. On connect, the
broker's ApiVersions answer is intersected with this table and, for each API, the
highest version both sides support *and* kio has request and response schemas for is
chosen (the negotiation itself is the protocol's, in ``sluice.protocol.client``). The
ranges stay non-flexible for Produce and Fetch below topic ids (v13), which the client
does not implement.
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice.protocol import client as protocol_client
from sluice.protocol.versions import ApiKey

CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 8),
    ApiKey.FETCH: (4, 11),
    ApiKey.LIST_OFFSETS: (1, 5),
    ApiKey.METADATA: (1, 8),
    ApiKey.API_VERSIONS: (0, 2),
    ApiKey.CREATE_TOPICS: (2, 4),
    ApiKey.DELETE_TOPICS: (1, 3),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_CONFIGS: (1, 3),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 0),
    # The cluster, as an administrator sees it (describe_cluster falls back to Metadata
    # on brokers without DescribeCluster).
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 5),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    # Consumer groups, as an administrator sees them (sluice.client.groups).
    ApiKey.FIND_COORDINATOR: (0, 2),  # v4+ looks up a batch of keys
    ApiKey.OFFSET_COMMIT: (2, 7),
    # OffsetFetch v1 cannot ask for every partition (null topics); v7 waits for offsets
    # of open transactions (require_stable, KIP-447); v8 batches groups.
    ApiKey.OFFSET_FETCH: (2, 7),
    ApiKey.DESCRIBE_GROUPS: (0, 4),
    # Groups of the consumer group protocol (KIP-848); v1 adds each member's type.
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    ApiKey.LIST_GROUPS: (0, 5),  # v4+ answers with each group's state, v5 filters by type
    ApiKey.DELETE_GROUPS: (0, 1),
    ApiKey.OFFSET_DELETE: (0, 0),
    # Group membership, as a consumer takes part (sluice.client.membership).
    ApiKey.JOIN_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 3),
    ApiKey.HEARTBEAT: (0, 3),
    ApiKey.LEAVE_GROUP: (0, 3),
    # Consumer groups of the new protocol (KIP-848), as a consumer takes part
    # (sluice.client.consumer_membership; v1: the member makes its id, and regular
    # expressions). Its OffsetCommit and OffsetFetch go at v9, with the member epoch.
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    # Producers: ids, and transactions (sluice.client.transactions). InitProducerId v3+
    # carries the current id and epoch (KIP-360); EndTxn v5 bumps the epoch at every
    # commit and abort (KIP-890 part 2). Partitions are added explicitly (Produce stays
    # below v12, TxnOffsetCommit below v5).
    ApiKey.INIT_PRODUCER_ID: (1, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 5),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    # Transactions, as an administrator sees them (sluice.client.admin_transactions).
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.SASL_HANDSHAKE: (1, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    # Producers and hanging transactions (sluice.client.admin_producers): the abort
    # marker an administrator writes is WriteTxnMarkers, as Kafka's admin client sends it.
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
    # Share groups (KIP-932): membership, fetching and acknowledging
    # (sluice.client.share_consumer; v2 adds the RENEW acknowledgement), and as an
    # administrator sees them (sluice.client.admin_share_groups).
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
    ApiKey.SHARE_FETCH: (1, 2),
    ApiKey.SHARE_ACKNOWLEDGE: (1, 2),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),  # v1 adds each partition's lag
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
    # ACLs (sluice.client.admin_acls).
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
}
"""(lowest, highest) version of each API that the client code is written against."""


def negotiate(broker_ranges: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """For each API the client and the broker both know, the highest version both support."""
    return protocol_client.negotiate(CLIENT_VERSIONS, broker_ranges)
