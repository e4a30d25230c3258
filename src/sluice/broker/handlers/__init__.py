"""API handlers, one module per API family. Importing this package registers them all
with the dispatcher's table."""

from sluice.broker.handlers import (  # noqa: F401
    admin_cluster,
    admin_configs,
    admin_partitions,
    admin_producers,
    admin_records,
    admin_topics,
    api_versions,
    describe_topic_partitions,
    fetch,
    groups,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
)
