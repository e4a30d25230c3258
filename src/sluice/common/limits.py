"""Every limit in one place: a name with its unit, a value, and why.

Limits are checked where data enters (a socket, a file, a request).
"""

FRAME_BYTES_MAX = 100 * 1024 * 1024
"""Largest request frame accepted (Kafka's socket.request.max.bytes). A larger length
prefix closes the connection before anything is buffered."""

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

QUEUED_RESPONSE_BYTES_PER_CONNECTION_MAX = 256 * 1024
"""Bytes of responses answered on one connection but not yet taken by its socket (the
transport's buffer); no further request of the connection is handled past this (it has
one request in flight at a time, as in Kafka). A client that sends requests without
reading the replies thus holds about this much of the broker's memory instead of growing
it until the process is killed. Record bytes served with sendfile are not counted: they
are never in memory."""

MALFORMED_REQUEST_WARNINGS_PER_INTERVAL = 10
"""Warnings logged about malformed requests, refused connections and internal errors per
MALFORMED_REQUEST_WARNING_INTERVAL_MS; the rest are counted and reported in one line,
so a peer sending garbage in a loop cannot fill the disk with the broker's log."""

MALFORMED_REQUEST_WARNING_INTERVAL_MS = 60_000

INACTIVE_SEGMENTS_OPEN_MAX = 1000
"""Rolled (inactive) segments that keep their ``.log`` open and indexes mapped at once,
three descriptors each; past it the least recently used one is closed and reopened on
its next read. Without a bound a broker holds every segment of every partition open and
runs out of descriptors (it could then not even restart). The broker lowers it to fit
INACTIVE_SEGMENTS_OPEN_FILES_PERCENT of its open-file limit."""

INACTIVE_SEGMENTS_OPEN_FILES_PERCENT = 25
"""Share of the process's open-file limit (RLIMIT_NOFILE) that open inactive segments
may take."""

PARTITIONS_OPEN_FILES_PERCENT = 60
"""Share of the open-file limit that partitions may take: each keeps its active
segment's ``.log`` open (one descriptor). With the inactive segments' share this leaves
15 % for connections and short-lived files. The broker refuses to create partitions past
this, as it does past ``max.broker.partitions``."""

SEGMENTS_PER_READ_MAX = 16
"""Segments one partition read (a fetch) may span. Each slice keeps its segment's file
open until it is sent, so a read over thousands of small segments would hold thousands
of descriptors at once (Kafka reads one segment per fetch); the consumer's next fetch
goes on where this one stopped."""

RECORDS_PER_BATCH_MAX = 1_000_000
"""Most records one produced batch may hold; more is refused with MESSAGE_TOO_LARGE (a
Java producer then splits the batch, librdkafka fails it). Each record costs the broker
a step of the produce-time check and every Sluice consumer one decoded object, and a
compressed batch of a few hundred KB can declare millions of tiny records. No real
client comes near: librdkafka's batch.num.messages stops at 1,000,000, and Java batches
are bounded by bytes (a full 1 MiB batch of the smallest records holds ~150,000)."""

PRODUCED_RECORDS_EXPANSION_MAX = 64
"""A compressed produced batch's records may take at most this many times the topic's
``max.message.bytes`` once decompressed (64 MiB with the default 1 MiB), and never more
than a Sluice consumer decompresses (``DECOMPRESSED_BYTES_MAX``, 128 MiB; the broker
setting ``sluice.produce.max.decompressed.bytes`` may lower that). Ordinary data
compresses 2-20 times; a batch that expands further is refused with MESSAGE_TOO_LARGE as
soon as the decompressed size passes the limit, instead of being stored for every
consumer to inflate (a 520 KB gzip batch can hold 512 MiB of zeros)."""

RECORDS_CHECKED_ON_EVENT_LOOP_MAX = 10_000
"""Produced batches declaring more records than this have their records checked in a
worker thread rather than on the event loop: walking 10,000 records takes a few
milliseconds, which every other client would otherwise wait for."""

DECOMPRESSED_BYTES_CHECKED_ON_EVENT_LOOP_MAX = 1024 * 1024
"""A compressed produced batch is decompressed and walked on the event loop up to this
many decompressed bytes (a few milliseconds of work); the rest of its check continues in
a worker thread."""

RECORD_CHECK_THREADS = 2
"""Worker threads for the produce-time checks of large batches. Separate from the
default executor so that many large batches cannot delay the flusher's fsyncs."""

RECORD_ERRORS_PER_PARTITION_MAX = 100
"""Records named one by one in a produce response's ``record_errors`` (each with its
index and reason); past this the total is only counted in ``error_message``. Kafka
lists every record, which for a batch of a million keyless records is a response of
tens of MB."""
