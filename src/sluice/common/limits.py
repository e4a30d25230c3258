"""Every limit in one place: a name with its unit, a value, and why.

Limits are checked where data enters (a socket, a file, a request); see STYLE.md #3.
"""

FRAME_BYTES_MAX = 100 * 1024 * 1024
"""Largest request frame accepted (Kafka's socket.request.max.bytes). A larger length
prefix closes the connection before anything is buffered."""

IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX = 100
"""Requests read from one connection and not yet answered; reading pauses past this so a
client that never reads its responses cannot grow the broker's memory."""

PARTITIONS_PER_TOPIC_MAX = 10_000
"""More partitions than this in one CreateTopics/CreatePartitions is refused as absurd."""

REPLICATION_FACTOR_MAX = 32

FETCH_WAIT_MS_MAX = 30_000
"""Upper bound on a fetch's long-poll wait, whatever the client asks for."""

PRODUCE_TIMEOUT_MS_MAX = 300_000

RECORD_BATCH_OVERHEAD_BYTES = 61
"""Size of a v2 record batch header; the smallest legal batch."""

PRODUCER_IDS_PER_BLOCK = 1000
"""Producer ids reserved durably at a time, so allocating one rarely writes metadata."""

PRODUCER_BATCHES_REMEMBERED = 5
"""Batch metadata kept per producer for duplicate detection (Kafka's
max.in.flight.requests.per.connection bound for idempotence)."""

DELETED_SEGMENT_CLOSE_DELAY_MS = 60_000
"""How long a deleted segment's file stays open so a sendfile in flight can finish
(Kafka's file.delete.delay.ms)."""

DESCRIBE_TOPIC_PARTITIONS_RESPONSE_PARTITIONS_MAX = 2000
"""Partitions in one DescribeTopicPartitions answer, whatever the client's
``response_partition_limit`` (Kafka's max.request.partition.size.limit); a cursor
points to the rest."""
