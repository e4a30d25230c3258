"""The handler of every API the broker serves, by API key: the one place a handler is
tied to its API. The dispatcher is given this table and checks at start that every
API in ``versions.SUPPORTED`` has a handler."""

from __future__ import annotations

from collections.abc import Mapping

from sluice.broker.dispatcher import Handler, PrivateHandler
from sluice.broker.handlers import (
    acls,
    admin_cluster,
    admin_configs,
    admin_log_dirs,
    admin_partitions,
    admin_producers,
    admin_quotas,
    admin_records,
    admin_topics,
    admin_users,
    alter_partition,
    api_versions,
    consumer_groups,
    delays,
    describe_quorum,
    describe_topic_partitions,
    fetch,
    groups,
    init_producer_id,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    produce,
    sasl,
    schema_registry,
    share_fetch,
    share_groups,
    share_offsets,
    share_state,
    transactions,
)
from sluice.protocol import private
from sluice.protocol.versions import ApiKey

HANDLERS: Mapping[ApiKey, Handler] = {
    ApiKey.PRODUCE: produce.handle_produce,
    ApiKey.FETCH: fetch.handle_fetch,
    ApiKey.LIST_OFFSETS: list_offsets.handle_list_offsets,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch.handle_offset_for_leader_epoch,
    ApiKey.METADATA: metadata.handle_metadata,
    ApiKey.API_VERSIONS: api_versions.handle_api_versions,
    ApiKey.SASL_HANDSHAKE: sasl.handle_sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: sasl.handle_sasl_authenticate,
    ApiKey.INIT_PRODUCER_ID: init_producer_id.handle_init_producer_id,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: describe_topic_partitions.handle_describe_topic_partitions,
    # groups
    ApiKey.FIND_COORDINATOR: groups.handle_find_coordinator,
    ApiKey.JOIN_GROUP: groups.handle_join_group,
    ApiKey.SYNC_GROUP: groups.handle_sync_group,
    ApiKey.HEARTBEAT: groups.handle_heartbeat,
    ApiKey.LEAVE_GROUP: groups.handle_leave_group,
    ApiKey.OFFSET_COMMIT: groups.handle_offset_commit,
    ApiKey.OFFSET_FETCH: groups.handle_offset_fetch,
    ApiKey.DESCRIBE_GROUPS: groups.handle_describe_groups,
    ApiKey.LIST_GROUPS: groups.handle_list_groups,
    ApiKey.DELETE_GROUPS: groups.handle_delete_groups,
    ApiKey.OFFSET_DELETE: groups.handle_offset_delete,
    # share groups
    ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_groups.handle_consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_groups.handle_consumer_group_describe,
    ApiKey.SHARE_GROUP_HEARTBEAT: share_groups.handle_share_group_heartbeat,
    ApiKey.SHARE_GROUP_DESCRIBE: share_groups.handle_share_group_describe,
    # transactions
    ApiKey.ADD_PARTITIONS_TO_TXN: transactions.handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: transactions.handle_add_offsets_to_txn,
    ApiKey.END_TXN: transactions.handle_end_txn,
    ApiKey.TXN_OFFSET_COMMIT: transactions.handle_txn_offset_commit,
    ApiKey.WRITE_TXN_MARKERS: transactions.handle_write_txn_markers,
    ApiKey.DESCRIBE_TRANSACTIONS: transactions.handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: transactions.handle_list_transactions,
    # share-partition state, between brokers (internal: not advertised)
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: share_state.handle_initialize_share_group_state,
    ApiKey.READ_SHARE_GROUP_STATE: share_state.handle_read_share_group_state,
    ApiKey.WRITE_SHARE_GROUP_STATE: share_state.handle_write_share_group_state,
    ApiKey.DELETE_SHARE_GROUP_STATE: share_state.handle_delete_share_group_state,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: share_state.handle_read_share_group_state_summary,
    # ISR changes, from partition leaders to the controller (internal: not advertised)
    ApiKey.ALTER_PARTITION: alter_partition.handle_alter_partition,
    # administration
    ApiKey.CREATE_TOPICS: admin_topics.handle_create_topics,
    ApiKey.DELETE_TOPICS: admin_topics.handle_delete_topics,
    ApiKey.CREATE_PARTITIONS: admin_topics.handle_create_partitions,
    ApiKey.DELETE_RECORDS: admin_records.handle_delete_records,
    ApiKey.DESCRIBE_ACLS: acls.handle_describe_acls,
    ApiKey.CREATE_ACLS: acls.handle_create_acls,
    ApiKey.DELETE_ACLS: acls.handle_delete_acls,
    ApiKey.DESCRIBE_CONFIGS: admin_configs.handle_describe_configs,
    ApiKey.ALTER_CONFIGS: admin_configs.handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: admin_configs.handle_incremental_alter_configs,
    ApiKey.DESCRIBE_CLUSTER: admin_cluster.handle_describe_cluster,
    ApiKey.DESCRIBE_LOG_DIRS: admin_cluster.handle_describe_log_dirs,
    ApiKey.ALTER_REPLICA_LOG_DIRS: admin_log_dirs.handle_alter_replica_log_dirs,
    ApiKey.DESCRIBE_QUORUM: describe_quorum.handle_describe_quorum,
    ApiKey.LIST_CONFIG_RESOURCES: admin_cluster.handle_list_config_resources,
    ApiKey.ELECT_LEADERS: admin_partitions.handle_elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: admin_partitions.handle_alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: admin_partitions.handle_list_partition_reassignments,
    ApiKey.DESCRIBE_PRODUCERS: admin_producers.handle_describe_producers,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: admin_quotas.handle_describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: admin_quotas.handle_alter_client_quotas,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: admin_users.handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: admin_users.handle_alter_user_scram_credentials,
    # share groups
    ApiKey.SHARE_FETCH: share_fetch.handle_share_fetch,
    ApiKey.SHARE_ACKNOWLEDGE: share_fetch.handle_share_acknowledge,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: share_offsets.handle_describe_share_group_offsets,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: share_offsets.handle_alter_share_group_offsets,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: share_offsets.handle_delete_share_group_offsets,
}


PRIVATE_HANDLERS: Mapping[int, PrivateHandler] = {
    private.DESCRIBE_DELAYS: delays.handle_describe_delays,
    private.SCHEMA_REGISTRY_CALL: schema_registry.handle_schema_registry_call,
}
"""Sluice's own APIs (:mod:`sluice.protocol.private`), never advertised."""
